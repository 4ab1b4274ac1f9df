"""Request-body rules shared by the use cases that take a JSON body: size, media type, one
JSON object. The web layer hands a body over as it came (its media type and bytes)."""

from __future__ import annotations

from execution_proof.receipts.errors import PayloadTooLarge, UnsupportedMediaType
from execution_proof.receipts.model import parse_json_object
from execution_proof.receipts.shapes import JSONObject


def check_size(body: bytes | None, limit: int) -> None:
    """413 when the body exceeds ``limit`` bytes (the socket already caps it at 16 KB)."""
    if body is not None and len(body) > limit:
        raise PayloadTooLarge(f"request body must be at most {limit} bytes", {"limit_bytes": limit})


def require_json(content_type: str | None) -> None:
    """415 unless ``content_type`` is application/json (parameters aside)."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType("Content-Type must be application/json")


def json_object(content_type: str | None, body: bytes | None) -> JSONObject:
    """A request body that must be one JSON object: 415 unless ``content_type`` is
    application/json, then 400 (``BadRequest``) unless the bytes are one JSON object."""
    require_json(content_type)
    return parse_json_object(body or b"")
