"""Offline bundles: one receipt, the earlier receipts of its chain and the keys that signed
them, in one public JSON document that verifies without the service (docs/bundles.md).

``GET /v1/receipts/{receipt_id}/bundle[?depth=N]`` is public like the read (per-IP
``get_receipt`` limit, ``Access-Control-Allow-Origin: *``). Stored receipt bytes are spliced
in unchanged, so every receipt in the bundle is byte-for-byte what a read returns.
"""

from __future__ import annotations

from typing import TypedDict

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.errors import BadRequest, CorruptRecord, NotFound
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.limits import ratelimit_headers
from execution_proof.receipts.model import format_created_at
from execution_proof.receipts.shapes import Receipt
from execution_proof.receipts.signing import KeyRing
from execution_proof.receipts.verifier import BUNDLE_FORMAT, BUNDLE_VERSION
from execution_proof.usecases.log_reading import LogService
from execution_proof.web.auth import caller_of
from execution_proof.web.errors import report_corrupt_record
from execution_proof.web.info import base_url
from execution_proof.web.receipts_api import JSON, PUBLIC_READ_HEADERS, _splice

bp = Blueprint("bundles")

DEFAULT_DEPTH = 20
MAX_DEPTH = 100


class BundleKeys(TypedDict):
    """A bundle's ``keys`` member: ``GET /v1/public-key``'s shape."""

    keys: list[dict[str, str]]
    active_kid: str | None


def parse_depth(value: str | None) -> int:
    """``?depth=``: 0 to ``MAX_DEPTH`` earlier receipts; default ``DEFAULT_DEPTH``."""
    if value is None:
        return DEFAULT_DEPTH
    if not value.isascii() or not value.isdigit() or int(value) > MAX_DEPTH:
        raise BadRequest(f"depth must be a whole number from 0 to {MAX_DEPTH}", {"field": "depth", "max": MAX_DEPTH})
    return int(value)


async def collect_chain(
    request: Request, receipts: ReceiptStore, receipt: Receipt, depth: int
) -> tuple[list[bytes], list[Receipt], bool]:
    """Up to ``depth`` earlier receipts of ``receipt``'s project, newest first, following
    ``prev_receipt_hash`` through the project's hash index: (stored bytes, parsed, complete).

    ``complete`` is True when the segment ends at a receipt whose ``prev_receipt_hash`` is
    null (``receipt`` itself, when it starts its chain). A link that is not found (expired,
    deleted, or a branch naming a hash never issued) ends the segment incomplete, as does
    a stored record that cannot be used (``CorruptRecord``: logged and counted).
    """
    raw: list[bytes] = []
    parsed: list[Receipt] = []
    project_id = receipt["project_id"]
    current = receipt
    while isinstance(prev_hash := current.get("prev_receipt_hash"), str):
        if len(raw) >= depth:
            return raw, parsed, False
        prev_id = await receipts.find_receipt_id_by_hash(project_id, prev_hash)
        try:
            stored = await receipts.get_receipt_json(prev_id, project_id) if prev_id else None
        except CorruptRecord as exc:
            report_corrupt_record(request, exc)
            return raw, parsed, False
        if stored is None:
            return raw, parsed, False
        current = orjson.loads(stored)
        if current.get("receipt_hash") != prev_hash:  # the index keys a truncated hash
            return raw, parsed, False
        raw.append(stored)
        parsed.append(current)
    return raw, parsed, True


def bundle_keys(keyring: KeyRing, receipts: list[Receipt]) -> BundleKeys:
    """The public keys (``GET /v1/public-key`` entries) of every kid that signed one of
    ``receipts``, in first-use order. A kid the service does not know is left out, so a
    verifier fails closed on it."""
    entries: list[dict[str, str]] = []
    for receipt in receipts:
        kid = receipt.get("sig_kid")
        key = keyring.keys.get(kid) if isinstance(kid, str) else None
        if key is not None and all(entry["kid"] != kid for entry in entries):
            entries.append(key.to_json())
    return {"keys": entries, "active_kid": keyring.active_kid}


@bp.get("/v1/receipts/<receipt_id:str>/bundle")
async def get_bundle(request: Request, receipt_id: str) -> HTTPResponse:
    usage = await request.app.ctx.limiter.hit_ip(caller_of(request).client, "get_receipt")
    depth = parse_depth(request.get_args(keep_blank_values=True).get("depth"))
    receipts: ReceiptStore = request.app.ctx.store.receipts
    stored = await receipts.get_receipt_json(receipt_id) if is_receipt_id(receipt_id) else None
    if stored is None:
        raise NotFound("receipt not found (unknown id, or past its retention window)")
    receipt: Receipt = orjson.loads(stored)
    chain_raw, chain, complete = await collect_chain(request, receipts, receipt, depth)
    keyring: KeyRing = request.app.ctx.settings.keyring
    parts = [
        ("format", orjson.dumps(BUNDLE_FORMAT)),
        ("version", orjson.dumps(BUNDLE_VERSION)),
        ("created_at", orjson.dumps(format_created_at(request.app.ctx.clock_ms()))),
        ("service", orjson.dumps(base_url(request))),
        ("receipt", stored),
        ("keys", orjson.dumps(bundle_keys(keyring, [receipt, *chain]))),
        ("chain", b"[" + b",".join(chain_raw) + b"]"),
        ("chain_complete", orjson.dumps(complete)),
    ]
    log: LogService | None = getattr(request.app.ctx, "log", None)
    if log is not None:
        proof, stamps = await log.bundle_log(receipt)
        log_member = {"origin": log.origin, "log_vkey": log.verifier.encode(), "proof": proof}
        parts += [("log", orjson.dumps(log_member)), ("timestamps", stamps)]
    body = _splice(parts)
    headers = {**PUBLIC_READ_HEADERS, **ratelimit_headers([usage])}
    return HTTPResponse(body, status=200, headers=headers, content_type=JSON)
