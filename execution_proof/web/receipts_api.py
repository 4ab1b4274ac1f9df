"""Create, read and verify receipts (docs/api.md): each route reads its request into plain
values, makes one use-case call (usecases/) and renders what comes back."""

from __future__ import annotations

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.receipts.limits import quota_headers, quota_object, ratelimit_headers
from execution_proof.receipts.model import chain_object
from execution_proof.web.auth import caller_of, services_of, with_caller
from execution_proof.web.bodies import check_body_size
from execution_proof.web.errors import report_corrupt_record
from execution_proof.web.log_api import prefer_wait
from execution_proof.web.responses import Answer

bp = Blueprint("receipts")

CREATE_BODY_LIMIT = 16 * 1024
VERIFY_BODY_LIMIT = 8 * 1024
JSON = "application/json"
PUBLIC_READ_HEADERS = {"Cache-Control": "public, max-age=60", "Access-Control-Allow-Origin": "*"}


def splice(parts: list[tuple[str, bytes]]) -> bytes:
    """A JSON object from already-serialised values, so stored receipt bytes pass unchanged."""
    return b"{" + b",".join(orjson.dumps(name) + b":" + raw for name, raw in parts) + b"}"


@bp.post("/v1/receipts")
async def create_receipt(request: Request) -> HTTPResponse:
    check_body_size(request, CREATE_BODY_LIMIT)
    headers = request.headers
    created = await services_of(request).creator.create(
        caller_of(request),
        headers.get("content-type"),
        request.body,
        headers.get("idempotency-key"),
        prefer_wait(request),
    )
    with_caller(request, created.caller)
    issued, key = created.issued, created.key
    quota = quota_object(key.plan, issued.month)
    parts = [
        ("ok", b"true"),
        ("receipt", issued.receipt_json),
        ("idempotency", orjson.dumps({"hit": issued.replayed, "key": issued.replay_key})),
        ("chain", orjson.dumps(chain_object(issued.receipt))),
        ("quota", orjson.dumps(quota)),
    ]
    if created.log is not None:
        parts.append(("log", orjson.dumps(created.log)))
    status = 200 if issued.replayed else 201
    response_headers = {
        "Location": f"/v1/receipts/{issued.receipt['receipt_id']}",
        **quota_headers(key.plan, issued.month, quota),
        **ratelimit_headers([issued.minute, created.ip_usage]),
    }
    return Answer(splice(parts), status=status, headers=response_headers, content_type=JSON)


@bp.get("/v1/receipts/<receipt_ref:str>")
async def get_receipt(request: Request, receipt_ref: str) -> HTTPResponse:
    project_id = request.args.get("project_id") if request.query_string else None  # parsed only when sent
    read = await services_of(request).reader.read(caller_of(request), receipt_ref, project_id)
    body = splice([("ok", b"true"), ("receipt", read.stored)])
    headers = {**PUBLIC_READ_HEADERS, **read.admission.headers()}
    return Answer(body, status=200, headers=headers, content_type=JSON)


@bp.post("/v1/verify")
async def verify(request: Request) -> HTTPResponse:
    check_body_size(request, VERIFY_BODY_LIMIT)
    verified = await services_of(request).verifier.verify(
        caller_of(request), request.headers.get("content-type"), request.body
    )
    with_caller(request, verified.admission.caller)
    for corrupt in verified.corrupt:
        report_corrupt_record(request, corrupt)
    return Answer(orjson.dumps(verified.result), status=200, headers=verified.admission.headers(), content_type=JSON)
