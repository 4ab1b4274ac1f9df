"""Retention (docs/jobs.md): receipts leave the store after ``RETENTION_DAYS``.

``sweep`` is the one implementation; it runs as the job ``sweep_expired`` (hourly, on the
worker's schedule: ``jobs/schedule.py``), as ``python service.py expire`` (once, now), and
can run inside an embedded server (``sweep_periodically``). The work itself is
``RetentionStore.expire_receipts``; the design and its cost are in ``docs/jobs.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TypedDict

from execution_proof.jobs.context import run_with_store
from execution_proof.kv.store_retention import RetentionStore
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.receipts.model import format_created_at
from execution_proof.runtime.settings import load_settings

DAY_MS = 86_400_000
SWEEP_JOB = "execution_proof.jobs.retention.sweep_expired"


class SweepSummary(TypedDict):
    """What one sweep did: the summary ``expire`` prints and the job returns (as JSON)."""

    removed: dict[str, int]
    """Per kind (``receipts``, ``hash_index``, ``idempotency``, ``search_index``): entries removed."""
    scanned: int
    cutoff: str
    retention_days: float
    took_ms: int


def now_ms() -> int:
    return int(time.time() * 1000)


def cutoff_ms(now: int, retention_days: float) -> int:
    """Receipts created strictly before this instant (Unix ms) are past the window."""
    return now - round(retention_days * DAY_MS)


async def sweep(store: RetentionStore, retention_days: float, now: int | None = None) -> SweepSummary:
    """Remove what is past the retention window; the summary ``expire`` prints and the job returns."""
    at = now_ms() if now is None else now
    cutoff = cutoff_ms(at, retention_days)
    started = time.monotonic()
    counts = await store.expire_receipts(cutoff)
    return {
        "removed": {name: counts[name] for name in ("receipts", "hash_index", "idempotency", "search_index")},
        "scanned": counts["scanned"],
        "cutoff": format_created_at(cutoff),
        "retention_days": retention_days,
        "took_ms": round((time.monotonic() - started) * 1000),
    }


def sweep_expired(now: int | None = None) -> SweepSummary:
    """The job: one sweep with the configured ``RETENTION_DAYS``. Idempotent; safe to overlap.

    ``now`` (Unix ms) is for tests; the schedule passes nothing, so each run uses its own clock.
    """
    retention_days = load_settings().retention_days
    return run_with_store(lambda store: sweep(store.retention, retention_days, now))


async def sweep_periodically(store: RetentionStore, retention_days: float, interval_s: float = 3600.0) -> None:
    """Sweep now and then every ``interval_s`` until cancelled, for a process that owns its
    store and has no worker (the embedded server). A failed run is retried next interval."""
    while True:
        with contextlib.suppress(StoreUnavailable):
            await sweep(store, retention_days)
        # A cancel() that lands inside a store call can be swallowed by the Redis client (seen
        # with the embedded fakeredis: the sweep then finished normally and the loop went on,
        # so whoever awaited the cancelled task waited for ever). The task still counts the
        # request: honour it here.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        await asyncio.sleep(interval_s)
