"""Per-IP and per-key limits, and the admission of an API key behind them (docs/limits.md):
verdicts on plain values, not on an HTTP request.

The web layer reads the request into a ``Caller`` (its bearer key as sent, its client
address's bucket); ``Limiter.admit`` decides from that, the key's record, the configured
limits and a clock, and asks the store in as few round trips as the checks allow (the store
decides how: one script call on a plain Redis, two round trips on a Cluster).

Every check runs whatever the configured limit (raising a limit never skips a check).
Throttling of bad keys happens before authentication: once an address has had
``unauthenticated`` failures this minute, its requests are refused before any key lookup,
so a guesser cannot tell a valid key from a throttled one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, NamedTuple, TypeVar

from execution_proof.kv.records import AuthOutcome, Counter, KeyRecord
from execution_proof.kv.store_counters import CounterStore
from execution_proof.kv.store_keys import KeyStore
from execution_proof.receipts.apikeys import hash_api_key, is_plausible_key
from execution_proof.receipts.errors import Forbidden, QuotaExceeded, RateLimited, ServiceError, Unauthorized
from execution_proof.receipts.limits import Limits, Usage, Window, minute_window, ratelimit_headers
from execution_proof.receipts.model import format_created_at
from execution_proof.runtime.metrics import count_refusal

MINUTE_S = 60
T = TypeVar("T")
IP_MESSAGE = "too many requests from this address; limit {limit} per minute"
IP_LIMIT_OF = {"claim": "unauthenticated"}
"""An address bucket counted against another bucket's configured limit: claim attempts (paid
and free) are limited like unauthenticated requests (``LIMITS.ip_per_minute.unauthenticated``)."""
IP_MESSAGES = {"claim": "too many claim attempts from this address; limit {limit} per minute"}


class Caller(NamedTuple):
    """Who is asking, as the web layer read it from the request: the bearer key as sent (None
    when the header is missing or malformed) and the client address's bucket. ``admit``
    returns it naming the accepted key's ``plan`` and ``project_id`` (for the request's log
    line); a refusal after that names them in ``ServiceError.accepted``. Immutable (a named
    tuple: made on every request, at a third of a frozen dataclass's cost)."""

    token: str | None
    client: str
    plan: str | None = None
    project_id: str | None = None


class Admission(NamedTuple, Generic[T]):
    """An admitted request: the caller (naming the key once accepted), the key's record (None
    on a public route), the address's usage (None when not counted), the key's per-minute
    usage (``per_key``) and what the request's own ``checks`` returned."""

    caller: Caller
    key: KeyRecord | None
    ip: Usage | None
    per_key: Usage | None = None
    checked: T | None = None

    def headers(self) -> dict[str, str]:
        """The ``RateLimit`` fields of the counters this request was counted in, the key's first."""
        return ratelimit_headers([usage for usage in (self.per_key, self.ip) if usage is not None])


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
    quota (``counters``), the key's lookup and the failed-auth throttle (``keys``). One entry
    point, ``admit``; the issue's own counters (the key's minute and the month, counted with
    the receipt) are built here too (``minute_counter``, ``key_rate_limited``, ``quota_exceeded``)."""

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

    async def admit(
        self,
        caller: Caller,
        scope: str,
        *,
        key: bool = False,
        count: bool = True,
        per_key: bool = False,
        checks: Callable[[KeyRecord], Awaitable[T]] | None = None,
    ) -> Admission[T]:
        """Admit one request, or raise its refusal (docs/limits.md).

        ``scope``: the address's per-minute bucket the request counts in (``get_receipt``,
        ``public_key``, ``log_tiles``, ``authenticated``, ``claim``). Without ``key`` that is
        all. With ``key``: the bearer key is looked up behind the failed-auth throttle and the
        address counted in the same round trip on a plain Redis (``KeyStore.authenticate``);
        ``Unauthorized``, ``RateLimited`` or ``Forbidden`` (a suspended project). Nothing is
        counted unless ``count`` (the request was already found wrong: it is refused after
        the key, and uses up nothing). Then, if counted, ``checks(key)``: the request's own
        checks that need the key, sent before the key's counter so that what they send leaves
        with it; a ``ServiceError`` they raise takes the address's count back. Last, with
        ``per_key``, the key's per-minute counter.

        A refusal raised once the key was accepted names its plan and project
        (``ServiceError.accepted``) for the request's log line."""
        if not key:
            return Admission(caller, None, await self._hit_ip(caller.client, scope))
        record, accepted, ip_usage = await self._authenticate(caller, scope, count)
        if ip_usage is None:
            return Admission(accepted, record, None)
        checked = None
        if checks is not None:
            try:
                checked = await checks(record)
            except ServiceError as error:
                await self.counters.refund_ip_counter(caller.client, scope, ip_usage.window.id)
                raise naming(error, record) from None
        key_usage = await self._hit_key(record) if per_key else None
        return Admission(accepted, record, ip_usage, key_usage, checked)

    async def _hit_ip(self, client: str, scope: str) -> Usage:
        """Count the request in its address's ``scope`` bucket; ``RateLimited`` when full."""
        limit = self.limits.ip_per_minute[IP_LIMIT_OF.get(scope, scope)]
        window = minute_window(self.clock_ms())
        allowed, count = await self.counters.hit_ip_counter(client, scope, minute_counter(window, limit))
        usage = Usage(f"ip-{scope}", limit, count, window, MINUTE_S)
        if not allowed:
            raise rate_limited(usage, IP_MESSAGES.get(scope, IP_MESSAGE).format(limit=limit))
        return usage

    async def _hit_key(self, key: KeyRecord) -> Usage:
        """Count a request against the key's per-minute plan limit (a request that writes nothing)."""
        limit = self.limits.plan(key.plan).per_minute
        window = minute_window(self.clock_ms())
        allowed, count = await self.counters.hit_key_counter(
            key.project_id, key.key_hash, minute_counter(window, limit)
        )
        usage = Usage("key", limit, count, window, MINUTE_S)
        if not allowed:
            raise naming(key_rate_limited(usage, key.plan), key)
        return usage

    async def _authenticate(self, caller: Caller, scope: str, count: bool) -> tuple[KeyRecord, Caller, Usage | None]:
        """The key behind the failed-auth throttle, then the address's ``scope`` counter if
        ``count``: (the key's record, the caller naming it, the address's usage or None)."""
        token = caller.token
        failed_limit = self.limits.ip_per_minute["unauthenticated"]
        window = minute_window(self.clock_ms())
        if token is None or not is_plausible_key(token):
            # No key to look up: an address past its allowance is refused first (429 whatever
            # it sends), then the failure is counted (past the allowance the answer is 429).
            failed = await self.counters.read_ip_counter(caller.client, "unauthenticated", window.id)
            _refuse_if_throttled(failed, failed_limit, window)
            await self._hit_ip(caller.client, "unauthenticated")
            if token is None:
                raise Unauthorized("missing or malformed Authorization header; send 'Authorization: Bearer <API key>'")
            raise Unauthorized("invalid API key")
        # The raw key is hashed at once and never logged or stored.
        limit = self.limits.ip_per_minute[scope]
        result = await self.keys.authenticate(
            hash_api_key(token), caller.client, minute_counter(window, limit), scope, failed_limit, count=count
        )
        if result.outcome is AuthOutcome.THROTTLED:
            _refuse_if_throttled(result.count, failed_limit, window)
        if result.outcome is AuthOutcome.UNUSABLE or result.record is None or result.record.revoked:
            await self._hit_ip(caller.client, "unauthenticated")
            raise Unauthorized("invalid or revoked API key")
        record = result.record
        # For the request's log line (web.access_log): who asked, never with what key.
        accepted = Caller(token, caller.client, record.plan, record.project_id)
        try:
            refuse_suspended(record, self.clock_ms(), self.operator_contact)
        except ServiceError as error:
            raise naming(error, record) from None
        if result.outcome is AuthOutcome.LIMITED:
            usage = Usage(f"ip-{scope}", limit, result.count, window, MINUTE_S)
            raise naming(rate_limited(usage, IP_MESSAGE.format(limit=limit)), record)
        if result.outcome is AuthOutcome.COUNTED:
            return record, accepted, Usage(f"ip-{scope}", limit, result.count, window, MINUTE_S)
        if not count:
            return record, accepted, None
        # The key's project has a suspension set that is not in force: the store leaves that
        # decision (and the count) to this side.
        try:
            return record, accepted, await self._hit_ip(caller.client, scope)
        except ServiceError as error:
            raise naming(error, record) from None


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


def key_rate_limited(usage: Usage, plan: str) -> RateLimited:
    return rate_limited(usage, f"the {plan} plan allows {usage.limit} requests per minute per key")


def naming(error: ServiceError, key: KeyRecord) -> ServiceError:
    """``error``, naming the accepted key's plan and project for the request's log line."""
    error.accepted = (key.plan, key.project_id)
    return error
