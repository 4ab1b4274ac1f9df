"""Property-based fuzzing of every endpoint (docs/api.md, "Errors"): malformed bodies, odd media types,
odd paths and query strings, odd auth headers, and raw malformed HTTP on a real socket.

Properties, for every generated request:

- no response is a 5xx;
- every error response has the documented shape (``{"error": {"code", "message",
  "details"?}, "request_id"}``, ``X-Request-Id`` equal to ``request_id``), and no body
  carries a stack trace;
- a refused request writes nothing: the store is identical before and after, except for
  the per-address and per-key request counters (keys ``ip:``, ``m:``).

The in-process runs use the ASGI client on fakeredis with the per-address and per-key limits
raised (the checks still run, docs/limits.md), so the fuzzer reaches the parsers instead of 429s;
``test_429_keeps_the_error_shape`` proves the 429s have the same shape. The socket runs go to
a real ``service.py serve`` on the session's redis-server. Figures: docs/operations.md.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import fakeredis
import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import load_limits
from execution_proof.receipts.webhook_signature import signature_header
from execution_proof.runtime.settings import ClientIpConfig, Settings
from execution_proof.web.app import create_app
from tests.conftest import RedisServer, auth, hash_of
from tests.fake_providers import FakeHumanCheck
from tests.servers import RAISED_LIMITS, ServicePool, ServiceProcess, create_key_cli, service_pool_fixture

EXAMPLES = 200 * settings.default.max_examples // 100
SOCKET_EXAMPLES = 60 * settings.default.max_examples // 100
WEBHOOK_SECRET = "whsec_fuzz_secret_0123456789"
HUMAN_SECRET = "human-secret-fuzz"
COUNTER_PREFIXES = (b"ip:", b"m:")
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)

POST_ENDPOINTS = ["/v1/receipts", "/v1/verify", "/v1/claim", "/v1/claim/free", "/v1/webhooks/payment"]
WRITING_ON_SUCCESS = {"/v1/receipts", "/v1/claim", "/v1/claim/free", "/v1/webhooks/payment"}
FIELDS = {
    "/v1/receipts": [
        "input_hash",
        "output_hash",
        "params_hash",
        "env_hash",
        "code_ref",
        "run_id",
        "tags",
        "receipt_kind",
        "prev_receipt_hash",
        "project_id",
        "actor_id",
    ],
    "/v1/verify": ["receipt_id", "input_hash", "output_hash"],
    "/v1/claim": ["session_id"],
    "/v1/claim/free": ["turnstile_token"],
    "/v1/webhooks/payment": ["id", "type", "created", "data", "object"],
}


# --- what every response must look like ----------------------------------------------------


@dataclass
class Tally:
    requests: int = 0
    errors: int = 0
    successes: int = 0
    rate_limited: int = 0


TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def report_tally() -> Iterator[None]:
    """Print the module's figures at the end (``pytest -s``; docs/operations.md)."""
    yield
    print(
        f"\nfuzz: {TALLY.requests} requests, {TALLY.successes} 2xx/3xx, {TALLY.errors} errors "
        f"({TALLY.rate_limited} of them 429), 0 5xx"
    )


def check_response(status: int, headers: Any, content: bytes, what: str) -> None:
    """No 5xx, no stack trace, ``X-Request-Id`` present, errors in the documented shape."""
    TALLY.requests += 1
    assert status < 500, f"{what}: {status} {content[:500]!r}"
    assert b"Traceback" not in content, what
    assert b'File "' not in content, what
    request_id = headers.get("x-request-id")
    assert request_id, f"{what}: no X-Request-Id"
    if status < 400:
        TALLY.successes += 1
        return
    TALLY.errors += 1
    assert headers.get("content-type", "").startswith("application/json"), f"{what}: {headers}"
    body = orjson.loads(content)
    assert isinstance(body, dict)
    assert set(body) == {"error", "request_id"}, f"{what}: {body}"
    error = body["error"]
    assert isinstance(error, dict)
    assert set(error) <= {"code", "message", "details"}, f"{what}: {body}"
    assert isinstance(error["code"], str)
    assert error["code"]
    assert isinstance(error["message"], str)
    assert error["message"]
    if "details" in error:
        assert isinstance(error["details"], dict), f"{what}: {body}"
    assert body["request_id"] == request_id, what
    if status == 429:
        TALLY.rate_limited += 1
        assert error["code"] in ("rate_limited", "quota_exceeded")
        assert headers.get("retry-after", "").isdigit(), f"{what}: {headers}"


