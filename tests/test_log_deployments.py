"""A waiting deployment says so (docs/log.md, "Never fork: what each fault does"): two
deployments with the same ``LOG_SIGNING_KEY``, ``LOG_ORIGIN`` and ``LOG_STORE`` but each its own
Redis (a copy-paste of configuration) share one history, one integrator at a time behind the
store's lease; the one whose integrator holds the lease never reads the other's Redis, so the
other's entries wait. Its standby worker says so at WARNING, once per holder, naming both
deployments; it never marks progress, and its ``/health`` says ``stalled`` once its oldest
waiting entry is older than ``LOG_STALL_S``. In process (fakeredis, one store directory), then
with two redis-servers and their real processes on one store directory."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import orjson
import pytest
import redis

from execution_proof.jobs.log_config import LogConfig
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.kv.store import Store
from execution_proof.transparency import tlog
from tests.clock import Clock
from tests.conftest import hash_of
from tests.log_stack import WAIT_S, Stack, assert_placed, certificate_indices, log_entries, log_records, log_size
from tests.servers import wait_until
from tests.test_log import IDENTITY, KEY_ENTRIES, ORIGIN, SIGNER, issue, log_app, published
from tests.test_log_state_files import poll

STALL_S = 5.0
BEHIND = "another Redis holds the lease"


def own_redis() -> Store:
    """A deployment's own Redis (a fakeredis server of its own)."""
    return Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))


async def worker(store: Store, log_store: LogStore, **config: Any) -> Integrator:
    made = Integrator(store.log_queue, log_store, LogConfig(ORIGIN, SIGNER, stall_s=STALL_S, **config))
    await made.prepare()
    return made


async def look(integrator: Integrator) -> bool:
    """The integrator's next look at the lease, now (the time between its looks passed)."""
    integrator.lease._checked = -1e9
    return await integrator._hold_lease()


def behind_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and BEHIND in r.getMessage()]


@pytest.fixture
async def shared(tmp_path: Path) -> Any:
    """The one log store both deployments name (a real directory)."""
    log_store = LogStore(FileObjects(tmp_path / "log"))
    yield log_store
    await log_store.close()


