"""RFC 3161 time-stamps over log checkpoints, pure (docs/log.md, "Time evidence").

The imprint is SHA-256 of the checkpoint's text: the note body up to and including its last
``\\n`` before the blank line (``receipts.note.Note.text``), so one time-stamp holds for the
checkpoint whatever signatures travel with it. A token says the TSA saw that text at its
``genTime`` (within its accuracy): every receipt in the checkpoint's tree existed by then.

Parsing and the CMS signature check are ``rfc3161-client``'s (pyca's cryptography and
OpenSSL underneath); this module decides what to ask and what to accept:

- ``new_request``: a TimeStampReq over the checkpoint text (SHA-256, a random nonce, the
  TSA's certificate asked for, so a token verifies with nothing but the TSA's root);
- ``check_response``: what the log keeps (status granted, imprint, nonce, the signing
  certificate's critical timeStamping usage; with roots, the signature and the chain too);
- ``verify_token``: what a verifier accepts (the same, against the roots it trusts).
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass

import cryptography.x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from rfc3161_client import (
    HashAlgorithm,
    PKIStatus,
    TimestampRequestBuilder,
    TimeStampResponse,
    VerificationError,
    VerifierBuilder,
    decode_timestamp_response,
)

from receipts.errors import LogError

SHA256_OID = cryptography.x509.ObjectIdentifier("2.16.840.1.101.3.4.2.1")
QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"
MAX_RESPONSE_BYTES = 64 * 1024


class StampError(LogError, ValueError):
    """A time-stamp response that must not be kept or trusted (the message says why)."""


@dataclass(frozen=True)
class StampRequest:
    der: bytes
    nonce: int
    digest: bytes


@dataclass(frozen=True)
class Stamp:
    """What a checked token says."""

    gen_time: datetime.datetime
    accuracy_s: float
    """The TSA's stated accuracy (0 when it states none)."""
    tsa_name: str
    """The signing certificate's subject (RFC 4514)."""
    serial: int

    @property
    def existed_by(self) -> datetime.datetime:
        """The latest time the stamped text provably existed: genTime plus the accuracy."""
        return self.gen_time + datetime.timedelta(seconds=self.accuracy_s)


def imprint(checkpoint_text: str | bytes) -> bytes:
    data = checkpoint_text.encode() if isinstance(checkpoint_text, str) else checkpoint_text
    return hashlib.sha256(data).digest()


def new_request(checkpoint_text: str) -> StampRequest:
    request = (
        TimestampRequestBuilder()
        .data(checkpoint_text.encode())
        .hash_algorithm(HashAlgorithm.SHA256)
        .cert_request(cert_request=True)
        .build()
    )
    assert request.nonce is not None  # the builder adds one by default
    return StampRequest(request.as_bytes(), request.nonce, imprint(checkpoint_text))


def load_roots(pem: bytes) -> list[cryptography.x509.Certificate]:
    """The certificates of a PEM file; StampError when there are none or one is malformed."""
    try:
        roots = cryptography.x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise StampError(f"not a PEM file of certificates: {exc}") from exc
    if not roots:
        raise StampError("the PEM file holds no certificate")
    return roots


def _decode(der: bytes) -> TimeStampResponse:
    if len(der) > MAX_RESPONSE_BYTES:
        raise StampError(f"the response is larger than {MAX_RESPONSE_BYTES} bytes")
    try:
        response = decode_timestamp_response(der)
    except ValueError as exc:
        raise StampError(f"not a DER TimeStampResp: {exc}") from exc
    if response.status not in (PKIStatus.GRANTED, PKIStatus.GRANTED_WITH_MODS):
        raise StampError(f"the TSA did not grant it (PKIStatus {response.status})")
    return response


def _signer_certificate(response: TimeStampResponse) -> cryptography.x509.Certificate:
    """The certificate the token's one SignerInfo names, with the critical timeStamping
    extended key usage RFC 3161 requires of a TSA's certificate."""
    try:
        signer_infos = list(response.signed_data.signer_infos)
        certificates = [cryptography.x509.load_der_x509_certificate(c) for c in response.signed_data.certificates]
    except ValueError as exc:
        raise StampError(f"the token is malformed: {exc}") from exc
    if len(signer_infos) != 1:
        raise StampError(f"the token has {len(signer_infos)} signers, not one")
    signer = signer_infos[0]
    found = [c for c in certificates if c.issuer == signer.issuer and c.serial_number == signer.serial_number]
    if not found:
        raise StampError("the token carries no certificate of its signer (the request asks for it)")
    certificate = found[0]
    try:
        usage = certificate.extensions.get_extension_for_class(cryptography.x509.ExtendedKeyUsage)
    except cryptography.x509.ExtensionNotFound:
        raise StampError("the TSA's certificate has no extended key usage (timeStamping is required)") from None
    if not usage.critical or ExtendedKeyUsageOID.TIME_STAMPING not in usage.value:
        raise StampError("the TSA's certificate is not for time-stamping (critical timeStamping usage required)")
    return certificate


def _stamp(response: TimeStampResponse, certificate: cryptography.x509.Certificate) -> Stamp:
    info = response.tst_info
    accuracy = info.accuracy
    seconds = 0.0
    if accuracy is not None:
        seconds = accuracy.seconds + (accuracy.millis or 0) / 1e3 + (accuracy.micros or 0) / 1e6
    gen_time = info.gen_time
    if gen_time.tzinfo is None:
        gen_time = gen_time.replace(tzinfo=datetime.UTC)
    return Stamp(gen_time, seconds, certificate.subject.rfc4514_string(), info.serial_number)


def _check_imprint(response: TimeStampResponse, digest: bytes) -> None:
    message = response.tst_info.message_imprint
    if message.hash_algorithm != SHA256_OID:
        raise StampError("the token's imprint is not SHA-256")
    if message.message != digest:
        raise StampError("the token is over another text than this checkpoint's")


def _verify_chain(
    response: TimeStampResponse, digest: bytes, roots: list[cryptography.x509.Certificate], nonce: int | None
) -> None:
    builder = VerifierBuilder()
    for root in roots:
        builder = builder.add_root_certificate(root)
    if nonce is not None:
        builder = builder.nonce(nonce)
    try:
        builder.build().verify(response, digest)
    except (VerificationError, ValueError) as exc:
        raise StampError(f"the token does not verify against the roots: {exc}") from exc


def check_response(
    der: bytes, request: StampRequest, roots: list[cryptography.x509.Certificate] | None = None
) -> Stamp:
    """Whether a TSA's answer to ``request`` may be kept: granted, over the checkpoint's text,
    with the request's nonce, signed under a certificate for time-stamping; with ``roots``
    (``LOG_TSA_ROOTS``) its signature and chain are checked as well."""
    response = _decode(der)
    if response.tst_info.nonce != request.nonce:
        raise StampError("the token's nonce is not the request's (a replayed or misrouted answer)")
    _check_imprint(response, request.digest)
    certificate = _signer_certificate(response)
    if roots:
        _verify_chain(response, request.digest, roots, request.nonce)
    return _stamp(response, certificate)


def verify_token(der: bytes, checkpoint_text: str, roots: list[cryptography.x509.Certificate]) -> Stamp:
    """A verifier's check of a kept token: everything ``check_response`` checks but the
    nonce (which only the requester knew), the signature and chain always, against ``roots``."""
    response = _decode(der)
    digest = imprint(checkpoint_text)
    _check_imprint(response, digest)
    certificate = _signer_certificate(response)
    _verify_chain(response, digest, roots, None)
    return _stamp(response, certificate)
