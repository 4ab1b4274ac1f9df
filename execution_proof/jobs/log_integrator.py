"""The integrator: moves queued log entries from Redis into the Merkle tree in the log store
and publishes checkpoints (docs/log.md, "Sequencing").

Before anything, ``prepare`` checks the store against the configuration and Redis: it makes
a new log, or refuses another's, a lost one or a mistyped ``LOG_STORE`` (jobs/log_config.py).

One integrator is active at a time, behind a lease in the store that it renews; any number
wait. The lease saves work; correctness rests on the tree state's compare-and-swap, whose
version is the fencing token (docs/log.md, "Fencing"). From the tree state as read (size S, root R,
version V), a batch goes:

1. **anchor**: the published checkpoint (before each staging, and once a second while idle)
   must be a prefix of the tree state, and no tile or bundle may lie beyond it (before each
   staging and at every read of the store: jobs/log_evidence.py), else it is refused
   (``.state/`` put back from a copy, with or without the checkpoint);
2. **stage**: its entries are written under a name of their own, then the tree state is
   compare-and-swapped from V to (S, R, this batch staged). Only a batch whose staging won
   has any tile written, so every byte even a stale writer writes belongs to the one history;
3. **tiles**: its entry bundles and tiles are written, every path (full or partial) created
   once and compared where it exists: whoever writes them writes the same bytes, from the
   staged entries and the stored edge;
4. **advance**: the tree state moves from (S, R, staged) to (S', R') by compare-and-swap;
5. **sync**: each entry leaves its queue and its receipt gets its index as the queue's synced
   size moves from S to S' (one compare-and-set per queue: jobs/log_sync.py);
6. **publish**: the checkpoint of (S', R') is signed, sent to the witnesses, published.

Killed anywhere, the next integrator finishes the batch the tree state names (3-4), catches
up each queue found behind the tree before it batches from it (5: its entries found in the
tree from its synced size on leave it with their indices; this is also how a Redis put back
from an older snapshot catches up, and why no receipt ever enters the log twice) and
publishes the tree state (6).
Paused anywhere (its lease lost), it finds out at its next compare-and-swap, or when a write
meets other bytes, or when Redis or a witness knows a larger tree: it reads the tree state
again and, finding it moved, goes back to standby without a word above INFO. Only what the
current tree state covers and contradicts halts the log (``.state/halt``, kept until ``log
resume``); so does a witness's evidence of a fork. Entries keep queueing up to
``LOG_MAX_PENDING`` meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from execution_proof.errors import Error
from execution_proof.jobs.log_config import LogConfig, LogRefused, prepare_log, refuse
from execution_proof.jobs.log_evidence import refuse_evidence_beyond
from execution_proof.jobs.log_lease import LeaseKeeper
from execution_proof.jobs.log_sync import Sampled, ack_batch, catch_up
from execution_proof.jobs.log_timestamps import Stamper
from execution_proof.jobs.log_witnesses import Evidence, WitnessClient
from execution_proof.kv.logstore import LogStore, LogStoreConflict, LogStoreError
from execution_proof.kv.logstore.log import (
    Batch,
    CheckpointUnreadable,
    Identity,
    TileMismatch,
    TreeState,
    newest_created_ms,
)
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.receipts.shapes import JSONObject
from execution_proof.runtime import metrics
from execution_proof.runtime.outage import Outage
from execution_proof.transparency import note, tlog
from execution_proof.transparency.tiles import TileMissing, TileReader

log = logging.getLogger("eps.log")

POLL_S = 0.05
DIRTY_SAMPLE = 1024
RECHECK_AFTER_MS = 30_000
HALT_RECHECK_S = 2.0
PROGRESS_EVERY_S = 1.0
"""How often, at most, the active integrator tells Redis it is keeping up (``/health``)."""
_HALTS_SAID: set[tuple[str, str, str]] = set()
"""The halts (origin, when recorded, reason) this process has logged at CRITICAL: each once,
however often an integrator finds it again (a lease taken back, a second integrator in the
process); forgotten when the log is resumed."""


class Overtaken(Error):
    """The tree state moved under this integrator (it paused, or lost its lease): what it was
    doing is given up without a trace, and it reads the tree state again."""


@dataclass
class _Edge:
    """The right edge of the tree of ``size``: its partial hash tiles and the entries of its
    partial bundle, kept from the last batch so the next reads nothing back."""

    size: int
    tiles: dict[int, list[bytes]]
    bundle: list[bytes]


class Integrator:
    def __init__(self, store: LogQueueStore, log_store: LogStore, config: LogConfig) -> None:
        self.store = store
        self.log = log_store
        self.config = config
        self.origin = config.origin
        self.identity: Identity = config.identity
        self.verifier = config.signer.verifier
        self.reader = TileReader(log_store.fetch)
        self.witnesses = (
            WitnessClient(log_store, config.policy, config.witness_timeout_ms, self.reader)
            if config.policy is not None
            else None
        )
        self.lease = LeaseKeeper(store, log_store, config)
        self.prepared = False
        self.tree: TreeState | None = None
        """The tree state as this integrator last read or wrote it; None: read it again."""
        self._edge: _Edge | None = None
        self._anchor: tuple[int, bytes, int, bytes] | None = None
        """(checkpoint size, root, tree size, root): a published checkpoint found a prefix of the tree."""
        self._publish_due = False
        """The tree advanced (or was found ahead of the checkpoint) and its checkpoint is not out yet."""
        self._recent: Batch | None = None
        """The last batch this integrator wrote: a queue found one batch behind is looked for
        there, not in the store (jobs/log_sync.py, ``catch_up``)."""
        self.halted: dict[str, Any] | None = None
        self._halt_checked = 0.0
        self._last_batch = time.monotonic()
        self._progress_at = -1e9
        self._outage = Outage(log, "log integrator")
        self.failpoints = config.failpoints

    def _point(self, step: str) -> None:
        """A fault point (``LOG_FAILPOINTS``): nothing at all when none is configured."""
        if self.failpoints is not None:
            self.failpoints.reach(step)

    async def prepare(self) -> Identity:
        """The store checked (and created if new) before the first pass: ``prepare_log``."""
        identity = await prepare_log(self.store, self.log, self.origin, self.config.signer, self.failpoints)
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
        stamper = Stamper(self.store, self.log, self.identity, self.config.tsa)
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
                    self.tree = None  # whatever was under way, read the tree state again first
                    self._outage.failed(exc)
                except Exception as exc:  # noqa: BLE001 - a long-running loop: say it, retry next pass
                    self.tree = None
                    self._outage.failed(exc, trace=True)
                if integrated < self.config.max_batch:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_S)
        finally:
            if self.witnesses is not None:
                await self.witnesses.close()
            with contextlib.suppress(LogStoreError):  # the lease expires by itself
                await self.lease.drop()

    async def _hold_lease(self) -> bool:
        """Whether this integrator holds the lease (jobs/log_lease.py). Taken or lost, the tree
        state is read again before anything; the holder looks at ``.state/halt`` at each
        renewal too (a halt recorded by another process: within 2 s it integrates nothing)."""
        was = self.lease.holding
        held = await self.lease.hold()
        if held != was:
            self.tree = None
        if held:
            await self._look_for_halt()
        return held

    async def _look_for_halt(self) -> None:
        """A halt recorded while this integrator holds the lease and its tree state (by
        another process: a refusal, an operator): it stops integrating, and says so."""
        if self.halted is not None or self.tree is None:
            return  # halted already, or the next pass reads the halt with the tree state
        halted = await self.log.halted()
        if halted is not None:
            self.halted = halted
            metrics.LOG_HALTED.set(1)
            self._log_halt(halted)

    # -- one pass

    async def step(self, force: bool = False) -> int:
        """One pass; the number of entries it integrated. ``force``: do not wait for the
        interval or the trigger (tests, and ``--once`` tools)."""
        try:
            return await self._step(force)
        except Overtaken as exc:
            metrics.LOG_FENCED.labels(str(exc)).inc()
            log.info("the tree state moved under this integrator (at %s): reading it again", exc)
            self.tree, self._edge = None, None
            return 0

    async def _step(self, force: bool) -> int:
        if self.tree is None:
            await self._load()
        if self.halted is None and self.witnesses is not None and self.witnesses.evidence is not None:
            await self._on_evidence(self.witnesses.evidence)  # an answer that came after publication
        if self.halted is not None:
            await self._still_halted()
            return 0
        tree = self.tree
        if tree is None:
            return 0
        if self._publish_due:
            await self._publish(tree)
        projects = await self.store.log_dirty_projects(self.identity, DIRTY_SAMPLE)
        # Lengths and synced sizes first (cheap): a pass that only waits for the interval or
        # the trigger reads no entries; they are read once, when the batch is made.
        states = await self.store.log_queue_states(self.identity, projects) if projects else {}
        lengths = {queue: length for queue, (length, _) in states.items()}
        now_ms = int(time.time() * 1000)
        await self.store.log_tidy_dirty(self.identity, [pid for pid in projects if not lengths[pid]], now_ms)
        await self.store.log_recheck(self.identity, now_ms - RECHECK_AFTER_MS)
        waiting = sum(lengths.values())
        if len(projects) < DIRTY_SAMPLE:
            await self.store.log_measured_pending(self.identity, waiting)
        if not waiting:
            if time.monotonic() - self._progress_at >= PROGRESS_EVERY_S and await self._check_anchor(tree, "idle"):
                await self._publish(tree)  # idle, it still looks at the checkpoint (1.): no silent wedge
            await self._mark_progress()
            return 0
        waited = time.monotonic() - self._last_batch
        if not force and waiting < self.config.trigger and waited < self.config.interval_s:
            return 0
        ahead = max((synced for length, synced in states.values() if length), default=0)
        if ahead > tree.size:
            await self._refuse_behind_redis(tree, ahead, "synced")
        behind = [queue for queue, (length, synced) in states.items() if length and synced < tree.size]
        if behind:
            await self._check_anchor(tree, "synced")
            await catch_up(self.store, self.identity, self.reader, tree, behind, self._point, self._recent)
        # Each queue is read only as far as this batch takes from it (projects in order, as the
        # batch is filled): under a backlog every queue holds thousands of entries, and reading
        # ``max_batch`` of each would read and drop all but one queue's share.
        room, limits = self.config.max_batch, {}
        for pid in projects:
            if lengths[pid] and room > 0:
                limits[pid] = min(lengths[pid], room)
                room -= limits[pid]
        queued = await self.store.log_queued(self.identity, limits)
        self._point("batch")
        # Only a queue in line with the tree gives entries (jobs/log_sync.py): one that moved
        # since it was looked at (a restore put it back) is looked at again next pass.
        items: list[bytes] = []
        sources: list[str] = []
        for queue, read in queued.items():
            if read.synced == tree.size:
                taken = read.entries[: self.config.max_batch - len(items)]
                items += taken
                sources += [queue] * len(taken)
        if not items:
            return 0
        entries = [entry for item in items for entry in tlog.item_entries(item)]
        edge = await self._edge_of(tree)
        extension = tlog.extend(tree.size, edge.tiles, [tlog.leaf_hash(entry) for entry in entries])
        newest = newest_created_ms(entries)
        batch = Batch(tree.size, tree.root, extension.size, extension.root, newest, entries)
        await self._check_anchor(tree, "stage")
        await refuse_evidence_beyond(self.log, tree, self._check_current)
        staged = await self.log.stage(tree, batch)
        if staged is None:
            raise Overtaken("stage")
        self.tree = staged
        self._point("staged")
        started = time.monotonic()
        await self._finish(staged, batch, extension, edge, Sampled(sources, projects))
        self._last_batch = time.monotonic()
        metrics.LOG_ENTRIES.inc(len(entries))
        metrics.LOG_BATCH_SECONDS.observe(time.monotonic() - started)
        return len(entries)

    # -- the phases

    async def _finish(
        self, tree: TreeState, batch: Batch, extension: tlog.Extension, edge: _Edge, sampled: Sampled | None = None
    ) -> None:
        """Write the batch ``tree`` has staged: its tiles and bundles, then advance the tree,
        sync Redis (``sampled``: where this pass read the batch from, ``ack_batch``), publish.
        ``Overtaken`` when another integrator advanced the tree first or the store holds
        other bytes where the tree has moved past; a refusal (and a halt) when it holds other
        bytes where the tree state still names this batch."""
        staged = tree.staged
        assert staged is not None
        assert (tree.size, tree.root) == (batch.size, batch.root)
        if (extension.size, extension.root) != (staged.new_size, staged.new_root):
            await self._check_current(tree, "tiles")
            raise await refuse(self.log, f"the batch staged on size {batch.size} does not hash to the tree it names")
        bundles = tlog.bundles_after(batch.size, edge.bundle, batch.entries)
        writes: list[tuple[int | str, int, bytes, int]] = [
            (level, index, data, len(data) // tlog.HASH_SIZE) for (level, index), data in extension.tiles.items()
        ]
        writes += [("entries", index, data, count) for index, (data, count) in bundles.items()]
        half = len(writes) // 2
        try:
            await asyncio.gather(*(self.log.write_tile(*write) for write in writes[:half]))
            self._point("tiles_half")
            await asyncio.gather(*(self.log.write_tile(*write) for write in writes[half:]))
        except TileMismatch as exc:
            fresh = await self.log.tree()
            if fresh is None or fresh.version != tree.version:
                if fresh is not None and fresh.size >= staged.new_size:
                    raise Overtaken("tiles") from exc
                self.tree = None  # moved, not past this batch: read it again, the anchor decides
                raise Overtaken("tiles") from exc
            raise await refuse(
                self.log,
                f"{exc}, where the tree state still names this batch (sizes {tree.size} to {staged.new_size}): the "
                "store holds another history",
            ) from exc
        self._point("tiles")
        advanced = await self.log.advance(tree)
        if advanced is None:
            raise Overtaken("advance")
        self._point("advanced")
        self.tree = advanced
        self._publish_due = True
        combined, keep = edge.bundle + batch.entries, advanced.size % tlog.TILE_WIDTH
        tail = combined[len(combined) - keep :] if keep else []
        self._edge = _Edge(advanced.size, tlog.edge_after(advanced.size, edge.tiles, extension), tail)
        await self.log.unstage(staged)
        self._point("unstaged")
        # Side by side: each needs only the advanced tree, and a proof needs both (its index
        # from Redis, the checkpoint from the store). What a failure leaves undone is done from
        # the store again (``_load``: the synced size behind, the checkpoint due).
        self._recent = batch
        syncing = asyncio.ensure_future(ack_batch(self.store, self.identity, batch, self._point, sampled))
        try:
            await self._publish(advanced)
        except BaseException:
            syncing.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await syncing
            raise
        await syncing

    async def _refuse_behind_redis(self, tree: TreeState, size: int, step: str) -> None:
        """Redis knows a larger tree than ``tree``: an integrator that read it a while ago was
        overtaken (another moved both meanwhile); a tree still current lost entries."""
        await self._check_current(tree, step)
        raise await refuse(
            self.log,
            f"Redis says the log {self.origin} has {size} entries in its tree, the log store {self.log.url} holds "
            f"{tree.size}: the store lost entries (restored from an older copy?) or LOG_STORE names another store. "
            "Nothing is signed until the store is the log's again",
        )

    async def _publish(self, tree: TreeState) -> None:
        """Sign the tree, collect cosignatures, publish; halt instead on evidence of a fork. A
        published checkpoint that cannot be read is replaced once the tiles prove the tree."""
        checkpoint = note.Checkpoint(self.origin, tree.size, tree.root)
        signed = note.sign_note(checkpoint.text(), self.config.signer)
        if self.witnesses is not None:
            cosigned = await self.witnesses.cosign(signed, checkpoint)
            if cosigned.evidence is not None:
                await self._on_evidence(cosigned.evidence)
                return
            signed = cosigned.text
        self._point("signed")
        try:
            published = await self.log.publish(signed.encode())
        except CheckpointUnreadable:
            published = await self._repair_checkpoint(tree, signed.encode())
        self._publish_due = False
        if published:
            metrics.LOG_CHECKPOINTS.inc()
            await self._mark_progress(force=True)
        self._point("published")

    async def _repair_checkpoint(self, tree: TreeState, signed: bytes) -> bool:
        """The published checkpoint cannot be read: republish the tree's, once the tiles in the
        store prove the tree (read afresh), else refuse."""
        await self._check_current(tree, "publish")
        self._edge = None
        await self._edge_of(tree)
        log.warning(
            "the published checkpoint of %s could not be read: published again from the tree state (size %d), "
            "which the tiles prove",
            self.log.url,
            tree.size,
        )
        return await self.log.publish(signed, repair=True)

    async def _mark_progress(self, force: bool = False) -> None:
        """Tell Redis this integrator keeps up (at most every ``PROGRESS_EVERY_S``): ``/health``
        says ``stalled`` once the oldest waiting entry and this are older than ``LOG_STALL_S``.
        Only a pass marks it, and only the holder of the lease makes passes (``_integrate``): a
        standby never does, so a Redis whose entries wait behind another deployment's lease
        shows the stall."""
        now = time.monotonic()
        if force or now - self._progress_at >= PROGRESS_EVERY_S:
            self._progress_at = now
            await self.store.log_mark_progress(self.identity, int(time.time() * 1000))

    # -- reading the store

    async def _load(self) -> None:
        """Read the tree state; check it against the published checkpoint; finish the batch
        it names, if any; remove batches a stopped integrator staged on smaller trees; sync
        Redis with the tree; publish the tree if its checkpoint is not out yet."""
        tree = await self.log.tree()
        if tree is None:
            raise await refuse(self.log, f"the log store {self.log.url} lost its tree state (.state/tree)")
        self.tree, self._edge, self._anchor = tree, None, None
        self.halted = await self.log.halted()
        metrics.LOG_HALTED.set(1 if self.halted else 0)
        if self.halted is not None:
            self._log_halt(self.halted)
            return
        self._publish_due = await self._check_anchor(tree, "load")
        await refuse_evidence_beyond(self.log, tree, self._check_current)
        if tree.staged is not None:
            try:
                batch = await self.log.staged_batch(tree)
            except LogStoreConflict as exc:
                await self._check_current(tree, "load")
                raise await refuse(self.log, str(exc)) from exc
            edge = await self._edge_of(tree)
            extension = tlog.extend(tree.size, edge.tiles, [tlog.leaf_hash(entry) for entry in batch.entries])
            log.warning(
                "finishing the batch a stopped integrator staged (sizes %d to %d)", batch.size, tree.staged.new_size
            )
            await self._finish(tree, batch, extension, edge)
        tree = self.tree
        assert tree is not None
        await self.log.clear_staging(below=tree.size)
        known = await self.store.log_tell_size(self.identity, tree.size)
        if known > tree.size:
            await self._refuse_behind_redis(tree, known, "load")
        if self._publish_due:
            await self._publish(tree)

    async def _check_current(self, tree: TreeState, step: str) -> None:
        """``Overtaken`` unless the store's tree state is still ``tree`` (its version)."""
        fresh = await self.log.tree()
        if fresh is None or fresh.version != tree.version:
            raise Overtaken(step)

    async def _check_anchor(self, tree: TreeState, step: str) -> bool:
        """The published checkpoint is the anchor (docs/log.md, "Fencing"): the tree state must be at
        least as large, and the checkpoint a prefix of it (the same root at the same size,
        else a root the tiles under the tree give for its size). A checkpoint ahead of the
        tree state, or another history, means ``.state/`` went back (an older copy put back):
        refused like a lost store, unless the tree state moved meanwhile (``Overtaken``). A
        checkpoint that cannot be read is published again from the tree, once the tiles
        prove it. Returns whether the checkpoint is behind the tree (it is due)."""
        raw = await self.log.checkpoint()
        try:
            if raw is None:
                raise note.NoteError("there is none")
            checkpoint, _ = note.open_checkpoint(raw, self.verifier)
        except note.NoteError as exc:
            log.warning("the published checkpoint of %s cannot be read (%s)", self.log.url, exc)
            signed = note.sign_note(note.Checkpoint(self.origin, tree.size, tree.root).text(), self.config.signer)
            if await self._repair_checkpoint(tree, signed.encode()):
                metrics.LOG_CHECKPOINTS.inc()
            return False
        if (checkpoint.size, checkpoint.root) == (tree.size, tree.root):
            return False
        if self._anchor == (checkpoint.size, checkpoint.root, tree.size, tree.root):
            return True
        consistent = checkpoint.size < tree.size
        if consistent and checkpoint.size:
            try:
                root = await self.reader.compute(tree.size, lambda view: view.mth(0, checkpoint.size))
            except TileMissing:
                root = b""
            consistent = root == checkpoint.root
        if not consistent:
            await self._check_current(tree, step)
            raise await refuse(
                self.log,
                f"the published checkpoint (size {checkpoint.size}) is "
                + ("ahead of" if checkpoint.size > tree.size else "not a prefix of")
                + f" the tree state in .state/tree (size {tree.size}): .state/ was put back from an older copy, or "
                "the store holds another history. Nothing is signed until the store is the log's again",
            )
        self._anchor = (checkpoint.size, checkpoint.root, tree.size, tree.root)
        return True

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
            await self._check_current(tree, "edge")
            raise await refuse(self.log, f"{exc}: the tree of size {tree.size} cannot be extended") from exc
        if tlog.root_from_edge(tree.size, tiles) != tree.root:
            await self._check_current(tree, "edge")
            raise await refuse(
                self.log, f"the store's edge tiles do not hash to its tree of size {tree.size}: its data was lost"
            )
        if [tlog.leaf_hash(entry) for entry in bundle] != tiles.get(0, [])[:count]:
            await self._check_current(tree, "edge")
            raise await refuse(self.log, f"the store's last entry bundle does not hash to its tree of size {tree.size}")
        self._edge = _Edge(tree.size, tiles, bundle)
        return self._edge

    # -- halting

    async def _on_evidence(self, evidence: Evidence) -> None:
        """A witness's answer that shows a fork halts the log, but for a 409 naming a size the
        store's tree has reached: then this integrator was behind (it paused), not the log."""
        if self.witnesses is not None:
            self.witnesses.evidence = None
        size = evidence.get("size")
        if evidence.get("status") == 409 and isinstance(size, int):
            fresh = await self.log.tree()
            if fresh is not None and fresh.size >= size:
                raise Overtaken("witness")
        await self._halt(evidence)

    async def _halt(self, evidence: Evidence) -> None:
        reason = (
            "someone has signed a history of this log that is not ours: witness "
            f"{evidence['witness']} answered {evidence['status']}: {evidence['detail']}"
        )
        record: JSONObject = {
            "witness": evidence["witness"],
            "status": evidence["status"],
            "detail": evidence["detail"],
        }
        if "size" in evidence:
            record["size"] = evidence["size"]
        await self.log.halt(reason, record)
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
            "LOG HALTED: %s. The integrator signs nothing until an operator has looked and runs: python service.py "
            "log resume --reason TEXT",
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
