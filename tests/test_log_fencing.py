"""Fencing (docs/log.md, "Fencing"), in process: an integrator paused at any step of a batch — its own
thread blocked inside the fault point, as a GC pause or a frozen VM blocks it — while
another integrator carries the log on, with Redis left alone, flushed or restored from an
older snapshot meanwhile. When it wakes up it changes no byte of anything a published
checkpoint covers, goes back to standby without a word above INFO, and the log holds every
receipt Redis knows once, each with a proof that verifies.

Also here: the published checkpoint as the anchor (a ``.state/tree`` put back from an older
copy is refused, even when its bytes, and so its version, are exactly the old ones), a
creation cut short, an unreadable checkpoint, and temporary files left by a full disk.
The same faults with real worker processes (``LOG_FAILPOINTS=STEP=stop``, SIGSTOP and
SIGCONT, a redis-server restarted on an older dump): tests/test_log_stalls.py.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from execution_proof.jobs.log_config import LogConfig, LogRefused
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore, LogStoreError, files
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.kv.store import Store
from execution_proof.transparency import note, tlog
from execution_proof.transparency.tiles import TileReader, check_tree
from tests.log_stack import assert_paired
from tests.test_log import (
    ORIGIN,
    SIGNER,
    CrashAt,
    assert_extends,
    is_leaf_of,
    issue,
    log_app,
    log_size,
    published,
    receipt_ids,
)

BATCH_STEPS = ["batch", "staged", "tiles_half", "tiles", "advanced", "unstaged", "acked_half", "synced", "signed"]
REDIS_FAULTS = ["none", "flushall", "restore"]
INNER_LOOP = {("acked_half", "flushall")}
"""The pause the inner loop (``-m "not slow"``) runs: the hardest one, Redis half acknowledged
and then emptied (each pause costs seconds of CPU); the whole matrix of steps and faults runs
under ``slow``."""


class PauseAt:
    """Stands in for ``Failpoints``: the step blocks the integrator's thread (its event loop
    with it) until ``resume``, as a SIGSTOP would; it acts once."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.reached = threading.Event()
        self._go = threading.Event()

    def reach(self, step: str) -> None:
        if step == self.step and not self.reached.is_set():
            self.reached.set()
            self._go.wait(60)

    def resume(self) -> None:
        self._go.set()


@dataclass
class Site:
    """One log: a Redis (fakeredis, or the session's redis-server), its store directory, the
    app (for receipts and proofs) and a way to open more clients of the same Redis."""

    store: Store
    log_store: LogStore
    app: Any
    open_store: Callable[[], Store]
    directory: Path


@pytest.fixture
async def site(store: Store, tmp_path: Path, receipt_root: str) -> AsyncIterator[Site]:
    if isinstance(store.client, fakeredis.FakeAsyncRedis):
        server = store.client.connection_pool.connection_kwargs["server"]

        def open_store() -> Store:
            return Store(fakeredis.FakeAsyncRedis(server=server))
    else:
        url = store.client.connection_pool.connection_kwargs
        redis_url = f"redis://{url['host']}:{url['port']}/0"

        def open_store() -> Store:
            return Store(aioredis.from_url(redis_url))

    log_store = LogStore(FileObjects(tmp_path / "log"))
    yield Site(store, log_store, log_app(store, log_store, receipt_root, SIGNER), open_store, tmp_path / "log")
    await log_store.close()


async def integrator(site: Site, failpoints: Any = None) -> Integrator:
    made = Integrator(site.store.log_queue, site.log_store, LogConfig(ORIGIN, SIGNER))
    made.failpoints = failpoints
    await made.prepare()
    return made


