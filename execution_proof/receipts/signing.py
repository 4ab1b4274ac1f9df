"""Ed25519 signing keys: the key set from ``SIGNING_KEYS``, signing and verification.

The signature is over the ASCII bytes of the ``receipt_hash`` string itself (docs/receipt-format.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

import orjson
from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError
from nacl.signing import SigningKey, VerifyKey

from execution_proof.errors import Error
from execution_proof.receipts.encoding import b64url_decode, b64url_encode
from execution_proof.receipts.shapes import JSONValue

KID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


class KeySet(TypedDict):
    """A key set document: ``SIGNING_KEYS`` (entries with ``private_key_base64url``) or the
    ``GET /v1/public-key`` body (entries with ``alg`` and ``public_key_base64url``)."""

    keys: list[dict[str, str]]
    active_kid: str | None


class KeySetError(Error, ValueError):
    """The key set is malformed; the message says which entry and why (never the key)."""


@dataclass(frozen=True)
class PublicKey:
    kid: str
    verify_key: VerifyKey

    @property
    def public_key_base64url(self) -> str:
        return b64url_encode(bytes(self.verify_key))

    def to_json(self) -> dict[str, str]:
        return {"kid": self.kid, "alg": "Ed25519", "public_key_base64url": self.public_key_base64url}


@dataclass(frozen=True)
class KeyRing:
    """Every published key; ``active`` (with its private half) signs new receipts."""

    keys: Mapping[str, PublicKey]
    active_kid: str | None
    active_signer: SigningKey | None

    @property
    def can_sign(self) -> bool:
        return self.active_signer is not None

    def public_keys_json(self) -> KeySet:
        """The ``GET /v1/public-key`` body."""
        return {
            "keys": [k.to_json() for k in self.keys.values()],
            "active_kid": self.active_kid,
        }

    def sign(self, receipt_hash: str) -> str:
        """base64url (no padding) Ed25519 signature over the ASCII receipt hash."""
        if self.active_signer is None:
            raise KeySetError("no active signing key")
        return b64url_encode(self.active_signer.sign(receipt_hash.encode("ascii")).signature)

    def verify(self, kid: str, receipt_hash: str, signature: str) -> bool:
        """True only when ``kid`` is known and the signature is valid; never raises."""
        key = self.keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            return False
        return verify_signature(key.verify_key, receipt_hash, signature)


def verify_signature(key: VerifyKey, receipt_hash: str, signature: str) -> bool:
    """Ed25519 check of ``signature`` over the ASCII bytes of ``receipt_hash``."""
    try:
        sig = b64url_decode(signature)
        key.verify(receipt_hash.encode("ascii"), sig)
    except (ValueError, BadSignatureError, NaclValueError, UnicodeEncodeError, TypeError):
        return False
    return True


def new_key_set(kid: str) -> KeySet:
    """A fresh ``SIGNING_KEYS`` document holding one active key named ``kid``."""
    if not KID_RE.fullmatch(kid):
        raise KeySetError("kid must be 1-64 characters of A-Z a-z 0-9 . _ -")
    signer = SigningKey.generate()
    return {
        "active_kid": kid,
        "keys": [
            {
                "kid": kid,
                "private_key_base64url": b64url_encode(bytes(signer)),
                "public_key_base64url": b64url_encode(bytes(signer.verify_key)),
            }
        ],
    }


def load_key_ring(document: str | bytes | KeySet | JSONValue) -> KeyRing:
    """Parse a ``SIGNING_KEYS`` document (README.md, "Configuration") or a ``GET /v1/public-key`` body,
    as text or as parsed JSON of any shape (it is checked here).

    Raises ``KeySetError`` for malformed JSON, duplicate kids, bad key material, a private
    and public half that do not match, or an ``active_kid`` without a private key.
    """
    if isinstance(document, (str, bytes)):
        try:
            document = orjson.loads(document)
        except orjson.JSONDecodeError as exc:
            raise KeySetError("key set is not valid JSON") from exc
    entries = document.get("keys") if isinstance(document, Mapping) else None
    if not isinstance(document, Mapping) or not isinstance(entries, list):
        raise KeySetError('key set must be an object with a "keys" list')
    keys: dict[str, PublicKey] = {}
    signers: dict[str, SigningKey] = {}
    for index, entry in enumerate(entries):
        kid = entry.get("kid") if isinstance(entry, Mapping) else None
        if not isinstance(entry, Mapping) or not isinstance(kid, str):
            raise KeySetError(f"keys[{index}] needs a string kid")
        if not KID_RE.fullmatch(kid):
            raise KeySetError(f"keys[{index}]: kid must be 1-64 characters of A-Z a-z 0-9 . _ -")
        if kid in keys:
            raise KeySetError(f"keys[{index}]: duplicate kid {kid!r}")
        verify_key = None
        try:
            private, public_text = entry.get("private_key_base64url"), entry.get("public_key_base64url")
            if private is not None:
                signer = SigningKey(_raw32(private))
                signers[kid] = signer
                verify_key = signer.verify_key
            if public_text is not None:
                public = VerifyKey(_raw32(public_text))
                if verify_key is not None and bytes(public) != bytes(verify_key):
                    raise KeySetError(f"keys[{index}]: public key does not match private key")
                verify_key = public
        except (ValueError, NaclValueError, TypeError) as exc:
            if isinstance(exc, KeySetError):
                raise
            raise KeySetError(f"keys[{index}]: key material is not 32 bytes of base64url") from exc
        if verify_key is None:
            raise KeySetError(f"keys[{index}] has neither a private nor a public key")
        keys[kid] = PublicKey(kid, verify_key)
    active = document.get("active_kid")
    if active is not None and not isinstance(active, str):
        raise KeySetError("active_kid must be a string")
    if active is not None and active not in keys:
        raise KeySetError(f"active_kid {active!r} is not in keys")
    return KeyRing(keys=keys, active_kid=active, active_signer=signers.get(active) if active else None)


def _raw32(text: JSONValue) -> bytes:
    if not isinstance(text, str):
        raise ValueError("key must be a base64url string")
    raw = b64url_decode(text)
    if len(raw) != 32:
        raise ValueError("key must be 32 bytes")
    return raw
