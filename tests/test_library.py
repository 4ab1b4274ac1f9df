"""The client library (docs/python-api.md): what ``execution_proof`` exports,
its errors, its documents, and a user's script using it from the light install (the wheel
installed by name in a fresh venv, no extras), ``mypy --strict`` included."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

import execution_proof
from execution_proof import (
    Attestation,
    Bundle,
    Client,
    Error,
    InvalidInput,
    ProofPending,
    Receipt,
    ServiceError,
    TrustRoot,
    Unreachable,
    VerifyReport,
    hash_file,
    verify,
)
from execution_proof.receipts import errors
from execution_proof.transparency.errors import LogError
from tests.conftest import REPO
from tests.wheel_build import Venv, built_wheel

EXAMPLE = re.search(r"```python\n(.*?)```", (REPO / "docs/python-api.md").read_text(), re.DOTALL)
SERVER_MODULES = ("sanic", "redis", "rq", "jinja2", "prometheus_client", "httpx", "fakeredis", "obstore")


def test_every_public_name_is_there_and_every_error_has_one_root() -> None:
    assert set(execution_proof.__all__) <= set(dir(execution_proof))
    for name in execution_proof.__all__:
        assert getattr(execution_proof, name) is not None, name
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["dynamic"]["version"] == {"attr": "execution_proof.__version__"}, "one place for the version"
    assert re.fullmatch(r"\d+\.\d+\.\d+", execution_proof.__version__)
    assert ProofPending is errors.ProofPending and ProofPending.code == "log_pending" and ProofPending.status == 409
    for error in (ServiceError, Unreachable, InvalidInput, ProofPending, LogError, errors.NotFound):
        assert issubclass(error, Error), error
    assert issubclass(InvalidInput, ValueError)
    with pytest.raises(AttributeError):
        _ = execution_proof.Nothing  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("status", "code", "expected", "kept_status"),
    [
        (401, "unauthorized", errors.Unauthorized, 401),
        (409, "log_pending", errors.ProofPending, 409),
        (404, "not_in_log", errors.NotInLog, 404),
        (404, "claim_pending", errors.ClaimUnknown, 404),
        (409, "claim_pending", errors.ClaimPending, 409),
        (418, "bad_request", errors.BadRequest, 418),  # a known code at another status keeps the reply's
        (451, "some_future_code", errors.ServiceError, 451),
    ],
)
def test_a_reply_becomes_the_servers_own_error_class(
    status: int, code: str, expected: type[ServiceError], kept_status: int
) -> None:
    made = errors.from_reply(status, code, "what the service said")
    assert type(made) is expected
    assert (made.status, made.code, made.message) == (kept_status, code, "what the service said")
    assert str(made) == "what the service said"
    assert type(made).status == expected.status, "an instance's status never changes its class's"


def test_hash_file_and_its_salt(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x00data" * 100_000)
    import hashlib

    assert hash_file(path) == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert hash_file(str(path), salt=b"s") == "sha256:" + hashlib.sha256(b"s" + path.read_bytes()).hexdigest()
    with pytest.raises(InvalidInput, match=r"cannot read .*absent"):  # an execution_proof.Error, by design
        hash_file(tmp_path / "absent")


RECEIPT = {
    **dict.fromkeys(("output_hash", "params_hash", "env_hash", "code_ref", "run_id", "receipt_kind", "tags")),
    **dict.fromkeys(("prev_receipt_hash", "chain_status", "expected_prev_receipt_hash")),
    **{"receipt_id": "rcpt_1", "project_id": "p", "actor_id": "a", "created_at": "2026-01-15T10:00:00.000Z"},
    **{"input_hash": "sha256:" + "0" * 64, "status": "issued", "receipt_hash": "sha256:" + "1" * 64},
    **{"signature": "A" * 86, "sig_kid": "k1"},
}
"""A receipt object's shape (docs/receipt-format.md): every member, of its JSON type."""
BUNDLE = {
    **{"format": "eps-receipt-bundle", "version": 1, "created_at": "2026-01-15T10:00:01.000Z"},
    **{"service": "https://proofs.example", "receipt": RECEIPT, "keys": {"keys": []}, "chain": []},
    "chain_complete": False,
}
"""A bundle of a service without a log (docs/bundles.md): every required member."""


