"""``trust-root --sigstore DIR`` (docs/trust-root.md, docs/attestations.md): what a Sigstore
verifier pins, written beside the trust root: ``trusted_root.json`` naming the log by its C2SP
key hash, ``keys.json`` and ``keys/<kid>.pem`` holding the receipt keys the pinned roots
certify (each certificate checked first; a revoked key left out whole), and their refresh
against a pinned trust root after a rotation (``--trust-root PINNED``). Run in process against
a stub service; tests/test_attestation_verifiers.py runs sigstore's verifier on what the real
command writes for a real service."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

from execution_proof.cli.main import main
from execution_proof.receipts import sigstore
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import KeyCertificate, Root, certify, key_kid, revoke, time_ms
from execution_proof.receipts.signing import load_key_ring
from execution_proof.transparency import note
from execution_proof.transparency.signer import SeedSigner
from tests.test_trust_root import stub

ORIGIN = "sigstore.example/log"
LOG = note.Signer(ORIGIN, hashlib.sha256(b"trust-root --sigstore tests: the log").digest())
SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
NOT_BEFORE, NOT_AFTER = time_ms("2026-01-01T00:00:00.000Z"), time_ms("2027-01-01T00:00:00.000Z")


def seeded(label: str) -> SeedSigner:
    return SeedSigner(hashlib.sha256(f"trust-root --sigstore tests: {label}".encode()).digest())


ROOT, STRANGER = seeded("root"), seeded("stranger")
KEYS = {label: seeded(label) for label in ("first", "second", "third")}


def kid(label: str) -> str:
    return key_kid(KEYS[label].public_key())


def certificate(label: str, root: SeedSigner = ROOT) -> KeyCertificate:
    return certify(root, KEYS[label].public_key(), NOT_BEFORE, NOT_AFTER)


def listed(certificate: KeyCertificate | None, label: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kid": kid(label),
        "alg": "Ed25519",
        "public_key_base64url": b64url_encode(KEYS[label].public_key()),
    }
    if certificate is not None:
        entry["certificate"] = certificate.to_json()
    return entry


def public_keys(keys: list[dict[str, Any]], revocations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A ``GET /v1/public-key`` body with ``ROOT`` as the one root."""
    return {
        "keys": keys,
        "active_kid": keys[0]["kid"],
        "roots": [Root.of(ROOT.public_key()).to_json()],
        "revocations": revocations or [],
    }


def der_b64(public: bytes) -> str:
    return base64.b64encode(SPKI_PREFIX + public).decode()


def log_answer() -> bytes:
    return orjson.dumps({"origin": ORIGIN, "log_vkey": LOG.verifier.encode(), "policy": ""})


