"""The transparency log's Merkle tree: RFC 6962 hashing, C2SP tlog-tiles, inclusion and
consistency proofs. Pure: no I/O; callers hand in the hashes (tiles) they read.

- An entry (``entry_bytes``) is the receipt's log line set, computable from the receipt alone;
  its leaf hash is SHA-256(0x00 || entry), an interior node SHA-256(0x01 || left || right).
- Tiles (C2SP tlog-tiles): a level-``L`` tile holds up to 256 consecutive hashes, each the
  Merkle Tree Hash of 256**L leaves; level 0 holds leaf hashes. A partial tile of width ``W``
  is always the first ``W`` hashes of the full tile at its place, so one stored value per
  place serves every width (``tile_width``).
- ``TileHashes`` answers any Merkle Tree Hash over ``[start, end)`` of a tree of size ``n``
  from tiles; RFC 6962's inclusion and consistency proofs are built on it, and checked by
  ``verify_inclusion`` / ``verify_consistency`` (RFC 9162's verification algorithms).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from execution_proof.transparency.errors import LogError

HASH_SIZE = 32
TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT  # 256 hashes: 8,192 bytes when full
ENTRY_HEADER = "execution-proof-log-entry/v1"
MAX_ENTRY_BYTES = 0xFFFF  # an entry bundle prefixes each entry with a big-endian uint16


class ProofError(LogError, ValueError):
    """A proof, tile or bundle that does not check out (the message says which part)."""


def entry_bytes(receipt: Mapping[str, object]) -> bytes:
    """The receipt's log entry: six lines, each ending in a newline (empty for a null).

    Any mapping with the five fields: a receipt built by receipts/model.py or one read back
    (each field is written as text; this layer knows nothing else of a receipt's shape)."""
    lines = [
        ENTRY_HEADER,
        str(receipt["receipt_id"]),
        str(receipt["receipt_hash"]),
        str(receipt["project_id"]),
        str(receipt.get("prev_receipt_hash") or ""),
        str(receipt.get("chain_status") or ""),
    ]
    for line in lines:
        if "\n" in line:
            raise ValueError("a log entry field holds a newline")
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log entry's fields (the inverse of ``entry_bytes``): the one parser of the entry
    format (``entry_key`` tells an entry's kind and id without the rest)."""

    receipt_id: str
    receipt_hash: str
    project_id: str
    prev_receipt_hash: str | None
    chain_status: str | None

    @classmethod
    def parse(cls, entry: bytes) -> LogEntry:
        """``ValueError`` (a ``ProofError``) if it is not an ``execution-proof-log-entry/v1``."""
        lines = entry.decode().split("\n")
        if len(lines) != 7 or lines[6] != "" or lines[0] != ENTRY_HEADER:
            raise ProofError("not an execution-proof-log-entry/v1")
        return cls(lines[1], lines[2], lines[3], lines[4] or None, lines[5] or None)

    def to_dict(self) -> dict[str, str | None]:
        return {
            "receipt_id": self.receipt_id,
            "receipt_hash": self.receipt_hash,
            "project_id": self.project_id,
            "prev_receipt_hash": self.prev_receipt_hash,
            "chain_status": self.chain_status,
        }


DSSE_HEADER = b'{"apiVersion":"0.0.2","kind":"dsse","spec":'
"""How a Rekor v2 ``dsse`` 0.0.2 body starts (RFC 8785 sorts its three keys so): the leaf of
a receipt's attestation, right after the receipt's entry (receipts/attestation.py)."""
_RECEIPT_HEADER = ENTRY_HEADER.encode() + b"\n"


def item_entries(item: bytes) -> list[bytes]:
    """The log entries one queue item holds, in order. A receipt's item is its entry, then
    the ``dsse`` leaf of its attestation (the two are queued, counted and integrated as one:
    the leaf is always at the receipt's index + 1); any other item is one entry."""
    if item.startswith(_RECEIPT_HEADER):
        end = -1
        for _ in range(6):
            end = item.find(b"\n", end + 1)
            if end < 0:
                return [item]
        if end + 1 < len(item):
            return [item[: end + 1], item[end + 1 :]]
    return [item]


def items_of(entries: Sequence[bytes]) -> list[tuple[bytes, int]]:
    """The queue items consecutive ``entries`` hold, each with the offset of its first entry
    (the inverse of ``item_entries`` over a stretch of the log that splits no item): a
    receipt entry and the ``dsse`` leaf right after it are one item."""
    items: list[tuple[bytes, int]] = []
    offset = 0
    while offset < len(entries):
        entry = entries[offset]
        following = entries[offset + 1] if offset + 1 < len(entries) else b""
        if entry.startswith(_RECEIPT_HEADER) and following.startswith(DSSE_HEADER):
            items.append((entry + following, offset))
            offset += 2
        else:
            items.append((entry, offset))
            offset += 1
    return items


KEY_CERTIFICATE_HEADER = b"execution-proof-key-certificate/v1\n"
KEY_REVOCATION_HEADER = b"execution-proof-key-revocation/v1\n"


@dataclass(frozen=True, slots=True)
class EntryKey:
    """What the log's own bookkeeping knows of an entry, whatever its kind (fixed by its first
    bytes): ``entry_id``, the id every kind has (a receipt entry's receipt id; a key
    certificate's ``kid``; a revocation's ``kid`` and ``revoked_after``); ``project_id``, the
    project whose queue it waits in (None: the log's own queue); ``receipt_id`` when it is a
    receipt entry (its index is recorded beside the receipt)."""

    entry_id: str
    project_id: str | None
    receipt_id: str | None


def entry_key(entry: bytes) -> EntryKey | None:
    """The entry's ``EntryKey``; None for a kind whose id is not in its bytes (the ``dsse``
    leaf, which travels with its receipt's entry) or bytes of no known kind."""
    if entry.startswith(ENTRY_HEADER.encode() + b"\n"):
        lines = entry.split(b"\n", 4)
        if len(lines) < 5:
            return None
        receipt_id = lines[1].decode(errors="replace")
        return EntryKey(receipt_id, lines[3].decode(errors="replace"), receipt_id)
    for header, fields in ((KEY_CERTIFICATE_HEADER, ("kid",)), (KEY_REVOCATION_HEADER, ("kid", "revoked_after"))):
        if entry.startswith(header):
            try:
                body = json.loads(entry[len(header) :])
                return EntryKey(" ".join(str(body[name]) for name in fields), None, None)
            except (ValueError, TypeError, KeyError):
                return None
    return None


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def _largest_power_of_two_below(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def merkle_root(hashes: Sequence[bytes]) -> bytes:
    """MTH (RFC 6962's Merkle Tree Hash) over already hashed leaves."""
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    # Fold bottom-up, carrying an odd last node up unchanged: the same tree as the recursive
    # definition's split at the largest power of two.
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


# --------------------------------------------------------------------------- tiles


def index_path(index: int) -> str:
    """A tile index as tlog-tiles spells it: zero-padded 3-digit elements, all but the last
    ``x``-prefixed (1234067 is ``x001/x234/067``)."""
    parts = []
    n = index
    while True:
        parts.append(f"{n % 1000:03d}")
        n //= 1000
        if n == 0:
            break
    return "/".join(["x" + part for part in reversed(parts[1:])] + [parts[0]])


def tile_path(level: int | str, index: int, width: int = TILE_WIDTH) -> str:
    """``<L>/<N>[.p/<W>]`` as tlog-tiles spells it (``level`` "entries" for a bundle)."""
    path = f"{level}/{index_path(index)}"
    return path if width == TILE_WIDTH else f"{path}.p/{width}"


def parse_tile_index(elements: Sequence[str]) -> int:
    """The tile index of path elements ``x001``, ``x234``, ``067``; ``ValueError`` if not canonical."""
    if not elements or len(elements) > 8:
        raise ValueError("no tile index")
    value = 0
    for position, element in enumerate(elements):
        last = position == len(elements) - 1
        digits = element if last else element.removeprefix("x")
        if (not last and not element.startswith("x")) or len(digits) != 3 or not digits.isdigit():
            raise ValueError("a tile index element is three digits, x-prefixed but for the last")
        value = value * 1000 + int(digits)
    if len(elements) > 1 and elements[0] == "x000":
        raise ValueError("a tile index has no leading zero elements")
    return value


def tile_width(tree_size: int, level: int, index: int) -> int:
    """How many hashes tile ``index`` of ``level`` holds in a tree of ``tree_size`` (0: none)."""
    hashes_at_level = tree_size >> (TILE_HEIGHT * level)
    return max(0, min(TILE_WIDTH, hashes_at_level - index * TILE_WIDTH))


def split_tile(data: bytes) -> list[bytes]:
    if len(data) % HASH_SIZE:
        raise ProofError("a hash tile is a whole number of 32-byte hashes")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def bundle_entry(entry: bytes) -> bytes:
    if len(entry) > MAX_ENTRY_BYTES:
        raise ValueError("a log entry is at most 65,535 bytes")
    return len(entry).to_bytes(2, "big") + entry


def split_bundle(data: bytes) -> list[bytes]:
    """The entries of an entry bundle (big-endian uint16 length prefixes)."""
    entries = []
    at = 0
    while at < len(data):
        if at + 2 > len(data):
            raise ProofError("an entry bundle ends inside a length prefix")
        length = int.from_bytes(data[at : at + 2], "big")
        if at + 2 + length > len(data):
            raise ProofError("an entry bundle ends inside an entry")
        entries.append(data[at + 2 : at + 2 + length])
        at += 2 + length
    return entries


# --------------------------------------------------------------------------- growing the tree


@dataclass
class Extension:
    """What appending leaves to a tree changes: the new size and root, and every tile that
    changed, by (level, index), as its whole content at the new size (``len // 32`` hashes:
    a full tile, or the partial tile at that level's edge)."""

    size: int
    root: bytes
    tiles: dict[tuple[int, int], bytes]


def extend(size: int, edge: Mapping[int, Sequence[bytes]], leaves: Sequence[bytes]) -> Extension:
    """Append ``leaves`` (leaf hashes) to a tree of ``size`` whose right-edge partial tiles
    are ``edge`` (level -> the hashes of that level's last, partial tile; an absent level is
    empty). Returns the new tiles and root; ``ProofError`` when ``edge`` does not fit ``size``."""
    levels: dict[int, list[bytes]] = {}
    for level in range(_levels(size)):
        want = tile_width(size, level, (size >> (TILE_HEIGHT * level)) // TILE_WIDTH)
        have = list(edge.get(level, ()))
        if want == TILE_WIDTH:
            want = 0  # a tile exactly full at the edge is complete: the next one starts empty
        if len(have) != want:
            raise ProofError(f"the level-{level} edge tile holds {len(have)} hashes, the tree needs {want}")
        levels[level] = have
    changed: dict[tuple[int, int], bytes] = {}
    grown: set[int] = set()

    def add(level: int, value: bytes, position: int) -> None:
        row = levels.setdefault(level, [])
        row.append(value)
        grown.add(level)
        if len(row) == TILE_WIDTH:
            index = position // TILE_WIDTH
            changed[(level, index)] = b"".join(row)
            add(level + 1, merkle_root(row), index)
            levels[level] = []
            grown.discard(level)

    for offset, value in enumerate(leaves):
        add(0, value, size + offset)
    new_size = size + len(leaves)
    for level in grown:
        index = (new_size >> (TILE_HEIGHT * level)) // TILE_WIDTH
        changed[(level, index)] = b"".join(levels[level])
    edge_after = {level: row for level, row in levels.items() if row}
    return Extension(new_size, root_from_edge(new_size, edge_after), changed)


def bundles_after(size: int, tail: list[bytes], entries: list[bytes]) -> dict[int, tuple[bytes, int]]:
    """Every entry bundle the entries after ``size`` change: index -> (bytes, entry count).
    ``tail``: the entries of the tree's partial bundle (they start the first one)."""
    out: dict[int, tuple[bytes, int]] = {}
    current = list(tail)
    index = size // TILE_WIDTH
    for entry in entries:
        current.append(entry)
        if len(current) == TILE_WIDTH:
            out[index] = (b"".join(bundle_entry(e) for e in current), TILE_WIDTH)
            index, current = index + 1, []
    if current:
        out[index] = (b"".join(bundle_entry(e) for e in current), len(current))
    return out


def edge_after(size: int, before: dict[int, list[bytes]], extension: Extension) -> dict[int, list[bytes]]:
    """The edge tiles of the tree of ``size`` after ``extension``: changed tiles at the edge
    from the extension, unchanged ones from ``before``."""
    edge: dict[int, list[bytes]] = {}
    for level, index, width in edge_tiles(size):
        data = extension.tiles.get((level, index))
        edge[level] = split_tile(data) if data is not None else before[level][:width]
    return edge


def _levels(size: int) -> int:
    """Levels holding at least one hash in a tree of ``size``."""
    count = 0
    while size >> (TILE_HEIGHT * count):
        count += 1
    return count


def root_from_edge(size: int, edge: Mapping[int, Sequence[bytes]]) -> bytes:
    """The root of a tree of ``size`` from its right-edge partial tiles: every perfect subtree
    of the tree's binary decomposition is the MTH of a run of one level's edge hashes."""
    roots: list[bytes] = []
    for level in reversed(range(_levels(size))):
        row = list(edge.get(level, ()))
        at = 0
        width = len(row)
        for bit in reversed(range(TILE_HEIGHT)):
            if width & (1 << bit):
                roots.append(merkle_root(row[at : at + (1 << bit)]))
                at += 1 << bit
    if not roots:
        return EMPTY_ROOT
    root = roots[-1]
    for value in reversed(roots[:-1]):
        root = node_hash(value, root)
    return root


def edge_tiles(size: int) -> list[tuple[int, int, int]]:
    """(level, index, width) of the partial tile at each level's right edge of a tree of
    ``size``: what ``extend`` needs read (levels whose edge tile is empty are left out)."""
    out = []
    for level in range(_levels(size)):
        hashes_at_level = size >> (TILE_HEIGHT * level)
        width = hashes_at_level % TILE_WIDTH
        if width:
            out.append((level, hashes_at_level // TILE_WIDTH, width))
    return out


# --------------------------------------------------------------------------- proofs from tiles

TileRead = Callable[[int, int, int], bytes]
"""(level, index, width) -> at least the first ``width`` hashes of that tile, as bytes."""


def tiles_needed(size: int, fn: Callable[[TileHashes], Any]) -> list[tuple[int, int, int]]:
    """The tiles (level, index, width) that ``fn`` reads from the tree of ``size``, in the
    order it first reads them. Found by running ``fn`` on zero hashes: which tiles a Merkle
    computation (a root, an inclusion or consistency proof) reads depends on the tree's size
    and the indices asked for, never on the hashes, so a caller can fetch every tile at once
    and then compute (``receipts.tiles.TileReader``)."""
    seen: dict[tuple[int, int, int], None] = {}

    def record(level: int, index: int, width: int) -> bytes:
        seen[(level, index, width)] = None
        return bytes(width * HASH_SIZE)

    fn(TileHashes(size, record))
    return list(seen)


class TileHashes:
    """Merkle Tree Hashes of a tree of ``size`` read from its tiles (``read``), memoised."""

    def __init__(self, size: int, read: TileRead) -> None:
        self.size = size
        self.read = read
        self._tiles: dict[tuple[int, int], list[bytes]] = {}

    def needed(self, level: int, index: int) -> tuple[int, int, int]:
        return level, index, tile_width(self.size, level, index)

    def _tile(self, level: int, index: int) -> list[bytes]:
        key = (level, index)
        if key not in self._tiles:
            width = tile_width(self.size, level, index)
            if width == 0:
                raise ProofError(f"tile {level}/{index} is empty in a tree of size {self.size}")
            hashes = split_tile(self.read(level, index, width))
            if len(hashes) < width:
                raise ProofError(f"tile {tile_path(level, index, width)} holds {len(hashes)} hashes")
            self._tiles[key] = hashes[:width]
        return self._tiles[key]

    def stored(self, level: int, position: int) -> bytes:
        """The hash at ``position`` of tile level ``level`` (MTH of 256**level leaves)."""
        return self._tile(level, position // TILE_WIDTH)[position % TILE_WIDTH]

    def mth(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for 0 <= start < end <= size."""
        if not 0 <= start < end <= self.size:
            raise ProofError(f"no range [{start}, {end}) in a tree of size {self.size}")
        count = end - start
        if count & (count - 1) == 0 and start % count == 0:  # a perfect, aligned subtree
            height = count.bit_length() - 1
            level, rest = divmod(height, TILE_HEIGHT)
            first = start >> (TILE_HEIGHT * level)
            return merkle_root([self.stored(level, first + i) for i in range(1 << rest)])
        split = _largest_power_of_two_below(count)
        return node_hash(self.mth(start, start + split), self.mth(start + split, end))

    def root(self) -> bytes:
        return self.mth(0, self.size) if self.size else EMPTY_ROOT

    def inclusion_proof(self, index: int) -> list[bytes]:
        """RFC 6962's PATH(index, D[0:size]): the inclusion proof, leaf sibling first."""
        if not 0 <= index < self.size:
            raise ProofError(f"index {index} is not in a tree of size {self.size}")
        path: list[bytes] = []
        start, end = 0, self.size
        while end - start > 1:
            split = _largest_power_of_two_below(end - start)
            if index < start + split:
                path.append(self.mth(start + split, end))
                end = start + split
            else:
                path.append(self.mth(start, start + split))
                start += split
        path.reverse()
        return path

    def consistency_proof(self, old_size: int) -> list[bytes]:
        """RFC 6962's PROOF(old_size, D[0:size]): the consistency proof."""
        if not 0 < old_size <= self.size:
            raise ProofError(f"no consistency proof from size {old_size} to {self.size}")
        if old_size == self.size:
            return []
        proof: list[bytes] = []

        def subproof(m: int, start: int, end: int, complete: bool) -> None:
            n = end - start
            if m == n:
                if not complete:
                    proof.append(self.mth(start, end))
                return
            k = _largest_power_of_two_below(n)
            if m <= k:
                subproof(m, start, start + k, complete)
                proof.append(self.mth(start + k, end))
            else:
                subproof(m - k, start + k, end, False)
                proof.append(self.mth(start, start + k))

        subproof(old_size, 0, self.size, True)
        return proof


# --------------------------------------------------------------------------- checking proofs


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """RFC 9162's inclusion proof check; raises ``ProofError`` unless ``leaf`` is at ``index`` of the
    tree of ``size`` with ``root``."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is outside a tree of size {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the tree is deep")
    if r != root:
        raise ProofError("the inclusion proof does not lead to the checkpoint's root")


def verify_consistency(old_size: int, old_root: bytes, new_size: int, new_root: bytes, proof: Sequence[bytes]) -> None:
    """RFC 9162's consistency proof check; raises ``ProofError`` unless the tree of ``new_size`` and
    ``new_root`` extends the tree of ``old_size`` and ``old_root``."""
    if old_size > new_size:
        raise ProofError("the old tree is larger than the new one")
    if old_size == new_size:
        if proof:
            raise ProofError("a proof between equal sizes is empty")
        if old_root != new_root:
            raise ProofError("two different roots for the same tree size")
        return
    if old_size == 0:
        if proof:
            raise ProofError("a proof from the empty tree is empty")
        return
    if not proof:
        raise ProofError("the consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the consistency proof is too short")
    if fr != old_root:
        raise ProofError("the consistency proof does not lead to the old root")
    if sr != new_root:
        raise ProofError("the consistency proof does not lead to the new root")


def leaf_hashes(entries: Iterable[bytes]) -> list[bytes]:
    return [leaf_hash(entry) for entry in entries]