def test_documents_load_what_they_save(tmp_path: Path) -> None:
    body = {"ok": True, "receipt": RECEIPT}
    raw = orjson.dumps(body)
    receipt = Receipt.from_reply(raw, "https://proofs.example", {"input": "00ff"})
    path = tmp_path / "r.json"
    receipt.save(path)
    saved = path.read_bytes()
    assert saved.startswith(raw[:-1]), "the reply's own bytes are kept"
    loaded = Receipt.load(path)
    assert loaded == receipt and loaded.receipt_id == "rcpt_1"
    assert loaded.service_url == "https://proofs.example" and dict(loaded.salts) == {"input": "00ff"}
    assert loaded.to_dict() == {**body, "service_url": "https://proofs.example", "salts": {"input": "00ff"}}
    assert Receipt.from_dict(body["receipt"]).receipt_id == "rcpt_1", "a bare receipt"
    for bad in ([], {"receipt": {"receipt_id": "x"}}, {"format": "eps-receipt-bundle", "receipt": {}}):
        with pytest.raises(InvalidInput):
            Receipt.from_dict(bad)
    with pytest.raises(InvalidInput, match="the receipt has no chain_status"):
        Receipt.from_dict({k: v for k, v in RECEIPT.items() if k != "chain_status"})
    with pytest.raises(InvalidInput, match="tags are not an object of strings"):
        Bundle.from_dict({**BUNDLE, "receipt": {**RECEIPT, "tags": {"a": 1}}})
    assert loaded.receipt["sig_kid"] == "k1" and loaded.project_id == "p", "the receipt, typed"
    (tmp_path / "not.json").write_bytes(b"{")
    with pytest.raises(InvalidInput, match="not valid JSON"):
        Receipt.load(tmp_path / "not.json")
    with pytest.raises(InvalidInput, match="cannot read"):
        Receipt.load(tmp_path / "absent.json")

    pending = Bundle.from_dict({**BUNDLE, "log": {"origin": "o", "log_vkey": "v", "proof": None}, "timestamps": []})
    assert pending.pending and pending.has_log and pending.proof is None
    pending.save(tmp_path / "b.json")
    assert Bundle.load(tmp_path / "b.json") == pending
    without_log = Bundle.from_dict(BUNDLE)
    assert not without_log.pending and not without_log.has_log
    with pytest.raises(InvalidInput):
        Bundle.from_dict(body)


def envelope_of(receipt: dict[str, Any], origin: str | None = None) -> dict[str, Any]:
    """An envelope of ``receipt`` as the service renders one (its signature: any 64 bytes; a
    model reads a document, ``verify`` judges it)."""
    from execution_proof.receipts.attestation import Attestation as Rendered
    from execution_proof.receipts.attestation import statement_bytes

    return Rendered(statement_bytes(receipt, origin), str(receipt["sig_kid"]), bytes(64)).envelope()


def test_an_attestation_loads_what_it_saves(tmp_path: Path) -> None:
    from execution_proof.receipts import sigstore
    from execution_proof.receipts.attestation import parse_envelope

    envelope = envelope_of(RECEIPT, "proofs.example/log")
    made = Attestation.from_dict(envelope)
    assert not made.sigstore and made.receipt_id == "rcpt_1" and made.receipt == RECEIPT
    assert made.log_origin == "proofs.example/log" and made.tlog_entries == 0
    assert made.statement["predicateType"].endswith("/attestation/receipt/v1")
    assert made.default_name == "rcpt_1.intoto.jsonl"
    made.save(tmp_path / made.default_name)
    text = (tmp_path / made.default_name).read_text()
    assert text.count("\n") == 1 and text.endswith("\n"), "one line: in-toto's JSON Lines"
    assert Attestation.load(tmp_path / made.default_name) == made
    bundle = sigstore.bundle(parse_envelope(envelope), None)
    unlogged = Attestation.from_dict(bundle)
    assert unlogged.sigstore and unlogged.envelope == envelope and unlogged.tlog_entries == 0
    assert unlogged.default_name == "rcpt_1.sigstore.json"
    # One document is one thing: a receipt is no attestation, and an attestation no receipt.
    with pytest.raises(InvalidInput, match="not a receipt's attestation"):
        Attestation.from_dict({"ok": True, "receipt": RECEIPT})
    with pytest.raises(InvalidInput, match=r"Attestation\.load reads it"):
        Receipt.from_dict(envelope)
    with pytest.raises(InvalidInput, match="exactly payloadType, payload and signatures"):
        Attestation.from_dict({**envelope, "extra": 1})
    with pytest.raises(InvalidInput, match="the Statement's receipt"):
        Attestation.from_dict(envelope_of({**RECEIPT, "extra": "x"}))


