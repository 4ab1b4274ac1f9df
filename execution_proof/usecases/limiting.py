"""Per-IP and per-key limits at the HTTP edge (docs/limits.md).

Every check runs whatever the configured limit (raising a limit never skips a check).
Throttling of bad keys happens before authentication: once an address has had
``unauthenticated`` failures this minute, its requests are refused before any key lookup,
so a guesser cannot tell a valid key from a throttled one.
"""

from __future__ import annotations

from collections.abc import Callable

from sanic import Request

from execution_proof.kv.records import AuthOutcome, AuthResult, Counter, KeyRecord
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import QuotaExceeded, RateLimited
from execution_proof.receipts.limits import Limits, Usage, Window, minute_window, ratelimit_headers
from execution_proof.runtime.metrics import count_refusal
from execution_proof.runtime.settings import ClientIpConfig
from execution_proof.web.client_ip import client_ip

MINUTE_S = 60


def minute_counter(window: Window, limit: int) -> Counter:
    return Counter(window.id, limit, window.ttl_s)


def rate_limited(usage: Usage, message: str) -> RateLimited:
    """The 429 for a full ``usage`` window; counted in ``eps_limit_refusals_total`` (runtime.metrics)."""
    count_refusal(usage.policy)
    headers = {"Retry-After": str(usage.window.retry_after_s), **ratelimit_headers([usage])}
    return RateLimited(
        message,
        {"policy": usage.policy, "limit": usage.limit, "reset_at": usage.window.ends_at},
        headers,
    )


def quota_exceeded(usage: Usage, plan: str, extra_headers: dict[str, str]) -> QuotaExceeded:
    count_refusal(usage.policy)
    headers = {"Retry-After": str(usage.window.retry_after_s), **extra_headers}
    return QuotaExceeded(
        f"the monthly receipt quota of the {plan} plan ({usage.limit}) is used up",
        {"plan": plan, "monthly_limit": usage.limit, "monthly_reset_at": usage.window.ends_at},
        headers,
    )


class Limiter:
    def __init__(self, store: Store, limits: Limits, ip_config: ClientIpConfig, clock_ms: Callable[[], int]):
        self.store = store
        self.limits = limits
        self.ip_config = ip_config
        self.clock_ms = clock_ms

    def client(self, request: Request) -> str:
        """The request's client bucket, worked out once per request (the log line reuses it)."""
        bucket: str | None = getattr(request.ctx, "client_ip", None)
        if bucket is None:
            bucket = request.ctx.client_ip = client_ip(request, self.ip_config)
        return bucket

    async def hit_ip(self, request: Request, scope: str) -> Usage:
        """Count the request in its address's ``scope`` bucket; raise ``RateLimited`` when full."""
        limit = self.limits.ip_per_minute[scope]
        window = minute_window(self.clock_ms())
        allowed, count = await self.store.hit_ip_counter(self.client(request), scope, minute_counter(window, limit))
        usage = Usage(f"ip-{scope}", limit, count, window, MINUTE_S)
        if not allowed:
            raise ip_rate_limited(usage)
        return usage

    async def refuse_throttled_address(self, request: Request) -> None:
        """Before authentication: refuse an address that used up its failed-auth allowance."""
        limit = self.limits.ip_per_minute["unauthenticated"]
        window = minute_window(self.clock_ms())
        count = await self.store.read_ip_counter(self.client(request), "unauthenticated", window.id)
        _refuse_if_throttled(count, limit, window)

    async def find_key_unless_throttled(self, request: Request, key_hash: str) -> KeyRecord | None:
        """The key's record, read in the same round trip as the address's failed-auth count;
        ``RateLimited`` when the address has used up its allowance (the record is not used)."""
        limit = self.limits.ip_per_minute["unauthenticated"]
        window = minute_window(self.clock_ms())
        record, count = await self.store.find_api_key_and_read_ip_counter(
            key_hash, self.client(request), "unauthenticated", window.id
        )
        _refuse_if_throttled(count, limit, window)
        return record

    async def authenticate(
        self,
        request: Request,
        key_hash: str,
        scope: str,
        *,
        count: bool,
    ) -> tuple[AuthResult, Usage | None]:
        """``Store.authenticate``: the key, the failed-auth throttle (``RateLimited`` here) and,
        if ``count``, the address's ``scope`` counter in one round trip. The usage is None
        when the request was not counted."""
        failed_limit = self.limits.ip_per_minute["unauthenticated"]
        limit = self.limits.ip_per_minute[scope]
        window = minute_window(self.clock_ms())
        result = await self.store.authenticate(
            key_hash,
            self.client(request),
            minute_counter(window, limit),
            scope,
            failed_limit,
            count=count,
        )
        if result.outcome is AuthOutcome.THROTTLED:
            _refuse_if_throttled(result.count, failed_limit, window)
        if result.outcome in (AuthOutcome.COUNTED, AuthOutcome.LIMITED):
            return result, Usage(f"ip-{scope}", limit, result.count, window, MINUTE_S)
        return result, None

    async def refund_ip(self, request: Request, scope: str, usage: Usage) -> None:
        """Take back a request that ``hit_ip`` (or ``authenticate``) counted in its address's
        ``scope`` bucket and that was then refused for its body: it uses up nothing."""
        await self.store.refund_ip_counter(self.client(request), scope, usage.window.id)

    async def count_failed_auth(self, request: Request) -> None:
        """After a failed authentication: count it; past the limit the answer is 429, not 401."""
        await self.hit_ip(request, "unauthenticated")

    async def hit_key(self, key: KeyRecord) -> Usage:
        """Count a request against the key's per-minute plan limit (verify, which writes nothing)."""
        limit = self.limits.plan(key.plan).per_minute
        window = minute_window(self.clock_ms())
        allowed, count = await self.store.hit_key_counter(key.project_id, key.key_hash, minute_counter(window, limit))
        usage = Usage("key", limit, count, window, MINUTE_S)
        if not allowed:
            raise key_rate_limited(usage, key.plan)
        return usage


def _refuse_if_throttled(failed: int, limit: int, window: Window) -> None:
    """429 for an address that used up its failed-authentication allowance this minute."""
    if failed >= limit:
        usage = Usage("ip-unauthenticated", limit, failed, window, MINUTE_S)
        raise rate_limited(usage, "too many requests with a missing or invalid API key from this address")


def ip_rate_limited(usage: Usage) -> RateLimited:
    return rate_limited(usage, f"too many requests from this address; limit {usage.limit} per minute")


def key_rate_limited(usage: Usage, plan: str) -> RateLimited:
    return rate_limited(usage, f"the {plan} plan allows {usage.limit} requests per minute per key")
