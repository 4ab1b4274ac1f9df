"""The keys a verification checks signatures with, from what it was given: a saved key set or a
service's ``GET /v1/public-key`` body (``key_ring``), a ``--keys`` file in either of its shapes
(``pinned_key_file``), and, for a version 2 trust root, the keys of a bundle and of the service
judged by the pinned receipt roots (``certified_keys``), beside the keys of a ``--keys`` file.

No network here: client/verifying.py fetches, this module only reads what was fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nacl.signing import VerifyKey

from execution_proof.receipts import errors
from execution_proof.receipts.attestation import AttestationError, spki_raw, unb64
from execution_proof.receipts.key_certificates import KEY_KID_RE, KeyVerdict, key_kid
from execution_proof.receipts.signing import KID_RE, KeyRing, KeySetError, PublicKey, load_key_ring
from execution_proof.receipts.verifier import BundleError, carried_key_ring

if TYPE_CHECKING:
    from execution_proof.receipts.shapes import JSONValue
    from execution_proof.receipts.trust_root import TrustRoot


def key_ring(document: JSONValue, source: str) -> KeyRing:
    """A key set (``GET /v1/public-key``'s shape) read from ``source``; ``InvalidInput`` when
    it is malformed."""
    try:
        if not isinstance(document, dict):  # as load_key_ring says of any other value
            raise KeySetError('key set must be an object with a "keys" list')
        return load_key_ring(document)
    except KeySetError as exc:
        raise errors.InvalidInput(f"key set from {source} is malformed: {exc}") from exc


def pinned_key_file(document: JSONValue, source: str) -> KeyRing:
    """A ``--keys`` file: a key set (``GET /v1/public-key``'s shape: an object with a ``keys``
    list), or the ``keys.json`` that ``trust-root --sigstore`` writes: an object mapping each
    kid to the standard base64 of its Ed25519 DER SubjectPublicKeyInfo. ``InvalidInput`` when
    it is neither, or a ``key-…`` kid is not its key's."""
    if not isinstance(document, dict) or isinstance(document.get("keys"), list):
        return key_ring(document, source)
    if not document or not all(isinstance(value, str) for value in document.values()):
        raise errors.InvalidInput(
            f"key set from {source} is malformed: expected a key set (an object with a keys list) or keys.json "
            "(kid to the base64 DER SubjectPublicKeyInfo of each key)"
        )
    keys: dict[str, PublicKey] = {}
    for kid, text in document.items():
        try:
            if not KID_RE.fullmatch(kid):
                raise AttestationError("the kid must be 1-64 characters of A-Z a-z 0-9 . _ -")
            raw = spki_raw(unb64(text, "the key"))
        except AttestationError as exc:
            raise errors.InvalidInput(f"key set from {source} is malformed: {kid}: {exc}") from exc
        if KEY_KID_RE.fullmatch(kid) and kid != key_kid(raw):
            raise errors.InvalidInput(f"key set from {source} is malformed: {kid} names another key ({key_kid(raw)})")
        keys[kid] = PublicKey(kid, VerifyKey(raw))
    return KeyRing(keys, None, None)


@dataclass(frozen=True)
class PinnedBesideRoots(KeyRing):
    """A ring judged by pinned roots, beside keys the user pinned themselves (``--keys`` with a
    version 2 trust root, as ``trust-root --sigstore`` writes ``keys.json`` after checking each
    key's certificate against the roots): a ``pinned`` kid counts as it is, without a
    certificate, unless a revocation by a pinned root covers the receipt."""

    pinned: frozenset[str] = frozenset()

    def judge(self, kid: Any, created_at: Any) -> KeyVerdict:
        if not isinstance(kid, str) or kid not in self.pinned or kid not in self.keys:
            return super().judge(kid, created_at)
        revocation = self.revocations.get(kid)
        if revocation is not None and isinstance(created_at, str) and revocation.covers(created_at):
            return KeyVerdict.REVOKED
        return KeyVerdict.OK


def beside_roots(ring: KeyRing, pinned: KeyRing) -> KeyRing:
    """``ring`` (judged by a trust root's roots) with the keys of ``pinned`` (a ``--keys``
    file) in place of any of the same kid."""
    keys = {**ring.keys, **pinned.keys}
    return PinnedBesideRoots(keys, ring.active_kid, None, ring.roots, ring.revocations, pinned=frozenset(pinned.keys))


def certified_keys(
    trust: TrustRoot, trust_path: str | None, carried: JSONValue | None, fetched: tuple[JSONValue, str] | None
) -> tuple[KeyRing, str, str]:
    """(ring, where the keys came from, ``certified``) for a version 2 trust root, which pins
    receipt roots, not keys: the keys a bundle carries (``carried``, its ``keys`` member) and,
    with ``--online``, the service's (``fetched``: its ``GET /v1/public-key`` body and URL;
    the service's entry is taken for a kid the bundle holds without a certificate), each
    counting only through a certificate a pinned root signed. The revocations are the file's,
    the bundle's and the service's that a pinned root signed. A plain receipt offline has no
    key at hand: NOT VERIFIED ``no_key_certificate``."""
    keys: dict[str, PublicKey] = {}
    revocations: list[JSONValue] = []
    sources: list[str] = []
    if carried is not None:
        try:
            keys.update(carried_key_ring(carried).keys)
        except BundleError as exc:
            raise errors.InvalidInput(str(exc)) from exc
        revocations += _listed(carried, "revocations")
        sources.append("the bundle")
    if fetched is not None:
        document, source = fetched
        for kid, key in key_ring(document, source).keys.items():
            if kid not in keys or keys[kid].certificate is None:
                keys[kid] = key
        revocations += _listed(document, "revocations")
        sources.append(source)
    listed = [_active(fetched[0]) if fetched else None, _active(carried)]  # the service's is the newer word
    active = next((kid for kid in listed if kid is not None and kid in keys), None)
    ring = trust.certified(KeyRing(keys, active, None), revocations)
    held = " and ".join(sources) if sources else "no key (a plain receipt carries none, and the check is offline)"
    return ring, f"{held}, judged by the receipt roots of the trust root {trust_path or trust.service_url}", "certified"


def _active(document: JSONValue) -> str | None:
    """The ``active_kid`` a key set names, if any."""
    active = document.get("active_kid") if isinstance(document, dict) else None
    return active if isinstance(active, str) else None


def _listed(document: JSONValue, member: str) -> list[JSONValue]:
    value = document.get(member) if isinstance(document, dict) else None
    return value if isinstance(value, list) else []
