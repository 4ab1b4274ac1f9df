"""Request-body rules shared by the JSON endpoints: media type, size, one JSON object."""

from __future__ import annotations

from sanic import Request

from execution_proof.receipts.errors import PayloadTooLarge
from execution_proof.receipts.shapes import JSONObject
from execution_proof.usecases.creating import json_object


def check_body_size(request: Request, limit: int) -> None:
    """413 when the body exceeds ``limit`` bytes (the socket already caps it at 16 KB)."""
    if request.body is not None and len(request.body) > limit:
        raise PayloadTooLarge(f"request body must be at most {limit} bytes", {"limit_bytes": limit})


def json_body(request: Request) -> JSONObject:
    """The body as a JSON object; 415 unless ``Content-Type`` is application/json, then 400
    unless it is one JSON object (``usecases.creating.json_object``: the rule a create uses)."""
    return json_object(request.headers.get("content-type"), request.body)