async def test_a_standby_behind_another_deployments_lease_warns_once_per_holder(
    shared: LogStore, receipt_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Deployment blue's integrator holds the lease. Green's standby says nothing while green's
    entries are younger than ``LOG_STALL_S``; once one is older, it warns once at WARNING (however
    often it looks), naming blue's deployment and its own and what to do. A worker of green's own
    deployment holding the lease is not warned about; red's, next, is (once)."""
    blue, green, red = own_redis(), own_redis(), own_redis()
    now_ms = int(time.time() * 1000)
    clock = Clock(now_ms)
    green_app = log_app(green, shared, receipt_root, SIGNER, clock_ms=clock)
    first = await worker(blue, shared)  # creates the log
    assert await look(first)
    standby = await worker(green, shared)
    fresh = await create_project_key(green.keys, project_name="fresh", plan="pro")
    older = await create_project_key(green.keys, project_name="older", plan="pro")
    caplog.set_level(logging.INFO, logger="eps.log")
    caplog.clear()  # the log's creation said so at WARNING

    await issue(green_app, fresh, ["fresh"])
    assert not await look(standby)
    assert behind_warnings(caplog) == [], "an entry younger than LOG_STALL_S is not waiting behind anyone"
    clock.set(now_ms - 60_000)
    await issue(green_app, older, ["made-a-minute-ago"])
    for _ in range(3):
        assert not await look(standby)
    [said] = behind_warnings(caplog)
    assert first.lease.deployment and standby.lease.deployment and first.lease.deployment != standby.lease.deployment
    assert f"held by another deployment ({first.lease.deployment}); this one is {standby.lease.deployment}" in said, (
        said
    )
    assert "never enter the log" in said and "or point both at one Redis" in said, said
    assert [r.levelno for r in caplog.records if r.levelno >= logging.WARNING] == [logging.WARNING]

    # Another worker of green's own deployment (the same Redis) takes the lease: no warning.
    await shared.lease(first.lease.token, 0, "drop")
    sibling = await worker(green, shared)
    assert await look(sibling)
    assert sibling.lease.deployment == standby.lease.deployment
    for _ in range(2):
        assert not await look(standby)
    assert len(behind_warnings(caplog)) == 1

    # Deployment red holds it next: said once more, naming red.
    await shared.lease(sibling.lease.token, 0, "drop")
    third = await worker(red, shared)
    assert await look(third)
    lease = orjson.loads((Path(shared.url.removeprefix("file://")) / ".state/lease").read_bytes())
    assert lease["token"] == third.lease.token and lease["deployment"] == third.lease.deployment
    for _ in range(3):
        assert not await look(standby)
    warnings = behind_warnings(caplog)
    assert len(warnings) == 2 and f"({third.lease.deployment}); this one is {standby.lease.deployment}" in warnings[1]
    assert not await look(first)  # blue, a standby now, has nothing waiting: says nothing
    assert len(behind_warnings(caplog)) == 2


async def test_a_standby_never_marks_progress(
    shared: LogStore, receipt_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Green's worker runs its loop as a standby behind blue's lease, looking at the lease every
    0.1 s: it warns, and in all its passes it never sets green's progress mark (which
    ``/health`` reads), never touches green's queue and never publishes."""
    blue, green = own_redis(), own_redis()
    clock = Clock(int(time.time() * 1000) - 60_000)
    first = await worker(blue, shared, lease_ms=60_000)
    assert await look(first)
    key = await create_project_key(green.keys, project_name="behind", plan="pro")
    await issue(log_app(green, shared, receipt_root, SIGNER, clock_ms=clock), key, ["a", "b"])
    before = await published(shared, SIGNER)
    standby_store = LogStore(FileObjects(Path(shared.url.removeprefix("file://"))))
    looks = 0
    real_lease = standby_store.lease

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal looks
        looks += 1
        return await real_lease(*args, **kwargs)

    standby_store.lease = counted  # type: ignore[method-assign]
    standby = Integrator(green.log_queue, standby_store, LogConfig(ORIGIN, SIGNER, stall_s=STALL_S, lease_ms=400))
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="eps.log")
    task = asyncio.ensure_future(standby.run(stop))
    try:
        await poll(lambda: looks >= 10 and bool(behind_warnings(caplog)), "ten looks at the lease and a warning")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await standby_store.close()
    assert not standby.lease.holding
    assert await green.client.get(keys.log_progress_key(IDENTITY)) is None, "a standby marked progress"
    assert await green.client.llen(keys.log_queue_key(IDENTITY, key["project_id"])) == 2
    assert await published(shared, SIGNER) == before
    assert len(behind_warnings(caplog)) == 1


