"""Verification that cannot be downgraded (docs/verdicts.md): a document is a bundle exactly
when it has ``format``, and then a well-formed one, else it could not be checked (exit 2,
``InvalidInput``), never VALID; a pinned log makes the log proof required; every verdict has
a reason from a closed list; NOT VERIFIED is told apart from INVALID ("wait" from
"tampered"); the library's input forms and errors are those its docs promise."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import execution_proof
from execution_proof import InvalidInput, VerificationFailed, verify
from execution_proof.client.hashing import hash_bytes
from execution_proof.transparency import note
from tests.test_client_verify import (
    FakeService,
    chain_bundle,
    fake_service,
    keys_file,
    no_network,
    pinned_log,
    run,
    trust_root_file,
)

LOG = note.Signer.generate("fake.example/log")


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def url(service: FakeService) -> Iterator[str]:
    with fake_service(service) as base:
        yield base


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)


def written(tmp_path: Path, name: str, document: Any) -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(document))
    return path


def logged_bundle(service: FakeService, proof: str | None = None) -> dict[str, Any]:
    """A bundle of a service with a log (pinned as ``LOG``), its proof ``proof``."""
    bundle = chain_bundle(service)
    bundle["log"] = {"origin": LOG.verifier.name, "log_vkey": LOG.verifier.encode(), "proof": proof}
    bundle["timestamps"] = []
    return bundle


def renamed(document: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return {new if name == old else name: value for name, value in document.items()}


def broken_bundles(bundle: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """Bundles one change away from a good one, each with what the refusal says."""
    without = {name: value for name, value in bundle.items() if name != "format"}
    return {
        "format renamed (one byte)": (renamed(bundle, "format", "forlat"), "no format member"),
        "format deleted": (without, "no format member"),
        "format of the wrong type": ({**bundle, "format": 1}, "unknown document format 1"),
        "format unknown": ({**bundle, "format": "eps-receipt-bundle-x"}, "unknown document format"),
        "version from the future": ({**bundle, "version": 99}, "made by a newer version"),
        "version of the wrong type": ({**bundle, "version": "1"}, "unsupported bundle version"),
        "receipt renamed": (renamed(bundle, "receipt", "receipts"), "the bundle has no receipt"),
        "chain deleted": ({k: v for k, v in bundle.items() if k != "chain"}, "the bundle has no chain"),
        "chain of the wrong type": ({**bundle, "chain": {}}, "chain is not a list"),
        "chain_complete of the wrong type": ({**bundle, "chain_complete": "yes"}, "chain_complete is not"),
        "an unknown member": ({**bundle, "note": "x"}, "unknown members: note"),
        "log of the wrong type": ({**bundle, "log": "none"}, "log is not an object"),
        "log proof of the wrong type": ({**bundle, "log": {**bundle["log"], "proof": 1}}, "proof is neither"),
        "a chain entry that lost a member": (
            {**bundle, "chain": [{k: v for k, v in bundle["chain"][0].items() if k != "status"}]},
            "(chain[0]): the receipt has no status",
        ),
    }


def test_a_bundle_one_change_away_is_never_verified_as_something_else(
    service: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_network(monkeypatch)
    bundle = logged_bundle(service)
    root = trust_root_file(tmp_path, "http://127.0.0.1:9", log=pinned_log(LOG))
    for case, (document, said) in broken_bundles(bundle).items():
        path = written(tmp_path, "broken.json", document)
        with pytest.raises(InvalidInput, match=re.escape(said)):
            verify(path, trust_root=root)
        with pytest.raises(InvalidInput):
            execution_proof.Bundle.load(path)
        code, out = run(capsys, "verify", path, "--trust-root", root, "--json")
        assert code == 2, (case, out)
        report = orjson.loads(out)
        assert report["verdict"] == "ERROR" and report["reason"] is None, case
        assert report["error"]["kind"] == "InvalidInput" and said in report["error"]["message"], (case, report)


def test_bundle_members_without_format_are_a_malformed_bundle(service: FakeService, tmp_path: Path) -> None:
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    for member, value in (("keys", {"keys": []}), ("chain_complete", True), ("version", 1), ("timestamps", [])):
        for document in ({**receipt, member: value}, {"ok": True, "receipt": receipt, member: value}):
            with pytest.raises(InvalidInput, match=f"malformed bundle: it has {member}"):
                verify(written(tmp_path, "r.json", document), keys=keys_file(tmp_path))
    with pytest.raises(InvalidInput, match="unknown members beside the receipt: extra"):
        verify(written(tmp_path, "r.json", {"ok": True, "receipt": receipt, "extra": 1}), keys=keys_file(tmp_path))
    with pytest.raises(InvalidInput, match="the receipt has unknown members: input_hsh"):
        verify(written(tmp_path, "r.json", renamed(receipt, "input_hash", "input_hsh")), keys=keys_file(tmp_path))


def test_a_pinned_log_requires_the_proof(
    service: FakeService, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = trust_root_file(tmp_path, url, log=pinned_log(LOG))
    bundle = logged_bundle(service)
    without_log = {name: value for name, value in bundle.items() if name not in ("log", "timestamps")}
    receipt = bundle["receipt"]
    saved = {"ok": True, "receipt": receipt, "idempotency": {"hit": False, "key": "k"}, "chain": {}, "quota": {}}
    service.requests.clear()
    for name, document in (
        ("bundle without log", without_log),
        ("bare receipt", receipt),
        ("GET body", {"ok": True, "receipt": receipt}),
        ("saved create response", {**saved, "service_url": url}),
    ):
        report = verify(written(tmp_path, "d.json", document), trust_root=root)
        assert (report.verdict, report.reason) == ("NOT VERIFIED", "no_log_proof"), (name, report.to_dict())
        assert not report.ok and all(check.ok for check in report.checks), name
        assert "--online" in report.notes[-1] and "--trust-root" in report.notes[-1], report.notes
        with pytest.raises(VerificationFailed) as failed:
            report.raise_for_failure()
        assert failed.value.report is report and failed.value.reason == "no_log_proof"
        alone = verify(written(tmp_path, "d.json", document), trust_root=root, require_log=False)
        assert (alone.verdict, alone.reason) == ("VALID", "signature_only"), name
        alone.raise_for_failure()
    assert service.requests == [], "offline: the trust root alone"

    # A trust root that pins no log, or a key set: the signature is all there is to check.
    for pin in ({"trust_root": trust_root_file(tmp_path, url)}, {"keys": keys_file(tmp_path)}):
        report = verify(written(tmp_path, "s.json", saved), **pin)
        assert (report.verdict, report.reason) == ("VALID", None), report.to_dict()

    code, out = run(capsys, "verify", written(tmp_path, "b.json", without_log), "--trust-root", root, "--json")
    assert code == 1 and orjson.loads(out)["reason"] == "no_log_proof"
    code, out = run(capsys, "verify", tmp_path / "b.json", "--trust-root", root, "--no-log", "--json")
    assert code == 0 and orjson.loads(out)["reason"] == "signature_only"
    code, out = run(capsys, "verify", tmp_path / "b.json", "--trust-root", root, "--no-log", "--log-key", "x")
    assert code == 2 and "--no-log checks the signature alone" in out


def test_a_receipt_waiting_for_its_proof_is_pending_not_invalid(
    service: FakeService, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = trust_root_file(tmp_path, url, log=pinned_log(LOG))
    bundle = logged_bundle(service)
    report = verify(written(tmp_path, "b.json", bundle), trust_root=root)
    assert (report.verdict, report.reason) == ("NOT VERIFIED", "pending"), report.to_dict()
    assert "wait" in report.notes[-1]

    # Online, the service answers 409 log_pending: the same verdict, not a forgery's.
    original = service.answer

    def pending(method: str, target: str, body: bytes) -> tuple[int, Any]:
        if target.endswith("/log-proof"):
            service.requests.append((method, target, body))
            return 409, {"error": {"code": "log_pending", "message": "no published checkpoint covers it yet"}}
        return original(method, target, body)

    monkeypatch.setattr(service, "answer", pending)
    receipt = service.receipts[-1]
    online = verify(written(tmp_path, "r.json", {"ok": True, "receipt": receipt}), trust_root=root, online=True)
    assert (online.verdict, online.reason) == ("NOT VERIFIED", "pending"), online.to_dict()
    assert any(target.endswith("/log-proof") for _, target, _ in service.requests)
    by_key = verify(written(tmp_path, "r.json", receipt), log_key=LOG.verifier.encode(), base_url=url)
    assert (by_key.verdict, by_key.reason) == ("NOT VERIFIED", "pending"), by_key.to_dict()
    # A bundle without its proof, under --online: the service's proof is asked for, as for a receipt.
    without_log = {name: value for name, value in bundle.items() if name not in ("log", "timestamps")}
    for document in (bundle, without_log):
        service.requests.clear()
        fetched = verify(written(tmp_path, "b.json", document), trust_root=root, online=True)
        assert (fetched.verdict, fetched.reason) == ("NOT VERIFIED", "pending"), fetched.to_dict()
        assert any(target.endswith("/log-proof") for _, target, _ in service.requests), service.requests
        assert fetched.chain is not None and fetched.chain.ok, "the chain is still the bundle's"


def test_a_lost_predecessor_and_a_deleted_receipt_are_not_verified_not_invalid(
    service: FakeService, url: str, tmp_path: Path
) -> None:
    first = service.create({"input_hash": "sha256:" + "1" * 64})
    second = service.create({"input_hash": "sha256:" + "2" * 64})
    service.deleted.add(first["receipt_id"])  # past retention
    path = written(tmp_path, "r.json", {"ok": True, "receipt": second, "service_url": url})
    report = verify(path, keys=keys_file(tmp_path), base_url=url, chain=True)
    assert (report.verdict, report.reason) == ("NOT VERIFIED", "chain_unavailable"), report.to_dict()
    service.deleted.add(second["receipt_id"])
    root = trust_root_file(tmp_path, url)
    gone = verify(path, trust_root=root, online=True)
    assert (gone.verdict, gone.reason) == ("NOT VERIFIED", "deleted"), gone.to_dict()
    # A different receipt under the same id is evidence.
    service.deleted.clear()
    forged = copy.deepcopy(second)
    forged["input_hash"] = "sha256:" + "9" * 64
    changed = verify(written(tmp_path, "f.json", {"receipt": forged}), trust_root=root, online=True)
    assert changed.verdict == "INVALID" and changed.reason == "bad_signature"


def test_bundles_keys_alone_are_no_keys(service: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_network(monkeypatch)
    bundle = chain_bundle(service)
    report = verify(written(tmp_path, "b.json", bundle))
    assert (report.verdict, report.reason) == ("NOT VERIFIED", "no_keys"), report.to_dict()
    assert "--trust-root" in report.notes[-1]


def test_verify_takes_the_three_input_forms_of_submit(service: FakeService, tmp_path: Path) -> None:
    data = b"the build's output"
    receipt = service.create({"input_hash": hash_bytes(data), "output_hash": hash_bytes(b"out")})
    path = written(tmp_path, "r.json", receipt)
    keys = keys_file(tmp_path)
    on_disk = tmp_path / "input.bin"
    on_disk.write_bytes(data)
    for given in (on_disk, str(on_disk), data, hash_bytes(data), "SHA256:" + hash_bytes(data)[7:].upper()):
        report = verify(path, keys=keys, input=given, output=b"out")
        assert report.ok and report.reason is None, (given, report.to_dict())
    wrong = verify(path, keys=keys, input=b"other bytes")
    assert (wrong.verdict, wrong.reason) == ("INVALID", "hash_mismatch")
    with pytest.raises(InvalidInput, match="64 hex digits"):
        verify(path, keys=keys, input="SHA256:not-a-file")
    with pytest.raises(InvalidInput, match="cannot read"):
        verify(path, keys=keys, input=tmp_path / "absent.bin")


def test_the_errors_are_exported_by_their_documented_names() -> None:
    from execution_proof.receipts import errors

    for name in ("NotFound", "Unauthorized", "RateLimited", "Forbidden", "BadRequest", "QuotaExceeded"):
        exported = getattr(execution_proof, name)
        assert exported is getattr(errors, name) and issubclass(exported, execution_proof.ServiceError)
    assert execution_proof.ProofPending.__name__ == "ProofPending"
    assert issubclass(execution_proof.VerificationFailed, execution_proof.Error)
    with pytest.raises(execution_proof.Error):
        execution_proof.hash_file("/nonexistent/file")
