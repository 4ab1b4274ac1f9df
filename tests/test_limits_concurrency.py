"""Rate limits and monthly quotas under real concurrency (docs/limits.md).

Real redis-server (emptied per test), a real ``service.py serve`` with 4 workers per test
(each test states its own ``LIMITS``), concurrent requests through ``httpx.AsyncClient``
over loopback. With 4 workers no in-process lock can serialise the requests, so every
exact count below holds only because each limit is checked and counted in one atomic
Redis script.

Per-minute windows are fixed wall-clock (UTC) minutes. A burst that straddled a minute
boundary would be counted in two windows and could let up to twice the limit through, so
every burst first waits (polling, with a deadline) until enough of the current minute is
left, and asserts afterwards that it really stayed inside one window.
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv.keys import (
    INDEX_BUCKET_KEY_MATCH,
    hash_index_field,
    idempotency_field,
    index_meta_key,
    ip_counter_key,
    project_key,
    receipt_key,
    search_field,
)
from tests.conftest import REPO, auth, hash_of
from tests.servers import (
    RAISED_LIMITS,
    ServicePool,
    ServiceProcess,
    assert_error_body,
    create_key_cli,
    redis_snapshot,
    service_pool_fixture,
)

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

service_factory = service_pool_fixture()

WORKERS = 4
CLIENT_PROCESSES = 4
CLIENT_TIMEOUT_S = 30.0
CHILD_TIMEOUT_S = 60.0
MINUTE_S = 60
# Time that must be left in the current minute before a burst is fired (a burst takes
# well under a second or two here; the rest is slack for a slow machine).
WINDOW_ROOM_S = 15.0
COUNTER_PREFIXES = (b"m:", b"ip:", b"q:")
LOOPBACK = "127.0.0.1"


# --- configuration -------------------------------------------------------------------


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` merged recursively over ``base`` (as the service merges ``LIMITS``)."""
    result = dict(base)
    for name, value in override.items():
        if isinstance(value, Mapping) and isinstance(base.get(name), Mapping):
            result[name] = merged(base[name], value)
        else:
            result[name] = value
    return result


def limits_with(override: Mapping[str, Any]) -> dict[str, Any]:
    """Every limit raised (the checks still run), except the ones a test is about."""
    return merged(RAISED_LIMITS, override)


def start_service(pool: ServicePool, redis_url: str, override: Mapping[str, Any]) -> ServiceProcess:
    return pool.start(workers=WORKERS, redis_url=redis_url, limits=limits_with(override))


@pytest.fixture
async def connect() -> AsyncIterator[Any]:
    """``connect(service, local_address=None)``: an AsyncClient, closed at teardown."""
    opened: list[httpx.AsyncClient] = []

    def make(service: ServiceProcess, local_address: str | None = None) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(
            local_address=local_address, limits=httpx.Limits(max_connections=100, max_keepalive_connections=100)
        )
        client = httpx.AsyncClient(base_url=service.base_url, timeout=CLIENT_TIMEOUT_S, transport=transport)
        opened.append(client)
        return client

    yield make
    for client in opened:
        await client.aclose()


# --- time windows ----------------------------------------------------------------------


