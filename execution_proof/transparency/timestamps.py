"""RFC 3161 time-stamps over log checkpoints, pure (docs/log.md, "Time evidence").

The imprint is a hash of the checkpoint's text: the note body up to and including its last
``\\n`` before the blank line (``receipts.note.Note.text``), so one time-stamp holds for the
checkpoint whatever signatures travel with it. A token says the TSA saw that text at its
``genTime`` (within its accuracy): every receipt in the checkpoint's tree existed by then.

Tokens are read as TSAs send them: DER or BER (indefinite lengths, a chunked eContent, sets
in any order), the certificate set in any order, with or without the TSA's chain, ESSCertID
v1 or v2, a SHA-256/384/512 imprint. transparency/ber.py makes every length definite, then
``asn1crypto`` parses (pure Python); every check is made here with pyca/cryptography's
primitives and its X.509 path verification, as RFC 3161 and RFC 5652 say (``_check``):

- one SignerInfo, whose certificate is in the token (a token without certificates is refused:
  the request asks for them) with the critical extended key usage timeStamping and nothing
  else, and a key usage (if any) of digitalSignature / nonRepudiation only;
- signed attributes: contentType id-ct-TSTInfo, messageDigest = the hash of the encapsulated
  TSTInfo's octets, the CMS signature over them re-encoded with DER lengths as a SET (in the
  order received, as OpenSSL checks, or sorted, as RFC 5652 §5.4's DER has it), a
  signingCertificate(V2) whose first ESSCertID is the signer's certificate (its other IDs
  naming certificates of the chain); the TSTInfo's ``tsa`` (if any) names the signer;
- with roots: the chain from the signer's certificate to one of them, at ``genTime``, the
  token's other certificates as intermediates (cryptography's ``PolicyBuilder``).

``new_request`` builds the TimeStampReq (SHA-256, a random nonce, certReq); ``check_response``
is what the log keeps (also the nonce; the chain when ``LOG_TSA_ROOTS`` is set);
``verify_token`` what a verifier accepts (the chain always, against the roots it trusts).
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import cryptography.x509
from asn1crypto import cms, core, tsp
from asn1crypto import x509 as asn1_x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID

from execution_proof.transparency import ber
from execution_proof.transparency.errors import LogError

QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"
MAX_RESPONSE_BYTES = 64 * 1024
HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}
"""The digests accepted for the imprint, the signed attributes and ESSCertIDv2 (asn1crypto's
names, which are hashlib's too). ESSCertID v1 is SHA-1 by definition: an identifier there."""

_PARSE_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    UnsupportedAlgorithm,
    cryptography.x509.InvalidVersion,
)
"""What asn1crypto raises on malformed input (it parses lazily: at any access), and what
cryptography raises on a certificate it cannot read (an unknown key type, version)."""


class _TimeStampResp(core.Sequence):  # type: ignore[misc]
    """RFC 3161's TimeStampResp. asn1crypto's own declares the token mandatory, but a refusal
    (PKIStatus rejection) carries none."""

    _fields: ClassVar[list[Any]] = [
        ("status", tsp.PKIStatusInfo),
        ("time_stamp_token", cms.ContentInfo, {"optional": True}),
    ]


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


@dataclass(frozen=True)
class _Token:
    """The parts of a granted TimeStampResp the checks read."""

    econtent: bytes
    """The encapsulated TSTInfo's octets (chunks joined), which messageDigest covers."""
    imprint: tuple[str, bytes]
    """The TSTInfo's messageImprint: (hash algorithm, hash)."""
    nonce: int | None
    gen_time: datetime.datetime
    accuracy_s: float
    serial: int
    tsa: Any
    """The TSTInfo's ``tsa`` GeneralName (asn1crypto's Void when absent)."""
    signer: cms.SignerInfo
    certificates: list[tuple[Any, cryptography.x509.Certificate]]
    """The token's certificates, each as asn1crypto and as cryptography read it."""


def imprint(checkpoint_text: str | bytes, algorithm: str = "sha256") -> bytes:
    data = checkpoint_text.encode() if isinstance(checkpoint_text, str) else checkpoint_text
    return hashlib.new(algorithm, data).digest()


