"""transparency/tlog.py and transparency/note.py: the Merkle tree, tiles, proofs and signed notes,
checked against a brute-force tree, the transparency-dev/merkle vectors and tlog-scales (an
implementation nobody here wrote)."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path

import pytest

from execution_proof.transparency import note, tlog

VECTORS = json.loads((Path(__file__).parent / "data" / "merkle_vectors.json").read_text())


def reference_root(hashes: list[bytes]) -> bytes:
    """MTH exactly as RFC 6962 section 2.1 defines it (recursive split)."""
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return tlog.node_hash(reference_root(hashes[:k]), reference_root(hashes[k:]))


def leaves(count: int, seed: int = 1) -> list[bytes]:
    return [tlog.leaf_hash(f"entry {seed} {i}".encode()) for i in range(count)]


class TileStore:
    """Tiles as a log keeps them: the widest content of each (level, index)."""

    def __init__(self) -> None:
        self.tiles: dict[tuple[int, int], bytearray] = {}
        self.size = 0
        self.root = tlog.EMPTY_ROOT

    def edge(self) -> dict[int, list[bytes]]:
        out = {}
        for level, index, width in tlog.edge_tiles(self.size):
            out[level] = tlog.split_tile(bytes(self.tiles[(level, index)][: width * 32]))
        return out

    def append(self, new: list[bytes]) -> tlog.Extension:
        ext = tlog.extend(self.size, self.edge(), new)
        for (level, index), data in ext.tiles.items():
            tile = self.tiles.setdefault((level, index), bytearray())
            assert data.startswith(bytes(tile)), "a tile only grows at its end"
            tile[:] = data
        self.size, self.root = ext.size, ext.root
        return ext

    def read(self, level: int, index: int, width: int) -> bytes:
        return bytes(self.tiles[(level, index)][: width * 32])

    def hashes(self) -> tlog.TileHashes:
        return tlog.TileHashes(self.size, self.read)


def test_roots_match_the_transparency_dev_vectors() -> None:
    hashes = [tlog.leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaves_hex"]]
    for size, root_hex in enumerate(VECTORS["roots_hex"]):
        assert tlog.merkle_root(hashes[:size]).hex() == root_hex
        store = TileStore()
        store.append(hashes[:size])
        assert store.root.hex() == root_hex
        if size:
            assert store.hashes().root().hex() == root_hex


@pytest.mark.parametrize("vector", VECTORS["inclusion"], ids=lambda v: f"{v['index']}-of-{v['size']}")
def test_inclusion_proofs_match_the_transparency_dev_vectors(vector: dict[str, object]) -> None:
    hashes = [tlog.leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaves_hex"]]
    store = TileStore()
    store.append(hashes[: int(vector["size"])])  # type: ignore[call-overload]
    proof = store.hashes().inclusion_proof(int(vector["index"]))  # type: ignore[call-overload]
    assert [p.hex() for p in proof] == vector["proof_hex"]
    index, size = int(vector["index"]), int(vector["size"])  # type: ignore[call-overload]
    tlog.verify_inclusion(hashes[index], index, size, proof, bytes.fromhex(VECTORS["roots_hex"][size]))


@pytest.mark.parametrize("vector", VECTORS["consistency"], ids=lambda v: f"{v['size1']}-to-{v['size2']}")
def test_consistency_proofs_match_the_transparency_dev_vectors(vector: dict[str, object]) -> None:
    hashes = [tlog.leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaves_hex"]]
    size1, size2 = int(vector["size1"]), int(vector["size2"])  # type: ignore[call-overload]
    store = TileStore()
    store.append(hashes[:size2])
    proof = store.hashes().consistency_proof(size1)
    assert [p.hex() for p in proof] == vector["proof_hex"]
    roots = [bytes.fromhex(r) for r in VECTORS["roots_hex"]]
    tlog.verify_consistency(size1, roots[size1], size2, roots[size2], proof)


def test_corrupted_proofs_are_refused() -> None:
    """The probes transparency-dev/merkle's verify_test.go runs: every one must fail."""
    hashes = leaves(1000)
    store = TileStore()
    store.append(hashes)
    view = store.hashes()
    some = hashlib.sha256(b"some").digest()
    for index in (0, 1, 255, 256, 511, 999):
        proof = view.inclusion_proof(index)
        tlog.verify_inclusion(hashes[index], index, 1000, proof, store.root)
        probes = [
            (index - 1, 1000, store.root, hashes[index], proof),
            (index + 1, 1000, store.root, hashes[index], proof),
            (index ^ 2, 1000, store.root, hashes[index], proof),
            (index, 2000, store.root, hashes[index], proof),
            (index, 500, store.root, hashes[index], proof),
            (index, 1000, store.root, some, proof),
            (index, 1000, some, hashes[index], proof),
            (index, 1000, store.root, hashes[index], [*proof, store.root]),
            (index, 1000, store.root, hashes[index], [store.root, *proof]),
            (index, 1000, store.root, hashes[index], proof[:-1]),
        ]
        probes += [
            (
                index,
                1000,
                store.root,
                hashes[index],
                [*proof[:i], bytes([proof[i][0] ^ 8]) + proof[i][1:], *proof[i + 1 :]],
            )
            for i in range(len(proof))
        ]
        for at, size, root, leaf, path in probes:
            with pytest.raises(tlog.ProofError):
                tlog.verify_inclusion(leaf, at, size, path, root)
    old = TileStore()
    old.append(hashes[:300])
    for size1 in (1, 7, 256, 300, 999):
        old = TileStore()
        old.append(hashes[:size1])
        proof = view.consistency_proof(size1)
        tlog.verify_consistency(size1, old.root, 1000, store.root, proof)
        bad = [
            (size1, store.root, 1000, old.root, proof),
            (size1, some, 1000, store.root, proof),
            (size1, old.root, 1000, some, proof),
            (size1, old.root, 1000, store.root, proof[:-1]),
            (size1, old.root, 1000, store.root, [*proof, old.root]),
            (size1, old.root, 1000, store.root, [proof[0], *proof]),
            (size1 + 1, old.root, 1000, store.root, proof),
            (size1, old.root, 2000, store.root, proof),
        ]
        bad += [
            (size1, old.root, 1000, store.root, [*proof[:i], bytes([proof[i][0] ^ 16]) + proof[i][1:], *proof[i + 1 :]])
            for i in range(len(proof))
        ]
        for size_1, root_1, size_2, root_2, path in bad:
            with pytest.raises(tlog.ProofError):
                tlog.verify_consistency(size_1, root_1, size_2, root_2, path)
    with pytest.raises(tlog.ProofError):
        tlog.verify_consistency(5, store.root, 5, old.root, [])


