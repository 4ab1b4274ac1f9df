"""The integrator: moves queued log entries into the Merkle tree and publishes checkpoints
(docs/log.md).

One is active at a time, behind a lock in Redis that it renews on every pass; any number
wait as standbys (every ``python service.py worker`` runs one; in embedded mode the server
does). A pass, at most every ``interval_s`` or as soon as ``trigger`` entries wait:

1. read the tree state; finish a batch a crashed or deposed integrator left half done;
2. take up to ``max_batch`` queued entries, project by project in each queue's order;
3. read the right edge of the tree and check that it hashes to the state's root (if not,
   the store lost data: stop, loudly, rather than sign a fork);
4. reserve the batch (compare-and-set on size and root; the journal names each project's
   entries), write tiles and bundles at fixed offsets, sign and publish the checkpoint,
   acknowledge each project's queue (recording each receipt's index), finish.

Every step after the reserve is idempotent and computed only from the journal and the
queues, so whoever finishes a batch writes the same bytes and signs the same checkpoint.
Besides the store's own check, the integrator remembers the newest tree it saw and refuses
to go on if the store's tree is not an extension of it (a store restored from an older
copy). A halted integrator keeps its lock (no standby signs instead) until restarted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson

from jobs.log_timestamps import Stamper, TsaConfig
from jobs.log_witnesses import WitnessClient
from kv.log_reader import LogDataMissing, LogReader
from receipts import note, tlog
from receipts.errors import StoreUnavailable
from receipts.policy import Policy
from runtime import metrics
from runtime.settings import Settings

log = logging.getLogger("eps.log")

INTERVAL_S = 1.0
TRIGGER = 256
MAX_BATCH = 4096
LOCK_MS = 10_000
POLL_S = 0.05
DIRTY_SAMPLE = 1024
RECHECK_AFTER_MS = 30_000


class LogHalted(RuntimeError):
    """The integrator stopped publishing: the store's log is not what it signed before."""


@dataclass(frozen=True)
class LogConfig:
    origin: str
    signer: note.Signer
    interval_s: float = INTERVAL_S
    trigger: int = TRIGGER
    max_batch: int = MAX_BATCH
    lock_ms: int = LOCK_MS
    policy: Policy | None = None
    """``LOG_WITNESS_POLICY``: the witnesses each checkpoint is sent to (jobs/log_witnesses.py)."""
    witness_timeout_ms: int = 1000
    tsa: TsaConfig | None = None
    """``LOG_TSA_URLS`` and friends: RFC 3161 time-stamps over checkpoints (jobs/log_timestamps.py)."""


def log_config(settings: Settings) -> LogConfig:
    """The integrator's configuration from the service's settings (``LOG_*``)."""
    assert settings.log_signer is not None
    tsa = None
    if settings.log_tsa_urls:
        tsa = TsaConfig(
            settings.log_tsa_urls,
            settings.log_tsa_interval_s,
            settings.log_tsa_roots,
            keep_s=int((settings.retention_days + 1) * 86400),
        )
    return LogConfig(
        settings.log_origin,
        settings.log_signer,
        policy=settings.log_policy,
        witness_timeout_ms=settings.log_witness_timeout_ms,
        tsa=tsa,
    )


@dataclass
class _Batch:
    size: int
    root: bytes
    new_size: int
    new_root: bytes
    projects: list[tuple[str, list[bytes]]]
    counts: list[int] | None = None
    """Entries each project holds in the tree (the journal's; an acknowledged project's
    entries are no longer read back, but its count still places the ones after it)."""

    def journal(self) -> bytes:
        return orjson.dumps(
            {
                "from": self.size,
                "from_root": base64.b64encode(self.root).decode(),
                "projects": [[pid, len(entries), _receipt_id(entries[-1])] for pid, entries in self.projects],
            }
        )


