"""The one place that turns a receipt into the bytes that are hashed and signed.

Contract section 1: signed payload = the receipt as ``GET /v1/receipts/{id}`` returns it,
minus ``receipt_hash``, ``signature``, ``sig_kid`` and ``receipt_kind``; canonical bytes =
RFC 8785 (JCS) of that payload, UTF-8; ``receipt_hash`` = ``sha256:`` + hex of SHA-256.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rfc8785

from receipts.encoding import HashStr, sha256_tag

UNSIGNED_FIELDS = frozenset({"receipt_hash", "signature", "sig_kid", "receipt_kind"})


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 canonical JSON of ``value``. Raises ``rfc8785.CanonicalizationError``."""
    return rfc8785.dumps(value)


def signed_payload(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt minus the four keys that are not signed; nothing else is removed."""
    return {k: v for k, v in receipt.items() if k not in UNSIGNED_FIELDS}


def compute_receipt_hash(receipt: Mapping[str, Any]) -> HashStr:
    """``sha256:<hex>`` of the canonical bytes of the signed payload."""
    return sha256_tag(canonical_bytes(signed_payload(receipt)))
