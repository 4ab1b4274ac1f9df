"""Redis outages seen through the real service (docs/redis.md).

A real ``service.py serve`` on its own redis-server (AOF, ``appendfsync always``):

- Redis killed (connections refused) or frozen (SIGSTOP: connections open, no answer):
  creates and reads answer the JSON 503 ``store_unavailable`` with ``Retry-After`` within
  ``OUTAGE_BOUND_S``, and ``/health`` stays 200 with ``"store": "unreachable"``.
- Redis back (a restart empties the script cache): the same service recovers by itself, and
  the first create after Redis answers is a 201.
- Creates racing the kill: afterwards the project's receipts form one linear chain ending at
  the stored tip, and every 201 is readable (no partial writes).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv.keys import project_key
from execution_proof.receipts import compact
from tests.conftest import RedisServer, auth, hash_of, missing_binary
from tests.servers import ServicePool, ServiceProcess, assert_error_body, create_key_cli

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

OUTAGE_BOUND_S = 7.0
"""Connect timeout 2 s / command timeout 5 s (kv/connect.py), plus room for a slow machine."""
AOF_ALWAYS = ["--appendonly", "yes", "--appendfsync", "always"]
ENTRY_FIELDS = {"product", "subtitle", "env", "docs_url", "endpoints", "store", "keys", "log"}


@pytest.fixture
def redis_down_and_up() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing_binary("redis-server", "outages are proven on a real Redis")
    assert binary is not None
    server = RedisServer(binary, AOF_ALWAYS)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.cleanup()


@pytest.fixture
def service(redis_down_and_up: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with ServicePool(tmp_path_factory.mktemp("outage")) as pool:
        yield pool.start(redis_url=redis_down_and_up.url)


def create(http: httpx.Client, key: dict[str, Any], label: str) -> httpx.Response:
    return http.post("/v1/receipts", content=orjson.dumps({"input_hash": hash_of(label)}), headers=auth(key))


def timed(call: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def assert_unavailable_everywhere(http: httpx.Client, key: dict[str, Any], receipt_id: str, label: str) -> list[float]:
    """Create, read and /health during the outage; returns the three latencies."""
    created, t_create = timed(lambda: create(http, key, label))
    assert_error_body(created, 503, "store_unavailable")
    assert created.headers["retry-after"] == "1"
    read, t_read = timed(lambda: http.get(f"/v1/receipts/{receipt_id}"))
    assert_error_body(read, 503, "store_unavailable")
    health, t_health = timed(lambda: http.get("/health"))
    assert health.status_code == 200
    assert set(health.json()) == ENTRY_FIELDS
    assert health.json()["store"] == "unreachable"
    for elapsed in (t_create, t_read, t_health):
        assert elapsed < OUTAGE_BOUND_S, (t_create, t_read, t_health)
    return [t_create, t_read, t_health]


def test_outage_answers_503_fast_and_recovers_by_itself(
    service: ServiceProcess, redis_down_and_up: RedisServer
) -> None:
    server = redis_down_and_up
    key = create_key_cli(server.url, project="outage", plan="pro")
    with httpx.Client(base_url=service.base_url, timeout=30) as http:
        assert http.get("/health").json()["store"] == "ok"
        assert http.get("/").json()["store"] == "ok"
        before = [create(http, key, f"before-{i}") for i in range(5)]
        assert [r.status_code for r in before] == [201] * 5
        first_id = before[0].json()["receipt"]["receipt_id"]

        # 1. Frozen Redis: the socket is open, nothing answers; the command timeout decides.
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            frozen = assert_unavailable_everywhere(http, key, first_id, "during-freeze")
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        thawed, t_thawed = timed(lambda: create(http, key, "after-freeze"))
        assert thawed.status_code == 201, thawed.text

        # 2. Killed Redis: connections are refused.
        server.stop(kill=True)
        down = assert_unavailable_everywhere(http, key, first_id, "during-kill")

        # 3. Restarted Redis (same directory: the AOF brings the data back, the script cache is empty).
        server.start()
        server.wait_until_ready()
        back = time.monotonic()
        recovered, t_recovered = timed(lambda: create(http, key, "after-restart"))
        assert recovered.status_code == 201, recovered.text  # the first create, no retry
        assert http.get("/health").json()["store"] == "ok"
        print(
            f"\nfrozen Redis: create {frozen[0]:.2f} s, read {frozen[1]:.2f} s, /health {frozen[2]:.2f} s; "
            f"first create after thaw {t_thawed:.2f} s\n"
            f"killed Redis: create {down[0]:.3f} s, read {down[1]:.3f} s, /health {down[2]:.3f} s\n"
            f"first create after restart: {t_recovered:.3f} s ({time.monotonic() - back:.3f} s after Redis answered)"
        )
        # The chain went on where it stopped: nothing from the failed requests is in it.
        receipts = [r.json()["receipt"] for r in [*before, thawed, recovered]]
        for earlier, later in itertools.pairwise(receipts):
            assert later["prev_receipt_hash"] == earlier["receipt_hash"]


def test_creates_racing_a_kill_leave_one_linear_chain(service: ServiceProcess, redis_down_and_up: RedisServer) -> None:
    server = redis_down_and_up
    key = create_key_cli(server.url, project="race", plan="pro")
    results: list[httpx.Response] = []
    lock = threading.Lock()
    stop = threading.Event()

    def fire(worker: int) -> None:
        with httpx.Client(base_url=service.base_url, timeout=30) as http:
            i = 0
            while not stop.is_set():
                response = create(http, key, f"race-{worker}-{i}")
                with lock:
                    results.append(response)
                i += 1

    threads = [threading.Thread(target=fire, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        server.stop(kill=True)
        time.sleep(1.0)
        server.start()
        server.wait_until_ready()
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    statuses = Counter(r.status_code for r in results)
    print(f"\nracing creates: {dict(statuses)}")
    assert set(statuses) <= {201, 503}, statuses
    assert statuses[201] > 0
    assert statuses[503] > 0
    for response in results:
        if response.status_code == 503:
            assert_error_body(response, 503, "store_unavailable")

    with redis.Redis.from_url(server.url) as conn:
        tip = conn.hget(project_key(key["project_id"]), "tip").decode()
        stored = [orjson.loads(compact.decode(conn.get(name))) for name in conn.scan_iter(match="r:*", count=1000)]
    stored_hashes = {r["receipt_hash"] for r in stored if r["project_id"] == key["project_id"]}
    acknowledged = {r.json()["receipt"]["receipt_hash"]: r.json()["receipt"] for r in results if r.status_code == 201}
    with httpx.Client(base_url=service.base_url, timeout=30) as http:
        # Walk the main chain from the stored tip to the first receipt.
        chain: list[dict[str, Any]] = []
        current: str | None = tip
        while current is not None:
            assert len(chain) <= len(results), "chain longer than the requests sent (a cycle?)"
            read = http.get(f"/v1/receipts/{current}", params={"project_id": key["project_id"]})
            assert read.status_code == 200, read.text
            chain.append(read.json()["receipt"])
            current = chain[-1]["prev_receipt_hash"]
        on_chain = {r["receipt_hash"] for r in chain}
        assert on_chain == stored_hashes, "a stored receipt of the project is not on the main chain"
        # Every acknowledged receipt is readable, identical, and on the one chain.
        for receipt_hash, receipt in acknowledged.items():
            assert receipt_hash in on_chain
            read = http.get(f"/v1/receipts/{receipt['receipt_id']}")
            assert read.status_code == 200
            assert read.json()["receipt"] == receipt
        # A 503 whose script had already run may have left a receipt (written, answer lost);
        # it is on the chain too, never beside it.
        for receipt in chain:
            assert receipt["chain_status"] == "main"
            assert receipt["expected_prev_receipt_hash"] == receipt["prev_receipt_hash"]
        after = create(http, key, "after-race")
        assert after.status_code == 201, after.text
        assert after.json()["receipt"]["prev_receipt_hash"] == tip
    print(f"chain: {len(chain)} receipts, {len(acknowledged)} acknowledged by 201")
