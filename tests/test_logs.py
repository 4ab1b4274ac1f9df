"""Structured logs (docs/observability.md): one JSON line per request, on stderr, no secrets.

The end-to-end test runs a real service with a real Redis through a scenario of mixed
requests (creates, a replay, 401s, 404s, a 405, a 413, a 429, a signed webhook, metrics
scrapes), then parses every line the service printed: each is a JSON object, each request
has exactly one request line whose ``request_id`` is its ``X-Request-Id``, authenticated
requests name their plan and project, and no secret appears anywhere.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import redis

from execution_proof.receipts.encoding import b64url_encode
from execution_proof.runtime import logs
from execution_proof.runtime.settings import ClientIpConfig, ConfigError, Settings, load_settings
from execution_proof.usecases.limiting import Caller
from execution_proof.web import access_log
from execution_proof.web.app import create_app
from tests.conftest import TEST_ROOT, auth, hash_of
from tests.fake_providers import checkout_event, event_bytes, signed_webhook
from tests.servers import RAISED_LIMITS, ServicePool, create_key_cli, run_cli, service_pool_fixture

service_factory = service_pool_fixture()
TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
METRICS_TOKEN = "metrics-token-never-logged-4f1c9e"
WEBHOOK_SECRET = "whsec_never_logged_7d2a81"
REQUEST_FIELDS = {
    "ts", "level", "logger", "msg", "pid", "event", "request_id", "method", "route", "path",
    "status", "duration_ms", "plan", "project_id", "client_ip",
}  # fmt: skip


def private_seed_forms(seed: bytes) -> list[str]:
    """A private key (a 32-byte Ed25519 seed) as base64url and hex (both cases)."""
    return [b64url_encode(seed), seed.hex(), seed.hex().upper()]


# --- configuration and formatting ------------------------------------------------------------


def test_log_format_defaults_and_values() -> None:
    assert load_settings({}).log_format == "text"  # the embedded demo prints readable lines
    assert load_settings({"REDIS_URL": "redis://127.0.0.1:1/0"}).log_format == "json"
    assert load_settings({"REDIS_URL": "redis://127.0.0.1:1/0", "LOG_FORMAT": "TEXT"}).log_format == "text"
    assert load_settings({"LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="LOG_FORMAT"):
        load_settings({"LOG_FORMAT": "xml"})


def test_json_formatter_writes_one_object_per_record() -> None:
    formatter = logs.JsonFormatter()
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = logging.LogRecord("eps.errors", logging.ERROR, __file__, 1, "failed %s", ("x",), sys.exc_info())
    line = formatter.format(record)
    assert "\n" not in line
    entry = orjson.loads(line)
    assert entry["level"] == "error" and entry["logger"] == "eps.errors" and entry["msg"] == "failed x"
    assert TS.match(entry["ts"]), entry["ts"]
    assert "ValueError: boom" in entry["exc"]
    record = logging.LogRecord("eps.request", logging.INFO, __file__, 1, "request", (), None)
    record.fields = {"event": "request", "status": 201, "plan": None}
    assert orjson.loads(formatter.format(record))["status"] == 201


def test_format_ts_is_utc_with_milliseconds() -> None:
    assert logs.format_ts(0.0) == "1970-01-01T00:00:00.000Z"
    assert logs.format_ts(1_795_000_000.5) == "2026-11-18T11:06:40.500Z"


def test_paths_are_cut_and_key_shapes_masked() -> None:
    key = "eps_" + "Ab-_" * 10 + "xyz"
    assert access_log.mask_path(f"/v1/receipts/{key}") == "/v1/receipts/eps_[masked]"
    assert access_log.mask_path("/v1/receipts/rcpt_01ABC") == "/v1/receipts/rcpt_01ABC"
    long = access_log.mask_path("/" + "a" * 5000)
    assert len(long) == access_log.PATH_LIMIT + 3 and long.endswith("...")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``configure_logging`` changes process-wide state: put it back after the test."""
    root = logging.getLogger()
    saved_root = (list(root.handlers), root.level)
    saved = {
        name: (list(logging.getLogger(name).handlers), logging.getLogger(name).propagate) for name in logs.SANIC_LOGGERS
    }
    saved_json = logs.json_logging()
    saved_direct = logs._Direct.handler
    yield
    logs._Direct.handler = saved_direct
    root.handlers[:] = saved_root[0]
    root.setLevel(saved_root[1])
    for name, (handlers, propagate) in saved.items():
        logging.getLogger(name).handlers[:] = handlers
        logging.getLogger(name).propagate = propagate
    logs._state["json"] = saved_json


