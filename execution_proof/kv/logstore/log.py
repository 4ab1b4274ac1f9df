"""The log store's typed interface (docs/log.md, "Where the log lives"): what the integrator,
the routes and the operator commands read and write, on any backend (kv/logstore/objects.py).

Public, laid out as C2SP tlog-tiles names them: ``checkpoint``, ``tile/<L>/<N>[.p/<W>]``,
``tile/entries/<N>[.p/<W>]``. Full tiles and bundles are created once and never change
(writing one that exists compares it instead); a partial one is deleted once its full tile
exists, as tlog-tiles allows. Private, under ``.state/`` (Tessera's convention):

- ``identity``: the log's origin and verifier key, written once, when the store is created;
- ``tree``: the tree state (size, root, and the batch staged on it, if any), changed only by
  compare-and-swap from the state as read: staging a batch is one (the fencing token of
  docs/log.md "Fencing"), advancing the tree past it, once every tile and bundle it covers is
  durable, is the next. Every write carries a fresh nonce, so a state never repeats a
  version (SHA-256 of the content on ``file://``, the ETag on ``s3://``) unless a copy of an
  older one is put back, which the published checkpoint catches (jobs/log_integrator.py);
- ``staging/<size>.<nonce>``: a staged batch's entries, written (create-only, under a name
  no one else uses) before the tree state names it and before any of its tiles, so whoever
  finishes it writes the same bytes;
- ``lease``: which integrator is active, until when, and its deployment (the id its Redis
  keeps: kv/store_log.py); one that cannot be read has expired;
- ``halt`` (present while the log is halted, whatever its bytes) and ``resumed/<ms>`` (each
  ``log resume``);
- ``witnesses``: the size each witness last cosigned;
- ``timestamps/<size, 7 groups of 3 digits>``: a checkpoint's RFC 3161 time-stamps, and
  ``stamped``: the newest size stamped.
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson

from execution_proof.kv.keys import LogIdentity, receipt_created_ms
from execution_proof.kv.logstore.objects import LogStoreError, ObjectStore
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.shapes import JSONObject
from execution_proof.transparency import note, tlog
from execution_proof.transparency.tiles import tile_name

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
    """The store holds something other than what the log computed for the same place, or
    lacks what its tree state depends on. Never overwritten; the integrator looks whether it
    was stale, else the log halts."""


class TileMismatch(LogStoreConflict):
    """A tile or bundle path holds other bytes than the batch being written computes."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} already holds other bytes than the log computed for it")
        self.name = name


class CheckpointUnreadable(LogStoreError):
    """The published ``checkpoint`` is not a checkpoint (truncated, overwritten)."""


class TreeUnreadable(LogStoreError):
    """``.state/tree`` is there but is not a tree state (truncated, overwritten): nothing can
    be integrated until it is put right, which the integrator retries like any store error."""


UNREADABLE_HALT = "unreadable halt record"
"""The reason of a ``.state/halt`` whose bytes are not a halt record: still a halt."""
HALT_TEXT_KEPT = 4096
"""How much of an unreadable halt record is kept (as text) in the record ``halted`` returns."""


@dataclass(frozen=True)
class Lease:
    """What ``LogStore.lease`` found: whether the caller holds the lease now, and, when
    another integrator holds it (and has not let it expire), that integrator's deployment
    (``""`` when its record names none)."""

    held: bool
    holder: str | None = None

    def __bool__(self) -> bool:
        return self.held


class Identity(LogIdentity):
    """The log's origin and verifier key (signed-note form: its name is the origin), as the
    store keeps it; the same identity binds the log's records in Redis (kv/keys.py)."""

    def encode(self) -> bytes:
        return orjson.dumps({"origin": self.origin, "vkey": self.vkey}, option=orjson.OPT_INDENT_2)

    @classmethod
    def decode(cls, data: bytes) -> Identity:
        fields = orjson.loads(data)
        return cls(str(fields["origin"]), str(fields["vkey"]))


@dataclass(frozen=True)
class Staged:
    """The batch staged on a tree state: where its entries are and the tree it makes."""

    name: str
    new_size: int
    new_root: bytes
    newest_ms: int


