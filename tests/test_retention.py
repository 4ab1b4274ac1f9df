"""Retention (docs/jobs.md): the sweep on fakeredis and a real redis-server, and ``service.py expire``.

Receipts are issued through the API with an injected clock (``create_app(clock_ms=...)``)
so that some are ten days old and some fresh, then swept with a one-day window. Bulk and
concurrency tests write receipts straight into the store with ids of chosen times.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from subprocess import PIPE
from typing import Any

import fakeredis
import orjson
import pytest
import redis.asyncio as aioredis

from execution_proof.jobs.retention import DAY_MS, cutoff_ms, sweep, sweep_periodically
from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.records import Counter, IssueOutcome
from execution_proof.kv.store import Store
from execution_proof.receipts.ids import new_receipt_id
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests import retention_fixtures
from tests.clock import Clock
from tests.conftest import REPO, auth, hash_of, index_field
from tests.retention_fixtures import NOW, OLD, Travel
from tests.servers import clean_env, run_cli

app = retention_fixtures.app  # the shared retention-window fixtures
travel = retention_fixtures.travel


@pytest.fixture
def clock() -> Clock:
    """Here the clock starts at ``OLD`` (the shared ``app`` reads this module's clock)."""
    return Clock(OLD)


async def create(client: Any, key: Any, body: dict[str, Any], **headers: str) -> Any:
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers={**auth(key), **headers})
    return response


async def get(client: Any, ref: str, **params: str) -> Any:
    _, response = await client.get(f"/v1/receipts/{ref}", params=params)
    return response


async def verify(client: Any, key: Any, body: dict[str, Any]) -> Any:
    _, response = await client.post("/v1/verify", content=orjson.dumps(body), headers=auth(key))
    return response


def entry(project_id: str, field: bytes) -> str:
    """A name for one field of a project's index buckets, as ``record_keys`` lists it."""
    return f"{keys.index_meta_key(project_id)}#{field.hex()}"


async def record_keys(store: Store) -> set[str]:
    """Every receipt, hash-index and idempotency record in the store: ``r:`` keys and the
    ``h`` and ``i`` fields of the index buckets (``entry``)."""
    found: set[str] = set()
    async for name in store.client.scan_iter(match=keys.RECEIPT_KEY_MATCH, count=1000):
        found.add(name.decode() if isinstance(name, bytes) else name)
    async for name in store.client.scan_iter(match=keys.INDEX_BUCKET_KEY_MATCH, count=1000):
        meta = keys.index_meta_of_bucket(name.decode())
        for field in await store.client.hkeys(name):
            if field[:1] in (b"h", b"i"):
                found.add(f"{meta}#{field.hex()}")
    return found


async def other_keys(store: Store) -> dict[bytes, Any]:
    """Every other key with its value: the sweep must leave all of them alone."""
    out: dict[bytes, Any] = {}
    async for name in store.client.scan_iter(count=1000):
        if not name.startswith((b"r:", b"x:", b"b:")):
            out[name] = await store.client.dump(name)
    return out


