"""Getting an API key: paid claims after a checkout, free claims
after a human check, and the two pages that drive them. Design and statuses: docs/claims.md.

Paid: the payment provider calls ``POST /v1/webhooks/payment`` (signed); a completed, paid
checkout is marked seen and handed to the ``jobs.claims.index_checkout`` job, which makes it
claimable; ``POST /v1/claim`` then creates project, actor and key in one atomic script and
reveals the key once. Free: ``POST /v1/claim/free`` asks the human-verification provider,
then issues one free key per client address per UTC day.

Keys, tokens and checkout session ids are never logged or stored: the store, the job and the
log lines name a checkout by its reference (``kv.keys.checkout_ref``, a hash of the id).
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any
from urllib.parse import urlsplit

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import html
from sanic.response import json as json_response

from execution_proof.jobs.claims import JOB_FUNC, job_id_for
from execution_proof.jobs.queue import enqueue
from execution_proof.kv.accounts import create_project_key, new_key_record
from execution_proof.kv.keys import checkout_ref
from execution_proof.kv.records import CheckoutRecord, ClaimOutcome, Counter
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import (
    AlreadyClaimed,
    BadRequest,
    ClaimExpired,
    ClaimNotReady,
    ClaimPending,
    ClaimUnknown,
    Forbidden,
    InternalError,
    NotConfigured,
    ServiceError,
    StoreUnavailable,
    UnsupportedMediaType,
)
from execution_proof.receipts.limits import DAY_MS, Usage, day_window, minute_window
from execution_proof.receipts.shapes import JSONObject, JSONValue
from execution_proof.receipts.webhook_signature import (
    COMPLETED,
    EventError,
    SignatureError,
    is_provider_id,
    parse_payment_event,
    verify_signature,
)
from execution_proof.runtime.settings import Settings
from execution_proof.usecases.limiting import minute_counter, rate_limited
from execution_proof.web import human_check
from execution_proof.web.bodies import check_body_size, json_body
from execution_proof.web.client_ip import client_ip
from execution_proof.web.templating import TEMPLATES

bp = Blueprint("claims")
log = logging.getLogger("eps.claims")

WARNING = "store this key now: it is shown only once"
EVENT_TTL_S = 30 * 86_400
"""How long a processed webhook event id is remembered (providers retry for days)."""
CLAIM_BODY_LIMIT = 1024
FREE_CLAIM_BODY_LIMIT = 8 * 1024
MAX_TOKEN_LEN = 2048
CLAIM_SCOPE = "claim"
"""Per-address, per-minute counter of claim attempts (paid and free), limited like
unauthenticated requests (``LIMITS.ip_per_minute.unauthenticated``)."""
FREE_CLAIM_SCOPE = "free_claim"
"""Per-address, per-UTC-day counter of free keys issued (``LIMITS.free_claims_per_ip_per_day``)."""
PENDING_RETRY_S = "3"
NO_STORE = {"Cache-Control": "no-store"}
NONE = "'none'"
_EMAIL = re.compile(r"[^\s@<>]+@[^\s@<>]+\.[^\s@<>]+")


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.ctx.settings
    return settings


def _store(request: Request) -> Store:
    store: Store = request.app.ctx.store
    return store


def _now(request: Request) -> int:
    return int(request.app.ctx.clock_ms())


def _ok(body: JSONObject) -> HTTPResponse:
    return json_response(body, headers=NO_STORE)


async def _count_claim_attempt(request: Request) -> None:
    """Every claim attempt counts against the address's per-minute claim allowance (429)."""
    limit = _settings(request).limits.ip_per_minute["unauthenticated"]
    window = minute_window(_now(request))
    bucket = client_ip(request, _settings(request).client_ip)
    allowed, count = await _store(request).counters.hit_ip_counter(bucket, CLAIM_SCOPE, minute_counter(window, limit))
    if not allowed:
        usage = Usage("ip-claim", limit, count, window, 60)
        raise rate_limited(usage, f"too many claim attempts from this address; limit {limit} per minute")


def _require_json(request: Request) -> None:
    media_type = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType("Content-Type must be application/json")


def _only_field(body: JSONObject, name: str) -> JSONValue:
    unknown = sorted(k for k in body if k != name)
    if unknown:
        raise BadRequest("unknown field(s) in request body", {"fields": unknown[:10], "allowed": [name]})
    return body.get(name)


# --- the payment webhook -----------------------------------------------------------------


