"""Evidence beyond the tree is a refusal (docs/log.md, "A new log, a refused store"), in
process, on a directory, in memory and (``slow``) on moto's S3: a tile or entry bundle beyond
the tree state shows that the store held a larger tree, so ``.state/`` and the checkpoint went
back while newer files stayed (``cp -a BACKUP/. STORE/``). The integrator refuses at its start
and before it stages a batch, naming the file, and records the halt; ``log resume`` alone
halts again while the file is there. Not evidence: the files of the batch the tree state
names (a finisher writes them again), partial tiles at or below the tree, and the current
tree's files seen by a stale integrator (it goes back to standby). The cost: a few store
calls per staging, one more per level of the tree.

The operator's case with real processes: tests/test_log_operator_faults.py
``test_a_backup_copied_over_a_live_store_is_refused_until_the_newer_files_go``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from execution_proof.jobs import log_evidence
from execution_proof.jobs.log_config import LogConfig, LogRefused
from execution_proof.jobs.log_evidence import find_evidence_beyond
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.kv.logstore.memory import MemoryObjects
from execution_proof.kv.logstore.objects import Blob, ObjectStore
from execution_proof.kv.store import Store
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import TileReader, check_tree
from tests.log_stack import files_beyond
from tests.test_log import ORIGIN, SIGNER, CrashAt, assert_extends, issue, log_app, log_size, published
from tests.test_log_fencing import Paused, Site, restore, snapshot
from tests.test_log_fencing import site as site
from tests.test_log_store_s3 import fresh_prefix, moto, s3_env, s3_objects  # noqa: F401

BACKENDS = ["file", "memory", pytest.param("s3", marks=pytest.mark.slow)]


class Counting(ObjectStore):
    """An object store that counts the calls made to the one it wraps, by method and name."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.calls: list[tuple[str, str]] = []

    async def read(self, name: str) -> Blob | None:
        self.calls.append(("read", name))
        return await self.inner.read(name)

    async def write(self, name: str, data: bytes) -> None:
        self.calls.append(("write", name))
        await self.inner.write(name, data)

    async def create(self, name: str, data: bytes) -> bool:
        self.calls.append(("create", name))
        return await self.inner.create(name, data)

    async def replace(self, name: str, data: bytes, version: str) -> str | None:
        self.calls.append(("replace", name))
        return await self.inner.replace(name, data, version)

    async def delete(self, name: str) -> None:
        self.calls.append(("delete", name))
        await self.inner.delete(name)

    async def names(self, prefix: str, after: str = "", limit: int | None = None) -> list[str]:
        self.calls.append(("names", prefix))
        return await self.inner.names(prefix, after, limit)

    async def tidy(self) -> int:
        return await self.inner.tidy()

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class Place:
    """One log: its Redis, its store (counted), the app for receipts and proofs."""

    store: Store
    log_store: LogStore
    counting: Counting
    app: Any
    backend: str


@pytest.fixture(params=BACKENDS)
async def place(
    request: pytest.FixtureRequest, store: Store, tmp_path: Path, receipt_root: str
) -> AsyncIterator[Place]:
    objects: ObjectStore
    if request.param == "file":
        objects = FileObjects(tmp_path / "log")
    elif request.param == "memory":
        objects = MemoryObjects()
    else:
        request.getfixturevalue("s3_env")
        objects = s3_objects(fresh_prefix("beyond"))
    counting = Counting(objects)
    log_store = LogStore(counting)
    yield Place(store, log_store, counting, log_app(store, log_store, receipt_root, SIGNER), request.param)
    await log_store.close()


async def integrator(place: Place, failpoints: Any = None) -> Integrator:
    made = Integrator(place.store.log_queue, place.log_store, LogConfig(ORIGIN, SIGNER))
    made.failpoints = failpoints
    await made.prepare()
    return made


async def grow(place: Place, worker: Integrator, key: dict[str, Any], labels: list[str]) -> list[dict[str, Any]]:
    made = await issue(place.app, key, labels)
    while await worker.step(force=True):
        pass
    return made


async def public_files(log_store: LogStore) -> dict[str, bytes]:
    """Every tile and bundle, full or partial, and the checkpoint: bytes by name."""
    found = {}
    for name in [*await log_store.objects.names("tile/"), "checkpoint"]:
        data = await log_store.fetch(name)
        if data is not None:
            found[name] = data
    return found


def test_files_beyond_are_worked_out_right() -> None:
    """The test's own reckoning, on names whose answer is plain."""
    names = ["tile/0/000", "tile/0/000.p/50", "tile/0/000.p/51", "tile/0/001.p/3", "tile/1/000.p/1", "checkpoint"]
    names += ["tile/entries/000.p/50", "tile/entries/000.p/80", "tile/entries/000", "tile/0/x001/000"]
    assert files_beyond(names, 50) == [
        "tile/0/000", "tile/0/000.p/51", "tile/0/001.p/3", "tile/1/000.p/1", "tile/entries/000.p/80",
        "tile/entries/000", "tile/0/x001/000",
    ]  # fmt: skip
    assert files_beyond(names, 256 * 1001 + 1) == []


