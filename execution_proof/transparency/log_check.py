"""Checking a receipt against the transparency log, pure: its tlog-proof (inclusion under a
checkpoint signed by a pinned log key) and an older checkpoint's consistency with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from execution_proof.transparency import note, tlog


class InclusionReport(TypedDict):
    """``LogInclusion.report()``: the log part of a verify report."""

    ok: bool
    reason: str
    index: int | None
    tree_size: int | None
    origin: str | None


@dataclass(frozen=True)
class LogInclusion:
    ok: bool
    reason: str
    index: int | None = None
    tree_size: int | None = None
    origin: str | None = None
    checkpoint: note.Checkpoint | None = None
    checkpoint_note: str = ""
    """The proof's signed checkpoint as given (with every signature), once the proof parsed."""
    checkpoint_text: str = ""
    """Its note text (what the log signed and a time-stamp's imprint covers), once signed."""

    def report(self) -> InclusionReport:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "index": self.index,
            "tree_size": self.tree_size,
            "origin": self.origin,
        }


def check_inclusion(receipt: Mapping[str, object], proof_text: str, log_key: note.Verifier) -> LogInclusion:
    """Whether ``proof_text`` (a C2SP tlog-proof) shows the receipt's entry in a tree whose
    checkpoint ``log_key`` signed. Never raises on bad input: the reason says what failed."""
    try:
        proof = note.parse_tlog_proof(proof_text)
    except note.NoteError as exc:
        return LogInclusion(False, f"the log proof is malformed: {exc}")
    try:
        checkpoint, opened = note.open_checkpoint(proof.checkpoint, log_key)
    except note.NoteError as exc:
        reason = f"the proof's checkpoint is not signed by the pinned log key: {exc}"
        return LogInclusion(False, reason, checkpoint_note=proof.checkpoint)
    found = LogInclusion(
        False, "", proof.index, checkpoint.size, checkpoint.origin, checkpoint, proof.checkpoint, opened.text
    )
    try:
        leaf = tlog.leaf_hash(tlog.entry_bytes(receipt))
    except (KeyError, ValueError, TypeError):
        return _with(found, False, "the receipt's log entry cannot be formed (fields missing)")
    try:
        tlog.verify_inclusion(leaf, proof.index, checkpoint.size, proof.path, checkpoint.root)
    except tlog.ProofError as exc:
        return _with(found, False, f"the receipt is not at index {proof.index} of the signed tree: {exc}")
    return _with(found, True, f"in the log at index {proof.index}, checkpoint of size {checkpoint.size} "
                 f"signed by {checkpoint.origin}")  # fmt: skip


def _with(found: LogInclusion, ok: bool, reason: str) -> LogInclusion:
    return dataclasses.replace(found, ok=ok, reason=reason)


def check_consistency(older: note.Checkpoint, newer: note.Checkpoint, proof: list[bytes]) -> tuple[bool, str]:
    """Whether ``newer`` extends ``older`` (same origin, a valid consistency proof)."""
    if older.origin != newer.origin:
        return False, f"the older checkpoint is of another log ({older.origin})"
    if older.size > newer.size:
        return False, f"the older checkpoint ({older.size} entries) is larger than the proof's ({newer.size})"
    try:
        tlog.verify_consistency(older.size, older.root, newer.size, newer.root, proof)
    except tlog.ProofError as exc:
        return False, f"the log is NOT consistent with the older checkpoint: {exc}"
    return True, f"the checkpoint of size {newer.size} extends the older one of size {older.size}"
