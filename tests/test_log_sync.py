"""Syncing Redis with the tree (jobs/log_sync.py, docs/log.md "Syncing Redis with the tree"), in
process: every entry enters the log once whatever Redis does between two steps of a batch or
of a catch-up, above all a restore that keeps client connections (the integrator's next
command succeeds on the older data), which no restart-based fault shows.

Each queue's synced size lives in the queue's slot and moves in the script that changes the
queue, so a restore puts both back together; these tests restore Redis between the two halves
of a batch's acknowledgements and between the queues of a catch-up, and judge the log from its
tiles: every receipt id once, every receipt Redis holds proving its place. The same with real
processes (``LOG_FAILPOINTS``, ``DEBUG RELOAD NOSAVE``): tests/test_log_restores.py.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from execution_proof.jobs import log_sync
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.ids import new_receipt_id
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import TileReader
from tests.conftest import hash_of
from tests.test_log import IDENTITY, SIGNER, Crash, CrashAt, issue, log_size, published
from tests.test_log_fencing import Paused, Published, Site, assert_whole, integrator, restore, snapshot
from tests.test_log_fencing import site as site


class PauseAtEach:
    """Stands in for ``Failpoints``: each of ``steps`` blocks the integrator's thread (its
    event loop with it) until ``resume``, once each, as ``LOG_FAILPOINTS=STEP=stop`` does."""

    def __init__(self, *steps: str) -> None:
        self.step = ", ".join(steps)
        self.steps = set(steps)
        self.at: str | None = None
        self.reached = threading.Event()
        self._go = threading.Event()

    def reach(self, step: str) -> None:
        if step in self.steps:
            self.steps.discard(step)
            self.at = step
            self._go.clear()
            self.reached.set()
            assert self._go.wait(60), f"never resumed at {step}"

    def wait_for(self, step: str) -> None:
        assert self.reached.wait(30), f"the integrator never reached {step}"
        assert self.at == step
        self.reached.clear()

    def resume(self) -> None:
        self._go.set()


async def drain(worker: Integrator) -> None:
    """Pass after pass until nothing is left: a pass that finds its tree overtaken, or a queue
    to catch up, integrates nothing and is followed by another."""
    for _ in range(3):
        while await worker.step(force=True):
            pass


async def two_projects(site: Site) -> list[dict[str, Any]]:
    return [await create_project_key(site.store.keys, project_name=f"p{n}", plan="pro") for n in range(2)]


async def test_a_restore_between_a_batchs_two_halves_adds_no_entry_twice(site: Site) -> None:
    """The case that put 23 entries in a log of 20 receipts (before each receipt had its dsse
    leaf): a log of 10 receipts; 6 creates in 2
    projects; the batch is staged (Redis saved there), half its queues acknowledged, then Redis
    is put back under the integrator's open connection and it goes on to the other half and
    the log's size. The first half's entries are back in their queues with their queue's
    older synced size: the next pass finds them in the tree instead of taking them again."""
    history = Published(site)
    one, two = await two_projects(site)
    worker = await integrator(site)
    made = await issue(site.app, one, [f"a{n}" for n in range(5)]) + await issue(
        site.app, two, [f"b{n}" for n in range(5)]
    )
    await drain(worker)
    await history.look()
    made += await issue(site.app, one, ["c0", "c1", "c2"]) + await issue(site.app, two, ["d0", "d1", "d2"])
    pause = PauseAtEach("staged", "acked_half")
    running = Paused(site, "staged", pause).start()
    pause.wait_for("staged")
    saved = await snapshot(site.store)
    pause.resume()
    pause.wait_for("acked_half")
    await restore(site.store, saved)
    assert running.finish() == 12  # six receipts' entries and leaves
    await history.look()
    made += await issue(site.app, one, ["e0", "e1"]) + await issue(site.app, two, ["f0", "f1"])
    await drain(worker)
    await history.look()
    final = await assert_whole(site, history, made)
    assert final.size == log_size(20), "an entry entered the log twice"  # and the app's key certificate
    assert await site.store.log_queue.log_pending(IDENTITY) == 0


async def test_a_restore_between_a_catch_ups_queues_adds_no_entry_twice(site: Site) -> None:
    """A worker killed between advancing the tree and syncing leaves two queues behind it;
    Redis is saved there. The next integrator's catch-up takes the first queue's entries off
    (they are in the tree), then Redis is put back under it before the second: the first
    queue is back, with its older synced size, so it is caught up again, never batched."""
    history = Published(site)
    one, two = await two_projects(site)
    worker = await integrator(site)
    made = await issue(site.app, one, ["a0", "a1"]) + await issue(site.app, two, ["b0", "b1"])
    await drain(worker)
    made += await issue(site.app, one, ["c0", "c1", "c2"]) + await issue(site.app, two, ["d0", "d1", "d2"])
    worker.failpoints = CrashAt("unstaged")
    with pytest.raises(Crash):
        await worker.step(force=True)
    saved = await snapshot(site.store)
    restored = asyncio.Event()
    acks = site.store.log_queue.log_ack

    async def ack_then_restore(*args: Any) -> Any:
        done = await acks(*args)
        if not restored.is_set():
            restored.set()
            await restore(site.store, saved)
        return done

    successor = await integrator(site)
    site.store.log_queue.log_ack = ack_then_restore  # type: ignore[method-assign]
    await successor.step(force=True)
    assert restored.is_set(), "the catch-up acknowledged no queue"
    site.store.log_queue.log_ack = acks  # type: ignore[method-assign]
    made += await issue(site.app, one, ["e0"]) + await issue(site.app, two, ["f0"])
    await drain(successor)
    await history.look()
    final = await assert_whole(site, history, made)
    assert final.size == log_size(12), "an entry entered the log twice"  # and the app's key certificate
    assert await site.store.log_queue.log_pending(IDENTITY) == 0


async def test_an_acknowledgement_moves_nothing_unless_the_queue_is_where_it_started(store: Store) -> None:
    """``log_ack`` is a compare-and-set on the queue's synced size: from another size (a
    restore put the queue back, or the caller's tree is stale) it writes nothing at all."""
    key = await create_project_key(store.keys, project_name="cas", plan="pro")
    queue = key["project_id"]
    receipt = {"receipt_id": new_receipt_id(queue), "receipt_hash": hash_of("x"), "project_id": queue}
    entry = tlog.entry_bytes(receipt)
    await store.client.rpush(keys.log_queue_key(IDENTITY, queue), entry)
    await store.client.set(keys.log_synced_key(IDENTITY, queue), 7)
    refused = await store.log_queue.log_ack(IDENTITY, queue, 5, 9, [(entry, 5)])
    assert (refused.done, refused.synced) == (False, 7)
    assert await store.client.lrange(keys.log_queue_key(IDENTITY, queue), 0, -1) == [entry]
    assert await store.client.get(keys.log_synced_key(IDENTITY, queue)) == b"7"
    done = await store.log_queue.log_ack(IDENTITY, queue, 7, 9, [(entry, 7)])
    assert (done.done, done.taken) == (True, 1)
    assert await store.client.llen(keys.log_queue_key(IDENTITY, queue)) == 0
    assert await store.client.get(keys.log_synced_key(IDENTITY, queue)) == b"9"


