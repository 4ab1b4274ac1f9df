"""What ``monitor`` keeps between runs: DIR/monitor.sqlite3 (stdlib sqlite3, WAL).

- ``meta``: the size checked so far and the frontier of the tree of that size (the hashes
  the monitor computed, receipts.monitor.Frontier), the last checkpoint whose root the
  frontier matched (its text, size and root), and the checkpoint being caught up to.
- ``projects``: per project, the main chain's tip and the previous hash of its last main
  entry. Memory grows with the number of projects, never with the entries.
- ``violations``: every violation found, each once; reported on every later run.
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
"""

from __future__ import annotations

import hashlib
import mmap
import os
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from execution_proof.receipts.monitor import Frontier, Project, Violation

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS projects (
    project_id TEXT PRIMARY KEY, tip TEXT NOT NULL, last_prev TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS violations (
    id INTEGER PRIMARY KEY, record BLOB NOT NULL UNIQUE
);
"""


class StateError(Exception):
    """The state directory holds something this monitor cannot use (the verb exits 2)."""


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
                raise StateError(f"{path} holds {held} bytes; the state says {length} were written")
            self._file.truncate(length)
        except OSError as exc:
            raise StateError(f"cannot use {path}: {exc}") from exc
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
            raise StateError(f"cannot use the state in {path}: {exc}") from exc
        self.origin: str | None = meta["origin"].decode() if "origin" in meta else None
        try:
            self.frontier = Frontier.decode(int(meta.get("size", b"0")), meta.get("frontier", b""))
        except ValueError as exc:
            raise StateError(f"{path}: {exc}") from exc
        self.seen = (
            Seen(int(meta["seen_size"]), bytes(meta["seen_root"]), meta["seen_text"].decode())
            if "seen_size" in meta
            else None
        )
        self.target: str | None = meta["target"].decode() if "target" in meta else None
        self.prevs = PrevFile(path.with_name("prevs.bin"), int(meta.get("prevs_length", b"0")))

    def close(self) -> None:
        self.prevs.close()
        self._db.close()

    def violations(self) -> list[Violation]:
        rows = self._db.execute("SELECT record FROM violations ORDER BY id").fetchall()
        return [Violation(**orjson.loads(record)) for (record,) in rows]

    def save(
        self,
        *,
        origin: str,
        target: str | None = None,
        projects: Mapping[str, Project] | None = None,
        violations: Iterable[Violation] = (),
        seen: Seen | None = None,
    ) -> None:
        """One transaction: the frontier and size as they are now, the projects that moved,
        new violations, and (``seen``) a checkpoint the frontier now matches."""
        meta: dict[str, bytes] = {
            "origin": origin.encode(),
            "size": str(self.frontier.size).encode(),
            "frontier": self.frontier.encode(),
            "prevs_length": str(self.prevs.flush()).encode(),
        }
        if target is not None:
            meta["target"] = target.encode()
        if seen is not None:
            meta.update(seen_size=str(seen.size).encode(), seen_root=seen.root, seen_text=seen.text.encode())
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", meta.items())
            if projects:
                db.executemany(
                    "INSERT OR REPLACE INTO projects(project_id, tip, last_prev) VALUES (?, ?, ?)",
                    [(project_id, p.tip, p.last_prev) for project_id, p in projects.items()],
                )
            db.executemany(
                "INSERT OR IGNORE INTO violations(record) VALUES (?)", [(orjson.dumps(v.json()),) for v in violations]
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.origin = origin
        if seen is not None:
            self.seen = seen
        if target is not None:
            self.target = target
