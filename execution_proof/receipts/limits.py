"""Plans, rate limits and monthly quotas as pure values (docs/limits.md).

Configuration: ``LIMITS`` holds a JSON object merged recursively, key by key, over
``DEFAULT_LIMITS``. Windows are fixed: one-minute windows numbered from the Unix epoch,
and UTC calendar months. Time comes in as Unix milliseconds, so tests can inject a clock.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict

import orjson

from execution_proof.errors import Error
from execution_proof.receipts.model import format_created_at
from execution_proof.receipts.shapes import JSONObject, JSONValue

PLANS = ("free", "basic", "pro")
"""Every plan a key can have; the one list the limits, the CLI, the claims and the API document use."""
PAID_PLANS = ("basic", "pro")
"""The plans a checkout sells (the free plan is claimed behind the human check)."""
DEFAULT_LIMITS: JSONObject = {
    "plans": {
        "free": {"per_minute": 60, "monthly": 1000},
        "basic": {"per_minute": 300, "monthly": 50000},
        "pro": {"per_minute": 600, "monthly": 500000},
    },
    "ip_per_minute": {
        "public_key": 300,
        "get_receipt": 240,
        "unauthenticated": 10,
        "authenticated": 180,
        "log_tiles": 6000,
    },
    "free_claims_per_ip_per_day": 1,
}
MINUTE_MS = 60_000


class LimitsError(Error, ValueError):
    """``LIMITS`` is malformed; the message names the offending path."""


def _merge(base: JSONObject, override: Mapping[str, JSONValue], path: str) -> JSONObject:
    """``override`` over ``base``, key by key; every key must be one of ``base``'s, every value
    an object where ``base`` has one and a whole number where it has one."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        where = f"{path}.{key}" if path else key
        if key not in base:
            raise LimitsError(f"LIMITS: unknown setting {where!r}")
        default = base[key]
        if isinstance(default, dict):
            if not isinstance(value, Mapping):
                raise LimitsError(f"LIMITS: {where} must be an object")
            merged[key] = _merge(default, value, where)
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LimitsError(f"LIMITS: {where} must be a whole number >= 0")
            merged[key] = value
    return merged


@dataclass(frozen=True)
class PlanLimits:
    per_minute: int
    monthly: int


@dataclass(frozen=True)
class Limits:
    plans: Mapping[str, PlanLimits]
    ip_per_minute: Mapping[str, int]
    free_claims_per_ip_per_day: int

    def plan(self, name: str) -> PlanLimits:
        """The plan's limits; an unknown plan name gets the free plan's (fail closed)."""
        return self.plans.get(name) or self.plans["free"]


def load_limits(raw: str | bytes | None) -> Limits:
    """Defaults merged with the ``LIMITS`` JSON. Raises ``LimitsError``."""
    merged = DEFAULT_LIMITS
    if raw:
        try:
            override = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise LimitsError("LIMITS is not valid JSON") from exc
        if not isinstance(override, Mapping):
            raise LimitsError("LIMITS must be a JSON object")
        merged = _merge(DEFAULT_LIMITS, override, "")
    plans, ip_per_minute = _object(merged["plans"]), _object(merged["ip_per_minute"])
    return Limits(
        plans={name: _plan(plans[name]) for name in PLANS},
        ip_per_minute={name: _whole(value) for name, value in ip_per_minute.items()},
        free_claims_per_ip_per_day=_whole(merged["free_claims_per_ip_per_day"]),
    )


# The merged document has the defaults' shape (``_merge`` keeps it): these only narrow it.


def _object(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict)
    return value


def _whole(value: JSONValue) -> int:
    assert isinstance(value, int)
    return value


def _plan(value: JSONValue) -> PlanLimits:
    plan = _object(value)
    return PlanLimits(per_minute=_whole(plan["per_minute"]), monthly=_whole(plan["monthly"]))