def new_request(checkpoint_text: str) -> StampRequest:
    digest = imprint(checkpoint_text)
    nonce = secrets.randbits(63) | 1 << 62  # positive, eight bytes
    request = tsp.TimeStampReq(
        {
            "version": "v1",
            "message_imprint": {"hash_algorithm": {"algorithm": "sha256"}, "hashed_message": digest},
            "nonce": nonce,
            "cert_req": True,
        }
    )
    return StampRequest(request.dump(), nonce, digest)


def load_roots(pem: bytes) -> list[cryptography.x509.Certificate]:
    """The certificates of a PEM file; StampError when there are none or one is malformed.
    cryptography's deprecation warnings on a system bundle's old roots (a negative serial
    number) are not shown: the user can do nothing about them, and they named a path in
    site-packages."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            roots = cryptography.x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise StampError(f"not a PEM file of certificates: {exc}") from exc
    if not roots:
        raise StampError("the PEM file holds no certificate")
    return roots


# -- reading


def _parse(der: bytes) -> _Token:
    if len(der) > MAX_RESPONSE_BYTES:
        raise StampError(f"the response is larger than {MAX_RESPONSE_BYTES} bytes")
    try:
        definite, used = ber.definite(der)
    except ber.BerError as exc:
        raise StampError(f"not a TimeStampResp: {exc}") from exc
    if used != len(der):
        raise StampError("not a TimeStampResp: the response has bytes after its end")
    try:
        response = _TimeStampResp.load(definite, strict=True)
        status = response["status"]["status"].native
    except _PARSE_ERRORS as exc:
        raise StampError(f"not a TimeStampResp (DER or BER): {exc}") from exc
    if status not in ("granted", "granted_with_mods"):
        raise StampError(f"the TSA did not grant it (PKIStatus {status})")
    try:
        return _token(response["time_stamp_token"])
    except StampError:
        raise
    except _PARSE_ERRORS as exc:
        raise StampError(f"the token is malformed: {exc}") from exc


def _token(content_info: cms.ContentInfo) -> _Token:
    # (asn1crypto's ``native`` of a whole structure is slow: 100 ms a token. Fields only.)
    if isinstance(content_info, core.Void) or content_info["content_type"].native != "signed_data":
        raise StampError("the response carries no CMS SignedData token")
    signed = content_info["content"]
    encapsulated = signed["encap_content_info"]
    if encapsulated["content_type"].native != "tst_info" or isinstance(encapsulated["content"], core.Void):
        raise StampError("the token does not hold a TSTInfo")
    econtent = bytes(encapsulated["content"])
    info = tsp.TSTInfo.load(econtent, strict=True)
    if info["version"].native != "v1":
        raise StampError(f"the TSTInfo's version is {info['version'].native}, not v1")
    message = info["message_imprint"]
    gen_time: datetime.datetime = info["gen_time"].native
    accuracy = info["accuracy"]
    seconds = 0.0
    if not isinstance(accuracy, core.Void):
        parts = [accuracy[name].native or 0 for name in ("seconds", "millis", "micros")]
        seconds = parts[0] + parts[1] / 1e3 + parts[2] / 1e6
    signers = list(signed["signer_infos"])
    if len(signers) != 1:
        raise StampError(f"the token has {len(signers)} signers, not one")
    certificates = []
    for choice in signed["certificates"] or []:
        if choice.name != "certificate":
            continue  # attribute certificates and others: not part of any check
        try:
            certificate = cryptography.x509.load_der_x509_certificate(choice.chosen.dump())
        except _PARSE_ERRORS as exc:  # a certificate is signed DER: re-encoded, it would not verify
            raise StampError(f"the token holds a certificate that is not DER: {exc}") from exc
        certificates.append((choice.chosen, certificate))
    return _Token(
        econtent=econtent,
        imprint=(message["hash_algorithm"]["algorithm"].native, message["hashed_message"].native),
        nonce=info["nonce"].native,
        gen_time=gen_time if gen_time.tzinfo else gen_time.replace(tzinfo=datetime.UTC),
        accuracy_s=seconds,
        serial=info["serial_number"].native,
        tsa=info["tsa"],
        signer=signers[0],
        certificates=certificates,
    )


def _signed_attributes_der(attributes: cms.CMSAttributes, *, sort: bool) -> bytes:
    """What the signature covers (RFC 5652 §5.4): the signed attributes as a SET OF with DER
    lengths, each attribute's values SET sorted, each value's bytes as written (a value is
    signed as it was written). ``sort`` False keeps the attributes in the order received, as
    OpenSSL verifies them (so do signers that write them unsorted); True sorts them as DER
    asks (a SET reordered on the way)."""
    encoded = []
    for attribute in attributes:
        kind = core.ObjectIdentifier(attribute["type"].dotted).dump()
        values = sorted(value.dump() for value in attribute["values"])
        encoded.append(ber.der(b"\x30", kind + ber.der(b"\x31", b"".join(values))))
    return ber.der(b"\x31", b"".join(sorted(encoded) if sort else encoded))


# -- the checks


def _signer_certificate(token: _Token) -> cryptography.x509.Certificate:
    """The certificate the SignerInfo names, fit for time-stamping as RFC 3161 §2.3 says."""
    sid = token.signer["sid"]
    if not token.certificates:
        raise StampError("the token carries no certificate (the request asks for the TSA's)")
    if sid.name == "issuer_and_serial_number":
        issuer, serial = sid.chosen["issuer"], sid.chosen["serial_number"].native
        found = [c for a, c in token.certificates if a.issuer == issuer and a.serial_number == serial]
    else:
        found = [c for a, c in token.certificates if a.key_identifier == sid.chosen.native]
    if not found:
        raise StampError("the token carries no certificate of its signer (the request asks for it)")
    certificate = found[0]
    extensions = certificate.extensions
    try:
        usage = extensions.get_extension_for_class(cryptography.x509.ExtendedKeyUsage)
    except cryptography.x509.ExtensionNotFound:
        raise StampError("the TSA's certificate has no extended key usage (timeStamping is required)") from None
    if not usage.critical or ExtendedKeyUsageOID.TIME_STAMPING not in usage.value:
        raise StampError("the TSA's certificate is not for time-stamping (critical timeStamping usage required)")
    if list(usage.value) != [ExtendedKeyUsageOID.TIME_STAMPING]:
        raise StampError("the TSA's certificate has other extended key usages than timeStamping (RFC 3161: only it)")
    try:
        key_usage = extensions.get_extension_for_class(cryptography.x509.KeyUsage).value
    except cryptography.x509.ExtensionNotFound:
        return certificate
    others = key_usage.key_encipherment or key_usage.data_encipherment or key_usage.key_agreement
    others = others or key_usage.key_cert_sign or key_usage.crl_sign
    if others or not (key_usage.digital_signature or key_usage.content_commitment):
        raise StampError("the TSA's certificate's key usage is not digitalSignature / nonRepudiation only")
    return certificate


def _check_tsa_name(token: _Token, certificate: cryptography.x509.Certificate) -> None:
    """RFC 3161 §2.4.2: a TSTInfo's ``tsa``, when present, is one of the names of the
    certificate that verifies the token (its subject, or a subjectAltName)."""
    name = token.tsa
    if isinstance(name, core.Void):
        return
    mine = asn1_x509.Certificate.load(certificate.public_bytes(Encoding.DER))
    if name.name == "directory_name" and name.chosen == mine.subject:
        return
    alternatives = mine.subject_alt_name_value
    if alternatives is not None and any((o.name, o.native) == (name.name, name.native) for o in alternatives):
        return
    raise StampError("the TSTInfo's tsa names another certificate than its signer's")


def _attribute(values: dict[str, list[Any]], name: str) -> Any:
    found = values.get(name, [])
    if len(found) != 1:
        raise StampError(f"the token's signed attributes hold {len(found)} {name} values, not one")
    return found[0]


def _check_signature(token: _Token, certificate: cryptography.x509.Certificate) -> dict[str, list[Any]]:
    """The signed attributes (contentType, messageDigest) and the signature over them; the
    attributes' values by name."""
    signer = token.signer
    attributes = signer["signed_attrs"]
    if not attributes:
        raise StampError("the token's signer signs no attributes (RFC 5652 requires them over a TSTInfo)")
    digest = signer["digest_algorithm"]["algorithm"].native
    if digest not in HASHES:
        raise StampError(f"the token is signed over a {digest} digest (SHA-256, -384 or -512 accepted)")
    values: dict[str, list[Any]] = {}
    for attribute in attributes:
        values.setdefault(attribute["type"].native, []).extend(attribute["values"])
    if _attribute(values, "content_type").native != "tst_info":
        raise StampError("the token's signed contentType is not id-ct-TSTInfo")
    if _attribute(values, "message_digest").native != hashlib.new(digest, token.econtent).digest():
        raise StampError("the token's messageDigest is not the hash of its TSTInfo (altered)")
    as_received = _signed_attributes_der(attributes, sort=False)
    as_der = _signed_attributes_der(attributes, sort=True)
    if not _signature_holds(signer, certificate, as_received, digest) and (
        as_der == as_received or not _signature_holds(signer, certificate, as_der, digest)
    ):
        raise StampError("the token's signature does not verify under its signer's certificate")
    return values


