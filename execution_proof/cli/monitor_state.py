"""What ``monitor`` keeps between runs: DIR/monitor.sqlite3 (stdlib sqlite3, WAL).

- ``meta``: the log the state follows (``log_origin``, ``log_vkey``: recorded by the first
  checkpoint whose signature verified, never changed after), the size checked so far and the
  frontier of the tree of that size (the hashes the monitor computed,
  receipts.monitor.Frontier), the last checkpoint whose root the frontier matched (its text,
  size and root), and the checkpoint being caught up to.
- ``projects``: per project, the main chain's tip and the previous hash of its last main
  entry. Memory grows with the number of projects, never with the entries.
- ``violations``: every violation found, each once; reported on every later run. The
  ``quorum`` violations older versions recorded for a checkpoint below the witness quorum
  are removed when the state is opened (a miss is not evidence: ``unwitnessed_since``).
- ``meta`` also keeps ``unwitnessed_size`` and ``unwitnessed_at``: the first checkpoint of
  the current run of checkpoints below the policy's quorum, and when the monitor saw it
  (``Unwitnessed``); removed by the first checkpoint that meets the quorum.
- ``key_entries``: every key certificate and revocation the log showed, by index (the
  entry's bytes), so every report lists every key (receipts/key_entries.py); ``meta``'s
  ``judged_roots`` is the digest of the pinned roots they were all judged against, removed
  when entries are kept unjudged (a run without ``--trust-root``): a run with roots judges
  again every entry kept when the digest is not theirs, so no key escapes a trust root given
  later.
- DIR/prevs.bin (``PrevFile``): every (project, previous hash) a main entry used, 16 bytes
  each, appended as the monitor goes and read only when an entry does not follow its
  project's tip (to tell a fork from a split): disk grows 16 bytes per main entry, memory
  does not. Its committed length is in ``meta``, written after the file is fsynced: a longer
  file (a run killed between the two) is cut back to it on start.

Progress (frontier, size, the projects that moved, violations) is written in one
transaction, so a monitor killed at any point (kill -9) finds on its next run a state in
which everything up to ``size`` was checked, and nothing past it was counted. WAL with
``synchronous=NORMAL``: a commit survives the process being killed; after a power loss the
last commits may be lost, and the monitor re-reads those entries.

A pass reports what it found as a ``PassReport`` (one JSON line): the violations kept, and the
checkpoint it checked.

DIR/monitor.lock (``StateLock``): one monitor per state directory. The first takes an
exclusive lock on it (``flock``; on Windows ``msvcrt.locking``) before it opens anything else
and holds it for the whole run; a second gets ``StateBusy`` at once, naming the process
that holds it (its pid is written in the file).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import sqlite3
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

import orjson

from execution_proof.errors import Error
from execution_proof.receipts.key_entries import KeyEntry, ListedKey, judge_key_entry, read_key_entry, roots_digest
from execution_proof.transparency import note
from execution_proof.transparency.monitor import Frontier, Project, Violation, entry_kind

if TYPE_CHECKING:
    from execution_proof.receipts.shapes import JSONObject

if sys.platform == "win32":
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS projects (
    project_id TEXT PRIMARY KEY, tip TEXT NOT NULL, last_prev TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS violations (
    id INTEGER PRIMARY KEY, record BLOB NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS key_entries (idx INTEGER PRIMARY KEY, entry BLOB NOT NULL);
"""


class UnwitnessedJSON(TypedDict):
    size: int
    seen_at: str


class QuorumJSON(TypedDict):
    ok: bool
    reason: str


class PassReport(TypedDict):
    """One pass of ``monitor``, as it prints it: ``ok`` while no violation is kept (and, with
    ``--require-quorum``, while the checkpoint read meets the quorum)."""

    ok: bool
    violations: list[Mapping[str, object]]
    """Each kept violation as ``Violation.json()`` writes it (every violation ever found)."""
    unwitnessed_since: UnwitnessedJSON | None
    """The first checkpoint of the current run of checkpoints below the policy's quorum."""
    checkpoint: NotRequired[JSONObject]
    """``origin`` and ``size`` of the checkpoint the pass read, once it read one."""
    quorum: NotRequired[QuorumJSON]
    """With a policy, once a checkpoint was read: whether it meets the quorum, and why."""
    keys: list[ListedKey]
    """Every key the log showed (this run and before), with its root judged against
    ``--trust-root`` (receipts/key_entries.py)."""
    new_entries: NotRequired[int]


