"""What a log monitor checks, pure (the I/O, the fetching and the state on disk are
cli/monitor.py, cli/monitor_fetch.py and cli/monitor_state.py).

The tree. The monitor recomputes the log's Merkle tree from the entries it reads, in one pass,
linear in the log. It keeps a ``Frontier``: for each tile level, the hashes it computed of
that level's last, incomplete tile (at most 255 per level, a few KiB in all; the compact
range of the tree's right edge follows from them, and so does the root). For each new entry
bundle (``Frontier.check_bundle``): every entry's leaf hash must be the level-0 tile's hash at
its place (else ``entry``); a level-``k`` tile that the new hashes complete is hashed into a
level ``k+1`` hash and must equal, hash for hash, the full tile the log serves (else
``tile``). At the checkpoint's size the partial tiles at the right edge must equal the hashes
kept (``check_edge``), and the root of the frontier must be the checkpoint's root (else
``inconsistent``). A later checkpoint is consistent with an earlier one iff extending the
kept frontier with the new entries gives its root: the monitor's own hashes decide, no proof
from the log is needed.

The chains (``check_chains``), per project, in log order, for ``main`` entries with a
previous hash: one whose previous hash another main entry of the project already followed is
a ``chain_fork`` (two main receipts follow the same receipt); one that follows anything else
but the project's tip is a ``chain_split``. A project's first main entry, or one whose
previous hash is null (history that expired, or a new start), may start anywhere. Memory holds
two hashes per project (the tip and the last previous hash, which decide every honest entry);
the previous hashes used before are asked of ``UsedPrevs`` only for an entry that does not
follow the tip, which an honest log never has.

The entries (``entry_kind``). An entry's kind is fixed by its first bytes, one row of
``ENTRY_KINDS`` each: a receipt entry (``execution-proof-log-entry/v1``), a key certificate, a
key revocation, the ``dsse`` leaf of a receipt's attestation (``{``). Receipt entries feed the
chain rules (receipt ids are counted over them alone); the other kinds go to the
``EntryReader`` given (receipts/key_entries.py reads each strictly, and judges key entries
against pinned roots: this layer knows nothing of certificates or attestations); an entry of
any other kind is an ``entry`` violation.

The pairs. Every receipt entry is followed by the ``dsse`` leaf of its attestation, and every
``dsse`` leaf follows a receipt entry (the two are queued and integrated as one, so no
checkpoint ends between them): anything else is an ``entry`` violation. The pair may straddle
two bundles or two passes, so ``check_chains`` is given the kind of the entry before its first
(``Frontier.kind_before``); after a restart at a bundle's edge it is unknown, and the first
entry's pairing with it is not judged.

The log. A monitor's state follows one log, recorded (origin and key) when a checkpoint
first verifies (``open_followed``). A key or a checkpoint of another origin is never a
violation but ``WrongLog`` (a configuration error naming both), as is, before a log is
recorded, a checkpoint the key given did not sign (a wrong key must not leave a violation
behind); once it is recorded, a checkpoint of its origin not signed by its key is a
``signature`` violation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NotRequired, Protocol, TypedDict

from execution_proof.transparency import note, tlog
from execution_proof.transparency.errors import LogError

HASH = tlog.HASH_SIZE
WIDTH = tlog.TILE_WIDTH
HEIGHT = tlog.TILE_HEIGHT
_ENTRY_HEADER = tlog.ENTRY_HEADER


@dataclass(frozen=True, slots=True)
class EntryKind:
    """A kind of log entry: its ``name`` in reports and the first bytes that fix it."""

    name: str
    header: bytes


RECEIPT_ENTRY = EntryKind("receipt entry", _ENTRY_HEADER.encode() + b"\n")
KEY_CERTIFICATE_ENTRY = EntryKind("key certificate entry", tlog.KEY_CERTIFICATE_HEADER)
KEY_REVOCATION_ENTRY = EntryKind("key revocation entry", tlog.KEY_REVOCATION_HEADER)
DSSE_LEAF = EntryKind("dsse leaf", b"{")
"""The RFC 8785 bytes of a Rekor v2 ``dsse`` 0.0.2 body of a receipt's attestation, right
after the receipt's entry (its reader: receipts/key_entries.py, ``read_dsse_leaf``)."""
ENTRY_KINDS = (RECEIPT_ENTRY, KEY_CERTIFICATE_ENTRY, KEY_REVOCATION_ENTRY, DSSE_LEAF)
"""Every kind the monitor knows: a new kind is a row here (and its reader)."""


