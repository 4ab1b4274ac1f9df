"""Request-body rules shared by the JSON endpoints: media type, size, one JSON object."""

from __future__ import annotations

from typing import Any

from sanic import Request

from execution_proof.receipts.errors import PayloadTooLarge, UnsupportedMediaType
from execution_proof.receipts.model import parse_json_object


def check_body_size(request: Request, limit: int) -> None:
    """413 when the body exceeds ``limit`` bytes (the socket already caps it at 16 KB)."""
    if request.body is not None and len(request.body) > limit:
        raise PayloadTooLarge(f"request body must be at most {limit} bytes", {"limit_bytes": limit})


def json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object; 415 unless ``Content-Type`` is application/json."""
    media_type = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType("Content-Type must be application/json")
    return parse_json_object(request.body or b"")
