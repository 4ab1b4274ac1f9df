"""Key certificates and revocations: how a receipt root vouches for the keys that sign receipts.

A receipt root never signs a receipt. It signs a **key certificate** for each online key
(a serving process's, made in memory and renewed from half its lifetime), and a
**revocation** when a key must stop counting (docs/keys.md). Both are JSON objects signed
like a receipt: Ed25519 by the root over the RFC 8785 bytes of the object without
``signature``, the signature in base64url without padding::

    {"type": "execution-proof-key-certificate/v1", "kid", "alg": "Ed25519",
     "public_key_base64url", "not_before", "not_after", "root_kid", "signature"}
    {"type": "execution-proof-key-revocation/v1", "kid", "revoked_after", "reason",
     "root_kid", "signature"}

Times are in ``created_at`` form (``YYYY-MM-DDTHH:MM:SS.mmmZ``). A key's ``kid`` is ``key-``
and the first 16 lowercase hex of SHA-256 of its raw public key; a root's is ``root-`` and
the same. A receipt by ``sig_kid`` counts when that key's certificate is signed by a pinned
root, the receipt's ``created_at`` lies within ``not_before``..``not_after``, and no known
revocation by the same root covers it (``created_at`` ≥ ``revoked_after``). Pure.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from execution_proof.errors import Error
from execution_proof.receipts.canonical import canonical_bytes
from execution_proof.receipts.encoding import b64url_decode, b64url_encode
from execution_proof.transparency.signer import KeySigner, verify_ed25519

CERTIFICATE_TYPE = "execution-proof-key-certificate/v1"
REVOCATION_TYPE = "execution-proof-key-revocation/v1"
ALG = "Ed25519"
KEY_KID_RE = re.compile(r"key-[0-9a-f]{16}")
ROOT_KID_RE = re.compile(r"root-[0-9a-f]{16}")
TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
MAX_REASON = 200
_CERTIFICATE_MEMBERS = frozenset(
    ("type", "kid", "alg", "public_key_base64url", "not_before", "not_after", "root_kid", "signature")
)
_REVOCATION_MEMBERS = frozenset(("type", "kid", "revoked_after", "reason", "root_kid", "signature"))


class KeyDocumentError(Error, ValueError):
    """A certificate, revocation or root that is not well formed (the message says which part)."""


def key_kid(public_key: bytes) -> str:
    """``key-`` + the first 16 lowercase hex of SHA-256 of the raw public key."""
    return "key-" + hashlib.sha256(public_key).hexdigest()[:16]


def root_kid(public_key: bytes) -> str:
    """``root-`` + the first 16 lowercase hex of SHA-256 of the raw public key."""
    return "root-" + hashlib.sha256(public_key).hexdigest()[:16]


def time_text(ms: int) -> str:
    """Unix milliseconds in ``created_at`` form."""
    second = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{second}.{ms % 1000:03d}Z"


def time_ms(text: str) -> int:
    """The inverse of ``time_text``; ``KeyDocumentError`` for any other form."""
    if not isinstance(text, str) or not TIME_RE.fullmatch(text):
        raise KeyDocumentError(f"{text!r} is not a time in created_at form (YYYY-MM-DDTHH:MM:SS.mmmZ)")
    try:
        moment = datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        raise KeyDocumentError(f"{text!r} is not a real time") from None
    return int(moment.timestamp()) * 1000 + int(text[20:23])


def _public_key(text: Any, what: str) -> bytes:
    try:
        raw = b64url_decode(text) if isinstance(text, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise KeyDocumentError(f"{what} is not 32 bytes of base64url")
    return raw


def _signature(text: Any, what: str) -> bytes:
    try:
        raw = b64url_decode(text) if isinstance(text, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 64:
        raise KeyDocumentError(f"{what}'s signature is not 64 bytes of base64url")
    return raw


def _strings(document: Any, members: frozenset[str], kind: str) -> dict[str, str]:
    if not isinstance(document, Mapping):
        raise KeyDocumentError(f"a {kind} is a JSON object")
    missing = sorted(members - document.keys())
    unknown = sorted(set(document) - members)
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(map(str, unknown))}"] if unknown else []
        )
        raise KeyDocumentError(f"a {kind}: {'; '.join(parts)}")
    for name in members:
        if not isinstance(document[name], str):
            raise KeyDocumentError(f"a {kind}: {name} is not a string")
    return {name: document[name] for name in members}


@dataclass(frozen=True, slots=True)
class KeyCertificate:
    """A root's statement that ``public_key`` (``kid``) may sign receipts created within
    ``not_before``..``not_after``."""

    kid: str
    public_key: bytes
    not_before: str
    not_after: str
    root_kid: str
    signature: bytes

    def unsigned(self) -> dict[str, str]:
        return {
            "type": CERTIFICATE_TYPE,
            "kid": self.kid,
            "alg": ALG,
            "public_key_base64url": b64url_encode(self.public_key),
            "not_before": self.not_before,
            "not_after": self.not_after,
            "root_kid": self.root_kid,
        }

    def to_json(self) -> dict[str, str]:
        return {**self.unsigned(), "signature": b64url_encode(self.signature)}

    def signed_bytes(self) -> bytes:
        return canonical_bytes(self.unsigned())

    def entry_body(self) -> bytes:
        """The RFC 8785 bytes of the whole certificate (its log entry's body)."""
        return canonical_bytes(self.to_json())

    @property
    def not_after_ms(self) -> int:
        return time_ms(self.not_after)

    @property
    def not_before_ms(self) -> int:
        return time_ms(self.not_before)

    def covers(self, created_at: str) -> bool:
        """``created_at`` (a receipt's, same form) lies within the validity window."""
        return self.not_before <= created_at <= self.not_after

    def signed_by(self, root_public_key: bytes) -> bool:
        return verify_ed25519(root_public_key, self.signed_bytes(), self.signature)

    @classmethod
    def parse(cls, document: Any) -> KeyCertificate:
        """A certificate read strictly (every member, no other); its signature is not checked
        here (``signed_by``)."""
        fields = _strings(document, _CERTIFICATE_MEMBERS, "key certificate")
        if fields["type"] != CERTIFICATE_TYPE or fields["alg"] != ALG:
            raise KeyDocumentError(f"a key certificate has type {CERTIFICATE_TYPE} and alg {ALG}")
        public = _public_key(fields["public_key_base64url"], "the certified key")
        if fields["kid"] != key_kid(public):
            raise KeyDocumentError(f"a key certificate's kid {fields['kid']!r} is not its key's")
        if not ROOT_KID_RE.fullmatch(fields["root_kid"]):
            raise KeyDocumentError("a key certificate's root_kid is not root- and 16 hex")
        if time_ms(fields["not_after"]) < time_ms(fields["not_before"]):
            raise KeyDocumentError("a key certificate ends before it starts")
        return cls(
            kid=fields["kid"],
            public_key=public,
            not_before=fields["not_before"],
            not_after=fields["not_after"],
            root_kid=fields["root_kid"],
            signature=_signature(fields["signature"], "a key certificate"),
        )


@dataclass(frozen=True, slots=True)
class KeyRevocation:
    """A root's statement that receipts by ``kid`` created at or after ``revoked_after`` do
    not count."""

    kid: str
    revoked_after: str
    reason: str
    root_kid: str
    signature: bytes

    def unsigned(self) -> dict[str, str]:
        return {
            "type": REVOCATION_TYPE,
            "kid": self.kid,
            "revoked_after": self.revoked_after,
            "reason": self.reason,
            "root_kid": self.root_kid,
        }

    def to_json(self) -> dict[str, str]:
        return {**self.unsigned(), "signature": b64url_encode(self.signature)}

    def signed_bytes(self) -> bytes:
        return canonical_bytes(self.unsigned())

    def entry_body(self) -> bytes:
        return canonical_bytes(self.to_json())

    def covers(self, created_at: str) -> bool:
        return created_at >= self.revoked_after

    def signed_by(self, root_public_key: bytes) -> bool:
        return verify_ed25519(root_public_key, self.signed_bytes(), self.signature)

    @classmethod
    def parse(cls, document: Any) -> KeyRevocation:
        fields = _strings(document, _REVOCATION_MEMBERS, "key revocation")
        if fields["type"] != REVOCATION_TYPE:
            raise KeyDocumentError(f"a key revocation has type {REVOCATION_TYPE}")
        if not KEY_KID_RE.fullmatch(fields["kid"]) or not ROOT_KID_RE.fullmatch(fields["root_kid"]):
            raise KeyDocumentError("a key revocation names a kid (key-…) and a root_kid (root-…)")
        time_ms(fields["revoked_after"])
        if len(fields["reason"]) > MAX_REASON:
            raise KeyDocumentError(f"a key revocation's reason is longer than {MAX_REASON} characters")
        return cls(
            kid=fields["kid"],
            revoked_after=fields["revoked_after"],
            reason=fields["reason"],
            root_kid=fields["root_kid"],
            signature=_signature(fields["signature"], "a key revocation"),
        )


@dataclass(frozen=True, slots=True)
class Root:
    """A receipt root's public half: what a trust root pins and ``GET /v1/public-key`` lists."""

    kid: str
    public_key: bytes

    def to_json(self) -> dict[str, str]:
        return {"kid": self.kid, "alg": ALG, "public_key_base64url": b64url_encode(self.public_key)}

    @property
    def sha256_fingerprint(self) -> str:
        return "sha256:" + hashlib.sha256(self.public_key).hexdigest()

    @classmethod
    def of(cls, public_key: bytes) -> Root:
        return cls(root_kid(public_key), public_key)

    @classmethod
    def parse(cls, document: Any) -> Root:
        """``{kid, public_key_base64url}`` (``alg``, when present, is Ed25519)."""
        if not isinstance(document, Mapping):
            raise KeyDocumentError("a root is a JSON object")
        if document.get("alg", ALG) != ALG:
            raise KeyDocumentError("a root's alg is Ed25519")
        public = _public_key(document.get("public_key_base64url"), "a root's key")
        if document.get("kid") != root_kid(public):
            raise KeyDocumentError(f"a root's kid {document.get('kid')!r} is not its key's")
        return cls(root_kid(public), public)


def certify(root: KeySigner, public_key: bytes, not_before_ms: int, not_after_ms: int) -> KeyCertificate:
    """The root's certificate for ``public_key`` (one signature by the root: a token call)."""
    draft = KeyCertificate(
        kid=key_kid(public_key),
        public_key=public_key,
        not_before=time_text(not_before_ms),
        not_after=time_text(not_after_ms),
        root_kid=root_kid(root.public_key()),
        signature=b"",
    )
    return KeyCertificate(**{**_fields(draft), "signature": root.sign(draft.signed_bytes())})


def revoke(root: KeySigner, kid: str, revoked_after_ms: int, reason: str) -> KeyRevocation:
    """The root's revocation of ``kid`` from ``revoked_after_ms`` on."""
    if len(reason) > MAX_REASON:
        raise KeyDocumentError(f"a revocation's reason is at most {MAX_REASON} characters")
    draft = KeyRevocation(kid, time_text(revoked_after_ms), reason, root_kid(root.public_key()), b"")
    return KeyRevocation(draft.kid, draft.revoked_after, reason, draft.root_kid, root.sign(draft.signed_bytes()))


def _fields(certificate: KeyCertificate) -> dict[str, Any]:
    return {name: getattr(certificate, name) for name in KeyCertificate.__slots__}


class KeyVerdict(Enum):
    """What the certified keys say of a receipt's ``sig_kid`` and ``created_at``."""

    OK = "ok"
    UNKNOWN_KEY = "unknown_key"
    """No key of that kid is known at all."""
    NO_CERTIFICATE = "no_key_certificate"
    """Roots are pinned but the key's certificate is not at hand."""
    UNKNOWN_ROOT = "unknown_root"
    """The certificate names a root that is not pinned."""
    BAD_CERTIFICATE = "bad_certificate"
    """The certificate's signature does not verify with the root it names."""
    OUTSIDE_CERTIFICATE = "outside_certificate"
    """The receipt's ``created_at`` lies outside the certificate's window."""
    REVOKED = "revoked"
    """A revocation by the certifying root covers the receipt."""

    @property
    def evidence(self) -> bool:
        """A verdict that proves the receipt does not count (INVALID), rather than one that
        leaves it unchecked."""
        return self in (
            KeyVerdict.UNKNOWN_ROOT,
            KeyVerdict.BAD_CERTIFICATE,
            KeyVerdict.OUTSIDE_CERTIFICATE,
            KeyVerdict.REVOKED,
        )


def judge(
    certificate: KeyCertificate | None,
    created_at: Any,
    roots: Mapping[str, bytes],
    revocations: Mapping[str, KeyRevocation],
    *,
    signed: bool | None = None,
) -> KeyVerdict:
    """The certificate rules for one receipt (``created_at``) by the certified key.
    ``signed``: the certificate's signature by its root, when the caller already checked it
    (None: check it here)."""
    if certificate is None:
        return KeyVerdict.NO_CERTIFICATE
    root = roots.get(certificate.root_kid)
    if root is None:
        return KeyVerdict.UNKNOWN_ROOT
    if not (certificate.signed_by(root) if signed is None else signed):
        return KeyVerdict.BAD_CERTIFICATE
    if not isinstance(created_at, str) or not certificate.covers(created_at):
        return KeyVerdict.OUTSIDE_CERTIFICATE
    revocation = revocations.get(certificate.kid)
    if revocation is not None and revocation.root_kid == certificate.root_kid and revocation.covers(created_at):
        return KeyVerdict.REVOKED
    return KeyVerdict.OK


def checked_revocations(documents: Any, roots: Mapping[str, bytes]) -> dict[str, KeyRevocation]:
    """The revocations among ``documents`` (a list of JSON objects) that a pinned root
    signed, by kid (the earliest ``revoked_after`` when several name one kid); malformed or
    unsigned ones are left out (a revocation only ever takes trust away)."""
    found: dict[str, KeyRevocation] = {}
    for document in documents if isinstance(documents, list) else []:
        try:
            revocation = KeyRevocation.parse(document)
        except KeyDocumentError:
            continue
        root = roots.get(revocation.root_kid)
        if root is None or not revocation.signed_by(root):
            continue
        earlier = found.get(revocation.kid)
        if earlier is None or revocation.revoked_after < earlier.revoked_after:
            found[revocation.kid] = revocation
    return found
