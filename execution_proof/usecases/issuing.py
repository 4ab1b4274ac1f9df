"""Issuing receipts: chain placement, signing and the atomic compare-and-set, with retries.

Group commit. Within one process, a project's creates queue up, and one task per busy
project commits them in groups of up to ``MAX_GROUP``: it chains the group in memory on the
project's cached tip (each main receipt's ``prev_receipt_hash`` is the one before it), signs
every receipt and writes the whole group with one script call (kv/lua/issue_receipt.lua),
which checks limits, idempotency and the tip for each receipt in order and stops at the
first that is not issued. What was decided is answered; the creates after that one were
built on it, so they are built again on the tip the store reported and go first in the
next group. While a group is in the store, the next one gathers: a hot project costs one
round trip per group, not per receipt, and no create ever fails for contention inside one
process. Between processes the script stays the single source of truth (a stale cached
tip costs one retry; ``MAX_ATTEMPTS`` bounds them per create).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from execution_proof.kv.records import Counter, IssueItem, IssueOutcome, IssueResult, KeyRecord
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts import compact
from execution_proof.receipts.attestation import Attestation, attest
from execution_proof.receipts.errors import (
    ChainContention,
    IdempotencyConflict,
    LogBacklog,
    NotFound,
    SigningKeyUnavailable,
    StoreUnavailable,
)
from execution_proof.receipts.ids import new_receipt_id
from execution_proof.receipts.limits import (
    PlanLimits,
    Usage,
    Window,
    minute_window,
    month_window,
    quota_headers,
    ratelimit_headers,
)
from execution_proof.receipts.model import (
    CreateRequest,
    build_receipt,
    format_created_at,
    idempotency_fingerprint,
    place_in_chain,
    replay_key,
)
from execution_proof.receipts.shapes import ReceiptObject
from execution_proof.receipts.signing import KeyRing
from execution_proof.runtime.metrics import count_receipt
from execution_proof.transparency import tlog
from execution_proof.usecases.limiting import MINUTE_S, key_rate_limited, minute_counter, quota_exceeded
from execution_proof.usecases.signing_keys import ReceiptKeys

MAX_ATTEMPTS = 32
TIP_CACHE_SIZE = 10_000
MAX_GROUP = 64
"""Receipts per group commit: bounds the script's run time in Redis (about 5 us each)."""


def group_size(attempts: int) -> int:
    """How many creates the next group takes when its first one has lost ``attempts`` races.

    Another process writing the same project moves the tip while a group is built and signed
    (about 70 us a receipt: 4-5 ms for a full group), so a full group can lose again and
    again while the other process's groups land. A first create that lost takes a group of
    16, then 4, then 1: its window between reading the tip and writing shrinks to one
    receipt's, and it gets in. A create that never lost keeps the full group."""
    return MAX_GROUP >> min(2 * attempts, 6)


@dataclass(frozen=True)
class Issued:
    """A receipt from a create: new (``replayed`` False) or the earlier one for a replay."""

    receipt_json: bytes
    receipt: ReceiptObject
    replay_key: str
    replayed: bool
    minute: Usage
    month: Usage


@dataclass
class _Pending:
    """One create waiting in its project's queue for the next group commit."""

    req: CreateRequest
    key: KeyRecord
    plan: PlanLimits
    fingerprint: str
    replay_key: str
    future: asyncio.Future[Issued]
    attempts: int = 0
    stale: str = ""


@dataclass
class _Built:
    pending: _Pending
    receipt: ReceiptObject
    receipt_json: bytes
    advances_tip: bool