class Integrator:
    def __init__(self, store: Any, config: LogConfig) -> None:
        self.store = store
        self.config = config
        self.reader = LogReader(store, config.origin)
        self.witnesses = (
            WitnessClient(store, config.origin, config.policy, config.witness_timeout_ms, self.reader)
            if config.policy is not None
            else None
        )
        self.token = secrets.token_hex(16)
        self.holding = False
        self.halted: str | None = None
        self.seen: tuple[int, bytes] = (0, tlog.EMPTY_ROOT)
        """The newest (size, root) this integrator saw published: the store must extend it."""
        self._last_batch = time.monotonic()

    # -- the loop

    async def run(self, stop: asyncio.Event) -> None:
        """Pass after pass until ``stop`` is set; errors are logged and retried. With
        ``LOG_TSA_URLS`` the time-stamping loop runs beside it."""
        if self.config.tsa is None:
            await self._integrate(stop)
            return
        stamper = Stamper(self.store, self.config.origin, self.config.tsa)
        await asyncio.gather(self._integrate(stop), stamper.run(stop))

    async def _integrate(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                integrated = 0
                try:
                    if await self.lock():
                        integrated = await self.step()
                except LogHalted as exc:
                    self._halt(str(exc))
                except Exception:  # a long-running loop: say it, retry next pass
                    log.exception("log integrator pass failed; retrying")
                if integrated < self.config.max_batch:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_S)
        finally:
            if self.holding and not self.halted:
                with contextlib.suppress(StoreUnavailable):  # the lock expires by itself
                    await self.store.log_lock(self.config.origin, self.token, "drop", 0)

    async def lock(self) -> bool:
        action = "keep" if self.holding else "take"
        self.holding = await self.store.log_lock(self.config.origin, self.token, action, self.config.lock_ms)
        return self.holding

    def _halt(self, reason: str) -> None:
        if self.halted is None:
            metrics.LOG_HALTS.inc()
        self.halted = reason
        log.critical("LOG HALTED: the integrator will not sign another checkpoint: %s", reason)

    # -- one pass

    async def step(self, force: bool = False) -> int:
        """One pass; the number of entries it integrated. ``force``: do not wait for the
        interval or the trigger (tests, and ``--once`` tools)."""
        if self.halted:
            raise LogHalted(self.halted)
        origin = self.config.origin
        state = await self.store.log_state(origin)
        size, root = int(state.get("size", b"0")), state.get("root") or tlog.EMPTY_ROOT
        phase = (state.get("phase") or b"").decode()
        if phase:
            batch = await self._journal_batch(state, size, root)
            # Before its tiles are written only the batch's start is published (and readable).
            await self._check_extends_seen(*((batch.size, batch.root) if phase == "tiles" else (size, root)))
            if phase == "tiles":
                await self._write_and_publish(batch)
            await self._acknowledge(batch)
            await self.store.log_finish(origin, batch.new_size)
            self.seen = (batch.new_size, batch.new_root)
            return batch.new_size - batch.size
        await self._check_extends_seen(size, root)
        projects = await self.store.log_dirty_projects(DIRTY_SAMPLE)
        # Lengths first (cheap): a pass that only waits for the interval or the trigger reads
        # no entries; they are read once, when the batch is made.
        lengths = await self.store.log_queue_lengths(projects) if projects else {}
        now_ms = int(time.time() * 1000)
        for pid in projects:
            if not lengths[pid]:
                await self.store.log_tidy_dirty(pid, now_ms)
        await self.store.log_recheck(now_ms - RECHECK_AFTER_MS)
        waiting = sum(lengths.values())
        if not waiting:
            return 0
        waited = time.monotonic() - self._last_batch
        if not force and waiting < self.config.trigger and waited < self.config.interval_s:
            return 0
        queued = await self.store.log_queued([pid for pid in projects if lengths[pid]], self.config.max_batch)
        taken: list[tuple[str, list[bytes]]] = []
        total = 0
        for pid, project_entries in queued.items():
            entries = project_entries[: self.config.max_batch - total]
            if entries:
                taken.append((pid, entries))
                total += len(entries)
        if not total:
            return 0
        try:
            edge = await self.reader.edge(size)
        except LogDataMissing as exc:
            raise LogHalted(f"{exc}: the tree of size {size} cannot be extended") from exc
        if tlog.root_from_edge(size, edge) != root:
            raise LogHalted(f"the store's edge tiles do not hash to its tree of size {size}: its data was lost")
        leaves = [tlog.leaf_hash(entry) for _, entries in taken for entry in entries]
        extension = tlog.extend(size, edge, leaves)
        batch = _Batch(size, root, extension.size, extension.root, taken)
        if not await self.store.log_reserve(origin, size, root, batch.new_size, batch.new_root, batch.journal()):
            return 0  # another integrator moved the tree: read it again next pass
        started = time.monotonic()
        await self._write_and_publish(batch, extension)
        await self._acknowledge(batch)
        await self.store.log_finish(origin, batch.new_size)
        self.seen = (batch.new_size, batch.new_root)
        self._last_batch = time.monotonic()
        metrics.LOG_ENTRIES.inc(total)
        metrics.LOG_BATCH_SECONDS.observe(time.monotonic() - started)
        emptied = await self.store.log_queue_lengths([pid for pid, _ in taken])
        for pid, length in emptied.items():
            if not length:
                await self.store.log_tidy_dirty(pid, now_ms)
        return total

    # -- the phases

    async def _journal_batch(self, state: dict[str, bytes], size: int, root: bytes) -> _Batch:
        """The batch a journal describes, its entries read back from the queues."""
        journal = orjson.loads(state.get("batch") or b"{}")
        projects: list[tuple[str, list[bytes]]] = []
        counts = [int(p[1]) for p in journal["projects"]]
        queued = await self.store.log_queued([p[0] for p in journal["projects"]], self.config.max_batch)
        for pid, count, last_id in journal["projects"]:
            entries = queued[pid][:count]
            if len(entries) == count and _receipt_id(entries[-1]) == last_id:
                projects.append((pid, entries))
            elif (state.get("phase") or b"") == b"tiles":
                raise LogHalted(f"the entries of project {pid} that the batch to size {size} names are gone")
            else:
                projects.append((pid, []))  # already acknowledged
        return _Batch(int(journal["from"]), base64.b64decode(journal["from_root"]), size, root, projects, counts)

    async def _write_and_publish(self, batch: _Batch, extension: tlog.Extension | None = None) -> None:
        if extension is None:
            try:
                edge = await self.reader.edge(batch.size)
            except LogDataMissing as exc:
                raise LogHalted(str(exc)) from exc
            leaves = [tlog.leaf_hash(entry) for _, entries in batch.projects for entry in entries]
            extension = tlog.extend(batch.size, edge, leaves)
            if extension.root != batch.new_root or extension.size != batch.new_size:
                raise LogHalted(f"the batch to size {batch.new_size} no longer hashes to the root it reserved")
        entries = [entry for _, batch_entries in batch.projects for entry in batch_entries]
        bundles: dict[int, tuple[int, bytes]] = {}
        offset = await self.reader.bundle_prefix_length(batch.size)
        for position, entry in enumerate(entries, start=batch.size):
            index = position // tlog.TILE_WIDTH
            if index not in bundles:
                bundles[index] = (offset if position == batch.size else 0, b"")
            start, data = bundles[index]
            bundles[index] = (start, data + tlog.bundle_entry(entry))
        await self.store.log_write(self.config.origin, extension.tiles, bundles)
        checkpoint = note.Checkpoint(self.config.origin, batch.new_size, batch.new_root)
        signed = note.sign_note(checkpoint.text(), self.config.signer)
        if self.witnesses is not None:
            signed = await self.witnesses.cosign(signed, checkpoint)
        await self.store.log_publish(self.config.origin, batch.new_size, signed.encode())
        metrics.LOG_CHECKPOINTS.inc()

    async def _acknowledge(self, batch: _Batch) -> None:
        index = batch.size
        counts = batch.counts or [len(entries) for _, entries in batch.projects]
        for (pid, entries), count in zip(batch.projects, counts, strict=True):
            if entries:
                ids = [_receipt_id(entry) for entry in entries]
                await self.store.log_ack(pid, entries, ids, index)
            index += count

    async def _check_extends_seen(self, size: int, root: bytes) -> None:
        seen_size, seen_root = self.seen
        if size < seen_size:
            raise LogHalted(f"the store's tree has {size} entries, fewer than the {seen_size} published before")
        if size == seen_size:
            if root != seen_root:
                raise LogHalted(f"the store's tree of size {size} has another root than the one published before")
            return
        if seen_size:
            try:
                old = await self.reader.compute(size, lambda view: view.mth(0, seen_size))
            except LogDataMissing as exc:
                raise LogHalted(str(exc)) from exc
            if old != seen_root:
                raise LogHalted(f"the store's tree does not extend the tree of size {seen_size} published before")
        self.seen = (size, root)


def _receipt_id(entry: bytes) -> str:
    return entry.split(b"\n", 2)[1].decode()


class IntegratorThread:
    """The integrator beside RQ's (blocking) worker: its own thread, event loop and store."""

    def __init__(self, open_store: Any, config: LogConfig) -> None:
        self._open_store = open_store
        self.config = config
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
        store = self._open_store()
        self._ready.set()
        try:
            await Integrator(store, self.config).run(self._stop)
        finally:
            await store.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