async def assert_refused_naming(place: Place, refused: LogRefused, name: str) -> None:
    """The refusal names ``name`` and is recorded in ``.state/halt`` as a refusal."""
    assert name in str(refused), refused
    assert "beyond its tree state" in str(refused)
    halted = await place.log_store.halted()
    assert halted is not None and halted["evidence"]["kind"] == "refused", halted
    assert name in halted["evidence"]["detail"]


# --------------------------------------------------------------------------- each kind of file, each path


PLANTED = {
    "partial tile": ("tile/0/001.p/80", 80 * 32),
    "partial bundle": ("tile/entries/001.p/45", 45 * 40),
    "full next tile": ("tile/0/001", 256 * 32),
    "full next bundle": ("tile/entries/001", 256 * 40),
    "higher-level partial tile": ("tile/1/000.p/2", 2 * 32),
}
"""Files beyond a tree of 299 (level 0: tile 1 holds 43 hashes; level 1: tile 0 holds 1)."""


@pytest.mark.parametrize("when", ["start", "staging"])
@pytest.mark.parametrize("kind", list(PLANTED))
async def test_a_file_beyond_the_tree_is_refused_naming_it(place: Place, kind: str, when: str) -> None:
    """A log of 299; a file beyond it appears (``kind``). An integrator that starts then
    refuses it at once (``start``: nothing even waits to be integrated); one that was running
    refuses it before it stages its next batch (``staging``). Either way: ``LogRefused`` naming
    the file, recorded in ``.state/halt`` as a refusal, not one public byte written, the
    checkpoint still 299. ``log resume`` alone halts again: the file is still there."""
    key = await create_project_key(place.store.keys, project_name="beyond", plan="pro")
    running = await integrator(place)
    await grow(place, running, key, [f"b{n}" for n in range(149)])  # and the app's key certificate: 299 entries
    name, length = PLANTED[kind]
    assert await find_evidence_beyond(place.log_store, 299) is None
    await place.log_store.objects.write(name, os.urandom(length))
    assert files_beyond([name], 299) == [name]
    before = await public_files(place.log_store)

    if when == "start":
        with pytest.raises(LogRefused) as refused:
            await (await integrator(place)).step(force=True)
    else:
        await issue(place.app, key, ["next"])
        with pytest.raises(LogRefused) as refused:
            await running.step(force=True)
    await assert_refused_naming(place, refused.value, name)
    assert await public_files(place.log_store) == before
    assert (await published(place.log_store, SIGNER)).size == log_size(149) == 299

    assert await place.log_store.resume("looked, changed nothing") is not None
    with pytest.raises(LogRefused, match="beyond its tree state"):
        await (await integrator(place)).step(force=True)
    assert await place.log_store.halted() is not None, "a resume alone halts again"
    assert await public_files(place.log_store) == before


async def test_files_at_or_below_the_tree_are_not_evidence(place: Place) -> None:
    """Partial tiles a stale writer may create again after their full tile exists (docs/log.md,
    "Fencing"), and narrower partials of the edge, are at or below the tree: the log goes on."""
    key = await create_project_key(place.store.keys, project_name="below", plan="pro")
    worker = await integrator(place)
    await grow(place, worker, key, [f"b{n}" for n in range(149)])  # and the app's key certificate: 299 entries
    full = await place.log_store.fetch("tile/0/000")
    edge = await place.log_store.fetch("tile/0/001.p/43")
    assert full is not None and edge is not None
    await place.log_store.objects.write("tile/0/000.p/100", full[: 100 * 32])
    await place.log_store.objects.write("tile/0/001.p/20", edge[: 20 * 32])
    assert await find_evidence_beyond(place.log_store, 299) is None
    await grow(place, await integrator(place), key, ["after"])
    assert await place.log_store.halted() is None
    assert (await published(place.log_store, SIGNER)).size == 301


# --------------------------------------------------------------------------- the staged batch's own files


