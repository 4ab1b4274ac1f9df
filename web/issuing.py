"""Issuing a receipt: chain placement, signing and the atomic compare-and-set, with retries.

Within one process a project's creates are serialised by a lock and its tip is cached,
so contention retries only happen between processes; the store's script is the single
source of truth (a stale cached tip just costs one retry).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from kv.store import Counter, IssueOutcome, KeyRecord, Store
from receipts.errors import (
    ChainContention,
    IdempotencyConflict,
    NotFound,
    SigningKeyUnavailable,
)
from receipts.ids import new_receipt_id
from receipts.limits import PlanLimits, Usage, minute_window, month_window, quota_headers, ratelimit_headers
from receipts.model import (
    CreateRequest,
    build_receipt,
    format_created_at,
    idempotency_fingerprint,
    place_in_chain,
    replay_key,
)
from receipts.signing import KeyRing
from web.limiting import MINUTE_S, key_rate_limited, minute_counter, quota_exceeded
from web.metrics import count_receipt

MAX_ATTEMPTS = 32
TIP_CACHE_SIZE = 10_000


@dataclass(frozen=True)
class Issued:
    """A receipt from a create: new (``replayed`` False) or the earlier one for a replay."""

    receipt_json: bytes
    receipt: dict[str, Any]
    replay_key: str
    replayed: bool
    minute: Usage
    month: Usage


class ProjectLocks:
    """One asyncio lock per project, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, project_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(project_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[project_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[project_id]
            if users == 1:
                del self._locks[project_id]
            else:
                self._locks[project_id] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class ReceiptIssuer:
    def __init__(
        self,
        store: Store,
        keyring: KeyRing,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.keyring = keyring
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.locks = ProjectLocks()
        self._tips: OrderedDict[str, str | None] = OrderedDict()

    def _remember_tip(self, project_id: str, tip: str | None) -> None:
        self._tips[project_id] = tip
        self._tips.move_to_end(project_id)
        while len(self._tips) > TIP_CACHE_SIZE:
            self._tips.popitem(last=False)

    async def issue(self, req: CreateRequest, key: KeyRecord, header_key: str | None, plan: PlanLimits) -> Issued:
        """Issue (or replay) a receipt for ``req`` on ``key``'s project.

        The key's minute limit and the project's monthly quota are checked and counted in
        the same atomic step as the write. Raises ``RateLimited``, ``QuotaExceeded``,
        ``NotFound`` (project gone), ``IdempotencyConflict`` (header reused with another
        body), ``ChainContention`` (tip kept moving), ``SigningKeyUnavailable`` and
        ``StoreUnavailable``.
        """
        if not self.keyring.can_sign:
            raise SigningKeyUnavailable("no signing key is configured; receipts cannot be issued")
        project_id = key.project_id
        fingerprint = idempotency_fingerprint(project_id, req)
        rkey = replay_key(fingerprint, header_key)
        async with self.locks.hold(project_id):
            tip: str | None
            if project_id in self._tips:
                tip = self._tips[project_id]
            else:
                exists, tip = await self.store.read_tip(project_id)
                if not exists:
                    raise NotFound("the project of this API key does not exist")
            stale = ""
            for _ in range(MAX_ATTEMPTS):
                now = self.clock_ms()
                minute, month = minute_window(now), month_window(now)
                placement = place_in_chain(req.prev_receipt_hash, tip)
                receipt = build_receipt(
                    req,
                    receipt_id=new_receipt_id(project_id, now),
                    project_id=project_id,
                    actor_id=key.actor_id,
                    created_at=format_created_at(now),
                    placement=placement,
                    keyring=self.keyring,
                )
                receipt_json = orjson.dumps(receipt)
                result = await self.store.issue_receipt(
                    project_id=project_id,
                    receipt_id=receipt["receipt_id"],
                    receipt_hash=receipt["receipt_hash"],
                    receipt_json=receipt_json,
                    built_on_tip=tip,
                    on_main=placement.advances_tip,
                    replay_key=rkey,
                    fingerprint=fingerprint,
                    key_hash=key.key_hash,
                    minute=minute_counter(minute, plan.per_minute),
                    month=Counter(month.id, plan.monthly, month.retry_after_s + 40 * 86_400),
                    stale_receipt_id=stale,
                    input_hash=receipt["input_hash"],
                    output_hash=receipt["output_hash"],
                )
                minute_usage = Usage("key", plan.per_minute, result.minute_used, minute, MINUTE_S)
                month_usage = Usage("month", plan.monthly, result.month_used, month, month.retry_after_s)
                if result.outcome is IssueOutcome.ISSUED:
                    self._remember_tip(project_id, receipt["receipt_hash"] if placement.advances_tip else tip)
                    count_receipt(False, key.plan)
                    return Issued(receipt_json, receipt, rkey, False, minute_usage, month_usage)
                if result.outcome is IssueOutcome.TIP_MOVED:
                    tip = result.tip
                    self._remember_tip(project_id, tip)
                    continue
                if result.outcome is IssueOutcome.REPLAY:
                    stored = await self.store.get_receipt_json(result.receipt_id or "")
                    if stored is not None:
                        count_receipt(True, key.plan)
                        return Issued(stored, orjson.loads(stored), rkey, True, minute_usage, month_usage)
                    # The earlier receipt was deleted: its idempotency record is stale, and
                    # the same request now gets a new receipt in its place.
                    stale = result.receipt_id or ""
                    continue
                if result.outcome is IssueOutcome.RATE_LIMITED:
                    error = key_rate_limited(minute_usage, key.plan)
                    error.response_headers.update(quota_headers(key.plan, month_usage))
                    raise error
                if result.outcome is IssueOutcome.QUOTA_EXCEEDED:
                    extra = {**quota_headers(key.plan, month_usage), **ratelimit_headers([minute_usage])}
                    raise quota_exceeded(month_usage, key.plan, extra)
                if result.outcome is IssueOutcome.IDEMPOTENCY_CONFLICT:
                    raise IdempotencyConflict("this Idempotency-Key was already used with a different request body")
                self._tips.pop(project_id, None)
                raise NotFound("the project of this API key does not exist")
        raise ChainContention("the project's chain is too busy right now; retry the request")
