"""Search a project's own receipts by input or output hash, or both.

``GET /v1/receipts?input_hash=sha256:...`` (or ``?output_hash=``, or both: the receipts with
both hashes), Bearer API key, newest first, paginated with an opaque cursor. With both, the
input hash's index is paged and each page keeps the receipts whose output hash matches too,
so a page costs what a one-hash page costs (it may hold fewer receipts, even none, while
``next_cursor`` says more follow). Only the key's own project is ever searched: the
index keys carry the project id (``kv.keys.search_index_key``), so another project's
receipts with the same hash are never seen. Counts like ``POST /v1/verify``: the address's
authenticated-request limit and the key's per-minute limit.
"""

from __future__ import annotations

import binascii

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.encoding import b64url_decode, b64url_encode, is_hash_str
from execution_proof.receipts.errors import BadRequest
from execution_proof.receipts.ids import is_receipt_id, receipt_slot_tag, slot_tag
from execution_proof.receipts.limits import ratelimit_headers
from execution_proof.usecases.limiting import Limiter
from execution_proof.web.auth import caller_of
from execution_proof.web.receipts_api import JSON, _splice

bp = Blueprint("search")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
SEARCH_FIELDS = ("input_hash", "output_hash")
QUERY_PARAMS = frozenset((*SEARCH_FIELDS, "limit", "cursor"))


def encode_cursor(receipt_id: str) -> str:
    """Opaque to clients: the last receipt id of the page, base64url-encoded."""
    return b64url_encode(receipt_id.encode("ascii"))


def decode_cursor(cursor: str, project_id: str) -> str:
    """The receipt id a cursor names; 400 unless it is one of this project's ids."""
    try:
        receipt_id = b64url_decode(cursor).decode("ascii")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        receipt_id = ""
    if not is_receipt_id(receipt_id) or receipt_slot_tag(receipt_id) != slot_tag(project_id):
        raise BadRequest("cursor is not valid; pass next_cursor from the previous page unchanged", {"field": "cursor"})
    return receipt_id


def _one(request: Request, name: str) -> str | None:
    values = request.get_args(keep_blank_values=True).getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"{name} may be given once", {"field": name})
    return str(values[0])


def parse_limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}", {"field": "limit", "max": MAX_LIMIT})
    return int(value)


def _matches(receipt_json: bytes, wanted: dict[str, str]) -> bool:
    receipt = orjson.loads(receipt_json)
    return all(receipt.get(name) == value for name, value in wanted.items())


@bp.get("/v1/receipts")
async def search_receipts(request: Request) -> HTTPResponse:
    limiter: Limiter = request.app.ctx.limiter
    caller = caller_of(request)
    key = await limiter.authenticate_limited(caller)
    unknown = sorted(set(request.get_args(keep_blank_values=True)) - QUERY_PARAMS)
    if unknown:
        raise BadRequest("unknown query parameters", {"fields": unknown, "allowed": sorted(QUERY_PARAMS)})
    given = {name: value for name in SEARCH_FIELDS if (value := _one(request, name)) is not None}
    if not given:
        raise BadRequest("give input_hash or output_hash (sha256:<64 hex>), or both", {"fields": list(SEARCH_FIELDS)})
    for field, hash_str in given.items():
        if not is_hash_str(hash_str):
            raise BadRequest(f"{field} must be sha256: followed by 64 hex digits", {"field": field})
    # The first given field drives the index; any other must match too.
    field, hash_str = next(iter(given.items()))
    also = {name: value.lower() for name, value in given.items() if name != field}
    limit = parse_limit(_one(request, "limit"))
    cursor = _one(request, "cursor")
    after = decode_cursor(cursor, key.project_id) if cursor is not None else None
    ip_usage = await limiter.hit_ip(caller.client, "authenticated")
    key_usage = await limiter.hit_key(key)
    receipts: ReceiptStore = request.app.ctx.store.receipts
    found, last = await receipts.search_receipts(key.project_id, field, hash_str.lower(), limit, after)
    if also:
        found = [receipt for receipt in found if _matches(receipt, also)]
    body = _splice(
        [
            ("ok", b"true"),
            ("receipts", b"[" + b",".join(found) + b"]"),
            ("next_cursor", orjson.dumps(encode_cursor(last) if last else None)),
        ]
    )
    headers = {"Cache-Control": "no-store", **ratelimit_headers([key_usage, ip_usage])}
    return HTTPResponse(body, status=200, headers=headers, content_type=JSON)
