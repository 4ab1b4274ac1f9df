"""The transparency log's public routes (docs/log.md; usecases/log_routes.py): the log's
description, its checkpoint, tiles and entry bundles (C2SP tlog-tiles), a receipt's
tlog-proof, and the checkpoints' time-stamps. Public, no key, CORS ``*``.
"""

from __future__ import annotations

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.usecases.limiting import Admission
from execution_proof.web.auth import caller_of, services_of
from execution_proof.web.responses import Answer

bp = Blueprint("log")
GET_HEAD = ["GET", "HEAD"]
"""Every route of the log answers HEAD like GET, without a body, counted alike (docs/log.md, "Routes")."""

TEXT = "text/plain; charset=utf-8"
OCTETS = "application/octet-stream"
JSON = "application/json"
CORS = {"Access-Control-Allow-Origin": "*"}
CHECKPOINT_CACHE = "public, max-age=2"
FULL_TILE_CACHE = "public, max-age=31536000, immutable"
PARTIAL_TILE_CACHE = "public, max-age=60"
STAMPS_CACHE = "public, max-age=3600"
MAX_WAIT_S = 10


def _headers(admission: Admission[None], cache: str) -> dict[str, str]:
    return {**CORS, **admission.headers(), "Cache-Control": cache}


def prefer_wait(request: Request) -> float:
    """Seconds of ``Prefer: wait=N`` (RFC 7240), at most 10; 0 when absent or malformed."""
    for header in request.headers.getall("prefer", []):
        for preference in header.split(","):
            name, _, value = preference.strip().partition("=")
            value = value.strip()
            if name.strip().lower() == "wait" and value.isdigit() and len(value) <= 6:
                return float(min(int(value), MAX_WAIT_S))
    return 0.0


@bp.route("/v1/log", methods=GET_HEAD)
async def describe(request: Request) -> HTTPResponse:
    here = f"{request.scheme}://{request.host}/v1/log/"
    answer = await services_of(request).log_routes.describe(caller_of(request), here)
    return Answer(
        orjson.dumps(answer.value), headers=_headers(answer.admission, "public, max-age=60"), content_type=JSON
    )


@bp.route("/v1/log/checkpoint", methods=GET_HEAD)
async def checkpoint(request: Request) -> HTTPResponse:
    answer = await services_of(request).log_routes.checkpoint(caller_of(request))
    return Answer(answer.value, headers=_headers(answer.admission, CHECKPOINT_CACHE), content_type=TEXT)


@bp.route("/v1/log/tile/<path:path>", methods=GET_HEAD)
async def tile(request: Request, path: str) -> HTTPResponse:
    answer = await services_of(request).log_routes.tile(caller_of(request), path)
    cache = FULL_TILE_CACHE if answer.lasting else PARTIAL_TILE_CACHE
    return Answer(answer.value, headers=_headers(answer.admission, cache), content_type=OCTETS)


@bp.route("/v1/receipts/<receipt_id:str>/log-proof", methods=GET_HEAD)
async def log_proof(request: Request, receipt_id: str) -> HTTPResponse:
    answer = await services_of(request).log_routes.proof(caller_of(request), receipt_id)
    return Answer(answer.value, headers=_headers(answer.admission, CHECKPOINT_CACHE), content_type=TEXT)


@bp.route("/v1/log/checkpoints/<size:str>/timestamps", methods=GET_HEAD)
async def timestamps(request: Request, size: str) -> HTTPResponse:
    """Every kept RFC 3161 time-stamp of the checkpoint of that size (and the checkpoint as
    published); the latest checkpoint answers with an empty list until it is stamped."""
    answer = await services_of(request).log_routes.timestamps(caller_of(request), size)
    cache = STAMPS_CACHE if answer.lasting else CHECKPOINT_CACHE
    return Answer(answer.value, headers=_headers(answer.admission, cache), content_type=JSON)
