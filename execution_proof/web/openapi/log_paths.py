"""``paths`` of the transparency log's routes (docs/log.md)."""

from __future__ import annotations

from typing import Any

from execution_proof.web.openapi.responses import (
    E404,
    E429,
    PUBLIC,
    RATE_HEADERS,
    RECEIPT_ID_PARAM,
    error_response,
    ok_json,
)

TEXT = "text/plain; charset=utf-8"
OCTETS = "application/octet-stream"
E503_LOG = error_response(503, ["store_unavailable", "log_unavailable"])
E409_PENDING = error_response(409, ["log_pending"], ["Retry-After"])
E404_LOG = error_response(404, ["not_found", "not_in_log"])
LOG_HEADERS = ["Cache-Control", "Access-Control-Allow-Origin", *RATE_HEADERS]


def _text(description: str, media: str = TEXT) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {},
        "content": {media: {"schema": {"type": "string", **({"format": "binary"} if media == OCTETS else {})}}},
    }


def _get(
    operation_id: str, summary: str, description: str, ok: dict[str, Any], scope: str = "public_key", **more: Any
) -> dict[str, Any]:
    """The GET operation and its HEAD twin: the same answer without a body, counted alike
    (docs/log.md, "Routes"), as a static server in front of the store answers."""
    responses = {"200": ok, **more.pop("responses", {}), "429": E429, "503": E503_LOG}
    limited = f" Public; limited per address (`{scope}`), CORS `*`."
    get = {
        "operationId": operation_id,
        "tags": ["Log"],
        "summary": summary,
        "description": description + limited,
        "security": PUBLIC,
        "responses": responses,
        **more,
    }
    head = {
        **get,
        "operationId": "head" + operation_id.removeprefix("get"),
        "summary": f"{summary} (headers only)",
        "description": "The same answer as GET, headers only (no body), counted against the same limit.",
        "responses": {status: _headers_only(response) for status, response in responses.items()},
    }
    return {"get": get, "head": head}


def _headers_only(response: dict[str, Any]) -> dict[str, Any]:
    """A response as HEAD gives it: its description and headers, no content."""
    if "$ref" in response:
        return response
    return {key: value for key, value in response.items() if key != "content"}


def _tile_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}, "description": description}


LOG_PATHS: dict[str, Any] = {
    "/v1/log": _get(
        "getLog",
        "The log's description",
        "Origin, verifier key to pin, checkpoint URL, witnesses and their policy.",
        ok_json("The log.", "LogInfo", LOG_HEADERS),
    ),
    "/v1/log/checkpoint": _get(
        "getCheckpoint",
        "The latest checkpoint",
        "C2SP tlog-checkpoint: a signed note with the log's signature (and any cosignatures). Cached a few seconds.",
        _text("The signed checkpoint."),
        responses={"404": E404},
    ),
    "/v1/log/tile/{tile}": _get(
        "getTile",
        "A hash tile or an entry bundle",
        "C2SP tlog-tiles: `<L>/<N>[.p/<W>]` (hashes) or `entries/<N>[.p/<W>]` (entry bundles), `<N>` in "
        "x-prefixed three-digit elements. Full tiles are immutable (cached a year); 404 beyond the published tree.",
        _text("The tile's bytes.", OCTETS),
        scope="log_tiles",
        parameters=[_tile_param("tile", "The tile's path, e.g. `0/x001/234.p/17` or `entries/000`.")],
        responses={"404": E404},
    ),
    "/v1/receipts/{receipt_id}/log-proof": _get(
        "getLogProof",
        "A receipt's inclusion proof",
        "C2SP tlog-proof (`c2sp.org/tlog-proof@v1`, `index`, the inclusion path, a blank line, the checkpoint) "
        "against the latest published checkpoint, checked before it is served (the leaf is the receipt's entry, the "
        "path leads to the checkpoint's root). 404 `not_in_log`: the receipt was issued without a log or for another "
        "log (another origin or key).",
        _text("The proof."),
        parameters=[RECEIPT_ID_PARAM],
        responses={"404": E404_LOG, "409": E409_PENDING},
    ),
    "/v1/log/checkpoints/{size}/timestamps": _get(
        "getCheckpointTimestamps",
        "RFC 3161 time-stamps of a checkpoint",
        "Every RFC 3161 time-stamp kept for the checkpoint of that size (imprint: SHA-256 of the checkpoint's "
        "text); the latest checkpoint answers with an empty list until it is stamped, any other size 404.",
        ok_json("The time-stamps.", "CheckpointTimestamps", LOG_HEADERS),
        parameters=[{"name": "size", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}],
        responses={"404": E404},
    ),
}
