"""The verifier: every check of a receipt, of a chain link and of an offline bundle.

Pure functions over JSON objects and a ``KeyRing``: no files, no network, no clock. The
service's ``POST /v1/verify`` (usecases/verifying.py), the bundle endpoint's format constants
(usecases/bundling.py) and the ``verify`` command (cli/verify.py, which only reads files, fetches
keys and chain links and renders the report) all decide here. A receipt here is one read from
outside (a file, a bundle, a stored record): a JSON object (``Mapping[str, JSONValue]``) whose
fields are narrowed where they are read, never a ``ReceiptObject``, since the checks are what would
make it one. What they answer is typed (``VerifyResult``, ``ChainLink``, ``BundleChain``).

A receipt verifies when its ``receipt_hash`` recomputes from its fields and its ``signature``
is the Ed25519 signature, by the key its ``sig_kid`` names, over that hash. A chain link
verifies when the earlier receipt is exactly the one its successor names
(``receipt_hash == successor.prev_receipt_hash``), belongs to the same project and, where the
caller holds keys for it, verifies on its own. A bundle (docs/bundles.md) is a receipt, the
earlier receipts of its chain newest first and the keys that signed them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from execution_proof.errors import Error
from execution_proof.receipts.canonical import compute_receipt_hash
from execution_proof.receipts.encoding import HashStr, b64url_decode
from execution_proof.receipts.key_certificates import KeyCertificate, KeyRevocation, KeyVerdict
from execution_proof.receipts.shapes import JSONObject, JSONValue
from execution_proof.receipts.signing import KeyRing, KeySetError, load_key_ring

BUNDLE_FORMAT = "eps-receipt-bundle"
BUNDLE_VERSION = 2
"""The version the service writes: each entry of ``keys`` carries its key ``certificate``."""
BUNDLE_VERSIONS = (1, BUNDLE_VERSION)
"""Every bundle version this verifier reads (version 1: keys without certificates)."""


class BundleError(Error, ValueError):
    """A bundle that cannot be checked at all (unsupported version, malformed members or key
    set); the message says why."""


@dataclass(frozen=True)
class ReceiptCheck:
    """One receipt checked on its own against a key ring."""

    recomputed_receipt_hash: HashStr | None
    """The hash recomputed from the fields; None when they cannot be canonicalised."""
    receipt_hash_recompute: bool
    """The recomputed hash equals the stored ``receipt_hash``."""
    signature: bool
    """``signature`` is valid over ``receipt_hash`` for the key ``sig_kid`` names."""
    kid: JSONValue
    """``sig_kid`` as found (None: missing)."""
    key_known: bool
    """``sig_kid`` names a key of the ring."""
    key_active: bool | None
    """The named key is the ring's active one (False: a retired key); None when unknown."""
    key_verdict: KeyVerdict = KeyVerdict.OK
    """What the ring's certificate rules say of the key for this receipt's ``created_at``
    (always OK for a ring without roots and a known key)."""
    roots_pinned: bool = False
    """The ring judges its keys by pinned roots (a version 2 trust root)."""
    certificate: KeyCertificate | None = None
    """The key's certificate as the ring holds it (None: none, or no such key)."""
    revocation: KeyRevocation | None = None
    """The revocation that covers the receipt, when ``key_verdict`` is REVOKED."""

    @property
    def counts(self) -> bool:
        """The signature verifies and its key counts for this receipt."""
        return self.signature and self.key_verdict is KeyVerdict.OK

    @property
    def certificate_state(self) -> str | None:
        """``certificate_state`` of this receipt's key verdict (None: no roots pinned)."""
        return certificate_state(self.key_verdict, self.roots_pinned)


NO_KEY_CERTIFICATE = KeyVerdict.NO_CERTIFICATE.value


def certificate_state(verdict: KeyVerdict, roots_pinned: bool) -> str | None:
    """What a report says of a key judged by pinned roots: None when no roots are pinned (the
    keys are trusted as they are); ``ok``; ``no_key_certificate`` when no certificate for the
    kid is at hand (the key is not known at all, or known without one: its signature proves
    nothing either way); else the evidence ``unknown_root``, ``bad_certificate``,
    ``outside_certificate`` or ``revoked``."""
    if not roots_pinned:
        return None
    if verdict in (KeyVerdict.UNKNOWN_KEY, KeyVerdict.NO_CERTIFICATE):
        return NO_KEY_CERTIFICATE
    state: str = verdict.value
    return state


@dataclass(frozen=True)
class LinkCheck:
    """An earlier receipt checked against the receipt that names it."""

    linked: bool
    """The successor names a hash and the entry's ``receipt_hash`` is that hash."""
    receipt_hash_recompute: bool
    """The entry's own ``receipt_hash`` recomputes from its fields."""
    signature: bool | None
    """The entry's signature verifies with the ring's key and the key counts for it; None when
    no ring was given (the server's own stored receipt, which ``POST /v1/verify`` does not
    re-verify)."""
    same_project: bool
    key_certificate: str | None = None
    """``certificate_state`` of the entry's key (None: no ring, or no roots pinned)."""