class _Attesting:
    """A service answering ``GET /v1/receipts/{id}/attestation``: 409 ``log_pending`` for the
    Sigstore bundle until ``pending`` tries have been made, then the bundle; the envelope at once."""

    def __init__(self, pending: int) -> None:
        self.pending = pending
        self.asked: list[str] = []

    def handler(self) -> type:
        from http.server import BaseHTTPRequestHandler

        from execution_proof.receipts import sigstore
        from execution_proof.receipts.attestation import parse_envelope

        outer, envelope = self, envelope_of(RECEIPT)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked.append(self.path)
                status, body = 200, envelope
                if self.path.endswith("?format=sigstore"):
                    body = sigstore.bundle(parse_envelope(envelope), None)
                    if len(outer.asked) <= outer.pending:
                        status, body = 409, {"ok": False, "error": {"code": "log_pending", "message": "wait"}}
                if not self.path.startswith("/v1/receipts/rcpt_1/attestation"):
                    status, body = 404, {"ok": False, "error": {"code": "not_found", "message": "no such receipt"}}
                payload = orjson.dumps(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def test_client_attestation_waits_for_the_log_proof_then_gives_up() -> None:
    from http.server import ThreadingHTTPServer

    from tests.servers import serving

    service = _Attesting(pending=2)
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), service.handler())) as url, Client(url) as client:
        envelope = client.attestation("rcpt_1")
        assert not envelope.sigstore and service.asked == ["/v1/receipts/rcpt_1/attestation"]
        waits: list[float] = []
        bundle = client.attestation("rcpt_1", sigstore=True, wait=30, on_wait=lambda waited, _: waits.append(waited))
        assert bundle.sigstore and bundle.receipt_id == "rcpt_1"
        assert service.asked[1:] == ["/v1/receipts/rcpt_1/attestation?format=sigstore"] * 2, "asked until it came"
        assert len(waits) == 1, "told before each new try"
        service.asked.clear()
        service.pending = 1000
        with pytest.raises(ProofPending, match=r"waited \d+ s\): ask again later") as pending:
            client.attestation("rcpt_1", sigstore=True, wait=1.5)
        assert pending.value.status == 409 and len(service.asked) >= 2
        with pytest.raises(ProofPending, match="ask again later"):
            client.attestation("rcpt_1", sigstore=True)  # no wait: one try
        with pytest.raises(errors.NotFound):
            client.attestation("rcpt_2")
        with pytest.raises(InvalidInput, match="wait must be 0 or more"):
            client.attestation("rcpt_1", sigstore=True, wait=-1)


def test_bad_arguments_raise_invalid_input_before_anything_is_sent(tmp_path: Path) -> None:
    with Client("http://127.0.0.1:9", api_key="eps_x") as client:
        with pytest.raises(InvalidInput, match="followed by 64 hex digits"):
            client.submit(input="sha256:ABC")
        with pytest.raises(InvalidInput, match="followed by 64 hex digits"):
            client.submit(input="SHA256:not-a-path")  # a hash value in any case, never a path
        with pytest.raises(InvalidInput, match="cannot read"):
            client.submit(input=tmp_path / "absent.bin")
        with pytest.raises(InvalidInput):
            client.bundle("rcpt_x", wait=-1)
        with pytest.raises(Unreachable, match="cannot reach"):
            client.get("rcpt_x")
    with Client("http://127.0.0.1:9", api_key="") as keyless, pytest.raises(InvalidInput, match="SERVICE_API_KEY"):
        keyless.submit(input=b"data")
    assert "eps_secret" not in repr(Client(api_key="eps_secret"))
    with pytest.raises(InvalidInput):
        verify(42)
    with pytest.raises(InvalidInput, match="cannot read"):
        verify(tmp_path / "absent.json")


