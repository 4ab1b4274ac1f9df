"""A receipt as an in-toto attestation: the Statement, the DSSE envelope that carries it, and
the Rekor v2 ``dsse`` 0.0.2 log body of that envelope (docs/attestations.md).

- The **Statement** (in-toto Statement v1) is a rendering of the receipt: its subject is the
  receipt's ``output_hash`` (name ``output``), else its ``input_hash`` (name ``input``); its
  predicate is ``{"receipt": <the receipt object>, "log_origin": <origin or null>}``. Its
  bytes are RFC 8785 of that object, the same canonicalisation as the receipt's own.
- The **envelope** (DSSE v1) holds the Statement's bytes as ``payload`` (standard base64) and
  one signature, by the key that signed the receipt, over the DSSE pre-authentication
  encoding (PAE) of the payload type and payload. The signature is made once, at creation,
  and kept with the receipt (64 bytes): the envelope is rebuilt from the receipt and that
  signature, so every read answers the same bytes.
- The **log body** is what the log holds right after the receipt's own entry: RFC 8785 of a
  Rekor v2 ``dsse`` 0.0.2 entry, naming the SHA-256 of the payload, the signature and the
  signing key as a DER SubjectPublicKeyInfo. Its leaf hash is RFC 6962's of those bytes, so
  sigstore's verifiers prove its inclusion as they would a Rekor v2 entry.

Pure: no I/O, no server library.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from execution_proof.errors import Error
from execution_proof.receipts.canonical import canonical_bytes

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://github.com/execution-proof/execution-proof/attestation/receipt/v1"
SIGNATURE_SIZE = 64
DSSE_API_VERSION = "0.0.2"
DSSE_KIND = "dsse"
KEY_DETAILS = "PKIX_ED25519"
SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
"""DER of an Ed25519 SubjectPublicKeyInfo (RFC 8410) before its 32 key bytes."""


class AttestationError(Error, ValueError):
    """An envelope, Statement or log body that is not what this module makes (the message
    says which part)."""


def b64(data: bytes) -> str:
    """Standard base64 with padding (RFC 4648's first alphabet), DSSE's and sigstore's encoding."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any, what: str) -> bytes:
    """Strict standard base64: the one spelling ``b64`` writes, else ``AttestationError``."""
    if not isinstance(text, str):
        raise AttestationError(f"{what} is not a string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise AttestationError(f"{what} is not standard base64") from exc
    if b64(raw) != text:
        raise AttestationError(f"{what} is not canonical standard base64")
    return raw


def spki_der(public_key: bytes) -> bytes:
    """The DER SubjectPublicKeyInfo of a raw 32-byte Ed25519 key."""
    if len(public_key) != 32:
        raise AttestationError("an Ed25519 public key is 32 bytes")
    return SPKI_PREFIX + public_key


def spki_raw(der: bytes) -> bytes:
    """The raw 32-byte key of an Ed25519 DER SubjectPublicKeyInfo."""
    if len(der) != len(SPKI_PREFIX) + 32 or not der.startswith(SPKI_PREFIX):
        raise AttestationError("not an Ed25519 SubjectPublicKeyInfo")
    return der[len(SPKI_PREFIX) :]


def spki_pem(public_key: bytes) -> str:
    """The PEM ``PUBLIC KEY`` of a raw Ed25519 key (what cosign's ``--key`` reads)."""
    body = b64(spki_der(public_key))
    return "-----BEGIN PUBLIC KEY-----\n" + body + "\n-----END PUBLIC KEY-----\n"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding: what the envelope's signature signs."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement(receipt: Mapping[str, Any], log_origin: str | None) -> dict[str, Any]:
    """The in-toto Statement v1 of ``receipt`` (a receipt object, as a read returns it)."""
    if receipt.get("output_hash") is not None:
        name, digest = "output", receipt["output_hash"]
    else:
        name, digest = "input", receipt["input_hash"]
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise AttestationError(f"the receipt's {name}_hash is not a sha256: value")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest[7:]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"receipt": dict(receipt), "log_origin": log_origin},
    }


def statement_bytes(receipt: Mapping[str, Any], log_origin: str | None) -> bytes:
    """The Statement's RFC 8785 bytes: the envelope's payload."""
    return canonical_bytes(statement(receipt, log_origin))


