"""``paths`` of the OpenAPI document: every route the service answers, one operation each."""

from __future__ import annotations

from typing import Any

from execution_proof.receipts.model import MAX_IDEMPOTENCY_HEADER_LEN
from execution_proof.usecases.bundling import DEFAULT_DEPTH, MAX_DEPTH
from execution_proof.usecases.searching import DEFAULT_LIMIT, MAX_LIMIT
from execution_proof.web.openapi.common import JSON, header_ref, schema_ref
from execution_proof.web.openapi.responses import (
    BEARER,
    E400,
    E400_CREATE,
    E401,
    E403,
    E404,
    E413,
    E415,
    E429,
    E429_CREATE,
    E503,
    OPTIONAL_RETRY_AFTER,
    PUBLIC,
    RATE_HEADERS,
    RECEIPT_ID_PARAM,
    RECEIPT_REF_PARAM,
    SIGNING_500,
    _json_body,
    _query,
    error_response,
    html_page,
    issue_response,
    ok_json,
)
from execution_proof.web.receipts_api import CREATE_BODY_LIMIT, VERIFY_BODY_LIMIT

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
            "description": "Every key that signed a receipt still retained (retired keys included), each with "
            "its key certificate when a receipt root certified it; `active_kid` signs new receipts. A service with "
            "receipt roots adds `roots` (what a trust root pins) and `revocations`. `?kid=K` answers the same shape "
            "with that one key. Limited per address (`public_key`).",
            "security": PUBLIC,
            "parameters": [
                _query(
                    "kid",
                    {"type": "string"},
                    "Only this key (a receipt's `sig_kid`): `keys` holds it alone, with its certificate; 404 "
                    "`not_found` when no such key is listed.",
                )
            ],
            "responses": {
                "200": ok_json(
                    "The key set.",
                    "PublicKeySet",
                    ["Cache-Control", "Access-Control-Allow-Origin", *RATE_HEADERS],
                ),
                "404": error_response(404, ["not_found"]),
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
                },
                {
                    "name": "Prefer",
                    "in": "header",
                    "required": False,
                    "description": "`wait=N` (RFC 7240, N at most 10): wait up to N seconds for a published "
                    "checkpoint to cover the receipt, and return its index and proof in `log`.",
                    "schema": {"type": "string"},
                },
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
                "503": error_response(503, ["store_unavailable", "chain_contention", "log_backlog"], ["Retry-After"]),
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
            "description": "The receipt, up to `depth` earlier receipts of its chain and the keys that signed them "
            "(with a log: its proof and time-stamps). Public; counted once in the `get_receipt` limit whatever the "
            "depth. 404 `not_in_log`: the service has a log and the receipt is not in it (issued without a log or for "
            "another log).",
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
                "404": error_response(404, ["not_found", "not_in_log"]),
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
