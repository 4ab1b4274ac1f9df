"""Receipts: request validation, chain placement, building and signing.

Pure functions: a request body comes in as a ``JSONObject`` and is narrowed field by field
into a ``CreateRequest``; what goes out is a ``ReceiptObject`` (receipts/shapes.py). The web layer
parses HTTP, the store persists bytes. Checking a receipt is receipts/verifier.py's.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict

import orjson

from execution_proof.receipts.canonical import canonical_bytes, compute_receipt_hash
from execution_proof.receipts.content_scan import find_forbidden
from execution_proof.receipts.encoding import HashStr, b64url_encode, is_hash_str
from execution_proof.receipts.errors import BadRequest, ForbiddenContent
from execution_proof.receipts.shapes import JSONObject, JSONValue, ReceiptLike, ReceiptObject
from execution_proof.receipts.signing import KeyRing, KeySetError

RECEIPT_KINDS = ("release", "document", "audit_pack")
HASH_FIELDS = ("input_hash", "output_hash", "params_hash", "env_hash")
TEXT_FIELDS = ("code_ref", "run_id")
MAX_TEXT_LEN = 256
MAX_TAGS = 20
MAX_TAG_KEY_LEN = 64
MAX_TAG_VALUE_LEN = 256
MAX_TAGS_BYTES = 2048
CREATE_FIELDS = frozenset(
    (*HASH_FIELDS, *TEXT_FIELDS, "tags", "receipt_kind", "prev_receipt_hash", "project_id", "actor_id")
)
VERIFY_FIELDS = frozenset(("receipt_id", "input_hash", "output_hash"))
MAX_IDEMPOTENCY_HEADER_LEN = 255

RECEIPT_FIELDS = (
    "receipt_id",
    "project_id",
    "actor_id",
    "created_at",
    "input_hash",
    "output_hash",
    "params_hash",
    "env_hash",
    "code_ref",
    "run_id",
    "tags",
    "receipt_kind",
    "status",
    "prev_receipt_hash",
    "receipt_hash",
    "signature",
    "sig_kid",
    "chain_status",
    "expected_prev_receipt_hash",
)


class ClientFields(TypedDict):
    """The values of a receipt the client chose, in receipt field order."""

    input_hash: str
    output_hash: str | None
    params_hash: str | None
    env_hash: str | None
    code_ref: str | None
    run_id: str | None
    tags: dict[str, str] | None


class ChainObject(TypedDict):
    """The ``chain`` object of a creation response, as the receipt holds it."""

    status: JSONValue
    expected_prev_receipt_hash: JSONValue
    prev_receipt_hash: JSONValue


@dataclass(frozen=True)
class CreateRequest:
    """A validated ``POST /v1/receipts`` body. Hashes are lowercase; tags have no nulls."""

    input_hash: HashStr
    output_hash: HashStr | None
    params_hash: HashStr | None
    env_hash: HashStr | None
    code_ref: str | None
    run_id: str | None
    tags: dict[str, str] | None
    receipt_kind: str | None
    prev_receipt_hash: HashStr | None
    claimed_project_id: str | None
    claimed_actor_id: str | None

    def client_fields(self) -> ClientFields:
        """The client-supplied values a receipt carries, in receipt field order."""
        return {
            "input_hash": self.input_hash,
            "output_hash": self.output_hash,
            "params_hash": self.params_hash,
            "env_hash": self.env_hash,
            "code_ref": self.code_ref,
            "run_id": self.run_id,
            "tags": self.tags,
        }


@dataclass(frozen=True)
class VerifyRequest:
    receipt_id: str
    input_hash: HashStr
    output_hash: HashStr | None


@dataclass(frozen=True)
class ChainPlacement:
    chain_status: str
    prev_receipt_hash: str | None
    expected_prev_receipt_hash: str | None
    advances_tip: bool


def parse_json_object(body: bytes) -> JSONObject:
    """Decode a request body that must be one JSON object. Raises ``BadRequest``."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest("request body is not valid JSON (UTF-8)") from exc
    if not isinstance(value, dict):
        raise BadRequest("request body must be a JSON object")
    return value


