"""A receipt's attestation as a Sigstore bundle v0.3 (docs/attestations.md): the DSSE
envelope, the receipt key named by its kid, and, when the service keeps a log, one
transparency-log entry proving the attestation's ``dsse`` 0.0.2 leaf (the entry after the
receipt's own) under a C2SP checkpoint of this log. The JSON is the protobuf-specs JSON
mapping (camelCase members, 64-bit integers as strings, bytes as standard base64).

And what a Sigstore verifier pins to check one (``trust-root --sigstore``): the
``TrustedRoot`` naming this log (``trusted_root``) and the receipt keys a trust root's
receipt roots certify (``certified_keys``), as ``keys.json`` (kid -> DER SPKI) and PEM.

Pure: no I/O, no server library.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from execution_proof.receipts.attestation import (
    DSSE_API_VERSION,
    DSSE_KIND,
    KEY_DETAILS,
    Attestation,
    b64,
    spki_der,
    spki_pem,
)
from execution_proof.receipts.signing import KeyRing, KeySetError, load_key_ring
from execution_proof.receipts.trust_root import TrustRoot, TrustRootError

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
TRUSTED_ROOT_MEDIA_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
TRUSTED_ROOT_FILE = "trusted_root.json"
KEYS_FILE = "keys.json"


def checkpoint_key_id(origin: str, public_key: bytes) -> bytes:
    """The C2SP key hash of the log's Ed25519 key (signed-note: SHA-256 of the key name, a
    newline, the signature type 0x01 and the key): sigstore's ``checkpointKeyId`` and
    ``logId``; its first four bytes are the checkpoint signature's key hint."""
    return hashlib.sha256(origin.encode() + b"\n\x01" + public_key).digest()


def tlog_entry(
    leaf: bytes, index: int, path: Sequence[bytes], tree_size: int, root: bytes, checkpoint: str, log_key_id: bytes
) -> dict[str, Any]:
    """The bundle's ``TransparencyLogEntry`` for the ``dsse`` leaf ``leaf`` at ``index``, with
    its inclusion ``path`` under the signed ``checkpoint`` note of ``tree_size`` and ``root``."""
    return {
        "logIndex": str(index),
        "logId": {"keyId": b64(log_key_id)},
        "kindVersion": {"kind": DSSE_KIND, "version": DSSE_API_VERSION},
        "integratedTime": "0",
        "inclusionProof": {
            "logIndex": str(index),
            "rootHash": b64(root),
            "treeSize": str(tree_size),
            "hashes": [b64(node) for node in path],
            "checkpoint": {"envelope": checkpoint},
        },
        "canonicalizedBody": b64(leaf),
    }


def bundle(attestation: Attestation, entry: dict[str, Any] | None) -> dict[str, Any]:
    """The Sigstore bundle v0.3 of ``attestation``: ``entry`` (``tlog_entry``) is its log
    proof; None, a service without a log, gives none."""
    material: dict[str, Any] = {"publicKey": {"hint": attestation.kid}}
    if entry is not None:
        material["tlogEntries"] = [entry]
    return {"mediaType": BUNDLE_MEDIA_TYPE, "verificationMaterial": material, "dsseEnvelope": attestation.envelope()}


# -- what a Sigstore verifier pins


def log_base_url(origin: str) -> str:
    """The ``baseUrl`` naming the log of ``origin`` in a trusted root: ``https://`` and the
    origin, which sigstore's verifiers match against the name on the checkpoint's signature
    line (the origin, a C2SP key name: a schemeless URL)."""
    return "https://" + origin


