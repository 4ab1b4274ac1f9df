"""Per-IP and per-key limits, and the admission of an API key behind them (docs/limits.md):
verdicts on plain values, not on an HTTP request.

The web layer reads the request into a ``Caller`` (its bearer key as sent, its client
address's bucket); everything here decides from that, the key's record, the configured
limits and a clock, and asks the store in as few round trips as the checks allow.

Every check runs whatever the configured limit (raising a limit never skips a check).
Throttling of bad keys happens before authentication: once an address has had
``unauthenticated`` failures this minute, its requests are refused before any key lookup,
so a guesser cannot tell a valid key from a throttled one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from execution_proof.kv.records import AuthOutcome, AuthResult, Counter, KeyRecord
from execution_proof.kv.store_counters import CounterStore
from execution_proof.kv.store_keys import KeyStore
from execution_proof.receipts.apikeys import hash_api_key, is_plausible_key
from execution_proof.receipts.errors import Forbidden, QuotaExceeded, RateLimited, Unauthorized
from execution_proof.receipts.limits import Limits, Usage, Window, minute_window, ratelimit_headers
from execution_proof.receipts.model import format_created_at
from execution_proof.runtime.metrics import count_refusal

MINUTE_S = 60


@dataclass(slots=True)
class Caller:
    """Who is asking, as the web layer read it from the request: the bearer key as sent (None
    when the header is missing or malformed) and the client address's bucket. Once the key is
    accepted, its ``plan`` and ``project_id`` are set here for the request's log line, also
    when the request is then refused."""

    token: str | None
    client: str
    plan: str | None = None
    project_id: str | None = None


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
    """The limit verdicts: the address's and the key's per-minute counters and the monthly
    quota (``counters``), the key's lookup and the failed-auth throttle (``keys``)."""

    def __init__(
        self,
        counters: CounterStore,
        keys: KeyStore,
        limits: Limits,
        clock_ms: Callable[[], int],
        operator_contact: str,
    ):
        self.counters = counters
        self.keys = keys
        self.limits = limits
        self.clock_ms = clock_ms
        self.operator_contact = operator_contact
        """Named in the 403 of a suspended project."""

    async def hit_ip(self, client: str, scope: str) -> Usage:
        """Count the request in its address's ``scope`` bucket; raise ``RateLimited`` when full."""
        limit = self.limits.ip_per_minute[scope]
        window = minute_window(self.clock_ms())
        allowed, count = await self.counters.hit_ip_counter(client, scope, minute_counter(window, limit))
        usage = Usage(f"ip-{scope}", limit, count, window, MINUTE_S)
        if not allowed:
            raise ip_rate_limited(usage)
        return usage

    async def refuse_throttled_address(self, client: str) -> None:
        """Before authentication: refuse an address that used up its failed-auth allowance."""
        limit = self.limits.ip_per_minute["unauthenticated"]
        window = minute_window(self.clock_ms())
        count = await self.counters.read_ip_counter(client, "unauthenticated", window.id)
        _refuse_if_throttled(count, limit, window)

    async def find_key_unless_throttled(self, client: str, key_hash: str) -> KeyRecord | None:
        """The key's record, read in the same round trip as the address's failed-auth count;
        ``RateLimited`` when the address has used up its allowance (the record is not used)."""
        limit = self.limits.ip_per_minute["unauthenticated"]
        window = minute_window(self.clock_ms())
        record, count = await self.keys.find_api_key_and_read_ip_counter(key_hash, client, "unauthenticated", window.id)
        _refuse_if_throttled(count, limit, window)
        return record

    async def authenticate(
        self,
        client: str,
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
        result = await self.keys.authenticate(
            key_hash,
            client,
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

    async def refund_ip(self, client: str, scope: str, usage: Usage) -> None:
        """Take back a request that ``hit_ip`` (or ``authenticate``) counted in its address's
        ``scope`` bucket and that was then refused for its body: it uses up nothing."""
        await self.counters.refund_ip_counter(client, scope, usage.window.id)

    async def count_failed_auth(self, client: str) -> None:
        """After a failed authentication: count it; past the limit the answer is 429, not 401."""
        await self.hit_ip(client, "unauthenticated")

    async def hit_key(self, key: KeyRecord) -> Usage:
        """Count a request against the key's per-minute plan limit (verify, which writes nothing)."""
        limit = self.limits.plan(key.plan).per_minute
        window = minute_window(self.clock_ms())
        allowed, count = await self.counters.hit_key_counter(
            key.project_id, key.key_hash, minute_counter(window, limit)
        )
        usage = Usage("key", limit, count, window, MINUTE_S)
        if not allowed:
            raise key_rate_limited(usage, key.plan)
        return usage

    async def find_key(self, token: str | None) -> KeyRecord:
        """The key record behind a bearer key.

        Raises ``Unauthorized`` when the key is missing (or its header malformed), its
        length is outside 16-256 (checked before any lookup), or the key is unknown or
        revoked. The raw key is hashed at once and never logged or stored.
        """
        if token is None:
            raise Unauthorized("missing or malformed Authorization header; send 'Authorization: Bearer <API key>'")
        if not is_plausible_key(token):
            raise Unauthorized("invalid API key")
        return usable_key(await self.keys.find_api_key(hash_api_key(token)))

    async def authenticate_limited(self, caller: Caller) -> KeyRecord:
        """``find_key`` behind the failed-auth throttle (docs/limits.md).

        An address that has used up its allowance of missing or invalid keys this minute is
        refused (429) whatever key it sends: the key record is read in the same round trip as
        the address's count (one pipeline) but not used. Each further failure is counted, and
        past the allowance answers 429 instead of 401.
        """
        token = caller.token
        if token is None or not is_plausible_key(token):
            await self.refuse_throttled_address(caller.client)
            try:
                record = await self.find_key(token)
            except Unauthorized:
                await self.count_failed_auth(caller.client)
                raise
        else:
            # One round trip reads the key and the address's failed-auth count together. The
            # count still decides first: a throttled address gets 429 whatever the key is.
            try:
                record = usable_key(await self.find_key_unless_throttled(caller.client, hash_api_key(token)))
            except Unauthorized:
                await self.count_failed_auth(caller.client)
                raise
        self._accept(caller, record)
        return record

    def _accept(self, caller: Caller, record: KeyRecord) -> None:
        # For the request's log line (web.access_log): who asked, never with what key.
        caller.plan = record.plan
        caller.project_id = record.project_id
        refuse_suspended(record, self.clock_ms(), self.operator_contact)

    async def authenticate_counted(
        self, caller: Caller, scope: str = "authenticated", *, count: bool = True
    ) -> tuple[KeyRecord, Usage | None]:
        """``authenticate_limited``, then the address's ``scope`` counter: the request is counted
        only if ``count`` (the caller found nothing to refuse in the request itself). Returns the
        record and the address's usage (None when not counted); raises as the two steps would, in
        the same order.

        On a plain Redis both steps are one script call (kv/lua/authenticate.lua): one round
        trip instead of two on every authenticated request. On a Cluster the key record and the
        address's counters live in different slots, and the two steps run one after the other.
        """
        token = caller.token
        if token is None or not is_plausible_key(token):
            record = await self.authenticate_limited(caller)
            return record, (await self.hit_ip(caller.client, scope) if count else None)
        result, usage = await self.authenticate(caller.client, hash_api_key(token), scope, count=count)
        if result.outcome is AuthOutcome.UNUSABLE:
            await self.count_failed_auth(caller.client)
        record = usable_key(result.record)  # Unauthorized for an unusable key (no record)
        self._accept(caller, record)
        if result.outcome is AuthOutcome.LIMITED:
            assert usage is not None
            raise ip_rate_limited(usage)
        if usage is None and count:
            # The key's project has a suspension set that is not in force: the script leaves
            # that decision (and the count) to this side.
            usage = await self.hit_ip(caller.client, scope)
        return record, usage


def usable_key(record: KeyRecord | None) -> KeyRecord:
    """The record of a key that may be used; ``Unauthorized`` for an unknown or revoked one."""
    if record is None or record.revoked:
        raise Unauthorized("invalid or revoked API key")
    return record


def refuse_suspended(record: KeyRecord, now_ms: int, operator_contact: str) -> None:
    """403 while the key's project is suspended, naming the end (if any) and the contact."""
    if record.suspended_at(now_ms):
        until = (
            "until further notice"
            if record.suspended_until == "forever"
            else "until " + format_created_at(int(record.suspended_until))
        )
        raise Forbidden(
            f"this project's API access is suspended {until}; contact {operator_contact}",
            {"reason": "project_suspended"},
        )


def _refuse_if_throttled(failed: int, limit: int, window: Window) -> None:
    """429 for an address that used up its failed-authentication allowance this minute."""
    if failed >= limit:
        usage = Usage("ip-unauthenticated", limit, failed, window, MINUTE_S)
        raise rate_limited(usage, "too many requests with a missing or invalid API key from this address")


def ip_rate_limited(usage: Usage) -> RateLimited:
    return rate_limited(usage, f"too many requests from this address; limit {usage.limit} per minute")


def key_rate_limited(usage: Usage, plan: str) -> RateLimited:
    return rate_limited(usage, f"the {plan} plan allows {usage.limit} requests per minute per key")