class MonitorStateError(Error):
    """The state directory holds something this monitor cannot use (the verb exits 2)."""


class StateBusy(MonitorStateError):
    """Another monitor holds the state directory's lock (the verb exits 2 at once)."""


class StateLock:
    """DIR/monitor.lock, held exclusively from ``__init__`` to ``release`` (or the process's
    end: the system releases it with the file). ``StateBusy`` when another process holds it,
    ``MonitorStateError`` when the file cannot be opened."""

    NAME = "monitor.lock"

    def __init__(self, directory: Path) -> None:
        self.path = directory / self.NAME
        try:
            self._file = open(self.path, "a+b")  # noqa: SIM115 - held open for the monitor's life
        except OSError as exc:
            raise MonitorStateError(f"cannot use {self.path}: {exc}") from exc
        self._file.seek(0)  # msvcrt locks from the position: every monitor locks byte 0
        if not _try_lock(self._file.fileno()):
            holder = self._holder()
            self._file.close()
            raise StateBusy(
                f"another monitor{holder} is running on the state directory {directory} (it holds {self.path}): "
                "one monitor per --state directory"
            )
        self._file.truncate(0)
        self._file.write(str(os.getpid()).encode())
        self._file.flush()

    def _holder(self) -> str:
        """`` (process N)`` as the holder wrote it; empty when it cannot be read."""
        try:
            self._file.seek(0)
            pid = self._file.read(32).decode("ascii", "replace").strip()
        except OSError:
            return ""
        return f" (process {pid})" if pid.isdigit() else ""

    def release(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class Unwitnessed:
    """The first checkpoint of the current run of checkpoints below the policy's quorum: its
    size, and when the monitor first saw it (UTC, ISO 8601)."""

    size: int
    seen_at: str

    def json(self) -> UnwitnessedJSON:
        return {"size": self.size, "seen_at": self.seen_at}


@dataclass(frozen=True)
class Seen:
    """The last checkpoint whose root the monitor's own hashes matched."""

    size: int
    root: bytes
    text: str


class PrevFile:
    """``receipts.monitor.UsedPrevs`` on disk: the first 16 bytes of SHA-256(project id, a
    newline, the previous hash) per use (collisions: about 2^-64 for a million uses)."""

    KEY = 16

    def __init__(self, path: Path, length: int) -> None:
        self.path = path
        try:
            self._file = open(path, "a+b")  # noqa: SIM115 - held open for the monitor's life
            held = self._file.seek(0, os.SEEK_END)
            if held < length:
                raise MonitorStateError(f"{path} holds {held} bytes; the state says {length} were written")
            self._file.truncate(length)
        except OSError as exc:
            raise MonitorStateError(f"cannot use {path}: {exc}") from exc
        self.length = length
        self._pending = bytearray()

    @classmethod
    def key(cls, project_id: str, prev: str) -> bytes:
        return hashlib.sha256(f"{project_id}\n{prev}".encode()).digest()[: cls.KEY]

    def add(self, project_id: str, prev: str) -> None:
        self._pending += self.key(project_id, prev)

    def seen(self, project_id: str, prev: str) -> bool:
        key = self.key(project_id, prev)
        if _aligned(self._pending, key):
            return True
        if not self.length:
            return False
        with mmap.mmap(self._file.fileno(), self.length, access=mmap.ACCESS_READ) as held:
            return _aligned(held, key)

    def flush(self) -> int:
        """Append what was added, fsync: the length to commit."""
        if self._pending:
            self._file.seek(0, os.SEEK_END)
            self._file.write(self._pending)
            self._file.flush()
            os.fsync(self._file.fileno())
            self.length += len(self._pending)
            self._pending.clear()
        return self.length

    def close(self) -> None:
        self._file.close()


def _aligned(data: bytes | bytearray | mmap.mmap, key: bytes) -> bool:
    at = data.find(key)
    while at != -1:
        if at % PrevFile.KEY == 0:
            return True
        at = data.find(key, at + 1)
    return False


class MonitorDb:
    def __init__(self, path: Path) -> None:
        try:
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            self.projects: dict[str, Project] = {
                project_id: Project(tip, last_prev)
                for project_id, tip, last_prev in self._db.execute("SELECT project_id, tip, last_prev FROM projects")
            }
        except sqlite3.Error as exc:
            raise MonitorStateError(f"cannot use the state in {path}: {exc}") from exc
        self.path = path
        self.log = _followed_log(path, meta)
        """The log this state follows (its key's name is the log's origin); None until a
        checkpoint's signature has verified."""
        self.origin: str | None = self.log.name if self.log else (meta.get("origin", b"").decode() or None)
        """The log's origin: the recorded log's, else the one an older monitor saved progress for
        (it recorded the origin only, on every save; an empty one when it had verified nothing)."""
        try:
            self.frontier = Frontier.decode(int(meta.get("size", b"0")), meta.get("frontier", b""))
        except ValueError as exc:
            raise MonitorStateError(f"{path}: {exc}") from exc
        self.seen = (
            Seen(int(meta["seen_size"]), bytes(meta["seen_root"]), meta["seen_text"].decode())
            if "seen_size" in meta
            else None
        )
        self.target: str | None = meta["target"].decode() if "target" in meta else None
        self.unwitnessed = (
            Unwitnessed(int(meta["unwitnessed_size"]), bytes(meta["unwitnessed_at"]).decode())
            if "unwitnessed_size" in meta
            else None
        )
        self.cleared_quorum = self._clear("quorum")
        """The ``quorum`` violations an older version recorded, removed as the state opened."""
        self.prevs = PrevFile(path.with_name("prevs.bin"), int(meta.get("prevs_length", b"0")))
        self.judged_roots: bytes | None = bytes(meta["judged_roots"]) if "judged_roots" in meta else None
        """The digest of the roots every kept key entry was judged against (None: some were not)."""

    def close(self) -> None:
        self.prevs.close()
        self._db.close()

    def violations(self) -> list[Violation]:
        rows = self._db.execute("SELECT record FROM violations ORDER BY id").fetchall()
        return [Violation(**orjson.loads(record)) for (record,) in rows]

    def key_entries(self) -> list[KeyEntry]:
        """Every key entry kept, in log order. ``MonitorStateError`` when one no longer reads
        (the state was altered: each was read strictly before it was kept)."""
        found: list[KeyEntry] = []
        for index, entry in self._db.execute("SELECT idx, entry FROM key_entries ORDER BY idx"):
            kind = entry_kind(bytes(entry))
            read = read_key_entry(index, kind, bytes(entry)) if kind is not None else None
            if not isinstance(read, KeyEntry):
                raise MonitorStateError(f"{self.path}: the key entry kept for index {index} does not read")
            found.append(read)
        return found

    def judge_kept(self, roots: Mapping[str, bytes]) -> None:
        """Unless every kept key entry was judged against ``roots`` already (their digest is
        ``judged_roots``): judge them all (entries kept by a run without roots, or against
        other roots), and record the violations and the digest in one transaction."""
        digest = roots_digest(roots)
        if self.judged_roots != digest:
            found = [v for entry in self.key_entries() if (v := judge_key_entry(entry, roots)) is not None]
            self.save(violations=found, judged_roots=digest)

    def _kept(self, kind: str) -> list[tuple[int, Violation]]:
        """(row id, violation) of every kept violation of ``kind``."""
        rows = self._db.execute("SELECT id, record FROM violations ORDER BY id").fetchall()
        return [(id_, v) for id_, record in rows if (v := Violation(**orjson.loads(record))).kind == kind]

    def _clear(self, kind: str) -> list[Violation]:
        """Remove the kept violations of ``kind`` (one transaction); what was removed."""
        cleared = self._kept(kind)
        if cleared:
            self._write(("DELETE FROM violations WHERE id = ?", [(id_,) for id_, _ in cleared]))
        return [v for _, v in cleared]

    def record_log(self, log_key: note.Verifier) -> list[Violation]:
        """Record ``log_key`` as the log this state follows (its name is the origin), once a
        checkpoint has verified against it; the ``signature`` violations an older monitor
        recorded before any log was (with a wrong key: nothing was deployed that tells them
        from a log's bad signature) are removed in the same transaction, and returned.
        ``MonitorStateError`` when the state cannot be written."""
        assert self.log is None, "a state's log is recorded once"
        cleared = self._kept("signature")
        meta = {"log_origin": log_key.name.encode(), "log_vkey": log_key.encode().encode()}
        self._write(
            ("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", meta.items()),
            ("DELETE FROM meta WHERE key = ?", [("origin",)]),  # an older monitor's; log_origin now
            ("DELETE FROM violations WHERE id = ?", [(id_,) for id_, _ in cleared]),
        )
        self.log, self.origin = log_key, log_key.name
        return [v for _, v in cleared]

    def record_quorum(self, size: int, met: bool, seen_at: str) -> Unwitnessed | None:
        """A checkpoint of ``size``, seen at ``seen_at``, meets the quorum (``met``) or not:
        the first miss of a run of misses is kept, and a checkpoint that meets the quorum ends
        the run. The run's first miss, or None. ``MonitorStateError`` when the state cannot be
        written."""
        if met and self.unwitnessed is not None:
            self._write(("DELETE FROM meta WHERE key = ?", [("unwitnessed_size",), ("unwitnessed_at",)]))
            self.unwitnessed = None
        elif not met and self.unwitnessed is None:
            meta = {"unwitnessed_size": str(size).encode(), "unwitnessed_at": seen_at.encode()}
            self._write(("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", meta.items()))
            self.unwitnessed = Unwitnessed(size, seen_at)
        return self.unwitnessed

    def save(
        self,
        *,
        target: str | None = None,
        projects: Mapping[str, Project] | None = None,
        violations: Iterable[Violation] = (),
        seen: Seen | None = None,
        key_entries: Sequence[KeyEntry] = (),
        judged_roots: bytes | None = None,
    ) -> None:
        """One transaction: the frontier and size as they are now, the projects that moved,
        new violations, the key entries read, and (``seen``) a checkpoint the frontier now
        matches. ``judged_roots``: every key entry kept, these included, has been judged
        against the roots of that digest; without it, key entries saved leave the kept ones
        not all judged. ``MonitorStateError`` (nothing written) when the state cannot be
        written: a full disk, a read-only directory."""
        meta: dict[str, bytes] = {
            "size": str(self.frontier.size).encode(),
            "frontier": self.frontier.encode(),
            "prevs_length": str(self.prevs.flush()).encode(),
        }
        if target is not None:
            meta["target"] = target.encode()
        if seen is not None:
            meta.update(seen_size=str(seen.size).encode(), seen_root=seen.root, seen_text=seen.text.encode())
        if judged_roots is not None:
            meta["judged_roots"] = judged_roots
        unjudged = [("judged_roots",)] if key_entries and judged_roots is None else []
        records = [(orjson.dumps(v.json()),) for v in violations]
        keys = [(entry.index, entry.entry()) for entry in key_entries]
        rows = [(project_id, p.tip, p.last_prev) for project_id, p in (projects or {}).items()]
        self._write(
            ("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", meta.items()),
            ("DELETE FROM meta WHERE key = ?", unjudged),
            ("INSERT OR REPLACE INTO projects(project_id, tip, last_prev) VALUES (?, ?, ?)", rows),
            ("INSERT OR IGNORE INTO violations(record) VALUES (?)", records),
            ("INSERT OR REPLACE INTO key_entries(idx, entry) VALUES (?, ?)", keys),
        )
        if judged_roots is not None:
            self.judged_roots = judged_roots
        elif unjudged:
            self.judged_roots = None
        if seen is not None:
            self.seen = seen
        if target is not None:
            self.target = target

    def _write(self, *steps: tuple[str, Iterable[Sequence[object]]]) -> None:
        """Each statement over its rows, in one transaction (all or nothing, even when
        interrupted); ``MonitorStateError`` when the state cannot be written."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement, rows in steps:
                    db.executemany(statement, rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise MonitorStateError(f"cannot write the state in {self.path}: {exc}") from exc


def _followed_log(path: Path, meta: Mapping[str, bytes]) -> note.Verifier | None:
    if "log_vkey" not in meta:
        return None
    try:
        log_key = note.Verifier.parse(bytes(meta["log_vkey"]).decode())
    except (note.NoteError, UnicodeDecodeError) as exc:
        raise MonitorStateError(f"{path}: the log key the state records is unreadable: {exc}") from exc
    if log_key.name.encode() != meta.get("log_origin"):
        raise MonitorStateError(f"{path}: the log origin the state records is not its key's name")
    return log_key
