"""The integrator's side of Redis (docs/log.md, "Syncing Redis with the tree"): a batch's
entries taken off their queues with their indices, and the queues brought in line with the
tree when Redis's synced size is behind it (a worker killed between advance and sync, a Redis
restored from an older snapshot). Every step is a true fact about the tree, written
idempotently: whoever repeats it, late or twice, writes the same."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from execution_proof.kv import keys
from execution_proof.kv.logstore.log import Batch, TreeState
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import TileReader
from execution_proof.transparency.tlog import LogEntry

log = logging.getLogger("eps.log")


async def ack_batch(
    store: LogQueueStore, identity: keys.LogIdentity, batch: Batch, point: Callable[[str], None]
) -> None:
    """Take the batch's entries off their queues with their indices; move the synced size from
    the batch's tree to the new one (compare-and-set: a size that moved meanwhile is left).
    ``point``: the fault points ``acked_half`` and ``synced``."""
    by_project: dict[str, list[tuple[bytes, int]]] = {}
    for offset, entry in enumerate(batch.entries):
        by_project.setdefault(LogEntry.project_id_of(entry), []).append((entry, batch.size + offset))
    projects = list(by_project.items())
    half = max(1, len(projects) // 2)
    await asyncio.gather(*(store.log_ack(identity, pid, acks) for pid, acks in projects[:half]))
    point("acked_half")
    await asyncio.gather(*(store.log_ack(identity, pid, acks) for pid, acks in projects[half:]))
    await store.log_mark_synced(identity, batch.size, batch.new_size)
    point("synced")
    emptied = await store.log_queue_lengths(identity, list(by_project))
    now_ms = int(time.time() * 1000)
    await store.log_tidy_dirty(identity, [pid for pid, length in emptied.items() if not length], now_ms)


async def catch_up(
    store: LogQueueStore, identity: keys.LogIdentity, reader: TileReader, tree: TreeState, synced: int | None
) -> None:
    """Bring Redis in line with the tree: every queued entry that is in the tree after the
    synced size (or anywhere, with none recorded) leaves its queue with its index, then the
    synced size moves to the tree's. Only entries created no later than the newest in the tree
    can be there, so usually nothing is read back from the store."""
    projects = await store.log_all_dirty_projects(identity)
    queued = await store.log_queued(identity, dict.fromkeys(projects, -1))
    wanted: dict[str, tuple[str, bytes]] = {}
    for pid, entries in queued.items():
        for entry in entries:
            receipt_id = LogEntry.receipt_id_of(entry)
            if keys.receipt_created_ms(receipt_id) <= tree.newest_ms:
                wanted[receipt_id] = (pid, entry)
    found: dict[str, list[tuple[bytes, int]]] = {}
    start = synced or 0
    if wanted and start < tree.size:
        log.warning(
            "the log's queues are behind its tree (synced %s, tree %d): looking for %d queued entries in the tree "
            "from %d",
            synced,
            tree.size,
            len(wanted),
            start,
        )
        for index in range(start // tlog.TILE_WIDTH, (tree.size + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
            bundle = await reader.bundle(index, tlog.tile_width(tree.size, 0, index))
            for offset, entry in enumerate(bundle):
                position = index * tlog.TILE_WIDTH + offset
                hit = wanted.get(LogEntry.receipt_id_of(entry)) if position >= start else None
                if hit is not None and hit[1] == entry:
                    found.setdefault(hit[0], []).append((entry, position))
    for pid, acks in found.items():
        await store.log_ack(identity, pid, acks)
    if found:
        log.warning(
            "%d queued entries were in the log already: taken off their queues, indices recorded",
            sum(len(acks) for acks in found.values()),
        )
    await store.log_mark_synced(identity, synced, tree.size)