@bp.post("/v1/webhooks/payment")
async def payment_webhook(request: Request) -> HTTPResponse:
    """Authenticate on the raw bytes, remember the event id, hand a paid checkout to the job."""
    settings = _settings(request)
    if not settings.payment_webhook_secrets:
        raise ClaimNotReady("payments are not configured on this service (no webhook secret)")
    body = request.body or b""
    now_ms = _now(request)
    try:
        header = request.headers.get("payment-signature")
        verify_signature(header, body, settings.payment_webhook_secrets, now_ms // 1000)
    except SignatureError as exc:
        raise BadRequest(f"webhook signature rejected: {exc}", {"header": "Payment-Signature"}) from None
    _require_json(request)
    try:
        event = parse_payment_event(body)
    except EventError as exc:
        raise BadRequest(f"malformed webhook event: {exc}") from None
    store = _store(request)
    if not await store.checkouts.record_webhook_event(event.event_id, EVENT_TTL_S):
        return _ok({"ok": True, "received": True, "duplicate": True})
    checkout = event.checkout
    if checkout is None:
        # A completed checkout that is not acted on (unpaid, no paid plan) needs the operator.
        level = logging.WARNING if event.type == COMPLETED else logging.INFO
        log.log(level, "payment event %s (%s) not acted on: %s", event.event_id, event.type, event.ignored)
        return _ok({"ok": True, "received": True, "ignored": True})
    ref = checkout_ref(checkout.session_id)
    try:
        await store.checkouts.mark_checkout_seen(ref, now_ms)
        await enqueue(
            request.app.ctx.queue, JOB_FUNC, ref, checkout.plan, checkout.created_unix, job_id=job_id_for(ref)
        )
    except StoreUnavailable as exc:
        with contextlib.suppress(StoreUnavailable):
            await store.checkouts.forget_webhook_event(event.event_id)
        log.warning("payment event %s not queued (%s); the provider retries", event.event_id, type(exc).__name__)
        raise StoreUnavailable("the event could not be queued; deliver it again shortly") from None
    log.info("payment event %s: checkout %s queued for indexing (plan %s)", event.event_id, ref, checkout.plan)
    return _ok({"ok": True, "received": True})


# --- paid claim ------------------------------------------------------------------------------


def _claimable(record: CheckoutRecord | None, now_ms: int, window_ms: int, settings: Settings) -> tuple[str, str]:
    """(project id, plan) of a claimable session; otherwise the refusal, before anything is written."""
    contact = settings.operator_contact
    if record is None:
        raise ClaimUnknown(
            "no completed payment is known for this checkout session yet; if you just paid, try again in a few seconds",
            headers={"Retry-After": PENDING_RETRY_S},
        )
    if record.state == "seen" or record.project_id is None:
        raise ClaimPending(
            "the payment was received and is being processed; try again in a few seconds",
            headers={"Retry-After": PENDING_RETRY_S},
        )
    if record.state == "claimed":
        raise _already_claimed(contact)
    if record.created_ms + window_ms < now_ms:
        raise _expired(settings)
    return record.project_id, record.plan


def _already_claimed(contact: str) -> AlreadyClaimed:
    return AlreadyClaimed(
        "the API key for this checkout was already revealed and is not shown again; "
        f"if it is lost, ask {contact} to reissue one (a new key for the same project)",
        {"contact": contact},
    )


def _expired(settings: Settings) -> ClaimExpired:
    days = f"{settings.claim_window_days:g}"
    return ClaimExpired(
        f"this checkout is older than the claim window ({days} days); contact {settings.operator_contact}",
        {"claim_window_days": settings.claim_window_days, "contact": settings.operator_contact},
    )


@bp.post("/v1/claim")
async def claim(request: Request) -> HTTPResponse:
    """Reveal the key of a paid checkout once (statuses in docs/claims.md)."""
    settings = _settings(request)
    if not settings.payment_webhook_secrets:
        raise ClaimNotReady(
            f"paid keys are not available here: payments are not configured; contact {settings.operator_contact}"
        )
    await _count_claim_attempt(request)
    check_body_size(request, CLAIM_BODY_LIMIT)
    session_id = _only_field(json_body(request), "session_id")
    if not is_provider_id(session_id):
        raise BadRequest(
            "session_id is required: the checkout session id (1-255 characters of A-Z, a-z, 0-9, _ and -)",
            {"field": "session_id"},
        )
    store = _store(request)
    now_ms = _now(request)
    window_ms = int(settings.claim_window_days * DAY_MS)
    ref = checkout_ref(session_id)
    project_id, plan = _claimable(await store.checkouts.find_checkout(ref), now_ms, window_ms, settings)
    api_key, key = new_key_record(project_id, plan, now_ms=now_ms)
    outcome = await store.checkouts.claim_checkout(
        ref=ref,
        project_name=f"{plan} plan (checkout {ref})",
        key=key,
        now_ms=now_ms,
        window_ms=window_ms,
    )
    if outcome is ClaimOutcome.ALREADY_CLAIMED:
        raise _already_claimed(settings.operator_contact)
    if outcome is ClaimOutcome.EXPIRED:
        raise _expired(settings)
    if outcome is ClaimOutcome.NOT_INDEXED:  # the record vanished between the read and the script
        raise ClaimPending("the payment is being processed; try again in a few seconds")
    log.info("paid claim: checkout %s, project %s created (plan %s)", ref, key.project_id, key.plan)
    return _ok(
        {
            "ok": True,
            "api_key": api_key,
            "project_id": key.project_id,
            "actor_id": key.actor_id,
            "plan": key.plan,
            "warning": WARNING,
        }
    )


# --- free claim ------------------------------------------------------------------------------


def _free_limited(request: Request, used: int) -> ServiceError:
    limit = _settings(request).limits.free_claims_per_ip_per_day
    window = day_window(_now(request))
    usage = Usage("ip-free-claim", limit, used, window, DAY_MS // 1000)
    return rate_limited(
        usage,
        f"this address already received its free API key today ({limit} per address per UTC day); "
        f"try again after {window.ends_at}",
    )


@bp.post("/v1/claim/free")
async def claim_free(request: Request) -> HTTPResponse:
    """A free key after a passed human check, one per client address per UTC day."""
    settings = _settings(request)
    secret = settings.human_check_secret
    if not secret:
        raise NotConfigured("free keys are not available here: the human verification is not configured")
    await _count_claim_attempt(request)
    check_body_size(request, FREE_CLAIM_BODY_LIMIT)
    token = _only_field(json_body(request), "turnstile_token")
    if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN_LEN:
        raise BadRequest(
            f"turnstile_token is required: the human-verification widget's token (1-{MAX_TOKEN_LEN} characters)",
            {"field": "turnstile_token"},
        )
    store = _store(request)
    bucket = client_ip(request, settings.client_ip)
    limit = settings.limits.free_claims_per_ip_per_day
    window = day_window(_now(request))
    used = await store.counters.read_ip_counter(bucket, FREE_CLAIM_SCOPE, window.id)
    if used >= limit:
        raise _free_limited(request, used)
    try:
        answer = await human_check.siteverify(
            settings.human_check_verify_url, secret, token, human_check.remote_ip(request, settings.client_ip)
        )
    except human_check.HumanCheckUnavailable as exc:
        log.warning("human verification unavailable: %s", exc)
        raise InternalError("the human verification could not be completed; try again in a minute") from None
    if not answer.success:
        raise Forbidden(
            "the human verification did not pass; complete the check again",
            {"reasons": list(answer.error_codes)} if answer.error_codes else None,
        )
    # Counted only now, so a failed check does not use up the day; check-and-increment is one
    # script, so two passed checks racing from one address cannot both get a key.
    allowed, count = await store.counters.hit_ip_counter(
        bucket, FREE_CLAIM_SCOPE, Counter(window.id, limit, window.ttl_s)
    )
    if not allowed:
        raise _free_limited(request, count)
    created = await create_project_key(store.keys, project_name="free claim", plan="free", now_ms=_now(request))
    log.info("free claim: project %s created", created["project_id"])
    return _ok(
        {
            "ok": True,
            "api_key": created["api_key"],
            "project_id": created["project_id"],
            "actor_id": created["actor_id"],
            "plan": "free",
            "warning": WARNING,
        }
    )


# --- pages -----------------------------------------------------------------------------------


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def _page(name: str, settings: Settings, **context: Any) -> HTTPResponse:
    """Render a page with headers that keep a revealed key out of caches, referrers and frames."""
    widget = _origin(settings.human_check_script_url) if context.get("site_key") else ""
    extra = f" {widget}" if widget else ""
    csp = "; ".join(
        [
            "default-src 'none'",
            f"script-src 'self'{extra}",
            f"frame-src {widget or NONE}",
            f"connect-src 'self'{extra}",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )
    contact = settings.operator_contact
    body = TEMPLATES.get_template(name).render(
        contact=contact,
        contact_mailto=contact if _EMAIL.fullmatch(contact) else None,
        warning=WARNING,
        **context,
    )
    headers = {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": csp,
    }
    return html(body, headers=headers)


@bp.get("/claim/free")
async def free_claim_page(request: Request) -> HTTPResponse:
    settings = _settings(request)
    available = bool(settings.human_check_secret and settings.human_check_site_key)
    return _page(
        "claim_free.html",
        settings,
        site_key=settings.human_check_site_key if available else None,
        script_url=settings.human_check_script_url,
        per_day=settings.limits.free_claims_per_ip_per_day,
        free_per_minute=settings.limits.plan("free").per_minute,
        free_monthly=f"{settings.limits.plan('free').monthly:,}",
    )


@bp.get("/claim/success")
async def claim_success_page(request: Request) -> HTTPResponse:
    settings = _settings(request)
    session_id = request.args.get("session_id")
    return _page(
        "claim_success.html",
        settings,
        site_key=None,
        session_id=session_id if is_provider_id(session_id) else None,
        session_id_given=bool(session_id),
        payments_ready=bool(settings.payment_webhook_secrets),
        claim_window_days=f"{settings.claim_window_days:g}",
    )
