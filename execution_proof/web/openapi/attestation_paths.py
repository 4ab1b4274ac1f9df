"""``paths`` and schemas of a receipt's in-toto attestation (docs/attestations.md): the DSSE
envelope, or the Sigstore bundle v0.3 that proves its log leaf."""

from __future__ import annotations

from typing import Any

from execution_proof.receipts.attestation import PAYLOAD_TYPE
from execution_proof.receipts.sigstore import BUNDLE_MEDIA_TYPE
from execution_proof.web.openapi.common import JSON, _obj, _string, header_ref, schema_ref
from execution_proof.web.openapi.responses import (
    E400,
    E429,
    PUBLIC,
    RATE_HEADERS,
    RECEIPT_ID_PARAM,
    _query,
    error_response,
)

BASE64 = {"type": "string", "contentEncoding": "base64", "pattern": "^[A-Za-z0-9+/]*={0,2}$"}
INT64 = {"type": "string", "pattern": "^[0-9]+$", "description": "A 64-bit integer, as a decimal string."}

ATTESTATION_SCHEMAS: dict[str, Any] = {
    "DsseEnvelope": _obj(
        {
            "payloadType": {"const": PAYLOAD_TYPE},
            "payload": {**BASE64, "description": "Standard base64 of the in-toto Statement v1's RFC 8785 bytes."},
            "signatures": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": _obj(
                    {
                        "keyid": _string("The kid of the receipt key that signed the receipt and this envelope."),
                        "sig": {**BASE64, "description": "The Ed25519 signature over the DSSE PAE."},
                    }
                ),
            },
        },
        description="A DSSE envelope holding the receipt's in-toto Statement, signed when the receipt was.",
    ),
    "SigstoreBundle": _obj(
        {
            "mediaType": {"const": BUNDLE_MEDIA_TYPE},
            "verificationMaterial": _obj(
                {
                    "publicKey": _obj({"hint": _string("The receipt key's kid.")}),
                    "tlogEntries": {
                        "type": "array",
                        "maxItems": 1,
                        "items": {"$ref": "#/components/schemas/SigstoreTlogEntry"},
                    },
                },
                required=["publicKey"],
            ),
            "dsseEnvelope": schema_ref("DsseEnvelope"),
        },
        description="A Sigstore bundle v0.3: the envelope, its key's kid and (with a log) the inclusion of the "
        "attestation's dsse 0.0.2 leaf, at the receipt's index + 1, under a checkpoint of this log.",
    ),
    "SigstoreTlogEntry": _obj(
        {
            "logIndex": INT64,
            "logId": _obj({"keyId": {**BASE64, "description": "The log's C2SP key hash (SHA-256)."}}),
            "kindVersion": _obj({"kind": {"const": "dsse"}, "version": {"const": "0.0.2"}}),
            "integratedTime": {"const": "0"},
            "inclusionProof": _obj(
                {
                    "logIndex": INT64,
                    "rootHash": BASE64,
                    "treeSize": INT64,
                    "hashes": {"type": "array", "items": BASE64},
                    "checkpoint": _obj({"envelope": _string("The signed checkpoint note, with its cosignatures.")}),
                }
            ),
            "canonicalizedBody": {**BASE64, "description": "The log leaf: RFC 8785 bytes of the dsse 0.0.2 body."},
        }
    ),
}

ATTESTATION_PATHS: dict[str, Any] = {
    "/v1/receipts/{receipt_id}/attestation": {
        "get": {
            "operationId": "getAttestation",
            "tags": ["Receipts"],
            "summary": "The receipt as an in-toto attestation",
            "description": "The receipt as an in-toto Statement v1 in a DSSE envelope, signed at creation by the key "
            "that signed the receipt (the same bytes on every read); with `format=sigstore`, the Sigstore bundle v0.3 "
            "whose log entry proves the attestation's leaf (409 `log_pending` until a checkpoint covers it; no "
            "`tlogEntries` from a service without a log). Public, counted in the `get_receipt` limit.",
            "security": PUBLIC,
            "parameters": [
                RECEIPT_ID_PARAM,
                _query(
                    "format",
                    {"type": "string", "enum": ["dsse", "sigstore"], "default": "dsse"},
                    "`dsse`: the envelope; `sigstore`: the Sigstore bundle.",
                ),
            ],
            "responses": {
                "200": {
                    "description": "The envelope, or the Sigstore bundle.",
                    "headers": {
                        h: header_ref(h) for h in ("Cache-Control", "Access-Control-Allow-Origin", *RATE_HEADERS)
                    },
                    "content": {
                        JSON: {"schema": schema_ref("DsseEnvelope")},
                        BUNDLE_MEDIA_TYPE: {"schema": schema_ref("SigstoreBundle")},
                    },
                },
                "400": E400,
                "404": error_response(404, ["not_found", "not_in_log"]),
                "409": error_response(409, ["log_pending"], ["Retry-After"]),
                "429": E429,
                "503": error_response(503, ["store_unavailable"], ["Retry-After"]),
            },
        }
    },
}