def test_growing_in_random_batches_keeps_every_tile_and_root_right() -> None:
    rng = random.Random(7)
    hashes = leaves(70_000, seed=2)
    store = TileStore()
    sizes = []
    while store.size < len(hashes):
        batch = rng.choice([1, 3, 255, 256, 257, 1000, 4000])
        store.append(hashes[store.size : store.size + batch])
        sizes.append(store.size)
    assert store.root == reference_root(hashes)
    # Level 0: the leaf hashes; level 1: MTHs of full level-0 tiles; level 2 likewise.
    for index in range(0, 274):
        assert bytes(store.tiles[(0, index)]) == b"".join(hashes[index * 256 : (index + 1) * 256])
    level1 = [reference_root(hashes[i * 256 : (i + 1) * 256]) for i in range(273)]
    assert bytes(store.tiles[(1, 0)]) == b"".join(level1[:256])
    assert bytes(store.tiles[(1, 1)]) == b"".join(level1[256:273])
    assert bytes(store.tiles[(2, 0)]) == reference_root(hashes[: 256 * 256])
    # The tree of size 70,000 as tlog-tiles describes it.
    assert [(lv, ix, w) for lv, ix, w in tlog.edge_tiles(70_000)] == [(0, 273, 112), (1, 1, 17), (2, 0, 1)]
    # Any earlier size's root is reachable from the same tiles (partial tiles are prefixes).
    for size in rng.sample(sizes, 20):
        assert tlog.TileHashes(size, store.read).root() == reference_root(hashes[:size])


def test_proofs_from_tiles_verify_for_many_sizes() -> None:
    rng = random.Random(3)
    hashes = leaves(3000, seed=3)
    store = TileStore()
    store.append(hashes)
    for _ in range(200):
        size = rng.randint(1, 3000)
        view = tlog.TileHashes(size, store.read)
        root = reference_root(hashes[:size])
        index = rng.randrange(size)
        tlog.verify_inclusion(hashes[index], index, size, view.inclusion_proof(index), root)
        old = rng.randint(1, size)
        tlog.verify_consistency(old, reference_root(hashes[:old]), size, root, view.consistency_proof(old))


def test_a_wrong_edge_tile_is_refused() -> None:
    store = TileStore()
    store.append(leaves(300))
    edge = store.edge()
    edge[0] = edge[0][:-1]
    with pytest.raises(tlog.ProofError, match="level-0 edge tile"):
        tlog.extend(store.size, edge, leaves(1, seed=9))


def test_tile_paths_are_as_tlog_tiles_spells_them() -> None:
    assert tlog.tile_path(0, 1234067) == "0/x001/x234/067"
    assert tlog.tile_path(1, 5, 17) == "1/005.p/17"
    assert tlog.tile_path("entries", 0, 3) == "entries/000.p/3"
    assert tlog.parse_tile_index(["x001", "x234", "067"]) == 1234067
    for bad in (["67"], ["x067"], ["001", "067"], ["x000", "067"], ["x1a2", "000"], []):
        with pytest.raises(ValueError, match="tile index"):
            tlog.parse_tile_index(bad)


