"""Getting an API key (docs/claims.md): the payment webhook, the paid and the free claim
(usecases/claiming.py), and the two pages that drive them."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import html
from sanic.response import json as json_response

from execution_proof.receipts.shapes import JSONObject
from execution_proof.receipts.webhook_signature import is_provider_id
from execution_proof.runtime.settings import Settings
from execution_proof.usecases.claiming import WARNING
from execution_proof.web.auth import caller_of, services_of
from execution_proof.web.client_ip import remote_ip
from execution_proof.web.templating import TEMPLATES

bp = Blueprint("claims")

NO_STORE = {"Cache-Control": "no-store"}
NONE = "'none'"
_EMAIL = re.compile(r"[^\s@<>]+@[^\s@<>]+\.[^\s@<>]+")


def _ok(body: JSONObject) -> HTTPResponse:
    return json_response(body, headers=NO_STORE)


@bp.post("/v1/webhooks/payment")
async def payment_webhook(request: Request) -> HTTPResponse:
    """Authenticate on the raw bytes, remember the event id, hand a paid checkout to the job."""
    headers = request.headers
    answer = await services_of(request).claimer.payment_event(
        headers.get("payment-signature"), headers.get("content-type"), request.body or b""
    )
    return _ok(answer)


@bp.post("/v1/claim")
async def claim(request: Request) -> HTTPResponse:
    """Reveal the key of a paid checkout once (statuses in docs/claims.md)."""
    claimer = services_of(request).claimer
    return _ok(await claimer.claim(caller_of(request), request.headers.get("content-type"), request.body or b""))


@bp.post("/v1/claim/free")
async def claim_free(request: Request) -> HTTPResponse:
    """A free key after a passed human check, one per client address per UTC day."""
    services = services_of(request)
    answer = await services.claimer.claim_free(
        caller_of(request),
        request.headers.get("content-type"),
        request.body or b"",
        remote_ip(request, services.settings.client_ip),
    )
    return _ok(answer)


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
    settings = services_of(request).settings
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
    settings = services_of(request).settings
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