def _signature_holds(
    signer: cms.SignerInfo, certificate: cryptography.x509.Certificate, signed: bytes, digest: str
) -> bool:
    algorithm = signer["signature_algorithm"]
    signature = signer["signature"].native
    key = certificate.public_key()
    name = algorithm.signature_algo
    try:
        if isinstance(key, rsa.RSAPublicKey) and name == "rsassa_pkcs1v15":
            key.verify(signature, signed, padding.PKCS1v15(), HASHES[digest]())
        elif isinstance(key, rsa.RSAPublicKey) and name == "rsassa_pss":
            parameters = algorithm["parameters"]
            mgf = HASHES[parameters["mask_gen_algorithm"]["parameters"]["algorithm"].native]()
            pss = padding.PSS(padding.MGF1(mgf), parameters["salt_length"].native)
            key.verify(signature, signed, pss, HASHES[parameters["hash_algorithm"]["algorithm"].native]())
        elif isinstance(key, ec.EllipticCurvePublicKey) and name == "ecdsa":
            key.verify(signature, signed, ec.ECDSA(HASHES[digest]()))
        else:
            raise StampError(f"the token's signature algorithm ({algorithm['algorithm'].native}) does not fit its key")
    except InvalidSignature:
        return False
    except (KeyError, UnsupportedAlgorithm) as exc:
        raise StampError(f"the token's signature algorithm is not supported: {exc}") from exc
    return True