@pytest.mark.parametrize("point", ["tiles_half", "tiles"])
async def test_the_staged_batchs_own_files_are_not_evidence_and_it_is_finished(place: Place, point: str) -> None:
    """An integrator killed at ``point`` left files beyond the tree of 49 (its staged batch's,
    up to 109): the next one, finding the tree state naming that batch, writes them again and
    goes on, neither refusing nor halting."""
    key = await create_project_key(place.store.keys, project_name="staged", plan="pro")
    await grow(place, await integrator(place), key, [f"s{n}" for n in range(24)])  # and the key certificate: 49
    before = await published(place.log_store, SIGNER)
    await issue(place.app, key, [f"t{n}" for n in range(30)])
    with pytest.raises(BaseException, match=point):
        await (await integrator(place, CrashAt(point))).step(force=True)
    tree = await place.log_store.tree()
    assert tree is not None and tree.size == 49 and tree.staged is not None and tree.staged.new_size == 109
    assert await find_evidence_beyond(place.log_store, 49) is not None, "the batch wrote nothing beyond 49"
    assert await find_evidence_beyond(place.log_store, 109) is None

    successor = await integrator(place)
    await successor.step(force=True)
    assert await place.log_store.halted() is None
    after = await published(place.log_store, SIGNER)
    assert after.size == log_size(54) == 109
    await assert_extends(place.log_store, before, after)


# --------------------------------------------------------------------------- a stale integrator