@dataclass(frozen=True)
class BundleParts:
    """A bundle's members, once its format and version are known to be readable."""

    receipt: JSONObject
    keys: JSONValue
    """The carried key set, as found (checked by ``carried_keys_match``/``carried_key_ring``)."""
    chain: list[JSONObject]
    """The earlier receipts, newest first."""
    claimed_complete: bool
    log: JSONObject | None = None
    """The transparency log member (``origin``, ``log_vkey``, ``proof``), when carried."""
    timestamps: list[JSONValue] | None = None
    """The RFC 3161 time-stamps of the proof's checkpoint (``tsa``, ``response_base64``)."""


class ChainLink(TypedDict):
    """One earlier receipt in a report's chain: a step of a walk (``walk_step``; no ``linked``:
    it was fetched by the hash) or an entry of a bundle's segment (``check_bundle_chain``).
    A receipt a walk did not find has ``receipt_hash``, ``found`` and ``ok`` only."""

    receipt_hash: JSONValue
    found: bool
    ok: bool
    receipt_id: NotRequired[JSONValue]
    linked: NotRequired[bool]
    receipt_hash_recompute: NotRequired[bool]
    signature: NotRequired[bool | None]
    same_project: NotRequired[bool]
    key_certificate: NotRequired[str]
    """With pinned roots: ``certificate_state`` of the entry's key."""


class BundleChain(TypedDict):
    """The ``chain`` part of a bundle's report."""

    links: list[ChainLink]
    truncated: bool
    complete: bool
    claimed_complete: bool


class VerifyChecks(TypedDict):
    signature: bool
    hash_match: bool
    receipt_hash_recompute: bool
    chain_link: bool


class VerifyChain(TypedDict):
    prev_receipt_hash: JSONValue
    prev_found: bool
    prev_receipt_hash_recompute: bool


class VerifyResult(TypedDict):
    """The ``POST /v1/verify`` body; the receipt's own fields are echoed as found."""

    ok: bool
    receipt_id: JSONValue
    checks: VerifyChecks
    sig_kid: JSONValue
    receipt_hash: JSONValue
    recomputed_receipt_hash: HashStr | None
    chain: VerifyChain


def recompute_hash_or_none(receipt: Mapping[str, JSONValue]) -> HashStr | None:
    """The recomputed receipt hash, or None when the record cannot be canonicalised."""
    try:
        return compute_receipt_hash(receipt)
    except Exception:  # noqa: BLE001 - any malformed record simply fails the check
        return None


def signature_ok(receipt: Mapping[str, JSONValue], keyring: KeyRing) -> bool:
    """The receipt's ``signature`` over its ``receipt_hash`` verifies with the key its
    ``sig_kid`` names; False when any of the three is not a string or the kid is unknown."""
    receipt_hash, signature, kid = receipt.get("receipt_hash"), receipt.get("signature"), receipt.get("sig_kid")
    if not (isinstance(receipt_hash, str) and isinstance(signature, str) and isinstance(kid, str)):
        return False
    return keyring.verify(kid, receipt_hash, signature)


def signature_counts(receipt: Mapping[str, JSONValue], keyring: KeyRing) -> bool:
    """``signature_ok`` and the key counts for the receipt's ``created_at`` (its certificate
    signed by a root of the ring, covering the receipt, no revocation covering it)."""
    return signature_ok(receipt, keyring) and (
        keyring.judge(receipt.get("sig_kid"), receipt.get("created_at")) is KeyVerdict.OK
    )


def check_receipt(receipt: Mapping[str, JSONValue], keyring: KeyRing) -> ReceiptCheck:
    """Hash recomputation, signature and the state of the signing key, for one receipt."""
    recomputed = recompute_hash_or_none(receipt)
    kid = receipt.get("sig_kid")
    key = keyring.keys.get(kid) if isinstance(kid, str) else None
    verdict = keyring.judge(kid, receipt.get("created_at"))
    return ReceiptCheck(
        recomputed_receipt_hash=recomputed,
        receipt_hash_recompute=recomputed is not None and recomputed == receipt.get("receipt_hash"),
        signature=signature_ok(receipt, keyring),
        kid=kid,
        key_known=key is not None,
        key_active=kid == keyring.active_kid if key is not None else None,
        key_verdict=verdict,
        roots_pinned=keyring.roots is not None,
        certificate=key.certificate if key is not None else None,
        revocation=keyring.revocations.get(str(kid)) if verdict is KeyVerdict.REVOKED else None,
    )