@dataclass(frozen=True, slots=True)
class Attestation:
    """A receipt's attestation: the payload (Statement bytes), the kid of the key that
    signed it, and its 64-byte signature over the PAE. Everything else is rendered."""

    payload: bytes
    kid: str
    signature: bytes

    @classmethod
    def of(cls, receipt: Mapping[str, Any], log_origin: str | None, signature: bytes) -> Attestation:
        """The attestation of a stored receipt and its kept signature."""
        return cls(statement_bytes(receipt, log_origin), str(receipt["sig_kid"]), signature)

    def envelope(self) -> dict[str, Any]:
        """The DSSE envelope (JSON object)."""
        return {
            "payloadType": PAYLOAD_TYPE,
            "payload": b64(self.payload),
            "signatures": [{"keyid": self.kid, "sig": b64(self.signature)}],
        }

    def envelope_json(self) -> bytes:
        return orjson.dumps(self.envelope())

    def payload_hash(self) -> bytes:
        return hashlib.sha256(self.payload).digest()

    def log_body(self, public_key: bytes) -> bytes:
        """The RFC 8785 bytes of the Rekor v2 ``dsse`` 0.0.2 entry: the log's leaf."""
        return log_body(self.payload_hash(), self.signature, public_key)

    def signed_by(self, public_key: bytes) -> bool:
        """Whether the signature is ``public_key``'s over the PAE (never raises)."""
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey

        try:
            VerifyKey(public_key).verify(pae(PAYLOAD_TYPE, self.payload), self.signature)
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True

    def statement(self) -> dict[str, Any]:
        """The Statement the payload holds, parsed (``AttestationError`` when it is not one)."""
        return parse_statement(self.payload)


def attest(receipt: Mapping[str, Any], log_origin: str | None, signer: Any) -> Attestation:
    """The attestation of a new ``receipt``, signed by ``signer`` (the key that signed it)."""
    payload = statement_bytes(receipt, log_origin)
    return Attestation(payload, str(receipt["sig_kid"]), sign(signer, payload))


def sign(signer: Any, payload: bytes) -> bytes:
    """The 64-byte signature of ``signer`` (a PyNaCl ``SigningKey`` or any object whose
    ``sign(message)`` returns the signed message or the signature) over the PAE."""
    signed = signer.sign(pae(PAYLOAD_TYPE, payload))
    signature = getattr(signed, "signature", signed)
    if len(signature) != SIGNATURE_SIZE:
        raise AttestationError("an Ed25519 signature is 64 bytes")
    return bytes(signature)


def log_body(payload_hash: bytes, signature: bytes, public_key: bytes) -> bytes:
    """RFC 8785 bytes of the ``dsse`` 0.0.2 body naming ``payload_hash`` (SHA-256 of the
    payload), the envelope's ``signature`` and the raw Ed25519 ``public_key``.

    Written from a template in RFC 8785's key order: every value is base64 or a constant,
    which JSON writes as it is (``parse_log_body`` and the tests check the form)."""
    return _LOG_BODY % (b64(payload_hash).encode(), b64(signature).encode(), _spki_b64(public_key))


_LOG_BODY = (
    b'{"apiVersion":"0.0.2","kind":"dsse","spec":{"dsseV002":{"payloadHash":{"algorithm":"SHA2_256","digest":"%s"},'
    b'"signatures":[{"content":"%s","verifier":{"keyDetails":"PKIX_ED25519","publicKey":{"rawBytes":"%s"}}}]}}}'
)


@functools.lru_cache(maxsize=64)
def _spki_b64(public_key: bytes) -> bytes:
    """A receipt key's DER SubjectPublicKeyInfo in base64: the same for each of its receipts."""
    return b64(spki_der(public_key)).encode()


@dataclass(frozen=True, slots=True)
class LogBody:
    """A ``dsse`` 0.0.2 log body, read strictly: the payload's hash, the signature and the
    raw key it names."""

    payload_hash: bytes
    signature: bytes
    public_key: bytes


