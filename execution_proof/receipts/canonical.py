"""The one place that turns a receipt into the bytes that are hashed and signed.

docs/receipt-format.md: signed payload = the receipt as ``GET /v1/receipts/{id}`` returns it,
minus ``receipt_hash``, ``signature``, ``sig_kid`` and ``receipt_kind``; canonical bytes =
RFC 8785 (JCS) of that payload, UTF-8; ``receipt_hash`` = ``sha256:`` + hex of SHA-256.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import orjson
import rfc8785

from execution_proof.receipts.encoding import HashStr, sha256_tag
from execution_proof.receipts.shapes import ReceiptLike

UNSIGNED_FIELDS = frozenset({"receipt_hash", "signature", "sig_kid", "receipt_kind"})
V = TypeVar("V")


MAX_SAFE_INTEGER = 2**53 - 1
"""RFC 8785 (I-JSON) numbers are IEEE doubles: rfc8785 refuses integers beyond this."""
FAST_PATH_MAX_DEPTH = 64
"""Deeper values take rfc8785 (orjson refuses nesting past 255; receipts nest 2 deep)."""
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 canonical JSON of ``value``. Raises ``rfc8785.CanonicalizationError``.

    Values made only of strings, safe integers, booleans, null, lists and objects whose keys
    have no character beyond U+FFFF (every receipt) are written by orjson with sorted keys,
    about 30 times faster than rfc8785's pure Python; anything else (floats, astral keys,
    big integers, subclasses, deep nesting) goes to rfc8785. For such values the two give the
    same bytes: JCS escapes exactly ``"``, ``\\`` and U+0000-U+001F as orjson does, writes
    integers alike, and sorts keys by UTF-16 code units, which is code-point order (orjson's)
    as long as no key has a surrogate pair. tests/test_canonical.py checks the equality on
    generated values and the fallback on the rest.
    """
    if _fast_path_applies(value, 0):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate, say: rfc8785 decides (and raises its own error)
    return rfc8785.dumps(value)


def _fast_path_applies(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
    if depth >= FAST_PATH_MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and _ASTRAL.search(key)):
                return False
            item_kind = type(item)
            # Strings and nulls (nearly every receipt value) are settled here, without a call.
            if item_kind is not str and item is not None and not _fast_path_applies(item, depth + 1):
                return False
        return True
    if kind is list:
        return all(_fast_path_applies(item, depth + 1) for item in value)
    return False


def signed_payload(receipt: Mapping[str, V]) -> dict[str, V]:
    """The receipt minus the four keys that are not signed; nothing else is removed (whatever
    the object holds: the format says to drop the four keys, not to keep a list of fields)."""
    return {k: v for k, v in receipt.items() if k not in UNSIGNED_FIELDS}


def compute_receipt_hash(receipt: ReceiptLike) -> HashStr:
    """``sha256:<hex>`` of the canonical bytes of the signed payload."""
    return sha256_tag(canonical_bytes(signed_payload(receipt)))
