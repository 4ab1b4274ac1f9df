"""The machine-readable API description (spec 9.2): ``GET /openapi.json``, OpenAPI 3.1.

The document is plain Python data built once at import; only its ``servers`` entry is filled
per request (``PUBLIC_BASE_URL``, else the address the request came to). The ``/docs`` page
is rendered from this same document (``reference_view``), so the two cannot drift apart, and
``tests/test_openapi.py`` fails when the app serves a route that is not described here.

Error responses: every error body is the one ``Error`` schema; each documented error status
narrows ``error.code`` to the codes that operation can answer with at that status.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sanic import Blueprint, HTTPResponse, Request

from receipts.apikeys import MAX_KEY_LEN, MIN_KEY_LEN
from receipts.model import (
    MAX_IDEMPOTENCY_HEADER_LEN,
    MAX_TAG_KEY_LEN,
    MAX_TAG_VALUE_LEN,
    MAX_TAGS,
    MAX_TAGS_BYTES,
    MAX_TEXT_LEN,
    RECEIPT_KINDS,
)
from web.bundles import BUNDLE_FORMAT, BUNDLE_VERSION, DEFAULT_DEPTH, MAX_DEPTH
from web.claims import MAX_TOKEN_LEN
from web.info import base_url
from web.receipts_api import CREATE_BODY_LIMIT, VERIFY_BODY_LIMIT
from web.search import DEFAULT_LIMIT, MAX_LIMIT

bp = Blueprint("openapi")

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
ERROR_CODES = (
    "bad_request",
    "forbidden_content",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "idempotency_conflict",
    "payload_too_large",
    "unsupported_media_type",
    "rate_limited",
    "quota_exceeded",
    "internal_error",
    "signing_key_unavailable",
    "store_unavailable",
    "chain_contention",
    "claim_pending",
    "already_claimed",
    "claim_expired",
    "claim_not_ready",
    "not_configured",
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

SCHEMAS: dict[str, Any] = {
    "Hash": _string(
        "`sha256:` and 64 lowercase hex digits, as the service stores and returns it.",
        pattern="^sha256:[0-9a-f]{64}$",
        examples=["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    ),
    "HashInput": _string(
        "`sha256:` and exactly 64 hex digits (either case; stored lowercase).",
        pattern="^sha256:[0-9a-fA-F]{64}$",
        examples=["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    ),
    "ReceiptId": _string("`rcpt_` + a 26-character ULID: opaque, time-sortable.", pattern=f"^rcpt_{ULID}$"),
    "ProjectId": _string("`prj_` + a 26-character ULID.", pattern=f"^prj_{ULID}$"),
    "ActorId": _string("`act_` + a 26-character ULID.", pattern=f"^act_{ULID}$"),
    "RequestId": _string("`req_` + a ULID; the same value as the `X-Request-Id` header.", pattern=f"^req_{ULID}$"),
    "Timestamp": TIMESTAMP,
    "ReceiptKind": {
        "type": "string",
        "enum": list(RECEIPT_KINDS),
        "description": "Document-level template; part of the idempotency key, not of the signed payload.",
    },
    "Plan": {"type": "string", "enum": ["free", "basic", "pro"]},
    "ApiKey": _string(
        "`eps_` + 43 base64url characters (256 random bits). Shown once; the service keeps only its SHA-256.",
        pattern="^eps_[A-Za-z0-9_-]{43}$",
    ),
    "Tags": {
        "type": ["object", "null"],
        "description": (
            f"Short, non-sensitive labels: at most {MAX_TAGS} keys of 1-{MAX_TAG_KEY_LEN} characters, string "
            f"values of 1-{MAX_TAG_VALUE_LEN} characters, at most {MAX_TAGS_BYTES} bytes as compact JSON. "
            "An empty object is stored as null."
        ),
        "minProperties": 1,
        "maxProperties": MAX_TAGS,
        "propertyNames": {"minLength": 1, "maxLength": MAX_TAG_KEY_LEN},
        "additionalProperties": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_VALUE_LEN},
    },
    "TagsInput": {
        "type": ["object", "null"],
        "description": (
            f"At most {MAX_TAGS} keys (counted after null values are dropped) of 1-{MAX_TAG_KEY_LEN} characters; "
            f"values are strings of 1-{MAX_TAG_VALUE_LEN} characters or null (dropped); the remaining tags must "
            f"serialise to at most {MAX_TAGS_BYTES} bytes of compact JSON (else 400). Arrays are refused. "
            "Keys and values are scanned for forbidden content (400 `forbidden_content`)."
        ),
        "propertyNames": {"minLength": 1, "maxLength": MAX_TAG_KEY_LEN},
        "additionalProperties": {"type": ["string", "null"], "minLength": 1, "maxLength": MAX_TAG_VALUE_LEN},
    },
    "Receipt": _obj(
        {
            "receipt_id": schema_ref("ReceiptId"),
            "project_id": schema_ref("ProjectId"),
            "actor_id": schema_ref("ActorId"),
            "created_at": schema_ref("Timestamp"),
            "input_hash": schema_ref("Hash"),
            "output_hash": nullable(schema_ref("Hash")),
            "params_hash": nullable(schema_ref("Hash")),
            "env_hash": nullable(schema_ref("Hash")),
            "code_ref": {"type": ["string", "null"], "maxLength": MAX_TEXT_LEN},
            "run_id": {"type": ["string", "null"], "maxLength": MAX_TEXT_LEN},
            "tags": schema_ref("Tags"),
            "receipt_kind": nullable(schema_ref("ReceiptKind")),
            "status": {"type": "string", "enum": ["issued", "pending"], "description": "Always `issued` at present."},
            "prev_receipt_hash": nullable(schema_ref("Hash")),
            "receipt_hash": {
                "$ref": "#/components/schemas/Hash",
                "description": (
                    "`sha256:` + hex SHA-256 of the RFC 8785 canonical JSON of this object without "
                    "`receipt_hash`, `signature`, `sig_kid` and `receipt_kind`."
                ),
            },
            "signature": _string(
                "base64url (no padding) Ed25519 signature over the ASCII bytes of `receipt_hash`.",
                pattern="^[A-Za-z0-9_-]{86}$",
            ),
            "sig_kid": _string("Id of the signing key (see `GET /v1/public-key`).", minLength=1),
            "chain_status": {"type": ["string", "null"], "enum": ["main", "branch", None]},
            "expected_prev_receipt_hash": nullable(schema_ref("Hash")),
        },
        description="A signed execution receipt; every field is always present (null when absent).",
    ),
    "CreateReceiptRequest": _obj(
        {
            "input_hash": schema_ref("HashInput"),
            "output_hash": nullable(schema_ref("HashInput")),
            "params_hash": nullable(schema_ref("HashInput")),
            "env_hash": nullable(schema_ref("HashInput")),
            "code_ref": {
                "type": ["string", "null"],
                "maxLength": MAX_TEXT_LEN,
                "description": "Scanned for forbidden content.",
            },
            "run_id": {
                "type": ["string", "null"],
                "maxLength": MAX_TEXT_LEN,
                "description": "Scanned for forbidden content.",
            },
            "tags": schema_ref("TagsInput"),
            "receipt_kind": nullable(schema_ref("ReceiptKind")),
            "prev_receipt_hash": {
                **nullable(schema_ref("HashInput")),
                "description": "Omitted or equal to the project's tip: `main`; any other hash: `branch`.",
            },
            "project_id": {
                "type": ["string", "null"],
                "description": "Debug only: must equal the key's project, else 403.",
            },
            "actor_id": {
                "type": ["string", "null"],
                "description": "Debug only: must equal the key's actor, else 403.",
            },
        },
        required=["input_hash"],
        description=(
            "Only hashes and short labels: unknown fields are refused (400). "
            "Strings that look like personal data, credentials or keys are refused (400 `forbidden_content`)."
        ),
    ),
    "Idempotency": _obj(
        {
            "hit": {
                "type": "boolean",
                "description": "false: newly issued (201); true: an earlier receipt replayed (200).",
            },
            "key": _string("Opaque replay key.", pattern="^ik_[A-Za-z0-9_-]{43}$"),
        }
    ),
    "Chain": _obj(
        {
            "status": {"type": ["string", "null"], "enum": ["main", "branch", None]},
            "expected_prev_receipt_hash": nullable(schema_ref("Hash")),
            "prev_receipt_hash": nullable(schema_ref("Hash")),
        }
    ),
    "Quota": _obj(
        {
            "plan": schema_ref("Plan"),
            "monthly_limit": COUNT,
            "monthly_used": COUNT,
            "monthly_remaining": COUNT,
            "monthly_reset_at": schema_ref("Timestamp"),
        }
    ),
    "IssueResponse": _obj(
        {
            "ok": {"const": True},
            "receipt": schema_ref("Receipt"),
            "idempotency": schema_ref("Idempotency"),
            "chain": schema_ref("Chain"),
            "quota": schema_ref("Quota"),
        },
        description=(
            "A new receipt (201, `idempotency.hit` false) or an idempotent replay of an earlier one "
            "(200, `idempotency.hit` true). One schema for both, so a generated client has one type to return."
        ),
    ),
    "ReceiptRead": _obj({"ok": {"const": True}, "receipt": schema_ref("Receipt")}),
    "SearchPage": _obj(
        {
            "ok": {"const": True},
            "receipts": {"type": "array", "items": schema_ref("Receipt"), "maxItems": MAX_LIMIT},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "Pass as `cursor` for the next page; null on the last page.",
            },
        }
    ),
    "PublicKey": _obj(
        {
            "kid": _string("Key id, as in a receipt's `sig_kid`.", minLength=1),
            "alg": {"const": "Ed25519"},
            "public_key_base64url": _string(
                "The raw 32-byte Ed25519 public key, base64url without padding.", pattern="^[A-Za-z0-9_-]{43}$"
            ),
        }
    ),
    "PublicKeySet": _obj(
        {
            "keys": {"type": "array", "items": schema_ref("PublicKey")},
            "active_kid": _string("The key that signs new receipts.", minLength=1),
        }
    ),
    "BundleKeys": _obj(
        {
            "keys": {
                "type": "array",
                "items": schema_ref("PublicKey"),
                "description": "Only the keys that signed a receipt of the bundle.",
            },
            "active_kid": {"type": ["string", "null"]},
        }
    ),
    "Bundle": _obj(
        {
            "format": {"const": BUNDLE_FORMAT},
            "version": {"const": BUNDLE_VERSION},
            "created_at": schema_ref("Timestamp"),
            "service": _string("The service's base address."),
            "receipt": schema_ref("Receipt"),
            "keys": schema_ref("BundleKeys"),
            "chain": {
                "type": "array",
                "items": schema_ref("Receipt"),
                "maxItems": MAX_DEPTH,
                "description": "Earlier receipts of the chain, newest first.",
            },
            "chain_complete": {"type": "boolean", "description": "true when the segment reaches the chain's start."},
        },
        description="An offline verification bundle (docs/bundles.md); verifies with no network.",
    ),
    "VerifyRequest": _obj(
        {
            "receipt_id": _string("A receipt of the key's project.", minLength=1),
            "input_hash": schema_ref("HashInput"),
            "output_hash": nullable(schema_ref("HashInput")),
        },
        required=["receipt_id", "input_hash"],
    ),
    "VerifyResult": _obj(
        {
            "ok": {"type": "boolean", "description": "true only when every check passed."},
            "receipt_id": _string("The receipt that was checked (the request's `receipt_id`)."),
            "checks": _obj(
                {
                    "signature": {"type": "boolean"},
                    "hash_match": {"type": "boolean"},
                    "receipt_hash_recompute": {"type": "boolean"},
                    "chain_link": {"type": "boolean", "description": "true when there is no previous hash."},
                }
            ),
            "sig_kid": nullable(_string("The receipt's signing key id; null when its stored record is unusable.")),
            "receipt_hash": nullable(schema_ref("Hash")),
            "recomputed_receipt_hash": nullable(schema_ref("Hash")),
            "chain": _obj(
                {
                    "prev_receipt_hash": nullable(schema_ref("Hash")),
                    "prev_found": {"type": "boolean"},
                    "prev_receipt_hash_recompute": {"type": "boolean"},
                }
            ),
        },
        description=(
            "A failed check is 200 with `ok: false` and that check false. A stored record that cannot be"
            " decoded or is another receipt's is 200 with every check false and null hashes and kid."
        ),
    ),
    "UsageWindow": _obj(
        {
            "limit": COUNT,
            "used": COUNT,
            "remaining": COUNT,
            "reset_at": schema_ref("Timestamp"),
            "reset_in_seconds": {"type": "integer", "minimum": 1},
        }
    ),
    "Usage": _obj(
        {
            "ok": {"const": True},
            "plan": schema_ref("Plan"),
            "project_id": schema_ref("ProjectId"),
            "minute": schema_ref("UsageWindow"),
            "month": schema_ref("UsageWindow"),
        }
    ),
    "EntryInfo": _obj(
        {
            "product": {"type": "string"},
            "subtitle": {"type": "string"},
            "env": {"type": "string"},
            "docs_url": _string("Address of the API reference page.", format="uri"),
            "endpoints": _obj(
                {name: {"type": "string"} for name in ("public_key", "create_receipt", "get_receipt", "verify")}
            ),
            "store": {
                "type": "string",
                "enum": ["ok", "unreachable"],
                "description": "Whether the store answered a PING within 1 s.",
            },
        }
    ),
    "ClaimRequest": _obj(
        {"session_id": _string("The completed checkout session's id.", pattern=PROVIDER_ID)},
        description="Unknown fields are refused (400).",
    ),
    "FreeClaimRequest": _obj(
        {
            "turnstile_token": _string(
                "The human-verification widget's token.",
                minLength=1,
                maxLength=MAX_TOKEN_LEN,
                pattern=f"[^{_PY_WHITESPACE}]",
            )
        },
        description="Unknown fields are refused (400).",
    ),
    "ClaimResult": _obj(
        {
            "ok": {"const": True},
            "api_key": schema_ref("ApiKey"),
            "project_id": schema_ref("ProjectId"),
            "actor_id": schema_ref("ActorId"),
            "plan": schema_ref("Plan"),
            "warning": _string("Store the key now: it is shown only once."),
        }
    ),
    "PaymentEvent": {
        "type": "object",
        "description": (
            "The payment provider's event, authenticated by `Payment-Signature` over the raw bytes. "
            "Only `checkout.session.completed` with `payment_status` `paid` and `metadata.plan` `basic` or `pro` "
            "is acted on (it then needs a positive whole `created`, on the event or on `data.object`); "
            "any other event is acknowledged and ignored. Other provider fields are allowed."
        ),
        "properties": {
            "id": _string("Event id; each is processed once.", pattern=PROVIDER_ID),
            "type": _string("Event type.", minLength=1),
            "created": {"description": "Unix seconds (a positive whole number) when the checkout was created."},
            "data": {"description": "For `checkout.session.completed`: `{object: {id, payment_status, metadata}}`."},
        },
        "required": ["id", "type"],
        "if": {"properties": {"type": {"const": "checkout.session.completed"}}, "required": ["type"]},
        "then": {
            "required": ["data"],
            "properties": {
                "data": {
                    "type": "object",
                    "required": ["object"],
                    "properties": {
                        "object": {
                            "type": "object",
                            "required": ["id"],
                            "properties": {
                                "id": _string("Checkout session id.", pattern=PROVIDER_ID),
                                "payment_status": {"description": "Acted on only when `paid`."},
                                "metadata": {"description": "`plan`: `basic` or `pro`."},
                            },
                        }
                    },
                }
            },
        },
    },
    "WebhookAck": _obj(
        {
            "ok": {"const": True},
            "received": {"const": True},
            "duplicate": {
                "type": "boolean",
                "description": "Present, and true, only when this event id was already processed.",
            },
            "ignored": {
                "type": "boolean",
                "description": "Present, and true, only when the event is not a paid checkout of a paid plan.",
            },
        },
        required=["ok", "received"],
    ),
    "ErrorCode": {"type": "string", "enum": list(ERROR_CODES)},
    "Error": _obj(
        {
            "error": _obj(
                {
                    "code": schema_ref("ErrorCode"),
                    "message": {"type": "string", "minLength": 1, "description": "Human readable."},
                    "details": {
                        "type": "object",
                        "description": "Machine-readable context (field names, limits); never secrets.",
                    },
                },
                required=["code", "message"],
            ),
            "request_id": schema_ref("RequestId"),
        },
        description="Every error body.",
    ),
}

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

PATHS: dict[str, Any] = {
    "/": {
        "get": {
            "operationId": "getEntry",
            "tags": ["Service"],
            "summary": "Entry information",
            "description": "Product, environment, the reference page address, the main endpoints and store state. "
            "Always 200, also while the store is unreachable.",
            "security": PUBLIC,
            "responses": {"200": ok_json("Entry information.", "EntryInfo")},
        }
    },
    "/health": {
        "get": {
            "operationId": "getHealth",
            "tags": ["Service"],
            "summary": "Health (same body as GET /)",
            "description": "Always 200 so a load balancer does not cycle the service while Redis is away; "
            "`store` says whether the store answers.",
            "security": PUBLIC,
            "responses": {"200": ok_json("Entry information.", "EntryInfo")},
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "getOpenApi",
            "tags": ["Service"],
            "summary": "This OpenAPI 3.1 document",
            "description": "The machine-readable API description; `servers` names the address it was fetched from.",
            "security": PUBLIC,
            "responses": {
                "200": {
                    "description": "The OpenAPI document.",
                    "headers": {h: header_ref(h) for h in ("Cache-Control", "Access-Control-Allow-Origin")},
                    "content": {JSON: {"schema": {"type": "object", "required": ["openapi", "info", "paths"]}}},
                }
            },
        }
    },
    "/v1/public-key": {
        "get": {
            "operationId": "getPublicKeys",
            "tags": ["Receipts"],
            "summary": "Signing public keys",
            "description": "Every key that signed a receipt still retained (retired keys included); "
            "`active_kid` signs new receipts. Limited per address (`public_key`).",
            "security": PUBLIC,
            "responses": {
                "200": ok_json(
                    "The key set.",
                    "PublicKeySet",
                    ["Cache-Control", "Access-Control-Allow-Origin", *RATE_HEADERS],
                ),
                "429": E429,
                "500": SIGNING_500,
                "503": E503,
            },
        }
    },
    "/v1/receipts": {
        "post": {
            "operationId": "createReceipt",
            "tags": ["Receipts"],
            "summary": "Issue a receipt",
            "description": (
                "Issue a signed receipt for your hashes, placed on the project's chain; the same logical input "
                "(or the same `Idempotency-Key`) replays the original receipt with 200 and uses no quota. "
                f"Body at most {CREATE_BODY_LIMIT} bytes."
            ),
            "security": BEARER,
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "Replaces the computed replay key (same project scope); "
                    "reused with another body: 409.",
                    "schema": {"type": "string", "pattern": f"^[!-~]{{1,{MAX_IDEMPOTENCY_HEADER_LEN}}}$"},
                }
            ],
            "requestBody": _json_body("CreateReceiptRequest", "The hashes and labels to sign."),
            "responses": {
                "201": issue_response("A new receipt (`idempotency.hit` false)."),
                "200": issue_response("An idempotent replay: the earlier receipt, `idempotency.hit` true."),
                "400": E400_CREATE,
                "401": E401,
                "403": E403,
                "404": E404,
                "409": error_response(409, ["idempotency_conflict"]),
                "413": E413,
                "415": E415,
                "429": E429_CREATE,
                "500": SIGNING_500,
                "503": error_response(503, ["store_unavailable", "chain_contention"], ["Retry-After"]),
            },
        },
        "get": {
            "operationId": "searchReceipts",
            "tags": ["Receipts"],
            "summary": "Search your receipts by hash",
            "description": (
                "Your project's receipts with the given input hash, output hash, or both (then the receipts "
                "that have both), newest first. Give at least one of `input_hash` and `output_hash` (else 400); "
                "unknown query parameters are 400. A page can hold fewer than `limit` receipts, even none, while "
                "`next_cursor` says more follow."
            ),
            "security": BEARER,
            "parameters": [
                _query("input_hash", schema_ref("HashInput"), "Receipts with this `input_hash`."),
                _query("output_hash", schema_ref("HashInput"), "Receipts with this `output_hash`."),
                _query(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                    "Page size.",
                ),
                _query(
                    "cursor",
                    {"type": "string", "pattern": "^[A-Za-z0-9_-]{42}$"},
                    "Opaque: `next_cursor` of the previous page, unchanged (any other value is 400).",
                ),
            ],
            "responses": {
                "200": ok_json("A page of receipts.", "SearchPage", ["Cache-Control", *RATE_HEADERS]),
                "400": E400,
                "401": E401,
                "403": E403,
                "429": E429,
                "503": E503,
            },
        },
    },
    "/v1/receipts/{receipt_id}": {
        "get": {
            "operationId": "getReceipt",
            "tags": ["Receipts"],
            "summary": "Read a receipt",
            "description": "Public: no key needed. Limited per address (`get_receipt`).",
            "security": PUBLIC,
            "parameters": [
                RECEIPT_REF_PARAM,
                _query(
                    "project_id",
                    {"type": "string"},
                    "The project (`prj_...`) to look a receipt hash up in: required, and checked (else 400), "
                    "when `receipt_id` is a receipt hash; ignored for a receipt id.",
                ),
            ],
            "responses": {
                "200": ok_json(
                    "The receipt.",
                    "ReceiptRead",
                    ["Cache-Control", "Access-Control-Allow-Origin", *RATE_HEADERS],
                ),
                "400": E400,
                "404": E404,
                "429": E429,
                "503": E503,
            },
        }
    },
    "/v1/receipts/{receipt_id}/bundle": {
        "get": {
            "operationId": "getBundle",
            "tags": ["Receipts"],
            "summary": "Offline verification bundle",
            "description": "The receipt, up to `depth` earlier receipts of its chain and the keys that signed them. "
            "Public; counted once in the `get_receipt` limit whatever the depth.",
            "security": PUBLIC,
            "parameters": [
                RECEIPT_ID_PARAM,
                _query(
                    "depth",
                    {"type": "integer", "minimum": 0, "maximum": MAX_DEPTH, "default": DEFAULT_DEPTH},
                    "How many earlier receipts to include.",
                ),
            ],
            "responses": {
                "200": ok_json(
                    "The bundle.",
                    "Bundle",
                    ["Cache-Control", "Access-Control-Allow-Origin", *RATE_HEADERS],
                ),
                "400": E400,
                "404": E404,
                "429": E429,
                "503": E503,
            },
        }
    },
    "/v1/verify": {
        "post": {
            "operationId": "verifyReceipt",
            "tags": ["Receipts"],
            "summary": "Verify a receipt against your hashes",
            "description": (
                "Recomputes the receipt hash, checks the signature, compares your hashes and checks the chain "
                f"link. Only receipts of the key's project (else 403). Body at most {VERIFY_BODY_LIMIT} bytes."
            ),
            "security": BEARER,
            "requestBody": _json_body("VerifyRequest", "The receipt and the hashes to compare."),
            "responses": {
                "200": ok_json("The checks (a failed check is still 200).", "VerifyResult", RATE_HEADERS),
                "400": E400,
                "401": E401,
                "403": E403,
                "404": E404,
                "413": E413,
                "415": E415,
                "429": E429,
                "503": E503,
            },
        }
    },
    "/v1/usage": {
        "get": {
            "operationId": "getUsage",
            "tags": ["Receipts"],
            "summary": "Your plan and usage",
            "description": "Requests this minute and receipts this month, with reset times. "
            "Counts against the address's authenticated limit, not the key's.",
            "security": BEARER,
            "responses": {
                "200": ok_json("Usage.", "Usage", RATE_HEADERS),
                "401": E401,
                "403": E403,
                "429": E429,
                "503": E503,
            },
        }
    },
    "/v1/webhooks/payment": {
        "post": {
            "operationId": "paymentWebhook",
            "tags": ["Keys"],
            "summary": "Payment provider webhook",
            "description": (
                "Called by the payment provider. The signature is checked on the raw body first (400 otherwise); "
                "each event id is processed once; a completed, paid checkout is queued for indexing, "
                "after which `POST /v1/claim` can reveal its key. Without a webhook secret "
                "(`PAYMENT_WEBHOOK_SECRET` unset, as in the embedded demo) it answers 503 `claim_not_ready`."
            ),
            "security": PUBLIC,
            "parameters": [
                {
                    "name": "Payment-Signature",
                    "in": "header",
                    "required": True,
                    "description": '`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>` (several `v1` allowed; '
                    "at most 5 minutes old or ahead).",
                    "schema": {"type": "string", "pattern": "^t=[0-9]{1,12}(,v1=[0-9a-fA-F]{64}){1,16}$"},
                }
            ],
            "requestBody": _json_body("PaymentEvent", "The provider's event."),
            "responses": {
                "200": ok_json("Acknowledged (also duplicates and ignored events).", "WebhookAck", ["Cache-Control"]),
                "400": E400,
                "413": E413,
                "415": E415,
                "503": error_response(503, ["claim_not_ready", "store_unavailable"], (), **OPTIONAL_RETRY_AFTER),
            },
        }
    },
    "/v1/claim": {
        "post": {
            "operationId": "claimPaidKey",
            "tags": ["Keys"],
            "summary": "Reveal the API key of a paid checkout (once)",
            "description": (
                "Creates project, actor and key for a completed checkout and reveals the key once. "
                "Limited per address like unauthenticated requests. Without payments configured "
                "(`PAYMENT_WEBHOOK_SECRET` unset, as in the embedded demo) it answers 503 `claim_not_ready`."
            ),
            "security": PUBLIC,
            "requestBody": _json_body("ClaimRequest", "The checkout session."),
            "responses": {
                "200": ok_json("The key, shown only this once.", "ClaimResult", ["Cache-Control"]),
                "400": E400,
                "404": error_response(404, ["claim_pending"], ["Retry-After"]),
                "409": error_response(409, ["claim_pending", "already_claimed"]),
                "410": error_response(410, ["claim_expired"]),
                "413": E413,
                "415": E415,
                "429": E429,
                "503": error_response(503, ["claim_not_ready", "store_unavailable"], (), **OPTIONAL_RETRY_AFTER),
            },
        }
    },
    "/v1/claim/free": {
        "post": {
            "operationId": "claimFreeKey",
            "tags": ["Keys"],
            "summary": "Claim a free API key after a human check",
            "description": "One free key per client address per UTC day. Without the human check configured "
            "(`HUMAN_CHECK_SECRET` unset, as in the embedded demo) it answers 503 `not_configured`.",
            "security": PUBLIC,
            "requestBody": _json_body("FreeClaimRequest", "The human-verification token."),
            "responses": {
                "200": ok_json("The key, shown only this once.", "ClaimResult", ["Cache-Control"]),
                "400": E400,
                "403": error_response(403, ["forbidden"]),
                "413": E413,
                "415": E415,
                "429": E429,
                "500": error_response(500, ["internal_error"]),
                "503": error_response(503, ["not_configured", "store_unavailable"], (), **OPTIONAL_RETRY_AFTER),
            },
        }
    },
    "/verify": {
        "get": {
            "operationId": "verifyPage",
            "tags": ["Pages"],
            "summary": "Browser verification page",
            "description": "Verifies a receipt in the browser with WebCrypto (https or localhost only); "
            "`?receipt_id=` preloads one.",
            "security": PUBLIC,
            "parameters": [_query("receipt_id", {"type": "string"}, "A receipt id to verify (read by the page).")],
            "responses": {"200": html_page("The page.")},
        }
    },
    "/docs": {
        "get": {
            "operationId": "docsPage",
            "tags": ["Pages"],
            "summary": "API reference page",
            "description": "This document as HTML.",
            "security": PUBLIC,
            "responses": {"200": html_page("The page.", ["Content-Security-Policy", "Cache-Control"])},
        }
    },
    "/claim/free": {
        "get": {
            "operationId": "freeClaimPage",
            "tags": ["Pages"],
            "summary": "Free key page",
            "description": "The human check and the free key, shown once.",
            "security": PUBLIC,
            "responses": {"200": html_page("The page.", ["Content-Security-Policy", "Cache-Control"])},
        }
    },
    "/claim/success": {
        "get": {
            "operationId": "claimSuccessPage",
            "tags": ["Pages"],
            "summary": "Checkout success page",
            "description": "Calls `POST /v1/claim` and shows the paid key once.",
            "security": PUBLIC,
            "parameters": [_query("session_id", {"type": "string"}, "The checkout session id.")],
            "responses": {"200": html_page("The page.", ["Content-Security-Policy", "Cache-Control"])},
        }
    },
}

INFO = {
    "title": "Execution Proof Service",
    "version": API_VERSION,
    "summary": "Ed25519-signed, chained receipts for hashes you compute yourself.",
    "description": (
        "Issues signed execution receipts for `sha256:` hashes computed by the client (it never receives raw "
        "data), chained per project, readable publicly by id and verifiable without trusting the service.\n\n"
        "Every response carries `X-Request-Id`. Every error is "
        '`{"error": {"code", "message", "details"?}, "request_id"}`. A path that does not exist is 404 '
        "`not_found`; a method the path does not support is 405 `method_not_allowed` with `Allow`. "
        "429 always carries `Retry-After`. API keys (`eps_...`) are sent as `Authorization: Bearer <key>`; "
        "a missing, malformed or unknown key is 401, and too many of those from one address 429."
    ),
}


def _finish_responses(paths: Mapping[str, Any], responses: Mapping[str, Any]) -> None:
    """Every response (inline or shared) carries the ``X-Request-Id`` header."""
    for item in paths.values():
        for operation in item.values():
            for response in operation["responses"].values():
                if "$ref" not in response:
                    response.setdefault("headers", {})["X-Request-Id"] = header_ref("X-Request-Id")
    for response in responses.values():
        response["headers"]["X-Request-Id"] = header_ref("X-Request-Id")


def build_document() -> dict[str, Any]:
    """The whole document, without ``servers`` (added per request)."""
    paths = copy.deepcopy(PATHS)
    responses = copy.deepcopy(RESPONSES)
    _finish_responses(paths, responses)
    return {
        "openapi": OPENAPI_VERSION,
        "info": INFO,
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "responses": responses,
            "headers": HEADERS,
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "eps_ API key",
                    "description": (
                        f"`Authorization: Bearer eps_...`. Keys of {MIN_KEY_LEN}-{MAX_KEY_LEN} characters are looked "
                        "up; others are 401 at once. Get one at `/claim/free` or through a paid checkout."
                    ),
                }
            },
        },
        "tags": [
            {"name": "Service", "description": "Entry information and this description."},
            {"name": "Receipts", "description": "Issue, read, search and verify receipts."},
            {"name": "Keys", "description": "Getting an API key: paid checkouts and free claims."},
            {"name": "Pages", "description": "HTML pages for people."},
        ],
    }


DOCUMENT = build_document()


def document_for(base: str) -> dict[str, Any]:
    """The document with ``servers`` naming ``base``."""
    return {
        "openapi": DOCUMENT["openapi"],
        "info": DOCUMENT["info"],
        "servers": [{"url": base}],
        **{key: value for key, value in DOCUMENT.items() if key not in ("openapi", "info")},
    }


@bp.get("/openapi.json")
async def openapi_json(request: Request) -> HTTPResponse:
    body = orjson.dumps(document_for(base_url(request)))
    return HTTPResponse(body, status=200, headers=OPENAPI_HEADERS, content_type=JSON)


# --- the reference page's view of the document ------------------------------------------------

_REF = re.compile(r"^#/components/(schemas|responses|headers)/(.+)$")


def resolve(node: Mapping[str, Any], document: Mapping[str, Any] = DOCUMENT) -> Any:
    """Follow ``$ref`` (recursively) inside ``document``."""
    while isinstance(node, Mapping) and "$ref" in node:
        match = _REF.match(node["$ref"])
        if match is None:
            raise KeyError(node["$ref"])
        node = document["components"][match.group(1)][match.group(2)]
    return node


def type_label(schema: Mapping[str, Any]) -> str:
    """A short human label for a schema: ``Receipt``, ``string | null``, ``integer 1-200``..."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "const" in schema:
        return orjson.dumps(schema["const"]).decode()
    if "allOf" in schema:
        return type_label(schema["allOf"][0])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(type_label(option) for option in schema[key])
    if "enum" in schema:
        return " | ".join(orjson.dumps(value).decode() for value in schema["enum"])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    label = " | ".join(kinds) if kinds else "any"
    if "items" in schema:
        label = f"array of {type_label(schema['items'])}"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        label += f" {'' if low is None else low}-{'' if high is None else high}"
    if "maxLength" in schema:
        label += f", at most {schema['maxLength']} characters"
    if "pattern" in schema:
        label += f", pattern {schema['pattern']}"
    return label


