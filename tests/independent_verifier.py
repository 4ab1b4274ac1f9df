"""A receipt verifier written only from docs/receipt-format.md.

It deliberately shares no code with the service: no import from receipts/, kv/, web/ or the
rfc8785 package; only hashlib, base64, json, re and PyNaCl's Ed25519. If the service's
format drifted from the documented one, this verifier (and the Node.js one in
tests/verifiers/verify.mjs) would reject the service's receipts.

``verify(receipt, public_keys_body)`` runs steps 2-5 of docs/receipt-format.md's "Verifying" and returns
``{"ok", "checks": {"format", "receipt_hash_recompute", "key_known", "signature"},
"recomputed_receipt_hash"}``; it never raises on malformed input, every problem is a false check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError
from nacl.signing import VerifyKey

UNSIGNED_KEYS = frozenset({"receipt_hash", "signature", "sig_kid", "receipt_kind"})
RECEIPT_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
SIGNATURE_RE = re.compile(r"[A-Za-z0-9_-]{86}")
B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


class NotCanonicalizable(ValueError):
    """The value holds something a receipt never holds (number, bool, array, lone surrogate)."""


def jcs_string(text: str) -> str:
    """A JSON string per JCS: only ``"``, ``\\`` and characters below U+0020 are escaped."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in SHORT_ESCAPES:
            out.append(SHORT_ESCAPES[char])
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise NotCanonicalizable("lone surrogate")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def utf16_units(key: str) -> list[int]:
    """The UTF-16 code units of ``key``: the sort key JCS uses for object members."""
    units: list[int] = []
    for char in key:
        code = ord(char)
        if code >= 0x10000:
            code -= 0x10000
            units.extend((0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
        else:
            units.append(code)
    return units


def jcs_text(value: Any) -> str:
    """JCS text of a strings-and-nulls value (objects of such values allowed, nested)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return jcs_string(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise NotCanonicalizable("object keys must be strings")
        members = sorted(value.items(), key=lambda item: utf16_units(item[0]))
        return "{" + ",".join(jcs_string(k) + ":" + jcs_text(v) for k, v in members) + "}"
    raise NotCanonicalizable(f"unexpected JSON type {type(value).__name__}")


def jcs_bytes(value: Any) -> bytes:
    """Canonical bytes: the JCS text encoded as UTF-8."""
    return jcs_text(value).encode("utf-8")


def signed_payload(receipt: dict[str, Any]) -> dict[str, Any]:
    """The receipt minus the four unsigned keys; nothing else changes."""
    return {k: v for k, v in receipt.items() if k not in UNSIGNED_KEYS}


def b64url_strict(text: Any, size: int) -> bytes:
    """Decode base64url without padding; exactly ``size`` bytes, canonical encoding only."""
    if not isinstance(text, str) or not B64URL_RE.fullmatch(text):
        raise ValueError("not base64url without padding")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError("not base64url") from exc
    if len(raw) != size or base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != text:
        raise ValueError("wrong length or non-canonical encoding")
    return raw


def _format_ok(receipt: Any) -> bool:
    if not isinstance(receipt, dict):
        return False
    if not isinstance(receipt.get("receipt_hash"), str) or not RECEIPT_HASH_RE.fullmatch(receipt["receipt_hash"]):
        return False
    if not isinstance(receipt.get("signature"), str) or not SIGNATURE_RE.fullmatch(receipt["signature"]):
        return False
    if not isinstance(receipt.get("sig_kid"), str):
        return False
    for key, value in signed_payload(receipt).items():
        if key == "tags" and isinstance(value, dict):
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                return False
        elif value is not None and not isinstance(value, str):
            return False
    return True


def find_key(public_keys_body: Any, kid: Any) -> VerifyKey | None:
    """The Ed25519 key listed under ``kid``, or None (unknown kid, wrong alg, bad bytes)."""
    if not isinstance(public_keys_body, dict) or not isinstance(public_keys_body.get("keys"), list):
        return None
    for entry in public_keys_body["keys"]:
        if isinstance(entry, dict) and entry.get("kid") == kid and isinstance(kid, str):
            if entry.get("alg") != "Ed25519":
                return None
            try:
                return VerifyKey(b64url_strict(entry.get("public_key_base64url"), 32))
            except (ValueError, NaclValueError):
                return None
    return None


def recompute_receipt_hash(receipt: dict[str, Any]) -> str | None:
    """``sha256:<hex>`` of the canonical signed payload, or None when it cannot be formed."""
    try:
        canonical = jcs_bytes(signed_payload(receipt))
    except (NotCanonicalizable, UnicodeEncodeError):
        return None
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def verify(receipt: dict[str, Any], public_keys_body: dict[str, Any]) -> dict[str, Any]:
    """Steps 2-5 of the docs: format, hash, key, signature; ``ok`` only when all hold."""
    format_ok = _format_ok(receipt)
    recomputed = recompute_receipt_hash(receipt) if isinstance(receipt, dict) else None
    stored_hash = receipt.get("receipt_hash") if isinstance(receipt, dict) else None
    key = find_key(public_keys_body, receipt.get("sig_kid")) if isinstance(receipt, dict) else None
    signature_ok = False
    if key is not None and isinstance(stored_hash, str):
        try:
            key.verify(stored_hash.encode("ascii"), b64url_strict(receipt.get("signature"), 64))
            signature_ok = True
        except (ValueError, BadSignatureError, NaclValueError):
            signature_ok = False
    checks = {
        "format": format_ok,
        "receipt_hash_recompute": recomputed is not None and recomputed == stored_hash,
        "key_known": key is not None,
        "signature": signature_ok,
    }
    return {"ok": all(checks.values()), "checks": checks, "recomputed_receipt_hash": recomputed}


def verify_chain_link(receipt: dict[str, Any], previous: dict[str, Any], public_keys_body: dict[str, Any]) -> bool:
    """Section 7 step 4: ``previous`` is the verified receipt that ``receipt`` links to."""
    return (
        receipt.get("prev_receipt_hash") is not None
        and previous.get("receipt_hash") == receipt.get("prev_receipt_hash")
        and previous.get("project_id") == receipt.get("project_id")
        and verify(previous, public_keys_body)["ok"]
    )


def verify_json(receipt_text: str | bytes, keys_text: str | bytes) -> dict[str, Any]:
    """``verify`` over JSON texts (a bare receipt or a ``{"ok", "receipt"}`` response body)."""
    document = json.loads(receipt_text)
    if isinstance(document, dict) and isinstance(document.get("receipt"), dict):
        document = document["receipt"]
    return verify(document, json.loads(keys_text))