def test_json_mode_sends_every_logger_through_one_formatter(
    restore_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from execution_proof.runtime.settings import warn

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.configure_logging("json")
    logs.configure_logging("json")  # again: still one handler, no duplicate lines
    logging.getLogger("sanic.server").info("Worker ready [%s]", 1)
    logging.getLogger("eps.audit").warning("receipt deleted")
    logging.getLogger("rq.worker").info("job done")
    warn("no RECEIPT_ROOT_KEY: something to fix")
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["logger"], e["msg"]) for e in lines] == [
        ("sanic.server", "Worker ready [1]"),
        ("eps.audit", "receipt deleted"),
        ("rq.worker", "job done"),
        ("eps", "no RECEIPT_ROOT_KEY: something to fix"),
    ]
    assert lines[-1]["level"] == "warning"


class _CountingRaw(io.RawIOBase):
    """An unbuffered byte stream (stderr under ``PYTHONUNBUFFERED=1``) that counts its writes."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.chunks.append(bytes(data))
        return len(data)


class _FakeRequest:
    def __init__(self, path: str) -> None:
        self.ctx = type("Ctx", (), {"caller": Caller(None, "192.0.2.1")})()
        self.method = "GET"
        self.path = path
        self.headers: dict[str, str] = {}


def test_request_lines_of_one_loop_turn_leave_in_one_write_even_unbuffered(
    restore_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    raw = _CountingRaw()
    stream = io.TextIOWrapper(raw, write_through=True)  # type: ignore[arg-type]
    monkeypatch.setattr(sys, "stderr", stream)
    logs.configure_logging("json")
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if isinstance(h, logs._OurHandler)]  # not pytest's capture
    ip_config = ClientIpConfig()

    async def one_turn() -> None:
        for n in range(5):
            access_log.log_request(
                _FakeRequest(f"/v1/receipts/rcpt_{n}"), "receipts.get_receipt", 200, 0.001, ip_config
            )
        assert raw.chunks == []  # nothing written during the turn
        await asyncio.sleep(0)  # the turn ends: the flush runs
        await asyncio.sleep(0)
        assert len(raw.chunks) == 1
        access_log.log_request(_FakeRequest("/v1/receipts/rcpt_5"), "receipts.get_receipt", 200, 0.001, ip_config)
        logging.getLogger("eps.audit").warning("receipt deleted")  # another record: after the pending line

    asyncio.run(one_turn())
    lines = [orjson.loads(line) for line in b"".join(raw.chunks).splitlines()]
    assert [e.get("path", e["msg"]) for e in lines] == [
        *(f"/v1/receipts/rcpt_{n}" for n in range(6)),
        "receipt deleted",
    ]
    assert len(raw.chunks[0].splitlines()) == 5


def test_text_mode_is_readable(restore_logging: None, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.configure_logging("text")
    record_fields = {"event": "request", "method": "GET", "status": 200, "plan": None}
    logging.getLogger("eps.request").info("request", extra={"fields": record_fields})
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("INFO eps.request request method=GET status=200")


# --- in process: the request record --------------------------------------------------------


async def test_request_records_in_process(
    client: Any, api_key: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="eps.request")
    _, created = await client.post(
        "/v1/receipts?trace=1", content=orjson.dumps({"input_hash": hash_of("logged")}), headers=auth(api_key)
    )
    _, refused = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("x")}), headers=auth("eps_" + "B" * 43)
    )
    _, missing = await client.get("/nowhere")
    records = [r for r in caplog.records if r.name == "eps.request"]
    assert len(records) == 3
    by_id = {r.fields["request_id"]: r.fields for r in records}  # type: ignore[attr-defined]
    good = by_id[created.headers["x-request-id"]]
    assert good["status"] == 201 and good["route"] == "receipts.create_receipt"
    assert good["path"] == "/v1/receipts" and good["method"] == "POST"
    assert (good["plan"], good["project_id"]) == ("free", api_key["project_id"])
    assert good["duration_ms"] > 0
    bad = by_id[refused.headers["x-request-id"]]
    assert (bad["status"], bad["plan"], bad["project_id"]) == (401, None, None)
    assert by_id[missing.headers["x-request-id"]]["route"] == "unmatched"
    assert api_key["api_key"] not in caplog.text


async def test_request_log_uses_the_configured_client_address(
    store: Any, receipt_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        redis_url="redis://injected",
        receipt_root=receipt_root,
        client_ip=ClientIpConfig(real_ip_header="Fly-Client-IP"),
    )
    client = create_app(settings, store=store).asgi_client
    caplog.set_level(logging.INFO, logger="eps.request")
    await client.get("/health", headers={"Fly-Client-IP": "203.0.113.9"})
    (record,) = [r for r in caplog.records if r.name == "eps.request"]
    assert record.fields["client_ip"] == "203.0.113.9"  # type: ignore[attr-defined]


# --- a live service: every line parsed -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.real_redis
def test_live_service_logs_one_json_line_per_request_and_no_secret(
    service_factory: ServicePool, redis_url: str
) -> None:
    limits = {**RAISED_LIMITS, "ip_per_minute": {**RAISED_LIMITS["ip_per_minute"], "public_key": 2}}
    service = service_factory.start(
        workers=1,
        redis_url=redis_url,
        limits=limits,
        env={"METRICS_TOKEN": METRICS_TOKEN, "PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET},
    )
    key = create_key_cli(redis_url, project="logged", plan="basic")
    api_key = key["api_key"]
    bearer = {"Authorization": f"Bearer {api_key}"}
    event = event_bytes(checkout_event("cs_logged_1", plan="basic", created=int(time.time())))
    webhook_headers = signed_webhook(event, [WEBHOOK_SECRET], int(time.time()))
    signature = webhook_headers["Payment-Signature"]
    sent: list[tuple[httpx.Response, int, str, bool]] = []  # response, status, route, authenticated

    with httpx.Client(base_url=service.base_url, timeout=10) as http:

        def expect(response: httpx.Response, status: int, route: str, authenticated: bool = False) -> None:
            assert response.status_code == status, response.text
            sent.append((response, status, route, authenticated))

        body = {"input_hash": hash_of("live-1")}
        expect(http.post("/v1/receipts", json=body, headers=bearer), 201, "receipts.create_receipt", True)
        expect(http.post("/v1/receipts", json=body, headers=bearer), 200, "receipts.create_receipt", True)
        expect(http.get("/v1/usage", headers=bearer), 200, "usage.usage", True)
        expect(
            http.get("/v1/receipts", params={"input_hash": hash_of("live-1")}, headers=bearer),
            200,
            "search.search_receipts",
            True,
        )
        wrong = {"Authorization": "Bearer eps_" + "W" * 43}
        expect(http.post("/v1/receipts", json=body, headers=wrong), 401, "receipts.create_receipt")
        expect(http.post("/v1/receipts", json=body, headers={"Authorization": api_key}), 401, "receipts.create_receipt")
        expect(http.get("/no/such/path?token=abc"), 404, "unmatched")
        expect(http.get(f"/v1/receipts/{api_key}"), 404, "receipts.get_receipt")
        expect(http.delete("/health"), 405, "unmatched")
        # Headers over Sanic's limit fail before the request is even parsed: still one line.
        expect(http.get("/health", headers={"X-Filler": "f" * 70_000}), 413, "unmatched")
        oversized = b'{"input_hash": "' + b"a" * 20_000 + b'"}'
        big = http.post("/v1/receipts", content=oversized, headers={**bearer, "Content-Type": "application/json"})
        expect(big, 413, "receipts.create_receipt")
        malformed = {**bearer, "Content-Type": "application/json"}
        expect(http.post("/v1/receipts", content=b"{not json", headers=malformed), 400, "receipts.create_receipt", True)
        for status in (200, 200, 429):
            expect(http.get("/v1/public-key"), status, "info.public_key")
        expect(http.post("/v1/webhooks/payment", content=event, headers=webhook_headers), 200, "claims.payment_webhook")
        expect(http.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}), 200, "metrics")
        expect(http.get("/metrics", headers={"Authorization": "Bearer not-it"}), 404, "metrics")

    ids = [response.headers["x-request-id"] for response, *_ in sent]
    assert len(set(ids)) == len(ids)

    def request_lines() -> list[dict[str, Any]]:
        return [e for e in map(orjson.loads, service.stderr().splitlines()) if e.get("event") == "request"]

    deadline = time.monotonic() + 10
    while not set(ids) <= {e["request_id"] for e in request_lines()} and time.monotonic() < deadline:
        time.sleep(0.05)
    service.stop()

    printed = service.stdout() + service.stderr()
    entries = []
    for line in printed.splitlines():
        entry = orjson.loads(line)  # every line of the service is one JSON object
        assert isinstance(entry, dict), line
        assert TS.match(entry["ts"]) and entry["level"] and entry["logger"] and "msg" in entry, entry
        entries.append(entry)
    assert not service.stdout().strip(), "logs go to stderr; stdout stays for printed output"
    lines = [e for e in entries if e.get("event") == "request"]
    # The only other requests were start()'s health polls.
    assert {e["route"] for e in lines if e["request_id"] not in ids} <= {"info.health"}
    for (response, status, route, authenticated), request_id in zip(sent, ids, strict=True):
        (line,) = [e for e in lines if e["request_id"] == request_id]
        assert set(line) == REQUEST_FIELDS, line
        assert (line["level"], line["msg"], line["logger"]) == ("info", "request", "eps.request")
        assert line["status"] == status and line["route"] == route, line
        if route == "unmatched" and status == 413:  # never parsed: Sanic's placeholder request
            assert (line["method"], line["path"], line["client_ip"]) == ("NONE", "*", "unknown"), line
        else:
            assert line["method"] == response.request.method
            assert line["path"] == response.request.url.path.replace(api_key, "eps_[masked]")
            assert line["client_ip"] == "127.0.0.1"
        assert "?" not in line["path"]
        assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
        if authenticated:
            assert (line["plan"], line["project_id"]) == ("basic", key["project_id"]), line
        else:
            assert (line["plan"], line["project_id"]) == (None, None), line
    assert any(e["logger"] == "sanic.server" and "Worker ready" in e["msg"] for e in entries)

    # The operator's audit record goes through the same formatter.
    receipt_id = sent[0][0].json()["receipt"]["receipt_id"]
    deleted = run_cli("receipts", "delete", receipt_id, "--reason", "a test", env={"REDIS_URL": redis_url})
    assert deleted.returncode == 0, deleted.stderr
    (audit,) = [orjson.loads(line) for line in deleted.stderr.splitlines()]
    assert (audit["logger"], audit["level"], audit["event"]) == ("eps.audit", "warning", "receipt_deleted")
    assert (audit["receipt_id"], audit["reason"]) == (receipt_id, "a test")

    v1 = signature.split("v1=", 1)[1]
    secrets = [api_key, f"Bearer {api_key}", METRICS_TOKEN, WEBHOOK_SECRET, signature, v1]
    secrets += private_seed_forms(TEST_ROOT.seed)  # the service's receipt root
    for secret in secrets:
        assert secret not in printed, f"a secret ({secret[:6]}...) is in the service's output"
    assert "W" * 43 not in printed and "not-it" not in printed and "token=abc" not in printed


def test_request_lines_skip_the_logging_machinery_with_the_same_fields(
    restore_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In JSON mode a request line is written straight to stderr's bytes, exactly what the
    formatter writes; with any other handler present (a capture), it goes through logging."""
    from types import SimpleNamespace

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    logs.configure_logging("json")
    ctx = SimpleNamespace(request_id="req_test", caller=Caller(None, "203.0.113.9", "pro", "prj_x"))
    request = SimpleNamespace(ctx=ctx, method="GET", path="/v1/receipts/eps_" + "k" * 30)
    access_log.log_request(request, "receipts.get_receipt", 200, 0.0012345, ClientIpConfig())
    direct = raw.getvalue()
    records: list[logging.LogRecord] = []
    capture = logging.Handler()
    capture.emit = records.append  # type: ignore[method-assign]
    logging.root.addHandler(capture)
    try:
        access_log.log_request(request, "receipts.get_receipt", 200, 0.0012345, ClientIpConfig())
    finally:
        logging.root.removeHandler(capture)
    through_logging = raw.getvalue()[len(direct) :]
    assert len(records) == 1, "another handler sees the line: it went through logging"
    assert direct.endswith(b"\n") and direct.count(b"\n") == 1
    fast, slow = orjson.loads(direct), orjson.loads(through_logging)
    assert TS.match(fast.pop("ts")) and TS.match(slow.pop("ts"))
    assert list(fast.items()) == list(slow.items())
    assert fast["path"] == "/v1/receipts/eps_[masked]" and fast["duration_ms"] == 1.234


