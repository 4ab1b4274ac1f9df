"""Body limits and media types on a real socket, and the two start-up modes (docs/api.md, docs/limits.md).

The server runs as ``service.py serve`` on the session's real redis-server; requests go
over loopback, some as raw bytes so the framing (Content-Length or chunked) is exactly
what the test says. Every rejected request must leave Redis untouched.
"""

from __future__ import annotations

import re
import shlex
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.receipts.encoding import b64url_decode
from execution_proof.receipts.key_certificates import KeyVerdict
from execution_proof.receipts.signing import load_key_ring
from tests.conftest import RedisServer, hash_of
from tests.servers import (
    ServicePool,
    ServiceProcess,
    assert_error_body,
    create_key_cli,
    redis_snapshot,
    run_cli,
    service_pool_fixture,
)

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

CREATE_LIMIT = 16 * 1024
VERIFY_LIMIT = 8 * 1024


service_factory = service_pool_fixture()
module_services = service_pool_fixture("module")


@pytest.fixture(scope="module")
def service(module_services: ServicePool, redis_server: RedisServer) -> ServiceProcess:
    return module_services.start(workers=1, redis_url=redis_server.url)


@pytest.fixture(scope="module")
def key(service: ServiceProcess, redis_server: RedisServer) -> dict[str, Any]:
    return create_key_cli(redis_server.url, project="socket-limits", plan="pro")


@pytest.fixture
def http(service: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.base_url, timeout=10.0) as client:
        yield client


def bearer(key: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key['api_key']}"}


def padded_json(fields: dict[str, Any], size: int) -> bytes:
    """A valid JSON object of exactly ``size`` bytes: ``fields`` plus insignificant whitespace."""
    compact = orjson.dumps(fields)
    assert len(compact) <= size
    return compact[:-1] + b" " * (size - len(compact)) + b"}"


