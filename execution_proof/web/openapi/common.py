"""Building blocks of the OpenAPI document: versions, media types, the error codes (from
``receipts.errors``), and small schema helpers shared by the schemas, responses and paths."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from execution_proof.receipts.errors import ERROR_CODES as ERROR_CODES  # re-exported: the document is made from it

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1.0.0"
JSON = "application/json"
HTML = "text/html"
OPENAPI_HEADERS = {"Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"}

ULID = "[0-7][0-9A-HJKMNP-TV-Z]{25}"
PROVIDER_ID = "^[A-Za-z0-9_-]{1,255}$"
# Python's str.strip() whitespace: a token of only these characters is refused.
_PY_WHITESPACE = (
    "\\t\\n\\u000b\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def header_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/headers/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _string(description: str, **constraints: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **constraints}


def _obj(properties: dict[str, Any], required: Iterable[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A closed object; every property required unless ``required`` says otherwise."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties if required is None else required),
        "additionalProperties": False,
        **extra,
    }


# --- component schemas ------------------------------------------------------------------------

# No ``format: date-time``: generated clients would turn the value into a date object and write
# it back differently (``+00:00``, other digits), while a receipt's hash covers these exact bytes.
TIMESTAMP = {
    "type": "string",
    "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$",
    "description": "UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339), kept as this exact string: it is signed.",
    "examples": ["2026-11-03T09:15:27.412Z"],
}
COUNT = {"type": "integer", "minimum": 0}