@dataclass(frozen=True)
class TreeState:
    size: int
    root: bytes
    newest_ms: int = 0
    """The creation time (Unix ms) of the newest receipt in the tree: a queued entry created
    later cannot already be in it (jobs/log_sync.py: a queue caught up reads nothing back for it)."""
    staged: Staged | None = None
    """The batch being added to this tree, if one was staged: every integrator finishes it
    before anything else (the same bytes, from the same entries)."""
    version: str = ""
    """The version the state was read with (or written as): the compare-and-swap's token."""

    def encode(self) -> bytes:
        fields: JSONObject = {
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "newest_ms": self.newest_ms,
            "nonce": secrets.token_hex(8),
        }
        if self.staged is not None:
            fields["staged"] = {
                "name": self.staged.name,
                "new_size": self.staged.new_size,
                "new_root": base64.b64encode(self.staged.new_root).decode(),
                "newest_ms": self.staged.newest_ms,
            }
        return orjson.dumps(fields)

    @classmethod
    def decode(cls, data: bytes, version: str) -> TreeState:
        """``LogStoreError`` when the bytes are not a tree state (a truncated file, say)."""
        try:
            fields = orjson.loads(data)
            staged = fields.get("staged")
            return cls(
                int(fields["size"]),
                base64.b64decode(fields["root"], validate=True),
                int(fields.get("newest_ms", 0)),
                None
                if staged is None
                else Staged(
                    str(staged["name"]),
                    int(staged["new_size"]),
                    base64.b64decode(staged["new_root"], validate=True),
                    int(staged["newest_ms"]),
                ),
                version,
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise TreeUnreadable(f"{TREE} cannot be read ({type(exc).__name__}: {exc})") from exc


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


def entry_created_ms(entry: bytes) -> int | None:
    """When a receipt entry's receipt was made (its id says: a tree state's ``newest_ms``);
    None for an entry of another kind."""
    key = tlog.entry_key(entry)
    receipt_id = key.receipt_id if key is not None else None
    return receipt_created_ms(receipt_id) if receipt_id is not None and is_receipt_id(receipt_id) else None


_RECEIPT_ENTRY = tlog.ENTRY_HEADER.encode() + b"\nrcpt_"
_ULID_TIME = slice(len(_RECEIPT_ENTRY), len(_RECEIPT_ENTRY) + 10)


def newest_created_ms(entries: list[bytes]) -> int:
    """The newest receipt's creation time among ``entries`` (0 when none is a receipt entry):
    ``entry_created_ms`` of the one whose id's time is the largest. A ULID's first ten
    characters sort as the time they encode, so only that one is decoded (a batch's 4,096
    entries cost what a few did)."""
    receipts = [entry for entry in entries if entry.startswith(_RECEIPT_ENTRY)]
    if not receipts:
        return 0
    newest = entry_created_ms(max(receipts, key=lambda entry: entry[_ULID_TIME]))
    if newest is not None:
        return newest
    return max((made for entry in receipts if (made := entry_created_ms(entry)) is not None), default=0)


def size_name(prefix: str, size: int) -> str:
    """``prefix`` + the size as 21 zero-padded digits in 7 groups of 3 (``000/…/067``):
    names sort as the sizes do, and no directory holds more than 1,000 entries."""
    digits = f"{size:021d}"
    return prefix + "/".join(digits[i : i + 3] for i in range(0, 21, 3))


def _size_of(name: str, prefix: str) -> int:
    return int(name.removeprefix(prefix).partition(".")[0].replace("/", ""))


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
        """The store's identity; ``LogStoreError`` when ``.state/identity`` cannot be read."""
        data = await self._read(IDENTITY)
        if data is None:
            return None
        try:
            return Identity.decode(data)
        except (ValueError, TypeError, KeyError) as exc:
            raise LogStoreError(f"log store {self.url}: {IDENTITY} cannot be read ({exc})") from exc

    async def is_empty(self) -> bool:
        """No identity, no tree state, no checkpoint, no tile: nothing of any log."""
        for name in (IDENTITY, TREE, CHECKPOINT):
            if await self.objects.read(name) is not None:
                return False
        return not await self.holds_tiles()

    async def holds_tiles(self) -> bool:
        return bool(await self.objects.names("tile/", limit=1))

    async def create_identity(self, identity: Identity) -> bool:
        """The first step of making this store a new log: its identity, create-only. False
        when the store has one already (another process created it first)."""
        return await self.objects.create(IDENTITY, identity.encode())

    async def start_tree(self, checkpoint: bytes) -> None:
        """The rest of making a new log, after its identity: the tree state of size 0 and the
        size-0 checkpoint, each only if absent, so a creation cut short at any point is
        finished by running this again."""
        await self.objects.create(TREE, TreeState(0, tlog.EMPTY_ROOT).encode())
        await self.objects.create(CHECKPOINT, checkpoint)

    async def tidy(self) -> int:
        """Remove what crashed writers left behind (``file://``: temporary files)."""
        return await self.objects.tidy()

    # -- the tree state

    async def tree(self) -> TreeState | None:
        blob = await self.objects.read(TREE)
        return None if blob is None else TreeState.decode(blob.data, blob.version)

    async def replace_tree(self, old: TreeState | None, new: TreeState) -> TreeState | None:
        """Compare-and-swap the tree state from ``old`` as read (None: there is none yet) to
        ``new``: the state written, with its version, or None when it is no longer ``old``."""
        data = new.encode()
        if old is None:
            if not await self.objects.create(TREE, data):
                return None
            blob = await self.objects.read(TREE)
            return None if blob is None else TreeState.decode(blob.data, blob.version)
        version = await self.objects.replace(TREE, data, old.version)
        return None if version is None else dataclasses.replace(new, version=version)

    async def stage(self, tree: TreeState, batch: Batch) -> TreeState | None:
        """Stage ``batch`` on ``tree`` (as read, nothing staged): its entries under a name of
        its own, then the tree state compare-and-swapped to name it. The staged state, or None
        when the tree state moved meanwhile (the entries written are removed again): then no
        tile of this batch may be written."""
        assert tree.staged is None
        assert (batch.size, batch.root) == (tree.size, tree.root)
        name = f"{size_name(STAGING, tree.size)}.{secrets.token_hex(8)}"
        if not await self.objects.create(name, batch.encode()):
            raise LogStoreError(f"log store {self.url}: {name} exists already")
        staged = Staged(name, batch.new_size, batch.new_root, batch.newest_ms)
        written = await self.replace_tree(tree, dataclasses.replace(tree, staged=staged))
        if written is None:
            await self.objects.delete(name)
        return written

    async def staged_batch(self, tree: TreeState) -> Batch:
        """The entries of the batch ``tree`` names; ``LogStoreConflict`` when they are gone or
        are not that batch (the store lost what the tree state depends on)."""
        assert tree.staged is not None
        data = await self._read(tree.staged.name)
        if data is None:
            raise LogStoreConflict(f"{tree.staged.name}, the batch staged on the tree of size {tree.size}, is gone")
        batch = Batch.decode(data)
        if (batch.size, batch.root, batch.new_size, batch.new_root) != (
            tree.size,
            tree.root,
            tree.staged.new_size,
            tree.staged.new_root,
        ):
            raise LogStoreConflict(f"{tree.staged.name} is not the batch the tree state names")
        return batch

    async def advance(self, tree: TreeState) -> TreeState | None:
        """Compare-and-swap the tree state from ``tree`` (as read, a batch staged) to the tree
        the batch makes; None when it moved meanwhile (another integrator finished it)."""
        staged = tree.staged
        assert staged is not None
        new = TreeState(staged.new_size, staged.new_root, max(staged.newest_ms, tree.newest_ms))
        return await self.replace_tree(tree, new)

    async def unstage(self, staged: Staged) -> None:
        """Remove a batch's entries once the tree has moved past it."""
        await self.objects.delete(staged.name)

    async def staging_names(self) -> list[str]:
        return await self.objects.names(STAGING)

    async def clear_staging(self, below: int) -> int:
        """Remove the entries of batches staged on trees smaller than ``below`` (the tree has
        moved past them: left by crashed or stale integrators). How many went."""
        gone = 0
        for name in await self.objects.names(STAGING):
            if _size_of(name, STAGING) < below:
                await self.objects.delete(name)
                gone += 1
        return gone

    # -- tiles and bundles

    async def write_tile(self, level: int | str, index: int, data: bytes, width: int) -> None:
        """A hash tile (``level`` an int) or an entry bundle (``"entries"``) of ``width``.
        Every path, full or partial, is created once: if it exists, its bytes must be these
        (``TileMismatch`` otherwise, nothing overwritten); a full one then removes the
        partial ones before it. A partial one that is gone again at once was removed by
        whoever wrote its full tile: nothing to compare."""
        name = tile_name(level, index, width)
        for _ in range(2):
            if await self.objects.create(name, data):
                break
            existing = await self._read(name)
            if existing == data:
                break
            if existing is not None:
                raise TileMismatch(name)
            if width < tlog.TILE_WIDTH:
                return
        else:
            raise LogStoreError(f"log store {self.url}: {name} is refused as existing, yet cannot be read")
        if width == tlog.TILE_WIDTH:
            for partial in await self.objects.names(name + ".p/"):
                await self.objects.delete(partial)

    async def fetch(self, name: str) -> bytes | None:
        """A public resource (``checkpoint``, a tile, a bundle) as stored, or None."""
        return await self._read(name)

    async def checkpoint(self) -> bytes | None:
        return await self._read(CHECKPOINT)

    async def publish(self, signed: bytes, *, repair: bool = False) -> bool:
        """Make ``signed`` the public checkpoint unless a larger tree is published already
        (another integrator went on). The same tree again (the same body) adds the signatures
        it brings and never drops one: one the published checkpoint holds and ``signed``
        lacks is kept (after ``signed``'s own); fewer signatures than published replace
        nothing (False). A compare-and-swap, so the public checkpoint never goes back.

        A published checkpoint that cannot be read (truncated, say) raises
        ``CheckpointUnreadable``, unless ``repair``: the caller has checked that the tiles
        prove ``signed``'s tree, which then replaces it."""
        size = checkpoint_size(signed)
        body, lines = _note_parts(signed)
        for _ in range(16):
            current = await self.objects.read(CHECKPOINT)
            if current is None:
                if await self.objects.create(CHECKPOINT, signed):
                    return True
                continue
            try:
                published = checkpoint_size(current.data)
            except note.NoteError as exc:
                if not repair:
                    raise CheckpointUnreadable(f"log store {self.url}: {CHECKPOINT} cannot be read ({exc})") from exc
                if await self.objects.replace(CHECKPOINT, signed, current.version):
                    return True
                continue
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

    async def lease(self, token: str, hold_ms: int, action: str = "take", deployment: str = "") -> Lease:
        """Take (``take``: if free or expired), renew (``keep``: if held by ``token``) or give
        up (``drop``) the integrator's lease, recording ``deployment`` (which Redis the holder
        works from) beside ``token``: whether ``token`` holds it afterwards, and who holds it
        when another does. A lease record that cannot be read has expired: taking it replaces
        those bytes by compare-and-swap. The lease saves work (one integrator at a time);
        correctness rests on the tree's compare-and-swap."""
        now = int(time.time() * 1000)
        current = await self.objects.read(LEASE)
        holder = _lease_record(current.data) if current is not None else None
        mine = holder is not None and holder["token"] == token
        if action == "drop":
            if mine and current is not None:
                released = orjson.dumps({"token": "", "until_ms": 0, "deployment": ""})
                await self.objects.replace(LEASE, released, current.version)
            return Lease(False)
        free = holder is None or holder["until_ms"] < now
        if not (mine or (action == "take" and free)):
            return Lease(False, None if free or holder is None else holder["deployment"])
        record = orjson.dumps({"token": token, "until_ms": now + hold_ms, "deployment": deployment})
        if current is None:
            return Lease(await self.objects.create(LEASE, record), None)
        return Lease(await self.objects.replace(LEASE, record, current.version) is not None, None)

    # -- halting

    async def halted(self) -> JSONObject | None:
        """The halt record (``reason``, ``at``, ``evidence``) while the log is halted. A
        ``.state/halt`` that is there is a halt whatever its bytes: one that is not a halt
        record (truncated, binary, empty, not a JSON object, no reason) is given as
        ``{"reason": "unreadable halt record", "text", "bytes"}``, keeping what can be read."""
        data = await self._read(HALT)
        return None if data is None else _halt_record(data)

    async def halt(self, reason: str, evidence: JSONObject) -> bool:
        """Record a halt (kept until ``log resume``): False when the log was halted already."""
        record = {"reason": reason, "at": _now_iso(), "evidence": evidence}
        return await self.objects.create(HALT, orjson.dumps(record, option=orjson.OPT_INDENT_2))

    async def resume(self, reason: str) -> JSONObject | None:
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


def _lease_record(data: bytes) -> dict[str, Any] | None:
    """A lease record's token, expiry and deployment; None when its bytes are not one (an
    unreadable lease has expired)."""
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(fields, dict):
        return None
    token, until_ms, deployment = fields.get("token"), fields.get("until_ms", 0), fields.get("deployment", "")
    if not isinstance(token, str) or not isinstance(until_ms, int) or isinstance(until_ms, bool):
        return None
    return {"token": token, "until_ms": until_ms, "deployment": deployment if isinstance(deployment, str) else ""}


def _halt_record(data: bytes) -> JSONObject:
    """The halt record ``.state/halt`` holds, or, when its bytes are not one, a record saying
    so with what could be read of them."""
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError:
        fields = None
    if isinstance(fields, dict) and isinstance(fields.get("reason"), str):
        return fields
    return {
        "reason": UNREADABLE_HALT,
        "bytes": len(data),
        "text": data[:HALT_TEXT_KEPT].decode("utf-8", "replace"),
    }


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