async def test_a_stale_integrator_that_meets_the_current_trees_files_goes_back_to_standby(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """An integrator reads the tree of 9 and pauses with its batch read. Another stages a
    batch on that tree, writes its tiles (beyond 9) and dies before it advances: the
    checkpoint still says 9, so the anchor sees nothing. Woken, the first finds those files
    beyond its tree, reads the tree state again, finds it moved, and goes back to standby at
    INFO: no refusal, no halt. The next integrator finishes the batch."""
    key = await create_project_key(site.store.keys, project_name="stale", plan="pro")
    first = Integrator(site.store.log_queue, site.log_store, LogConfig(ORIGIN, SIGNER))
    await first.prepare()
    await issue(site.app, key, [f"a{n}" for n in range(4)])  # and the app's key certificate: 9 entries
    await first.step(force=True)
    await issue(site.app, key, [f"b{n}" for n in range(20)])
    paused = Paused(site, "batch").start()
    doomed = Integrator(site.store.log_queue, site.log_store, LogConfig(ORIGIN, SIGNER))
    doomed.failpoints = CrashAt("tiles")
    await doomed.prepare()
    with pytest.raises(BaseException, match="tiles"):
        await doomed.step(force=True)
    assert await find_evidence_beyond(site.log_store, 9) is not None
    assert (await published(site.log_store, SIGNER)).size == 9

    caplog.clear()
    with caplog.at_level(logging.INFO):
        woke = paused.finish()
    assert woke == 0, woke
    assert any("moved under this integrator (at evidence)" in r.getMessage() for r in caplog.records)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert await site.log_store.halted() is None
    successor = Integrator(site.store.log_queue, site.log_store, LogConfig(ORIGIN, SIGNER))
    await successor.prepare()
    await successor.step(force=True)
    assert (await published(site.log_store, SIGNER)).size == log_size(24) == 49
    assert await site.log_store.halted() is None


# --------------------------------------------------------------------------- the operator's case


async def test_a_backup_copied_over_the_live_store_is_refused_until_the_store_is_one_copy(place: Place) -> None:
    """The log at 49: the whole store copied aside and Redis snapshotted. It goes on to 109 in
    two batches. Then the copy is put back over the store without deleting anything (``cp -a
    BACKUP/. STORE/``: ``.state/`` and the checkpoint at 49, the newer tiles stay) and Redis
    restored: the tree state and the checkpoint agree, yet the next integrator refuses, naming
    a file beyond 49, and changes nothing public; ``log resume`` alone halts again. Put back as
    one copy (``rsync -a --delete``: what is not in the copy goes, the halt record with it),
    the log goes on from 49; the checkpoints past 49 that were published are abandoned (the
    new tree does not extend them: what a whole-store rollback costs)."""
    key = await create_project_key(place.store.keys, project_name="copy", plan="pro")
    worker = await integrator(place)
    await grow(place, worker, key, [f"c{n}" for n in range(24)])  # and the app's key certificate: 49 entries
    at_49 = await published(place.log_store, SIGNER)
    objects = place.log_store.objects
    backup = {name: await place.log_store.fetch(name) for name in await objects.names("")}
    redis_at_49 = await snapshot(place.store)
    await grow(place, worker, key, [f"d{n}" for n in range(7)])
    await grow(place, worker, key, [f"e{n}" for n in range(23)])
    at_109 = await published(place.log_store, SIGNER)
    assert at_109.size == 109

    for name, data in backup.items():  # cp -a BACKUP/. STORE/
        assert data is not None
        await objects.write(name, data)
    await restore(place.store, redis_at_49)
    assert (await published(place.log_store, SIGNER)).size == 49
    newer = files_beyond(await objects.names("tile/"), 49)
    assert "tile/0/000.p/109" in newer and "tile/entries/000.p/63" in newer
    before = await public_files(place.log_store)

    with pytest.raises(LogRefused) as refused:
        await (await integrator(place)).step(force=True)
    found = await find_evidence_beyond(place.log_store, 49)
    assert found in newer
    await assert_refused_naming(place, refused.value, str(found))
    assert await public_files(place.log_store) == before
    await place.log_store.resume("resumed without looking")
    with pytest.raises(LogRefused, match="beyond its tree state"):
        await (await integrator(place)).step(force=True)
    assert await public_files(place.log_store) == before

    for name in await objects.names(""):  # rsync -a --delete BACKUP/ STORE/
        if name not in backup:
            await objects.delete(name)
    for name, data in backup.items():
        assert data is not None
        await objects.write(name, data)
    assert await place.log_store.halted() is None
    assert await place.log_store.resume("the store is the copy again") is None
    successor = await integrator(place)
    await grow(place, successor, key, [f"f{n}" for n in range(40)])
    final = await published(place.log_store, SIGNER)
    assert final.size == 129
    await assert_extends(place.log_store, at_49, final)
    await check_tree(TileReader(place.log_store.fetch), final.size, final.root, lambda *_: None)
    with pytest.raises(tlog.ProofError):
        await assert_extends(place.log_store, at_109, final)


async def test_moving_the_newer_files_aside_and_resuming_lets_the_log_go_on(place: Place) -> None:
    """The same copy over the store (``.state/tree`` and the checkpoint of 49 put back, Redis
    restored); this time the operator moves the newer files aside (every one beyond 49) and
    runs ``log resume``: the log goes on from 49."""
    key = await create_project_key(place.store.keys, project_name="aside", plan="pro")
    worker = await integrator(place)
    await grow(place, worker, key, [f"c{n}" for n in range(24)])  # and the app's key certificate: 49 entries
    objects = place.log_store.objects
    saved = {name: await objects.read(name) for name in [".state/tree", "checkpoint"]}
    redis_at_49 = await snapshot(place.store)
    await grow(place, worker, key, [f"d{n}" for n in range(30)])
    for name, blob in saved.items():
        assert blob is not None
        await objects.write(name, blob.data)
    await restore(place.store, redis_at_49)
    with pytest.raises(LogRefused, match="beyond its tree state"):
        await (await integrator(place)).step(force=True)
    newer = files_beyond(await objects.names("tile/"), 49)
    assert newer
    for name in newer:
        await objects.delete(name)
    assert await find_evidence_beyond(place.log_store, 49) is None
    assert await place.log_store.resume("moved the files beyond 49 aside") is not None
    await grow(place, await integrator(place), key, [f"e{n}" for n in range(5)])
    assert await place.log_store.halted() is None
    final = await published(place.log_store, SIGNER)
    assert final.size == 59
    await check_tree(TileReader(place.log_store.fetch), final.size, final.root, lambda *_: None)


# --------------------------------------------------------------------------- the cost


async def test_the_store_calls_per_staging_are_a_handful_whatever_the_size(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each look (at start, before each staging) costs one listing of a ``.p/`` prefix per
    level of the tree, one of the edge bundle's, and one read each of the next full level-0
    tile and bundle: made inside an integrator's steps while the log grows from 0 to 599, and
    (over the same store, which holds nothing beyond them) at sizes up to 2**63 - 1."""
    looks: list[tuple[int, list[tuple[str, str]]]] = []
    real = log_evidence.find_evidence_beyond

    async def counted(log_store: LogStore, size: int) -> str | None:
        start = len(place.counting.calls)
        try:
            return await real(log_store, size)
        finally:
            looks.append((size, place.counting.calls[start:]))

    monkeypatch.setattr(log_evidence, "find_evidence_beyond", counted)
    key = await create_project_key(place.store.keys, project_name="cost", plan="pro")
    worker = await integrator(place)
    for count in (9, 140, 150):  # receipts, two entries each; the first 19 entries hold the app's key certificate
        await grow(place, worker, key, [f"k{count}-{n}" for n in range(count)])
    assert (await published(place.log_store, SIGNER)).size == log_size(299) == 599
    sizes = [size for size, _ in looks]
    assert sizes == [0, 0, 19, 299], sizes  # at load, then before each of the three stagings
    for size, calls in looks:
        levels = 1 if size < tlog.TILE_WIDTH else 2
        assert len(calls) == levels + 3, (size, calls)
        assert sorted(method for method, _ in calls) == ["names"] * (levels + 1) + ["read", "read"]
        assert all(name.endswith(".p/") for method, name in calls if method == "names")
    print(f"{place.backend}: store calls per staging {[(size, len(calls)) for size, calls in looks]}")

    for size, levels in [(600, 2), (65_535, 2), (65_536, 3), (2**24 + 3, 4), (2**40, 6), (2**63 - 1, 8)]:
        place.counting.calls.clear()
        assert await real(place.log_store, size) is None
        assert len(place.counting.calls) == levels + 3, (size, place.counting.calls)