async def store_snapshot(store: Store) -> dict[bytes, Any]:
    """Every key with its serialised value, request counters left out."""
    out: dict[bytes, Any] = {}
    async for key in store.client.scan_iter(count=1000):
        if not key.startswith(COUNTER_PREFIXES):
            out[key] = await store.client.dump(key)
    return out


# --- strategies ------------------------------------------------------------------------------

LONE_SURROGATES = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
ODD_TEXT = st.one_of(
    st.text(max_size=40),
    LONE_SURROGATES,
    st.text(st.sampled_from("\x00\x01\n\r\t\\\"'<>&%{}[]\u2028\ufeff\U0001f600"), max_size=20),
    st.sampled_from(["", " ", "null", "sha256:", "sha256:" + "g" * 64, "SHA256:" + "A" * 64, "a" * 300]),
)
HUGE_INTS = st.one_of(st.integers(), st.integers(min_value=-(10**400), max_value=10**400))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    HUGE_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    ODD_TEXT,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(ODD_TEXT, children, max_size=4),
    max_leaves=12,
)


def dumps(value: Any) -> bytes:
    """Python's encoder: it writes huge integers, NaN/Infinity and lone surrogates (as escapes)."""
    return json.dumps(value).encode("ascii")


@st.composite
def deep_nesting(draw: st.DrawFn) -> bytes:
    depth = draw(st.sampled_from([64, 513, 1025, 2000, 5000]))
    if draw(st.booleans()):
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


RAW_ODDITIES = st.sampled_from(
    [
        b"",
        b" ",
        b"null",
        b"[]",
        b"{}",
        b'"string"',
        b"1" + b"0" * 4000,
        b'{"input_hash": 1' + b"0" * 4000 + b"}",
        b'{"input_hash": 1e999999}',
        b'{"input_hash": -0.0e-999999}',
        b'{"input_hash": NaN}',
        b'{"input_hash": "sha256:\x00"}',
        b'{"input_hash": "\\u0000"}',
        b'{"\x00": 1}',
        b'{"input_hash": "\xed\xa0\x80"}',
        b'{"input_hash": "\\ud800"}',
        b'{"receipt_id": "\\udfff", "input_hash": "\\ud83d"}',
        b'{"input_hash": "\xff\xfe"}',
        b"\xef\xbb\xbf{}",
        '{"input_hash": "x"}'.encode("utf-16"),
        b'{"input_hash": "a", "input_hash": "b"}',
        b'{"tags": {"a": "b", "a": "c"}}',
        b"{'input_hash': 'x'}",
        b'{"input_hash": "x",}',
        b"{" * 8000,
        b"\x00" * 100,
    ]
)


@st.composite
def field_bodies(draw: st.DrawFn, endpoint: str, receipt_id: str) -> bytes:
    """A JSON object of the endpoint's own field names (and some others) with values of
    every type; valid values are mixed in so the later checks are reached too."""
    valid: dict[str, Any] = {
        "input_hash": hash_of("fuzz-input"),
        "receipt_id": receipt_id,
        "session_id": "cs_fuzz_unknown",
        "turnstile_token": "not-a-passing-token",
    }
    names = FIELDS[endpoint]
    body: dict[str, Any] = {name: valid[name] for name in names if name in valid and draw(st.booleans())}
    good_values = st.sampled_from(
        [
            hash_of("fuzz-x"),
            "release",
            "workflow_audit",
            {"k": "v"},
            {"k": None},
            {"": "v"},
            {"k" * 100: "v"},
            "x" * 257,
            receipt_id,
            "prj_00000000000000000000000000",
            "a@b.example",
            "4111 1111 1111 1111",
        ]
    )
    overrides = draw(
        st.dictionaries(
            st.one_of(st.sampled_from(names), ODD_TEXT), st.one_of(JSON_VALUES, good_values), min_size=1, max_size=4
        )
    )
    body.update(overrides)
    return dumps(body)


def bodies(endpoint: str, receipt_id: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        field_bodies(endpoint, receipt_id),
        JSON_VALUES.map(dumps),
        RAW_ODDITIES,
        deep_nesting(),
        st.binary(max_size=200),
        st.binary(max_size=60).map(lambda raw: b'{"input_hash": "' + raw + b'"}'),
    )


CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/json; charset=latin-1",
            "application/json;;;",
            "application/jsonx",
            "text/json",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=xyz",
            "",
            " ",
            "*/*",
        ]
    ),
    st.none(),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
)


# --- the in-process service ------------------------------------------------------------------


@dataclass
class Target:
    client: Any
    store: Store
    key_a: dict[str, Any]
    key_b: dict[str, Any]
    receipt_id: str