@dataclass(frozen=True)
class Window:
    """A fixed window: its id (part of the counter's key), and when it ends."""

    id: str
    ends_ms: int
    now_ms: int

    @property
    def retry_after_s(self) -> int:
        """Whole seconds until the window ends, at least 1."""
        return max(1, -(-(self.ends_ms - self.now_ms) // 1000))

    @property
    def ttl_s(self) -> int:
        """How long the counter must live: the rest of the window plus a minute of slack."""
        return self.retry_after_s + 60

    @property
    def ends_at(self) -> str:
        return format_created_at(self.ends_ms)


def minute_window(now_ms: int) -> Window:
    start = now_ms - now_ms % MINUTE_MS
    return Window(str(start // MINUTE_MS), start + MINUTE_MS, now_ms)


def month_window(now_ms: int) -> Window:
    """The UTC calendar month holding ``now_ms``; it ends at the first instant of the next.
    The last month's bounds are kept, so most calls do no calendar arithmetic."""
    global _last_month
    starts, ends, month_id = _last_month
    if not starts <= now_ms < ends:
        starts, ends, month_id = _last_month = _month_bounds(now_ms)
    return Window(month_id, ends, now_ms)


def _month_bounds(now_ms: int) -> tuple[int, int, str]:
    """(first ms, first ms of the next month, ``YYYYMM``) of the UTC month holding ``now_ms``."""
    moment = datetime.fromtimestamp(now_ms / 1000, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    starts = int(datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp() * 1000)
    ends = int(datetime(year, month, 1, tzinfo=UTC).timestamp() * 1000)
    return starts, ends, f"{moment.year:04d}{moment.month:02d}"


_last_month: tuple[int, int, str] = (0, 0, "")


DAY_MS = 86_400_000


def day_window(now_ms: int) -> Window:
    """The UTC day holding ``now_ms`` (id ``YYYYMMDD``); it ends at the next UTC midnight."""
    start = now_ms - now_ms % DAY_MS
    moment = datetime.fromtimestamp(start / 1000, UTC)
    return Window(moment.strftime("%Y%m%d"), start + DAY_MS, now_ms)


@dataclass(frozen=True)
class Usage:
    """One limit's state after a request: for headers, bodies and ``GET /v1/usage``."""

    policy: str
    limit: int
    used: int
    window: Window
    window_seconds: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)


def ratelimit_headers(usages: list[Usage]) -> dict[str, str]:
    """IETF ``RateLimit-Policy`` and ``RateLimit`` fields (draft-ietf-httpapi-ratelimit-headers)."""
    if not usages:
        return {}
    return {
        "RateLimit-Policy": ", ".join(f'"{u.policy}";q={u.limit};w={u.window_seconds}' for u in usages),
        "RateLimit": ", ".join(f'"{u.policy}";r={u.remaining};t={u.window.retry_after_s}' for u in usages),
    }


class QuotaObject(TypedDict):
    """The ``quota`` object of a creation response."""

    plan: str
    monthly_limit: int
    monthly_used: int
    monthly_remaining: int
    monthly_reset_at: str


def quota_object(plan: str, usage: Usage) -> QuotaObject:
    """The ``quota`` object of a creation response (docs/api.md)."""
    return {
        "plan": plan,
        "monthly_limit": usage.limit,
        "monthly_used": usage.used,
        "monthly_remaining": usage.remaining,
        "monthly_reset_at": usage.window.ends_at,
    }


def quota_headers(plan: str, usage: Usage, quota: QuotaObject | None = None) -> dict[str, str]:
    """The ``X-Service-*`` headers of ``POST /v1/receipts`` (docs/api.md), from ``quota``
    when the caller has made it already (the create's body carries it too)."""
    if quota is None:
        quota = quota_object(plan, usage)
    return {
        "X-Service-Plan": plan,
        "X-Service-Monthly-Limit": str(quota["monthly_limit"]),
        "X-Service-Monthly-Used": str(quota["monthly_used"]),
        "X-Service-Monthly-Remaining": str(quota["monthly_remaining"]),
        "X-Service-Monthly-Reset-At": quota["monthly_reset_at"],
    }
