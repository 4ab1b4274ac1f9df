"""The integrator: moves queued log entries from Redis into the Merkle tree in the log store
and publishes checkpoints (docs/log.md, "Sequencing").

Before anything, ``prepare`` checks the log store against the configuration and Redis: a
store holding another log's identity, or an empty store beside a Redis that knows this log
(a lost or mistyped ``LOG_STORE``), is refused (``LogRefused``); an empty store beside a Redis
with no trace of the log becomes a new log (identity, size-0 checkpoint, published at once).

One integrator is active at a time, behind a lease in the store that it renews; any number
wait. From the store's tree state (size S, root R) a batch goes:

1. **stage**: its entries are written to ``.state/staging/<S>`` (create-only: one batch per
   size, whoever comes first), before any tile;
2. **tiles**: its entry bundles and tiles are written (full ones created once, the same bytes
   whoever writes them, since they come from the staged batch);
3. **advance**: the tree state moves from (S, R) to (S', R') by compare-and-swap;
4. **sync**: each entry leaves its project's queue and its receipt gets its index; Redis's
   synced size moves from S to S' (compare-and-set);
5. **publish**: the checkpoint of (S', R') is signed, sent to the witnesses, published.

Killed anywhere, the next integrator finishes a staged batch from the store (2-3), syncs the
queues with the tree (4: every queued entry found in the tree after Redis's synced size
leaves its queue with its index; this is also how a Redis restored from an older snapshot
catches up, and why no receipt ever enters the log twice) and publishes the tree state (5).
The tree state only ever moves by compare-and-swap from what was read, to a tree computed
from the stored edge tiles, after checking they hash to the stored root: the log never signs
a tree that is not an extension of the last one it signed.

A witness's evidence of a fork halts the log (``.state/halt``, kept until ``log resume``):
nothing more is signed, entries keep queueing up to ``LOG_MAX_PENDING``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from execution_proof.jobs.log_config import LogConfig, LogRefused, prepare_log
from execution_proof.jobs.log_timestamps import Stamper
from execution_proof.jobs.log_witnesses import WitnessClient
from execution_proof.kv import keys
from execution_proof.kv.logstore import LogStore, LogStoreConflict, LogStoreError
from execution_proof.kv.logstore.log import Batch, Identity, TreeState, checkpoint_size
from execution_proof.kv.store import Store
from execution_proof.receipts import note, tlog
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.receipts.tiles import TileMissing, TileReader
from execution_proof.runtime import metrics
from execution_proof.runtime.outage import Outage

log = logging.getLogger("eps.log")

POLL_S = 0.05
DIRTY_SAMPLE = 1024
RECHECK_AFTER_MS = 30_000
HALT_RECHECK_S = 2.0
_HALTS_SAID: set[tuple[str, str, str]] = set()
"""The halts (origin, when recorded, reason) this process has logged at CRITICAL: each once,
however often an integrator finds it again (a lease taken back, a second integrator in the
process); forgotten when the log is resumed."""
CRASH_POINTS = ("staged", "tiles_half", "tiles", "advanced", "unstaged", "acked_half", "synced", "signed", "published")
"""Where a batch can be cut short in the fault-injection tests: after each of its steps."""


@dataclass
class _Edge:
    """The right edge of the tree of ``size``: its partial hash tiles and the entries of its
    partial bundle, kept from the last batch so the next reads nothing back."""

    size: int
    tiles: dict[int, list[bytes]]
    bundle: list[bytes]


class Integrator:
    def __init__(self, store: Store, log_store: LogStore, config: LogConfig) -> None:
        self.store = store
        self.log = log_store
        self.config = config
        self.origin = config.origin
        self.reader = TileReader(log_store.fetch)
        self.witnesses = (
            WitnessClient(log_store, config.policy, config.witness_timeout_ms, self.reader)
            if config.policy is not None
            else None
        )
        self.token = secrets.token_hex(16)
        self.prepared = False
        self.holding = False
        self._lease_checked = 0.0
        self.tree: TreeState | None = None
        """The tree state as this integrator last read or wrote it; None: read it again."""
        self._edge: _Edge | None = None
        self.halted: dict[str, Any] | None = None
        self._halt_checked = 0.0
        self._last_batch = time.monotonic()
        self._outage = Outage(log, "log integrator")
        self.crash: Callable[[str], None] | None = _kill_at(config.crash_at) if config.crash_at else None
        """Fault injection for tests: called at each point between two steps of a batch
        (``CRASH_POINTS``)."""

    def _point(self, name: str) -> None:
        if self.crash is not None:
            self.crash(name)

    async def prepare(self) -> Identity:
        """The store checked (and created if new) before the first pass: ``prepare_log``."""
        identity = await prepare_log(self.store, self.log, self.origin, self.config.signer)
        self.prepared = True
        return identity

    # -- the loop

    async def run(self, stop: asyncio.Event) -> None:
        """Pass after pass until ``stop`` is set; errors are logged (each kind at most once a
        minute) and retried. ``LogRefused`` ends the loop (and is raised). With
        ``LOG_TSA_URLS`` the time-stamping loop runs beside it."""
        if self.config.tsa is None:
            await self._integrate(stop)
            return
        stamper = Stamper(self.store, self.log, self.origin, self.config.tsa)
        stamping = asyncio.ensure_future(stamper.run(stop))
        try:
            await self._integrate(stop)
        finally:
            stop.set()
            await stamping

    async def _integrate(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                integrated = 0
                try:
                    if not self.prepared:
                        await self.prepare()  # the store's checks, retried while it cannot be reached
                    if await self._hold_lease():
                        integrated = await self.step()
                    self._outage.passed()
                except LogRefused as exc:
                    log.critical("LOG REFUSED: the integrator stops and signs nothing: %s", exc)
                    raise
                except (StoreUnavailable, LogStoreError, TileMissing, OSError) as exc:
                    self._outage.failed(exc)
                except Exception as exc:  # noqa: BLE001 - a long-running loop: say it, retry next pass
                    self._outage.failed(exc, trace=True)
                if integrated < self.config.max_batch:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_S)
        finally:
            if self.witnesses is not None:
                await self.witnesses.close()
            if self.holding:
                with contextlib.suppress(LogStoreError):  # the lease expires by itself
                    await self.log.lease(self.token, 0, "drop")

    async def _hold_lease(self) -> bool:
        """Whether this integrator holds the lease: renewed a third of the way through, and
        looked for by a standby four times a lease."""
        now = time.monotonic()
        if self.holding and now - self._lease_checked < self.config.lease_ms / 3000:
            return True
        if not self.holding and now - self._lease_checked < self.config.lease_ms / 4000:
            return False
        self._lease_checked = now
        held = await self.log.lease(self.token, self.config.lease_ms, "keep" if self.holding else "take")
        if held != self.holding:
            self.tree = None  # taken (or lost): read the tree state again before anything
        self.holding = held
        return held

    # -- one pass

    async def step(self, force: bool = False) -> int:
        """One pass; the number of entries it integrated. ``force``: do not wait for the
        interval or the trigger (tests, and ``--once`` tools)."""
        if self.tree is None:
            await self._load()
        if self.halted is None and self.witnesses is not None and self.witnesses.evidence is not None:
            await self._halt(self.witnesses.evidence)  # a witness's answer that came after publication
        if self.halted is not None:
            await self._still_halted()
            return 0
        tree = self.tree
        if tree is None:
            return 0  # another integrator moved the tree while this one caught up: next pass
        projects = await self.store.log_dirty_projects(self.origin, DIRTY_SAMPLE)
        # Lengths first (cheap): a pass that only waits for the interval or the trigger reads
        # no entries; they are read once, when the batch is made.
        lengths = await self.store.log_queue_lengths(self.origin, projects) if projects else {}
        now_ms = int(time.time() * 1000)
        await self.store.log_tidy_dirty(self.origin, [pid for pid in projects if not lengths[pid]], now_ms)
        await self.store.log_recheck(self.origin, now_ms - RECHECK_AFTER_MS)
        waiting = sum(lengths.values())
        if self.store.is_cluster and len(projects) < DIRTY_SAMPLE:
            await self.store.log_set_pending(self.origin, waiting)  # the count drifts on a Cluster
        if not waiting:
            return 0
        waited = time.monotonic() - self._last_batch
        if not force and waiting < self.config.trigger and waited < self.config.interval_s:
            return 0
        # Each queue is read only as far as this batch takes from it (projects in order, as the
        # batch is filled): under a backlog every queue holds thousands of entries, and reading
        # ``max_batch`` of each would read and drop all but one queue's share.
        room, limits = self.config.max_batch, {}
        for pid in projects:
            if lengths[pid] and room > 0:
                limits[pid] = min(lengths[pid], room)
                room -= limits[pid]
        queued = await self.store.log_queued(self.origin, limits)
        # Read after the entries: had Redis been restored from an older snapshot before they
        # were read, its synced size is behind the tree, and they may be in the tree already.
        synced = await self.store.log_synced(self.origin)
        if synced != tree.size:
            await self._sync_with_tree(synced)
            return 0
        entries: list[bytes] = []
        for project_entries in queued.values():
            entries += project_entries[: self.config.max_batch - len(entries)]
        if not entries:
            return 0
        edge = await self._edge_of(tree)
        extension = tlog.extend(tree.size, edge.tiles, [tlog.leaf_hash(entry) for entry in entries])
        newest = max(keys.receipt_created_ms(_receipt_id(entry)) for entry in entries)
        batch = Batch(tree.size, tree.root, extension.size, extension.root, newest, entries)
        if not await self.log.stage(batch):
            self.tree = None  # another integrator staged a batch from this size: start over
            return 0
        self._point("staged")
        started = time.monotonic()
        await self._finish(batch, extension, edge)
        self._last_batch = time.monotonic()
        metrics.LOG_ENTRIES.inc(len(entries))
        metrics.LOG_BATCH_SECONDS.observe(time.monotonic() - started)
        return len(entries)

    # -- the phases

    async def _finish(self, batch: Batch, extension: tlog.Extension, edge: _Edge) -> bool:
        """Write the staged batch's tiles and bundles, advance the tree, sync Redis, publish.
        False when another integrator advanced the tree first (the tree is read again)."""
        tree = self.tree
        assert tree is not None
        assert (tree.size, tree.root) == (batch.size, batch.root)
        if (extension.size, extension.root) != (batch.new_size, batch.new_root):
            raise LogRefused(f"the batch staged from size {batch.size} does not hash to the tree it names")
        bundles = _bundles(batch.size, edge.bundle, batch.entries)
        writes: list[tuple[int | str, int, bytes, int]] = [
            (level, index, data, len(data) // tlog.HASH_SIZE) for (level, index), data in extension.tiles.items()
        ]
        writes += [("entries", index, data, count) for index, (data, count) in bundles.items()]
        half = len(writes) // 2
        try:
            await asyncio.gather(*(self.log.write_tile(*write) for write in writes[:half]))
            self._point("tiles_half")
            await asyncio.gather(*(self.log.write_tile(*write) for write in writes[half:]))
        except LogStoreConflict as exc:
            raise LogRefused(str(exc)) from exc
        self._point("tiles")
        advanced = await self.log.advance(tree, batch.new_size, batch.new_root, batch.newest_ms)
        if advanced is None:
            self.tree = None  # another integrator advanced it (from the same staged batch)
            return False
        self._point("advanced")
        self.tree = advanced
        combined, keep = edge.bundle + batch.entries, batch.new_size % tlog.TILE_WIDTH
        tail = combined[len(combined) - keep :] if keep else []
        self._edge = _Edge(advanced.size, _edge_after(advanced.size, edge.tiles, extension), tail)
        await self.log.unstage(batch.size)
        self._point("unstaged")
        await self._sync_batch(batch)
        await self._publish(advanced)
        return True

    async def _sync_batch(self, batch: Batch) -> None:
        """Take the batch's entries off their queues with their indices; move the synced size."""
        by_project: dict[str, list[tuple[bytes, int]]] = {}
        for offset, entry in enumerate(batch.entries):
            by_project.setdefault(_project_id(entry), []).append((entry, batch.size + offset))
        projects = list(by_project.items())
        half = max(1, len(projects) // 2)
        await asyncio.gather(*(self.store.log_ack(self.origin, pid, acks) for pid, acks in projects[:half]))
        self._point("acked_half")
        await asyncio.gather(*(self.store.log_ack(self.origin, pid, acks) for pid, acks in projects[half:]))
        await self.store.log_mark_synced(self.origin, batch.size, batch.new_size)
        self._point("synced")
        emptied = await self.store.log_queue_lengths(self.origin, list(by_project))
        now_ms = int(time.time() * 1000)
        await self.store.log_tidy_dirty(self.origin, [pid for pid, length in emptied.items() if not length], now_ms)

    async def _sync_with_tree(self, synced: int | None) -> None:
        """Bring Redis in line with the tree: every queued entry that is in the tree after the
        synced size (or anywhere, with none recorded) leaves its queue with its index, then
        the synced size moves to the tree's. Only entries created no later than the newest
        in the tree can be there, so usually nothing is read back from the store."""
        tree = self.tree
        assert tree is not None
        if synced is not None and synced > tree.size:
            raise LogRefused(
                f"Redis says {synced} entries of the log {self.origin} are in the tree, the log store {self.log.url} "
                f"holds {tree.size}: the store lost entries (restored from an older copy?) or LOG_STORE names "
                "another store. Nothing is signed until the store is the log's again"
            )
        projects = await self.store.log_all_dirty_projects(self.origin)
        queued = await self.store.log_queued(self.origin, dict.fromkeys(projects, -1))
        wanted: dict[str, tuple[str, bytes]] = {}
        for pid, entries in queued.items():
            for entry in entries:
                receipt_id = _receipt_id(entry)
                if keys.receipt_created_ms(receipt_id) <= tree.newest_ms:
                    wanted[receipt_id] = (pid, entry)
        found: dict[str, list[tuple[bytes, int]]] = {}
        start = synced or 0
        if wanted and start < tree.size:
            log.warning(
                "the log's queues are behind its tree (synced %s, tree %d): looking for %d queued entries in the "
                "tree from %d",
                synced,
                tree.size,
                len(wanted),
                start,
            )
            for index in range(start // tlog.TILE_WIDTH, (tree.size + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
                bundle = await self.reader.bundle(index, tlog.tile_width(tree.size, 0, index))
                for offset, entry in enumerate(bundle):
                    position = index * tlog.TILE_WIDTH + offset
                    hit = wanted.get(_receipt_id(entry)) if position >= start else None
                    if hit is not None and hit[1] == entry:
                        found.setdefault(hit[0], []).append((entry, position))
        for pid, acks in found.items():
            await self.store.log_ack(self.origin, pid, acks)
        if found:
            log.warning(
                "%d queued entries were in the log already: taken off their queues, indices recorded",
                sum(len(acks) for acks in found.values()),
            )
        await self.store.log_mark_synced(self.origin, synced, tree.size)

    async def _publish(self, tree: TreeState) -> None:
        """Sign the tree, collect cosignatures, publish; halt instead on evidence of a fork."""
        checkpoint = note.Checkpoint(self.origin, tree.size, tree.root)
        signed = note.sign_note(checkpoint.text(), self.config.signer)
        if self.witnesses is not None:
            cosigned = await self.witnesses.cosign(signed, checkpoint)
            if cosigned.evidence is not None:
                await self._halt(cosigned.evidence)
                return
            signed = cosigned.text
        self._point("signed")
        if await self.log.publish(signed.encode()):
            metrics.LOG_CHECKPOINTS.inc()
        self._point("published")

    # -- reading the store

    async def _load(self) -> None:
        """Read the tree state; finish a batch a crashed integrator staged; sync Redis with
        the tree; publish the tree if its checkpoint is not out yet."""
        tree = await self.log.tree()
        if tree is None:
            raise LogStoreError(f"log store {self.log.url}: no tree state yet (.state/tree)")
        self.tree, self._edge = tree, None
        self.halted = await self.log.halted()
        metrics.LOG_HALTED.set(1 if self.halted else 0)
        if self.halted is not None:
            self._log_halt(self.halted)
            return
        for size in await self.log.staged_sizes():
            if size != tree.size:
                await self.log.unstage(size)  # finished (or from a size the tree never had)
                continue
            batch = await self.log.staged(size)
            if batch is None:
                continue
            if batch.root != tree.root:
                raise LogRefused(f"a batch staged from size {size} names another root than the tree's")
            edge = await self._edge_of(tree)
            extension = tlog.extend(tree.size, edge.tiles, [tlog.leaf_hash(entry) for entry in batch.entries])
            log.warning("finishing the batch a stopped integrator staged (sizes %d to %d)", batch.size, batch.new_size)
            if not await self._finish(batch, extension, edge):
                return
        tree = self.tree
        assert tree is not None
        synced = await self.store.log_synced(self.origin)
        if synced != tree.size:
            await self._sync_with_tree(synced)
        published = await self.log.checkpoint()
        if published is None or checkpoint_size(published) < tree.size:
            await self._publish(tree)

    async def _edge_of(self, tree: TreeState) -> _Edge:
        """The edge of the tree: kept from the last batch, else read and checked against the
        tree's root (tiles that do not hash to it: the store lost data; nothing is signed)."""
        if self._edge is not None and self._edge.size == tree.size:
            return self._edge
        try:
            tiles = await self.reader.edge(tree.size)
            count = tree.size % tlog.TILE_WIDTH
            bundle = await self.reader.bundle(tree.size // tlog.TILE_WIDTH, count) if count else []
        except TileMissing as exc:
            raise LogRefused(f"{exc}: the tree of size {tree.size} cannot be extended") from exc
        if tlog.root_from_edge(tree.size, tiles) != tree.root:
            raise LogRefused(f"the store's edge tiles do not hash to its tree of size {tree.size}: its data was lost")
        if [tlog.leaf_hash(entry) for entry in bundle] != tiles.get(0, [])[:count]:
            raise LogRefused(f"the store's last entry bundle does not hash to its tree of size {tree.size}")
        self._edge = _Edge(tree.size, tiles, bundle)
        return self._edge

    # -- halting

    async def _halt(self, evidence: dict[str, Any]) -> None:
        reason = f"witness {evidence['witness']} answered {evidence['status']}: {evidence['detail']}"
        await self.log.halt(reason, evidence)
        if self.witnesses is not None:
            self.witnesses.evidence = None  # recorded in the store: a resume starts afresh
        self.halted = await self.log.halted() or {"reason": reason, "evidence": evidence}
        metrics.LOG_HALTED.set(1)
        self._log_halt(self.halted)

    def _log_halt(self, halted: dict[str, Any]) -> None:
        self._halt_checked = time.monotonic()
        said = (self.origin, str(halted.get("at")), str(halted.get("reason")))
        if said in _HALTS_SAID:
            return
        _HALTS_SAID.add(said)
        log.critical(
            "LOG HALTED: someone has signed a history of this log that is not ours (%s). The integrator signs "
            "nothing until an operator has looked and runs: python service.py log resume --reason TEXT",
            halted.get("reason"),
        )

    async def _still_halted(self) -> bool:
        """While halted, look at the store every few seconds for an operator's resume."""
        if time.monotonic() - self._halt_checked < HALT_RECHECK_S:
            return True
        self._halt_checked = time.monotonic()
        if await self.log.halted() is not None:
            return True
        log.warning("the log was resumed: integrating again")
        _HALTS_SAID.difference_update({said for said in _HALTS_SAID if said[0] == self.origin})
        self.halted = None
        self.tree = None
        metrics.LOG_HALTED.set(0)
        return False


def _kill_at(point: str) -> Callable[[str], None]:
    def kill(name: str) -> None:
        if name == point:
            log.warning("LOG_TEST_CRASH_AT=%s: killing this process (kill -9)", point)
            os.kill(os.getpid(), signal.SIGKILL)

    return kill


def _receipt_id(entry: bytes) -> str:
    return entry.split(b"\n", 2)[1].decode()


def _project_id(entry: bytes) -> str:
    return entry.split(b"\n", 4)[3].decode()


def _bundles(size: int, tail: list[bytes], entries: list[bytes]) -> dict[int, tuple[bytes, int]]:
    """Every entry bundle the entries after ``size`` change: index -> (bytes, entry count).
    ``tail``: the entries of the tree's partial bundle (they start the first one)."""
    out: dict[int, tuple[bytes, int]] = {}
    current = list(tail)
    index = size // tlog.TILE_WIDTH
    for entry in entries:
        current.append(entry)
        if len(current) == tlog.TILE_WIDTH:
            out[index] = (b"".join(tlog.bundle_entry(e) for e in current), tlog.TILE_WIDTH)
            index, current = index + 1, []
    if current:
        out[index] = (b"".join(tlog.bundle_entry(e) for e in current), len(current))
    return out


def _edge_after(size: int, before: dict[int, list[bytes]], extension: tlog.Extension) -> dict[int, list[bytes]]:
    """The edge tiles of the tree of ``size`` after ``extension``: changed tiles at the edge
    from the extension, unchanged ones from ``before``."""
    edge: dict[int, list[bytes]] = {}
    for level, index, width in tlog.edge_tiles(size):
        data = extension.tiles.get((level, index))
        edge[level] = tlog.split_tile(data) if data is not None else before[level][:width]
    return edge


class IntegratorThread:
    """The integrator beside RQ's (blocking) worker: its own thread, event loop and stores.
    ``refused`` holds the reason when the log store was refused (the worker then exits)."""

    def __init__(
        self, open_stores: Callable[[], tuple[Store, LogStore]], config: LogConfig, on_refused: Callable[[], None]
    ) -> None:
        self._open_stores = open_stores
        self.config = config
        self.refused: str | None = None
        self._on_refused = on_refused
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="log-integrator", daemon=True)

    def start(self) -> IntegratorThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        store, log_store = self._open_stores()
        self._ready.set()
        try:
            await Integrator(store, log_store, self.config).run(self._stop)
        except LogRefused as exc:
            self.refused = str(exc)
            self._on_refused()
        finally:
            await store.close()
            await log_store.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
