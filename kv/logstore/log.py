"""The log store's typed interface (docs/log.md, "Where the log lives"): what the integrator,
the routes and the operator commands read and write, on any backend (kv/logstore/objects.py).

Public, laid out as C2SP tlog-tiles names them: ``checkpoint``, ``tile/<L>/<N>[.p/<W>]``,
``tile/entries/<N>[.p/<W>]``. Full tiles and bundles are created once and never change
(writing one that exists compares it instead); a partial one is deleted once its full tile
exists, as tlog-tiles allows. Private, under ``.state/`` (Tessera's convention):

- ``identity``: the log's origin and verifier key, written once, when the store is created;
- ``tree``: the last signed tree state (size, root), advanced only by compare-and-swap,
  after every tile and bundle it covers is durable;
- ``staging/<size>``: a batch being added to the tree of that size, written (create-only)
  before any of its tiles, so whoever finishes it writes the same bytes;
- ``lease``: which integrator is active, until when;
- ``halt`` (present while the log is halted) and ``resumed/<ms>`` (each ``log resume``);
- ``witnesses``: the size each witness last cosigned;
- ``timestamps/<size, 7 groups of 3 digits>``: a checkpoint's RFC 3161 time-stamps, and
  ``stamped``: the newest size stamped.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

import orjson

from execution_proof.kv.logstore.objects import LogStoreError, ObjectStore
from execution_proof.receipts import note, tlog
from execution_proof.receipts.tiles import tile_name

CHECKPOINT = "checkpoint"
IDENTITY = ".state/identity"
TREE = ".state/tree"
LEASE = ".state/lease"
HALT = ".state/halt"
RESUMED = ".state/resumed/"
WITNESSES = ".state/witnesses"
STAGING = ".state/staging/"
TIMESTAMPS = ".state/timestamps/"
STAMPED = ".state/stamped"
STATE = ".state/"


class LogStoreConflict(LogStoreError):
    """The store holds something other than what the log computed for the same place: a full
    tile with other bytes, another log's identity. Never overwritten; the log stops."""


@dataclass(frozen=True)
class Identity:
    origin: str
    vkey: str
    """The log's verifier key (signed-note form): its name is the origin."""

    def encode(self) -> bytes:
        return orjson.dumps({"origin": self.origin, "vkey": self.vkey}, option=orjson.OPT_INDENT_2)

    @classmethod
    def decode(cls, data: bytes) -> Identity:
        fields = orjson.loads(data)
        return cls(str(fields["origin"]), str(fields["vkey"]))


@dataclass(frozen=True)
class TreeState:
    size: int
    root: bytes
    newest_ms: int = 0
    """The creation time (Unix ms) of the newest receipt in the tree: a queued entry created
    later cannot already be in it (kv/store_log.py, reconciling after a Redis restore)."""
    version: str = ""

    def encode(self) -> bytes:
        return orjson.dumps(
            {"size": self.size, "root": base64.b64encode(self.root).decode(), "newest_ms": self.newest_ms}
        )

    @classmethod
    def decode(cls, data: bytes, version: str) -> TreeState:
        fields = orjson.loads(data)
        return cls(int(fields["size"]), base64.b64decode(fields["root"]), int(fields.get("newest_ms", 0)), version)


@dataclass(frozen=True)
class Batch:
    """Entries being added to the tree of ``size`` (staged before any tile is written)."""

    size: int
    root: bytes
    new_size: int
    new_root: bytes
    newest_ms: int
    entries: list[bytes]

    def encode(self) -> bytes:
        header = {
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "new_size": self.new_size,
            "new_root": base64.b64encode(self.new_root).decode(),
            "newest_ms": self.newest_ms,
        }
        return orjson.dumps(header) + b"\n" + b"".join(tlog.bundle_entry(entry) for entry in self.entries)

    @classmethod
    def decode(cls, data: bytes) -> Batch:
        head, _, body = data.partition(b"\n")
        fields = orjson.loads(head)
        return cls(
            int(fields["size"]),
            base64.b64decode(fields["root"]),
            int(fields["new_size"]),
            base64.b64decode(fields["new_root"]),
            int(fields["newest_ms"]),
            tlog.split_bundle(body),
        )


def size_name(prefix: str, size: int) -> str:
    """``prefix`` + the size as 21 zero-padded digits in 7 groups of 3 (``000/…/067``):
    names sort as the sizes do, and no directory holds more than 1,000 entries."""
    digits = f"{size:021d}"
    return prefix + "/".join(digits[i : i + 3] for i in range(0, 21, 3))


