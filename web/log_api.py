"""The transparency log's public routes (docs/log.md): the log's description, its checkpoint,
tiles and entry bundles (C2SP tlog-tiles), a receipt's tlog-proof, and the checkpoints'
time-stamps. Public, no key, counted per address like ``GET /v1/public-key``, CORS ``*``."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from sanic import Blueprint, HTTPResponse, Request

from kv.log_reader import LogDataMissing, LogReader, bundle_slice
from kv.store import Store
from receipts import note, tlog
from receipts.errors import LogPending, LogUnavailable, NotFound
from receipts.ids import is_receipt_id
from receipts.limits import ratelimit_headers
from receipts.policy import Policy

bp = Blueprint("log")

TEXT = "text/plain; charset=utf-8"
OCTETS = "application/octet-stream"
CORS = {"Access-Control-Allow-Origin": "*"}
CHECKPOINT_CACHE = "public, max-age=2"
FULL_TILE_CACHE = "public, max-age=31536000, immutable"
PARTIAL_TILE_CACHE = "public, max-age=60"
WAIT_POLL_S = 0.05
MAX_WAIT_S = 10


@dataclass
class LogService:
    """What the routes and the create handler need of the log."""

    store: Store
    origin: str
    verifier: note.Verifier
    policy: Policy | None = None
    reader: LogReader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = LogReader(self.store, self.origin)

    async def published(self) -> tuple[note.Checkpoint, str] | None:
        raw = await self.store.log_checkpoint(self.origin)
        if not raw:
            return None
        text = raw.decode()
        return note.parse_checkpoint(note.parse_note(text).text), text

    async def proof(self, receipt_id: str) -> tuple[int, str] | None:
        """(index, tlog-proof text) against the published checkpoint; None while pending."""
        index = await self.store.log_index(receipt_id)
        if index is None:
            return None
        published = await self.published()
        if published is None or published[0].size <= index:
            return None
        checkpoint, text = published
        try:
            path = await self.reader.compute(checkpoint.size, lambda view: view.inclusion_proof(index))
        except LogDataMissing:
            return None
        return index, note.TlogProof(index, tuple(path), text).encode()

    async def bundle_log(self, receipt_id: str) -> tuple[str | None, bytes]:
        """(tlog-proof text or None while pending, the JSON list of its checkpoint's
        time-stamps) for a bundle. The proof is against the first time-stamped checkpoint
        that covers the receipt, so the time-stamps bound the receipt's time as tightly as
        the log can; without one (none yet, or no TSA), against the latest checkpoint."""
        index = await self.store.log_index(receipt_id)
        if index is None:
            return None, b"[]"
        stamped = await self.store.log_stamp_covering(self.origin, index)
        if stamped is not None:
            size, raw = stamped
            record = orjson.loads(raw)
            try:
                path = await self.reader.compute(size, lambda view: view.inclusion_proof(index))
            except LogDataMissing:
                path = None
            if path is not None:
                proof = note.TlogProof(index, tuple(path), record["checkpoint"]).encode()
                return proof, orjson.dumps(record["timestamps"])
        found = await self.proof(receipt_id)
        return (found[1] if found else None), b"[]"

    async def wait_for_proof(self, receipt_id: str, seconds: float) -> tuple[int, str] | None:
        deadline = time.monotonic() + seconds
        while True:
            found = await self.proof(receipt_id)
            if found is not None or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(WAIT_POLL_S)

    def proof_url(self, receipt_id: str) -> str:
        return f"/v1/receipts/{receipt_id}/log-proof"


def log_of(request: Request) -> LogService:
    service: LogService | None = getattr(request.app.ctx, "log", None)
    if service is None:
        raise LogUnavailable("this service runs without a transparency log (no LOG_SIGNING_KEY is set)")
    return service


async def _counted(request: Request) -> dict[str, str]:
    usage = await request.app.ctx.limiter.hit_ip(request, "public_key")
    return {**CORS, **ratelimit_headers([usage])}


def prefer_wait(request: Request) -> float:
    """Seconds of ``Prefer: wait=N`` (RFC 7240), at most 10; 0 when absent or malformed."""
    for header in request.headers.getall("prefer", []):
        for preference in header.split(","):
            name, _, value = preference.strip().partition("=")
            value = value.strip()
            if name.strip().lower() == "wait" and value.isdigit() and len(value) <= 6:
                return float(min(int(value), MAX_WAIT_S))
    return 0.0


async def create_log_object(request: Request, receipt_id: str) -> dict[str, Any] | None:
    """The create response's ``log`` member (None when the service has no log)."""
    service: LogService | None = getattr(request.app.ctx, "log", None)
    if service is None:
        return None
    wait = prefer_wait(request)
    if wait > 0:
        found = await service.wait_for_proof(receipt_id, wait)
        if found is not None:
            return {"index": found[0], "proof": found[1]}
    return {"status": "pending", "proof_url": service.proof_url(receipt_id)}


