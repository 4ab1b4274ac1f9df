"""The transparency log's public routes (docs/log.md): the log's description, its checkpoint,
tiles and entry bundles (C2SP tlog-tiles), a receipt's tlog-proof, and the checkpoints'
time-stamps. Public, no key, CORS ``*``; counted per address like ``GET /v1/public-key``,
tiles and bundles by their own, generous, ``log_tiles`` limit.

What they answer is read by the log's read side (usecases/log_reading.py), from the log
store, where the integrator writes it.
"""

from __future__ import annotations

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.kv.logstore import LogStoreError
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import LogUnavailable, NotFound, ProofPending, StoreUnavailable
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.limits import ratelimit_headers
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import tile_name
from execution_proof.usecases.log_reading import LogService
from execution_proof.web.auth import caller_of

bp = Blueprint("log")
GET_HEAD = ["GET", "HEAD"]
"""Every route of the log answers HEAD like GET, without a body, counted alike (docs/log.md, "Routes")."""

TEXT = "text/plain; charset=utf-8"
OCTETS = "application/octet-stream"
CORS = {"Access-Control-Allow-Origin": "*"}
CHECKPOINT_CACHE = "public, max-age=2"
FULL_TILE_CACHE = "public, max-age=31536000, immutable"
PARTIAL_TILE_CACHE = "public, max-age=60"
MAX_WAIT_S = 10


def log_of(request: Request) -> LogService:
    service: LogService | None = getattr(request.app.ctx, "log", None)
    if service is None:
        raise LogUnavailable("this service runs without a transparency log (no LOG_SIGNING_KEY is set)")
    return service


async def _counted(request: Request, scope: str = "public_key") -> dict[str, str]:
    usage = await request.app.ctx.limiter.hit_ip(caller_of(request).client, scope)
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


def tiles_url(request: Request, service: LogService) -> str:
    """``LOG_PUBLIC_URL``, else ``/v1/log/`` on the address the request came to."""
    return service.public_url or f"{request.scheme}://{request.host}/v1/log/"


@bp.route("/v1/log", methods=GET_HEAD)
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
        "tiles_url": tiles_url(request, service),
        "witnesses": witnesses,
        "policy": policy.text if policy else "",
    }
    return HTTPResponse(
        orjson.dumps(body), headers={**headers, "Cache-Control": "public, max-age=60"}, content_type="application/json"
    )


@bp.route("/v1/log/checkpoint", methods=GET_HEAD)
async def checkpoint(request: Request) -> HTTPResponse:
    headers = await _counted(request)
    service = log_of(request)
    published = await service.published()
    if published is None:
        if service.unreadable:
            raise StoreUnavailable("the published checkpoint cannot be read; the log publishes it again shortly")
        raise NotFound("the log has published no checkpoint yet")
    return HTTPResponse(published.text, headers={**headers, "Cache-Control": CHECKPOINT_CACHE}, content_type=TEXT)


@bp.route("/v1/log/tile/<path:path>", methods=GET_HEAD)
async def tile(request: Request, path: str) -> HTTPResponse:
    headers = await _counted(request, "log_tiles")
    service = log_of(request)
    level, index, width = _parse_tile_path(path)
    published = await service.published()
    size = published.checkpoint.size if published else 0
    have = tlog.tile_width(size, 0 if level == "entries" else int(level), index)
    if width > have:
        raise NotFound("no such tile in the published tree")
    data = await _resource(service, level, index, width, have)
    if data is None:
        raise NotFound("the tile is not in the log store")
    cache = FULL_TILE_CACHE if width == tlog.TILE_WIDTH else PARTIAL_TILE_CACHE
    return HTTPResponse(data, headers={**headers, "Cache-Control": cache}, content_type=OCTETS)


async def _resource(service: LogService, level: str, index: int, width: int, have: int) -> bytes | None:
    """A tile or bundle of ``width``: as stored, else the prefix of the full one (partial
    tiles go once it exists), else of the published edge's (a width no checkpoint had)."""
    kind: int | str = level if level == "entries" else int(level)
    for stored_width in dict.fromkeys((width, tlog.TILE_WIDTH, have)):
        if stored_width < width:
            continue
        data = await service.fetch(tile_name(kind, index, stored_width))
        if data is None:
            continue
        if stored_width == width:
            return data
        if kind == "entries":
            entries = tlog.split_bundle(data)
            return b"".join(tlog.bundle_entry(e) for e in entries[:width]) if len(entries) >= width else None
        return data[: width * tlog.HASH_SIZE] if len(data) >= width * tlog.HASH_SIZE else None
    return None


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


@bp.route("/v1/receipts/<receipt_id:str>/log-proof", methods=GET_HEAD)
async def log_proof(request: Request, receipt_id: str) -> HTTPResponse:
    headers = await _counted(request)
    service = log_of(request)
    store: Store = request.app.ctx.store
    stored = await store.receipts.get_receipt_json(receipt_id) if is_receipt_id(receipt_id) else None
    if stored is None:
        raise NotFound("receipt not found (unknown id, or past its retention window)")
    found = await service.proof(orjson.loads(stored))
    if found is None:
        raise ProofPending("no published checkpoint covers this receipt yet; try again in a second")
    return HTTPResponse(found[1], headers={**headers, "Cache-Control": CHECKPOINT_CACHE}, content_type=TEXT)


@bp.route("/v1/log/checkpoints/<size:str>/timestamps", methods=GET_HEAD)
async def timestamps(request: Request, size: str) -> HTTPResponse:
    """Every kept RFC 3161 time-stamp of the checkpoint of that size (and the checkpoint as
    published); the latest checkpoint answers with an empty list until it is stamped."""
    headers = await _counted(request)
    service = log_of(request)
    if not size.isdigit() or len(size) > 20 or (len(size) > 1 and size.startswith("0")):
        raise NotFound("no time-stamps for a checkpoint of that size")
    try:
        record = await service.log.stamp(int(size)) if int(size) < 2**63 else None
    except LogStoreError as exc:
        raise StoreUnavailable("the log store is unreachable; try again shortly") from exc
    if record is not None:
        body = orjson.dumps({"tree_size": int(size), **orjson.loads(record)})
        cache = "public, max-age=3600"
    else:
        published = await service.published()
        if published is None or int(size) != published.checkpoint.size:
            raise NotFound("no time-stamps for a checkpoint of that size (none kept)")
        body = orjson.dumps({"tree_size": published.checkpoint.size, "checkpoint": published.text, "timestamps": []})
        cache = CHECKPOINT_CACHE
    return HTTPResponse(body, headers={**headers, "Cache-Control": cache}, content_type="application/json")