async def test_a_create_that_starts_an_empty_queue_takes_the_logs_size(site: Site) -> None:
    """A queue that waited empty while the log grew is in line with the tree again as soon as
    a create starts it: its synced size rises to the log's size as told (never falls), and the
    integrator batches it without reading a tile back."""
    one, two = await two_projects(site)
    worker = await integrator(site)
    await issue(site.app, one, ["a0"])
    await drain(worker)  # a0 (its entry and leaf) and the app's key certificate
    first = log_size(1)
    busy = await issue(site.app, two, [f"b{n}" for n in range(300)])
    await drain(worker)
    assert (await published(site.log_store, SIGNER)).size == first + log_size(300, 0)
    synced = keys.log_synced_key(IDENTITY, one["project_id"])
    assert await site.store.client.get(synced) == str(first).encode(), "the quiet queue was left at its last batch"
    await issue(site.app, one, ["a1"])
    assert await site.store.client.get(synced) == str(first + log_size(300, 0)).encode()
    reads: list[str] = []

    async def counting(name: str) -> bytes | None:
        reads.append(name)
        return await site.log_store.fetch(name)

    worker.reader = TileReader(counting)
    assert await worker.step(force=True) == 2  # a1's entry and leaf
    assert not [name for name in reads if name.startswith("tile/entries/")], reads
    await site.store.client.set(synced, 999)
    await issue(site.app, one, ["a2"])  # a larger synced size stays: it never falls
    assert await site.store.client.get(synced) == b"999"
    assert len(busy) == 300