async def test_health_judges_a_stall_by_the_oldest_entry_waiting_in_its_own_redis(
    shared: LogStore, receipt_root: str
) -> None:
    """Blue's integrator keeps publishing (blue's ``/health`` says ``ok``); green's entries wait
    behind its lease. Green's ``/health``: ``ok`` with no entry, and with fresh ones whatever
    its progress mark says; ``stalled`` once the oldest head of its queues (a receipt made a
    minute ago, in another project than the fresh one) is older than ``LOG_STALL_S`` and no
    integrator marked progress in green's Redis for as long; ``ok`` while one has."""
    blue, green = own_redis(), own_redis()
    now_ms = int(time.time() * 1000)
    clock = Clock(now_ms)
    blue_app = log_app(blue, shared, receipt_root, SIGNER, log_stall_s=STALL_S)
    green_app = log_app(green, shared, receipt_root, SIGNER, clock_ms=clock, log_stall_s=STALL_S)
    first = await worker(blue, shared)
    assert await look(first)
    blue_key = await create_project_key(blue.keys, project_name="blue", plan="pro")
    fresh = await create_project_key(green.keys, project_name="fresh", plan="pro")
    older = await create_project_key(green.keys, project_name="older", plan="pro")

    async def health(app: Any) -> str:
        app.ctx.services.log._state = (-1e9, "")  # past the 2 s cache
        _, response = await app.asgi_client.get("/health")
        assert response.status == 200, response.text
        return str(response.json["log"])

    async def mark(ms: int) -> None:
        await green.client.set(keys.log_progress_key(IDENTITY), ms)

    assert await health(green_app) == "ok"
    await issue(green_app, fresh, ["fresh-1", "fresh-2"])
    assert await health(green_app) == "ok", "a fresh entry is not a stall"
    await mark(0)
    assert await health(green_app) == "ok", "a fresh entry is not a stall, however long no integrator ran"
    clock.set(now_ms - 60_000)
    [made] = await issue(green_app, older, ["made-a-minute-ago"])
    clock.set(now_ms)
    await issue(green_app, older, ["queued-behind-it"])
    oldest = await green.log_queue.log_oldest_waiting_ms(IDENTITY)
    assert oldest == keys.receipt_created_ms(made["receipt_id"]) < now_ms - 59_000
    assert await health(green_app) == "stalled"
    await mark(int(time.time() * 1000))
    assert await health(green_app) == "ok", "an integrator of green's marked progress just now"
    await mark(0)
    assert await health(green_app) == "stalled"

    await issue(blue_app, blue_key, ["blue"])
    # Blue's log goes on (its receipt and blue's key certificate), and its integrator marks blue's Redis.
    assert await first.step(force=True) == log_size(1)
    assert (await published(shared, SIGNER)).size == log_size(1)
    assert await health(blue_app) == "ok"
    assert await health(green_app) == "stalled"
    assert await green.client.get(keys.log_progress_key(IDENTITY)) == b"0"


async def test_the_oldest_waiting_entry_is_the_oldest_queue_head_of_the_dirty_projects(
    receipt_root: str, shared: LogStore
) -> None:
    """``log_oldest_waiting_ms``: None with nothing queued; the oldest head among the dirty
    projects' queues; a head that names no receipt (not this format) is passed over."""
    store = own_redis()
    clock = Clock("2026-11-21T10:00:00Z")
    app = log_app(store, shared, receipt_root, SIGNER, clock_ms=clock)
    queue = store.log_queue
    assert await queue.log_oldest_waiting_ms(IDENTITY) is None
    made = {}
    for name, at in [("a", "2026-11-21T10:00:05Z"), ("b", "2026-11-21T09:59:00Z"), ("c", "2026-11-21T10:00:01Z")]:
        key = await create_project_key(store.keys, project_name=name, plan="pro")
        clock.set(at)
        made[name] = (await issue(app, key, [f"{name}-first"]))[0]
        clock.set("2026-11-21T08:00:00Z")  # later entries of a project are not its head
        await issue(app, key, [f"{name}-second"])
    assert await queue.log_oldest_waiting_ms(IDENTITY) == keys.receipt_created_ms(made["b"]["receipt_id"])
    strange = "junk-project"
    await store.client.sadd(keys.log_dirty_key(IDENTITY), strange)
    await store.client.rpush(keys.log_queue_key(IDENTITY, strange), b"not an entry", tlog.entry_bytes(made["a"]))
    assert await queue.log_oldest_waiting_ms(IDENTITY) == keys.receipt_created_ms(made["b"]["receipt_id"])


# --------------------------------------------------------------------------- the real processes


