"""Time-stamp tokens as other TSAs write them, made from the local TSA's (tests/local_tsa.py):
a BER re-encoding (``to_ber``), a token re-signed under another certificate with a proper
ESS signingCertificateV2 (``resign``: what ``openssl ts -reply`` refuses to sign with), a
flipped signature bit (``tampered``); and OpenSSL's verdict on any of them (``openssl_ok``),
the reference every verdict of transparency/timestamps.py is compared with."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from asn1crypto import cms, core, tsp
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.serialization import Encoding

from execution_proof.transparency import ber
from execution_proof.transparency.timestamps import _TimeStampResp
from tests.local_tsa import openssl_binary

# -- BER, by hand: only DER lengths are read, indefinite ones written


def _children(content: bytes) -> list[tuple[int, bytes, bytes]]:
    """The DER elements one after the other in ``content``: (tag, content, whole encoding)."""
    items, at = [], 0
    while at < len(content):
        tag, first = content[at], content[at + 1]
        start = at + 2
        length = first
        if first & 0x80:
            size = first & 0x7F
            length = int.from_bytes(content[start : start + size], "big")
            start += size
        items.append((tag, content[start : start + length], content[at : start + length]))
        at = start + length
    return items


def _indefinite(tag: int, parts: list[bytes]) -> bytes:
    return bytes([tag, 0x80]) + b"".join(parts) + b"\x00\x00"


def _all_indefinite(whole: bytes) -> bytes:
    """Every constructed element of ``whole`` (one element) with an indefinite length."""
    ((tag, content, _),) = _children(whole)
    if not tag & 0x20:
        return whole
    return _indefinite(tag, [_all_indefinite(part) for _, _, part in _children(content)])


def _chunked(octets: bytes, size: int = 100) -> bytes:
    """A constructed OCTET STRING (BER) of ``octets`` in chunks."""
    chunks = [octets[i : i + size] for i in range(0, len(octets), size)] or [b""]
    return _indefinite(0x24, [core.OctetString(chunk).dump() for chunk in chunks])


def to_ber(response: bytes, *, reverse_certificates: bool = True, reverse_attributes: bool = False) -> bytes:
    """The same TimeStampResp in BER as streaming encoders write it: every layer around the
    signed parts with indefinite lengths, the TSTInfo's OCTET STRING in chunks, the
    certificates and the signed attributes in reverse order (sets out of DER order). What is
    signed as it was written (each certificate, each attribute value, the TSTInfo) is kept."""
    ((_, body, _),) = _children(response)
    status, token = _children(body)
    content_type, explicit = _children(token[1])
    ((_, signed_body, _),) = _children(explicit[1])
    parts = []
    for tag, content, whole in _children(signed_body):
        if tag == 0x30:  # encapContentInfo
            kind, wrapped = _children(content)
            ((_, octets, _),) = _children(wrapped[1])
            parts.append(_indefinite(0x30, [kind[2], _indefinite(0xA0, [_chunked(octets)])]))
        elif tag == 0xA0:  # certificates
            certificates = [item for _, _, item in _children(content)]
            parts.append(_indefinite(0xA0, certificates[::-1] if reverse_certificates else certificates))
        elif tag == 0x31 and len(parts) >= 3:  # signerInfos (the SET after digestAlgorithms)
            parts.append(_indefinite(0x31, [_signer_info_ber(i, reverse_attributes) for _, _, i in _children(content)]))
        else:
            parts.append(_all_indefinite(whole))
    signed = _indefinite(0x30, parts)
    token_ber = _indefinite(0x30, [content_type[2], _indefinite(0xA0, [signed])])
    return _indefinite(0x30, [_all_indefinite(status[2]), token_ber])


def _signer_info_ber(signer_info: bytes, reverse: bool) -> bytes:
    ((_, body, _),) = _children(signer_info)
    parts = []
    for tag, content, whole in _children(body):
        if tag == 0xA0:  # signedAttrs: each attribute's SEQUENCE and SET indefinite, values as signed
            attributes = []
            for _, attribute, _ in _children(content):
                kind, values = _children(attribute)
                attributes.append(_indefinite(0x30, [kind[2], _indefinite(0x31, [v[2] for v in _children(values[1])])]))
            parts.append(_indefinite(0xA0, attributes[::-1] if reverse else attributes))
        elif tag == 0x04:
            parts.append(whole)
        else:
            parts.append(_all_indefinite(whole))
    return _indefinite(0x30, parts)


# -- other tokens


def token_of(response: bytes) -> bytes:
    """The TimeStampToken (CMS ContentInfo) of a response, as encoded there (BER kept:
    asn1crypto's ``dump`` would re-encode an indefinite length, and its parser stops at ten
    nested ones; transparency/ber.py measures each element)."""
    first = response[1]
    body = response[2 + (first & 0x7F if first > 0x80 else 0) :]
    status_length = ber.definite(body)[1]
    rest = body[status_length:]
    return rest[: ber.definite(rest)[1]]


def _sign(key: Any, data: bytes, pss: bool = False) -> tuple[bytes, Any]:
    if isinstance(key, rsa.RSAPrivateKey) and pss:
        salted = padding.PSS(padding.MGF1(hashes.SHA256()), 32)
        parameters = {
            "hash_algorithm": {"algorithm": "sha256"},
            "mask_gen_algorithm": {"algorithm": "mgf1", "parameters": {"algorithm": "sha256"}},
            "salt_length": 32,
        }
        return key.sign(data, salted, hashes.SHA256()), {"algorithm": "rsassa_pss", "parameters": parameters}
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256()), {"algorithm": "sha256_rsa"}
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.sign(data, ec.ECDSA(hashes.SHA256())), {"algorithm": "sha256_ecdsa"}


def resign(
    response: bytes,
    certificate: x509.Certificate,
    key: Any,
    *,
    ess_names: x509.Certificate | None = None,
    pss: bool = False,
    ess: bool = True,
) -> bytes:
    """The response's TSTInfo signed anew under ``certificate`` (and ``key``), with
    contentType, messageDigest and a signingCertificateV2 naming ``ess_names`` (default: the
    signer), as OpenSSL writes them: a well-formed token whose only fault is what the test
    gives it (a certificate OpenSSL would not sign with, an ESSCertID naming another one);
    ``pss``: an RSA key signs with RSASSA-PSS (SHA-256, MGF1 SHA-256, 32-byte salt);
    ``ess`` False: no signingCertificateV2 at all."""
    signed = _TimeStampResp.load(response)["time_stamp_token"]["content"]
    econtent = bytes(signed["encap_content_info"]["content"])
    named = (ess_names or certificate).public_bytes(Encoding.DER)
    attributes = cms.CMSAttributes(
        [
            {"type": "content_type", "values": ["tst_info"]},
            {"type": "message_digest", "values": [hashlib.sha256(econtent).digest()]},
            {"type": "signing_certificate_v2", "values": [{"certs": [{"cert_hash": hashlib.sha256(named).digest()}]}]},
        ][: 3 if ess else 2]
    )
    signature, algorithm = _sign(key, attributes.dump(), pss)
    mine = asn1_x509.Certificate.load(certificate.public_bytes(Encoding.DER))
    signer = cms.SignerInfo(
        {
            "version": "v1",
            "sid": cms.SignerIdentifier(
                {"issuer_and_serial_number": {"issuer": mine.issuer, "serial_number": mine.serial_number}}
            ),
            "digest_algorithm": {"algorithm": "sha256"},
            "signed_attrs": attributes,
            "signature_algorithm": algorithm,
            "signature": signature,
        }
    )
    content = cms.SignedData(
        {
            "version": "v3",
            "digest_algorithms": [{"algorithm": "sha256"}],
            "encap_content_info": {"content_type": "tst_info", "content": core.ParsableOctetString(econtent)},
            "certificates": [mine, *[c.chosen for c in signed["certificates"]]],  # the TSA's chain kept
            "signer_infos": [signer],
        }
    )
    token = cms.ContentInfo({"content_type": "signed_data", "content": content})
    return bytes(tsp.TimeStampResp({"status": {"status": "granted"}, "time_stamp_token": token}).dump())


def tampered(response: bytes) -> bytes:
    """The response with one bit of its signature flipped (nothing else changed)."""
    signature = _TimeStampResp.load(response)["time_stamp_token"]["content"]["signer_infos"][0]["signature"].native
    assert response.count(signature) == 1
    return response.replace(signature, signature[:-1] + bytes([signature[-1] ^ 1]))


def query(openssl_dir: Path, data: Path, digest: str = "sha256", *, cert: bool = True) -> bytes:
    """A TimeStampReq written by ``openssl ts -query`` (with a nonce) over the file ``data``."""
    out = openssl_dir / f"query-{digest}.tsq"
    command = [openssl_binary(), "ts", "-query", "-data", str(data), f"-{digest}", "-out", str(out)]
    subprocess.run([*command, *(["-cert"] if cert else [])], check=True, capture_output=True)
    return out.read_bytes()


def openssl_ok(
    work: Path, response: bytes, data: Path, roots: Path, untrusted: Path | None = None, *options: str
) -> bool:
    """``openssl ts -verify -data FILE -in TOKEN -token_in -CAfile ROOTS [-untrusted CHAIN]``:
    whether OpenSSL accepts the response's token over ``data``."""
    token = work / "token.der"
    token.write_bytes(token_of(response))
    command = [openssl_binary(), "ts", "-verify", "-data", str(data), "-in", str(token), "-token_in"]
    command += ["-CAfile", str(roots), *(["-untrusted", str(untrusted)] if untrusted else []), *options]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode == 0 and "Verification: OK" in done.stdout


def openssl_cms_ok(work: Path, response: bytes, roots: Path) -> bool:
    """``openssl cms -verify -purpose timestampsign``: OpenSSL's CMS code on the token (the
    signature, the chain; no time-stamp checks), which knows RSASSA-PSS where its TS code
    does not."""
    token = work / "token.der"
    token.write_bytes(token_of(response))
    command = [openssl_binary(), "cms", "-verify", "-inform", "DER", "-in", str(token), "-binary"]
    command += ["-CAfile", str(roots), "-purpose", "timestampsign", "-out", str(work / "tstinfo.der")]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0
