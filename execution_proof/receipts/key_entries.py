"""The key entries of the transparency log, as a monitor reads them: every key certificate and
revocation enters the log as an entry of its own kind (transparency/monitor.py,
``ENTRY_KINDS``), its header line, then the document's RFC 8785 bytes and a newline.

It also reads the one other kind a receipt's item adds: the ``dsse`` leaf of the receipt's
attestation (``read_dsse_leaf``: ``attestation.parse_log_body`` reads it strictly, a leaf that
fails is an ``entry`` violation). Nothing ties a leaf to a key the log certified: a
certificate waits in the log's own queue while its key already signs receipts in theirs (and
is held back in its process until the log's store is known), so a leaf may come before the
certificate of its key, by any number of entries.

``read_key_entry`` reads a key entry strictly: the document must parse (``KeyCertificate.parse``,
``KeyRevocation.parse``) and the entry's bytes must be exactly the header, the document's
canonical bytes and ``\\n``; anything else is an ``entry`` violation. ``judge_key_entry`` holds
it against the pinned receipt roots: a root not pinned is ``unknown_root``; a certificate or
revocation whose pinned root's signature does not verify is ``bad_certificate`` or
``bad_revocation``. Each names the entry's index, the kid and the root_kid. ``listed_keys``
gives the keys the log shows, as the monitor's report lists them. Pure.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from execution_proof.receipts.attestation import SPKI_PREFIX, AttestationError, b64, log_body, parse_log_body, spki_der
from execution_proof.receipts.key_certificates import KeyCertificate, KeyDocumentError, KeyRevocation
from execution_proof.transparency.monitor import (
    DSSE_LEAF,
    KEY_CERTIFICATE_ENTRY,
    KEY_REVOCATION_ENTRY,
    EntryKind,
    Violation,
)

_PARSERS: dict[EntryKind, Callable[[Any], KeyCertificate | KeyRevocation]] = {
    KEY_CERTIFICATE_ENTRY: KeyCertificate.parse,
    KEY_REVOCATION_ENTRY: KeyRevocation.parse,
}
"""The document each key kind of entry holds."""


class ListedKey(TypedDict):
    """A key the log shows, as the monitor's report lists it (member ``keys``)."""

    kid: str
    root_kid: str
    not_before: str
    not_after: str
    index: int
    """The certificate's entry in the log."""
    revoked_after: str | None
    """The earliest ``revoked_after`` of the revocations by the certificate's root the log
    shows for the key (with pinned roots: those the root's pinned key signed); None: none."""
    root_pinned: bool | None
    """Whether the trust root pins the certificate's root; None without a trust root."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A key certificate or revocation, read from the log's entry ``index``."""

    index: int
    document: KeyCertificate | KeyRevocation

    def entry(self) -> bytes:
        """The entry's bytes (its header, the document's canonical bytes, a newline)."""
        kind = KEY_CERTIFICATE_ENTRY if isinstance(self.document, KeyCertificate) else KEY_REVOCATION_ENTRY
        return kind.header + self.document.entry_body() + b"\n"


def read_key_entry(index: int, kind: EntryKind, entry: bytes) -> KeyEntry | Violation:
    """The key entry ``entry`` of ``kind`` (its first bytes fixed it) at ``index``; an
    ``entry`` violation, naming what is wrong, when it does not parse strictly or is not in
    its one canonical form."""
    parse = _PARSERS.get(kind)
    if parse is None:
        raise ValueError(f"{kind.name} is not a key entry")
    try:
        document = parse(orjson.loads(entry[len(kind.header) :]))
    except (orjson.JSONDecodeError, KeyDocumentError) as exc:
        return Violation("entry", f"a malformed {kind.name}: {exc}", index)
    read = KeyEntry(index, document)
    if read.entry() != entry:
        return Violation(
            "entry",
            f"a {kind.name} that is not its header, the document's RFC 8785 bytes and a newline",
            index,
            kid=document.kid,
            root_kid=document.root_kid,
        )
    return read


def _leaf_parts() -> tuple[bytes, bytes, bytes, bytes]:
    """The bytes of every ``dsse`` body around its three base64 values (the payload's hash,
    the signature, the key's SPKI), cut out of one ``log_body`` wrote: each value has a fixed
    length in base64 and needs no escape in JSON, so every body is these parts around them."""
    values = (bytes([1]) * 32, bytes([2]) * 64, bytes([3]) * 32)
    rest = log_body(*values)
    head, rest = rest.split(b64(values[0]).encode())
    after_hash, rest = rest.split(b64(values[1]).encode())
    after_signature, tail = rest.split(b64(spki_der(values[2])).encode())
    return head, after_hash, after_signature, tail


_LEAF_PARTS = _leaf_parts()
_LEAF_FIELDS = ((32, 44), (64, 88), (len(SPKI_PREFIX) + 32, 60))
"""(raw length, base64 length) of the payload's hash, the signature and the key's SPKI."""