class Paused:
    """An integrator in a thread of its own (its own event loop, Redis client and log store
    on the same Redis and directory), running one ``step`` that blocks at ``step``."""

    def __init__(self, site: Site, step: str, pause: Any = None) -> None:
        self.site = site
        self.pause = pause if pause is not None else PauseAt(step)
        """``PauseAt(step)``, or any stand-in for ``Failpoints`` with ``reached`` and ``resume``."""
        self.result: int | BaseException | None = None
        self.records: list[logging.LogRecord] = []
        self._thread = threading.Thread(target=self._main, name=f"paused-at-{step}", daemon=True)

    def start(self) -> Paused:
        self._thread.start()
        assert self.pause.reached.wait(30), f"the integrator never reached {self.pause.step}"
        return self

    def _main(self) -> None:
        async def run() -> int:
            store = self.site.open_store()
            log_store = LogStore(FileObjects(self.site.directory))
            try:
                paused = Integrator(store.log_queue, log_store, LogConfig(ORIGIN, SIGNER))
                paused.failpoints = self.pause
                await paused.prepare()
                return await paused.step(force=True)
            finally:
                await store.close()
                await log_store.close()

        try:
            self.result = asyncio.run(run())
        except BaseException as exc:
            self.result = exc

    def finish(self) -> int | BaseException | None:
        self.pause.resume()
        self._thread.join(60)
        assert not self._thread.is_alive()
        return self.result