def fuzz_settings(receipt_root: str, human_url: str, limits: dict[str, Any] | None = RAISED_LIMITS) -> Settings:
    return Settings(
        redis_url="redis://injected-by-tests",
        receipt_root=receipt_root,
        env="test",
        limits=load_limits(orjson.dumps(limits) if limits else None),
        client_ip=ClientIpConfig(),
        payment_webhook_secrets=(WEBHOOK_SECRET,),
        human_check_secret=HUMAN_SECRET,
        human_check_verify_url=human_url,
    )


@pytest.fixture(scope="module")
def human() -> Iterator[FakeHumanCheck]:
    fake = FakeHumanCheck()
    yield fake
    fake.close()


@pytest.fixture
async def target(receipt_root: str, human: FakeHumanCheck) -> AsyncIterator[Target]:
    store = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    client = create_app(fuzz_settings(receipt_root, human.url), store=store).asgi_client
    key_a = await create_project_key(store.keys, project_name="fuzz-a", plan="pro")
    key_b = await create_project_key(store.keys, project_name="fuzz-b", plan="free")
    _, response = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("fuzz-input")}), headers=auth(key_a)
    )
    assert response.status_code == 201
    yield Target(client, store, key_a, key_b, response.json["receipt"]["receipt_id"])
    await store.close()


def auth_headers(target: Target) -> st.SearchStrategy[dict[str, str]]:
    a, b = target.key_a["api_key"], target.key_b["api_key"]
    return st.sampled_from(
        [
            {},
            {"Authorization": f"Bearer {a}"},
            {"Authorization": f"Bearer {b}"},
            {"Authorization": f"bearer   {a}  "},
            {"Authorization": a},
            {"Authorization": f"Token {a}"},
            {"Authorization": f"Basic {a}"},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer "},
            {"Authorization": "Bearer short"},
            {"Authorization": "Bearer " + "x" * 300},
            {"Authorization": "Bearer eps_" + "A" * 43},
            {"X-Api-Key": a},
        ]
    ) | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80).map(
        lambda value: {"Authorization": value}
    )


async def send(target: Target, method: str, url: str, content: bytes | None, headers: dict[str, str]) -> Any:
    _, response = await target.client.request(method, url, content=content, headers=headers)
    return response


# --- properties ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", POST_ENDPOINTS)
@FUZZ_SETTINGS
@given(data=st.data())
async def test_post_bodies_never_5xx_and_refusals_write_nothing(
    target: Target, endpoint: str, data: st.DataObject
) -> None:
    """Malformed and mistyped bodies, odd media types and auth headers on every POST endpoint."""
    body = data.draw(bodies(endpoint, target.receipt_id), label="body")
    headers = data.draw(auth_headers(target), label="auth")
    content_type = data.draw(CONTENT_TYPES, label="content_type")
    if content_type is not None:
        headers = {**headers, "Content-Type": content_type}
    if endpoint == "/v1/webhooks/payment" and data.draw(st.booleans(), label="signed"):
        # Correctly signed, so the event parser is fuzzed too (and unsigned: the signature check).
        headers["Payment-Signature"] = signature_header([WEBHOOK_SECRET], int(time.time()), body)
    before = await store_snapshot(target.store)
    response = await send(target, "POST", endpoint, body, headers)
    check_response(response.status_code, response.headers, response.content, f"POST {endpoint} {body[:200]!r}")
    if response.status_code >= 400 or endpoint not in WRITING_ON_SUCCESS:
        assert await store_snapshot(target.store) == before, f"POST {endpoint} {response.status_code} wrote"


PATH_TEXT = st.one_of(
    ODD_TEXT,
    st.sampled_from(["rcpt_", "rcpt_" + "0" * 26, "rcpt_" + "Z" * 26, "..", "%00", "%ff", "sha256:" + "0" * 64]),
    st.binary(max_size=20).map(lambda raw: raw.decode("latin-1")),
)
QUERY = st.lists(
    st.tuples(
        st.sampled_from(["project_id", "depth", "input_hash", "output_hash", "limit", "cursor"]) | ODD_TEXT,
        ODD_TEXT | st.sampled_from([hash_of("fuzz-input"), "-1", "101", "0", "99999999999999999999", "prj_x"]),
    ),
    max_size=4,
)


def encode_query(pairs: list[tuple[str, str]]) -> str:
    return urlencode([(k.encode("utf-8", "surrogatepass"), v.encode("utf-8", "surrogatepass")) for k, v in pairs])


