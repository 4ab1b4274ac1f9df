"""``components.schemas`` of the OpenAPI document: every request and response body."""

from __future__ import annotations

from typing import Any

from execution_proof.receipts.limits import PLANS
from execution_proof.receipts.model import (
    MAX_TAG_KEY_LEN,
    MAX_TAG_VALUE_LEN,
    MAX_TAGS,
    MAX_TAGS_BYTES,
    MAX_TEXT_LEN,
    RECEIPT_KINDS,
)
from execution_proof.receipts.verifier import BUNDLE_FORMAT, BUNDLE_VERSION
from execution_proof.usecases.bundling import MAX_DEPTH
from execution_proof.usecases.claiming import MAX_TOKEN_LEN
from execution_proof.usecases.searching import MAX_LIMIT
from execution_proof.web.openapi.common import (
    _PY_WHITESPACE,
    COUNT,
    ERROR_CODES,
    PROVIDER_ID,
    TIMESTAMP,
    ULID,
    _obj,
    _string,
    nullable,
    schema_ref,
)

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
    "Plan": {"type": "string", "enum": list(PLANS)},
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
            "log": schema_ref("ReceiptLog"),
        },
        required=["ok", "receipt", "idempotency", "chain", "quota"],
        description=(
            "A new receipt (201, `idempotency.hit` false) or an idempotent replay of an earlier one "
            "(200, `idempotency.hit` true). One schema for both, so a generated client has one type to return. "
            "`log` is present when the service runs a transparency log."
        ),
    ),
    "ReceiptLog": {
        "description": (
            "The receipt's place in the transparency log: its index and C2SP tlog-proof once a published "
            "checkpoint covers it (with `Prefer: wait=N`), else `pending` and where the proof will be."
        ),
        "oneOf": [
            _obj({"index": COUNT, "proof": _string("C2SP tlog-proof text (`c2sp.org/tlog-proof@v1`)")}),
            _obj({"status": {"const": "pending"}, "proof_url": _string("`GET` this for the proof (409 until ready)")}),
        ],
    },
    "LogInfo": _obj(
        {
            "origin": _string("The log's origin line (and its key's name)"),
            "log_vkey": _string("The log's Ed25519 verifier key, `<origin>+<key id>+<base64>` (pin it)"),
            "checkpoint_url": _string("Path of the latest checkpoint"),
            "tiles_url": _string(
                "Where outsiders read the log's checkpoint, tiles and entry bundles (C2SP tlog-tiles prefix, "
                "`LOG_PUBLIC_URL`): the service's own `/v1/log/`, or a static copy of its log store",
                format="uri",
            ),
            "witnesses": {
                "type": "array",
                "items": _obj(
                    {
                        "name": _string("Witness name (in the policy)"),
                        "vkey": _string("Its verifier key (cosignature/v1)"),
                        "url": {
                            "type": ["string", "null"],
                            "description": "Its submission URL, if the policy gives one",
                        },
                    }
                ),
            },
            "policy": _string("The witness policy in C2SP tlog-policy form (empty when none)"),
        }
    ),
    "CheckpointTimestamps": _obj(
        {
            "tree_size": COUNT,
            "checkpoint": _string("The checkpoint (signed note) the time-stamps cover"),
            "timestamps": {
                "type": "array",
                "items": _obj(
                    {"tsa": _string("The TSA's URL"), "response_base64": _string("RFC 3161 TimeStampResp, DER, base64")}
                ),
            },
        }
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
            "certificate": schema_ref("KeyCertificate"),
        },
        required=("kid", "alg", "public_key_base64url"),
    ),
    "KeyCertificate": _obj(
        {
            "type": {"const": "execution-proof-key-certificate/v1"},
            "kid": _string(
                "The certified key's id: `key-` and the first 16 hex of SHA-256 of the raw key.",
                pattern="^key-[0-9a-f]{16}$",
            ),
            "alg": {"const": "Ed25519"},
            "public_key_base64url": _string(
                "The certified raw 32-byte Ed25519 key, base64url without padding.", pattern="^[A-Za-z0-9_-]{43}$"
            ),
            "not_before": schema_ref("Timestamp"),
            "not_after": schema_ref("Timestamp"),
            "root_kid": _string("The receipt root that signed it.", pattern="^root-[0-9a-f]{16}$"),
            "signature": _string(
                "Ed25519 by the root over the RFC 8785 bytes of this object without `signature`, base64url.",
                pattern="^[A-Za-z0-9_-]{86}$",
            ),
        },
        description="A receipt root's statement that the key may sign receipts created within "
        "`not_before`..`not_after` (docs/keys.md). A receipt counts only through such a certificate signed by "
        "a root the verifier pins.",
    ),
    "KeyRevocation": _obj(
        {
            "type": {"const": "execution-proof-key-revocation/v1"},
            "kid": _string("The revoked key.", pattern="^key-[0-9a-f]{16}$"),
            "revoked_after": schema_ref("Timestamp"),
            "reason": _string("Why (at most 200 characters).", maxLength=200),
            "root_kid": _string("The root that certified the key, and signs this.", pattern="^root-[0-9a-f]{16}$"),
            "signature": _string(
                "Ed25519 by the root over the RFC 8785 bytes of this object without `signature`, base64url.",
                pattern="^[A-Za-z0-9_-]{86}$",
            ),
        },
        description="Receipts by `kid` created at or after `revoked_after` do not count.",
    ),
    "ReceiptRoot": _obj(
        {
            "kid": _string("`root-` and the first 16 hex of SHA-256 of the raw key.", pattern="^root-[0-9a-f]{16}$"),
            "alg": {"const": "Ed25519"},
            "public_key_base64url": _string(
                "The root's raw 32-byte Ed25519 public key, base64url without padding.", pattern="^[A-Za-z0-9_-]{43}$"
            ),
        },
        description="A receipt root: it certifies receipt keys and never signs a receipt; a trust root pins it.",
    ),
    "PublicKeySet": _obj(
        {
            "keys": {"type": "array", "items": schema_ref("PublicKey")},
            "active_kid": _string("The key that signs new receipts.", minLength=1),
            "roots": {"type": "array", "items": schema_ref("ReceiptRoot"), "description": "The receipt roots."},
            "revocations": {
                "type": "array",
                "items": schema_ref("KeyRevocation"),
                "description": "Every revocation a root signed for a key still listed.",
            },
        },
        required=("keys", "active_kid"),
    ),
    "BundleKeys": _obj(
        {
            "keys": {
                "type": "array",
                "items": schema_ref("PublicKey"),
                "description": "Only the keys that signed a receipt of the bundle, each with its `certificate` "
                "(a version 2 bundle whose key lacks it is malformed).",
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
            "log": _obj(
                {
                    "origin": _string("The log's origin"),
                    "log_vkey": _string("The log's verifier key (pin your own copy)"),
                    "proof": {"type": ["string", "null"], "description": "C2SP tlog-proof; null while pending"},
                },
                description="Present when the service runs a transparency log.",
            ),
            "timestamps": {
                "type": "array",
                "items": _obj({"tsa": _string("The TSA's URL"), "response_base64": _string("RFC 3161 TimeStampResp")}),
                "description": "RFC 3161 time-stamps of the proof's checkpoint (present with `log`).",
            },
            "attestation": {
                **schema_ref("DsseEnvelope"),
                "description": "The receipt's in-toto attestation: the DSSE envelope "
                "`GET /v1/receipts/{receipt_id}/attestation` answers.",
            },
        },
        required=["format", "version", "created_at", "service", "receipt", "keys", "chain", "chain_complete"],
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
            "log": {
                "type": "string",
                "enum": ["ok", "halted", "off"],
                "description": (
                    "The transparency log: `halted` when a witness showed a fork and nothing is signed until an "
                    "operator runs `log resume`; `off` without a log."
                ),
            },
            "keys": {
                "type": "string",
                "enum": ["ok", "expiring", "unavailable"],
                "description": (
                    "This process's receipt key: `expiring` when renewing it has failed into the last tenth of its "
                    "lifetime, `unavailable` when no receipt can be signed (creates answer 500 "
                    "`signing_key_unavailable` with `Retry-After`)."
                ),
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
