"""``components.headers`` and ``components.responses`` of the OpenAPI document, the error
response builder and the parameters the paths share."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from execution_proof.web.openapi.common import COUNT, ERROR_CODES, HTML, JSON, header_ref, schema_ref

# --- headers ---------------------------------------------------------------------------------

RATE_LIMIT_DESCRIPTION = "IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers), one item per limit applied."
HEADERS: dict[str, Any] = {
    "X-Request-Id": {
        "description": "The request's id, on every response (also `request_id` of an error body).",
        "required": True,
        "schema": schema_ref("RequestId"),
    },
    "Retry-After": {
        "description": "Whole seconds until the request may succeed.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    },
    "RateLimit-Policy": {
        "description": RATE_LIMIT_DESCRIPTION + ' Example: `"key";q=60;w=60`.',
        "required": True,
        "schema": {"type": "string", "pattern": '^"[a-z_-]+";q=[0-9]+;w=[0-9]+(, "[a-z_-]+";q=[0-9]+;w=[0-9]+)*$'},
    },
    "RateLimit": {
        "description": RATE_LIMIT_DESCRIPTION + ' Example: `"key";r=59;t=41`.',
        "required": True,
        "schema": {"type": "string", "pattern": '^"[a-z_-]+";r=[0-9]+;t=[0-9]+(, "[a-z_-]+";r=[0-9]+;t=[0-9]+)*$'},
    },
    "X-Service-Plan": {"description": "The key's plan.", "required": True, "schema": schema_ref("Plan")},
    "X-Service-Monthly-Limit": {"description": "Receipts per month.", "required": True, "schema": COUNT},
    "X-Service-Monthly-Used": {"description": "Receipts issued this month.", "required": True, "schema": COUNT},
    "X-Service-Monthly-Remaining": {"description": "Receipts left this month.", "required": True, "schema": COUNT},
    "X-Service-Monthly-Reset-At": {
        "description": "First instant of the next UTC month.",
        "required": True,
        "schema": schema_ref("Timestamp"),
    },
    "Location": {"description": "The receipt's address.", "required": True, "schema": {"type": "string"}},
    "Access-Control-Allow-Origin": {
        "description": "Any page may read it.",
        "required": True,
        "schema": {"const": "*"},
    },
    "Cache-Control": {"description": "Caching rule.", "required": True, "schema": {"type": "string"}},
    "Content-Security-Policy": {
        "description": "The page runs only its own scripts and styles.",
        "required": True,
        "schema": {"type": "string"},
    },
    "Allow": {
        "description": "The methods the resource supports.",
        "required": True,
        "schema": {"type": "string"},
    },
}
QUOTA_HEADERS = (
    "X-Service-Plan",
    "X-Service-Monthly-Limit",
    "X-Service-Monthly-Used",
    "X-Service-Monthly-Remaining",
    "X-Service-Monthly-Reset-At",
)
RATE_HEADERS = ("RateLimit-Policy", "RateLimit")

# --- responses -------------------------------------------------------------------------------

RESPONSES: dict[str, Any] = {}
STATUS_TEXT = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    413: "Payload too large",
    415: "Unsupported media type",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}
ERROR_MEANINGS = {
    "bad_request": "validation failed; `details` names the field",
    "forbidden_content": "a string looks like personal data, a credential or a key (never echoed)",
    "unauthorized": "missing, malformed, unknown or revoked API key",
    "forbidden": "scope mismatch, another project's receipt, a suspended project, or a failed human check",
    "not_found": "no such receipt, project or resource",
    "method_not_allowed": "the path exists but not with this method",
    "idempotency_conflict": "the Idempotency-Key was already used with another body",
    "payload_too_large": "the body exceeds the endpoint's limit",
    "unsupported_media_type": "Content-Type is not application/json",
    "rate_limited": "a per-minute (or per-day) limit is used up",
    "quota_exceeded": "the monthly receipt quota is used up",
    "internal_error": "unexpected failure, or an outside provider could not be reached",
    "signing_key_unavailable": "no signing key is configured",
    "store_unavailable": "the store did not answer (or did not acknowledge a write); retry",
    "chain_contention": "the project's chain kept moving; retry",
    "claim_pending": "the checkout is not (yet) claimable",
    "already_claimed": "the key was already revealed",
    "claim_expired": "the checkout is older than the claim window",
    "claim_not_ready": "payments are not configured",
    "not_configured": "the human verification is not configured",
    "log_unavailable": "the service runs without a transparency log (no `LOG_SIGNING_KEY`)",
    "log_pending": "no published checkpoint covers the receipt yet; retry after `Retry-After`",
    "not_in_log": "the receipt exists but is not in this log: issued without a log, or for another log (another "
    "origin or key)",
    "log_backlog": "more entries wait for the transparency log than `LOG_MAX_PENDING`: nothing was recorded and "
    "no quota used; retry after `Retry-After`",
}


def _pascal(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


def error_response(status: int, codes: Iterable[str], headers: Iterable[str] = (), **inline: Any) -> dict[str, str]:
    """A ``$ref`` to the shared error response for ``status`` narrowed to ``codes``."""
    codes = list(codes)
    assert all(code in ERROR_CODES for code in codes), codes
    header_names = list(headers)
    name = f"Error{status}" + "".join(_pascal(c) for c in codes) + "".join(n.replace("-", "") for n in inline)
    if name not in RESPONSES:
        response_headers: dict[str, Any] = {h: header_ref(h) for h in header_names}
        response_headers.update(inline)
        meaning = "; ".join(f"`{code}`: {ERROR_MEANINGS[code]}" for code in codes)
        RESPONSES[name] = {
            "description": f"{STATUS_TEXT[status]}. {meaning}.",
            "headers": response_headers,
            "content": {
                JSON: {
                    "schema": {
                        "allOf": [
                            schema_ref("Error"),
                            {
                                "type": "object",
                                "properties": {"error": {"type": "object", "properties": {"code": {"enum": codes}}}},
                            },
                        ]
                    }
                }
            },
        }
    return {"$ref": f"#/components/responses/{name}"}


def ok_json(description: str, schema: str, headers: Iterable[str] = ()) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {h: header_ref(h) for h in headers},
        "content": {JSON: {"schema": schema_ref(schema)}},
    }


def issue_response(description: str) -> dict[str, Any]:
    """``IssueResponse``, for 201 (a new receipt) and for a 200 replay."""
    return ok_json(description, "IssueResponse", ["Location", *QUOTA_HEADERS, *RATE_HEADERS])


def html_page(description: str, headers: Iterable[str] = ("Content-Security-Policy",)) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {h: header_ref(h) for h in headers},
        "content": {HTML: {"schema": {"type": "string"}}},
    }


OPTIONAL_RETRY_AFTER = {
    "Retry-After": {
        "description": "Whole seconds to wait; sent with `store_unavailable` (not with the configuration codes).",
        "required": False,
        "schema": {"type": "integer", "minimum": 1},
    }
}
E400 = error_response(400, ["bad_request"])
E400_CREATE = error_response(400, ["bad_request", "forbidden_content"])
E401 = error_response(401, ["unauthorized"])
E403 = error_response(403, ["forbidden"])
E404 = error_response(404, ["not_found"])
E413 = error_response(413, ["payload_too_large"])
E415 = error_response(415, ["unsupported_media_type"])
E429 = error_response(429, ["rate_limited"], ["Retry-After", *RATE_HEADERS])
E429_CREATE = error_response(429, ["rate_limited", "quota_exceeded"], ["Retry-After", *RATE_HEADERS])
E503 = error_response(503, ["store_unavailable"], ["Retry-After"])
SIGNING_500 = error_response(500, ["signing_key_unavailable"])
METHOD_NOT_ALLOWED = error_response(405, ["method_not_allowed"], ["Allow"])

BEARER: list[dict[str, list[str]]] = [{"apiKey": []}]
PUBLIC: list[dict[str, list[str]]] = []


def _query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


def _json_body(schema: str, description: str) -> dict[str, Any]:
    return {"required": True, "description": description, "content": {JSON: {"schema": schema_ref(schema)}}}


RECEIPT_REF_PARAM = {
    "name": "receipt_id",
    "in": "path",
    "required": True,
    "description": (
        "A receipt id; or a receipt hash (`sha256:<64 hex>`) together with `?project_id=` "
        "(without it: 400), to follow a chain by its `prev_receipt_hash`."
    ),
    "schema": {"anyOf": [schema_ref("ReceiptId"), schema_ref("HashInput")]},
}
RECEIPT_ID_PARAM = {
    "name": "receipt_id",
    "in": "path",
    "required": True,
    "description": "A receipt id.",
    "schema": schema_ref("ReceiptId"),
}
