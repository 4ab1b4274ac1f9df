"""The checks of a receipt's attestation (docs/verdicts.md, "Attestations"): the strict reader of
the Sigstore bundle v0.3 this service writes, the envelope against the receipt it carries and
the receipt's key, and the proof of the attestation's ``dsse`` leaf under a checkpoint of a
pinned log.

What makes an attestation count is its receipt: the receipt inside the Statement is verified as
a bare receipt is (receipts/verifier.py), and the envelope must be signed over its PAE by that
receipt's own key, under the receipt's ``sig_kid``. A Sigstore bundle's log entry is the
receipt's log inclusion for that form: its leaf must be the ``dsse`` body recomputed from the
envelope and the key, included at ``logIndex`` under a checkpoint the pinned log key signed,
and every number the entry repeats (``rootHash``, ``treeSize``, ``logIndex``, ``logId``) must be
that checkpoint's and that log's: sigstore-js does not read them, this verifier refuses a
changed one.

Pure: no I/O, no server library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from execution_proof.receipts.attestation import (
    DSSE_API_VERSION,
    DSSE_KIND,
    Attestation,
    AttestationError,
    parse_envelope,
    parse_log_body,
    unb64,
)
from execution_proof.receipts.sigstore import BUNDLE_MEDIA_TYPE, checkpoint_key_id

if TYPE_CHECKING:
    from execution_proof.transparency import note
    from execution_proof.transparency.log_check import LogInclusion

HASH_SIZE = 32
"""A Merkle tree hash (SHA-256), as transparency/tlog.py has it."""
ENVELOPE_MEMBERS = frozenset(("payloadType", "payload", "signatures"))
SIGSTORE_MEMBERS = frozenset(("mediaType", "verificationMaterial", "dsseEnvelope"))
ENTRY_MEMBERS = frozenset(("logIndex", "logId", "kindVersion", "integratedTime", "inclusionProof", "canonicalizedBody"))
PROOF_MEMBERS = frozenset(("logIndex", "rootHash", "treeSize", "hashes", "checkpoint"))


@dataclass(frozen=True)
class TlogEntry:
    """A Sigstore bundle's one ``TransparencyLogEntry``, read: the leaf (``canonicalizedBody``)
    and its inclusion proof, every number as the entry states it."""

    log_index: int
    log_id: bytes
    body: bytes
    proof_index: int
    root_hash: bytes
    tree_size: int
    hashes: tuple[bytes, ...]
    checkpoint: str


@dataclass(frozen=True)
class SigstoreBundle:
    """A Sigstore bundle v0.3 of a receipt's attestation: the envelope, the key ``hint`` and
    the log entry (None: the bundle carries none, as from a service without a log)."""

    attestation: Attestation
    hint: str
    entry: TlogEntry | None


def is_attestation(value: Mapping[str, Any]) -> bool:
    """The document says it is an attestation (an envelope or a Sigstore bundle): it has one
    of their members. Whether it is a well-formed one is its reader's question."""
    return bool((ENVELOPE_MEMBERS | SIGSTORE_MEMBERS).intersection(value))


def is_sigstore(value: Mapping[str, Any]) -> bool:
    return bool(SIGSTORE_MEMBERS.intersection(value))