@pytest.mark.slow
def test_a_second_deployment_with_its_own_redis_on_the_same_store_says_it_waits(stacks: Any) -> None:
    """Two deployments: two redis-servers, one log store directory, the same key and origin.
    Deployment 1's worker holds the lease and its log goes on. Deployment 2 (``LOG_STALL_S=2``)
    creates receipts: its ``Prefer: wait`` finds no proof, its entries stay queued, its worker
    says once at WARNING that deployment 1 (by the id in deployment 1's Redis) holds the lease,
    naming its own id too, and its ``/health`` says ``stalled`` (deployment 1's ``ok``). Once
    deployment 1's worker stops, deployment 2's takes the lease and its entries enter the same
    log."""
    first: Stack = stacks("deploy-1")
    second: Stack = stacks("deploy-2")
    second.signer, second.store_dir = first.signer, first.store_dir
    second.env |= {"LOG_SIGNING_KEY": first.env["LOG_SIGNING_KEY"], "LOG_STORE": first.env["LOG_STORE"]}
    second.env["LOG_STALL_S"] = "2"
    first.start_redis()
    first.serve()
    holder = first.worker()
    first_keys = first.make_keys(1)
    receipts = first.create_waiting(first_keys, 2)
    second.start_redis()
    second.serve()
    standby = second.worker()
    second_keys = second.make_keys(1)
    waiting = second.create(second_keys, 3)
    response = second.client.post(
        second.base_url + "/v1/receipts",
        headers={"Authorization": f"Bearer {second_keys[0]['api_key']}", "Prefer": "wait=1"},
        json={"input_hash": hash_of("waits-a-second")},
    )
    assert response.status_code == 201 and response.json()["log"]["status"] == "pending", response.text
    waiting.append(response.json()["receipt"])

    def behind() -> list[dict[str, Any]]:
        return [r for r in log_records(standby) if BEHIND in str(r.get("msg"))]

    wait_until(lambda: bool(behind()), WAIT_S, "deployment 2's worker to say it waits behind deployment 1")
    wait_until(lambda: health(second) == "stalled", WAIT_S, "deployment 2's /health to say stalled")
    first_id, second_id = deployment_id(first), deployment_id(second)
    assert first_id and second_id and first_id != second_id
    [said] = behind()
    assert said["level"] == "warning", said
    assert f"held by another deployment ({first_id}); this one is {second_id}" in said["msg"], said
    receipts += first.create_waiting(first_keys, 1)  # deployment 1's log goes on meanwhile
    assert health(first) == "ok"
    assert health(second) == "stalled"
    # Each deployment's server queued its key's certificate as well; pending counts queue
    # items (a receipt's entry and its dsse leaf are one).
    assert second.pending() == 4 + KEY_ENTRIES and first.stored().size == log_size(3)
    assert len(behind()) == 1, "said once per holder"
    assert not [r for r in log_records(holder) if BEHIND in str(r.get("msg"))]

    assert holder.stop() == 0  # it gives the lease up: deployment 2's worker takes it
    final = second.wait_for_size(log_size(7, 2 * KEY_ENTRIES))
    assert final.size == log_size(7, 2 * KEY_ENTRIES)
    ones, twos = first.assert_proofs(receipts), second.assert_proofs(waiting)
    entries = log_entries(first.store_dir, final)
    assert len(certificate_indices(entries)) == 2 * KEY_ENTRIES
    assert_placed(entries, receipts + waiting, ones + twos, final.origin)
    assert max(ones) < min(twos), "deployment 1's receipts entered the log before deployment 2's"
    wait_until(lambda: health(second) == "ok", WAIT_S, "deployment 2's /health to say ok")
    assert standby.process.poll() is None


def health(stack: Stack) -> str:
    response = httpx.get(stack.base_url + "/health", timeout=10)
    assert response.status_code == 200, response.text
    return str(response.json()["log"])


def deployment_id(stack: Stack) -> str:
    """The deployment id its Redis keeps (its worker made it)."""
    with redis.Redis.from_url(stack.redis_url) as conn:
        value = conn.get(keys.log_deployment_key(stack.identity))
    return "" if value is None else value.decode()
