"""Request ids: made by the service for every request, never taken from the client."""

from __future__ import annotations

from typing import Any

from execution_proof.receipts.ids import new_ulid


def new_request_id() -> str:
    return "req_" + new_ulid()


def request_id_of(request: Any) -> str:
    """The request's id, made on first use (the response envelope, an error body, a log line)."""
    ctx = getattr(request, "ctx", None)
    if ctx is None:
        return new_request_id()
    request_id = getattr(ctx, "request_id", None)
    if request_id is None:
        request_id = new_request_id()
        ctx.request_id = request_id
    return str(request_id)