# --- against a service with a log ---------------------------------------------------------------


@pytest.mark.slow
def test_the_library_against_a_service_with_a_log_and_no_worker_then_one(logged: Any, tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"data the service never sees")
    with Client(logged.base_url, logged.api_key) as client:
        receipt = client.submit(input=data, output=b"bytes hashed here", params="sha256:" + "a" * 64, salt=True)
        assert receipt.receipt["input_hash"] != hash_file(data), "salted"
        assert set(receipt.salts) == {"input", "output"}, "a given sha256: is used as it is, unsalted"
        assert receipt.receipt["params_hash"] == "sha256:" + "a" * 64
        assert client.get(receipt.receipt_id).receipt == receipt.receipt
        with pytest.raises(ProofPending) as pending:
            client.bundle(receipt.receipt_id, wait=1.5)  # no worker yet: nothing integrates it
        assert pending.value.status == 409 and "no published checkpoint covers" in str(pending.value)
        with pytest.raises(errors.NotFound) as missing:
            client.get("rcpt_01M8D2AV7NHB8HP9811GDZDKQQ")
        assert missing.value.status == 404 and missing.value.code == "not_found"

        logged.worker()
        waits: list[float] = []
        bundle = client.bundle(receipt.receipt_id, wait=60, on_wait=lambda waited, _: waits.append(waited))
        assert bundle.proof is not None and bundle.receipt_id == receipt.receipt_id
        root = client.trust_root()
        assert isinstance(root, TrustRoot) and root.log_origin is not None
    report = verify(bundle, trust_root=root)
    assert isinstance(report, VerifyReport)
    assert report.ok and report.verdict == "VALID", report.to_dict()
    names = {check.name for check in report.checks}
    assert {"signature", "receipt_hash_recompute", "chain", "log_inclusion"} <= names, names
    assert all(check.ok and check.detail for check in report.checks)
    assert report.to_dict()["verdict"] == "VALID"

    saved = tmp_path / "receipt.json"
    receipt.save(saved)
    offline = verify(saved, input=data, trust_root=root)
    assert (offline.verdict, offline.reason) == ("NOT VERIFIED", "no_log_proof"), offline.to_dict()
    # Offline, a saved create response carries no key certificate either: the key (so its
    # signature) and the proof are what is missing, and --online supplies both.
    assert {c.name for c in offline.checks if not c.ok} <= {"signature", "key_certificate"}, offline.to_dict()
    assert "--online" in offline.notes[-1]
    with_salts = verify(saved, input=data, trust_root=root, online=True)
    assert with_salts.ok and with_salts.reason is None, with_salts.to_dict()
    # Without the log, the key must still be judged: offline nothing carries its certificate.
    assert verify(saved, input=data, trust_root=root, require_log=False).reason == "no_key_certificate"
    assert verify(saved, input=data, trust_root=root, require_log=False, online=True).reason == "signature_only"
    other = tmp_path / "other.bin"
    other.write_bytes(b"another file")
    refused = verify(Receipt.load(saved), input=other, trust_root=root, require_log=False, online=True)
    assert not refused.ok and refused.verdict == "INVALID"
    assert [c.name for c in refused.checks if not c.ok] == ["input_hash"]


