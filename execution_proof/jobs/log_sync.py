"""The integrator's side of Redis (docs/log.md, "Syncing Redis with the tree"): entries taken
off their queues once they are in the tree, and every queue kept in line with the tree.

The invariant, for every queue q (a project's, or the log's own) and its synced size s(q):

    no entry of the tree below s(q) is in q, and s(q) is never more than the tree's size.

It holds whatever Redis does between two steps (a crash, a restore from an older snapshot
that keeps connections, a flush, a failover), because s(q) lives in q's own hash slot and
moves only in the script that changes q: a restore puts a queue and its synced size back
together, as they were, true, when they were saved. Everything else follows from it:

- a queue whose synced size is the tree's holds no entry of the tree: its entries may be
  batched (read together with s(q): kv/lua/log_read.lua);
- a batch's entries leave their queue, with their indices, in the same script that moves
  s(q) from the batch's tree to the new one (kv/lua/log_ack.lua, a compare-and-set: a
  queue put back meanwhile keeps its older s(q) and its entries); a queue the batch took
  nothing from moves too, if it is still at the batch's tree;
- a queue behind the tree (a crash between advance and sync, a restore, a queue the
  worklist did not sample) is caught up from s(q): those of its entries that can be in the
  tree (created no later than the newest entry in it) are looked for from s(q) on, and
  leave with their indices as s(q) moves to the tree's size. Tiles are read only then;
- a create that starts an empty queue sets s(q) to the log's size as an integrator last
  told this Redis (kv/lua/issue_receipt.lua): never more than the tree's, and the new entry
  is in no tree yet.

So an entry enters the tree only from a queue in line with it, and leaves its queue with the
batch that put it there, or with the catch-up that found it: every entry once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from execution_proof.kv import keys
from execution_proof.kv.logstore.log import Batch, TreeState, entry_created_ms
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import TileReader

log = logging.getLogger("eps.log")


def queue_of(entry: bytes) -> str:
    """The queue an entry waits in, by its kind: its project's, else the log's own."""
    key = tlog.entry_key(entry)
    return key.project_id if key is not None and key.project_id is not None else keys.LOG_OWN_QUEUE


def _entry_ref(entry: bytes) -> str:
    """What a catch-up matches an entry by: the id every kind has, else its leaf hash."""
    key = tlog.entry_key(entry)
    return key.entry_id if key is not None else tlog.leaf_hash(entry).hex()


@dataclass(frozen=True)
class Sampled:
    """Where a pass read its batch from: each queue item's queue, in the batch's order, and every
    queue it sampled (those that gave nothing move with the batch too)."""

    sources: list[str]
    queues: list[str]


async def ack_batch(
    store: LogQueueStore,
    identity: keys.LogIdentity,
    batch: Batch,
    point: Callable[[str], None],
    sampled: Sampled | None = None,
) -> None:
    """The batch is in the tree: tell Redis the new size, then take each queue's entries off
    it with their indices, moving its synced size from the batch's tree to the new one; the
    queues ``sampled`` that gave the batch nothing move too (a batch finished for a stopped
    integrator knows no more than its entries: each one's queue by its kind). A queue whose
    synced size is no longer the batch's tree is left as it is (put back by a restore: the
    next pass catches it up). ``point``: the fault points ``acked_half`` and ``synced``."""
    items = tlog.items_of(batch.entries)
    sources = sampled.sources if sampled is not None else [queue_of(item) for item, _ in items]
    by_queue: dict[str, list[tuple[bytes, int]]] = {}
    for (item, offset), queue in zip(items, sources, strict=True):
        by_queue.setdefault(queue, []).append((item, batch.size + offset))
    others = sampled.queues if sampled is not None else []
    moves = list(by_queue.items()) + [(queue, []) for queue in dict.fromkeys(others) if queue not in by_queue]
    await store.log_tell_size(identity, batch.new_size)
    half = max(1, len(moves) // 2)
    await asyncio.gather(*(store.log_ack(identity, q, batch.size, batch.new_size, acks) for q, acks in moves[:half]))
    point("acked_half")
    await asyncio.gather(*(store.log_ack(identity, q, batch.size, batch.new_size, acks) for q, acks in moves[half:]))
    point("synced")
    emptied = await store.log_queue_lengths(identity, list(by_queue))
    now_ms = int(time.time() * 1000)
    await store.log_tidy_dirty(identity, [q for q, length in emptied.items() if not length], now_ms)


async def catch_up(
    store: LogQueueStore,
    identity: keys.LogIdentity,
    reader: TileReader,
    tree: TreeState,
    queues: list[str],
    point: Callable[[str], None],
    recent: Batch | None = None,
) -> int:
    """Bring ``queues`` (found behind the tree) in line with it: each queue is read with its
    synced size, its entries that can be in the tree are looked for from there on, and they
    leave the queue with their indices as the synced size moves to the tree's size (one
    compare-and-set per queue). Entries created after the newest in the tree cannot be in it,
    so usually nothing is read back; ``recent``, the last batch this integrator wrote, is
    looked in before the store. ``point``: the fault point ``caught_half``. Returns how many
    queued entries were found in the tree."""
    reads = await store.log_queued(identity, dict.fromkeys(queues, -1))
    behind = {queue: read for queue, read in reads.items() if read.synced < tree.size}
    wanted: dict[str, tuple[str, bytes]] = {}
    start = tree.size
    for queue, read in behind.items():
        for entry in read.entries:
            made = entry_created_ms(entry)
            if made is None or made <= tree.newest_ms:
                wanted[_entry_ref(entry)] = (queue, entry)
                start = min(start, read.synced)
    found: dict[str, list[tuple[bytes, int]]] = {}
    for position, entry in await _tree_entries(reader, tree, start, recent) if wanted else []:
        hit = wanted.get(_entry_ref(entry))
        if hit is not None and hit[1] == entry and position >= behind[hit[0]].synced:
            found.setdefault(hit[0], []).append((entry, position))
    moves = [(queue, read.synced, found.get(queue, [])) for queue, read in behind.items()]
    half = max(1, len(moves) // 2)
    await asyncio.gather(*(store.log_ack(identity, q, was, tree.size, acks) for q, was, acks in moves[:half]))
    point("caught_half")
    await asyncio.gather(*(store.log_ack(identity, q, was, tree.size, acks) for q, was, acks in moves[half:]))
    count = sum(len(acks) for acks in found.values())
    if count:
        log.warning(
            "%d queued entries were in the log already (in %d queues: a worker stopped before it synced, or Redis was "
            "put back): taken off their queues, indices recorded",
            count,
            len(found),
        )
    return count


async def _tree_entries(
    reader: TileReader, tree: TreeState, start: int, recent: Batch | None
) -> list[tuple[int, bytes]]:
    """The tree's queue items from ``start`` on (``tlog.items_of``), with the positions of
    their first entries: from ``recent`` when it is exactly that stretch's end, else from
    the store's bundles."""
    if recent is not None and recent.new_size == tree.size and recent.size <= start:
        return [(recent.size + offset, item) for item, offset in tlog.items_of(recent.entries)]
    log.info("looking for queued entries in the tree from %d to %d", start, tree.size)
    first = start // tlog.TILE_WIDTH
    entries: list[bytes] = []
    for index in range(first, (tree.size + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
        entries += await reader.bundle(index, tlog.tile_width(tree.size, 0, index))
    # A stretch that starts at a bundle's edge may start with the second half of an item
    # (a lone leaf): it matches nothing queued, since no synced size splits an item.
    return [(first * tlog.TILE_WIDTH + offset, item) for item, offset in tlog.items_of(entries)]