def _object(value: Any, members: frozenset[str], what: str, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``value`` as an object of exactly ``members`` (and any of ``optional``)."""
    if type(value) is not dict:
        raise AttestationError(f"{what} is not an object")
    unknown = sorted(set(value) - members - optional)
    missing = sorted(members - set(value))
    if unknown:
        raise AttestationError(f"{what} has unknown members: {', '.join(unknown)}")
    if missing:
        raise AttestationError(f"{what} has no {', '.join(missing)}")
    return value


def _int64(value: Any, what: str) -> int:
    """A protobuf JSON int64: a decimal string (what the service writes), 0 or more."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 19:
        raise AttestationError(f"{what} is not a decimal string")
    if value != str(int(value)):
        raise AttestationError(f"{what} has leading zeros")
    return int(value)


def parse_sigstore_bundle(value: Any) -> SigstoreBundle:
    """A Sigstore bundle v0.3 as ``receipts/sigstore.bundle`` writes it, read strictly: exactly
    its members at every level, the envelope (``parse_envelope``), at most one log entry of
    kind ``dsse`` 0.0.2. ``AttestationError`` naming what is wrong otherwise."""
    bundle = _object(value, SIGSTORE_MEMBERS, "the Sigstore bundle")
    if bundle["mediaType"] != BUNDLE_MEDIA_TYPE:
        raise AttestationError(f"the Sigstore bundle's mediaType is not {BUNDLE_MEDIA_TYPE}")
    material = _object(
        bundle["verificationMaterial"], frozenset({"publicKey"}), "verificationMaterial", frozenset({"tlogEntries"})
    )
    hint = _object(material["publicKey"], frozenset({"hint"}), "verificationMaterial.publicKey")["hint"]
    if not isinstance(hint, str):
        raise AttestationError("verificationMaterial.publicKey.hint is not a string")
    attestation = parse_envelope(bundle["dsseEnvelope"])
    entry = None
    if "tlogEntries" in material:
        entries = material["tlogEntries"]
        if type(entries) is not list or len(entries) != 1:
            raise AttestationError("verificationMaterial.tlogEntries holds exactly one entry (this log's)")
        entry = _tlog_entry(entries[0])
    return SigstoreBundle(attestation, hint, entry)


def _tlog_entry(value: Any) -> TlogEntry:
    entry = _object(value, ENTRY_MEMBERS, "the tlog entry")
    kind = _object(entry["kindVersion"], frozenset({"kind", "version"}), "the tlog entry's kindVersion")
    if kind != {"kind": DSSE_KIND, "version": DSSE_API_VERSION}:
        raise AttestationError(
            f"the tlog entry is not of kind {DSSE_KIND} {DSSE_API_VERSION} (this verifier reads no other)"
        )
    log_id = _object(entry["logId"], frozenset({"keyId"}), "the tlog entry's logId")
    proof = _object(entry["inclusionProof"], PROOF_MEMBERS, "the tlog entry's inclusionProof")
    checkpoint = _object(proof["checkpoint"], frozenset({"envelope"}), "inclusionProof.checkpoint")["envelope"]
    if not isinstance(checkpoint, str):
        raise AttestationError("inclusionProof.checkpoint.envelope is not a string")
    hashes = proof["hashes"]
    if type(hashes) is not list:
        raise AttestationError("inclusionProof.hashes is not a list")
    path = tuple(unb64(node, "an inclusionProof hash") for node in hashes)
    if any(len(node) != HASH_SIZE for node in path):
        raise AttestationError("an inclusionProof hash is not 32 bytes")
    root = unb64(proof["rootHash"], "inclusionProof.rootHash")
    if len(root) != HASH_SIZE:
        raise AttestationError("inclusionProof.rootHash is not 32 bytes")
    _int64(entry["integratedTime"], "the tlog entry's integratedTime")
    return TlogEntry(
        log_index=_int64(entry["logIndex"], "the tlog entry's logIndex"),
        log_id=unb64(log_id["keyId"], "logId.keyId"),
        body=unb64(entry["canonicalizedBody"], "canonicalizedBody"),
        proof_index=_int64(proof["logIndex"], "inclusionProof.logIndex"),
        root_hash=root,
        tree_size=_int64(proof["treeSize"], "inclusionProof.treeSize"),
        hashes=path,
        checkpoint=checkpoint,
    )


@dataclass(frozen=True)
class EnvelopeCheck:
    """An attestation against the receipt it carries and that receipt's key: the signature's
    ``keyid`` (and a Sigstore bundle's key ``hint``) name the receipt's ``sig_kid``, and the
    signature over the PAE is that key's (None: no key at hand to check it with)."""

    keyid: str
    kid_matches: bool
    signature: bool | None
    hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.kid_matches and self.signature is True


def check_envelope(
    attestation: Attestation, receipt: Mapping[str, Any], public_key: bytes | None, hint: str | None = None
) -> EnvelopeCheck:
    """``attestation`` against ``receipt`` and the raw key its ``sig_kid`` names (None: no such
    key at hand). Never raises."""
    kid = receipt.get("sig_kid")
    matches = attestation.kid == kid and (hint is None or hint == kid)
    signature = None if public_key is None else attestation.signed_by(public_key)
    return EnvelopeCheck(attestation.kid, matches, signature, hint)


def check_tlog_entry(
    entry: TlogEntry, attestation: Attestation, public_key: bytes | None, log_key: note.Verifier
) -> LogInclusion:
    """Whether ``entry`` proves the attestation's ``dsse`` leaf (the body recomputed from its
    payload, signature and ``public_key``; None, no key at hand: the key the body names, which
    the key check judges) in the log ``log_key`` pins. Never raises: the
    reason says what failed. A checkpoint the key did not sign leaves ``checkpoint`` None (a
    bad checkpoint signature); anything else that fails is a bad proof. (The log code is
    loaded here: reading a document does not need it.)"""
    from execution_proof.transparency import note, tlog
    from execution_proof.transparency.log_check import LogInclusion

    try:
        checkpoint, opened = note.open_checkpoint(entry.checkpoint, log_key)
    except note.NoteError as exc:
        reason = f"the entry's checkpoint is not signed by the pinned log key: {exc}"
        return LogInclusion(False, reason, checkpoint_note=entry.checkpoint)
    found = LogInclusion(
        False, "", entry.log_index, checkpoint.size, checkpoint.origin, checkpoint, entry.checkpoint, opened.text
    )
    if entry.log_id != checkpoint_key_id(log_key.name, log_key.public_key):
        return _with(found, "the entry's logId is not the pinned log's key hash")
    if entry.proof_index != entry.log_index:
        return _with(
            found, f"inclusionProof.logIndex {entry.proof_index} is not the entry's logIndex {entry.log_index}"
        )
    if (entry.tree_size, entry.root_hash) != (checkpoint.size, checkpoint.root):
        return _with(found, "inclusionProof.treeSize and rootHash are not the signed checkpoint's")
    try:
        key = public_key if public_key is not None else parse_log_body(entry.body).public_key
    except AttestationError as exc:
        return _with(found, f"canonicalizedBody is not a dsse 0.0.2 body: {exc}")
    if entry.body != attestation.log_body(key):
        return _with(found, "canonicalizedBody is not this attestation's dsse body (its payload, signature and key)")
    try:
        tlog.verify_inclusion(
            tlog.leaf_hash(entry.body), entry.log_index, checkpoint.size, entry.hashes, checkpoint.root
        )
    except tlog.ProofError as exc:
        return _with(found, f"the attestation's leaf is not at index {entry.log_index} of the signed tree: {exc}")
    said = f"the attestation's leaf is in the log at index {entry.log_index}, checkpoint of size {checkpoint.size} "
    return _with(found, said + f"signed by {checkpoint.origin}", ok=True)


def _with(found: LogInclusion, reason: str, *, ok: bool = False) -> LogInclusion:
    import dataclasses

    return dataclasses.replace(found, ok=ok, reason=reason)