def _size_of(name: str, prefix: str) -> int:
    return int(name.removeprefix(prefix).replace("/", ""))


def _note_parts(signed: bytes) -> tuple[bytes, list[bytes]]:
    """A signed note's text and its signature lines (without their newlines)."""
    text, _, signatures = signed.partition(b"\n\n")
    return text, [line for line in signatures.split(b"\n") if line]


def checkpoint_size(text: bytes) -> int:
    """The tree size of a signed checkpoint as stored; ``note.NoteError`` if it is none."""
    return note.parse_checkpoint(note.parse_note(text).text).size


class LogStore:
    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    @property
    def url(self) -> str:
        return self.objects.url

    async def close(self) -> None:
        await self.objects.close()

    async def _read(self, name: str) -> bytes | None:
        blob = await self.objects.read(name)
        return None if blob is None else blob.data

    # -- identity and creation

    async def identity(self) -> Identity | None:
        data = await self._read(IDENTITY)
        return None if data is None else Identity.decode(data)

    async def is_empty(self) -> bool:
        """No identity, no tree state, no checkpoint, no tile: nothing of any log."""
        for name in (IDENTITY, TREE, CHECKPOINT):
            if await self.objects.read(name) is not None:
                return False
        return not await self.objects.names("tile/", limit=1)

    async def create_log(self, identity: Identity, checkpoint: bytes) -> bool:
        """Make this store a new, empty log: identity, tree state of size 0, the size-0
        checkpoint published. False when another process created it first."""
        if not await self.objects.create(IDENTITY, identity.encode()):
            return False
        await self.objects.create(TREE, TreeState(0, tlog.EMPTY_ROOT).encode())
        await self.objects.write(CHECKPOINT, checkpoint)
        return True

    # -- the tree state

    async def tree(self) -> TreeState | None:
        blob = await self.objects.read(TREE)
        return None if blob is None else TreeState.decode(blob.data, blob.version)

    async def advance(self, old: TreeState, new_size: int, new_root: bytes, newest_ms: int) -> TreeState | None:
        """Compare-and-swap the tree state from ``old`` (as read) to the new one; None when it
        moved meanwhile (another integrator)."""
        new = TreeState(new_size, new_root, max(newest_ms, old.newest_ms))
        version = await self.objects.replace(TREE, new.encode(), old.version)
        return None if version is None else TreeState(new.size, new.root, new.newest_ms, version)

    # -- staged batches

    async def stage(self, batch: Batch) -> bool:
        """Record the batch before any of its tiles: False when one from that size exists."""
        return await self.objects.create(size_name(STAGING, batch.size), batch.encode())

    async def staged(self, size: int) -> Batch | None:
        data = await self._read(size_name(STAGING, size))
        return None if data is None else Batch.decode(data)

    async def staged_sizes(self) -> list[int]:
        return [_size_of(name, STAGING) for name in await self.objects.names(STAGING)]

    async def unstage(self, size: int) -> None:
        await self.objects.delete(size_name(STAGING, size))

    # -- tiles and bundles

    async def write_tile(self, level: int | str, index: int, data: bytes, width: int) -> None:
        """A hash tile (``level`` an int) or an entry bundle (``"entries"``) of ``width``. A
        full one is created once: if it exists, its bytes must be these (``LogStoreConflict``
        otherwise); then the partial ones before it go."""
        name = tile_name(level, index, width)
        if width < tlog.TILE_WIDTH:
            await self.objects.write(name, data)
            return
        if not await self.objects.create(name, data):
            existing = await self._read(name)
            if existing != data:
                raise LogStoreConflict(f"{name} already holds other bytes than the log computed for it")
        for partial in await self.objects.names(name + ".p/"):
            await self.objects.delete(partial)

    async def fetch(self, name: str) -> bytes | None:
        """A public resource (``checkpoint``, a tile, a bundle) as stored, or None."""
        return await self._read(name)

    async def checkpoint(self) -> bytes | None:
        return await self._read(CHECKPOINT)

    async def publish(self, signed: bytes) -> bool:
        """Make ``signed`` the public checkpoint unless a larger tree is published already
        (another integrator went on). The same tree again (the same body) adds the signatures
        it brings and never drops one: one the published checkpoint holds and ``signed``
        lacks is kept (after ``signed``'s own); fewer signatures than published replace
        nothing (False). A compare-and-swap, so the public checkpoint never goes back."""
        size = checkpoint_size(signed)
        body, lines = _note_parts(signed)
        for _ in range(16):
            current = await self.objects.read(CHECKPOINT)
            if current is None:
                if await self.objects.create(CHECKPOINT, signed):
                    return True
                continue
            published = checkpoint_size(current.data)
            if published > size:
                return False
            wanted = signed
            if published == size:
                current_body, current_lines = _note_parts(current.data)
                if current_body != body:
                    return False  # another tree of this size: never replaced (the tree state decides)
                if set(lines) <= set(current_lines):
                    return set(lines) == set(current_lines)  # fewer signatures never replace more
                wanted += b"".join(line + b"\n" for line in current_lines if line not in lines)
            if await self.objects.replace(CHECKPOINT, wanted, current.version):
                return True
        raise LogStoreError(f"log store {self.url}: the checkpoint kept changing while it was published")

    # -- the integrator's lease

    async def lease(self, token: str, hold_ms: int, action: str = "take") -> bool:
        """Take (``take``: if free or expired), renew (``keep``: if held by ``token``) or give
        up (``drop``) the integrator's lease: whether ``token`` holds it afterwards. The lease
        saves work (one integrator at a time); correctness rests on the tree's compare-and-swap."""
        now = int(time.time() * 1000)
        current = await self.objects.read(LEASE)
        holder = orjson.loads(current.data) if current is not None else None
        mine = holder is not None and holder.get("token") == token
        if action == "drop":
            if mine and current is not None:
                await self.objects.replace(LEASE, orjson.dumps({"token": "", "until_ms": 0}), current.version)
            return False
        free = holder is None or int(holder.get("until_ms", 0)) < now
        if not (mine or (action == "take" and free)):
            return False
        record = orjson.dumps({"token": token, "until_ms": now + hold_ms})
        if current is None:
            return await self.objects.create(LEASE, record)
        return await self.objects.replace(LEASE, record, current.version) is not None

    # -- halting

    async def halted(self) -> dict[str, Any] | None:
        """The halt record (``reason``, ``at``, ``evidence``) while the log is halted."""
        data = await self._read(HALT)
        return None if data is None else dict(orjson.loads(data))

    async def halt(self, reason: str, evidence: dict[str, Any]) -> bool:
        """Record a halt (kept until ``log resume``): False when the log was halted already."""
        record = {"reason": reason, "at": _now_iso(), "evidence": evidence}
        return await self.objects.create(HALT, orjson.dumps(record, option=orjson.OPT_INDENT_2))

    async def resume(self, reason: str) -> dict[str, Any] | None:
        """Lift a halt, keeping the halt and the reason given under ``.state/resumed/``: the
        halt record lifted, or None when the log was not halted."""
        halted = await self.halted()
        if halted is None:
            return None
        record = {"halt": halted, "reason": reason, "at": _now_iso()}
        await self.objects.write(
            f"{RESUMED}{int(time.time() * 1000):015d}", orjson.dumps(record, option=orjson.OPT_INDENT_2)
        )
        await self.objects.delete(HALT)
        return halted

    # -- witnesses

    async def witness_sizes(self) -> dict[str, int]:
        data = await self._read(WITNESSES)
        return {str(k): int(v) for k, v in orjson.loads(data).items()} if data else {}

    async def save_witness_sizes(self, sizes: dict[str, int]) -> None:
        await self.objects.write(WITNESSES, orjson.dumps(sizes, option=orjson.OPT_SORT_KEYS))

    # -- time-stamps

    async def save_stamp(self, size: int, record: bytes) -> None:
        """Keep a checkpoint's time-stamps (the signed checkpoint and every TSA's answer)."""
        await self.objects.write(size_name(TIMESTAMPS, size), record)
        await self.objects.write(STAMPED, orjson.dumps({"size": size}))

    async def stamp(self, size: int) -> bytes | None:
        return await self._read(size_name(TIMESTAMPS, size))

    async def stamps_covering(self, index: int, limit: int) -> list[tuple[int, bytes]]:
        """The first ``limit`` time-stamped checkpoints whose tree holds entry ``index`` (their
        size is larger), smallest first, each with its record."""
        found = []
        for name in await self.objects.names(TIMESTAMPS, after=size_name(TIMESTAMPS, index), limit=limit):
            data = await self._read(name)
            if data is not None:
                found.append((_size_of(name, TIMESTAMPS), data))
        return found

    async def last_stamped(self) -> int:
        data = await self._read(STAMPED)
        return int(orjson.loads(data)["size"]) if data else 0


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