def _cert_ids(values: dict[str, list[Any]]) -> list[tuple[str, bytes, Any]]:
    """Every ESSCertID(v2) of the signed attributes, in order: (hash name, hash, issuerSerial)."""
    ids: list[tuple[str, bytes, Any]] = []
    for name in ("signing_certificate", "signing_certificate_v2"):
        attribute = values.get(name, [])
        if len(attribute) > 1:
            raise StampError(f"the token's signed attributes hold {len(attribute)} {name} values")
        if not attribute:
            continue
        listed = list(attribute[0]["certs"])
        if not listed:
            raise StampError(f"the token's {name} lists no certificate")
        for item in listed:
            algorithm = "sha1" if name == "signing_certificate" else item["hash_algorithm"]["algorithm"].native
            if algorithm != "sha1" and algorithm not in HASHES:
                raise StampError(f"the token's ESSCertIDv2 uses {algorithm} (SHA-256, -384 or -512 accepted)")
            ids.append((algorithm, item["cert_hash"].native, item["issuer_serial"]))
    if not ids:
        raise StampError("the token names no signing certificate (ESS signingCertificate or V2 required)")
    return ids


def _names(cert_id: tuple[str, bytes, Any], der: bytes) -> bool:
    """Whether an ESSCertID(v2) names the certificate whose DER is ``der``: its hash, and its
    issuer and serial number when the ID carries them."""
    algorithm, digest, issuer_serial = cert_id
    if hashlib.new(algorithm, der).digest() != digest:
        return False
    if issuer_serial.native is None:
        return True
    certificate = asn1_x509.Certificate.load(der)
    issuers = [name.chosen for name in issuer_serial["issuer"] if name.name == "directory_name"]
    return issuer_serial["serial_number"].native == certificate.serial_number and certificate.issuer in issuers


def _check_cert_ids(values: dict[str, list[Any]], signer_der: bytes, chain: list[bytes]) -> None:
    """RFC 2634 / 5035: in each list (v1, v2, checked on its own) the first ESSCertID is the
    signer's certificate; the others (a TSA may list its chain) must each name a certificate
    of the token or of the verified chain, as OpenSSL requires."""
    _cert_ids(values)  # at least one list (RFC 3161 §2.4.1 requires it), none empty
    for name in ("signing_certificate", "signing_certificate_v2"):
        ids = _cert_ids({name: values[name]}) if values.get(name) else []
        for position, cert_id in enumerate(ids):
            if position == 0 and not _names(cert_id, signer_der):
                raise StampError(f"the token's {name} does not name its signer's certificate")
            if position > 0 and not any(_names(cert_id, der) for der in [signer_der, *chain]):
                raise StampError(f"the token's {name} names a certificate that is not in its chain")