def check_link(
    expected_hash: JSONValue, entry: Mapping[str, JSONValue], project_id: JSONValue, keyring: KeyRing | None
) -> LinkCheck:
    """``entry`` as the receipt a successor names by ``expected_hash`` (its
    ``prev_receipt_hash``) in the chain of project ``project_id``; its signature is checked
    only against a given ``keyring`` (an Ed25519 verification: half the cost of a check)."""
    recomputed = recompute_hash_or_none(entry)
    state = None
    if keyring is not None:
        state = certificate_state(
            keyring.judge(entry.get("sig_kid"), entry.get("created_at")), keyring.roots is not None
        )
    return LinkCheck(
        linked=isinstance(expected_hash, str) and entry.get("receipt_hash") == expected_hash,
        receipt_hash_recompute=recomputed is not None and recomputed == entry.get("receipt_hash"),
        signature=None if keyring is None else signature_counts(entry, keyring),
        same_project=entry.get("project_id") == project_id,
        key_certificate=state,
    )


def walk_step(
    head: Mapping[str, JSONValue], prev_hash: str, prev: Mapping[str, JSONValue] | None, keyring: KeyRing
) -> ChainLink:
    """One step of a chain walk back from the receipt ``head``: the report entry for the
    receipt fetched by ``prev_hash`` (a successor's ``prev_receipt_hash``; ``prev`` None: not
    found). ``ok`` needs the link, the recomputed hash, the signature and ``head``'s project."""
    if prev is None:
        return {"receipt_hash": prev_hash, "found": False, "ok": False}
    link = check_link(prev_hash, prev, head.get("project_id"), keyring)
    recompute_ok = link.linked and link.receipt_hash_recompute
    step: ChainLink = {
        "receipt_id": prev.get("receipt_id"),
        "receipt_hash": prev_hash,
        "found": True,
        "receipt_hash_recompute": recompute_ok,
        "signature": link.signature,
        "same_project": link.same_project,
        "ok": recompute_ok and link.signature is True and link.same_project,
    }
    if link.key_certificate is not None:
        step["key_certificate"] = link.key_certificate
    return step


def verify_receipt(
    receipt: Mapping[str, JSONValue],
    keyring: KeyRing,
    *,
    input_hash: str | None,
    output_hash: str | None,
    prev_receipt: Mapping[str, JSONValue] | None,
) -> VerifyResult:
    """The four checks of ``POST /v1/verify`` and its response body; ``ok`` only if all pass.

    ``prev_receipt`` is the stored receipt named by ``prev_receipt_hash`` in the same
    project, or None when it was not found; the service vouches for it, so its signature is
    not checked here (the walk of the ``verify`` command does check it). ``input_hash`` None
    skips the hash check.
    """
    check = check_receipt(receipt, keyring)
    match = True
    if input_hash is not None:
        match = receipt.get("input_hash") == input_hash.lower()
    if output_hash is not None:
        match = match and receipt.get("output_hash") == output_hash.lower()
    prev_hash = receipt.get("prev_receipt_hash")
    prev_found = prev_receipt is not None
    prev_recompute_ok = False
    if prev_receipt is not None:
        link = check_link(prev_hash, prev_receipt, receipt.get("project_id"), None)
        prev_recompute_ok = link.same_project and link.linked and link.receipt_hash_recompute
    chain_ok = prev_hash is None or (prev_found and prev_recompute_ok)
    checks: VerifyChecks = {
        "signature": check.counts,
        "hash_match": match,
        "receipt_hash_recompute": check.receipt_hash_recompute,
        "chain_link": chain_ok,
    }
    return {
        "ok": all(checks.values()),
        "receipt_id": receipt.get("receipt_id"),
        "checks": checks,
        "sig_kid": receipt.get("sig_kid"),
        "receipt_hash": receipt.get("receipt_hash"),
        "recomputed_receipt_hash": check.recomputed_receipt_hash,
        "chain": {
            "prev_receipt_hash": prev_hash,
            "prev_found": prev_found,
            "prev_receipt_hash_recompute": prev_recompute_ok,
        },
    }


def unreadable_receipt_result(receipt_id: str) -> VerifyResult:
    """The ``POST /v1/verify`` body for a stored record that cannot be used (undecodable, or
    another receipt's): nothing can be checked, so every check is false and ``ok`` is false."""
    return {
        "ok": False,
        "receipt_id": receipt_id,
        "checks": {"signature": False, "hash_match": False, "receipt_hash_recompute": False, "chain_link": False},
        "sig_kid": None,
        "receipt_hash": None,
        "recomputed_receipt_hash": None,
        "chain": {"prev_receipt_hash": None, "prev_found": False, "prev_receipt_hash_recompute": False},
    }


