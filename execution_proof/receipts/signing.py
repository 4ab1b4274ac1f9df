"""Ed25519 receipt keys: the key ring a verifier (and a signing process) holds, signing and
verification.

The signature is over the ASCII bytes of the ``receipt_hash`` string itself
(docs/receipt-format.md). A ring holds keys by kid, each with its certificate when it has one
(receipts/key_certificates.py); a ring with ``roots`` judges every key by them (a key counts
only through a certificate a pinned root signed), a ring without takes its keys as pinned
themselves (a version 1 trust root, ``--keys``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import orjson
from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError
from nacl.signing import SigningKey, VerifyKey

from execution_proof.errors import Error
from execution_proof.receipts.encoding import b64url_decode, b64url_encode
from execution_proof.receipts.key_certificates import (
    KeyCertificate,
    KeyDocumentError,
    KeyRevocation,
    KeyVerdict,
    Root,
    checked_revocations,
    judge,
)
from execution_proof.receipts.shapes import JSONValue

KID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


class KeySet(TypedDict, total=False):
    """The ``GET /v1/public-key`` body: ``keys`` (``kid``, ``alg``, ``public_key_base64url``,
    and ``certificate`` for a certified key), ``active_kid``, and for a service with receipt
    roots ``roots`` and ``revocations``."""

    keys: list[dict[str, Any]]
    active_kid: str | None
    roots: list[dict[str, str]]
    revocations: list[dict[str, str]]


class KeySetError(Error, ValueError):
    """The key set is malformed; the message says which entry and why (never the key)."""


@dataclass(frozen=True)
class PublicKey:
    kid: str
    verify_key: VerifyKey
    certificate: KeyCertificate | None = None

    @property
    def public_key_base64url(self) -> str:
        return b64url_encode(bytes(self.verify_key))

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"kid": self.kid, "alg": "Ed25519", "public_key_base64url": self.public_key_base64url}
        if self.certificate is not None:
            entry["certificate"] = self.certificate.to_json()
        return entry

    @classmethod
    def certified(cls, certificate: KeyCertificate) -> PublicKey:
        return cls(certificate.kid, VerifyKey(certificate.public_key), certificate)


@dataclass(frozen=True)
class KeyRing:
    """Every known key; ``active`` (with its private half) signs new receipts. ``roots``
    (kid → raw public key) None: the keys are trusted as they are; else each key counts only
    through its certificate (``judge``), and ``revocations`` (by kid, each signed by a root)
    take receipts away from a key."""

    keys: Mapping[str, PublicKey]
    active_kid: str | None
    active_signer: SigningKey | None
    roots: Mapping[str, bytes] | None = None
    revocations: Mapping[str, KeyRevocation] = field(default_factory=dict)
    _signed: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    """Each certificate's signature by its root, checked once per ring (a verification costs
    what a receipt's does)."""

    @property
    def can_sign(self) -> bool:
        return self.active_signer is not None

    def public_keys_json(self) -> KeySet:
        """The ``GET /v1/public-key`` body."""
        body: KeySet = {
            "keys": [k.to_json() for k in self.keys.values()],
            "active_kid": self.active_kid,
        }
        if self.roots is not None:
            body["roots"] = [Root(kid, public).to_json() for kid, public in self.roots.items()]
            body["revocations"] = [r.to_json() for r in self.revocations.values()]
        return body

    def judge(self, kid: Any, created_at: Any) -> KeyVerdict:
        """Whether the key ``kid`` counts for a receipt created at ``created_at``: always
        for a known key of a ring without roots, else by its certificate's rules."""
        key = self.keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            return KeyVerdict.UNKNOWN_KEY
        if self.roots is None:
            return KeyVerdict.OK
        certificate = key.certificate
        signed = self._signed.get(kid)
        if signed is None and certificate is not None and certificate.root_kid in self.roots:
            signed = self._signed[kid] = certificate.signed_by(self.roots[certificate.root_kid])
        return judge(certificate, created_at, self.roots, self.revocations, signed=signed)

    def with_roots(self, roots: Mapping[str, bytes], revocations: Any = ()) -> KeyRing:
        """This ring judged by ``roots`` (what a trust root pins): revocations are those of
        ``revocations`` (JSON objects) and of this ring that a pinned root signed."""
        documents = [r.to_json() for r in self.revocations.values()] + list(revocations or [])
        return replace(self, roots=dict(roots), revocations=checked_revocations(documents, roots), _signed={})

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
    """A fresh key set holding one active key named ``kid``, its private half included: for
    signing receipts outside a service (test vectors, the benchmark's client); a service's
    keys are certified per process by its receipt root (docs/keys.md)."""
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
    """Parse a key set (a ``GET /v1/public-key`` body, a ``--keys`` file, or one with private
    keys as ``new_key_set`` makes), as text or as parsed JSON of any shape (it is checked here).

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
        certificate = None
        if entry.get("certificate") is not None:
            try:
                certificate = KeyCertificate.parse(entry["certificate"])
            except KeyDocumentError as exc:
                raise KeySetError(f"keys[{index}]: {exc}") from exc
            if certificate.kid != kid or certificate.public_key != bytes(verify_key):
                raise KeySetError(f"keys[{index}]: the certificate is for another key")
        keys[kid] = PublicKey(kid, verify_key, certificate)
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
