"""Durability: the start-up check of Redis's settings, STORE_ACK, and a Redis crash (docs/redis.md).

- ``durability_warnings`` and ``parse_store_ack`` are pure functions, tested on values.
- The start-up check is run against real redis-servers with weak, strong and hidden
  (CONFIG renamed away) settings, and ``STORE_ACK=aof`` on a Redis without WAITAOF stops
  ``service.py serve`` with a clear message.
- ``STORE_ACK=replicas:N``: with a real replica a create answers 201 only once the replica
  holds the receipt; with the replica frozen (SIGSTOP) it answers 503 ``store_unavailable``
  naming the receipt, which is written and chained, and the same request again replays it.
- Crash: 300 acknowledged receipts, ``kill -9`` of a Redis with ``appendfsync always``,
  restart on the same directory: every receipt is readable through the same running service
  and the next receipt chains to the last acknowledged tip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
import redis
import redis.asyncio as aioredis

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.health import check_store_at_startup, durability_warnings
from execution_proof.kv.keys import project_key, receipt_key
from execution_proof.kv.store import Store
from execution_proof.runtime.settings import ConfigError, Settings, load_settings
from execution_proof.runtime.store_ack import NO_ACK, StoreAck, StoreAckError, parse_store_ack
from execution_proof.web.app import create_app
from tests.conftest import REPO, RedisServer, auth, hash_of, missing_binary
from tests.receipt_keys import TEST_ROOT_ENV
from tests.servers import ServicePool, assert_error_body, clean_env, create_key_cli

STRONG = {"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction", "maxmemory": "0"}
AOF_ALWAYS = ["--appendonly", "yes", "--appendfsync", "always"]


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        missing_binary("redis-server", "durability is proven on a real Redis")
    assert binary is not None
    return binary


@pytest.fixture
def redis_servers() -> Iterator[list[RedisServer]]:
    """Servers a test starts for itself (append to the list); all stopped and removed after."""
    started: list[RedisServer] = []
    yield started
    for server in started:
        if server.process is not None and server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGCONT)
        server.cleanup()


def start_redis(servers: list[RedisServer], extra: list[str] | None = None) -> RedisServer:
    server = RedisServer(redis_binary(), extra)
    servers.append(server)
    server.start()
    return server


# --- the judgement, as a pure function -------------------------------------------------


def test_strong_settings_give_no_warning() -> None:
    assert durability_warnings(STRONG) == []
    assert durability_warnings({**STRONG, "maxmemory-policy": "allkeys-lru", "maxmemory": "0"}) == []


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl", "allkeys-lfu"])
def test_eviction_with_a_memory_limit_warns(policy: str) -> None:
    (warning,) = durability_warnings({**STRONG, "maxmemory-policy": policy, "maxmemory": "104857600"})
    assert "EVICT" in warning
    assert "noeviction" in warning


def test_persistence_off_or_weak_warns() -> None:
    (off,) = durability_warnings({**STRONG, "appendonly": "no"})
    assert "appendonly is no" in off
    (weak,) = durability_warnings({**STRONG, "appendfsync": "everysec"})
    assert "appendfsync is everysec" in weak
    (never,) = durability_warnings({**STRONG, "appendfsync": "no"})
    assert "appendfsync is no" in never
    both = durability_warnings({"appendonly": "no", "maxmemory-policy": "allkeys-lru", "maxmemory": "1000"})
    assert len(both) == 2


def test_missing_settings_are_not_judged() -> None:
    assert durability_warnings({}) == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, NO_ACK),
        ("", NO_ACK),
        ("none", NO_ACK),
        ("replicas:1", StoreAck("replicas", 1, 1000)),
        ("replicas:2:250", StoreAck("replicas", 2, 250)),
        ("aof", StoreAck("aof", 0, 1000)),
        ("AOF:4000", StoreAck("aof", 0, 4000)),
    ],
)
def test_store_ack_parses(raw: str | None, expected: StoreAck) -> None:
    assert parse_store_ack(raw) == expected


@pytest.mark.parametrize(
    "raw", ["always", "replicas", "replicas:0", "replicas:x", "replicas:1:0", "replicas:1:4001", "aof:1:2", "aof:-1"]
)
def test_bad_store_ack_is_a_config_error(raw: str) -> None:
    with pytest.raises(StoreAckError):
        parse_store_ack(raw)
    with pytest.raises(ConfigError, match="STORE_ACK"):
        load_settings({"REDIS_URL": "redis://127.0.0.1:1/0", "STORE_ACK": raw})


def test_store_ack_needs_a_plain_redis() -> None:
    with pytest.raises(ConfigError, match="needs REDIS_URL"):
        load_settings({"STORE_ACK": "replicas:1"})
    assert load_settings({"REDIS_URL": "redis://127.0.0.1:1/0", "STORE_ACK": "replicas:1"}).store_ack.replicas == 1


# --- the start-up check against real servers ---------------------------------------------


async def startup_warnings(server: RedisServer, ack: StoreAck = NO_ACK) -> list[str]:
    client = aioredis.from_url(server.url)
    try:
        return await check_store_at_startup(client, ack)
    finally:
        await client.aclose()


@pytest.mark.real_redis
async def test_startup_check_reads_the_real_server(redis_servers: list[RedisServer]) -> None:
    weak = start_redis(redis_servers, ["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
    warnings = await startup_warnings(weak)
    assert len(warnings) == 2, warnings
    assert any("EVICT" in w for w in warnings)
    assert any("appendonly is no" in w for w in warnings)

    strong = start_redis(redis_servers, [*AOF_ALWAYS, "--maxmemory-policy", "noeviction"])
    assert await startup_warnings(strong) == []

    hidden = start_redis(redis_servers, ["--rename-command", "CONFIG", ""])
    (warning,) = await startup_warnings(hidden)
    assert "could not read" in warning

    stopped = start_redis(redis_servers)
    stopped.stop()
    (warning,) = await startup_warnings(stopped)
    assert "unreachable" in warning


@pytest.mark.real_redis
async def test_store_ack_aof_needs_waitaof(redis_servers: list[RedisServer]) -> None:
    server = start_redis(redis_servers, AOF_ALWAYS)
    if redis_version(server) >= (7, 2):
        assert await startup_warnings(server, StoreAck("aof")) == []
        return
    with pytest.raises(StoreAckError, match=r"WAITAOF \(Redis 7.2 or later\)"):
        await startup_warnings(server, StoreAck("aof"))


def redis_version(server: RedisServer) -> tuple[int, ...]:
    with redis.Redis.from_url(server.url) as conn:
        return tuple(int(part) for part in str(conn.info("server")["redis_version"]).split(".")[:2])


@pytest.mark.slow
@pytest.mark.real_redis
def test_serve_stops_when_store_ack_aof_cannot_work(redis_servers: list[RedisServer]) -> None:
    """The real command stops at start-up with a clear message instead of serving without the guarantee."""
    server = start_redis(redis_servers, AOF_ALWAYS if redis_version(start_redis(redis_servers)) < (7, 2) else [])
    env = clean_env({"REDIS_URL": server.url, "STORE_ACK": "aof", **TEST_ROOT_ENV})
    command = [sys.executable, "service.py", "serve", "--host", "127.0.0.1", "--port", "0", "--workers", "1"]
    # A session of its own: Sanic SIGKILLs its whole process group when a worker fails to start.
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False, start_new_session=True
    )
    assert done.returncode != 0
    assert "error: STORE_ACK=aof needs" in done.stderr


@pytest.mark.real_redis
async def test_startup_check_warns_when_replicas_are_missing(redis_servers: list[RedisServer]) -> None:
    server = start_redis(redis_servers, AOF_ALWAYS)
    (warning,) = await startup_warnings(server, StoreAck("replicas", 1))
    assert "has 0 connected" in warning


# --- STORE_ACK=replicas:N with a real replica ------------------------------------------


@pytest.fixture
def primary_and_replica(redis_servers: list[RedisServer]) -> tuple[RedisServer, RedisServer]:
    primary = start_redis(redis_servers, AOF_ALWAYS)
    replica = start_redis(redis_servers, ["--replicaof", "127.0.0.1", str(primary.port)])
    deadline = time.monotonic() + 10
    with redis.Redis.from_url(primary.url) as conn:
        while int(conn.info("replication")["connected_slaves"]) < 1 or not _replica_synced(replica):
            assert time.monotonic() < deadline, "the replica did not connect"
            time.sleep(0.05)
        # Linked is not yet acknowledging: one WAIT with a generous timeout proves the replica
        # answers, so a test's first 1-second WAIT does not race the end of its start-up.
        conn.set("replica-probe", "1")
        assert conn.execute_command("WAIT", 1, 10_000) == 1, "the replica does not acknowledge"
        conn.delete("replica-probe")
    return primary, replica


def _replica_synced(replica: RedisServer) -> bool:
    with redis.Redis.from_url(replica.url) as conn:
        return bool(conn.info("replication").get("master_link_status") == "up")


ACK_TIMEOUT_MS = 1000
"""The WAIT timeout of the replica-ack tests: wide enough for a loaded CI machine (500 ms once
failed a first create while two test suites shared the two cores)."""


@pytest.fixture
async def ack_app(
    primary_and_replica: tuple[RedisServer, RedisServer], receipt_root: str
) -> AsyncIterator[tuple[Any, Store, RedisServer, RedisServer]]:
    primary, replica = primary_and_replica
    store = Store(aioredis.from_url(primary.url))
    settings = Settings(
        redis_url=primary.url, receipt_root=receipt_root, env="test", store_ack=StoreAck("replicas", 1, ACK_TIMEOUT_MS)
    )
    yield create_app(settings, store=store), store, primary, replica
    await store.close()


def create_receipt(app: Any, key: dict[str, Any], label: str) -> Any:
    body = orjson.dumps({"input_hash": hash_of(label)})
    return app.asgi_client.post("/v1/receipts", content=body, headers=auth(key))


@pytest.mark.slow
@pytest.mark.real_redis
async def test_replica_ack_answers_201_only_once_the_replica_holds_the_receipt(
    ack_app: tuple[Any, Store, RedisServer, RedisServer],
) -> None:
    app, store, _, replica = ack_app
    key = await create_project_key(store.keys, project_name="ack", plan="pro")
    with redis.Redis.from_url(replica.url) as on_replica:
        for i in range(20):
            _, response = await create_receipt(app, key, f"ack-{i}")
            assert response.status == 201, response.text
            # No wait, no polling: the 201 came after WAIT, so the replica already has it.
            assert on_replica.exists(receipt_key(response.json["receipt"]["receipt_id"])) == 1


@pytest.mark.slow
@pytest.mark.real_redis
async def test_replica_ack_not_reached_is_a_503_naming_the_written_receipt(
    ack_app: tuple[Any, Store, RedisServer, RedisServer],
) -> None:
    app, store, primary, replica = ack_app
    key = await create_project_key(store.keys, project_name="ack", plan="pro")
    _, first = await create_receipt(app, key, "before")
    assert first.status == 201
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)  # connected but silent: WAIT cannot be reached
    try:
        started = time.monotonic()
        _, response = await create_receipt(app, key, "frozen")
        elapsed = time.monotonic() - started
        assert response.status == 503, response.text
        body = response.json
        assert body["error"]["code"] == "store_unavailable"
        assert response.headers["retry-after"] == "1"
        details = body["error"]["details"]
        assert details["reason"] == "not_acknowledged"
        assert details["written"] is True
        assert (details["acknowledged"], details["required"], details["ack"]) == (0, 1, "replicas")
        assert 0.9 < elapsed < 4.5, elapsed  # the 1 s WAIT timeout, not the 5 s socket timeout
        # The receipt IS written and chained on the primary: readable, and the new tip.
        written_id = details["receipt_id"]
        _, read = await app.asgi_client.get(f"/v1/receipts/{written_id}")
        assert read.status == 200
        receipt = read.json["receipt"]
        assert receipt["prev_receipt_hash"] == first.json["receipt"]["receipt_hash"]
        with redis.Redis.from_url(primary.url) as conn:
            assert conn.hget(project_key(key["project_id"]), "tip").decode() == receipt["receipt_hash"]
        # Still frozen: the same request replays the same receipt and is still not acknowledged.
        _, again = await create_receipt(app, key, "frozen")
        assert again.status == 503
        assert again.json["error"]["details"]["receipt_id"] == written_id
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
    # Once the replica catches up, the same request confirms it: 200 replay, same receipt.
    _, confirmed = await create_receipt(app, key, "frozen")
    assert confirmed.status == 200, confirmed.text
    assert confirmed.json["idempotency"]["hit"] is True
    assert confirmed.json["receipt"]["receipt_id"] == written_id
    _, after = await create_receipt(app, key, "after")
    assert after.status == 201
    assert after.json["receipt"]["prev_receipt_hash"] == receipt["receipt_hash"]


# --- crash: kill -9 of Redis with appendfsync always ---------------------------------------


@pytest.fixture
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServicePool]:
    with ServicePool(tmp_path_factory.mktemp("durability")) as pool:
        yield pool


CRASH_RECEIPTS = 300


@pytest.mark.slow
@pytest.mark.real_redis
def test_kill_9_of_redis_loses_no_acknowledged_receipt(redis_servers: list[RedisServer], services: ServicePool) -> None:
    server = start_redis(redis_servers, AOF_ALWAYS)
    service = services.start(redis_url=server.url)
    key = create_key_cli(server.url, project="crash", plan="pro")
    acknowledged: list[dict[str, Any]] = []
    with httpx.Client(base_url=service.base_url, timeout=30) as http:
        for i in range(CRASH_RECEIPTS):
            response = http.post(
                "/v1/receipts", content=orjson.dumps({"input_hash": hash_of(f"crash-{i}")}), headers=auth(key)
            )
            assert response.status_code == 201, response.text
            acknowledged.append(response.json()["receipt"])

        server.stop(kill=True)  # SIGKILL: no shutdown, no final fsync
        down = http.get(f"/v1/receipts/{acknowledged[0]['receipt_id']}")
        assert_error_body(down, 503, "store_unavailable")
        server.start()  # same --dir and --port: Redis replays its AOF
        server.wait_until_ready()

        started = time.monotonic()
        for receipt in acknowledged:  # the same service process, never restarted
            read = http.get(f"/v1/receipts/{receipt['receipt_id']}")
            assert read.status_code == 200, read.text
            assert read.json()["receipt"] == receipt
        print(f"read back {len(acknowledged)} receipts in {time.monotonic() - started:.2f} s after the restart")
        tip = acknowledged[-1]["receipt_hash"]
        with redis.Redis.from_url(server.url) as conn:
            assert conn.hget(project_key(key["project_id"]), "tip").decode() == tip
        for earlier, later in itertools.pairwise(acknowledged):
            assert later["prev_receipt_hash"] == earlier["receipt_hash"]

        after = http.post(
            "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("after-crash")}), headers=auth(key)
        )
        assert after.status_code == 201, after.text
        assert after.json()["receipt"]["prev_receipt_hash"] == tip
        assert after.json()["receipt"]["chain_status"] == "main"


@pytest.mark.real_redis
async def test_a_full_redis_with_noeviction_answers_503_and_keeps_every_receipt(
    redis_servers: list[RedisServer], receipt_root: str
) -> None:
    server = start_redis(redis_servers, ["--maxmemory-policy", "noeviction"])
    store = Store(aioredis.from_url(server.url))
    try:
        app = create_app(Settings(redis_url=server.url, receipt_root=receipt_root, env="test"), store=store)
        key = await create_project_key(store.keys, project_name="full", plan="pro")
        _, first = await create_receipt(app, key, "before-full")
        assert first.status == 201
        with redis.Redis.from_url(server.url) as conn:
            for filler in range(64):
                conn.set(f"filler:{filler}", b"x" * 65536)
            # Below what is used: with noeviction Redis evicts nothing and refuses every write.
            conn.config_set("maxmemory", "1mb")
        _, refused = await create_receipt(app, key, "when-full")
        assert refused.status == 503, refused.text
        assert refused.json["error"]["code"] == "store_unavailable"
        # Reads are refused too (each request counts in a Redis rate-limit counter), but nothing
        # was evicted: once memory is available again the receipt is served.
        receipt_id = first.json["receipt"]["receipt_id"]
        _, read = await app.asgi_client.get(f"/v1/receipts/{receipt_id}")
        assert read.status == 503
        with redis.Redis.from_url(server.url) as conn:
            assert conn.exists(receipt_key(receipt_id)) == 1
            conn.config_set("maxmemory", "0")
        _, read = await app.asgi_client.get(f"/v1/receipts/{receipt_id}")
        assert read.status == 200
        assert read.json["receipt"] == first.json["receipt"]
    finally:
        await store.close()