def entry_kind(entry: bytes) -> EntryKind | None:
    """The kind ``entry``'s first bytes fix; None for bytes of no known kind (an ``entry``
    violation). Only the first bytes are looked at: whether the rest is well formed is the
    kind's reader's to say."""
    for kind in ENTRY_KINDS:
        if entry.startswith(kind.header):
            return kind
    return None


_NO_KIND = EntryKind("an entry of no known kind", b"")
"""What ``ChainCheck.last`` holds after an entry of no known kind (never matched: not a row
of ``ENTRY_KINDS``)."""


class ViolationJSON(TypedDict):
    """A violation as the monitor reports and records it (a None member is left out)."""

    kind: str
    detail: str
    index: NotRequired[int]
    project_id: NotRequired[str]
    kid: NotRequired[str]
    root_kid: NotRequired[str]


@dataclass
class Violation:
    kind: str
    """``signature``, ``inconsistent``, ``tile``, ``entry``, ``chain_fork``, ``chain_split``,
    or of a key entry judged against pinned roots (receipts/key_entries.py): ``unknown_root``,
    ``bad_certificate``, ``bad_revocation``. Evidence only (a checkpoint below a witness quorum
    is not one; older monitors recorded it as ``quorum``, which cli/monitor_state.py clears)."""
    detail: str
    index: int | None = None
    project_id: str | None = None
    kid: str | None = None
    """The key a key entry's violation is about."""
    root_kid: str | None = None
    """The root that key entry names."""

    def json(self) -> ViolationJSON:
        found: ViolationJSON = {"kind": self.kind, "detail": self.detail}
        if self.index is not None:
            found["index"] = self.index
        if self.project_id is not None:
            found["project_id"] = self.project_id
        if self.kid is not None:
            found["kid"] = self.kid
        if self.root_kid is not None:
            found["root_kid"] = self.root_kid
        return found


class WrongLog(LogError):
    """The key given, the log served and the state are not one log's: a configuration error
    (the monitor exits 2, also when following: no retry mends it), never a violation."""


def check_followed(followed: note.Verifier | None, older_origin: str | None, key: note.Verifier, where: str) -> None:
    """The key given against the log a state (``where``) follows: ``WrongLog``, naming both,
    when it records another log, or another key for its origin, or (``older_origin``: an older
    monitor recorded the origin only) progress on another origin."""
    if followed is not None and followed.name != key.name:
        raise WrongLog(
            f"{where} follows the log {followed.name!r}; the key given is of the log {key.name!r}: "
            "give each log its own --state directory"
        )
    if followed is not None and followed != key:
        raise WrongLog(
            f"{where} follows the log {followed.name!r} with the key {followed.encode()}; the key given is "
            f"{key.encode()}: a log keeps its key (to follow one that changed it, use a new --state directory)"
        )
    if followed is None and older_origin is not None and older_origin != key.name:
        raise WrongLog(
            f"{where} holds progress on the log {older_origin!r}; the key given is of the log {key.name!r}: "
            "give each log its own --state directory"
        )