def is_bundle(document: JSONValue) -> bool:
    """The document says it is a bundle (its version is checked by ``bundle_parts``)."""
    return isinstance(document, dict) and document.get("format") == BUNDLE_FORMAT


def bundle_parts(document: Mapping[str, JSONValue]) -> BundleParts:
    """The members of a bundle document; ``BundleError`` for an unsupported version or a
    receipt that is not an object or a chain that is not a list of objects."""
    if document.get("version") not in BUNDLE_VERSIONS:
        raise BundleError(f"unsupported bundle version {document.get('version')!r}")
    receipt, listed = document.get("receipt"), document.get("chain")
    chain = [entry for entry in listed if isinstance(entry, dict)] if isinstance(listed, list) else []
    if not isinstance(receipt, dict) or not isinstance(listed, list) or len(chain) != len(listed):
        raise BundleError("the bundle is malformed (receipt must be an object, chain a list of objects)")
    log, stamps = document.get("log"), document.get("timestamps")
    return BundleParts(
        receipt,
        document.get("keys"),
        chain,
        document.get("chain_complete") is True,
        log if isinstance(log, dict) else None,
        stamps if isinstance(stamps, list) else None,
    )


def check_bundle_chain(
    receipt: Mapping[str, JSONValue], chain: Sequence[Mapping[str, JSONValue]], keyring: KeyRing, claimed_complete: bool
) -> tuple[BundleChain, bool]:
    """Check a bundle's chain segment offline: every entry is self-consistent and signed,
    belongs to the receipt's project, and is exactly the receipt its successor names
    (``entry.receipt_hash == successor.prev_receipt_hash``). The segment is complete when
    it ends at a receipt whose ``prev_receipt_hash`` is null; a bundle that claims
    ``chain_complete`` without that fails. Returns (report part, all good)."""
    links: list[ChainLink] = []
    successor = receipt
    for entry in chain:
        link = check_link(successor.get("prev_receipt_hash"), entry, receipt.get("project_id"), keyring)
        checked: ChainLink = {
            "receipt_id": entry.get("receipt_id"),
            "receipt_hash": entry.get("receipt_hash"),
            "found": True,
            "linked": link.linked,
            "receipt_hash_recompute": link.receipt_hash_recompute,
            "signature": link.signature,
            "same_project": link.same_project,
            "ok": link.linked and link.receipt_hash_recompute and link.signature is True and link.same_project,
        }
        if link.key_certificate is not None:
            checked["key_certificate"] = link.key_certificate
        links.append(checked)
        successor = entry
    complete = successor.get("prev_receipt_hash") is None
    claim_ok = complete or not claimed_complete
    part: BundleChain = {"links": links, "truncated": False, "complete": complete, "claimed_complete": claimed_complete}
    return part, all(link["ok"] for link in links) and claim_ok


def carried_keys_match(carried: JSONValue, pinned: KeyRing) -> tuple[bool, list[str]]:
    """Whether every key the bundle carries is the pinned key of the same kid.

    Returns (all match, the kids that do not: unknown to the pinned set, or another key).
    A carried set that is not a ``{"keys": [...]}`` object does not match.
    """
    entries = carried.get("keys") if isinstance(carried, dict) else None
    if not isinstance(entries, list):
        return False, []
    differing: list[str] = []
    for entry in entries:
        kid, public = (entry.get("kid"), entry.get("public_key_base64url")) if isinstance(entry, dict) else (None, None)
        known = pinned.keys.get(kid) if isinstance(kid, str) else None
        try:
            same = known is not None and isinstance(public, str) and b64url_decode(public) == bytes(known.verify_key)
        except ValueError:
            same = False
        if not same:
            differing.append(str(kid))
    return not differing, differing


def carried_key_ring(carried: JSONValue) -> KeyRing:
    """The keys a bundle carries, as a ring: what an unpinned check uses (it proves only that
    the bundle is consistent with itself). ``BundleError`` when the key set is malformed."""
    entries = carried.get("keys") if isinstance(carried, dict) else None
    active = carried.get("active_kid") if isinstance(carried, dict) else None
    if entries == []:
        # The service left out every kid it does not know: nothing verifies (fail closed).
        return KeyRing({}, active if isinstance(active, str) else None, None)
    try:
        if isinstance(carried, dict) and isinstance(entries, list):
            listed = {entry.get("kid") for entry in entries if isinstance(entry, dict)}
            if isinstance(active, str) and active not in listed:
                # A bundle lists only the kids that signed its receipts: after a rotation the
                # service's active kid may have signed none of them (docs/bundles.md).
                ring = load_key_ring({**carried, "active_kid": None})
                return KeyRing(ring.keys, active, None)
        return load_key_ring(carried)
    except KeySetError as exc:
        raise BundleError(f"the bundle's key set is malformed: {exc}") from exc