@bp.get("/v1/log")
async def describe(request: Request) -> HTTPResponse:
    headers = await _counted(request)
    service = log_of(request)
    policy = service.policy
    witnesses = [
        {"name": w.name, "vkey": w.key.encode(), "url": w.url} for w in (policy.witnesses.values() if policy else [])
    ]
    body = {
        "origin": service.origin,
        "log_vkey": service.verifier.encode(),
        "checkpoint_url": "/v1/log/checkpoint",
        "witnesses": witnesses,
        "policy": policy.text if policy else "",
    }
    return HTTPResponse(
        orjson.dumps(body), headers={**headers, "Cache-Control": "public, max-age=60"}, content_type="application/json"
    )


@bp.get("/v1/log/checkpoint")
async def checkpoint(request: Request) -> HTTPResponse:
    headers = await _counted(request)
    published = await log_of(request).published()
    if published is None:
        raise NotFound("the log has published no checkpoint yet")
    return HTTPResponse(published[1], headers={**headers, "Cache-Control": CHECKPOINT_CACHE}, content_type=TEXT)


@bp.get("/v1/log/tile/<path:path>")
async def tile(request: Request, path: str) -> HTTPResponse:
    headers = await _counted(request)
    service = log_of(request)
    level, index, width = _parse_tile_path(path)
    published = await service.published()
    size = published[0].size if published else 0
    have = tlog.tile_width(size, 0 if level == "entries" else int(level), index)
    # A full tile exists once complete; a partial one of any width up to what is published
    # (older checkpoints' partial tiles are prefixes of the same stored value).
    if width > have:
        raise NotFound("no such tile in the published tree")
    if level == "entries":
        data = bundle_slice(await service.store.log_bundle(service.origin, index), width)
    else:
        raw = await service.store.log_tile(service.origin, int(level), index, width)
        data = raw if len(raw) == width * tlog.HASH_SIZE else None
    if data is None:
        raise NotFound("the tile is not in the store")
    cache = FULL_TILE_CACHE if width == tlog.TILE_WIDTH else PARTIAL_TILE_CACHE
    return HTTPResponse(data, headers={**headers, "Cache-Control": cache}, content_type=OCTETS)


def _parse_tile_path(path: str) -> tuple[str, int, int]:
    """(level or "entries", index, width) of ``<L>/<N>[.p/<W>]``; NotFound when malformed."""
    parts = path.split("/")
    width = tlog.TILE_WIDTH
    if len(parts) >= 3 and parts[-2].endswith(".p"):
        raw_width = parts[-1]
        if not raw_width.isdigit() or len(raw_width) > 3 or raw_width.startswith("0") or not 1 <= int(raw_width) <= 255:
            raise NotFound("no such tile (a partial width is 1-255)")
        width = int(raw_width)
        parts = [*parts[:-2], parts[-2][:-2]]
    level = parts[0] if parts else ""
    if level != "entries" and (
        not level.isdigit() or len(level) > 2 or (level != "0" and level.startswith("0")) or int(level) > 63
    ):
        raise NotFound("no such tile (the level is 0-63 or entries)")
    try:
        index = tlog.parse_tile_index(parts[1:])
    except ValueError:
        raise NotFound("no such tile (malformed index)") from None
    return level, index, width


@bp.get("/v1/receipts/<receipt_id:str>/log-proof")
async def log_proof(request: Request, receipt_id: str) -> HTTPResponse:
    headers = await _counted(request)
    service = log_of(request)
    if not is_receipt_id(receipt_id) or await service.store.get_receipt_json(receipt_id) is None:
        raise NotFound("receipt not found (unknown id, or past its retention window)")
    found = await service.proof(receipt_id)
    if found is None:
        raise LogPending("no published checkpoint covers this receipt yet; try again in a second")
    return HTTPResponse(found[1], headers={**headers, "Cache-Control": CHECKPOINT_CACHE}, content_type=TEXT)


@bp.get("/v1/log/checkpoints/<size:str>/timestamps")
async def timestamps(request: Request, size: str) -> HTTPResponse:
    """Every kept RFC 3161 time-stamp of the checkpoint of that size (and the checkpoint as
    published); the latest checkpoint answers with an empty list until it is stamped."""
    headers = await _counted(request)
    service = log_of(request)
    if not size.isdigit() or len(size) > 20 or (len(size) > 1 and size.startswith("0")):
        raise NotFound("no time-stamps for a checkpoint of that size")
    record = await service.store.log_stamp(service.origin, int(size))
    if record is not None:
        body = orjson.dumps({"tree_size": int(size), **orjson.loads(record)})
        cache = "public, max-age=3600"
    else:
        published = await service.published()
        if published is None or int(size) != published[0].size:
            raise NotFound("no time-stamps for a checkpoint of that size (none kept, or past retention)")
        body = orjson.dumps({"tree_size": published[0].size, "checkpoint": published[1], "timestamps": []})
        cache = CHECKPOINT_CACHE
    return HTTPResponse(body, headers={**headers, "Cache-Control": cache}, content_type="application/json")