def parse_log_body(body: bytes) -> LogBody:
    """The fields of a ``dsse`` 0.0.2 body, or ``AttestationError``: exactly the members
    ``log_body`` writes, one Ed25519 signature, and in RFC 8785 form (the bytes are the leaf)."""
    try:
        value = orjson.loads(body)
        spec = value["spec"]["dsseV002"]
        digest = spec["payloadHash"]
        (one,) = spec["signatures"]
        verifier = one["verifier"]
        shapes = (
            (value, {"apiVersion", "kind", "spec"}),
            (value["spec"], {"dsseV002"}),
            (spec, {"payloadHash", "signatures"}),
            (digest, {"algorithm", "digest"}),
            (one, {"content", "verifier"}),
            (verifier, {"publicKey", "keyDetails"}),
            (verifier["publicKey"], {"rawBytes"}),
        )
        if any(type(part) is not dict or set(part) != names for part, names in shapes):
            raise AttestationError("not a dsse 0.0.2 body: unexpected members")
        if value["apiVersion"] != DSSE_API_VERSION or value["kind"] != DSSE_KIND:
            raise AttestationError("not a dsse 0.0.2 body")
        if digest["algorithm"] != "SHA2_256" or verifier["keyDetails"] != KEY_DETAILS:
            raise AttestationError("a dsse body of another algorithm than SHA2_256 and PKIX_ED25519")
        payload_hash = unb64(digest["digest"], "payloadHash.digest")
        signature = unb64(one["content"], "the signature")
        public_key = spki_raw(unb64(verifier["publicKey"]["rawBytes"], "publicKey.rawBytes"))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, AttestationError):
            raise
        raise AttestationError(f"not a dsse 0.0.2 body: {exc}") from exc
    if len(payload_hash) != 32 or len(signature) != SIGNATURE_SIZE:
        raise AttestationError("a dsse body's hash is 32 bytes and its signature 64")
    if canonical_bytes(value) != body:
        raise AttestationError("a dsse body not in RFC 8785 form")
    return LogBody(payload_hash, signature, public_key)


def parse_envelope(value: Any) -> Attestation:
    """An envelope (JSON object) read strictly: ``payloadType`` in-toto, a base64 payload,
    exactly one signature with a ``keyid``. ``AttestationError`` otherwise."""
    if type(value) is not dict or set(value) != {"payloadType", "payload", "signatures"}:
        raise AttestationError("a DSSE envelope has exactly payloadType, payload and signatures")
    if value["payloadType"] != PAYLOAD_TYPE:
        raise AttestationError(f"payloadType is not {PAYLOAD_TYPE}")
    signatures = value["signatures"]
    if type(signatures) is not list or len(signatures) != 1:
        raise AttestationError("a receipt's envelope has exactly one signature")
    (one,) = signatures
    if type(one) is not dict or set(one) != {"keyid", "sig"} or not isinstance(one["keyid"], str):
        raise AttestationError("the envelope's signature has exactly keyid and sig")
    signature = unb64(one["sig"], "the envelope's sig")
    if len(signature) != SIGNATURE_SIZE:
        raise AttestationError("the envelope's sig is not 64 bytes")
    return Attestation(unb64(value["payload"], "the envelope's payload"), one["keyid"], signature)


def parse_statement(payload: bytes) -> dict[str, Any]:
    """The Statement a payload holds: an in-toto Statement v1 of this predicate type, whose
    subject is the receipt's, in RFC 8785 form. ``AttestationError`` otherwise."""
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise AttestationError(f"the payload is not JSON: {exc}") from exc
    if type(value) is not dict or set(value) != {"_type", "subject", "predicateType", "predicate"}:
        raise AttestationError("the payload is not an in-toto Statement")
    if value["_type"] != STATEMENT_TYPE or value["predicateType"] != PREDICATE_TYPE:
        raise AttestationError("the payload is not a receipt's in-toto Statement v1")
    predicate = value["predicate"]
    if type(predicate) is not dict or set(predicate) != {"receipt", "log_origin"}:
        raise AttestationError("the predicate has exactly receipt and log_origin")
    receipt, origin = predicate["receipt"], predicate["log_origin"]
    if type(receipt) is not dict or not (origin is None or isinstance(origin, str)):
        raise AttestationError("the predicate's receipt is not an object, or its log_origin not a string")
    try:
        expected = statement(receipt, origin)
    except (KeyError, AttestationError) as exc:
        raise AttestationError(f"the predicate's receipt has no subject: {exc}") from exc
    if value["subject"] != expected["subject"]:
        raise AttestationError("the Statement's subject is not its receipt's output_hash (else input_hash)")
    if canonical_bytes(value) != payload:
        raise AttestationError("the payload is not in RFC 8785 form")
    return value
