"""Small encodings shared by the receipt format: sha256 tags, base64url without padding."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import NewType, TypeGuard

HashStr = NewType("HashStr", str)
"""A ``sha256:<64 lowercase hex>`` string."""

HASH_PREFIX = "sha256:"
HASH_RE = re.compile(r"sha256:[0-9a-fA-F]{64}")


def sha256_tag(data: bytes) -> HashStr:
    """Return ``sha256:<lowercase hex>`` of ``data``."""
    return HashStr(HASH_PREFIX + hashlib.sha256(data).hexdigest())


def is_hash_str(value: object) -> TypeGuard[str]:
    """True for ``sha256:`` followed by exactly 64 hex characters (either case)."""
    return isinstance(value, str) and HASH_RE.fullmatch(value) is not None


def b64url_encode(data: bytes) -> str:
    """base64url without padding, the form of every key and signature the service publishes."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode canonical base64url without padding; raises ``ValueError`` otherwise.

    Strict on purpose: padding, or unused low bits set in the last character, would let a
    signature or key be written in several ways that decode to the same bytes.
    """
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise ValueError("not base64url without padding")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64url") from exc
    if b64url_encode(raw) != text:
        raise ValueError("not canonical base64url")
    return raw