async def test_a_queue_behind_the_tree_is_caught_up_from_its_own_synced_size(site: Site) -> None:
    """A queue put back (its entries in the tree, its synced size older) is looked for from its
    own synced size only: the bundles before it are not read."""
    one, two = await two_projects(site)
    worker = await integrator(site)
    await issue(site.app, two, [f"b{n}" for n in range(299)])  # and the app's key certificate: 599 entries
    await drain(worker)
    await issue(site.app, one, ["a0", "a1"])
    queue = keys.log_queue_key(IDENTITY, one["project_id"])
    waiting = await site.store.client.lrange(queue, 0, -1)
    assert len(waiting) == 2, "a receipt's entry and leaf wait as one item"
    await drain(worker)
    assert (await published(site.log_store, SIGNER)).size == log_size(301) == 603
    # Put the queue back as a restore would: its entries and its older synced size.
    await site.store.client.rpush(queue, *waiting)
    await site.store.client.set(keys.log_synced_key(IDENTITY, one["project_id"]), 599)
    reads: list[str] = []

    async def counting(name: str) -> bytes | None:
        reads.append(name)
        return await site.log_store.fetch(name)

    reader = TileReader(counting)
    tree = await site.log_store.tree()
    assert tree is not None
    steps: list[str] = []
    found = await log_sync.catch_up(site.store.log_queue, IDENTITY, reader, tree, [one["project_id"]], steps.append)
    assert found == 2 and steps == ["caught_half"]
    assert reads == ["tile/entries/002.p/91"], "bundles before the queue's synced size were read"
    assert await site.store.client.llen(queue) == 0
    assert await site.store.client.get(keys.log_synced_key(IDENTITY, one["project_id"])) == b"603"


async def test_entries_of_no_project_wait_in_the_logs_own_queue(site: Site) -> None:
    """An entry that belongs to no project (a key certificate) waits in the log's own queue,
    with a synced size of its own, enters the log once and leaves its queue."""
    worker = await integrator(site)
    await drain(worker)
    certificate = tlog.KEY_CERTIFICATE_HEADER + b'{"kid":"k1","not_after":"2027-01-01T00:00:00Z"}\n'
    own = keys.LOG_OWN_QUEUE
    await site.store.client.rpush(keys.log_queue_key(IDENTITY, own), certificate)
    await site.store.client.sadd(keys.log_dirty_key(IDENTITY), own)
    await site.store.client.incr(keys.log_pending_key(IDENTITY))
    assert await worker.step(force=True) == 1
    assert await worker.step(force=True) == 0
    assert (await published(site.log_store, SIGNER)).size == 1
    assert await site.store.client.llen(keys.log_queue_key(IDENTITY, own)) == 0
    assert await site.store.client.get(keys.log_synced_key(IDENTITY, own)) == b"1"
    assert await site.store.log_queue.log_pending(IDENTITY) == 0
    key = tlog.entry_key(certificate)
    assert key is not None and (key.entry_id, key.project_id, key.receipt_id) == ("k1", None, None)