def trusted_root(origin: str | None, log_public_key: bytes | None) -> dict[str, Any]:
    """The Sigstore ``TrustedRoot`` of a service: its log (``origin`` and the raw Ed25519 key
    that signs its checkpoints) as the one ``tlogs`` item, picked by ``checkpointKeyId`` (the
    C2SP key hash; ``logId`` is the same value); None, a service without a log: no ``tlogs``.
    No certificate authority, CT log or time-stamp authority: receipt keys are pinned by
    kid (``keys.json``), and this service's time-stamps cover checkpoints, not signatures."""
    tlogs: list[dict[str, Any]] = []
    if origin is not None and log_public_key is not None:
        key_id = {"keyId": b64(checkpoint_key_id(origin, log_public_key))}
        tlogs.append(
            {
                "baseUrl": log_base_url(origin),
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": b64(spki_der(log_public_key)), "keyDetails": KEY_DETAILS},
                "logId": key_id,
                "checkpointKeyId": key_id,
            }
        )
    return {
        "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
        "tlogs": tlogs,
        "certificateAuthorities": [],
        "ctlogs": [],
        "timestampAuthorities": [],
    }


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A published receipt key that ``certified_keys`` leaves out, and why (one phrase)."""

    kid: str
    why: str


@dataclass(frozen=True, slots=True)
class CertifiedKeys:
    """The receipt keys a Sigstore verifier may take (raw Ed25519 key by kid, in the
    service's order), and those left out."""

    keys: Mapping[str, bytes]
    left_out: tuple[LeftOut, ...]

    def keys_json(self) -> dict[str, str]:
        """``keys.json``: each key's DER SubjectPublicKeyInfo, standard base64, by kid (what
        ``@sigstore/verify``'s ``toTrustMaterial`` takes as ``{kid: {rawBytes}}``)."""
        return {kid: b64(spki_der(public)) for kid, public in self.keys.items()}

    def pems(self) -> dict[str, str]:
        """``keys/<kid>.pem``: each key as a PEM ``PUBLIC KEY`` (cosign's ``--key``)."""
        return {kid: spki_pem(public) for kid, public in self.keys.items()}


def certified_keys(ring: KeyRing, roots: Mapping[str, bytes], revocations: Any = ()) -> CertifiedKeys:
    """The keys of ``ring`` (``GET /v1/public-key``, each with its certificate) that a
    Sigstore verifier may take, judged by the pinned ``roots``: a key counts when its
    certificate names a pinned root and that root signed it. A key revoked by its root is
    left out whole: a Sigstore verifier knows no receipt's ``created_at`` to hold against the
    revocation's ``revoked_after`` (nor against the certificate's window), so the part of a
    key's life a revocation leaves standing cannot be told from the part it takes away.
    ``revocations`` (JSON objects: the pinned ones and those the service publishes) count
    only when a pinned root signed them."""
    judged = ring.with_roots(roots, revocations)
    kept: dict[str, bytes] = {}
    left_out: list[LeftOut] = []
    for kid, key in judged.keys.items():
        certificate = key.certificate
        if certificate is None:
            left_out.append(LeftOut(kid, "no key certificate"))
        elif certificate.root_kid not in roots:
            left_out.append(LeftOut(kid, f"certified by {certificate.root_kid}, which is not pinned"))
        elif not certificate.signed_by(roots[certificate.root_kid]):
            left_out.append(LeftOut(kid, f"its certificate's signature is not {certificate.root_kid}'s"))
        elif (revoked := judged.revocations.get(kid)) is not None and revoked.root_kid == certificate.root_kid:
            left_out.append(LeftOut(kid, f"revoked by {revoked.root_kid} from {revoked.revoked_after}"))
        else:
            kept[kid] = certificate.public_key
    return CertifiedKeys(kept, tuple(left_out))


@dataclass(frozen=True, slots=True)
class TrustMaterial:
    """What ``trust-root --sigstore DIR`` writes: ``trusted_root.json``, ``keys.json`` and
    ``keys/<kid>.pem`` (``files``), from a version 2 trust root and the service's keys."""

    trusted_root: dict[str, Any]
    certified: CertifiedKeys

    @property
    def log(self) -> bool:
        return bool(self.trusted_root["tlogs"])

    def files(self) -> dict[str, bytes]:
        """Each file's bytes by its path under DIR (JSON indented by two spaces, a newline
        after; the PEM files under ``keys/``)."""
        found = {f"keys/{kid}.pem": pem.encode("ascii") for kid, pem in self.certified.pems().items()}
        found[KEYS_FILE] = _json_file(self.certified.keys_json())
        found[TRUSTED_ROOT_FILE] = _json_file(self.trusted_root)
        return found


def trust_material(root: TrustRoot, public_keys: Any) -> TrustMaterial:
    """The Sigstore trust material of the service ``root`` pins: its log (``root``'s, none
    when it pins none) and the keys of ``public_keys`` (a ``GET /v1/public-key`` body) that
    ``root``'s receipt roots certify (``certified_keys``, with ``root``'s revocations and the
    body's). ``TrustRootError`` for a version 1 trust root (no roots to judge keys by), a
    malformed body, or when no key is left: keys.json would verify nothing."""
    if root.roots is None:
        raise TrustRootError(
            "a version 1 trust root pins receipt keys, not receipt roots: write a version 2 one with trust-root --out"
        )
    try:
        ring = load_key_ring(public_keys)
    except KeySetError as exc:
        raise TrustRootError(f"GET /v1/public-key: {exc}") from exc
    published = public_keys.get("revocations") if isinstance(public_keys, dict) else None
    documents = [r.to_json() for r in root.revocations] + (published if isinstance(published, list) else [])
    certified = certified_keys(ring, root.roots, documents)
    if not certified.keys:
        why = "; ".join(f"{gone.kid}: {gone.why}" for gone in certified.left_out) or "it lists none"
        raise TrustRootError(f"GET /v1/public-key: no receipt key the pinned roots certify ({why})")
    verifier = root.log_verifier()
    log = trusted_root(verifier.name, verifier.public_key) if verifier is not None else trusted_root(None, None)
    return TrustMaterial(log, certified)


def _json_file(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"
