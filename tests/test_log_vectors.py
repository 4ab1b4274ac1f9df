"""docs/log-vectors.md stays true: every value on it is recomputed here from its receipts and
key, and checked by tlog-scales too (an implementation nobody here wrote)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tlog_scales.signing import Vkey
from tlog_scales.tlog import Checkpoint as TheirCheckpoint
from tlog_scales.tlog import InclusionProof

from execution_proof.transparency import note, tlog

DOC = Path(__file__).resolve().parent.parent / "docs" / "log-vectors.md"


def blocks() -> list[str]:
    return re.findall(r"```(?:json)?\n(.*?)```", DOC.read_text(), re.S)


def test_every_vector_on_the_page_is_what_the_code_computes() -> None:
    keys, receipts_json, entry_text, entry_hex, leaves_hex, checkpoint, proof_text = blocks()
    skey, vkey = keys.split()
    signer = note.Signer.parse(skey)
    assert signer.seed == hashlib.sha256(b"execution-proof-service log test vector key").digest()
    assert signer.verifier.encode() == vkey
    receipts = json.loads(receipts_json)
    entries = [tlog.entry_bytes(r) for r in receipts]
    assert entries[2].decode() == entry_text and entries[2].hex() == entry_hex.strip()
    leaves = [tlog.leaf_hash(e) for e in entries]
    assert [leaf.hex() for leaf in leaves] == leaves_hex.split()
    root = tlog.merkle_root(leaves)
    assert f"Root (RFC 6962), hex: `{root.hex()}`" in DOC.read_text()
    assert note.sign_note(note.Checkpoint("example.com/log", 5, root).text(), signer) == checkpoint
    proof = note.parse_tlog_proof(proof_text)
    assert proof.checkpoint == checkpoint and proof.index == 2
    tlog.verify_inclusion(leaves[2], 2, 5, proof.path, root)
    # The same values, read by tlog-scales.
    theirs = TheirCheckpoint.from_text(checkpoint)
    theirs.verify(Vkey.from_string(vkey))
    assert theirs.root_hash == root and theirs.size == 5
    InclusionProof(2, 5, list(proof.path)).check(leaves[2], root)