def raw_http(port: int, head: str, chunks: list[bytes]) -> tuple[int, dict[str, str], bytes]:
    """Send ``head`` and ``chunks`` as raw bytes; read the whole answer (the request asks to close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(head.encode("latin-1"))
            for chunk in chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything; the answer still counts
        received = b""
        try:
            while data := sock.recv(65536):
                received += data
        except ConnectionResetError:
            pass
    header_bytes, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = header_bytes.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def chunked(body: bytes, piece: int = 1024) -> list[bytes]:
    parts = [body[i : i + piece] for i in range(0, len(body), piece)]
    return [b"%x\r\n%s\r\n" % (len(part), part) for part in parts] + [b"0\r\n\r\n"]


def as_response(status: int, headers: dict[str, str], body: bytes) -> httpx.Response:
    return httpx.Response(status, headers=headers, content=body)


@pytest.mark.parametrize("size", [CREATE_LIMIT + 1, 20_000])
def test_create_over_16k_by_content_length_is_413(
    http: httpx.Client, key: dict[str, Any], redis_server: RedisServer, size: int
) -> None:
    body = padded_json({"input_hash": hash_of(f"too-big-{size}")}, size)
    before = redis_snapshot(redis_server.url)
    response = http.post("/v1/receipts", content=body, headers={**bearer(key), "Content-Type": "application/json"})
    assert_error_body(response, 413, "payload_too_large")
    assert redis_snapshot(redis_server.url) == before


def test_create_over_16k_chunked_is_413(
    service: ServiceProcess, key: dict[str, Any], redis_server: RedisServer
) -> None:
    body = padded_json({"input_hash": hash_of("too-big-chunked")}, CREATE_LIMIT + 1024)
    head = (
        "POST /v1/receipts HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{service.port}\r\n"
        f"Authorization: Bearer {key['api_key']}\r\n"
        "Content-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    )
    before = redis_snapshot(redis_server.url)
    status, headers, answer = raw_http(service.port, head, chunked(body))
    assert_error_body(as_response(status, headers, answer), 413, "payload_too_large")
    assert redis_snapshot(redis_server.url) == before


def test_small_chunked_create_is_accepted(service: ServiceProcess, key: dict[str, Any]) -> None:
    """Control for the chunked 413: the same framing under the limit issues a receipt."""
    body = padded_json({"input_hash": hash_of("small-chunked")}, 3000)
    head = (
        "POST /v1/receipts HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{service.port}\r\n"
        f"Authorization: Bearer {key['api_key']}\r\n"
        "Content-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    )
    status, _, answer = raw_http(service.port, head, chunked(body))
    assert status == 201, answer
    assert orjson.loads(answer)["receipt"]["input_hash"] == hash_of("small-chunked")


@pytest.mark.parametrize("size", [CREATE_LIMIT - 64, CREATE_LIMIT])
def test_create_up_to_16k_is_not_rejected_for_size(http: httpx.Client, key: dict[str, Any], size: int) -> None:
    body = padded_json({"input_hash": hash_of(f"fits-{size}"), "tags": {"workflow_stage": "size"}}, size)
    assert len(body) == size
    response = http.post("/v1/receipts", content=body, headers={**bearer(key), "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["receipt"]["input_hash"] == hash_of(f"fits-{size}")


def test_verify_over_8k_is_413_and_8k_is_accepted(
    http: httpx.Client, key: dict[str, Any], redis_server: RedisServer
) -> None:
    headers = {**bearer(key), "Content-Type": "application/json"}
    created = http.post("/v1/receipts", content=orjson.dumps({"input_hash": hash_of("verify-me")}), headers=headers)
    assert created.status_code == 201, created.text
    fields = {"receipt_id": created.json()["receipt"]["receipt_id"], "input_hash": hash_of("verify-me")}

    before = redis_snapshot(redis_server.url)
    too_big = http.post("/v1/verify", content=padded_json(fields, VERIFY_LIMIT + 1), headers=headers)
    body = assert_error_body(too_big, 413, "payload_too_large")
    assert redis_snapshot(redis_server.url) == before
    assert "8192" in body["error"]["message"] or body["error"].get("details", {}).get("limit_bytes") == VERIFY_LIMIT

    fits = http.post("/v1/verify", content=padded_json(fields, VERIFY_LIMIT), headers=headers)
    assert fits.status_code == 200, fits.text
    assert fits.json()["ok"] is True


@pytest.mark.parametrize("path", ["/v1/receipts", "/v1/verify"])
@pytest.mark.parametrize("content_type", ["text/plain", None], ids=["text-plain", "missing"])
def test_non_json_media_type_is_415(
    http: httpx.Client, key: dict[str, Any], redis_server: RedisServer, path: str, content_type: str | None
) -> None:
    headers = bearer(key)
    if content_type is not None:
        headers["Content-Type"] = content_type
    fields: dict[str, Any] = {"input_hash": hash_of(f"media-{path}-{content_type}")}
    if path == "/v1/verify":
        fields["receipt_id"] = "rcpt_01M7Y6M7AX1ZBC19T2TA4SAYHK"
    before = redis_snapshot(redis_server.url)
    response = http.post(path, content=orjson.dumps(fields), headers=headers)
    assert ("content-type" in response.request.headers) == (content_type is not None)
    assert_error_body(response, 415, "unsupported_media_type")
    assert redis_snapshot(redis_server.url) == before


def test_embedded_mode_prints_a_working_demo_key(service_factory: ServicePool) -> None:
    """No REDIS_URL, no RECEIPT_ROOT_KEY: an in-process store, an ephemeral root certifying the
    process's key, and a demo API key."""
    service = service_factory.start(workers=1, redis_url=None, receipt_root=None)
    (found,) = service.wait_for_output(r"API key:\s+(eps_[A-Za-z0-9_-]{43})\b")
    api_key = found.group(1)
    printed = service.stdout()
    assert "NOTHING SURVIVES A RESTART" in service.stderr()

    # Run the printed curl example (without needing curl): its URL, headers and body as printed.
    curl = re.search(r"curl .*?(?=\n\s*\n|\Z)", printed, re.S)
    assert curl, printed
    words = shlex.split(curl.group(0).replace("\\\n", " "))
    assert words[:4] == ["curl", "-s", "-X", "POST"]
    url = words[4]
    assert url == f"{service.base_url}/v1/receipts"
    header_words = [words[i + 1] for i, word in enumerate(words) if word == "-H"]
    headers = {name.strip(): value.strip() for name, value in (word.split(":", 1) for word in header_words)}
    assert headers["Authorization"] == f"Bearer {api_key}"
    data = words[words.index("-d") + 1]
    created = httpx.post(url, content=data.encode(), headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    receipt = created.json()["receipt"]
    assert receipt["input_hash"] == orjson.loads(data)["input_hash"]

    published = httpx.get(f"{service.base_url}/v1/public-key", timeout=10)
    assert published.status_code == 200
    body = published.json()
    assert body["active_kid"] == receipt["sig_kid"] and receipt["sig_kid"].startswith("key-")
    (root,) = body["roots"]  # the ephemeral root, which certified the process's key
    ring = load_key_ring(body).with_roots({root["kid"]: b64url_decode(root["public_key_base64url"])})
    assert ring.judge(receipt["sig_kid"], receipt["created_at"]) is KeyVerdict.OK
    assert ring.verify(receipt["sig_kid"], receipt["receipt_hash"], receipt["signature"])
    assert "RECEIPT_ROOT_KEY" in service.stderr()


def test_redis_without_a_receipt_root_refuses_to_start(redis_server: RedisServer) -> None:
    """With REDIS_URL and no RECEIPT_ROOT_KEY the server does not start: exit 2, one line
    naming RECEIPT_ROOT_KEY, nothing written to Redis."""
    before = redis_snapshot(redis_server.url)
    done = run_cli("serve", "--port", "0", env={"REDIS_URL": redis_server.url})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "RECEIPT_ROOT_KEY is not set" in done.stderr and "Traceback" not in done.stderr
    assert redis_snapshot(redis_server.url) == before
