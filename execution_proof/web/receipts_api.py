"""Create, read and verify receipts (docs/api.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.encoding import is_hash_str
from execution_proof.receipts.errors import BadRequest, CorruptRecord, Forbidden, NotFound, ServiceError
from execution_proof.receipts.ids import is_project_id, is_receipt_id
from execution_proof.receipts.limits import quota_headers, quota_object, ratelimit_headers
from execution_proof.receipts.model import chain_object, parse_verify_request
from execution_proof.receipts.shapes import JSONObject
from execution_proof.receipts.verifier import unreadable_receipt_result, verify_receipt
from execution_proof.usecases.creating import Creator
from execution_proof.usecases.limiting import Limiter
from execution_proof.web.auth import caller_of
from execution_proof.web.bodies import check_body_size, json_body
from execution_proof.web.errors import report_corrupt_record
from execution_proof.web.log_api import prefer_wait

bp = Blueprint("receipts")
T = TypeVar("T")

CREATE_BODY_LIMIT = 16 * 1024
VERIFY_BODY_LIMIT = 8 * 1024
JSON = "application/json"
PUBLIC_READ_HEADERS = {"Cache-Control": "public, max-age=60", "Access-Control-Allow-Origin": "*"}


def _splice(parts: list[tuple[str, bytes]]) -> bytes:
    """A JSON object from already-serialised values, so stored receipt bytes pass unchanged."""
    return b"{" + b",".join(orjson.dumps(name) + b":" + raw for name, raw in parts) + b"}"


@bp.post("/v1/receipts")
async def create_receipt(request: Request) -> HTTPResponse:
    check_body_size(request, CREATE_BODY_LIMIT)
    headers = request.headers
    creator: Creator = request.app.ctx.creator
    created = await creator.create(
        caller_of(request),
        headers.get("content-type"),
        request.body,
        headers.get("idempotency-key"),
        prefer_wait(request),
    )
    issued, key = created.issued, created.key
    parts = [
        ("ok", b"true"),
        ("receipt", issued.receipt_json),
        ("idempotency", orjson.dumps({"hit": issued.replayed, "key": issued.replay_key})),
        ("chain", orjson.dumps(chain_object(issued.receipt))),
        ("quota", orjson.dumps(quota_object(key.plan, issued.month))),
    ]
    if created.log is not None:
        parts.append(("log", orjson.dumps(created.log)))
    body = _splice(parts)
    status = 200 if issued.replayed else 201
    response_headers = {
        "Location": f"/v1/receipts/{issued.receipt['receipt_id']}",
        **quota_headers(key.plan, issued.month),
        **ratelimit_headers([issued.minute, created.ip_usage]),
    }
    return HTTPResponse(body, status=status, headers=response_headers, content_type=JSON)


def _checked(parse: Callable[[], T]) -> tuple[T | None, ServiceError | None]:
    """``parse()``, or the client error it raised (to be raised later, in its turn)."""
    try:
        return parse(), None
    except ServiceError as exc:
        return None, exc


async def _load_receipt(receipts: ReceiptStore, ref: str, project_id: str | None) -> bytes:
    """Stored bytes for a receipt id, or for a receipt hash within ``project_id``."""
    if is_receipt_id(ref):
        stored = await receipts.get_receipt_json(ref)
    elif is_hash_str(ref):
        if project_id is None or not is_project_id(project_id):
            raise BadRequest(
                "looking a receipt up by its hash needs the project: add ?project_id=prj_...",
                {"field": "project_id"},
            )
        receipt_id = await receipts.find_receipt_id_by_hash(project_id, ref.lower())
        # The record must be the id's, and of the project whose index named it (CorruptRecord).
        stored = await receipts.get_receipt_json(receipt_id, project_id) if receipt_id else None
        if stored is not None and orjson.loads(stored).get("receipt_hash") != ref.lower():
            stored = None  # the index keys a truncated hash: this is another receipt
    else:
        stored = None
    if stored is None:
        raise NotFound("receipt not found (unknown id, or past its retention window)")
    return stored


@bp.get("/v1/receipts/<receipt_ref:str>")
async def get_receipt(request: Request, receipt_ref: str) -> HTTPResponse:
    receipts: ReceiptStore = request.app.ctx.store.receipts
    # A read by id leaves together with the address's limit check (one round trip); a
    # refused request simply drops what was read.
    prefetched = receipts.prefetch_receipt_json(receipt_ref) if is_receipt_id(receipt_ref) else None
    usage = await request.app.ctx.limiter.hit_ip(caller_of(request).client, "get_receipt")
    if prefetched is not None:
        stored = await receipts.prefetched_receipt_json(prefetched, receipt_ref)
        if stored is None:
            raise NotFound("receipt not found (unknown id, or past its retention window)")
    else:
        stored = await _load_receipt(receipts, receipt_ref, request.args.get("project_id"))
    body = _splice([("ok", b"true"), ("receipt", stored)])
    headers = {**PUBLIC_READ_HEADERS, **ratelimit_headers([usage])}
    return HTTPResponse(body, status=200, headers=headers, content_type=JSON)


@bp.post("/v1/verify")
async def verify(request: Request) -> HTTPResponse:
    receipts: ReceiptStore = request.app.ctx.store.receipts
    check_body_size(request, VERIFY_BODY_LIMIT)
    req, body_error = _checked(lambda: parse_verify_request(json_body(request)))
    # The receipt is read in the same round trip as the key lookup and the address's limit
    # check (a refused request drops it); the key's limit and the previous receipt's lookup
    # share the next.
    prefetched = None
    if req is not None and is_receipt_id(req.receipt_id):
        prefetched = receipts.prefetch_receipt_json(req.receipt_id)
    limiter: Limiter = request.app.ctx.limiter
    key, ip_usage = await limiter.authenticate_counted(caller_of(request), count=body_error is None)
    if body_error is not None:
        raise body_error
    assert req is not None
    assert ip_usage is not None  # counted: nothing above refused the request
    unreadable: CorruptRecord | None = None
    try:
        stored = await receipts.prefetched_receipt_json(prefetched, req.receipt_id) if prefetched is not None else None
    except CorruptRecord as exc:  # answered below, after the key's limit, as a failed verification
        stored, unreadable = None, exc
    receipt: JSONObject | None = orjson.loads(stored) if stored is not None else None
    prev_hash = receipt.get("prev_receipt_hash") if receipt is not None else None
    prev_id_sent = (
        receipts.prefetch_receipt_id_by_hash(key.project_id, prev_hash)
        if isinstance(prev_hash, str) and receipt is not None and receipt.get("project_id") == key.project_id
        else None
    )
    key_usage = await limiter.hit_key(key)
    headers = ratelimit_headers([key_usage, ip_usage])
    if unreadable is not None:
        report_corrupt_record(request, unreadable)
        body = orjson.dumps(unreadable_receipt_result(req.receipt_id))
        return HTTPResponse(body, status=200, headers=headers, content_type=JSON)
    if receipt is None:
        raise NotFound("receipt not found (unknown id, or past its retention window)")
    if receipt.get("project_id") != key.project_id:
        raise Forbidden("this receipt belongs to another project")
    prev = await _find_prev(request, receipts, receipt, prev_id_sent)
    result = verify_receipt(
        receipt,
        request.app.ctx.settings.keyring,
        input_hash=req.input_hash,
        output_hash=req.output_hash,
        prev_receipt=prev,
    )
    return HTTPResponse(orjson.dumps(result), status=200, headers=headers, content_type=JSON)


async def _find_prev(
    request: Request, receipts: ReceiptStore, receipt: JSONObject, prev_id_sent: Any
) -> JSONObject | None:
    """The previous receipt the stored one links to, as stored (the verifier checks both)."""
    prev_hash = receipt.get("prev_receipt_hash")
    project_id = receipt.get("project_id")
    if not isinstance(prev_hash, str) or not isinstance(project_id, str):
        return None
    if prev_id_sent is not None:
        prev_id = await receipts.prefetched_text(prev_id_sent)
    else:
        prev_id = await receipts.find_receipt_id_by_hash(project_id, prev_hash)
    try:
        prev_json = await receipts.get_receipt_json(prev_id, project_id) if prev_id else None
    except CorruptRecord as exc:  # an unusable previous record is not found: chain_link fails
        report_corrupt_record(request, exc)
        return None
    prev: JSONObject | None = orjson.loads(prev_json) if prev_json is not None else None
    # The index keys a truncated hash: a receipt with another hash is not the previous one.
    return prev if prev is not None and prev.get("receipt_hash") == prev_hash else None
