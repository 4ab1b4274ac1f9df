"""``execution-proof attest`` and ``verify`` of what it saves, against a real service with a
transparency log (the ``logged`` stack: its own redis-server and log store; a worker started
here once the pending case has been seen), and the library's ``Client.attestation`` beside them.

``attest`` saves the DSSE envelope (``<receipt_id>.intoto.jsonl``, one line) or, with
``--sigstore``, the Sigstore bundle (``<receipt_id>.sigstore.json``); its exit codes are
``bundle``'s. ``verify`` reads both: offline under a version 2 trust root the key is missing
(``no_key_certificate``) unless ``--keys keys.json`` pins it, the envelope carries no log proof
(``no_log_proof``), and ``--online`` supplies both; a Sigstore bundle whose entry repeats a
number that is not its checkpoint's is INVALID.
"""

from __future__ import annotations

import base64
import copy
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

import execution_proof
from execution_proof import Attestation, Client, verify
from execution_proof.cli.main import main
from execution_proof.receipts.attestation import b64
from tests.log_stack import ORIGIN
from tests.servers import run_cli

pytestmark = pytest.mark.slow

UNKNOWN = "rcpt_01M8D2AV7NHB8HP9811GDZDKQQ"


def attest(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = main(["attest", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def attest_json(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, dict[str, Any]]:
    code, out, err = attest(capsys, *argv, "--json")
    document: dict[str, Any] = orjson.loads(out)  # exactly one document, whatever happened
    assert "Traceback" not in err
    return code, document


def with_worker(logged: Any) -> None:
    if not logged.workers:
        logged.worker()


def submitted(logged: Any, label: str) -> execution_proof.Receipt:
    with Client(logged.base_url, logged.api_key) as client:
        return client.submit(input=label.encode(), output=b"out " + label.encode())


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty working directory (where ``attest`` saves by default)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)
    return tmp_path


def test_attest_waits_for_the_proof_then_saves_either_form(
    logged: Any, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    receipt = submitted(logged, "attest-1")
    rid = receipt.receipt_id
    if not logged.workers:  # nothing integrates it yet: still pending when the wait ends
        code, document = attest_json(capsys, rid, "--sigstore", "--wait", "1", "--base-url", logged.base_url)
        assert code == 1, document
        assert document["ok"] is False and document["error"]["kind"] == "ProofPending", document
        assert document["saved"] is None and document["receipt_id"] == rid
        assert "nothing saved" in document["error"]["message"]
        assert list(in_tmp.iterdir()) == [], "nothing is saved without the proof"
        # The envelope needs no proof: it is answered at once.
        code, document = attest_json(capsys, rid, "--base-url", logged.base_url)
        assert code == 0 and document["form"] == "envelope" and document["proof"] is False, document
        (in_tmp / f"{rid}.intoto.jsonl").unlink()
    with_worker(logged)

    code, document = attest_json(capsys, rid, "--sigstore", "--wait", "60", "--base-url", logged.base_url)
    assert code == 0, document
    assert document == {
        "ok": True,
        "receipt_id": rid,
        "form": "sigstore",
        "saved": f"{rid}.sigstore.json",
        "log_origin": ORIGIN,
        "proof": True,
    }
    saved = Attestation.load(in_tmp / f"{rid}.sigstore.json")
    assert saved.sigstore and saved.tlog_entries == 1 and saved.receipt == receipt.receipt

    # A receipt file names its service: no --base-url needed.
    receipt_file = in_tmp / "receipt.json"
    receipt.save(receipt_file)
    code, out, err = attest(capsys, receipt_file)
    assert code == 0, err
    assert out == f"saved {rid}.intoto.jsonl: the in-toto attestation of receipt {rid} (DSSE envelope)\n"
    line = (in_tmp / f"{rid}.intoto.jsonl").read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    assert orjson.loads(line) == saved.envelope, "the Sigstore bundle holds the same envelope"
    with Client(logged.base_url) as client:
        bundle = client.bundle(rid, wait=60)
    assert bundle.to_dict()["attestation"] == saved.envelope, "and so does the offline bundle"

    code, out, _ = attest(capsys, rid, "--out", "-", "--base-url", logged.base_url)
    assert code == 0 and out == line, "--out -: the file's bytes on standard output"
    code, document = attest_json(capsys, rid, "--out", "-", "--sigstore", "--base-url", logged.base_url)
    assert code == 0 and document["saved"] is None and document["attestation"] == saved.to_dict()
    code, out, _ = attest(capsys, receipt_file, "--sigstore", "--out", in_tmp / "named.json")
    assert (
        code == 0 and out == f"saved {in_tmp / 'named.json'}: the Sigstore bundle of receipt {rid} with its log proof\n"
    )


def test_attest_exit_codes(logged: Any, in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = attest_json(capsys, UNKNOWN, "--base-url", logged.base_url)
    assert code == 1 and document["error"]["kind"] == "NotFound" and document["saved"] is None, document
    code, document = attest_json(capsys, "no-such-file.json", "--base-url", logged.base_url)
    assert code == 2 and document["error"]["kind"] == "InvalidInput", document
    assert "no such file" in document["error"]["message"]
    code, document = attest_json(capsys, UNKNOWN, "--base-url", "http://127.0.0.1:9")
    assert code == 2 and document["error"]["kind"] == "Unreachable", document
    with pytest.raises(SystemExit) as refused:
        main(["attest", UNKNOWN, "--wait", "-1", "--json"])
    assert refused.value.code == 2
    assert orjson.loads(capsys.readouterr().out)["error"]["kind"] == "UsageError"
    rid = submitted(logged, "attest-exit").receipt_id
    code, document = attest_json(capsys, rid, "--base-url", logged.base_url, "--out", in_tmp / "absent" / "a.json")
    assert code == 2 and document["error"]["kind"] == "InvalidInput" and document["saved"] is None, document
    # As a process: the same codes, no traceback, and --help names what it reads and its codes.
    done = run_cli("attest", UNKNOWN, "--base-url", logged.base_url)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "not_found" in done.stderr, done.stderr
    helped = run_cli("attest", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "environment: SERVICE_BASE_URL" in text and "exit status: 0 saved" in text and "; 2 could not ask" in text


def sigstore_files(base_url: str, folder: Path) -> tuple[Path, Path]:
    """``trust-root --sigstore DIR``: the trust root and ``DIR/keys.json`` (each certified receipt
    key's DER SubjectPublicKeyInfo by kid, each certificate checked against the roots)."""
    trust = folder / "trust-root.json"
    done = run_cli("trust-root", "--base-url", base_url, "--out", str(trust), "--sigstore", str(folder / "sigstore"))
    assert done.returncode == 0, done.stdout + done.stderr
    return trust, folder / "sigstore" / "keys.json"


def verified(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, dict[str, Any]]:
    code = main(["verify", *map(str, argv), "--json"])
    document: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return code, document


def test_verify_reads_both_forms(logged: Any, in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_worker(logged)
    receipt = submitted(logged, "attest-verify")
    rid = receipt.receipt_id
    with Client(logged.base_url) as client:
        sigstore = client.attestation(rid, sigstore=True, wait=60)
        envelope = client.attestation(rid)
        bundle = client.bundle(rid, wait=60)
    trust, keys = sigstore_files(logged.base_url, in_tmp)
    assert receipt.receipt["sig_kid"] in orjson.loads(keys.read_bytes())
    sigstore.save(in_tmp / sigstore.default_name)
    envelope.save(in_tmp / envelope.default_name)
    signed, unlogged = in_tmp / sigstore.default_name, in_tmp / envelope.default_name

    # The Sigstore bundle: offline the key has no certificate at hand; keys.json pins it.
    code, report = verified(capsys, signed, "--trust-root", trust)
    assert (code, report["verdict"], report["reason"]) == (1, "NOT VERIFIED", "no_key_certificate"), report
    assert report["checks"]["log_inclusion"] is True, "its log entry is checked offline all the same"
    assert "--keys DIR/keys.json" in report["notes"][-1]
    code, report = verified(capsys, signed, "--trust-root", trust, "--keys", keys)
    assert (code, report["verdict"], report["reason"]) == (0, "VALID", None), report
    assert report["attestation"] == {
        "form": "sigstore",
        "keyid": receipt.receipt["sig_kid"],
        "keyid_matches": True,
        "signature": True,
        "log_origin": ORIGIN,
        "hint": receipt.receipt["sig_kid"],
    }
    assert report["log"]["index"] >= 1 and report["log"]["origin"] == ORIGIN
    code, report = verified(capsys, signed, "--trust-root", trust, "--online")
    assert (code, report["verdict"]) == (0, "VALID"), report
    # Without its entry (as from a service without a log) the pinned log wants a proof:
    # offline none, --online the receipt's own.
    entryless = sigstore.to_dict()
    entryless["verificationMaterial"] = {"publicKey": entryless["verificationMaterial"]["publicKey"]}
    (in_tmp / "entryless.json").write_bytes(orjson.dumps(entryless))
    code, report = verified(capsys, in_tmp / "entryless.json", "--trust-root", trust, "--keys", keys)
    assert (code, report["verdict"], report["reason"]) == (1, "NOT VERIFIED", "no_log_proof"), report
    code, report = verified(capsys, in_tmp / "entryless.json", "--trust-root", trust, "--online")
    assert (code, report["verdict"], report["reason"]) == (0, "VALID", None), report
    assert report["checks"]["log_inclusion"] is True
    assert not any("log member" in note for note in report["notes"]), report["notes"]

    # The envelope: no log proof offline, whatever pins the key; --online fetches the receipt's.
    for pinned in ([], ["--keys", keys]):
        code, report = verified(capsys, unlogged, "--trust-root", trust, *pinned)
        assert (code, report["verdict"], report["reason"]) == (1, "NOT VERIFIED", "no_log_proof"), report
    code, report = verified(capsys, unlogged, "--trust-root", trust, "--online")
    assert (code, report["verdict"], report["reason"]) == (0, "VALID", None), report
    assert report["checks"]["log_inclusion"] is True and report["log"]["index"] + 1 == int(
        sigstore.to_dict()["verificationMaterial"]["tlogEntries"][0]["logIndex"]
    ), "the receipt's entry, then its attestation's leaf"

    # Our verify refuses the numbers sigstore-js does not read.
    (entry,) = sigstore.to_dict()["verificationMaterial"]["tlogEntries"]
    proof = entry["inclusionProof"]
    flipped = base64.b64encode(
        bytes([base64.b64decode(proof["rootHash"])[0] ^ 1]) + base64.b64decode(proof["rootHash"])[1:]
    ).decode()
    for name, change in {
        "rootHash": {"rootHash": flipped},
        "treeSize": {"treeSize": str(int(proof["treeSize"]) + 1)},
        "logIndex": {"logIndex": str(int(proof["logIndex"]) - 1)},
        "logId": {"logId": {"keyId": b64(bytes(32))}},
    }.items():
        changed = copy.deepcopy(sigstore.to_dict())
        target = changed["verificationMaterial"]["tlogEntries"][0]
        (target if name == "logId" else target["inclusionProof"]).update(change)
        path = in_tmp / f"changed-{name}.json"
        path.write_bytes(orjson.dumps(changed))
        code, report = verified(capsys, path, "--trust-root", trust, "--keys", keys)
        assert (code, report["verdict"], report["reason"]) == (1, "INVALID", "bad_log_proof"), (name, report)
        assert report["checks"]["attestation_signature"] is True and report["checks"]["log_inclusion"] is False

    # The offline bundle carries the envelope, the key's certificate and the proof: complete.
    bundle.save(in_tmp / "bundle.json")
    code, report = verified(capsys, in_tmp / "bundle.json", "--trust-root", trust)
    assert (code, report["verdict"]) == (0, "VALID"), report
    assert report["checks"]["attestation_signature"] is True and report["checks"]["attestation_receipt"] is True

    # The library, on the models themselves.
    assert verify(sigstore, trust_root=trust, keys=keys).ok
    assert verify(envelope, trust_root=trust, online=True).ok
    late = verify(envelope, trust_root=trust)
    assert (late.verdict, late.reason) == ("NOT VERIFIED", "no_log_proof")
    # As a process: a tampered envelope is INVALID, exit 1, and the text says which check failed.
    tampered = envelope.to_dict()
    tampered["signatures"] = [{**tampered["signatures"][0], "keyid": "key-0000000000000000"}]
    (in_tmp / "tampered.json").write_bytes(orjson.dumps(tampered))
    done = run_cli("verify", str(in_tmp / "tampered.json"), "--trust-root", str(trust), "--keys", str(keys))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "Attestation (in-toto DSSE envelope) of receipt" in done.stdout
    assert "[FAIL] attestation: the envelope's keyid 'key-0000000000000000' is NOT the receipt's sig_kid" in done.stdout
    assert "Verdict: INVALID (bad_signature)" in done.stdout
    assert os.environ.get("SERVICE_BASE_URL") is None
