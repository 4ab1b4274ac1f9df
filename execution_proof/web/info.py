"""Entry information and the public signing keys (docs/api.md)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from execution_proof.web.auth import caller_of, services_of

bp = Blueprint("info")

ENDPOINTS = {
    "public_key": "GET /v1/public-key - the Ed25519 keys that sign receipts (no key needed)",
    "create_receipt": "POST /v1/receipts - issue a signed receipt for your hashes (Bearer API key)",
    "get_receipt": "GET /v1/receipts/{receipt_id} - read a receipt publicly by id",
    "verify": "POST /v1/verify - check a receipt against your hashes (Bearer API key)",
}


def base_url(request: Request) -> str:
    """``PUBLIC_BASE_URL`` when configured, else what the request was addressed to."""
    configured = services_of(request).settings.public_base_url
    return configured or f"{request.scheme}://{request.host}"


@bp.get("/", name="root")
@bp.get("/health", name="health")
async def entry(request: Request) -> HTTPResponse:
    """Always 200; ``store``, ``log`` and ``keys`` as ``Informer.health`` tells them."""
    health = await services_of(request).informer.health()
    return json_response(
        {
            "product": "Execution Proof Service",
            "subtitle": "Ed25519-signed, chained receipts for hashes you compute yourself",
            "env": health.env,
            "docs_url": base_url(request) + "/docs",
            "endpoints": ENDPOINTS,
            "store": health.store,
            "log": health.log,
            "keys": health.keys,
        }
    )


@bp.get("/v1/public-key")
async def public_key(request: Request) -> HTTPResponse:
    kid = request.args.get("kid")
    found = await services_of(request).informer.public_keys(caller_of(request), kid)
    return json_response(
        found.keys,
        headers={
            # Keys renew and are revoked within seconds (docs/keys.md): a cache holds them for one.
            "Cache-Control": "public, max-age=1",
            "Access-Control-Allow-Origin": "*",
            **found.admission.headers(),
        },
    )
