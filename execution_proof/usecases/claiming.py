"""Getting an API key: paid claims after a checkout, free claims after a human check (design
and statuses: docs/claims.md).

Paid: the payment provider calls ``POST /v1/webhooks/payment`` (signed); a completed, paid
checkout is marked seen and handed to the ``jobs.claims.index_checkout`` job, which makes it
claimable; ``POST /v1/claim`` then creates project, actor and key in one atomic script and
reveals the key once. Free: ``POST /v1/claim/free`` asks the human-verification provider,
then issues one free key per client address per UTC day. Every claim attempt (paid and free)
counts against the address's per-minute ``claim`` allowance first.

Keys, tokens and checkout session ids are never logged or stored: the store, the job and the
log lines name a checkout by its reference (``kv.keys.checkout_ref``, a hash of the id).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from rq import Queue

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
)
from execution_proof.receipts.limits import DAY_MS, Usage, day_window
from execution_proof.receipts.shapes import JSONObject, JSONValue
from execution_proof.receipts.webhook_signature import (
    COMPLETED,
    EventError,
    SignatureError,
    is_provider_id,
    parse_payment_event,
    verify_signature,
)
from execution_proof.runtime import human_check
from execution_proof.runtime.settings import Settings
from execution_proof.usecases.bodies import check_size, json_object, require_json
from execution_proof.usecases.limiting import Caller, Limiter, rate_limited

log = logging.getLogger("eps.claims")

WARNING = "store this key now: it is shown only once"
EVENT_TTL_S = 30 * 86_400
"""How long a processed webhook event id is remembered (providers retry for days)."""
CLAIM_BODY_LIMIT = 1024
FREE_CLAIM_BODY_LIMIT = 8 * 1024
MAX_TOKEN_LEN = 2048
FREE_CLAIM_SCOPE = "free_claim"
"""Per-address, per-UTC-day counter of free keys issued (``LIMITS.free_claims_per_ip_per_day``)."""
PENDING_RETRY_S = "3"


def _only_field(body: JSONObject, name: str) -> JSONValue:
    unknown = sorted(k for k in body if k != name)
    if unknown:
        raise BadRequest("unknown field(s) in request body", {"fields": unknown[:10], "allowed": [name]})
    return body.get(name)


def _already_claimed(contact: str) -> AlreadyClaimed:
    return AlreadyClaimed(
        "the API key for this checkout was already revealed and is not shown again; "
        f"if it is lost, ask {contact} to reissue one (a new key for the same project)",
        {"contact": contact},
    )


class Claimer:
    """The payment webhook and the two claims. Answers are the JSON bodies of docs/claims.md."""

    def __init__(
        self, settings: Settings, limiter: Limiter, store: Store, queue: Queue, clock_ms: Callable[[], int]
    ) -> None:
        self.settings = settings
        self.limiter = limiter
        self.store = store
        self.queue = queue
        self.clock_ms = clock_ms

    # --- the payment webhook ------------------------------------------------------------------

    async def payment_event(self, signature: str | None, content_type: str | None, body: bytes) -> JSONObject:
        """Authenticate on the raw bytes (``signature``: the ``Payment-Signature`` header),
        remember the event id, hand a paid checkout to the job."""
        settings = self.settings
        if not settings.payment_webhook_secrets:
            raise ClaimNotReady("payments are not configured on this service (no webhook secret)")
        now_ms = self.clock_ms()
        try:
            verify_signature(signature, body, settings.payment_webhook_secrets, now_ms // 1000)
        except SignatureError as exc:
            raise BadRequest(f"webhook signature rejected: {exc}", {"header": "Payment-Signature"}) from None
        require_json(content_type)
        try:
            event = parse_payment_event(body)
        except EventError as exc:
            raise BadRequest(f"malformed webhook event: {exc}") from None
        checkouts = self.store.checkouts
        if not await checkouts.record_webhook_event(event.event_id, EVENT_TTL_S):
            return {"ok": True, "received": True, "duplicate": True}
        checkout = event.checkout
        if checkout is None:
            # A completed checkout that is not acted on (unpaid, no paid plan) needs the operator.
            level = logging.WARNING if event.type == COMPLETED else logging.INFO
            log.log(level, "payment event %s (%s) not acted on: %s", event.event_id, event.type, event.ignored)
            return {"ok": True, "received": True, "ignored": True}
        ref = checkout_ref(checkout.session_id)
        try:
            await checkouts.mark_checkout_seen(ref, now_ms)
            await enqueue(self.queue, JOB_FUNC, ref, checkout.plan, checkout.created_unix, job_id=job_id_for(ref))
        except StoreUnavailable as exc:
            with contextlib.suppress(StoreUnavailable):
                await checkouts.forget_webhook_event(event.event_id)
            log.warning("payment event %s not queued (%s); the provider retries", event.event_id, type(exc).__name__)
            raise StoreUnavailable("the event could not be queued; deliver it again shortly") from None
        log.info("payment event %s: checkout %s queued for indexing (plan %s)", event.event_id, ref, checkout.plan)
        return {"ok": True, "received": True}

    # --- paid claim ---------------------------------------------------------------------------

    async def claim(self, caller: Caller, content_type: str | None, body: bytes) -> JSONObject:
        """Reveal the key of a paid checkout once (statuses in docs/claims.md)."""
        settings = self.settings
        if not settings.payment_webhook_secrets:
            raise ClaimNotReady(
                f"paid keys are not available here: payments are not configured; contact {settings.operator_contact}"
            )
        await self.limiter.admit(caller, "claim")
        check_size(body, CLAIM_BODY_LIMIT)
        session_id = _only_field(json_object(content_type, body), "session_id")
        if not is_provider_id(session_id):
            raise BadRequest(
                "session_id is required: the checkout session id (1-255 characters of A-Z, a-z, 0-9, _ and -)",
                {"field": "session_id"},
            )
        assert isinstance(session_id, str)
        checkouts = self.store.checkouts
        now_ms = self.clock_ms()
        window_ms = int(settings.claim_window_days * DAY_MS)
        ref = checkout_ref(session_id)
        project_id, plan = self._claimable(await checkouts.find_checkout(ref), now_ms, window_ms)
        api_key, key = new_key_record(project_id, plan, now_ms=now_ms)
        outcome = await checkouts.claim_checkout(
            ref=ref,
            project_name=f"{plan} plan (checkout {ref})",
            key=key,
            now_ms=now_ms,
            window_ms=window_ms,
        )
        if outcome is ClaimOutcome.ALREADY_CLAIMED:
            raise _already_claimed(settings.operator_contact)
        if outcome is ClaimOutcome.EXPIRED:
            raise self._expired()
        if outcome is ClaimOutcome.NOT_INDEXED:  # the record vanished between the read and the script
            raise ClaimPending("the payment is being processed; try again in a few seconds")
        log.info("paid claim: checkout %s, project %s created (plan %s)", ref, key.project_id, key.plan)
        return {
            "ok": True,
            "api_key": api_key,
            "project_id": key.project_id,
            "actor_id": key.actor_id,
            "plan": key.plan,
            "warning": WARNING,
        }

    def _claimable(self, record: CheckoutRecord | None, now_ms: int, window_ms: int) -> tuple[str, str]:
        """(project id, plan) of a claimable session; otherwise the refusal, before anything is written."""
        if record is None:
            raise ClaimUnknown(
                "no completed payment is known for this checkout session yet; "
                "if you just paid, try again in a few seconds",
                headers={"Retry-After": PENDING_RETRY_S},
            )
        if record.state == "seen" or record.project_id is None:
            raise ClaimPending(
                "the payment was received and is being processed; try again in a few seconds",
                headers={"Retry-After": PENDING_RETRY_S},
            )
        if record.state == "claimed":
            raise _already_claimed(self.settings.operator_contact)
        if record.created_ms + window_ms < now_ms:
            raise self._expired()
        return record.project_id, record.plan

    def _expired(self) -> ClaimExpired:
        settings = self.settings
        days = f"{settings.claim_window_days:g}"
        return ClaimExpired(
            f"this checkout is older than the claim window ({days} days); contact {settings.operator_contact}",
            {"claim_window_days": settings.claim_window_days, "contact": settings.operator_contact},
        )

    # --- free claim ---------------------------------------------------------------------------

    async def claim_free(
        self, caller: Caller, content_type: str | None, body: bytes, remote_ip: str | None
    ) -> JSONObject:
        """A free key after a passed human check, one per client address per UTC day;
        ``remote_ip``: the client's own address, told to the provider."""
        settings = self.settings
        secret = settings.human_check_secret
        if not secret:
            raise NotConfigured("free keys are not available here: the human verification is not configured")
        await self.limiter.admit(caller, "claim")
        check_size(body, FREE_CLAIM_BODY_LIMIT)
        token = _only_field(json_object(content_type, body), "turnstile_token")
        if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN_LEN:
            raise BadRequest(
                f"turnstile_token is required: the human-verification widget's token (1-{MAX_TOKEN_LEN} characters)",
                {"field": "turnstile_token"},
            )
        counters = self.store.counters
        limit = settings.limits.free_claims_per_ip_per_day
        window = day_window(self.clock_ms())
        used = await counters.read_ip_counter(caller.client, FREE_CLAIM_SCOPE, window.id)
        if used >= limit:
            raise self._free_limited(used)
        try:
            answer = await human_check.siteverify(settings.human_check_verify_url, secret, token, remote_ip)
        except human_check.HumanCheckUnavailable as exc:
            log.warning("human verification unavailable: %s", exc)
            raise InternalError("the human verification could not be completed; try again in a minute") from None
        if not answer.success:
            raise Forbidden(
                "the human verification did not pass; complete the check again",
                {"reasons": list(answer.error_codes)} if answer.error_codes else None,
            )
        # Counted only now, so a failed check does not use up the day; check-and-increment is
        # one script, so two passed checks racing from one address cannot both get a key.
        allowed, count = await counters.hit_ip_counter(
            caller.client, FREE_CLAIM_SCOPE, Counter(window.id, limit, window.ttl_s)
        )
        if not allowed:
            raise self._free_limited(count)
        created = await create_project_key(
            self.store.keys, project_name="free claim", plan="free", now_ms=self.clock_ms()
        )
        log.info("free claim: project %s created", created["project_id"])
        return {
            "ok": True,
            "api_key": created["api_key"],
            "project_id": created["project_id"],
            "actor_id": created["actor_id"],
            "plan": "free",
            "warning": WARNING,
        }

    def _free_limited(self, used: int) -> ServiceError:
        limit = self.settings.limits.free_claims_per_ip_per_day
        window = day_window(self.clock_ms())
        usage = Usage("ip-free-claim", limit, used, window, DAY_MS // 1000)
        return rate_limited(
            usage,
            f"this address already received its free API key today ({limit} per address per UTC day); "
            f"try again after {window.ends_at}",
        )