def _reject_unknown(body: Mapping[str, JSONValue], allowed: frozenset[str]) -> None:
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise BadRequest(
            "unknown field(s) in request body; only hashes and the documented fields are accepted",
            {"fields": unknown[:10], "allowed": sorted(allowed)},
        )


def _hash_field(body: Mapping[str, JSONValue], name: str, *, required: bool) -> HashStr | None:
    value = body.get(name)
    if value is None:
        if required:
            raise BadRequest(f"{name} is required", {"field": name})
        return None
    if not is_hash_str(value):
        raise BadRequest(
            f"{name} must be 'sha256:' followed by exactly 64 hex characters",
            {"field": name},
        )
    return HashStr(value.lower())


def _scan(field: str, text: str) -> None:
    kind = find_forbidden(text)
    if kind is not None:
        raise ForbiddenContent(
            f"{field} looks like forbidden content ({kind.replace('_', ' ')}); "
            "send only hashes and short non-sensitive tags",
            {"field": field, "kind": kind},
        )


def _text_field(body: Mapping[str, JSONValue], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string or null", {"field": name})
    if len(value) > MAX_TEXT_LEN:
        raise BadRequest(f"{name} must be at most {MAX_TEXT_LEN} characters", {"field": name})
    _scan(name, value)
    return value


def parse_tags(value: JSONValue) -> dict[str, str] | None:
    """The tag rules of docs/api.md, "Tags"; null values are dropped and an empty result is ``None``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("tags must be a JSON object of strings (arrays are rejected)", {"field": "tags"})
    tags: dict[str, str] = {}
    for key, item in value.items():
        if item is None:
            continue
        if not isinstance(item, str):
            raise BadRequest("every tag value must be a string or null", {"field": "tags", "reason": "type"})
        if not 1 <= len(key) <= MAX_TAG_KEY_LEN:
            raise BadRequest(
                f"tag keys must be 1 to {MAX_TAG_KEY_LEN} characters", {"field": "tags", "reason": "key_length"}
            )
        if not 1 <= len(item) <= MAX_TAG_VALUE_LEN:
            raise BadRequest(
                f"tag values must be 1 to {MAX_TAG_VALUE_LEN} characters",
                {"field": "tags", "reason": "value_length"},
            )
        tags[key] = item
    if len(tags) > MAX_TAGS:
        raise BadRequest(f"at most {MAX_TAGS} tags are allowed", {"field": "tags", "reason": "count"})
    if len(orjson.dumps(tags)) > MAX_TAGS_BYTES:
        raise BadRequest(
            f"tags must serialise to at most {MAX_TAGS_BYTES} bytes of JSON", {"field": "tags", "reason": "size"}
        )
    for key, item in tags.items():
        if find_forbidden(key) is not None:
            _scan("tags", key)
        _scan(f"tags.{key}", item)
    return tags or None


def parse_create_request(body: Mapping[str, JSONValue]) -> CreateRequest:
    """Validate every field of a create body. Raises ``BadRequest`` / ``ForbiddenContent``."""
    _reject_unknown(body, CREATE_FIELDS)
    kind = body.get("receipt_kind")
    if kind is not None and (not isinstance(kind, str) or kind not in RECEIPT_KINDS):
        raise BadRequest(
            "receipt_kind must be one of release, document, audit_pack (or null)",
            {"field": "receipt_kind", "allowed": list(RECEIPT_KINDS)},
        )
    claimed: dict[str, str | None] = {}
    for name in ("project_id", "actor_id"):
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"{name} must be a string", {"field": name})
        claimed[name] = value
    input_hash = _hash_field(body, "input_hash", required=True)
    assert input_hash is not None
    return CreateRequest(
        input_hash=input_hash,
        output_hash=_hash_field(body, "output_hash", required=False),
        params_hash=_hash_field(body, "params_hash", required=False),
        env_hash=_hash_field(body, "env_hash", required=False),
        code_ref=_text_field(body, "code_ref"),
        run_id=_text_field(body, "run_id"),
        tags=parse_tags(body.get("tags")),
        receipt_kind=kind,
        prev_receipt_hash=_hash_field(body, "prev_receipt_hash", required=False),
        claimed_project_id=claimed["project_id"],
        claimed_actor_id=claimed["actor_id"],
    )


def parse_verify_request(body: Mapping[str, JSONValue]) -> VerifyRequest:
    """Validate a verify body. Raises ``BadRequest``."""
    _reject_unknown(body, VERIFY_FIELDS)
    receipt_id = body.get("receipt_id")
    if not isinstance(receipt_id, str) or not receipt_id:
        raise BadRequest("receipt_id is required and must be a string", {"field": "receipt_id"})
    input_hash = _hash_field(body, "input_hash", required=True)
    assert input_hash is not None
    return VerifyRequest(receipt_id, input_hash, _hash_field(body, "output_hash", required=False))


def idempotency_fingerprint(project_id: str, req: CreateRequest) -> str:
    """Hex SHA-256 of the logical input (docs/api.md, "Idempotency"): what makes two creates the same."""
    logical = {
        "project_id": project_id,
        "receipt_kind": req.receipt_kind,
        **req.client_fields(),
        "prev_receipt_hash": req.prev_receipt_hash,
    }
    return hashlib.sha256(canonical_bytes(logical)).hexdigest()


def replay_key(fingerprint: str, header_key: str | None = None) -> str:
    """The public ``ik_<opaque>`` key: from the fingerprint, or from the client's header."""
    if header_key is None:
        material = b"computed\0" + fingerprint.encode("ascii")
    else:
        material = b"header\0" + header_key.encode("utf-8")
    return "ik_" + b64url_encode(hashlib.sha256(material).digest())


def check_idempotency_header(value: str | None) -> str | None:
    """``Idempotency-Key`` must be 1-255 visible ASCII characters when sent."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_IDEMPOTENCY_HEADER_LEN or not all(33 <= ord(c) <= 126 for c in value):
        raise BadRequest("Idempotency-Key must be 1 to 255 visible ASCII characters", {"header": "Idempotency-Key"})
    return value


def place_in_chain(sent_prev: str | None, tip: str | None) -> ChainPlacement:
    """Where a receipt goes given the project's tip (docs/api.md, "Chain placement")."""
    if sent_prev is None:
        return ChainPlacement("main", tip, tip, True)
    if sent_prev == tip:
        return ChainPlacement("main", sent_prev, tip, True)
    return ChainPlacement("branch", sent_prev, tip, False)


def format_created_at(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC."""
    return f"{_second_text(ms // 1000)}.{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=256)
def _second_text(second: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a Unix second: formatted once per second, not per receipt
    (strftime was 3-4 % of a create's CPU; a create formats 3 times)."""
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def build_receipt(
    req: CreateRequest,
    *,
    receipt_id: str,
    project_id: str,
    actor_id: str,
    created_at: str,
    placement: ChainPlacement,
    keyring: KeyRing,
) -> ReceiptObject:
    """The complete signed receipt, fields in the order of docs/receipt-format.md, "The receipt object".

    Raises ``KeySetError`` when the ring has no active key."""
    kid = keyring.active_kid
    if kid is None:
        raise KeySetError("no active signing key")
    receipt: ReceiptObject = {
        "receipt_id": receipt_id,
        "project_id": project_id,
        "actor_id": actor_id,
        "created_at": created_at,
        **req.client_fields(),
        "receipt_kind": req.receipt_kind,
        "status": "issued",
        "prev_receipt_hash": placement.prev_receipt_hash,
        "receipt_hash": "",  # neither is signed: both are set below, once the hash is known
        "signature": "",
        "sig_kid": kid,
        "chain_status": placement.chain_status,
        "expected_prev_receipt_hash": placement.expected_prev_receipt_hash,
    }
    receipt_hash = compute_receipt_hash(receipt)
    receipt["receipt_hash"] = receipt_hash
    receipt["signature"] = keyring.sign(receipt_hash)
    return receipt


def chain_object(receipt: ReceiptLike) -> ChainObject:
    """The ``chain`` object of a creation response (docs/api.md)."""
    return {
        "status": receipt.get("chain_status"),
        "expected_prev_receipt_hash": receipt.get("expected_prev_receipt_hash"),
        "prev_receipt_hash": receipt.get("prev_receipt_hash"),
    }
