"""``submit`` and ``verify`` against a small fake service on loopback (in-process, fast): what
``submit`` saves (``service_url``, ``salts``) and sends (never a salt), which service ``verify``
talks to, the four file hashes, ``--keys`` with ``--base-url``, ``--trust-root`` offline and
``--online``, the exit codes, and what each verb imports at start-up."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from execution_proof.cli.main import main
from execution_proof.client import http as http_client
from execution_proof.client.hashing import hash_file
from execution_proof.client.verifying import VerifyOptions, run_verify
from execution_proof.receipts.model import build_receipt, chain_object, parse_create_request, place_in_chain
from execution_proof.receipts.signing import KeyRing, load_key_ring, new_key_set
from execution_proof.receipts.verifier import BUNDLE_FORMAT, recompute_hash_or_none
from execution_proof.transparency import note
from tests.conftest import REPO
from tests.servers import run_cli, serving

SERVICE_KEYS = load_key_ring(new_key_set("svc-1"))
UNREACHABLE = "http://127.0.0.1:9"


class FakeService:
    """``POST /v1/receipts`` (signs what it is sent, chained), ``GET /v1/public-key`` and
    ``GET /v1/receipts/{id or hash}``; it records every request, and can forget a receipt."""

    def __init__(self, keyring: KeyRing = SERVICE_KEYS) -> None:
        self.keyring = keyring
        self.receipts: list[dict[str, Any]] = []
        self.deleted: set[str] = set()
        self.requests: list[tuple[str, str, bytes]] = []
        self.lock = threading.Lock()

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            prev = self.receipts[-1]["receipt_hash"] if self.receipts else None
            receipt = build_receipt(
                parse_create_request(body),
                receipt_id=f"rcpt_{len(self.receipts) + 1:026d}",
                project_id="prj_fake",
                actor_id="act_fake",
                created_at="2026-01-01T00:00:00.000Z",
                placement=place_in_chain(prev, prev),
                keyring=self.keyring,
            )
            self.receipts.append(receipt)
        return receipt

    def find(self, name: str) -> dict[str, Any] | None:
        for receipt in self.receipts:
            if name in (receipt["receipt_id"], receipt["receipt_hash"]) and receipt["receipt_id"] not in self.deleted:
                return receipt
        return None

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        self.requests.append((method, target, body))
        path = urlsplit(target).path
        if method == "POST" and path == "/v1/receipts":
            receipt = self.create(orjson.loads(body))
            return 201, {"ok": True, "receipt": receipt, "chain": chain_object(receipt), "quota": {}}
        if method == "GET" and path == "/v1/public-key":
            return 200, self.keyring.public_keys_json()
        if method == "GET" and path.startswith("/v1/receipts/"):
            found = self.find(path.removeprefix("/v1/receipts/"))
            if found is not None:
                return 200, {"receipt": found}
        return 404, {"error": {"code": "not_found", "message": "no such thing"}}

    def paths(self) -> list[str]:
        return [urlsplit(target).path for _, target, _ in self.requests]


@contextlib.contextmanager
def fake_service(service: FakeService) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, document = service.answer(self.command, self.path, self.rfile.read(length))
            payload = orjson.dumps(document)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _reply

        def log_message(self, *args: Any) -> None:
            pass

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield url


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def url(service: FakeService) -> Iterator[str]:
    with fake_service(service) as base:
        yield base


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("input", "output", "params", "env"):
        path = tmp_path / f"{name}.bin"
        path.write_bytes(f"the {name} file\n".encode())
        made[name] = path
    return made


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)
    monkeypatch.setenv("SERVICE_API_KEY", "eps_" + "A" * 43)


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str]:
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def file_options(files: dict[str, Path]) -> list[Any]:
    return [item for name, path in files.items() for item in (f"--{name}", path)]


def submitted(capsys: pytest.CaptureFixture[str], files: dict[str, Path], *argv: Any) -> tuple[Path, dict[str, Any]]:
    code, out = run(capsys, "submit", *file_options(files), *argv)
    assert code == 0, out
    saved = Path(re.search(r"saved: +(\S+)", out).group(1))  # type: ignore[union-attr]
    return saved, orjson.loads(saved.read_bytes())


def keys_file(tmp_path: Path, keyring: KeyRing = SERVICE_KEYS) -> Path:
    path = tmp_path / f"keys-{keyring.active_kid}.json"
    path.write_bytes(orjson.dumps(keyring.public_keys_json()))
    return path


def trust_root_file(tmp_path: Path, service_url: str, keyring: KeyRing = SERVICE_KEYS, log: Any = None) -> Path:
    document = {
        "version": 1,
        "service_url": service_url,
        "receipt_keys": [
            {"kid": key.kid, "public_key_base64url": key.public_key_base64url} for key in keyring.keys.values()
        ],
        "log": log,
        "tsa_roots_pem": [],
    }
    path = tmp_path / f"trust-root-{len(list(tmp_path.iterdir()))}.json"
    path.write_bytes(orjson.dumps(document))
    return path


def pinned_log(signer: note.Signer) -> dict[str, str]:
    vkey = signer.verifier.encode()
    return {"origin": signer.verifier.name, "vkey": vkey, "policy": f"log {vkey}\nquorum none\n"}


# --- submit ----------------------------------------------------------------------------------


def test_submit_saves_the_service_url_and_salts_and_never_sends_a_salt(
    service: FakeService, url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    saved, document = submitted(capsys, files, "--salt", "--base-url", url + "/")
    assert saved == Path(str(files["input"]) + ".receipt.json")
    assert document["service_url"] == url, "the base URL used, without its trailing slash"
    salts = document["salts"]
    assert set(salts) == {"input", "output", "params", "env"}
    assert all(re.fullmatch(r"[0-9a-f]{32}", salt) for salt in salts.values()), "16 fresh bytes each"
    assert len(set(salts.values())) == 4, "one salt per file"

    [(method, target, body)] = service.requests
    assert (method, target) == ("POST", "/v1/receipts")
    sent = orjson.loads(body)
    for name, path in files.items():
        expected = "sha256:" + hashlib.sha256(bytes.fromhex(salts[name]) + path.read_bytes()).hexdigest()
        assert sent[f"{name}_hash"] == expected == document["receipt"][f"{name}_hash"]
        assert salts[name].encode() not in body, "a salt is never sent"
    assert b"salt" not in body
    # The create response body is kept byte for byte in front of the added members.
    assert set(document) == {"ok", "receipt", "chain", "quota", "service_url", "salts"}


def test_submit_without_salt_saves_the_service_url_only(
    service: FakeService, url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.json"
    _, document = submitted(capsys, {"input": files["input"]}, "--base-url", url, "--save", target)
    assert document["service_url"] == url and "salts" not in document
    assert document["receipt"]["input_hash"] == hash_file(files["input"])


def test_submit_uses_service_base_url_and_reports_an_unreachable_service(
    url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_BASE_URL", url)
    _, document = submitted(capsys, {"input": files["input"]})
    assert document["service_url"] == url
    code, out = run(capsys, "submit", "--input", files["input"], "--base-url", UNREACHABLE)
    assert code == 2 and "cannot reach" in out


def test_submit_reports_a_service_error_without_a_json_body(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(502)
            self.send_header("Content-Length", "24")
            self.end_headers()
            self.wfile.write(b"<html>bad gateway</html>")

        def log_message(self, *args: Any) -> None:
            pass

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gateway)) as base:
        code, out = run(capsys, "submit", "--input", files["input"], "--base-url", base)
    # A gateway's 502 is no answer of the service: it could not ask (2), and may try again.
    assert code == 2 and "502" in out and "without an error body" in out


# --- verify: which service, which keys, which files -------------------------------------------


def test_verify_talks_to_the_saved_service_url(
    service: FakeService,
    url: str,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved, _ = submitted(capsys, files, "--salt", "--base-url", url)
    monkeypatch.setenv("SERVICE_BASE_URL", UNREACHABLE)  # the saved URL comes first
    service.requests.clear()
    code, out = run(capsys, "verify", saved, *file_options(files))
    assert code == 0, out
    assert service.paths() == ["/v1/public-key"]
    assert f"from {url}/v1/public-key: the service's word" in out
    assert out.count("[ok]   local file hash (salted)") == 4, "each file hashed with its saved salt"
    # --base-url comes before the saved URL.
    code, out = run(capsys, "verify", saved, "--base-url", UNREACHABLE)
    assert code == 2 and f"cannot reach {UNREACHABLE}" in out


@pytest.mark.parametrize("name", ["params", "env", "output", "input"])
def test_verify_checks_every_file_hash_it_is_given(
    url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    saved, _ = submitted(capsys, files, "--base-url", url)
    other = tmp_path / "other.bin"
    other.write_bytes(b"not the file that was submitted")
    code, out = run(capsys, "verify", saved, *file_options({**files, name: other}))
    assert code == 1, out
    failed = [line for line in out.splitlines() if "[FAIL]" in line]
    assert len(failed) == 1 and f"does NOT match {name}_hash" in failed[0]
    assert "Verdict: INVALID" in out


def test_verify_salt_option_overrides_the_saved_input_salt(
    url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    saved, document = submitted(capsys, files, "--salt", "--base-url", url)
    keys = ("--keys", keys_file(saved.parent))
    assert run(capsys, "verify", saved, *keys, "--input", files["input"], "--salt", document["salts"]["input"])[0] == 0
    assert run(capsys, "verify", saved, *keys, "--input", files["input"], "--salt", "00" * 16)[0] == 1
    broken = saved.parent / "broken.json"
    broken.write_bytes(orjson.dumps({**document, "salts": {"input": "not hex"}}))
    code, out = run(capsys, "verify", broken, *keys, "--input", files["input"])
    assert code == 2 and "not hexadecimal" in out


def test_keys_with_base_url_pins_the_keys_and_walks_the_chain_on_the_service(
    service: FakeService, url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    submitted(capsys, {"input": files["input"]}, "--base-url", url, "--save", tmp_path / "first.json")
    saved, _ = submitted(capsys, {"input": files["output"]}, "--base-url", url, "--save", tmp_path / "second.json")
    service.requests.clear()
    pinned = keys_file(tmp_path)
    code, out = run(capsys, "verify", saved, "--keys", pinned, "--base-url", url, "--chain")
    assert code == 0, out
    assert service.paths() == [f"/v1/receipts/{service.receipts[0]['receipt_hash']}"], "the chain only: no keys"
    assert f"from {pinned}: pinned by you" in out and "chain: 1 earlier link(s) checked" in out
    stranger = keys_file(tmp_path, load_key_ring(new_key_set("svc-1")))
    code, out = run(capsys, "verify", saved, "--keys", stranger, "--base-url", url, "--chain")
    assert code == 1, "the service's keys are not used when keys are pinned"
    assert "[FAIL] Ed25519 signature" in out


# --- verify --trust-root ------------------------------------------------------------------------


def test_trust_root_verifies_a_receipt_offline(
    service: FakeService, url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved, _ = submitted(capsys, files, "--salt", "--base-url", url)
    root = trust_root_file(tmp_path, url, log=pinned_log(note.Signer.generate("fake.example/log")))
    service.requests.clear()
    code, out = run(capsys, "verify", saved, "--trust-root", root, *file_options(files))
    # The trust root pins a log: offline, a receipt without its proof is never VALID.
    assert code == 1, out
    assert service.requests == [], "offline: not one request"
    assert f"from the trust root {root}: pinned by you" in out
    assert "Verdict: NOT VERIFIED (no_log_proof)" in out and "--online" in out
    code, out = run(capsys, "verify", saved, "--trust-root", root, "--no-log", *file_options(files))
    assert code == 0 and "Verdict: VALID (signature_only)" in out, out
    assert service.requests == []
    # A receipt re-signed by a stranger's key under the same kid: the pinned key refutes it.
    document = orjson.loads(saved.read_bytes())
    stranger = load_key_ring(new_key_set(document["receipt"]["sig_kid"]))
    document["receipt"]["signature"] = stranger.sign(document["receipt"]["receipt_hash"])
    forged = tmp_path / "forged.json"
    forged.write_bytes(orjson.dumps(document))
    code, out = run(capsys, "verify", forged, "--trust-root", root)
    assert code == 1 and "Verdict: INVALID" in out
    assert service.requests == []


def test_trust_root_refuses_a_request_it_would_need(
    url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved, _ = submitted(capsys, {"input": files["input"]}, "--base-url", url)
    root = trust_root_file(tmp_path, url)
    code, out = run(capsys, "verify", saved, "--trust-root", root, "--chain")
    assert code == 2 and "--online" in out


def test_online_adds_the_existence_check_and_keeps_the_pinned_keys(
    service: FakeService, url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved, _ = submitted(capsys, {"input": files["input"]}, "--base-url", url)
    root = trust_root_file(tmp_path, url)
    service.requests.clear()
    code, out = run(capsys, "verify", saved, "--trust-root", root, "--online")
    assert code == 0, out
    receipt_id = service.receipts[0]["receipt_id"]
    assert service.paths() == [f"/v1/receipts/{receipt_id}"], "no key is fetched: the trust root's stay"
    assert "[ok]   the service" in out and "answers it" in out

    service.deleted.add(receipt_id)
    code, out = run(capsys, "verify", saved, "--trust-root", root, "--online")
    assert code == 1 and "does NOT have it (404)" in out

    # The service's keys changing does not change the verdict: the pinned keys decide.
    impostor = FakeService(load_key_ring(new_key_set("svc-1")))
    impostor.receipts = service.receipts
    with fake_service(impostor) as other:
        code, out = run(capsys, "verify", saved, "--trust-root", root, "--online", "--base-url", other)
    assert code == 0, out
    assert impostor.paths() == [f"/v1/receipts/{receipt_id}"]

    code, out = run(capsys, "verify", saved, "--trust-root", trust_root_file(tmp_path, UNREACHABLE), "--online")
    assert code == 2 and f"cannot reach {UNREACHABLE}" in out


def test_trust_root_usage_errors_exit_2(
    url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved, _ = submitted(capsys, {"input": files["input"]}, "--base-url", url)
    root = trust_root_file(tmp_path, url)
    code, out = run(capsys, "verify", saved, "--online")
    assert code == 2 and "--trust-root" in out
    malformed = tmp_path / "malformed.json"
    malformed.write_bytes(b'{"version": 1}')
    code, out = run(capsys, "verify", saved, "--trust-root", malformed)
    assert code == 2 and "malformed" in out and "service_url" in out
    # A version 1 trust root pins the keys itself: --keys beside it is refused (it goes with a
    # version 2 trust root, which pins roots).
    code, out = run(capsys, "verify", saved, "--trust-root", root, "--keys", keys_file(tmp_path))
    assert code == 2 and "version 1" in out and "--keys" in out


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("this verification must not touch the network")

    monkeypatch.setattr(http_client.HttpClient, "request", refuse)


def chain_bundle(service: FakeService) -> dict[str, Any]:
    first = service.create({"input_hash": "sha256:" + "1" * 64})
    second = service.create({"input_hash": "sha256:" + "2" * 64})
    return {
        "format": BUNDLE_FORMAT,
        "version": 1,  # its keys carry no certificates: a version 1 bundle
        "created_at": "2026-01-01T00:00:00.000Z",
        "service": UNREACHABLE,
        "receipt": second,
        "keys": service.keyring.public_keys_json(),
        "chain": [first],
        "chain_complete": True,
    }


def test_trust_root_verifies_a_bundle_offline_and_refutes_a_forged_one(
    service: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_network(monkeypatch)
    genuine = chain_bundle(service)
    root = str(trust_root_file(tmp_path, UNREACHABLE))
    path = tmp_path / "bundle.json"
    path.write_bytes(orjson.dumps(genuine))
    report = run_verify(VerifyOptions(receipt_path=str(path), trust_root_path=root)).to_dict()
    assert report["error"] is None and report["ok"] is True, report
    assert report["checks"] == {"bundle_keys": True, "receipt_hash_recompute": True, "signature": True, "chain": True}
    assert report["notes"] == ["the trust root pins no transparency log: no log check"]

    forged = orjson.loads(orjson.dumps(genuine))
    stranger = load_key_ring(new_key_set("svc-1"))
    receipt = forged["receipt"]
    receipt["input_hash"] = "sha256:" + "3" * 64
    receipt["receipt_hash"] = recompute_hash_or_none(receipt)
    receipt["signature"] = stranger.sign(receipt["receipt_hash"])
    forged["chain"][0]["signature"] = stranger.sign(forged["chain"][0]["receipt_hash"])
    forged["keys"] = stranger.public_keys_json()
    path.write_bytes(orjson.dumps(forged))
    report = run_verify(VerifyOptions(receipt_path=str(path), trust_root_path=root)).to_dict()
    assert report["error"] is None and report["ok"] is False
    assert report["checks"]["bundle_keys"] is False and report["checks"]["signature"] is False
    # The same forgery unpinned is self-consistent: only the pinned keys tell.
    report = run_verify(VerifyOptions(receipt_path=str(path))).to_dict()
    assert report["keys_pinned"] is False and all(report["checks"].values())


async def test_trust_root_checks_a_bundles_log_proof_and_quorum_offline(
    store: Any, log_store: Any, receipt_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from execution_proof.kv.accounts import create_project_key
    from tests.test_log import ORIGIN, integrator, issue, log_app

    signer = note.Signer.generate(ORIGIN)
    app = log_app(store, log_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="trust", plan="pro")
    worker = await integrator(store, log_store, signer)
    [receipt] = await issue(app, key, ["one"])
    await worker.step(force=True)
    _, response = await app.asgi_client.get(f"/v1/receipts/{receipt['receipt_id']}/bundle")
    assert response.status == 200 and isinstance(response.json.get("log"), dict), response.text
    path = tmp_path / "bundle.json"
    path.write_bytes(response.body)

    _, published = await app.asgi_client.get("/v1/public-key")
    no_network(monkeypatch)
    public = load_key_ring(published.json)  # pinned as keys: a version 1 trust root
    root = trust_root_file(tmp_path, UNREACHABLE, public, log=pinned_log(signer))
    report = run_verify(VerifyOptions(receipt_path=str(path), trust_root_path=str(root))).to_dict()
    assert report["error"] is None and report["ok"] is True, report
    assert report["checks"]["log_inclusion"] is True and report["checks"]["log_quorum"] is True

    other_log = trust_root_file(tmp_path, UNREACHABLE, public, log=pinned_log(note.Signer.generate(ORIGIN)))
    report = run_verify(VerifyOptions(receipt_path=str(path), trust_root_path=str(other_log))).to_dict()
    assert report["error"] is None and report["ok"] is False
    assert report["checks"]["log_inclusion"] is False, "a checkpoint not signed by the pinned log key"


# --- start-up -------------------------------------------------------------------------------------


def imported(*argv: Any) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "service.py", *map(str, argv)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "execution_proof.cli.main" in names, done.stderr[-2000:]
    return names


HEAVY = {"http.client", "ssl", "asn1crypto", "cryptography.x509", "execution_proof.client.http"}


def test_hash_and_offline_verify_load_only_what_they_use(tmp_path: Path) -> None:
    loaded = imported("hash", "README.md")
    assert not loaded & {
        "execution_proof.client.verifying",
        "execution_proof.client.service",
        "execution_proof.receipts.model",
    }
    assert not loaded & HEAVY

    service = FakeService()
    receipt = service.create({"input_hash": "sha256:" + "4" * 64})
    saved = tmp_path / "receipt.json"
    saved.write_bytes(orjson.dumps({"receipt": receipt, "service_url": UNREACHABLE}))
    loaded = imported("verify", saved, "--keys", keys_file(tmp_path))
    assert "execution_proof.client.verifying" in loaded
    assert not loaded & (HEAVY | {"execution_proof.client.log_checks"}), sorted(loaded & HEAVY)
    assert run_cli("verify", str(saved), "--keys", str(keys_file(tmp_path))).returncode == 0


# --- end to end: the real service with its log, the trust-root verb --------------------------------


@pytest.mark.slow
def test_submit_then_verify_against_a_trust_root_of_the_real_service(redis_server: Any, tmp_path: Path) -> None:
    import redis

    from tests.receipt_keys import TEST_ROOT_ENV
    from tests.servers import ServicePool, WorkerProcess, create_key_cli, wait_until

    signer = note.Signer.generate("client.example/log")
    env = {
        "LOG_SIGNING_KEY": signer.encode(),
        "LOG_ORIGIN": "client.example/log",
        "LOG_STORE": f"file://{tmp_path}/log",
    }
    redis.Redis.from_url(redis_server.url).flushall()
    worker = WorkerProcess(tmp_path, {"REDIS_URL": redis_server.url, **TEST_ROOT_ENV, **env})
    try:
        with ServicePool(tmp_path) as pool:
            base = pool.start(redis_url=redis_server.url, env=env).base_url
            key = create_key_cli(redis_server.url, project="client-verbs", plan="pro")
            data = tmp_path / "input.bin"
            data.write_bytes(b"built artefact\n")
            done = run_cli(
                "submit",
                "--input",
                str(data),
                "--salt",
                env={"SERVICE_API_KEY": key["api_key"], "SERVICE_BASE_URL": base},
            )
            assert done.returncode == 0, done.stdout + done.stderr
            saved = Path(str(data) + ".receipt.json")
            document = orjson.loads(saved.read_bytes())
            assert document["service_url"] == base and set(document["salts"]) == {"input"}
            receipt_id = document["receipt"]["receipt_id"]
            client = http_client.HttpClient()
            wait_until(
                lambda: client.get(f"{base}/v1/receipts/{receipt_id}/log-proof").status == 200, 20, "the log proof"
            )
            root = tmp_path / "root.json"
            made = run_cli("trust-root", "--base-url", base, "--out", str(root))
            assert made.returncode == 0, made.stdout + made.stderr

            done = run_cli("verify", str(saved), "--input", str(data), "--trust-root", str(root))
            assert done.returncode == 1, done.stdout + done.stderr
            assert "(salted)" in done.stdout and "Verdict: NOT VERIFIED (no_log_proof)" in done.stdout
            done = run_cli("verify", str(saved), "--input", str(data), "--trust-root", str(root), "--online")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "answers it" in done.stdout and "transparency log: in the log at index" in done.stdout

            bundle = tmp_path / "bundle.json"
            bundle.write_bytes(client.get(f"{base}/v1/receipts/{receipt_id}/bundle").body)
            client.close()
        # The service is gone: the bundle still verifies against the trust root, log included.
        done = run_cli("verify", str(bundle), "--trust-root", str(root), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        report = orjson.loads(done.stdout)
        assert report["checks"]["log_inclusion"] is True and report["checks"]["log_quorum"] is True
        gone = run_cli("verify", str(saved), "--trust-root", str(root), "--online")
        assert gone.returncode == 2 and "cannot reach" in gone.stdout
    finally:
        worker.stop()
