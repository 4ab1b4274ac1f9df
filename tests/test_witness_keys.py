"""A key line with a one-character typo (transparency/note.py): the error says what is wrong with
it (not base64, the wrong length, the wrong type byte, a key id that is not its checksum), never
that only Ed25519 keys are supported; and the file it came from is named: ``witness serve
--key-file``, ``verify --log-policy`` (client/log_checks.py), a trust root's policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from nacl.signing import SigningKey

from execution_proof.client.log_checks import LogInputError, load_policy
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import Root
from execution_proof.receipts.trust_root import TrustRoot, TrustRootError, build_trust_root, encode_trust_root
from execution_proof.transparency.cosignature import Cosigner, CosignerKey
from execution_proof.transparency.note import NoteError, Signer, Verifier
from tests.conftest import REPO
from tests.servers import clean_env

WITNESS = Cosigner.generate("witness.example")
LOG = Signer.generate("log.example/v1/log")


def _swap(text: str, at: int) -> str:
    """``text`` with the character at ``at`` replaced by another base64 character."""
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]


def typos(vkey: str) -> dict[str, tuple[str, str]]:
    """One-character typos of ``<name>+<id>+<key>``, each with what the error must say."""
    name, kid, key = vkey.split("+", 2)  # base64 has + too
    return {
        "type byte": (f"{name}+{kid}+{_swap(key, 0)}", "its key part starts with type 0x"),
        "key": (f"{name}+{kid}+{_swap(key, 20)}", f"its key id {kid} does not match its name and key"),
        "name": (f"{name[:-1]}+{kid}+{key}", f"its key id {kid} does not match its name and key"),
        "id": (f"{name}+{kid[:-1]}g+{key}", "is not 8 lower-case hex digits"),
        "a character missing": (f"{name}+{kid}+{key[:-1]}", "its key part is not base64"),
        "a character extra": (f"{name}+{kid}+{key}AAAA", "its key part is 36 bytes, not 33"),
    }


@pytest.mark.parametrize("typo", list(typos(WITNESS.key.encode())))
def test_a_typo_in_a_witness_key_says_what_is_wrong(typo: str) -> None:
    line, expected = typos(WITNESS.key.encode())[typo]
    with pytest.raises(NoteError) as refused:
        CosignerKey.parse(line)
    assert str(refused.value).startswith("not a valid witness key: "), refused.value
    assert expected in str(refused.value), refused.value
    assert "are supported" not in str(refused.value)


def test_a_log_key_given_as_a_witness_key_is_named_for_what_it_is() -> None:
    with pytest.raises(NoteError, match=r"type 0x01, not 0x04 \(that is a log's note key, not a witness key\)"):
        CosignerKey.parse(LOG.verifier.encode())
    with pytest.raises(NoteError, match=r"type 0x04, not 0x01 \(that is a witness's cosignature key"):
        Verifier.parse(WITNESS.key.encode())


def test_a_typo_in_a_policy_file_names_the_file_and_the_line(tmp_path: Path) -> None:
    line, _ = typos(WITNESS.key.encode())["type byte"]
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {LOG.verifier.encode()}\nwitness w {line}\nquorum w\n")
    with pytest.raises(LogInputError) as refused:
        load_policy(str(policy))
    assert f"--log-policy {policy}: line 2: not a valid witness key: its key part starts with type" in str(
        refused.value
    )


def test_a_typo_in_a_trust_roots_policy_names_the_file(tmp_path: Path) -> None:
    public = b64url_encode(bytes(SigningKey.generate().verify_key))
    document = build_trust_root(
        "https://proofs.example",
        {
            "keys": [{"kid": "k1", "public_key_base64url": public}],
            "active_kid": "k1",
            "roots": [Root.of(bytes(SigningKey.generate().verify_key)).to_json()],
        },
        {
            "origin": LOG.name,
            "log_vkey": LOG.verifier.encode(),
            "policy": f"log {LOG.verifier.encode()}\nwitness w {WITNESS.key.encode()}\nquorum w\n",
        },
        None,
    )
    line, _ = typos(WITNESS.key.encode())["key"]
    assert document["log"] is not None
    document["log"]["policy"] = document["log"]["policy"].replace(WITNESS.key.encode(), line)
    path = tmp_path / "trust-root.json"
    path.write_bytes(encode_trust_root(document))
    with pytest.raises(TrustRootError) as refused:
        TrustRoot.load(path)
    message = str(refused.value)
    assert f"the trust root {path} is malformed: log.policy: line 2: not a valid witness key" in message
    assert "does not match its name and key" in message


def test_witness_serve_names_its_key_file_and_what_is_wrong_with_the_key(tmp_path: Path) -> None:
    name, kid, key = WITNESS.encode().split("+", 4)[2:]
    key_file = tmp_path / "witness.key"
    key_file.write_text(f"PRIVATE+KEY+{name}+{kid}+{_swap(key, 0)}\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    done = subprocess.run(
        [sys.executable, "-m", "execution_proof", "witness", "serve", "--key-file", str(key_file),
         "--state", str(tmp_path / "state"), "--log", f"{LOG.name}={LOG.verifier.encode()}", "--port", "0"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: --key-file {key_file}: not a valid witness signer key: its key part starts with type" in (
        done.stderr
    )
    assert "listening" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    empty = tmp_path / "empty.key"
    empty.write_text("")
    empty.chmod(0o600)
    none = subprocess.run(
        [sys.executable, "-m", "execution_proof", "witness", "serve", "--key-file", str(empty),
         "--state", str(tmp_path / "state"), "--log", f"{LOG.name}={LOG.verifier.encode()}", "--port", "0"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert none.returncode == 2 and f"--key-file {empty}: a witness signer key is PRIVATE+KEY+" in none.stderr


def test_a_typo_in_a_signer_keys_seed_is_caught_by_its_id() -> None:
    for secret, parse, what in (
        (WITNESS.encode(), Cosigner.parse, "witness signer key"),
        (LOG.encode(), Signer.parse, "signer key"),
    ):
        start = len("+".join(secret.split("+", 4)[:4])) + 1  # the base64 part (which may hold + too)
        with pytest.raises(NoteError, match=f"^not a valid {what}: its key id [0-9a-f]{{8}} does not match"):
            parse(_swap(secret, start + 20))


def test_the_trust_root_verb_names_the_published_policys_bad_line(tmp_path: Path) -> None:
    """What ``trust-root`` prints when the service publishes a policy with a typo: the request
    and the line (--json: one document, kind InvalidInput), and no file."""
    from tests.servers import serving
    from tests.test_cli_json import Service, failure

    line, _ = typos(WITNESS.key.encode())["type byte"]
    fake = Service()
    fake.replies["/v1/log"] = (
        200,
        orjson.dumps(
            {
                "origin": LOG.name,
                "log_vkey": LOG.verifier.encode(),
                "policy": f"log {LOG.verifier.encode()}\nwitness w {line}\nquorum w\n",
            }
        ),
    )
    public = b64url_encode(bytes(SigningKey.generate().verify_key))
    fake.replies["/v1/public-key"] = (
        200,
        orjson.dumps({"keys": [{"kid": "k1", "public_key_base64url": public}], "active_kid": "k1"}),
    )
    out = tmp_path / "root.json"
    with serving(fake.server) as url:
        done = subprocess.run(
            [sys.executable, "-m", "execution_proof", "trust-root", "--base-url", url, "--out", str(out), "--json"],
            cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    document = failure(done, "InvalidInput", 2)
    assert "GET /v1/log: its policy: line 2: not a valid witness key" in document["error"]["message"]
    assert not out.exists()