class Published:
    """Every distinct checkpoint the store published, in order, as readers saw them."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.seen: list[note.Checkpoint] = []

    async def look(self) -> None:
        checkpoint = await published(self.site.log_store, SIGNER)
        if not self.seen or (self.seen[-1].size, self.seen[-1].root) != (checkpoint.size, checkpoint.root):
            self.seen.append(checkpoint)


async def snapshot(store: Store) -> dict[bytes, bytes]:
    return {name: await store.client.dump(name) async for name in store.client.scan_iter()}


async def restore(store: Store, dumped: dict[bytes, bytes]) -> None:
    await store.client.flushall()
    for name, value in dumped.items():
        await store.client.restore(name, 0, value)


def tile_bytes(directory: Path) -> dict[str, bytes]:
    """Every tile and bundle file, full or partial, by path."""
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in (directory / "tile").rglob("*")
        if path.is_file()
    }


async def assert_whole(site: Site, history: Published, receipts: list[dict[str, Any]]) -> note.Checkpoint:
    """The log is one history and holds what it must: every checkpoint seen is a prefix of
    the last (consistency proofs from the tiles), the whole tree checks (every entry, tile and
    root), no receipt id twice, each receipt entry followed by its dsse leaf, and every
    receipt Redis still holds proves its place, its leaf right after it."""
    final = await published(site.log_store, SIGNER)
    for checkpoint in history.seen:
        await assert_extends(site.log_store, checkpoint, final)
    entries: list[bytes] = []
    await check_tree(TileReader(site.log_store.fetch), final.size, final.root, lambda _, batch: entries.extend(batch))
    ids = receipt_ids(entries)
    assert len(ids) == len(set(ids)), "a receipt id is in the log twice"
    assert_paired(entries)
    certificates = [entry for entry in entries if entry.startswith(tlog.KEY_CERTIFICATE_HEADER)]
    assert len(certificates) == len(set(certificates)), "a key certificate is in the log twice"
    service = site.app.ctx.services.log
    service._read_at = -1e9  # read the checkpoint afresh
    for receipt in receipts:
        if await site.store.receipts.get_receipt_json(receipt["receipt_id"]) is None:
            continue  # gone from Redis with a flush or a restore: the log keeps what it had
        found = await service.proof(receipt)
        assert found is not None, f"{receipt['receipt_id']} has no proof"
        proof = note.parse_tlog_proof(found[1])
        checkpoint, _ = note.open_checkpoint(proof.checkpoint, SIGNER.verifier)
        tlog.verify_inclusion(
            tlog.leaf_hash(tlog.entry_bytes(receipt)), proof.index, checkpoint.size, proof.path, checkpoint.root
        )
        assert tlog.LogEntry.parse(entries[proof.index]).receipt_id == receipt["receipt_id"]
        assert is_leaf_of(entries[proof.index + 1], receipt)
    return final


async def grow(site: Site, worker: Integrator, key: dict[str, Any], labels: list[str]) -> list[dict[str, Any]]:
    made = await issue(site.app, key, labels)
    while await worker.step(force=True):
        pass
    return made


@pytest.mark.parametrize(
    ("step", "fault"),
    [
        pytest.param(step, fault, marks=() if (step, fault) in INNER_LOOP else pytest.mark.slow)
        for fault in REDIS_FAULTS
        for step in BATCH_STEPS
    ],
)
async def test_an_integrator_paused_at_any_step_changes_nothing_when_it_wakes(
    site: Site, step: str, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    history = Published(site)
    key_a = await create_project_key(site.store.keys, project_name="pause-a", plan="pro")
    key_b = await create_project_key(site.store.keys, project_name="pause-b", plan="pro")
    active = await integrator(site)
    receipts = await grow(site, active, key_a, [f"first-{n}" for n in range(10)])
    await history.look()
    # A backlog in two projects; the snapshot holds it queued (a restore brings it back).
    receipts += await issue(site.app, key_a, [f"a-{n}" for n in range(150)])
    receipts += await issue(site.app, key_b, [f"b-{n}" for n in range(150)])
    older = await snapshot(site.store)

    paused = Paused(site, step).start()
    await history.look()

    # While it sleeps, Redis is left alone, flushed or restored, and another carries on.
    if fault == "flushall":
        await site.store.client.flushall()
        key_a = await create_project_key(site.store.keys, project_name="after-a", plan="pro")
    elif fault == "restore":
        await restore(site.store, older)
    successor = await integrator(site)
    while await successor.step(force=True):
        await history.look()
    await history.look()
    receipts += await grow(site, successor, key_a, [f"meanwhile-{n}" for n in range(270)])
    await history.look()
    before_wake = await published(site.log_store, SIGNER)
    covered = tile_bytes(site.directory)

    with caplog.at_level(logging.INFO):
        woke = paused.finish()
    assert not isinstance(woke, BaseException), f"the paused integrator failed when it woke: {woke!r}"
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not loud, [r.getMessage() for r in loud]
    assert await site.log_store.halted() is None
    await history.look()
    # No byte of a tile or bundle the published checkpoint covers changed; anything the
    # sleeper wrote belongs to the one history (a partial tile its full one makes redundant).
    after = tile_bytes(site.directory)
    changed = [name for name, data in covered.items() if after.get(name, data) != data]
    assert not changed, f"tiles changed after {before_wake.size}: {changed}"
    for name in set(after) - set(covered):
        full = name.split(".p/")[0]
        assert ".p/" in name and full in after, f"{name} appeared after the sleeper woke"
        assert after[full].startswith(after[name]), f"{name} is not a prefix of {full}: another history"

    receipts += await grow(site, successor, key_a, [f"after-{n}" for n in range(5)])
    await history.look()
    final = await assert_whole(site, history, receipts)
    assert final.size >= before_wake.size + 5


async def test_an_integrator_paused_while_finishing_a_stopped_ones_batch_wakes_behind_quietly(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the soak (bench.log_soak, seed 20261127): an integrator that starts, finds a
    batch a killed one staged, finishes it and pauses at ``advanced``; another carries the log
    on and syncs Redis past that tree. Woken, the first read a synced size in Redis ahead of the
    tree it had advanced and refused the store as one that lost entries, halting a healthy
    log. It must read the tree state again and go back to standby instead."""
    history = Published(site)
    key = await create_project_key(site.store.keys, project_name="finisher", plan="pro")
    receipts = await grow(site, await integrator(site), key, [f"first-{n}" for n in range(5)])
    receipts += await issue(site.app, key, [f"staged-{n}" for n in range(20)])
    with pytest.raises(BaseException, match="staged"):
        await (await integrator(site, CrashAt("staged"))).step(force=True)
    paused = Paused(site, "advanced").start()  # it finished the staged batch up to its advance
    successor = await integrator(site)
    receipts += await grow(site, successor, key, [f"meanwhile-{n}" for n in range(30)])
    await history.look()
    with caplog.at_level(logging.INFO):
        woke = paused.finish()
    assert not isinstance(woke, BaseException), f"the paused integrator failed when it woke: {woke!r}"
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert await site.log_store.halted() is None
    assert any("moved under this integrator" in r.getMessage() for r in caplog.records)
    receipts += await grow(site, successor, key, ["after"])
    final = await assert_whole(site, history, receipts)
    assert final.size == log_size(56)  # and the app's key certificate