def test_entries_round_trip_and_bundle() -> None:
    receipt = {
        "receipt_id": "rcpt_01J0000000ABCDEFGHJKMNPQRS",
        "receipt_hash": "sha256:" + "ab" * 32,
        "project_id": "prj_01J0000000ABCDEFGHJKMNPQRS",
        "prev_receipt_hash": None,
        "chain_status": "main",
    }
    entry = tlog.entry_bytes(receipt)
    assert entry.decode().split("\n") == [
        "execution-proof-log-entry/v1",
        receipt["receipt_id"],
        receipt["receipt_hash"],
        receipt["project_id"],
        "",
        "main",
        "",
    ]
    assert tlog.LogEntry.parse(entry).to_dict() == receipt
    assert tlog.leaf_hash(entry) == hashlib.sha256(b"\x00" + entry).digest()
    bundle = tlog.bundle_entry(entry) + tlog.bundle_entry(b"x")
    assert tlog.split_bundle(bundle) == [entry, b"x"]
    with pytest.raises(tlog.ProofError):
        tlog.split_bundle(bundle[:-1])


# --------------------------------------------------------------------------- notes


def test_keys_round_trip_and_key_ids_follow_signed_note() -> None:
    signer = note.Signer.generate("example.com/log")
    parsed = note.Signer.parse(signer.encode())
    assert parsed == signer
    vkey = signer.verifier.encode()
    verifier = note.Verifier.parse(vkey)
    expected = hashlib.sha256(b"example.com/log\n\x01" + verifier.public_key).digest()[:4]
    assert verifier.key_id == expected
    assert vkey.startswith("example.com/log+" + expected.hex() + "+")
    with pytest.raises(note.NoteError):
        note.Verifier.parse(vkey.replace(expected.hex(), "00000000"))
    with pytest.raises(note.NoteError):
        note.Signer.parse(signer.encode().replace("PRIVATE+KEY+", "PRIVATE+"))


def test_go_sumdb_note_key_and_signature_vectors_verify() -> None:
    """The example keys and note of golang.org/x/mod/sumdb/note's documentation."""
    vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
    text = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
    signed = (
        text
        + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
    )
    signer = note.Signer.parse(skey)
    assert signer.verifier.encode() == vkey
    assert note.sign_note(text, signer) == signed  # Ed25519 is deterministic
    parsed, signers = note.verify_note(signed, [note.Verifier.parse(vkey)])
    assert parsed.text == text and [s.name for s in signers] == ["PeterNeumann"]


def test_notes_ignore_unknown_keys_and_refuse_bad_known_ones() -> None:
    log = note.Signer.generate("log.example/a")
    other = note.Signer.generate("witness.example")
    text = note.Checkpoint("log.example/a", 5, b"\x01" * 32).text()
    signed = note.sign_note(text, log) + other.signature_line(text.encode())
    parsed, signers = note.verify_note(signed, [log.verifier])
    assert signers == [log.verifier] and len(parsed.signatures) == 2
    with pytest.raises(note.NoteError, match="no known key"):
        note.verify_note(signed, [note.Signer.generate("log.example/a").verifier])
    tampered = signed.replace("\n5\n", "\n6\n")
    with pytest.raises(note.NoteError, match="does not verify"):
        note.verify_note(tampered, [log.verifier])
    for bad in ("no blank line\n", "text\n\n", "text\n\nnot a signature\n", "a\x01b\n\n\u2014 x AAAAAAA=\n"):
        with pytest.raises(note.NoteError):
            note.parse_note(bad)


def test_checkpoints_and_tlog_proofs_round_trip() -> None:
    log = note.Signer.generate("log.example/a")
    checkpoint = note.Checkpoint("log.example/a", 109482, hashlib.sha256(b"r").digest())
    signed = note.sign_note(checkpoint.text(), log)
    opened, _ = note.open_checkpoint(signed, log.verifier)
    assert opened == checkpoint
    proof = note.TlogProof(73894, (b"\x02" * 32, b"\x03" * 32), signed)
    text = proof.encode()
    assert text.startswith("c2sp.org/tlog-proof@v1\nindex 73894\n" + base64.b64encode(b"\x02" * 32).decode() + "\n")
    assert note.parse_tlog_proof(text) == proof
    for bad in (
        "0\n1\n",
        "c2sp.org/tlog-proof@v1\nindex 01\n\n" + signed,
        "c2sp.org/tlog-proof@v1\nindex 1\nAAA=\n\n" + signed,
    ):
        with pytest.raises(note.NoteError):
            note.parse_tlog_proof(bad)
    for bad_text in ("a\n01\n" + base64.b64encode(b"x" * 32).decode() + "\n", "a\n1\n\n", "a\n1\nAAAA\n"):
        with pytest.raises(note.NoteError):
            note.parse_checkpoint(bad_text)