def minute_id(now: float) -> int:
    """The fixed one-minute window holding ``now`` (minutes since the epoch, as the service counts)."""
    return int(now // MINUTE_S)


def seconds_left_in_minute(now: float) -> float:
    return MINUTE_S - now % MINUTE_S


def next_month_start(now: float) -> float:
    """The first instant of the UTC month after the one holding ``now``."""
    moment = datetime.fromtimestamp(now, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


async def wait_for_minute_room(room_s: float = WINDOW_ROOM_S) -> int:
    """Wait until at least ``room_s`` seconds are left in the current UTC minute; its window id.

    Per-minute windows are fixed wall-clock minutes (not sliding): a burst fired in the last
    seconds of a minute would be split over two windows and let up to twice the limit
    through. Polls with a deadline rather than sleeping blindly.
    """
    deadline = time.monotonic() + room_s + 5
    while seconds_left_in_minute(time.time()) < room_s:
        assert time.monotonic() < deadline, "the clock did not reach a new minute in time"
        await asyncio.sleep(0.1)
    return minute_id(time.time())


def assert_same_minute(window: int) -> None:
    """The burst stayed within ``window`` (else its counts would be split over two windows)."""
    assert minute_id(time.time()) == window, "the burst straddled a minute boundary despite the guard"


async def wait_for_month_room(room_s: float = 60.0) -> None:
    """Near the end of a UTC month, wait for the next one, so a quota test stays in one month."""
    deadline = time.monotonic() + room_s + 5
    while next_month_start(time.time()) - time.time() < room_s:
        assert time.monotonic() < deadline, "the clock did not reach a new month in time"
        await asyncio.sleep(0.5)


# --- responses and Redis ------------------------------------------------------------------


def describe(responses: list[httpx.Response]) -> str:
    """Status counts and a few bodies per status, for assertion messages."""
    samples: dict[int, str] = {}
    for response in responses:
        samples.setdefault(response.status_code, response.text[:300])
    return f"{Counter(r.status_code for r in responses)} {samples}"


def by_status(responses: list[httpx.Response], status: int) -> list[httpx.Response]:
    return [r for r in responses if r.status_code == status]


def assert_counts(responses: list[httpx.Response], expected: dict[int, int]) -> None:
    assert Counter(r.status_code for r in responses) == Counter(expected), describe(responses)


def retry_after(response: httpx.Response) -> int:
    value = response.headers.get("retry-after")
    assert value is not None, f"429 without Retry-After: {response.text}"
    assert re.fullmatch(r"[0-9]+", value), f"Retry-After is not whole seconds: {value!r}"
    return int(value)


def assert_rate_limited(response: httpx.Response, policy: str) -> int:
    """A 429 ``rate_limited`` from the named policy, with a per-minute Retry-After; returns it."""
    body = assert_error_body(response, 429, "rate_limited")
    assert body["error"]["details"]["policy"] == policy, body
    seconds = retry_after(response)
    assert 1 <= seconds <= MINUTE_S, seconds
    return seconds


def ratelimit_remaining(response: httpx.Response, policy: str, limit: int) -> int:
    """``r`` of the single-policy IETF RateLimit fields, after checking both fields' shape."""
    assert response.headers.get("ratelimit-policy") == f'"{policy}";q={limit};w={MINUTE_S}', response.headers
    match = re.fullmatch(rf'"{re.escape(policy)}";r=([0-9]+);t=([0-9]+)', response.headers.get("ratelimit", ""))
    assert match, response.headers
    assert 1 <= int(match[2]) <= MINUTE_S
    return int(match[1])


def redis_keys(redis_url: str, pattern: str) -> list[bytes]:
    with redis.Redis.from_url(redis_url) as conn:
        return sorted(conn.scan_iter(match=pattern, count=1000))


def index_fields(redis_url: str) -> set[bytes]:
    """Every field of every project's index buckets (hash index, idempotency, search)."""
    with redis.Redis.from_url(redis_url) as conn:
        return {
            field for name in conn.scan_iter(match=INDEX_BUCKET_KEY_MATCH, count=1000) for field in conn.hkeys(name)
        }


def redis_int(redis_url: str, key: str) -> int:
    with redis.Redis.from_url(redis_url) as conn:
        return int(conn.get(key) or 0)


def records_snapshot(redis_url: str) -> dict[bytes, bytes | None]:
    """Every key except the counters (``m:``, ``ip:``, ``q:``) with its serialised value."""
    return {k: v for k, v in redis_snapshot(redis_url).items() if not k.startswith(COUNTER_PREFIXES)}


async def warm_up(http: httpx.AsyncClient, connections: int) -> None:
    """Open about ``connections`` keep-alive connections (``/health`` is not limited), so a
    burst goes out on ready connections and reaches the workers at nearly the same moment."""
    answers = await asyncio.gather(*(http.get("/health") for _ in range(connections)))
    assert {r.status_code for r in answers} == {200}


async def create(http: httpx.AsyncClient, api_key: str, body: dict[str, Any]) -> httpx.Response:
    return await http.post("/v1/receipts", content=orjson.dumps(body), headers=auth(api_key))


async def usage(http: httpx.AsyncClient, api_key: str) -> dict[str, Any]:
    response = await http.get("/v1/usage", headers=auth(api_key))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


# --- several client processes -------------------------------------------------------------

# One client process: reads its config line, opens its client (and warms its connections),
# says "ready", waits for "go", sends its share of creates concurrently and prints every answer as JSON.
CLIENT_SCRIPT = r"""
import asyncio, json, sys, time
import httpx

config = json.loads(sys.stdin.readline())

async def main():
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    headers = {"Authorization": "Bearer " + config["api_key"], "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=config["base_url"], timeout=config["timeout"], limits=limits) as http:
        warm = await asyncio.gather(*(http.get("/health") for _ in config["bodies"]))
        assert {r.status_code for r in warm} == {200}
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return

        async def one(body):
            response = await http.post("/v1/receipts", content=json.dumps(body), headers=headers)
            return {
                "status": response.status_code,
                "headers": response.headers.multi_items(),
                "body": response.text,
                "at": time.time(),
            }

        answers = await asyncio.gather(*(one(body) for body in config["bodies"]))
    print(json.dumps(answers), flush=True)

asyncio.run(main())
"""


async def burst_from_processes(
    base_url: str, api_key: str, bodies: list[dict[str, Any]]
) -> tuple[int, list[tuple[httpx.Response, float]]]:
    """Send ``bodies`` from ``CLIENT_PROCESSES`` processes at once; (window, [(response, received at)]).

    The processes start and open their clients first; the window guard runs once all are
    ready, then every process gets "go" at the same moment.
    """
    shares = [bodies[i::CLIENT_PROCESSES] for i in range(CLIENT_PROCESSES)]
    processes: list[asyncio.subprocess.Process] = []
    try:
        for share in shares:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLIENT_SCRIPT,
                cwd=REPO,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            config = {"base_url": base_url, "api_key": api_key, "timeout": CLIENT_TIMEOUT_S, "bodies": share}
            assert process.stdin is not None
            process.stdin.write(orjson.dumps(config) + b"\n")
            processes.append(process)
        for process in processes:
            assert process.stdout is not None
            ready = await asyncio.wait_for(process.stdout.readline(), CHILD_TIMEOUT_S)
            assert ready == b"ready\n", ready
        window = await wait_for_minute_room()
        outputs = await asyncio.wait_for(
            asyncio.gather(*(process.communicate(b"go\n") for process in processes)), CHILD_TIMEOUT_S
        )
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    results: list[tuple[httpx.Response, float]] = []
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode(errors="replace")
        for answer in orjson.loads(out):
            response = httpx.Response(answer["status"], headers=answer["headers"], content=answer["body"].encode())
            results.append((response, answer["at"]))
    return window, results


# --- 1. per-key minute limit ------------------------------------------------------------------


async def test_per_key_minute_limit_holds_across_workers_and_client_processes(
    service_factory: ServicePool, redis_url: str, connect: Any
) -> None:
    limit, extra = 40, 20
    service = start_service(service_factory, redis_url, {"plans": {"free": {"per_minute": limit}}})
    key = create_key_cli(redis_url, project="minute-limit", plan="free")
    bodies = [{"input_hash": hash_of(f"minute-limit-{i}")} for i in range(limit + extra)]

    window, results = await burst_from_processes(service.base_url, key["api_key"], bodies)

    responses = [response for response, _ in results]
    assert_counts(responses, {201: limit, 429: extra})
    for response, received_at in results:
        assert minute_id(received_at) == window, "an answer came in another minute window"
        if response.status_code == 429:
            seconds = assert_rate_limited(response, "key")
            # The refusal points at the end of the current minute window.
            assert abs(seconds - math.ceil(seconds_left_in_minute(received_at))) <= 2, seconds
    created = [r.json()["receipt"] for r in by_status(responses, 201)]
    assert len({r["receipt_id"] for r in created}) == limit
    assert {r["project_id"] for r in created} == {key["project_id"]}

    http = connect(service)
    counted = await usage(http, key["api_key"])
    assert_same_minute(window)
    assert counted["minute"]["limit"] == limit
    assert counted["minute"]["used"] == limit
    assert counted["minute"]["remaining"] == 0
    assert counted["month"]["used"] == limit
    # The refused creates wrote no receipt: the store holds exactly the accepted ones.
    assert len(redis_keys(redis_url, "r:*")) == limit
    assert len([field for field in index_fields(redis_url) if field.startswith(b"h")]) == limit


# --- 2 and 6. monthly quota; refused creates write nothing --------------------------------------


async def test_monthly_quota_admits_exactly_one_of_a_burst_and_refused_creates_write_nothing(
    service_factory: ServicePool, redis_url: str, connect: Any
) -> None:
    quota, burst = 10, 50
    service = start_service(service_factory, redis_url, {"plans": {"free": {"monthly": quota}}})
    key = create_key_cli(redis_url, project="quota", plan="free")
    project_id = key["project_id"]
    http = connect(service)
    await wait_for_month_room()

    earlier: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i in range(quota - 1):
        body = {"input_hash": hash_of(f"quota-seq-{i}")}
        response = await create(http, key["api_key"], body)
        assert response.status_code == 201, response.text
        assert response.json()["quota"]["monthly_used"] == i + 1
        earlier.append((body, response.json()["receipt"]))

    await warm_up(http, burst)
    before, fields_before = records_snapshot(redis_url), index_fields(redis_url)
    responses = await asyncio.gather(
        *(create(http, key["api_key"], {"input_hash": hash_of(f"quota-burst-{i}")}) for i in range(burst))
    )
    after, fields_after = records_snapshot(redis_url), index_fields(redis_url)

    assert_counts(responses, {201: 1, 429: burst - 1})
    [winner_response] = by_status(responses, 201)
    winner = winner_response.json()
    assert winner["quota"]["monthly_used"] == quota
    assert winner["quota"]["monthly_remaining"] == 0
    assert winner["receipt"]["prev_receipt_hash"] == earlier[-1][1]["receipt_hash"]
    for response in by_status(responses, 429):
        received_at = time.time()
        body = assert_error_body(response, 429, "quota_exceeded")
        assert body["error"]["details"]["monthly_limit"] == quota
        assert response.headers.get("x-service-monthly-remaining") == "0"
        assert response.headers.get("x-service-monthly-used") == str(quota)
        assert response.headers.get("x-service-monthly-limit") == str(quota)
        # Retry-After points at the first instant of the next UTC month.
        assert abs(retry_after(response) - (next_month_start(received_at) - received_at)) <= 2

    # 6: apart from counters, the burst added exactly the winner's receipt record and its
    # three index fields, and moved the tip; the 49 refused creates left every other key
    # byte-for-byte unchanged (the index keys changed only by the winner's fields).
    receipt = winner["receipt"]
    assert set(after) - set(before) == {receipt_key(receipt["receipt_id"]).encode()}
    assert set(before) - set(after) == set()
    assert fields_after - fields_before == {
        hash_index_field(receipt["receipt_hash"]),
        idempotency_field(winner["idempotency"]["key"]),
        search_field("input_hash", receipt["input_hash"]),
    }
    assert fields_before - fields_after == set()
    changed = {k for k in before if before[k] != after[k]}
    index_prefix = index_meta_key(project_id).encode()
    assert {k for k in changed if not k.startswith(index_prefix)} == {project_key(project_id).encode()}
    with redis.Redis.from_url(redis_url) as conn:
        assert conn.hget(project_key(project_id), "tip") == receipt["receipt_hash"].encode()

    counted = await usage(http, key["api_key"])
    assert counted["month"]["used"] == quota
    assert counted["month"]["remaining"] == 0

    # A replay is not a new receipt: it still answers, quota used up or not.
    replay_body, replayed_receipt = earlier[0]
    replay = await create(http, key["api_key"], replay_body)
    assert replay.status_code == 200, replay.text
    assert replay.json()["idempotency"]["hit"] is True
    assert replay.json()["receipt"]["receipt_id"] == replayed_receipt["receipt_id"]
    assert replay.json()["quota"]["monthly_used"] == quota

    # Verifying writes no receipt, so the quota does not apply to it.
    verify = await http.post(
        "/v1/verify",
        content=orjson.dumps({"receipt_id": receipt["receipt_id"], "input_hash": receipt["input_hash"]}),
        headers=auth(key["api_key"]),
    )
    assert verify.status_code == 200, verify.text
    assert verify.json()["ok"] is True
    assert (await usage(http, key["api_key"]))["month"]["used"] == quota


# --- 3. failed-auth throttle -------------------------------------------------------------------------


async def test_failed_auth_throttle_counts_exactly_and_applies_before_authentication(
    service_factory: ServicePool, redis_url: str, connect: Any
) -> None:
    allowance, burst = 10, 30
    service = start_service(service_factory, redis_url, {"ip_per_minute": {"unauthenticated": allowance}})
    key = create_key_cli(redis_url, project="auth-throttle", plan="free")
    http = connect(service)
    guesses = [f"eps_{secrets.token_urlsafe(24)}" for _ in range(burst)]
    await warm_up(http, burst)

    window = await wait_for_minute_room()
    responses = await asyncio.gather(
        *(create(http, guess, {"input_hash": hash_of(f"guess-{i}")}) for i, guess in enumerate(guesses))
    )

    assert_counts(responses, {401: allowance, 429: burst - allowance})
    for response in by_status(responses, 401):
        assert_error_body(response, 401, "unauthorized")
    for response in by_status(responses, 429):
        assert_rate_limited(response, "ip-unauthenticated")
    failures = ip_counter_key(LOOPBACK, "unauthenticated", str(window))
    assert redis_int(redis_url, failures) == allowance, "refused requests must not be counted"

    # The throttle applies before authentication: a VALID key from the throttled address is
    # refused the same way, and nothing is looked up or written. Were it answered 201, a
    # guesser past its allowance would still learn which of its guesses is a real key.
    before = redis_snapshot(redis_url)
    valid = await create(http, key["api_key"], {"input_hash": hash_of("valid-but-throttled")})
    assert_rate_limited(valid, "ip-unauthenticated")
    assert_rate_limited(await http.get("/v1/usage", headers=auth(key["api_key"])), "ip-unauthenticated")
    assert redis_snapshot(redis_url) == before
    assert_same_minute(window)

    # The key itself is fine, and the throttle is per address: from another loopback address
    # the same request is accepted.
    elsewhere = connect(service, local_address="127.0.0.2")
    accepted = await create(elsewhere, key["api_key"], {"input_hash": hash_of("valid-but-throttled")})
    assert accepted.status_code == 201, accepted.text
    assert_same_minute(window)


# --- 4. per-IP authenticated limit across keys ---------------------------------------------------------


async def test_per_ip_authenticated_limit_is_shared_by_every_key_of_an_address(
    service_factory: ServicePool, redis_url: str, connect: Any
) -> None:
    limit, burst = 25, 40
    service = start_service(service_factory, redis_url, {"ip_per_minute": {"authenticated": limit}})
    keys = await asyncio.gather(
        *(asyncio.to_thread(create_key_cli, redis_url, project=f"ip-limit-{i}", plan="pro") for i in range(3))
    )
    http = connect(service)
    await warm_up(http, burst)

    window = await wait_for_minute_room()
    responses = await asyncio.gather(
        *(create(http, keys[i % 3]["api_key"], {"input_hash": hash_of(f"ip-limit-{i}")}) for i in range(burst))
    )
    assert_same_minute(window)

    assert_counts(responses, {201: limit, 429: burst - limit})
    for response in by_status(responses, 429):
        assert_rate_limited(response, "ip-authenticated")
    assert redis_int(redis_url, ip_counter_key(LOOPBACK, "authenticated", str(window))) == limit
    # Only the admitted creates reached the store.
    assert len(redis_keys(redis_url, "r:*")) == limit
    with redis.Redis.from_url(redis_url) as conn:
        issued = sum(int(conn.get(name) or 0) for name in conn.scan_iter(match="q:*"))
    assert issued == limit


# --- 5. public read limits -------------------------------------------------------------------------------


async def test_public_read_limits_per_ip(service_factory: ServicePool, redis_url: str, connect: Any) -> None:
    get_limit, get_burst = 30, 40
    key_limit, key_burst = 20, 30
    service = start_service(
        service_factory,
        redis_url,
        {"ip_per_minute": {"get_receipt": get_limit, "public_key": key_limit}},
    )
    key = create_key_cli(redis_url, project="public-reads", plan="pro")
    http = connect(service)
    created = await create(http, key["api_key"], {"input_hash": hash_of("public-read")})
    assert created.status_code == 201, created.text
    receipt_id = created.json()["receipt"]["receipt_id"]

    await warm_up(http, get_burst)
    window = await wait_for_minute_room()
    reads = await asyncio.gather(*(http.get(f"/v1/receipts/{receipt_id}") for _ in range(get_burst)))
    public_keys = await asyncio.gather(*(http.get("/v1/public-key") for _ in range(key_burst)))
    assert_same_minute(window)

    assert_counts(reads, {200: get_limit, 429: get_burst - get_limit})
    for response in by_status(reads, 200):
        assert response.json()["receipt"]["receipt_id"] == receipt_id
    # Each admitted read was counted once, atomically: the remaining counts are all distinct.
    remaining = sorted(ratelimit_remaining(r, "ip-get_receipt", get_limit) for r in by_status(reads, 200))
    assert remaining == list(range(get_limit))
    for response in by_status(reads, 429):
        assert_rate_limited(response, "ip-get_receipt")

    assert_counts(public_keys, {200: key_limit, 429: key_burst - key_limit})
    remaining = sorted(ratelimit_remaining(r, "ip-public_key", key_limit) for r in by_status(public_keys, 200))
    assert remaining == list(range(key_limit))
    for response in by_status(public_keys, 200):
        assert response.json()["keys"], response.text
    for response in by_status(public_keys, 429):
        assert_rate_limited(response, "ip-public_key")