@pytest.mark.parametrize("flushed", [False, True])
async def test_a_tree_state_put_back_with_its_old_bytes_is_refused_by_the_anchor(site: Site, flushed: bool) -> None:
    """Content-derived versions repeat after a restore: the sleeper read ``.state/tree`` at
    size 9, the log went on to 71, and then the very bytes of that older ``.state/tree`` were
    put back (so its version is the one the sleeper holds), Redis flushed as well or not (so
    its synced size says nothing). When the sleeper wakes, the published checkpoint (size 71)
    is ahead of the tree state it would work on: refused, recorded as a halt, no tile
    written. A fresh integrator refuses the same way."""
    key = await create_project_key(site.store.keys, project_name="rollback", plan="pro")
    active = await integrator(site)
    await grow(site, active, key, [f"r{n}" for n in range(4)])  # and the app's key certificate: 9 entries
    old_tree = (site.directory / ".state/tree").read_bytes()
    await issue(site.app, key, ["queued"])
    paused = Paused(site, "batch").start()  # it has read the tree state of size 9
    await grow(site, active, key, [f"s{n}" for n in range(30)])
    assert (await published(site.log_store, SIGNER)).size == log_size(35) == 71
    (site.directory / ".state/tree").write_bytes(old_tree)
    covered = tile_bytes(site.directory)
    if flushed:
        await site.store.client.flushall()
        key = await create_project_key(site.store.keys, project_name="rollback-2", plan="pro")
    await issue(site.app, key, ["late"])
    woke = paused.finish()
    assert isinstance(woke, LogRefused) and "ahead of" in str(woke), woke
    halted = await site.log_store.halted()
    assert halted is not None and halted["evidence"]["kind"] == "refused"
    assert tile_bytes(site.directory) == covered
    assert (await published(site.log_store, SIGNER)).size == 71
    await site.log_store.resume("looked: .state/ was put back on purpose")
    with pytest.raises(LogRefused, match="ahead of"):
        await (await integrator(site)).step(force=True)
    assert tile_bytes(site.directory) == covered


async def test_a_creation_cut_short_is_finished_by_the_next_start(site: Site) -> None:
    """A crash between writing the store's identity and its tree state: the next integrator
    finishes the creation (tree of size 0, the size-0 checkpoint) and the log works."""
    with pytest.raises(BaseException, match="created"):
        await integrator(site, CrashAt("created"))
    assert (site.directory / ".state/identity").exists()
    assert not (site.directory / ".state/tree").exists()
    worker = await integrator(site)
    assert (await published(site.log_store, SIGNER)).size == 0
    key = await create_project_key(site.store.keys, project_name="created", plan="pro")
    receipts = await grow(site, worker, key, ["one", "two"])
    assert (await published(site.log_store, SIGNER)).size == log_size(2)  # and the app's key certificate
    await assert_whole(site, Published(site), receipts)


async def test_a_store_with_files_but_no_tree_state_is_refused(site: Site) -> None:
    key = await create_project_key(site.store.keys, project_name="no-tree", plan="pro")
    await grow(site, await integrator(site), key, ["one"])
    (site.directory / ".state/tree").unlink()
    with pytest.raises(LogRefused, match="no tree state"):
        await integrator(site)
    halted = await site.log_store.halted()
    assert halted is not None and "no tree state" in halted["reason"]