def open_followed(text: str, key: note.Verifier, *, followed: bool, url: str) -> note.Checkpoint | Violation:
    """The checkpoint ``text`` (served at ``url``) verified against ``key``, the key of the log
    the state follows (``followed``: recorded) or is given. Not a signed checkpoint:
    ``note.NoteError``. Of another origin, or, before a log is recorded, not signed by ``key``:
    ``WrongLog``. Of the recorded log's origin, not signed by its key: a ``signature``
    violation."""
    claimed = note.parse_checkpoint(note.parse_note(text).text)
    if claimed.origin != key.name:
        whose = "this state directory follows" if followed else "the key given is of"
        raise WrongLog(
            f"{url} is of the log {claimed.origin!r}; {whose} the log {key.name!r}: "
            "check the URL and the key, and give each log its own --state directory"
        )
    try:
        checkpoint, _ = note.open_checkpoint(text, key)
    except note.NoteError as exc:
        if not followed:
            raise WrongLog(
                f"{url}: the checkpoint of {claimed.origin!r} is not signed by the key given ({exc}): "
                f"check --log-key or --log-policy ({key.encode()}); nothing was recorded"
            ) from exc
        return Violation(
            "signature", f"the checkpoint of size {claimed.size} is not signed by the log's key {key.encode()}: {exc}"
        )
    return checkpoint


def tile_name(level: int | str, index: int, width: int = WIDTH) -> str:
    return "tile/" + tlog.tile_path(level, index, width)