_CA_POLICY = verification.ExtensionPolicy.webpki_defaults_ca().may_be_present(
    cryptography.x509.ExtendedKeyUsage, verification.Criticality.AGNOSTIC, None
)
"""CAs as the Web PKI profile wants them (basicConstraints, keyCertSign, ...), except that a
TSA's intermediate may carry an extended key usage (commercial ones say timeStamping)."""

_EE_POLICY = verification.ExtensionPolicy.permit_all()
"""The signer's certificate is checked by ``_signer_certificate`` (RFC 3161's profile, not
the Web PKI's: no subjectAltName, a critical timeStamping usage)."""


def _verify_chain(
    token: _Token, certificate: cryptography.x509.Certificate, roots: list[cryptography.x509.Certificate]
) -> list[cryptography.x509.Certificate]:
    """The chain from the signer's certificate to one of ``roots``, valid at ``genTime`` (the
    token's other certificates as intermediates); StampError when there is none."""
    if not roots:
        raise StampError("no roots to verify the token against")
    intermediates = [c for _, c in token.certificates if c != certificate]
    builder = verification.PolicyBuilder().store(verification.Store(roots)).time(token.gen_time)
    verifier = builder.extension_policies(ca_policy=_CA_POLICY, ee_policy=_EE_POLICY).build_client_verifier()
    try:
        return verifier.verify(certificate, intermediates).chain
    except verification.VerificationError as exc:
        raise StampError(f"the token does not verify against the roots: {exc}") from exc


def _check(token: _Token, roots: list[cryptography.x509.Certificate] | None) -> Stamp:
    """Signer, signed attributes, signature, ESSCertIDs; with roots the chain: a Stamp."""
    try:
        certificate = _signer_certificate(token)
        values = _check_signature(token, certificate)
        _check_tsa_name(token, certificate)
        chain = [c for _, c in token.certificates]
        if roots is not None:
            chain += _verify_chain(token, certificate, roots)
        der = Encoding.DER
        _check_cert_ids(values, certificate.public_bytes(der), [c.public_bytes(der) for c in chain])
    except StampError:
        raise
    except _PARSE_ERRORS as exc:
        raise StampError(f"the token is malformed: {exc}") from exc
    return Stamp(token.gen_time, token.accuracy_s, certificate.subject.rfc4514_string(), token.serial)


def _imprint(token: _Token) -> tuple[str, bytes]:
    algorithm = token.imprint[0]
    if algorithm not in HASHES:
        raise StampError(f"the token's imprint is {algorithm} (SHA-256, -384 or -512 accepted)")
    return token.imprint


def check_response(
    der: bytes, request: StampRequest, roots: list[cryptography.x509.Certificate] | None = None
) -> Stamp:
    """Whether a TSA's answer to ``request`` may be kept: granted, over the checkpoint's text,
    with the request's nonce, signed (signature, messageDigest, ESSCertID) under a
    certificate for time-stamping; with ``roots`` (``LOG_TSA_ROOTS``) its chain as well."""
    token = _parse(der)
    if token.nonce != request.nonce:
        raise StampError("the token's nonce is not the request's (a replayed or misrouted answer)")
    if _imprint(token) != ("sha256", request.digest):
        raise StampError("the token is over another text than this checkpoint's (or not its SHA-256)")
    return _check(token, roots or None)


def verify_token(der: bytes, checkpoint_text: str, roots: list[cryptography.x509.Certificate]) -> Stamp:
    """A verifier's check of a kept token: everything ``check_response`` checks but the
    nonce (which only the requester knew), the chain always, against ``roots``. The imprint
    may be SHA-256, -384 or -512 of the text."""
    token = _parse(der)
    algorithm, digest = _imprint(token)
    if imprint(checkpoint_text, algorithm) != digest:
        raise StampError("the token is over another text than this checkpoint's")
    return _check(token, roots)