@pytest.mark.slow
@FUZZ_SETTINGS
@given(data=st.data())
async def test_get_paths_and_queries_never_5xx_and_write_nothing(target: Target, data: st.DataObject) -> None:
    """Every GET endpoint with odd path segments, query strings and auth headers."""
    segment = data.draw(PATH_TEXT, label="segment")
    quoted = quote(segment.encode("utf-8", "surrogatepass"), safe=data.draw(st.sampled_from(["", "/", ":%"])))
    template = data.draw(
        st.sampled_from(
            [
                "/v1/receipts/{x}",
                "/v1/receipts/{x}/bundle",
                "/v1/receipts",
                "/v1/usage",
                "/v1/public-key",
                "/",
                "/health",
                "/verify",
                "/docs",
                "/{x}",
                "/v1/{x}",
                "/v1/receipts/" + target.receipt_id + "/bundle",
                "/v1/receipts/" + target.receipt_id,
            ]
        ),
        label="path",
    )
    query = encode_query(data.draw(QUERY, label="query"))
    url = template.replace("{x}", quoted) + ("?" + query if query else "")
    headers = data.draw(auth_headers(target), label="auth")
    method = data.draw(st.sampled_from(["GET", "GET", "GET", "HEAD", "OPTIONS", "DELETE", "PUT", "PATCH"]))
    before = await store_snapshot(target.store)
    response = await send(target, method, url, None, headers)
    if method == "HEAD":
        TALLY.requests += 1
        assert response.status_code < 500, f"HEAD {url}"
        assert response.headers.get("x-request-id")
    else:
        check_response(response.status_code, response.headers, response.content, f"{method} {url}")
    assert await store_snapshot(target.store) == before, f"{method} {url} wrote"


async def test_429_keeps_the_error_shape(receipt_root: str, human: FakeHumanCheck) -> None:
    """With the default limits, failed authentications and a spent quota answer 429 in shape."""
    store = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    limits = {"plans": {"free": {"per_minute": 60, "monthly": 1}}}
    client = create_app(fuzz_settings(receipt_root, human.url, limits), store=store).asgi_client
    key = await create_project_key(store.keys, project_name="quota", plan="free")
    body = orjson.dumps({"input_hash": hash_of("q-1")})
    _, response = await client.post("/v1/receipts", content=body, headers=auth(key))
    assert response.status_code == 201
    _, response = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("q-2")}), headers=auth(key)
    )
    assert response.status_code == 429
    assert response.json["error"]["code"] == "quota_exceeded"
    check_response(response.status_code, response.headers, response.content, "quota")
    statuses = []
    for _ in range(12):
        _, response = await client.post("/v1/verify", content=b"{}", headers=auth("eps_" + "B" * 43))
        statuses.append(response.status_code)
        check_response(response.status_code, response.headers, response.content, "failed auth")
    assert statuses[-1] == 429, statuses
    assert response.json["error"]["code"] == "rate_limited"
    await store.close()


# --- a real socket: oversized bodies and raw malformed HTTP ---------------------------------

module_services = service_pool_fixture("module")