def completed_tiles(index: int) -> list[tuple[int, int]]:
    """(level, tile index) of the tiles above level 0 that a full level-0 tile ``index``
    completes: level ``k`` tile ``(index + 1) / 256**k - 1`` when ``256**k`` divides ``index + 1``."""
    out = []
    level, span = 1, WIDTH
    while (index + 1) % span == 0:
        out.append((level, (index + 1) // span - 1))
        level, span = level + 1, span * WIDTH
    return out


def subtree_root(hashes: list[bytes]) -> bytes:
    """The Merkle Tree Hash of a full tile's 256 hashes (a power of two: pairs all the way
    up); tlog.merkle_root's result, without its function call per node."""
    sha = hashlib.sha256
    while len(hashes) > 1:
        hashes = [sha(b"\x01" + hashes[i] + hashes[i + 1]).digest() for i in range(0, len(hashes), 2)]
    return hashes[0]


def split_bundle(data: bytes) -> list[bytes]:
    """tlog.split_bundle, faster (the monitor splits every bundle of the log)."""
    entries: list[bytes] = []
    append = entries.append
    at, end = 0, len(data)
    while at < end:
        if at + 2 > end:
            raise tlog.ProofError("an entry bundle ends inside a length prefix")
        stop = at + 2 + (data[at] << 8 | data[at + 1])
        if stop > end:
            raise tlog.ProofError("an entry bundle ends inside an entry")
        append(data[at + 2 : stop])
        at = stop
    return entries


@dataclass
class Frontier:
    """The hashes the monitor computed for the tree of ``size``: ``rows[k]`` holds the
    level-``k`` hashes of the last, incomplete level-``k`` tile (``(size >> 8k) % 256`` of
    them)."""

    size: int = 0
    rows: list[list[bytes]] = field(default_factory=list)
    verified: int = 0
    """Entries a checkpoint's root has confirmed: a served hash over any of them that differs
    from the monitor's is history rewritten (``inconsistent``), not just a bad ``tile``."""
    last: EntryKind | None = None
    """The kind of the entry at ``size - 1`` as this run read it (``ChainCheck.last``; None:
    not read in this run, as after a restart: ``kind_before``)."""

    def _kind(self, first_entry: int) -> str:
        return "inconsistent" if first_entry < self.verified else "tile"

    def row(self, level: int) -> list[bytes]:
        while len(self.rows) <= level:
            self.rows.append([])
        return self.rows[level]

    def root(self) -> bytes:
        return tlog.root_from_edge(self.size, {level: row for level, row in enumerate(self.rows) if row})

    def encode(self) -> bytes:
        """One byte per level (its row's length), then the row's hashes."""
        return b"".join(bytes([len(row)]) + b"".join(row) for row in self.rows)

    @classmethod
    def decode(cls, size: int, data: bytes) -> Frontier:
        """``ValueError`` when ``data`` is not a frontier of a tree of ``size``."""
        rows: list[list[bytes]] = []
        at = 0
        while at < len(data):
            count = data[at]
            at += 1
            rows.append([data[at + i * HASH : at + (i + 1) * HASH] for i in range(count)])
            at += count * HASH
        frontier = cls(size, rows)
        for level, row in enumerate(rows):
            if len(row) != (size >> (HEIGHT * level)) % WIDTH or any(len(h) != HASH for h in row):
                raise ValueError(f"the saved frontier's level {level} does not fit a tree of size {size}")
        if size >> (HEIGHT * len(rows)):
            raise ValueError(f"the saved frontier has too few levels for a tree of size {size}")
        return frontier

    def copy(self) -> Frontier:
        return Frontier(self.size, [list(row) for row in self.rows], self.verified, self.last)

    def kind_before(self, entries: Sequence[bytes]) -> EntryKind | None:
        """The kind of the entry at ``size - 1`` (what the pairing of its first new entry
        needs): ``last`` when this run read it, else from ``entries`` (the bundle of the
        level-0 tile the size ends in, served again) when that entry hashes to the leaf
        kept. None when it is unknown: a restart at a bundle's edge (or at size 0, where no
        entry precedes: ``check_chains`` knows that by the index)."""
        if self.last is not None:
            return self.last
        row = self.rows[0] if self.rows else []
        if not row or len(entries) < len(row) or tlog.leaf_hash(entries[len(row) - 1]) != row[-1]:
            return None
        return entry_kind(entries[len(row) - 1]) or _NO_KIND

    def check_bundle(
        self, index: int, width: int, tile0: bytes, entries: Sequence[bytes], upper: Mapping[tuple[int, int], bytes]
    ) -> Violation | None:
        """Extend the frontier with level-0 tile ``index`` of ``width`` hashes (``tile0``, its
        bytes; ``entries``, its bundle's first ``width`` entries); ``upper`` holds the full
        tiles this one completes (``completed_tiles``). On a mismatch the frontier is left
        as it was and the violation returned."""
        row = self.row(0)
        have = len(row)
        if index * WIDTH + have != self.size or not have < width <= WIDTH:
            raise ValueError(f"tile {index} of width {width} does not extend a tree of size {self.size}")
        name = tile_name(0, index, width)
        if len(tile0) != width * HASH:
            return Violation("tile", f"{name} holds {len(tile0)} bytes, not {width * HASH}", index * WIDTH)
        if len(entries) != width:
            return Violation(
                "tile", f"{tile_name('entries', index, width)} holds {len(entries)} entries, not {width}", index * WIDTH
            )
        if tile0[: have * HASH] != b"".join(row):
            at = next(i for i in range(have) if tile0[i * HASH : (i + 1) * HASH] != row[i])
            return Violation(
                self._kind(index * WIDTH + at),
                f"{name} rewrote hash {at}, which the monitor had checked: it is "
                f"{tile0[at * HASH : (at + 1) * HASH].hex()}, the entries hash to {row[at].hex()}",
                index * WIDTH + at,
            )
        sha = hashlib.sha256
        leaves = [sha(b"\x00" + entry).digest() for entry in entries[have:]]
        if b"".join(leaves) != tile0[have * HASH :]:
            at = next(i for i, leaf in enumerate(leaves) if leaf != tile0[(have + i) * HASH : (have + i + 1) * HASH])
            position = index * WIDTH + have + at
            return Violation(
                "entry",
                f"entry {position} (hash {have + at} of {name}) does not hash to its leaf in the tile: "
                f"the tile has {tile0[(have + at) * HASH : (have + at + 1) * HASH].hex()}, "
                f"the entry hashes to {leaves[at].hex()}",
                position,
            )
        if width < WIDTH:
            row.extend(leaves)
            self.size += len(leaves)
            return None
        saved = self.copy()
        row.extend(leaves)
        violation = self._carry((index + 1) * WIDTH, upper)
        if violation is not None:
            self.size, self.rows = saved.size, saved.rows
            return violation
        self.size += len(leaves)
        return None

    def _carry(self, size: int, upper: Mapping[tuple[int, int], bytes]) -> Violation | None:
        """Hash each complete row of the tree of ``size`` into the level above, checking each
        one above level 0 against the tile served for it."""
        level = 0
        while len(self.rows[level]) == WIDTH:
            full = self.rows[level]
            if level:
                index = (size >> (HEIGHT * level)) // WIDTH - 1
                served = upper.get((level, index))
                name = tile_name(level, index)
                if served is None:
                    raise ValueError(f"{name} was not fetched")
                mismatch = self._mismatch(level, index, WIDTH, served, full)
                if mismatch is not None:
                    return mismatch
            self.rows[level] = []
            self.row(level + 1).append(subtree_root(full))
            level += 1
        return None

    def _mismatch(self, level: int, index: int, width: int, data: bytes, mine: list[bytes]) -> Violation | None:
        """The served tile ``data`` against the hashes the monitor computed for it: None when
        they are the same, else the first hash that differs (or the wrong length)."""
        if data == b"".join(mine):
            return None
        name = tile_name(level, index, width)
        if len(data) != width * HASH:
            return Violation("tile", f"{name} holds {len(data)} bytes, not {width * HASH}")
        at = next(i for i in range(width) if data[i * HASH : (i + 1) * HASH] != mine[i])
        first = (index * WIDTH + at) << (HEIGHT * level)
        return Violation(
            self._kind(first),
            f"hash {at} of {name} is {data[at * HASH : (at + 1) * HASH].hex()}; the entries from {first} "
            f"hash to {mine[at].hex()}",
            first,
        )

    def edge(self) -> list[tuple[int, int, int]]:
        """(level, index, width) of the partial tiles at the right edge: what ``check_edge`` needs."""
        return tlog.edge_tiles(self.size)

    def check_edge(self, served: Mapping[tuple[int, int, int], bytes], root: bytes) -> Violation | None:
        """At a checkpoint's size: the partial edge tiles served (``edge``) must hold the
        hashes kept, and the frontier's root must be the checkpoint's ``root``."""
        for level, index, width in self.edge():
            mismatch = self._mismatch(level, index, width, served[(level, index, width)], self.rows[level])
            if mismatch is not None:
                return mismatch
        mine = self.root()
        if mine != root:
            return Violation(
                "inconsistent",
                f"the checkpoint of size {self.size} has root {root.hex()}; the entries the monitor read "
                f"(consistent with every checkpoint it saw before) hash to {mine.hex()}",
            )
        return None


class UsedPrevs(Protocol):
    """Every (project, previous hash) a main entry used so far (cli/monitor_state.py keeps
    them on disk)."""

    def add(self, project_id: str, prev: str) -> None: ...

    def seen(self, project_id: str, prev: str) -> bool: ...


class MemoryPrevs:
    """``UsedPrevs`` in memory (tests, and a monitor with nothing to keep)."""

    def __init__(self) -> None:
        self._used: set[tuple[str, str]] = set()

    def add(self, project_id: str, prev: str) -> None:
        self._used.add((project_id, prev))

    def seen(self, project_id: str, prev: str) -> bool:
        return (project_id, prev) in self._used


@dataclass(slots=True)
class Project:
    """A project's main chain so far: its tip and the previous hash of its last main entry."""

    tip: str
    last_prev: str | None


class EntryReader(Protocol):
    """What reads the entries of the kinds other than receipt entries (receipts/key_entries.py)."""

    def read(self, index: int, kind: EntryKind, entry: bytes) -> list[Violation]:
        """The violations ``entry`` (of ``kind``, at ``index``) shows."""
        ...


@dataclass
class ChainCheck:
    violations: list[Violation]
    changed: dict[str, Project]
    """The projects whose chain moved, as they are after the entries."""
    last: EntryKind | None = None
    """The kind of the last entry (``before`` when there were none): the next call's
    ``before``."""


def _a(kind: EntryKind) -> str:
    return kind.name if kind is _NO_KIND else f"a {kind.name}"


def _unpaired(index: int, previous: EntryKind | None, kind: EntryKind) -> Violation | None:
    """The pairing rule (module docstring) for the entry at ``index`` of ``kind`` after one
    of kind ``previous`` (None: unknown, not judged; at index 0 nothing precedes)."""
    if kind is DSSE_LEAF and previous is not RECEIPT_ENTRY and (previous is not None or index == 0):
        where = f"follows {_a(previous)}" if previous is not None else "is the log's first entry"
        return Violation("entry", f"a dsse leaf {where}, not the entry of its receipt", index)
    if previous is RECEIPT_ENTRY and kind is not DSSE_LEAF:
        return Violation(
            "entry",
            f"receipt entry {index - 1} is followed by {_a(kind)}, not by the dsse leaf of its attestation",
            index - 1,
        )
    return None


def check_chains(
    first_index: int,
    entries: Sequence[bytes],
    projects: Mapping[str, Project],
    used: UsedPrevs,
    others: EntryReader | None = None,
    *,
    before: EntryKind | None = None,
    ends: bool = False,
) -> ChainCheck:
    """The chain rules (module docstring) over the receipt entries of ``entries`` (indices
    ``first_index``...), against ``projects`` as they were before them (not modified: the
    result says what changed). ``used`` learns each previous hash as it passes. An entry of
    another known kind goes to ``others`` (None: it is left unread); one of no known kind,
    or a malformed receipt entry, is an ``entry`` violation. The pairs (module docstring):
    ``before`` is the kind of the entry at ``first_index - 1`` (None: unknown); ``ends``,
    that ``entries`` end at a checkpoint's size (a receipt entry last has no leaf)."""
    violations: list[Violation] = []
    changed: dict[str, Project] = {}
    previous = before
    for offset, entry in enumerate(entries):
        index = first_index + offset
        kind = entry_kind(entry) or _NO_KIND
        if (previous is RECEIPT_ENTRY) is not (kind is DSSE_LEAF):  # an honest log: both or neither
            unpaired = _unpaired(index, previous, kind)
            if unpaired is not None:
                violations.append(unpaired)
        previous = kind
        if kind is _NO_KIND:
            violations.append(Violation("entry", "an entry of no kind this monitor knows", index))
            continue
        if kind is not RECEIPT_ENTRY:
            if others is not None:
                violations += others.read(index, kind, entry)
            continue
        try:
            lines = entry.decode().split("\n")
        except UnicodeDecodeError as exc:
            violations.append(Violation("entry", f"not a log entry: {exc}", index))
            continue
        if len(lines) != 7 or lines[6] or lines[0] != _ENTRY_HEADER:
            violations.append(Violation("entry", "not an execution-proof-log-entry/v1", index))
            continue
        if lines[5] != "main":
            continue
        project_id, receipt_hash, prev = lines[3], lines[2], lines[4]
        known = changed.get(project_id) or projects.get(project_id)
        if prev and known is not None and prev != known.tip:
            if prev == known.last_prev or used.seen(project_id, prev):
                violations.append(
                    Violation("chain_fork", f"a second main receipt ({lines[1]}) follows {prev}", index, project_id)
                )
            else:
                violations.append(
                    Violation(
                        "chain_split",
                        f"main receipt {lines[1]} follows {prev}, not the project's tip {known.tip}",
                        index,
                        project_id,
                    )
                )
        if prev:
            used.add(project_id, prev)
        changed[project_id] = Project(receipt_hash, prev or None)
    if ends and previous is RECEIPT_ENTRY and entries:
        violations.append(
            Violation(
                "entry",
                f"receipt entry {first_index + len(entries) - 1} ends the checkpoint: the dsse leaf of its "
                "attestation is not after it",
                first_index + len(entries) - 1,
            )
        )
    return ChainCheck(violations, changed, previous)