class ReceiptIssuer:
    """Issues receipts with group commit (see the module's description)."""

    def __init__(
        self,
        store: ReceiptStore,
        keys: ReceiptKeys,
        clock_ms: Callable[[], int] | None = None,
        *,
        log_origin: str | None = None,
    ) -> None:
        self.store = store
        self.keys = keys
        self.log_origin = log_origin
        """The origin of the log each new receipt enters (``LOG_SIGNING_KEY`` set), named in
        its attestation; its entry and the attestation's leaf are queued with it. None: no log."""
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._tips: OrderedDict[str, str | None] = OrderedDict()
        self._queues: dict[str, list[_Pending]] = {}
        self._committers: dict[str, asyncio.Task[None]] = {}
        self.batch_sizes: Tally[int] = Tally()
        """How many receipts each group commit held (for tests and the benchmark's notes)."""

    def _remember_tip(self, project_id: str, tip: str | None) -> None:
        self._tips[project_id] = tip
        self._tips.move_to_end(project_id)
        while len(self._tips) > TIP_CACHE_SIZE:
            self._tips.popitem(last=False)

    def pending_projects(self) -> int:
        """Projects with creates queued or being committed (0 when idle)."""
        return len(self._queues) + len(self._committers)

    async def issue(self, req: CreateRequest, key: KeyRecord, header_key: str | None, plan: PlanLimits) -> Issued:
        """Issue (or replay) a receipt for ``req`` on ``key``'s project.

        The key's minute limit and the project's monthly quota are checked and counted in
        the same atomic step as the write. Raises ``RateLimited``, ``QuotaExceeded``,
        ``NotFound`` (project gone), ``IdempotencyConflict`` (header reused with another
        body), ``ChainContention`` (tip kept moving), ``SigningKeyUnavailable`` and
        ``StoreUnavailable``.
        """
        self.keys.signing(self.clock_ms())
        project_id = key.project_id
        fingerprint = idempotency_fingerprint(project_id, req)
        rkey = replay_key(fingerprint, header_key)
        future: asyncio.Future[Issued] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(project_id, []).append(_Pending(req, key, plan, fingerprint, rkey, future))
        if project_id not in self._committers:
            self._committers[project_id] = asyncio.create_task(self._commit_queue(project_id))
        # The commit goes on if this request's caller goes away (as a write in flight would).
        return await asyncio.shield(future)

    async def _commit_queue(self, project_id: str) -> None:
        """Commit the project's queue in groups until it is empty; every future is resolved."""
        try:
            while queue := self._queues.get(project_id):
                size = group_size(queue[0].attempts)
                group, queue[:] = queue[:size], queue[size:]
                try:
                    retry = await self._commit_group(project_id, group)
                except BaseException as exc:
                    error = exc if isinstance(exc, Exception) else StoreUnavailable("the server is stopping")
                    for pending in group:
                        _fail(pending, error)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                if retry:
                    self._queues[project_id] = retry + self._queues.get(project_id, [])
        finally:
            self._committers.pop(project_id, None)
            if not self._queues.get(project_id):
                self._queues.pop(project_id, None)
            elif asyncio.get_running_loop().is_running():  # left by an exception: the rest still get a committer
                self._committers[project_id] = asyncio.create_task(self._commit_queue(project_id))

    async def _commit_group(self, project_id: str, group: list[_Pending]) -> list[_Pending]:
        """Build, chain and sign ``group`` on the known tip, write it with one script, resolve
        what was decided and return the creates to build again (in order)."""
        tip: str | None
        if project_id in self._tips:
            tip = self._tips[project_id]
        else:
            exists, tip = await self.store.read_tip(project_id)
            if not exists:
                for pending in group:
                    _fail(pending, NotFound("the project of this API key does not exist"))
                return []
        now = self.clock_ms()
        try:
            keyring = self.keys.signing(now)
        except SigningKeyUnavailable as exc:
            for pending in group:
                _fail(pending, exc)
            return []
        minute, month = minute_window(now), month_window(now)
        created_at = format_created_at(now)
        built: list[_Built] = []
        items: list[IssueItem] = []
        running_tip = tip
        for pending in group:
            placement = place_in_chain(pending.req.prev_receipt_hash, running_tip)
            receipt = build_receipt(
                pending.req,
                receipt_id=new_receipt_id(project_id, now),
                project_id=project_id,
                actor_id=pending.key.actor_id,
                created_at=created_at,
                placement=placement,
                keyring=keyring,
            )
            receipt_json = orjson.dumps(receipt)
            attested = attest(receipt, self.log_origin, keyring.active_signer)
            built.append(_Built(pending, receipt, receipt_json, placement.advances_tip))
            plan = pending.plan
            items.append(
                IssueItem(
                    receipt_id=receipt["receipt_id"],
                    receipt_hash=receipt["receipt_hash"],
                    receipt_json=receipt_json,
                    built_on_tip=running_tip,
                    on_main=placement.advances_tip,
                    replay_key=pending.replay_key,
                    fingerprint=pending.fingerprint,
                    key_hash=pending.key.key_hash,
                    minute=minute_counter(minute, plan.per_minute),
                    month=Counter(month.id, plan.monthly, month.retry_after_s + 40 * 86_400),
                    stale_receipt_id=pending.stale,
                    input_hash=receipt["input_hash"],
                    output_hash=receipt["output_hash"],
                    stored_value=compact.encode(
                        receipt, receipt_json, compact.Kept(attested.signature, self.log_origin)
                    ),
                    log_entry=self._log_item(receipt, attested, keyring),
                )
            )
            if placement.advances_tip:
                running_tip = receipt["receipt_hash"]
        self.batch_sizes[len(group)] += 1
        results = await self.store.issue_receipts(project_id, items)
        retry: list[_Pending] = []
        for done, result in zip(built, results, strict=False):
            pending = done.pending
            if result.outcome is IssueOutcome.ISSUED:
                tip = done.receipt["receipt_hash"] if done.advances_tip else tip
                self._remember_tip(project_id, tip)
            elif result.outcome is IssueOutcome.TIP_MOVED:
                self._remember_tip(project_id, result.tip)
            elif result.outcome is IssueOutcome.NO_PROJECT:
                self._tips.pop(project_id, None)
            again = await self._settle(done, result, minute, month)
            if again:
                retry.append(pending)
        # The receipts after the one that ended the call were built on it: build them again.
        retry += [done.pending for done in built[len(results) :]]
        for pending in retry:
            if pending.attempts >= MAX_ATTEMPTS:
                _fail(pending, ChainContention("the project's chain is too busy right now; retry the request"))
        return [pending for pending in retry if not pending.future.done()]

    def _log_item(self, receipt: ReceiptObject, attested: Attestation, keyring: KeyRing) -> bytes:
        """The receipt's queue item: its log entry, then its attestation's leaf (b"": no log)."""
        if self.log_origin is None or keyring.active_signer is None:
            return b""
        return tlog.entry_bytes(receipt) + attested.log_body(keyring.active_signer.verify_key.encode())

    async def _settle(self, done: _Built, result: IssueResult, minute: Window, month: Window) -> bool:
        """Resolve one create from its script result (``minute`` and ``month``: the group's
        windows); True when it must be built again."""
        pending, key, plan = done.pending, done.pending.key, done.pending.plan
        minute_usage = Usage("key", plan.per_minute, result.minute_used, minute, MINUTE_S)
        month_usage = Usage("month", plan.monthly, result.month_used, month, month.retry_after_s)
        outcome = result.outcome
        if outcome in (IssueOutcome.ISSUED, IssueOutcome.REPLAY) and result.unacknowledged is not None:
            _fail(pending, result.unacknowledged)
            return False
        if outcome is IssueOutcome.ISSUED:
            count_receipt(False, key.plan)
            issued = Issued(done.receipt_json, done.receipt, pending.replay_key, False, minute_usage, month_usage)
            _resolve(pending, issued)
            return False
        if outcome is IssueOutcome.TIP_MOVED:
            pending.attempts += 1
            return True
        if outcome is IssueOutcome.REPLAY:
            stored = await self.store.get_receipt_json(result.receipt_id or "")
            if stored is not None:
                count_receipt(True, key.plan)
                replayed = Issued(stored, orjson.loads(stored), pending.replay_key, True, minute_usage, month_usage)
                _resolve(pending, replayed)
                return False
            # The earlier receipt was deleted: its idempotency record is stale, and the same
            # request now gets a new receipt in its place.
            pending.stale = result.receipt_id or ""
            pending.attempts += 1
            return True
        if outcome is IssueOutcome.RATE_LIMITED:
            error = key_rate_limited(minute_usage, key.plan)
            error.response_headers.update(quota_headers(key.plan, month_usage))
            _fail(pending, error)
        elif outcome is IssueOutcome.QUOTA_EXCEEDED:
            extra = {**quota_headers(key.plan, month_usage), **ratelimit_headers([minute_usage])}
            _fail(pending, quota_exceeded(month_usage, key.plan, extra))
        elif outcome is IssueOutcome.IDEMPOTENCY_CONFLICT:
            _fail(pending, IdempotencyConflict("this Idempotency-Key was already used with a different request body"))
        elif outcome is IssueOutcome.LOG_BACKLOG:
            _fail(
                pending,
                LogBacklog(
                    "too many receipts wait for the transparency log (LOG_MAX_PENDING); nothing was recorded and no "
                    "quota was used: retry after the Retry-After seconds"
                ),
            )
        else:
            _fail(pending, NotFound("the project of this API key does not exist"))
        return False


def _resolve(pending: _Pending, issued: Issued) -> None:
    if not pending.future.done():
        pending.future.set_result(issued)


def _fail(pending: _Pending, error: BaseException) -> None:
    if not pending.future.done():
        pending.future.set_exception(error)
        pending.future.exception()  # seen: a caller that went away logs nothing
