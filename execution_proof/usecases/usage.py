"""``GET /v1/usage``: the caller's plan, and its minute and month usage with reset times.

Reading usage counts against the address's authenticated limit, not the key's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from execution_proof.kv.store_counters import CounterStore
from execution_proof.receipts.limits import Limits, Window, minute_window, month_window
from execution_proof.receipts.shapes import JSONObject
from execution_proof.usecases.limiting import Admission, Caller, Limiter


@dataclass(frozen=True, slots=True)
class UsageReport:
    """The answer's body (docs/api.md) and the request's admission."""

    body: JSONObject
    admission: Admission[Any]


def _window(limit: int, used: int, window: Window) -> JSONObject:
    return {
        "limit": limit,
        "used": used,
        "remaining": max(0, limit - used),
        "reset_at": window.ends_at,
        "reset_in_seconds": window.retry_after_s,
    }


class UsageReader:
    """A key's usage of its plan."""

    def __init__(self, limiter: Limiter, counters: CounterStore, limits: Limits, clock_ms: Callable[[], int]) -> None:
        self.limiter = limiter
        self.counters = counters
        self.limits = limits
        self.clock_ms = clock_ms

    async def usage(self, caller: Caller) -> UsageReport:
        admission: Admission[None] = await self.limiter.admit(caller, "authenticated", key=True)
        key = admission.key
        assert key is not None
        plan = self.limits.plan(key.plan)
        now = self.clock_ms()
        minute, month = minute_window(now), month_window(now)
        minute_used, month_used = await self.counters.read_usage(key.project_id, key.key_hash, minute.id, month.id)
        body: JSONObject = {
            "ok": True,
            "plan": key.plan,
            "project_id": key.project_id,
            "minute": _window(plan.per_minute, minute_used, minute),
            "month": _window(plan.monthly, month_used, month),
        }
        return UsageReport(body, admission)