@pytest.fixture
def service() -> Iterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    """A stub service (its routes changeable while it runs) listing the keys first and second,
    both certified by ROOT, with a log."""
    keys = [listed(certificate(label), label) for label in ("first", "second")]
    routes = {"/v1/public-key": (200, orjson.dumps(public_keys(keys))), "/v1/log": (200, log_answer())}
    with stub(routes) as base:
        yield base, routes


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``trust-root ARGS`` in process: exit status, stdout, stderr (argparse's refusals end in
    ``SystemExit``, as they do on the command line)."""
    try:
        code = main(["trust-root", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- the files, pure


def test_the_trusted_root_names_the_log_by_its_c2sp_key_hash() -> None:
    public = LOG.verifier.public_key
    key_hash = hashlib.sha256(ORIGIN.encode() + b"\n\x01" + public).digest()
    assert key_hash[:4] == LOG.verifier.key_id, "the checkpoint signature's key hint is its first four bytes"
    key_id = {"keyId": base64.b64encode(key_hash).decode()}
    assert sigstore.trusted_root(ORIGIN, public) == {
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [
            {
                "baseUrl": "https://" + ORIGIN,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": der_b64(public), "keyDetails": "PKIX_ED25519"},
                "logId": key_id,
                "checkpointKeyId": key_id,
            }
        ],
        "certificateAuthorities": [],
        "ctlogs": [],
        "timestampAuthorities": [],
    }
    assert sigstore.trusted_root(None, None)["tlogs"] == []


def test_only_keys_a_pinned_root_certifies_and_never_revoked_are_kept() -> None:
    forged = KeyCertificate(**{**_fields(certificate("third", STRANGER)), "root_kid": Root.of(ROOT.public_key()).kid})
    body = public_keys(
        [
            listed(certificate("first"), "first"),
            listed(certificate("second", STRANGER), "second"),
            listed(forged, "third"),
        ]
    )
    roots = {Root.of(ROOT.public_key()).kid: ROOT.public_key()}
    found = sigstore.certified_keys(load_key_ring(body), roots)
    assert dict(found.keys) == {kid("first"): KEYS["first"].public_key()}
    stranger = Root.of(STRANGER.public_key()).kid
    root_kid = Root.of(ROOT.public_key()).kid
    assert [(gone.kid, gone.why) for gone in found.left_out] == [
        (kid("second"), f"certified by {stranger}, which is not pinned"),
        (kid("third"), f"its certificate's signature is not {root_kid}'s"),
    ]
    assert found.keys_json() == {kid("first"): der_b64(KEYS["first"].public_key())}
    # A revocation by the certifying root takes the key out whole; one by a stranger counts for nothing.
    later = time_ms("2026-06-01T00:00:00.000Z")
    revoked = [
        revoke(ROOT, kid("first"), later, "lost").to_json(),
        revoke(STRANGER, kid("first"), later, "x").to_json(),
    ]
    found = sigstore.certified_keys(load_key_ring(body), roots, revoked[1:])
    assert list(found.keys) == [kid("first")]
    found = sigstore.certified_keys(load_key_ring(body), roots, revoked)
    assert found.keys == {} and found.left_out[0] == sigstore.LeftOut(
        kid("first"), f"revoked by {root_kid} from 2026-06-01T00:00:00.000Z"
    )
    without = public_keys([listed(None, "first")])
    assert sigstore.certified_keys(load_key_ring(without), roots).left_out == (
        sigstore.LeftOut(kid("first"), "no key certificate"),
    )


def _fields(certificate: KeyCertificate) -> dict[str, Any]:
    return {name: getattr(certificate, name) for name in KeyCertificate.__slots__}


# ---------------------------------------------------------------- the verb


def test_the_verb_writes_the_trust_root_and_the_sigstore_files(
    service: tuple[str, dict[str, tuple[int, bytes]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = service
    out, folder = tmp_path / "trust-root.json", tmp_path / "sigstore"
    code, stdout, stderr = run(capsys, "--base-url", base, "--out", str(out), "--sigstore", str(folder), "--json")
    assert code == 0, stderr
    first, second = KEYS["first"].public_key(), KEYS["second"].public_key()
    files = tree(folder)
    assert sorted(files) == ["keys.json", f"keys/{kid('first')}.pem", f"keys/{kid('second')}.pem", "trusted_root.json"]
    assert orjson.loads(files["trusted_root.json"]) == sigstore.trusted_root(ORIGIN, LOG.verifier.public_key)
    assert orjson.loads(files["keys.json"]) == {kid("first"): der_b64(first), kid("second"): der_b64(second)}
    assert files["keys.json"].endswith(b"}\n") and b'\n  "key-' in files["keys.json"], "indented, a newline after"
    for label, public in (("first", first), ("second", second)):
        pem = files[f"keys/{kid(label)}.pem"]
        loaded = load_pem_public_key(pem)
        assert isinstance(loaded, Ed25519PublicKey)
        assert loaded.public_bytes(Encoding.Raw, PublicFormat.Raw) == public
    for path in [*folder.rglob("*"), out]:
        if path.is_file():
            assert os.stat(path).st_mode & 0o777 == 0o644, path
    assert not list(folder.rglob(".*")), "no temporary file left"
    document = orjson.loads(stdout)
    assert document["ok"] is True and document["saved"] == str(out) and document["fingerprints"]
    assert document["sigstore"] == {
        "dir": str(folder),
        "files": sorted(files),
        "keys": [kid("first"), kid("second")],
        "left_out": [],
        "log": True,
    }
    assert f"wrote {folder}: trusted_root.json, keys.json, keys/ ({kid('first')}, {kid('second')})" in stderr


def test_a_service_without_a_log_gets_a_trusted_root_without_tlogs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = public_keys([listed(certificate("first"), "first")])
    with stub({"/v1/public-key": (200, orjson.dumps(keys))}) as base:
        code, _, stderr = run(
            capsys, "--base-url", base, "--out", str(tmp_path / "t.json"), "--sigstore", str(tmp_path)
        )
    assert code == 0, stderr
    assert orjson.loads((tmp_path / "trusted_root.json").read_bytes()) == sigstore.trusted_root(None, None)
    assert "note: trusted_root.json names no transparency log (no tlogs)" in stderr


def test_a_refresh_takes_the_rotated_keys_against_the_pinned_roots(
    service: tuple[str, dict[str, tuple[int, bytes]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, routes = service
    pinned, folder = tmp_path / "trust-root.json", tmp_path / "sigstore"
    assert run(capsys, "--base-url", base, "--out", str(pinned), "--sigstore", str(folder))[0] == 0
    pinned_bytes = pinned.read_bytes()
    (folder / "keys" / "README").write_text("mine\n")
    # The rotation: a third key certified; the first revoked by the root (its receipts
    # before revoked_after still count for this service's own verify, not for keys.json).
    revoked = revoke(ROOT, kid("first"), time_ms("2026-06-01T00:00:00.000Z"), "retired early").to_json()
    rotated = [listed(certificate(label), label) for label in ("first", "second", "third")]
    routes["/v1/public-key"] = (200, orjson.dumps(public_keys(rotated, [revoked])))
    routes["/v1/log"] = (404, b'{"error": {"code": "not_found", "message": "no log"}}')  # not asked
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)
    code, stdout, stderr = run(capsys, "--sigstore", str(folder), "--trust-root", str(pinned))
    assert code == 0, stderr
    assert stdout == "", "no new trust root: no fingerprint to compare"
    assert pinned.read_bytes() == pinned_bytes
    assert orjson.loads((folder / "keys.json").read_bytes()) == {
        kid(label): der_b64(KEYS[label].public_key()) for label in ("second", "third")
    }
    assert sorted(p.name for p in (folder / "keys").iterdir()) == sorted(
        ["README", f"{kid('second')}.pem", f"{kid('third')}.pem"]
    ), "the revoked key's PEM is removed, a file not named after a key is left"
    assert orjson.loads((folder / "trusted_root.json").read_bytes()) == sigstore.trusted_root(
        ORIGIN, LOG.verifier.public_key
    ), "the log the pinned file pins"
    root_kid = Root.of(ROOT.public_key()).kid
    assert f"note: {kid('first')} is not in keys.json: revoked by {root_kid} from 2026-06-01T00:00:00.000Z" in stderr
    assert f"note: keys.json changed: added {kid('third')}; removed {kid('first')}" in stderr


def test_a_refresh_against_roots_that_certify_no_key_writes_nothing(
    service: tuple[str, dict[str, tuple[int, bytes]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = service
    pinned, folder = tmp_path / "trust-root.json", tmp_path / "sigstore"
    assert run(capsys, "--base-url", base, "--out", str(pinned), "--sigstore", str(folder))[0] == 0
    document = orjson.loads(pinned.read_bytes())
    stranger = Root.of(STRANGER.public_key())
    document["receipt_roots"] = [{"kid": stranger.kid, "public_key_base64url": b64url_encode(stranger.public_key)}]
    other = tmp_path / "another-root.json"
    other.write_bytes(orjson.dumps(document))
    before = tree(folder)
    code, stdout, stderr = run(capsys, "--sigstore", str(folder), "--trust-root", str(other), "--json")
    assert code == 2
    assert "no receipt key the pinned roots certify" in stderr and "which is not pinned" in stderr
    assert stderr.rstrip().endswith("; nothing written"), stderr
    assert orjson.loads(stdout)["error"]["kind"] == "InvalidInput"
    assert tree(folder) == before


def test_a_version_1_trust_root_has_no_roots_to_refresh_against(
    service: tuple[str, dict[str, tuple[int, bytes]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = service
    pinned = tmp_path / "v1.json"
    pinned.write_bytes(
        orjson.dumps(
            {
                "version": 1,
                "service_url": base,
                "receipt_keys": [
                    {"kid": kid("first"), "public_key_base64url": b64url_encode(KEYS["first"].public_key())}
                ],
                "log": None,
                "tsa_roots_pem": [],
            }
        )
    )
    code, _, stderr = run(capsys, "--sigstore", str(tmp_path / "sigstore"), "--trust-root", str(pinned))
    assert code == 2 and "a version 1 trust root pins receipt keys, not receipt roots" in stderr
    assert not (tmp_path / "sigstore").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "one of the arguments --out --trust-root is required", id="none"),
        pytest.param(["--trust-root", "p.json"], "--trust-root refreshes the --sigstore files", id="no-sigstore"),
        pytest.param(
            ["--trust-root", "p.json", "--sigstore", "d", "--out", "o.json"],
            "--out: not allowed with argument --trust-root",
            id="out",
        ),
        pytest.param(
            ["--trust-root", "p.json", "--sigstore", "d", "--tsa-roots", "r.pem"], "leave out --tsa-roots", id="tsa"
        ),
    ],
)
def test_usage_errors_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run(capsys, "--base-url", "http://127.0.0.1:9", *args, "--json")
    assert code == 2 and message in stderr
    assert orjson.loads(stdout)["error"]["kind"] == "UsageError"
    assert list(tmp_path.iterdir()) == []


def test_a_sigstore_folder_whose_parent_is_missing_exits_2_before_asking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, folder = tmp_path / "t.json", tmp_path / "no" / "such"
    code, _, stderr = run(capsys, "--base-url", "http://127.0.0.1:9", "--out", str(out), "--sigstore", str(folder))
    assert code == 2 and f"the folder {tmp_path / 'no'} does not exist" in stderr
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- docs/attestations.md

DOC = (Path(__file__).resolve().parent.parent / "docs" / "attestations.md").read_text()


def test_the_documented_trusted_root_and_keys_are_what_the_command_writes() -> None:
    """The example files of docs/attestations.md: the trusted root is ``trusted_root`` of the
    verifier key the text names, byte for byte as written; the keys.json entry is a key under
    its own kid."""
    vkey = re.search(r"with verifier key\s+`([^`]+)`", DOC).group(1)  # type: ignore[union-attr]
    verifier = note.Verifier.parse(vkey)
    start = DOC.index("```json\n", DOC.index(vkey)) + len("```json\n")
    block = DOC[start : DOC.index("```\n", start)]
    written = sigstore.TrustMaterial(sigstore.trusted_root(verifier.name, verifier.public_key), _no_keys()).files()
    assert textwrap.dedent(block).encode() == written["trusted_root.json"]
    start = DOC.index("```json\n", DOC.index("`trust/keys.json`")) + len("```json\n")
    keys = orjson.loads(DOC[start : DOC.index("```\n", start)])
    ((kid, der),) = keys.items()
    raw = base64.b64decode(der)
    assert raw[:12] == SPKI_PREFIX and kid == key_kid(raw[12:])
    assert f"--key trust/keys/{kid}.pem" in DOC


def _no_keys() -> sigstore.CertifiedKeys:
    return sigstore.CertifiedKeys({}, ())
