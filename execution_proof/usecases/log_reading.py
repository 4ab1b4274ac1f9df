"""The transparency log's read side: what the log's routes and a create need of the log
(docs/log.md), read from the log store (kv/logstore), where the integrator writes it; Redis
only says where a receipt is in the log.

The checkpoint is re-read at most every ``CHECKPOINT_TTL_S`` (and at most every
``MIN_READ_S`` while a create waits for it); full tiles and bundles never change, so they are
cached. Every proof is checked against the published checkpoint before it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from execution_proof.kv.logstore import LogStore, LogStoreError
from execution_proof.kv.logstore.log import Identity, TreeUnreadable
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.receipts.errors import NotInLog, StoreUnavailable
from execution_proof.receipts.shapes import JSONObject, ReceiptObject
from execution_proof.transparency import note, tlog
from execution_proof.transparency.policy import COSIGNATURE_SKEW_S, Policy, cosigned_enough
from execution_proof.transparency.tiles import TileMissing, TileReader

log = logging.getLogger("eps.log")
WAIT_POLL_S = 0.05
CHECKPOINT_TTL_S = 1.0
MIN_READ_S = 0.02
STATE_TTL_S = 2.0
FULL_CACHE_BYTES = 16 << 20
STAMPS_SCANNED = 16


@dataclass
class Published:
    checkpoint: note.Checkpoint
    text: str


@dataclass(frozen=True)
class LeafProof:
    """An entry's inclusion under a signed checkpoint of this log: the entry's ``index``, its
    inclusion ``path``, the checkpoint and its signed note ``text`` (with cosignatures)."""

    index: int
    path: list[bytes]
    checkpoint: note.Checkpoint
    text: str


@dataclass
class LogService:
    """What the routes and the create handler need of the log."""

    queue: LogQueueStore
    """What the log has in flight in Redis (entries waiting, each receipt's index)."""
    log: LogStore
    identity: Identity
    verifier: note.Verifier
    policy: Policy | None = None
    public_url: str | None = None
    """``LOG_PUBLIC_URL``: where outsiders read the tiles (None: ``/v1/log/`` where asked)."""
    cosignature_skew_s: int = COSIGNATURE_SKEW_S
    stall_s: float = 30.0
    """``LOG_STALL_S``: how long entries may wait with nothing published before ``stalled``."""
    reader: TileReader = field(init=False)
    unreadable: bool = field(default=False, init=False)
    """The store's ``checkpoint`` could not be read when last looked at."""
    _published: Published | None = field(default=None, init=False)
    _read_at: float = field(default=-1e9, init=False)
    _reading: asyncio.Lock | None = field(default=None, init=False)
    _state: tuple[float, str] = field(default=(-1e9, "ok"), init=False)
    _full: OrderedDict[str, bytes] = field(default_factory=OrderedDict, init=False)
    _full_bytes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.reader = TileReader(self.fetch)

    @property
    def origin(self) -> str:
        return self.identity.origin

    async def fetch(self, name: str) -> bytes | None:
        """A resource of the store, full tiles and bundles from the cache."""
        cached = self._full.get(name)
        if cached is not None:
            self._full.move_to_end(name)
            return cached
        try:
            data = await self.log.fetch(name)
        except LogStoreError as exc:
            raise StoreUnavailable("the log store is unreachable; try again shortly") from exc
        if data is not None and name.startswith("tile/") and ".p/" not in name:
            self._full[name] = data
            self._full_bytes += len(data)
            while self._full_bytes > FULL_CACHE_BYTES:
                self._full_bytes -= len(self._full.popitem(last=False)[1])
        return data

    async def published(self, covering: int = -1) -> Published | None:
        """The published checkpoint (read again after ``CHECKPOINT_TTL_S``, or sooner when
        the one at hand does not cover entry ``covering``); None before the first. One that
        cannot be read (``unreadable``) leaves the last good one in place: the integrator
        publishes it again from the tree state."""
        now = time.monotonic()
        held = self._published
        fresh = now - self._read_at < CHECKPOINT_TTL_S and (held is not None and held.checkpoint.size > covering)
        if fresh or now - self._read_at < MIN_READ_S:
            return held
        self._reading = self._reading or asyncio.Lock()
        async with self._reading:
            if self._read_at > now:  # another request read it while this one waited
                return self._published
            raw = await self.fetch("checkpoint")
            self._read_at = time.monotonic()
            if raw is None:
                return self._published
            try:
                text = raw.decode()
                checkpoint, _ = note.open_checkpoint(text, self.verifier)
            except (UnicodeDecodeError, note.NoteError) as exc:
                if not self.unreadable:
                    log.error(
                        "the published checkpoint in %s cannot be read (%s): serving the last good one",
                        self.log.url,
                        exc,
                    )
                self.unreadable = True
                return self._published
            self.unreadable = False
            if held is None or checkpoint.size >= held.checkpoint.size:
                self._published = Published(checkpoint, text)
        return self._published

    async def halted(self) -> bool:
        """Whether the log is halted (read from the store at most every ``STATE_TTL_S``)."""
        return await self.state() == "halted"

    async def state(self) -> str:
        """``halted`` while ``.state/halt`` is there, whatever its bytes (a witness showed a
        fork, or a store was refused); ``stalled`` when the oldest entry waiting in this Redis
        is older than ``stall_s``, or the tree state is ahead of the published checkpoint, and
        no integrator marked progress for ``stall_s``, or at once when ``.state/tree`` cannot
        be read; else ``ok``. Judged from Redis and the store at most every ``STATE_TTL_S``, so
        every web process sees what workers do. An unreachable store or Redis keeps what was
        last known (``/health``'s ``store`` says whether Redis answers)."""
        read_at, state = self._state
        if time.monotonic() - read_at < STATE_TTL_S:
            return state
        with contextlib.suppress(LogStoreError, StoreUnavailable):
            state = await self._judge()
        self._state = (time.monotonic(), state)
        return state

    async def _judge(self) -> str:
        if await self.log.halted() is not None:
            return "halted"
        oldest_ms, progress_ms = await asyncio.gather(
            self.queue.log_oldest_waiting_ms(self.identity), self.queue.log_progress(self.identity)
        )
        try:
            tree = await self.log.tree()
        except TreeUnreadable:
            return "stalled"  # nothing can be integrated until it is put right
        published = await self.published()
        behind = tree is not None and (self.unreadable or published is None or tree.size > published.checkpoint.size)
        if oldest_ms is None and not behind:
            return "ok"
        # Nothing published for stall_s: by the integrators' mark in Redis. Without one (no
        # integrator ever ran on this Redis, or it forgot), the first web process to see entries
        # wait sets it: every web process then counts from the same moment, not each from when
        # it was first asked (one asked late said ok long after the others said stalled).
        now_ms = int(time.time() * 1000)
        if progress_ms is None:
            progress_ms = await self.queue.log_progress_or_start(self.identity, now_ms)
        quiet = now_ms - progress_ms >= self.stall_s * 1000
        waited = behind or (oldest_ms is not None and now_ms - oldest_ms >= self.stall_s * 1000)
        return "stalled" if quiet and waited else "ok"

    async def index_of(self, receipt: ReceiptObject) -> int | None:
        """The receipt's index in this log, None while pending; ``NotInLog``."""
        return await self.queue.log_index(
            self.identity, receipt["project_id"], receipt["receipt_id"], receipt["receipt_hash"]
        )

    async def proof(self, receipt: ReceiptObject) -> tuple[int, str] | None:
        """(index, tlog-proof text) against the published checkpoint; None while pending."""
        index = await self.index_of(receipt)
        if index is None:
            return None
        published = await self.published(covering=index)
        if published is None or published.checkpoint.size <= index:
            return None
        return index, await self._proof_text(receipt, index, published.checkpoint, published.text)

    async def _proof_text(self, receipt: ReceiptObject, index: int, checkpoint: note.Checkpoint, text: str) -> str:
        """The tlog-proof of the receipt at ``index`` under ``checkpoint`` (``_checked_path``)."""
        path = await self._checked_path(index, checkpoint, tlog.entry_bytes(receipt), "the receipt")
        return note.TlogProof(index, tuple(path), text).encode()

    async def _checked_path(self, index: int, checkpoint: note.Checkpoint, entry: bytes, what: str) -> list[bytes]:
        """The inclusion path of ``entry`` at ``index`` under ``checkpoint``, checked before it is
        given: the stored hash at ``index`` and its path must lead to the checkpoint's root (else
        the store does not hold the tree its checkpoint signs: 503, and said at ERROR), and that
        hash must be ``entry``'s (else ``NotInLog``: its index names another entry).
        The path first: a damaged level-0 tile is the store's fault, not evidence that the
        receipt is not in the log."""

        def leaf_and_path(view: tlog.TileHashes) -> tuple[bytes, list[bytes]]:
            return view.stored(0, index), view.inclusion_proof(index)

        try:
            leaf, path = await self.reader.compute(checkpoint.size, leaf_and_path)
        except TileMissing as exc:
            raise StoreUnavailable("the log store is missing a tile of the published tree") from exc
        try:
            tlog.verify_inclusion(leaf, index, checkpoint.size, path, checkpoint.root)
        except tlog.ProofError as exc:
            log.error(
                "the log store's tiles do not lead entry %d to the root of checkpoint %d: %s",
                index,
                checkpoint.size,
                exc,
            )
            raise StoreUnavailable(
                "the log store does not hold the tree its checkpoint signs; try again later"
            ) from exc
        if leaf != tlog.leaf_hash(entry):
            raise NotInLog(f"the log's entry {index} is not {what}'s: the receipt is not in this log")
        return path

    async def bundle_log(self, receipt: ReceiptObject) -> tuple[str | None, bytes]:
        """(tlog-proof text or None while pending, the JSON list of its checkpoint's
        time-stamps) for a bundle, against the checkpoint ``_chosen`` picks. ``NotInLog`` when
        the receipt is not in this log."""
        index = await self.index_of(receipt)
        chosen = await self._chosen(index) if index is not None else None
        if index is None or chosen is None:
            return None, b"[]"
        checkpoint, text, stamps = chosen
        return await self._proof_text(receipt, index, checkpoint, text), orjson.dumps(stamps)

    async def attestation_proof(self, receipt: ReceiptObject, leaf: bytes) -> LeafProof | None:
        """The inclusion of the receipt's attestation leaf (``leaf``, at its index + 1) under
        the checkpoint a bundle would carry (``_chosen``); None while pending. ``NotInLog``
        when the receipt is not in this log, or the entry after it is not ``leaf``."""
        index = await self.index_of(receipt)
        chosen = await self._chosen(index + 1) if index is not None else None
        if index is None or chosen is None:
            return None
        checkpoint, text, _ = chosen
        path = await self._checked_path(index + 1, checkpoint, leaf, "the receipt's attestation")
        return LeafProof(index + 1, path, checkpoint, text)

    async def _chosen(self, index: int) -> tuple[note.Checkpoint, str, list[Any]] | None:
        """The checkpoint a proof of entry ``index`` is given under (its signed text and its
        time-stamps): the earliest time-stamped one covering the entry that meets the witness
        quorum (so the time-stamps bound the receipt's time as tightly as the log can, under
        a checkpoint a verifier with the policy accepts); failing that, the newest covering
        one that meets it; failing that, the newest covering one; None when none covers it.
        Only the log's own checkpoints are read: the latest and the time-stamped ones (the
        first ``STAMPS_SCANNED`` covering it)."""
        try:
            records = await self.log.stamps_covering(index, STAMPS_SCANNED)
        except LogStoreError as exc:
            raise StoreUnavailable("the log store is unreachable; try again shortly") from exc
        latest = await self.published(covering=index)
        # (size, signed checkpoint, time-stamps) of each candidate, oldest first; a stamped
        # checkpoint published again with later cosignatures is read as published.
        candidates: list[tuple[int, str, list[Any]]] = []
        for size, raw in records:
            record = orjson.loads(raw)
            text = latest.text if latest is not None and latest.checkpoint.size == size else record["checkpoint"]
            candidates.append((size, text, record["timestamps"]))
        if (
            latest is not None
            and latest.checkpoint.size > index
            and not any(size == latest.checkpoint.size for size, _, _ in candidates)
        ):
            candidates.append((latest.checkpoint.size, latest.text, []))
        if not candidates:
            return None
        chosen = next((c for c in candidates if c[2] and self.meets_quorum(c[1])), None)
        chosen = chosen or next((c for c in reversed(candidates) if self.meets_quorum(c[1])), None)
        _, text, stamps = chosen or candidates[-1]
        return note.parse_checkpoint(note.parse_note(text).text), text, stamps

    def meets_quorum(self, signed: str) -> bool:
        """Whether a checkpoint of this log carries the cosignatures its policy asks for (no
        policy: any does)."""
        if self.policy is None:
            return True
        return cosigned_enough(signed, self.policy, int(time.time()), self.cosignature_skew_s)

    async def wait_for_proof(self, receipt: ReceiptObject, seconds: float) -> tuple[int, str] | None:
        deadline = time.monotonic() + seconds
        while True:
            found = await self.proof(receipt)
            if found is not None or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(WAIT_POLL_S)

    def proof_url(self, receipt_id: str) -> str:
        return f"/v1/receipts/{receipt_id}/log-proof"

    def pending_member(self, receipt: ReceiptObject) -> JSONObject:
        """The create response's ``log`` member while no published checkpoint covers the receipt."""
        return {"status": "pending", "proof_url": self.proof_url(receipt["receipt_id"])}

    async def create_member(self, receipt: ReceiptObject, wait_s: float) -> JSONObject:
        """The create response's ``log`` member after a wait (``Prefer: wait``): the receipt's
        index and tlog-proof if they come within ``wait_s`` seconds, else the pending form. A
        replay of a receipt that is not in this log (issued for another) gets the pending form
        all the same, its ``proof_url`` answering 404 ``not_in_log``: a create's answer never
        depends on it. Nor on Redis or the log store failing during the wait: the receipt is
        issued, so its 201 carries the pending form (a 503 would invite a retry that issues a
        second receipt)."""
        with contextlib.suppress(NotInLog, StoreUnavailable, LogStoreError):
            found = await self.wait_for_proof(receipt, wait_s)
            if found is not None:
                return {"index": found[0], "proof": found[1]}
        return self.pending_member(receipt)