def _is_leaf(entry: bytes) -> bool:
    """Whether ``entry`` is the body ``log_body`` writes for the three values it holds: then
    it is exactly what ``parse_log_body`` accepts, at a small part of its cost (a monitor reads
    one leaf per receipt)."""
    raw: list[bytes] = []
    at = 0
    for part, (size, length) in zip(_LEAF_PARTS, _LEAF_FIELDS, strict=False):
        at += len(part)
        try:
            value = binascii.a2b_base64(entry[at : at + length], strict_mode=True)
        except binascii.Error:
            return False
        if len(value) != size:
            return False
        raw.append(value)
        at += length
    head, after_hash, after_signature, tail = _LEAF_PARTS
    values = [b64(value).encode() for value in raw]
    built = b"".join((head, values[0], after_hash, values[1], after_signature, values[2], tail))
    return built == entry and raw[2].startswith(SPKI_PREFIX)


def read_dsse_leaf(index: int, entry: bytes) -> Violation | None:
    """The ``dsse`` leaf at ``index`` read strictly (what ``parse_log_body`` accepts: exactly
    the members a Rekor v2 ``dsse`` 0.0.2 body has, one Ed25519 signature, RFC 8785 form): None,
    or an ``entry`` violation naming what is wrong."""
    if _is_leaf(entry):
        return None
    try:
        parse_log_body(entry)
    except AttestationError as exc:
        return Violation("entry", f"a malformed {DSSE_LEAF.name}: {exc}", index)
    return None


def judge_key_entry(entry: KeyEntry, roots: Mapping[str, bytes]) -> Violation | None:
    """``entry`` against the pinned receipt ``roots`` (``{root_kid: raw public key}``):
    None when a pinned root signed it, else the violation (module docstring)."""
    document, index = entry.document, entry.index
    certificate = isinstance(document, KeyCertificate)
    what = f"the key certificate of {document.kid}" if certificate else f"the revocation of {document.kid}"
    root = roots.get(document.root_kid)
    if root is None:
        return Violation(
            "unknown_root",
            f"{what} names the root {document.root_kid}, which the trust root does not pin",
            index,
            kid=document.kid,
            root_kid=document.root_kid,
        )
    if not document.signed_by(root):
        return Violation(
            "bad_certificate" if certificate else "bad_revocation",
            f"{what} is not signed by the pinned root {document.root_kid}",
            index,
            kid=document.kid,
            root_kid=document.root_kid,
        )
    return None


def roots_digest(roots: Mapping[str, bytes]) -> bytes:
    """SHA-256 over the pinned roots (kid and key, in kid order): what the kept key entries
    were last judged against."""
    return hashlib.sha256(b"".join(kid.encode() + b"\n" + key for kid, key in sorted(roots.items()))).digest()


def listed_keys(entries: Iterable[KeyEntry], roots: Mapping[str, bytes] | None) -> list[ListedKey]:
    """Every key certificate among ``entries``, in log order, with its revocation (a
    revocation by the certificate's own root; with ``roots``, only one that root's pinned key
    signed, as a verifier counts them) and whether its root is pinned (None without
    ``roots``)."""
    certificates: list[tuple[int, KeyCertificate]] = []
    revoked: dict[tuple[str, str], str] = {}
    for entry in entries:
        document = entry.document
        if isinstance(document, KeyCertificate):
            certificates.append((entry.index, document))
            continue
        if roots is not None and judge_key_entry(entry, roots) is not None:
            continue
        named = (document.kid, document.root_kid)
        if named not in revoked or document.revoked_after < revoked[named]:
            revoked[named] = document.revoked_after
    return [
        {
            "kid": certificate.kid,
            "root_kid": certificate.root_kid,
            "not_before": certificate.not_before,
            "not_after": certificate.not_after,
            "index": index,
            "revoked_after": revoked.get((certificate.kid, certificate.root_kid)),
            "root_pinned": None if roots is None else certificate.root_kid in roots,
        }
        for index, certificate in sorted(certificates, key=lambda found: found[0])
    ]


class KeyReader:
    """The monitor's ``EntryReader`` for the kinds other than receipt entries: a key entry
    read strictly, judged against ``roots`` when given, and kept (``take``) for the state to
    save; a ``dsse`` leaf read strictly (``read_dsse_leaf``), nothing kept."""

    def __init__(self, roots: Mapping[str, bytes] | None) -> None:
        self.roots = roots
        self._read: list[KeyEntry] = []

    def read(self, index: int, kind: EntryKind, entry: bytes) -> list[Violation]:
        if kind is DSSE_LEAF:
            malformed = read_dsse_leaf(index, entry)
            return [malformed] if malformed is not None else []
        found = read_key_entry(index, kind, entry)
        if isinstance(found, Violation):
            return [found]
        self._read.append(found)
        violation = judge_key_entry(found, self.roots) if self.roots is not None else None
        return [violation] if violation is not None else []

    def take(self) -> list[KeyEntry]:
        """The entries read since the last ``take``."""
        read, self._read = self._read, []
        return read