class Planted:
    """Receipts written straight into the store (no signing) by the issue script, with ids
    of chosen creation times."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.tips: dict[str, str | None] = {}
        self.count = 0

    async def project(self) -> str:
        created = await create_project_key(self.store.keys, project_name="planted", plan="pro")
        project_id: str = created["project_id"]
        self.tips[project_id] = None
        return project_id

    async def receipt(self, project_id: str, created_ms: int) -> dict[str, str]:
        self.count += 1
        receipt_id = new_receipt_id(project_id, created_ms)
        receipt_hash = hash_of(f"planted-{receipt_id}")
        replay_key = f"ik_planted{self.count}"
        receipt = {"receipt_id": receipt_id, "project_id": project_id, "receipt_hash": receipt_hash}
        result = await self.store.receipts.issue_receipt(
            project_id=project_id,
            receipt_id=receipt_id,
            receipt_hash=receipt_hash,
            receipt_json=orjson.dumps(receipt),
            built_on_tip=self.tips[project_id],
            on_main=True,
            replay_key=replay_key,
            fingerprint=f"fp{self.count}",
            key_hash=hash_of("planted-key"),
            minute=Counter("1", 10**9, 120),
            month=Counter("202601", 10**9, 3600),
        )
        assert result.outcome is IssueOutcome.ISSUED
        self.tips[project_id] = receipt_hash
        return {
            "receipt_id": receipt_id,
            "receipt_hash": receipt_hash,
            "project_id": project_id,
            "r": keys.receipt_key(receipt_id),
            "h": entry(project_id, keys.hash_index_field(receipt_hash)),
            "i": entry(project_id, keys.idempotency_field(replay_key)),
        }


def names_of(receipts: list[dict[str, str]]) -> set[str]:
    return {r[kind] for r in receipts for kind in ("r", "h", "i")}


# --- through the API --------------------------------------------------------------------


async def test_sweep_removes_expired_receipts_keeps_fresh_ones_and_every_tip(
    client: Any, store: Store, api_key: dict[str, Any], travel: Travel
) -> None:
    await travel(OLD)
    o1 = (await create(client, api_key, {"input_hash": hash_of("o1")})).json["receipt"]
    o2_response = await create(client, api_key, {"input_hash": hash_of("o2")}, **{"Idempotency-Key": "old-key"})
    o2 = o2_response.json["receipt"]
    branch = await create(client, api_key, {"input_hash": hash_of("ob"), "prev_receipt_hash": hash_of("elsewhere")})
    assert branch.json["receipt"]["chain_status"] == "branch"
    o4 = (await create(client, api_key, {"input_hash": hash_of("o4")})).json["receipt"]
    await travel(NOW)
    fresh = (await create(client, api_key, {"input_hash": hash_of("fresh")})).json["receipt"]
    assert fresh["prev_receipt_hash"] == o4["receipt_hash"]

    # A second project whose receipts, tip included, are all old.
    other = await create_project_key(store.keys, project_name="old-only", plan="free")
    await travel(OLD)
    p1 = (await create(client, other, {"input_hash": hash_of("o1")})).json["receipt"]
    p2 = (await create(client, other, {"input_hash": hash_of("p2")})).json["receipt"]
    expired = [o1, o2, branch.json["receipt"], o4, p1, p2]
    before_other = await other_keys(store)

    summary = await sweep(store.retention, 1.0, NOW)
    assert summary["removed"] == {"receipts": 6, "hash_index": 6, "idempotency": 6, "search_index": 6}
    assert summary["retention_days"] == 1.0
    assert summary["scanned"] == 7 + 2, "r: (7 receipts) and b: (one index bucket per project here)"
    assert await other_keys(store) == before_other, "projects, tips, API keys and counters are untouched"

    await travel(NOW)
    for receipt in expired:
        assert (await get(client, receipt["receipt_id"])).status_code == 404
        by_hash = await get(client, receipt["receipt_hash"], project_id=receipt["project_id"])
        assert by_hash.status_code == 404
    assert (await get(client, fresh["receipt_id"])).json["receipt"] == fresh
    replay = await create(client, api_key, {"input_hash": hash_of("fresh")})
    assert replay.status_code == 200 and replay.json["receipt"] == fresh, "a fresh receipt still replays"
    assert await record_keys(store) == {
        keys.receipt_key(fresh["receipt_id"]),
        entry(fresh["project_id"], keys.hash_index_field(fresh["receipt_hash"])),
        entry(fresh["project_id"], keys.idempotency_field(replay.json["idempotency"]["key"])),
    }, "only the fresh receipt's record and its two entries remain"

    # The tips stay: the old-only project continues its chain from the expired tip.
    assert await store.receipts.read_tip(other["project_id"]) == (True, p2["receipt_hash"])
    assert await store.receipts.read_tip(api_key["project_id"]) == (True, fresh["receipt_hash"])
    following = await create(client, other, {"input_hash": hash_of("after")})
    assert following.status_code == 201
    assert following.json["receipt"]["prev_receipt_hash"] == p2["receipt_hash"]
    assert following.json["receipt"]["chain_status"] == "main"

    # The fresh receipt's previous one is gone: verify says so.
    checked = await verify(client, api_key, {"receipt_id": fresh["receipt_id"], "input_hash": hash_of("fresh")})
    assert checked.status_code == 200
    assert checked.json["ok"] is False
    assert checked.json["checks"] == {
        "signature": True,
        "hash_match": True,
        "receipt_hash_recompute": True,
        "chain_link": False,
    }
    assert checked.json["chain"]["prev_found"] is False

    # Idempotency records went with their receipts: identical creates issue new receipts.
    again = await create(client, api_key, {"input_hash": hash_of("o1")})
    assert again.status_code == 201 and again.json["idempotency"]["hit"] is False
    assert again.json["receipt"]["receipt_id"] != o1["receipt_id"]
    again_keyed = await create(client, api_key, {"input_hash": hash_of("o2")}, **{"Idempotency-Key": "old-key"})
    assert again_keyed.status_code == 201
    assert again_keyed.json["receipt"]["receipt_id"] != o2["receipt_id"]
    assert again_keyed.json["idempotency"] == {"hit": False, "key": o2_response.json["idempotency"]["key"]}

    # Run again: nothing left to remove.
    second = await sweep(store.retention, 1.0, NOW)
    assert second["removed"] == {"receipts": 0, "hash_index": 0, "idempotency": 0, "search_index": 0}


async def test_a_receipt_is_kept_until_it_is_older_than_the_window(
    client: Any, store: Store, api_key: dict[str, Any], travel: Travel
) -> None:
    await travel(NOW - DAY_MS)  # exactly one day old at NOW
    edge = (await create(client, api_key, {"input_hash": hash_of("edge")})).json["receipt"]
    await travel(NOW - DAY_MS - 1)
    older = (await create(client, api_key, {"input_hash": hash_of("older")})).json["receipt"]
    assert cutoff_ms(NOW, 1.0) == NOW - DAY_MS
    summary = await sweep(store.retention, 1.0, NOW)
    assert summary["removed"]["receipts"] == 1
    assert (await get(client, older["receipt_id"])).status_code == 404
    assert (await get(client, edge["receipt_id"])).status_code == 200
    assert (await sweep(store.retention, 1.0, NOW + 1))["removed"]["receipts"] == 1


async def test_an_operator_deleted_receipts_idempotency_record_goes_with_its_window(
    client: Any, store: Store, api_key: dict[str, Any], travel: Travel
) -> None:
    """``receipts delete`` removes the receipt and its hash-index and search entries only; the idempotency record left behind
    is dated by the receipt id it names, so the sweep removes it once that receipt's window
    has passed (a resend before then issues a new receipt: see tests/test_operator.py)."""
    await travel(NOW - DAY_MS // 2)
    created = await create(client, api_key, {"input_hash": hash_of("deleted")})
    receipt = created.json["receipt"]
    record = entry(api_key["project_id"], keys.idempotency_field(created.json["idempotency"]["key"]))
    assert await store.receipts.delete_receipt(receipt["receipt_id"]) is not None
    assert await record_keys(store) == {record}
    assert (await sweep(store.retention, 1.0, NOW))["removed"] == {
        "receipts": 0,
        "hash_index": 0,
        "idempotency": 0,
        "search_index": 0,
    }
    assert await record_keys(store) == {record}, "still inside its window"
    later = await sweep(store.retention, 1.0, NOW + DAY_MS)
    assert later["removed"] == {"receipts": 0, "hash_index": 0, "idempotency": 1, "search_index": 0}
    assert await record_keys(store) == set()
    await travel(NOW + DAY_MS)
    again = await create(client, api_key, {"input_hash": hash_of("deleted")})
    assert again.status_code == 201 and again.json["receipt"]["receipt_id"] != receipt["receipt_id"]


# --- straight into the store ------------------------------------------------------------


async def test_entries_are_removed_only_while_they_name_the_expired_receipt(store: Store) -> None:
    planted = Planted(store)
    project_id = await planted.project()
    old = await planted.receipt(project_id, OLD)
    fresh = await planted.receipt(project_id, NOW)
    # Rewrite the old receipt's index fields to name the fresh receipt: the sweep keeps them.
    fresh_id = keys.receipt_id_bytes(fresh["receipt_id"])
    level, split = await store.client.hmget(keys.index_meta_key(project_id), "level", "split")
    fields = {kind: bytes.fromhex(old[kind].partition("#")[2]) for kind in ("h", "i")}
    for kind, value in (("h", fresh_id), ("i", fresh_id + b"fpXfpX12")):
        bucket = keys.index_bucket(fields[kind], int(level or 0), int(split or 0))
        await store.client.hset(keys.index_bucket_key(project_id, bucket), fields[kind], value)
    summary = await store.retention.expire_receipts(cutoff_ms(NOW, 1.0))
    assert summary == {"receipts": 1, "hash_index": 0, "idempotency": 0, "search_index": 0, "scanned": 3}
    assert await index_field(store, project_id, fields["h"]) == fresh_id
    assert await index_field(store, project_id, fields["i"]) == fresh_id + b"fpXfpX12"


async def test_the_sweep_leaves_foreign_and_malformed_keys_alone(store: Store) -> None:
    planted = Planted(store)
    project_id = await planted.project()
    old = await planted.receipt(project_id, OLD)
    foreign = {
        b"r:{ABCD}:not-a-receipt": b"x",
        b"r:no-brace:" + old["receipt_id"].encode(): b"x",
        b"h:{ABCD}:" + b"0" * 64: b"garbage",
        b"i:{ABCD}:prj_x:ik_y": b"\xff\xfe not utf-8",
        b"rq:job:" + old["receipt_id"].encode(): b"{}",
        b"ip:{1.2.3.4}:scope:1": b"3",
        b"b:{ABCD}:prj_x:0": b"a string where a bucket would be",
        b"b:{ABCD}:prj_x:not-a-number": b"x",
    }
    for name, value in foreign.items():
        await store.client.set(name, value)
    await store.client.hset(b"h:{ABCD}:hash-typed", "f", old["receipt_id"])
    # A bucket-shaped hash with fields that are none of the index's: left alone.
    odd_fields = {b"zfield": b"\x00" * 16, b"I": b"not a multiple of 16", b"h": b"short"}
    await store.client.hset(b"b:{ABCD}:prj_y:1", mapping=odd_fields)
    summary = await store.retention.expire_receipts(cutoff_ms(NOW, 1.0))
    assert (summary["receipts"], summary["hash_index"], summary["idempotency"]) == (1, 1, 1)
    for name, value in foreign.items():
        assert await store.client.get(name) == value, name
    assert await store.client.exists(b"h:{ABCD}:hash-typed") == 1
    assert await store.client.hgetall(b"b:{ABCD}:prj_y:1") == odd_fields


@pytest.fixture(params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.slow)])
async def two_stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, Store]]:
    """Two stores with their own connections to one backend, like two sweeping processes."""
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        make: Callable[[], Any] = lambda: fakeredis.FakeAsyncRedis(server=server)  # noqa: E731
    else:
        url = request.getfixturevalue("redis_url")
        make = lambda: aioredis.from_url(url)  # noqa: E731
    first, second = Store(make()), Store(make())
    yield first, second
    await first.close()
    await second.close()


async def test_two_concurrent_sweeps_remove_each_key_once(two_stores: tuple[Store, Store]) -> None:
    first, second = two_stores
    planted = Planted(first)
    old: list[dict[str, str]] = []
    fresh: list[dict[str, str]] = []
    for _ in range(4):
        project_id = await planted.project()
        for n in range(60):
            old.append(await planted.receipt(project_id, OLD + n))
        for n in range(5):
            fresh.append(await planted.receipt(project_id, NOW + n))
    cutoff = cutoff_ms(NOW, 1.0)
    results = await asyncio.gather(
        first.retention.expire_receipts(cutoff, batch=17),
        second.retention.expire_receipts(cutoff, batch=23),
        first.retention.expire_receipts(cutoff, batch=50),
    )
    for kind in ("receipts", "hash_index", "idempotency"):
        assert sum(result[kind] for result in results) == len(old), (kind, results)
    assert await record_keys(first) == names_of(fresh)
    for project_id, tip in planted.tips.items():
        assert await first.receipts.read_tip(project_id) == (True, tip)
    again = await second.retention.expire_receipts(cutoff)
    assert (again["receipts"], again["hash_index"], again["idempotency"]) == (0, 0, 0)


async def test_sweep_periodically_sweeps_until_cancelled(store: Store) -> None:
    planted = Planted(store)
    project_id = await planted.project()
    old = await planted.receipt(project_id, OLD)
    task = asyncio.create_task(sweep_periodically(store.retention, 1.0, interval_s=0.01))
    try:
        for _ in range(500):
            if not await store.client.exists(old["r"]):
                break
            await asyncio.sleep(0.01)
        assert not await store.client.exists(old["r"])
        assert not {old["h"], old["i"]} & await record_keys(store)
        await planted.receipt(project_id, NOW - 2 * DAY_MS)
        await asyncio.sleep(0.1)
        assert await record_keys(store) == set(), "later runs keep sweeping"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_receipt_ids_date_themselves() -> None:
    for ms in (0, 1, OLD, NOW, 2**48 - 1):
        receipt_id = new_receipt_id("prj_" + "0" * 26, ms)
        assert keys.receipt_created_ms(receipt_id) == ms
        assert keys.receipt_id_in_receipt_key(keys.receipt_key(receipt_id)) == receipt_id
    assert keys.receipt_id_in_receipt_key("r:{ABCD}:rcpt_short") is None


# --- python service.py expire -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.real_redis
async def test_expire_command_sweeps_once_and_prints_a_summary(redis_url: str, receipt_root: str) -> None:
    store = Store(aioredis.from_url(redis_url))
    try:
        settings = Settings(redis_url=redis_url, receipt_root=receipt_root, env="test", retention_days=0.0001)
        clock = Clock(int(time.time() * 1000) - 60_000)  # a minute ago: past a window of 8.64 s
        app = create_app(settings, store=store, clock_ms=clock)
        key = await create_project_key(store.keys, project_name="cli", plan="free")
        old = (await create(app.asgi_client, key, {"input_hash": hash_of("cli-old")})).json["receipt"]
        clock.now = int(time.time() * 1000) + 60_000  # a minute ahead: fresh at any sweep now
        fresh = (await create(app.asgi_client, key, {"input_hash": hash_of("cli-fresh")})).json["receipt"]
        assert (await get(app.asgi_client, old["receipt_id"])).status_code == 200

        env = {"REDIS_URL": redis_url, "RETENTION_DAYS": "0.0001"}
        done = await asyncio.to_thread(run_cli, "expire", env=env)
        assert done.returncode == 0, done.stderr
        summary = orjson.loads(done.stdout)
        assert summary["removed"] == {"receipts": 1, "hash_index": 1, "idempotency": 1, "search_index": 1}
        assert summary["retention_days"] == 0.0001
        assert set(summary) == {"removed", "scanned", "cutoff", "retention_days", "took_ms"}
        assert (await get(app.asgi_client, old["receipt_id"])).status_code == 404
        assert (await get(app.asgi_client, fresh["receipt_id"])).status_code == 200

        again = await asyncio.to_thread(run_cli, "expire", env=env)
        assert again.returncode == 0, again.stderr
        assert orjson.loads(again.stdout)["removed"] == {
            "receipts": 0,
            "hash_index": 0,
            "idempotency": 0,
            "search_index": 0,
        }
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.real_redis
async def test_two_expire_processes_at_once_remove_each_key_once(redis_url: str) -> None:
    store = Store(aioredis.from_url(redis_url))
    try:
        planted = Planted(store)
        old = []
        for _ in range(3):
            project_id = await planted.project()
            old += [await planted.receipt(project_id, OLD + n) for n in range(500)]
        env = clean_env({"REDIS_URL": redis_url, "RETENTION_DAYS": "1"})
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable, "service.py", "expire", cwd=REPO, env=env, stdout=PIPE, stderr=PIPE
            )
            for _ in range(2)
        ]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in processes)), 60)
        assert [p.returncode for p in processes] == [0, 0], [err for _, err in outputs]
        removed = [orjson.loads(out)["removed"] for out, _ in outputs]
        for kind in ("receipts", "hash_index", "idempotency"):
            assert sum(r[kind] for r in removed) == len(old), removed
        assert await record_keys(store) == set()
    finally:
        await store.close()


def test_expire_without_redis_url_exits_2() -> None:
    done = run_cli("expire")
    assert done.returncode == 2
    assert "REDIS_URL" in done.stderr and "embedded" in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_expire_with_unreachable_redis_exits_2() -> None:
    from tests.conftest import free_port

    done = run_cli("expire", env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    assert done.returncode == 2
    assert "unreachable" in done.stderr and "Traceback" not in done.stderr


class SwallowingStore:
    """A store whose sweep swallows a cancellation, as the Redis client sometimes does
    (seen with fakeredis: the sweep then returned normally)."""

    def __init__(self) -> None:
        self.inside = asyncio.Event()
        self.calls = 0
        self.broken = False

    async def expire_receipts(self, cutoff: int) -> dict[str, int]:
        if self.broken:
            raise RuntimeError("ended by the test")  # ends a loop that ignored its cancel
        self.calls += 1
        self.inside.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # until cancelled; the cancellation goes nowhere
        return dict.fromkeys(("receipts", "hash_index", "idempotency", "search_index", "scanned"), 0)


async def test_sweep_periodically_stops_even_when_a_store_call_swallows_the_cancel() -> None:
    store = SwallowingStore()
    task = asyncio.create_task(sweep_periodically(store, 1.0, interval_s=0.01))  # type: ignore[arg-type]
    await store.inside.wait()
    task.cancel()
    # Bounded without cancelling again (wait_for would wait for the loop that never ends).
    done, _ = await asyncio.wait({task}, timeout=5)
    if not done:
        store.broken = True
        await asyncio.wait({task}, timeout=5)
    assert done, "the cancelled loop kept sweeping"
    assert task.cancelled()
    assert store.calls == 1, "no sweep after the cancel"