@pytest.fixture(scope="module")
def service(module_services: ServicePool, redis_server: RedisServer) -> ServiceProcess:
    return module_services.start(
        workers=1,
        redis_url=redis_server.url,
        env={"PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET, "HUMAN_CHECK_SECRET": HUMAN_SECRET},
    )


@pytest.fixture(scope="module")
def socket_key(service: ServiceProcess, redis_server: RedisServer) -> dict[str, Any]:
    return create_key_cli(redis_server.url, project="fuzz-socket", plan="pro")


def redis_state(url: str) -> dict[bytes, bytes | None]:
    import redis

    with redis.Redis.from_url(url) as conn:
        return {name: conn.dump(name) for name in conn.scan_iter(count=1000) if not name.startswith(COUNTER_PREFIXES)}


def _final(received: bytes) -> bytes:
    """``received`` without interim ``1xx`` answers (``100 Continue``)."""
    while received.startswith(b"HTTP/1.1 1"):
        received = received.partition(b"\r\n\r\n")[2]
    return received


def _complete(received: bytes) -> bool:
    """One whole final answer (head and Content-Length body) has arrived."""
    head, sep, rest = _final(received).partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(rest) >= int(value.strip())
    return True


def raw_exchange(port: int, data: bytes, timeout: float = 3.0) -> bytes:
    """Send raw bytes; read one whole answer, or until the server closes or ``timeout``.

    The socket is not half-closed: the server would take the EOF as a dropped client
    and cancel the request before it answers.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        received = b""
        try:
            while not _complete(received) and (chunk := sock.recv(65536)):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return received


def check_raw_answers(received: bytes, what: str) -> int:
    """Every HTTP answer in ``received`` (keep-alive may give several) obeys the properties."""
    count = 0
    rest = _final(received)
    while rest.startswith(b"HTTP/"):
        head, _, rest = rest.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body, rest = rest[:length], rest[length:]
        check_response(int(status_line.split()[1]), headers, body, f"{what} -> {status_line}")
        count += 1
    assert rest == b"" or count == 0, f"{what}: unparsable answer {received[:300]!r}"
    return count


@pytest.mark.slow
@pytest.mark.real_redis
@pytest.mark.parametrize("endpoint", POST_ENDPOINTS)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_oversized_bodies_on_a_socket_are_413_and_write_nothing(
    service: ServiceProcess, socket_key: dict[str, Any], redis_server: RedisServer, endpoint: str, framing: str
) -> None:
    body = b'{"input_hash": "' + hash_of("big").encode() + b'", "pad": "' + b"x" * (17 * 1024) + b'"}'
    head = (
        f"POST {endpoint} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {socket_key['api_key']}\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
    ).encode()
    if framing == "chunked":
        parts = [body[i : i + 4096] for i in range(0, len(body), 4096)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        request = head + b"Transfer-Encoding: chunked\r\n\r\n" + payload
    else:
        request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    before = redis_state(redis_server.url)
    received = raw_exchange(service.port, request)
    assert received.startswith(b"HTTP/1.1 413"), received[:300]
    assert check_raw_answers(received, f"{framing} {endpoint}") == 1
    assert b'"payload_too_large"' in received
    assert redis_state(redis_server.url) == before


MALFORMED_HTTP = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n: empty-name\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n{}",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
    b"POST /v1/receipts HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}",
    b"POST /v1/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n\xff\xfe\x00\x00",
    b"GET /v1/receipts/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http://evil.example/ HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\r\n\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
]


@pytest.mark.slow
@pytest.mark.real_redis
def test_raw_malformed_http_never_5xx_and_writes_nothing(service: ServiceProcess, redis_server: RedisServer) -> None:
    before = redis_state(redis_server.url)
    for request in MALFORMED_HTTP:
        received = raw_exchange(service.port, request, timeout=1.0)
        check_raw_answers(received, repr(request[:80]))
    assert redis_state(redis_server.url) == before
    with httpx.Client(base_url=service.base_url, timeout=5) as http:
        assert http.get("/health").status_code == 200  # still serving


HEADER_NAMES = st.sampled_from(
    ["Content-Type", "Content-Length", "Transfer-Encoding", "Authorization", "Host", "Expect", "Connection"]
) | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=":"), min_size=1, max_size=12)
HEADER_VALUES = st.binary(max_size=40).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b"")) | st.sampled_from(
    [b"application/json", b"chunked", b"0", b"100-continue", b"close", b"Bearer eps_" + b"A" * 43]
)


@pytest.mark.slow
@pytest.mark.real_redis
def test_socket_fuzz_of_headers_and_bodies(
    service: ServiceProcess, socket_key: dict[str, Any], redis_server: RedisServer
) -> None:
    """Random header lines and bodies on a real socket: no 5xx, shaped errors, no writes on refusal."""

    @settings(max_examples=SOCKET_EXAMPLES, deadline=None, database=None)
    @given(
        method=st.sampled_from(["POST", "GET", "PUT"]),
        path=st.sampled_from([*POST_ENDPOINTS, "/v1/receipts?input_hash=x", "/v1/usage", "/"]),
        header_lines=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=5),
        body=st.one_of(st.binary(max_size=300), RAW_ODDITIES, JSON_VALUES.map(dumps)),
        with_length=st.booleans(),
    )
    def prop(method: str, path: str, header_lines: list[tuple[str, bytes]], body: bytes, with_length: bool) -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
        head += b"".join(name.encode() + b": " + value + b"\r\n" for name, value in header_lines)
        if with_length:
            head += b"Content-Length: %d\r\n" % len(body)
        before = redis_state(redis_server.url)
        received = raw_exchange(service.port, head + b"\r\n" + body, timeout=1.0)
        check_raw_answers(received, f"{head!r} {body[:100]!r}")
        if not received.startswith((b"HTTP/1.1 200", b"HTTP/1.1 201")):
            assert redis_state(redis_server.url) == before, f"{head!r} wrote"

    prop()
    with httpx.Client(base_url=service.base_url, timeout=5) as http:
        assert http.get("/health").status_code == 200
