"""``GET /v1/receipts?input_hash=...``: a project's own receipts by hash (usecases/searching.py)."""

from __future__ import annotations

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.web.auth import caller_of, services_of, with_caller
from execution_proof.web.receipts_api import JSON, splice
from execution_proof.web.responses import Answer

bp = Blueprint("search")


@bp.get("/v1/receipts")
async def search_receipts(request: Request) -> HTTPResponse:
    query = {name: list(values) for name, values in request.get_args(keep_blank_values=True).items()}
    found = await services_of(request).searcher.search(caller_of(request), query)
    with_caller(request, found.admission.caller)
    body = splice(
        [
            ("ok", b"true"),
            ("receipts", b"[" + b",".join(found.receipts) + b"]"),
            ("next_cursor", orjson.dumps(found.next_cursor)),
        ]
    )
    headers = {"Cache-Control": "no-store", **found.admission.headers()}
    return Answer(body, status=200, headers=headers, content_type=JSON)