def _fields(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    schema = resolve(schema)
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "type": type_label(prop),
            "required": name in required,
            "description": prop.get("description") or resolve(prop).get("description", ""),
        }
        for name, prop in schema.get("properties", {}).items()
    ]


def _error_codes(content: Mapping[str, Any]) -> list[str]:
    schema = content.get(JSON, {}).get("schema", {})
    for part in schema.get("allOf", []):
        codes = part.get("properties", {}).get("error", {}).get("properties", {}).get("code", {}).get("enum")
        if codes:
            return list(codes)
    return []


def reference_view(document: Mapping[str, Any] = DOCUMENT) -> dict[str, Any]:
    """Everything the ``/docs`` page shows, taken from ``document``."""
    operations = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = []
            for status, response in operation["responses"].items():
                response = resolve(response, document)
                content = response.get("content", {})
                responses.append(
                    {
                        "status": status,
                        "description": response["description"],
                        "media_types": list(content),
                        "schema": type_label(content[JSON]["schema"]) if JSON in content else None,
                        "codes": _error_codes(content),
                        "headers": list(response.get("headers", {})),
                    }
                )
            body = operation.get("requestBody")
            operations.append(
                {
                    "id": operation["operationId"],
                    "method": method.upper(),
                    "path": path,
                    "summary": operation["summary"],
                    "description": operation.get("description", ""),
                    "auth": "Bearer API key" if operation.get("security") else "none",
                    "parameters": [
                        {
                            "name": p["name"],
                            "in": p["in"],
                            "required": p.get("required", False),
                            "type": type_label(p["schema"]),
                            "description": p.get("description", ""),
                        }
                        for p in operation.get("parameters", [])
                    ],
                    "body": type_label(body["content"][JSON]["schema"]) if body else None,
                    "body_fields": _fields(body["content"][JSON]["schema"]) if body else [],
                    "responses": responses,
                }
            )
    schemas = [
        {
            "name": name,
            "description": schema.get("description", ""),
            "type": type_label(schema),
            "fields": _fields(schema),
        }
        for name, schema in document["components"]["schemas"].items()
    ]
    return {
        "info": document["info"],
        "operations": operations,
        "schemas": schemas,
        "schema_names": [schema["name"] for schema in schemas],
        "security": document["components"]["securitySchemes"],
        "headers": document["components"]["headers"],
        "error_codes": [{"code": code, "meaning": ERROR_MEANINGS[code]} for code in ERROR_CODES],
    }
