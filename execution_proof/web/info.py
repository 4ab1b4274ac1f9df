"""Entry information and the public signing keys (docs/api.md)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from execution_proof.kv.health import store_reachable
from execution_proof.receipts.errors import SigningKeyUnavailable
from execution_proof.receipts.limits import ratelimit_headers
from execution_proof.web.auth import caller_of

bp = Blueprint("info")

ENDPOINTS = {
    "public_key": "GET /v1/public-key - the Ed25519 keys that sign receipts (no key needed)",
    "create_receipt": "POST /v1/receipts - issue a signed receipt for your hashes (Bearer API key)",
    "get_receipt": "GET /v1/receipts/{receipt_id} - read a receipt publicly by id",
    "verify": "POST /v1/verify - check a receipt against your hashes (Bearer API key)",
}


def base_url(request: Request) -> str:
    """``PUBLIC_BASE_URL`` when configured, else what the request was addressed to."""
    configured = request.app.ctx.settings.public_base_url
    return configured or f"{request.scheme}://{request.host}"


@bp.get("/", name="root")
@bp.get("/health", name="health")
async def entry(request: Request) -> HTTPResponse:
    """Always 200 (a load balancer must not cycle the service while Redis is away: it would
    come back by itself); ``store`` says whether the store answers a PING within 1 s, ``log``
    whether the transparency log is ``ok``, ``stalled`` (entries wait and nothing was
    published for ``LOG_STALL_S``), ``halted`` (a witness showed a fork, or the log store was
    refused; an operator must look) or ``off`` (no log)."""
    reachable = await store_reachable(request.app.ctx.store)
    service = getattr(request.app.ctx, "log", None)
    log_state = "off" if service is None else await service.state()
    return json_response(
        {
            "product": "Execution Proof Service",
            "subtitle": "Ed25519-signed, chained receipts for hashes you compute yourself",
            "env": request.app.ctx.settings.env,
            "docs_url": base_url(request) + "/docs",
            "endpoints": ENDPOINTS,
            "store": "ok" if reachable else "unreachable",
            "log": log_state,
        }
    )


@bp.get("/v1/public-key")
async def public_key(request: Request) -> HTTPResponse:
    usage = await request.app.ctx.limiter.hit_ip(caller_of(request).client, "public_key")
    keyring = request.app.ctx.settings.keyring
    if not keyring.keys or keyring.active_kid is None:
        raise SigningKeyUnavailable("no signing key is configured")
    return json_response(
        keyring.public_keys_json(),
        headers={
            "Cache-Control": "public, max-age=300",
            "Access-Control-Allow-Origin": "*",
            **ratelimit_headers([usage]),
        },
    )