# --- the light install, as a user's script --------------------------------------------------------


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel (no extras, from its local directory) and mypy in a fresh venv."""
    wheel = built_wheel(tmp_path_factory)
    venv = Venv(tmp_path_factory.mktemp("venv-library") / "venv", wheel.parent)
    venv.pip_install("execution-proof", "mypy")
    return venv


@pytest.mark.slow
def test_the_light_install_imports_no_server_module(light: Venv, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import execution_proof\n"
        "assert 'execution_proof.client.service' not in sys.modules, 'import execution_proof loads nothing more'\n"
        "from execution_proof import Client, verify, hash_file, Receipt, Bundle, TrustRoot, Error\n"
        f"print(sorted(m for m in {list(SERVER_MODULES)!r} if m in sys.modules))\n"
        "print(sorted(m for m in sys.modules if m.startswith('execution_proof.') and m.split('.')[1] in "
        "('web', 'jobs', 'kv', 'cli')))\n"
    )
    done = light.run(str(light.python), "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]"]


@pytest.mark.slow
def test_a_users_script_passes_mypy_strict(light: Venv, tmp_path: Path) -> None:
    assert EXAMPLE is not None
    script = tmp_path / "pipeline.py"
    script.write_text(EXAMPLE.group(1))
    typed = light.run(str(light.bin / "mypy"), "--strict", "--no-incremental", str(script), cwd=tmp_path)
    assert typed.returncode == 0, typed.stdout + typed.stderr
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "from execution_proof import Client, verify\n"
        "report = verify(Client().get('rcpt_x'))\n"
        "flag: str = report.ok\n"  # a bool: mypy must say so, or the types are not seen at all
    )
    refused = light.run(str(light.bin / "mypy"), "--strict", "--no-incremental", str(wrong), cwd=tmp_path)
    assert refused.returncode == 1 and 'has type "bool"' in refused.stdout, refused.stdout


@pytest.mark.slow
def test_the_documented_example_runs_from_the_light_install(light: Venv, logged: Any, tmp_path: Path) -> None:
    assert EXAMPLE is not None
    if not logged.workers:
        logged.worker()
    script = tmp_path / "pipeline.py"
    script.write_text(EXAMPLE.group(1))
    env: dict[str, str | None] = {"SERVICE_BASE_URL": logged.base_url, "SERVICE_API_KEY": logged.api_key}
    done = light.run(str(light.python), str(script), str(tmp_path), env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"library {execution_proof.__version__}"
    assert lines[-1] == "VALID"
    assert any(line.startswith("ok   log_inclusion") for line in lines), lines
    assert Bundle.load(tmp_path / "artefact.bundle.json").proof is not None
    assert Receipt.load(tmp_path / "artefact.receipt.json").service_url == logged.base_url


DOWNGRADE = """
import json, subprocess, sys
from pathlib import Path
import execution_proof
from execution_proof import InvalidInput, verify

work, root = Path(sys.argv[1]), sys.argv[2]
bundle = json.loads((work / "artefact.bundle.json").read_text())
renamed = {("forlat" if name == "format" else name): value for name, value in bundle.items()}
(work / "renamed.json").write_text(json.dumps(renamed))
try:
    verify(work / "renamed.json", trust_root=root)
except InvalidInput as refused:
    print("library:", type(refused).__name__, "no format member" in str(refused))
cli = subprocess.run(
    [sys.executable, "-m", "execution_proof", "verify", str(work / "renamed.json"), "--trust-root", root, "--json"],
    capture_output=True, text=True,
)
document = json.loads(cli.stdout)
print("cli:", cli.returncode, document["verdict"], document["error"]["kind"])
no_log = {name: value for name, value in bundle.items() if name not in ("log", "timestamps")}
(work / "no-log.json").write_text(json.dumps(no_log))
report = verify(work / "no-log.json", trust_root=root)
print("no log:", report.verdict, report.reason, "--online" in report.notes[-1])
print("errors:", execution_proof.NotFound.__name__, execution_proof.ProofPending.__name__)
"""


@pytest.mark.slow
def test_the_light_install_refuses_a_downgraded_bundle(light: Venv, logged: Any, tmp_path: Path) -> None:
    """Where a user would be: the wheel alone, a bundle of a real service with a log."""
    if not logged.workers:
        logged.worker()
    with Client(logged.base_url, logged.api_key) as client:
        receipt = client.submit(input=b"downgrade")
        client.bundle(receipt.receipt_id, wait=60).save(tmp_path / "artefact.bundle.json")
        root = tmp_path / "trust-root.json"
        root.write_bytes(client.trust_root().to_bytes())
    script = tmp_path / "downgrade.py"
    script.write_text(DOWNGRADE)
    done = light.run(str(light.python), str(script), str(tmp_path), str(root), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "library: InvalidInput True",
        "cli: 2 ERROR InvalidInput",
        "no log: NOT VERIFIED no_log_proof True",
        "errors: NotFound ProofPending",
    ]


def test_the_example_is_in_the_docs() -> None:
    assert EXAMPLE is not None and "from execution_proof import" in EXAMPLE.group(1)
    assert os.path.basename(__file__) in (REPO / "docs/python-api.md").read_text()