@pytest.mark.slow
def test_a_client_that_hangs_up_mid_request_is_recorded_as_499_not_as_a_server_error(
    service_factory: ServicePool, redis_url: str
) -> None:
    """Sanic cancels the handler of a request whose connection is lost. That was rendered as an
    unhandled 500 with an error record: a 5xx alert for every impatient client. Redis is
    paused for writes so the create is surely in flight when the client hangs up."""
    service = service_factory.start(workers=1, redis_url=redis_url, limits=RAISED_LIMITS)
    api_key = create_key_cli(redis_url, project="hangs-up", plan="pro")["api_key"]
    body = orjson.dumps({"input_hash": hash_of("hangs-up")})
    target = urlsplit(service.base_url)
    request = (
        f"POST /v1/receipts HTTP/1.1\r\nHost: {target.netloc}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    client = redis.Redis.from_url(redis_url)
    try:
        client.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        with socket.create_connection((target.hostname, target.port), timeout=5) as sock:
            sock.sendall(request)
        (line,) = [
            orjson.loads(m.group(0))
            for m in service.wait_for_output(r'\{[^\n]*"route":"receipts.create_receipt"[^\n]*\}', timeout=10)
        ]
    finally:
        client.execute_command("CLIENT", "UNPAUSE")
        client.close()
    assert line["status"] == 499, line
    assert "RequestCancelled" not in service.stderr()
    assert not [e for e in map(orjson.loads, service.stderr().splitlines()) if e.get("level") == "error"]


# --- a client's bad request is never an error-level record ------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("get", "/static/..%2fweb%2fconfig.py", 404, "not_found"),
        ("get", "/static/%2e%2e/runtime/settings.py", 404, "not_found"),
        ("get", "/static/no-such-file.js", 404, "not_found"),
        ("get", "/static/..%2f..%2fetc%2fpasswd", 404, "not_found"),
        ("delete", "/static/verify.js", 405, "method_not_allowed"),
        ("patch", "/v1/receipts", 405, "method_not_allowed"),
    ],
)
async def test_a_clients_bad_request_writes_no_error_record(
    client: Any, caplog: pytest.LogCaptureFixture, method: str, path: str, status: int, code: str
) -> None:
    caplog.set_level(logging.DEBUG)
    _, response = await getattr(client, method)(path)
    assert response.status_code == status
    body = orjson.loads(response.body)
    assert body["error"]["code"] == code and body["request_id"] == response.headers["x-request-id"]
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_sanic_records_never_carry_a_query_string(settings: Settings, store: Any) -> None:
    """Sanic's own records name a request's full URL (a client that hangs up, an error
    handler that fails): the claim page's ``?session_id=`` would reach the log with them."""
    create_app(settings, store=store)  # installs the filters on Sanic's loggers
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    secret = "cs_live_a1B2c3D4e5F6g7H8"
    keep = Keep()
    for name in logs.SANIC_LOGGERS:
        logging.getLogger(name).addHandler(keep)
    try:
        url = f"http://127.0.0.1:8000/claim/success?session_id={secret}&x=1"
        logging.getLogger("sanic.root").info(f"Request: GET {url} stopped. Transport is closed.")
        logging.getLogger("sanic.error").error('Exception raised in exception handler "%s" for uri: %s', "h", repr(url))
        logging.getLogger("sanic.access").info("plain record with no query")
    finally:
        for name in logs.SANIC_LOGGERS:
            logging.getLogger(name).removeHandler(keep)
    messages = [record.getMessage() for record in seen]
    assert len(messages) == 3
    assert all(secret not in message for message in messages), messages
    assert "GET http://127.0.0.1:8000/claim/success?[query removed] stopped" in messages[0]
    assert messages[1].endswith("for uri: 'http://127.0.0.1:8000/claim/success?[query removed]'")
    assert messages[2] == "plain record with no query"
