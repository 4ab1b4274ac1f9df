"""Bearer API-key authentication (docs/api.md, "Authentication")."""

from __future__ import annotations

from sanic import Request

from execution_proof.kv.records import AuthOutcome, KeyRecord
from execution_proof.kv.store import Store
from execution_proof.receipts.apikeys import hash_api_key, is_plausible_key
from execution_proof.receipts.errors import Forbidden, Unauthorized
from execution_proof.receipts.limits import Usage
from execution_proof.receipts.model import format_created_at
from execution_proof.usecases.limiting import ip_rate_limited


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


async def authenticate(request: Request, store: Store) -> KeyRecord:
    """The key record behind the request's bearer key.

    Raises ``Unauthorized`` when the header is missing or malformed, the key length is
    outside 16-256 (checked before any lookup), or the key is unknown or revoked. The
    raw key is hashed at once and never logged or stored.
    """
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("missing or malformed Authorization header; send 'Authorization: Bearer <API key>'")
    if not is_plausible_key(token):
        raise Unauthorized("invalid API key")
    return usable_key(await store.find_api_key(hash_api_key(token)))


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


async def authenticate_limited(request: Request) -> KeyRecord:
    """``authenticate`` behind the failed-auth throttle (docs/limits.md).

    An address that has used up its allowance of missing or invalid keys this minute is
    refused (429) whatever key it sends: the key record is read in the same round trip as
    the address's count (one pipeline) but not used. Each further failure is counted, and
    past the allowance answers 429 instead of 401.
    """
    limiter = request.app.ctx.limiter
    token = bearer_token(request)
    if token is None or not is_plausible_key(token):
        await limiter.refuse_throttled_address(request)
        try:
            record = await authenticate(request, request.app.ctx.store)
        except Unauthorized:
            await limiter.count_failed_auth(request)
            raise
    else:
        # One round trip reads the key and the address's failed-auth count together. The
        # count still decides first: a throttled address gets 429 whatever the key is.
        try:
            record = usable_key(await limiter.find_key_unless_throttled(request, hash_api_key(token)))
        except Unauthorized:
            await limiter.count_failed_auth(request)
            raise
    _accept(request, record)
    return record


def _accept(request: Request, record: KeyRecord) -> None:
    # For the request's log line (web.access_log): who asked, never with what key.
    request.ctx.plan = record.plan
    request.ctx.project_id = record.project_id
    refuse_suspended(record, request.app.ctx.clock_ms(), request.app.ctx.settings.operator_contact)


async def authenticate_counted(
    request: Request, scope: str = "authenticated", *, count: bool = True
) -> tuple[KeyRecord, Usage | None]:
    """``authenticate_limited``, then the address's ``scope`` counter: the request is counted
    only if ``count`` (the caller found nothing to refuse in the request itself). Returns the
    record and the address's usage (None when not counted); raises as the two steps would, in
    the same order.

    On a plain Redis both steps are one script call (kv/lua/authenticate.lua): one round
    trip instead of two on every authenticated request. On a Cluster the key record and the
    address's counters live in different slots, and the two steps run one after the other.
    """
    limiter = request.app.ctx.limiter
    token = bearer_token(request)
    if token is None or not is_plausible_key(token) or not request.app.ctx.store.one_call_auth:
        record = await authenticate_limited(request)
        return record, (await limiter.hit_ip(request, scope) if count else None)
    result, usage = await limiter.authenticate(request, hash_api_key(token), scope, count=count)
    if result.outcome is AuthOutcome.UNUSABLE:
        await limiter.count_failed_auth(request)
    record = usable_key(result.record)  # Unauthorized for an unusable key (no record)
    _accept(request, record)
    if result.outcome is AuthOutcome.LIMITED:
        assert usage is not None
        raise ip_rate_limited(usage)
    if usage is None and count:
        # The key's project has a suspension set that is not in force: the script leaves
        # that decision (and the count) to this side.
        usage = await limiter.hit_ip(request, scope)
    return record, usage
