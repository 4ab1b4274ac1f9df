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


LOG_DOC = DOC.with_name("log.md")
RECEIPT_VECTORS = DOC.parent.parent / "tests" / "assets" / "receipt_vectors.json"


def test_the_dsse_leaf_vectors_of_docs_log_are_what_the_code_computes() -> None:
    """docs/log.md, "Vectors: the dsse leaf of a receipt": the Statement, its hash, the PAE,
    the signature, the key's SPKI, the leaf and its hash, and the receipt entry's hash before
    it, recomputed from the receipt vector and its key; the leaf reads back strictly, and the
    signature verifies over the PAE."""
    from nacl.signing import SigningKey

    from execution_proof.receipts import attestation

    text = LOG_DOC.read_text()
    section = text[text.index("### Vectors: the `dsse` leaf of a receipt") :]
    section = section[: section.index("\n## ")]
    statement_text, leaf_text = (block.strip() for block in re.findall(r"```\n(.*?)```", section, re.S))
    case = next(c for c in json.loads(RECEIPT_VECTORS.read_text())["cases"] if c["name"] == "minimal-first")
    assert case["private_key_seed_hex"] in section and case["kid"] in section
    signer = SigningKey(bytes.fromhex(case["private_key_seed_hex"]))
    origin = "example.com/log"
    assert f"`{origin}`" in section
    made = attestation.attest(case["receipt"], origin, signer)
    assert made.payload.decode() == statement_text and f"RFC 8785, {len(made.payload)} bytes" in section
    assert made.payload_hash().hex() in section
    pae = attestation.pae(attestation.PAYLOAD_TYPE, made.payload)
    prefix = f"DSSEv1 {len(attestation.PAYLOAD_TYPE)} {attestation.PAYLOAD_TYPE} {len(made.payload)} "
    assert pae == prefix.encode() + made.payload
    assert f"`{prefix}`" in section and f"{len(pae)} bytes" in section and hashlib.sha256(pae).hexdigest() in section
    assert made.signature.hex() in section
    public_key = bytes(signer.verify_key)
    assert attestation.spki_der(public_key).hex() in section
    leaf = made.log_body(public_key)
    assert leaf.decode() == leaf_text and f"RFC 8785, {len(leaf)} bytes" in section
    assert tlog.leaf_hash(leaf).hex() in section
    assert tlog.leaf_hash(tlog.entry_bytes(case["receipt"])).hex() in section
    body = attestation.parse_log_body(leaf_text.encode())
    assert (body.payload_hash, body.signature, body.public_key) == (made.payload_hash(), made.signature, public_key)
    assert made.signed_by(public_key)
    assert leaf.startswith(tlog.DSSE_HEADER) and tlog.item_entries(tlog.entry_bytes(case["receipt"]) + leaf)[1] == leaf