async def test_an_unreadable_checkpoint_is_published_again_and_never_a_500(site: Site) -> None:
    """The store's ``checkpoint`` truncated while the log runs: the routes keep answering
    (the last good checkpoint, or 503 before any), never 500; the next pass publishes it again
    from the tree state, which the tiles prove. With an edge tile damaged too, the tiles prove
    nothing: the log halts instead."""
    client = site.app.asgi_client
    key = await create_project_key(site.store.keys, project_name="truncated", plan="pro")
    worker = await integrator(site)
    receipts = await grow(site, worker, key, ["t0", "t1"])  # and the key certificate: 5 entries
    checkpoint_file = site.directory / "checkpoint"
    good = checkpoint_file.read_bytes()
    checkpoint_file.write_bytes(good[: len(good) // 2])
    service = site.app.ctx.services.log
    for reading in ("fresh", "known"):
        if reading == "fresh":
            service._published, service._read_at = None, -1e9
        _, response = await client.get("/v1/log/checkpoint")
        assert response.status in (200, 503), response.text
        if response.status == 200:
            assert response.body == good
        service._read_at = -1e9
        _, proof = await client.get(f"/v1/receipts/{receipts[0]['receipt_id']}/log-proof")
        assert proof.status in (200, 409, 503), proof.text
    receipts += await issue(site.app, key, ["next"])
    await worker.step(force=True)
    republished = await published(site.log_store, SIGNER)
    assert republished.size == log_size(3) == 7
    await assert_whole(site, Published(site), receipts)

    # Damaged edge tile and a truncated checkpoint: nothing proves the tree; halt, no 500.
    checkpoint_file.write_bytes(b"")
    edge = site.directory / "tile/0/000.p/7"
    edge.write_bytes(b"\x00" * len(edge.read_bytes()))
    with pytest.raises(LogRefused, match="do not hash"):
        await (await integrator(site)).step(force=True)
    assert await site.log_store.halted() is not None
    service._read_at = -1e9
    _, response = await client.get("/v1/log/checkpoint")
    assert response.status in (200, 503), response.text


async def test_temporary_files_a_full_disk_left_are_removed_and_never_left_again(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails (ENOSPC) leaves no temporary file; files a stopped writer left in
    ``.state/tmp/`` are removed when a process that writes the log starts."""
    key = await create_project_key(site.store.keys, project_name="disk", plan="pro")
    worker = await integrator(site)
    await grow(site, worker, key, ["one"])
    tmp = site.directory / ".state/tmp"
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        if len(data) > 16:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    await issue(site.app, key, ["two"])
    with pytest.raises(LogStoreError, match="No space left"):
        await worker.step(force=True)
    monkeypatch.setattr(os, "write", real_write)
    assert list(tmp.iterdir()) == [], "a failed write left its temporary file"
    # Left by crashed writers: one not named as the store names them, one of a process of
    # this machine that is gone. In flight: one of a process that runs (this one).
    gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await gone.wait()
    (tmp / "left-by-a-crash").write_bytes(b"x" * 100)
    (tmp / f"{files._HOST}-{gone.pid}-00112233aabbccdd").write_bytes(b"x" * 100)
    in_flight = tmp / f"{files._HOST}-{os.getpid()}-00112233aabbccdd"
    in_flight.write_bytes(b"x" * 100)
    await integrator(site)
    assert list(tmp.iterdir()) == [in_flight], "only the write in flight is left"
    in_flight.unlink()
    while await worker.step(force=True):
        pass
    assert (await published(site.log_store, SIGNER)).size == log_size(2)  # and the app's key certificate


def test_pause_helpers_are_honest() -> None:
    """The pause blocks only the thread that reaches its step, and only once."""
    pause = PauseAt("x")
    pause.reach("y")
    assert not pause.reached.is_set()
    released: list[str] = []
    thread = threading.Thread(target=lambda: (pause.reach("x"), released.append("x")))
    thread.start()
    assert pause.reached.wait(5)
    assert released == []
    pause.resume()
    thread.join(5)
    assert released == ["x"]
    pause.reach("x")  # once: no wait the second time
