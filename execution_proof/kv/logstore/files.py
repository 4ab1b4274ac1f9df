"""The ``file://`` log store: a POSIX directory laid out exactly as C2SP tlog-tiles names
things, so any static web server pointed at it serves the log.

Every object appears atomically and durably, as Tessera's POSIX driver does it: the bytes go
to a temporary file under ``.state/tmp/`` (same filesystem, never served as a log
resource), which is fsynced, then renamed (``write``) or hard-linked (``create``: the link
fails if the name exists) to its name, and the directory is fsynced. Directories created on
the way are fsynced into their parents. ``replace`` holds an exclusive ``flock`` on
``.state/lock`` while it compares the current content's hash with the expected version and
renames the new bytes in: processes of one machine, or of machines sharing one POSIX
filesystem with working ``flock`` (not NFS, not s3fs), agree on it.

Versions are the SHA-256 of the content. Blocking file system calls run in a thread, never on
the event loop.

A flock belongs to the open file, and a process forked while the lock is held shares it: the
worker forks (RQ's scheduler for as long as it runs, a work horse per job) while its
integrator thread may hold the lock, and a child that kept the descriptor would hold the lock
until it exits, stopping every replace of every process. So the lock's descriptors are
closed in every child forked with them (``os.register_at_fork``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

from execution_proof.kv.logstore.objects import Blob, LogStoreError, ObjectStore
from execution_proof.runtime import failpoints

TMP_DIR = ".state/tmp"
LOCK_FILE = ".state/lock"
DIR_MODE = 0o755
FILE_MODE = 0o644
P = ParamSpec("P")
T = TypeVar("T")

_lock_fds: set[int] = set()
"""Descriptors of ``.state/lock`` this process has open (held or waited for)."""
_lock_fds_guard = threading.Lock()
"""Held while a descriptor is opened and recorded, or forgotten and closed, and around every
fork: a child is never forked between the two, so it knows every descriptor it inherited."""


def _close_inherited_lock_fds() -> None:
    global _lock_fds_guard
    for fd in _lock_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _lock_fds.clear()
    _lock_fds_guard = threading.Lock()  # the child's copy is held (by the fork); a fresh one


def _before_fork() -> None:
    _lock_fds_guard.acquire()


def _after_fork_in_parent() -> None:
    _lock_fds_guard.release()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_close_inherited_lock_fds
)


_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
"""This machine, in the name of each temporary file (``<host>-<pid>-<random>``): ``tidy``
leaves alone the files of writers that still run."""
TMP_STALE_S = 3600.0
"""A temporary file this old is left behind, whoever wrote it: a write takes milliseconds."""


def _left_behind(name: str, mtime: float, now: float) -> bool:
    """Whether a file of ``.state/tmp/`` belongs to no write in flight: not named as this
    store names them, written by a process of this machine that is gone, or older than
    ``TMP_STALE_S`` (another machine's writer, or a pid reused since)."""
    host, _, rest = name.partition("-")
    pid, _, token = rest.partition("-")
    if not (host and pid.isdigit() and token) or now - mtime > TMP_STALE_S:
        return True
    if host != _HOST:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileObjects(ObjectStore):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_absolute():
            raise LogStoreError(f"file:// log store: {root} is not an absolute path")
        self.url = f"file://{self.root}"

    # -- the interface (each call runs in a thread)

    async def read(self, name: str) -> Blob | None:
        return await self._run(self._read, name)

    async def write(self, name: str, data: bytes) -> None:
        await self._run(self._write, name, data)

    async def create(self, name: str, data: bytes) -> bool:
        return await self._run(self._create, name, data)

    async def replace(self, name: str, data: bytes, version: str) -> str | None:
        return await self._run(self._replace, name, data, version)

    async def delete(self, name: str) -> None:
        await self._run(self._delete, name)

    async def names(self, prefix: str, after: str = "", limit: int | None = None) -> list[str]:
        return await self._run(self._names, prefix, after, limit)

    async def tidy(self) -> int:
        """The files under ``.state/tmp/`` that a writer which died (or found the disk full)
        between writing and renaming left: those of processes of this machine that are gone,
        those not named as this store names them, and any older than an hour. The files of
        writes in flight are left alone."""
        return await self._run(self._tidy)

    async def _run(self, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await asyncio.to_thread(func, *args, **kwargs)
        except OSError as exc:
            raise LogStoreError(f"log store {self.url}: {exc.strerror or exc} ({exc.filename or ''})") from exc

    # -- blocking work

    def _path(self, name: str) -> Path:
        parts = name.split("/")
        if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise LogStoreError(f"log store: {name!r} is not an object name")
        return self.root.joinpath(*parts)

    def _read(self, name: str) -> Blob | None:
        try:
            data = self._path(name).read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return None
        return Blob(data, _version(data))

    def _temporary(self, data: bytes) -> Path:
        """A fsynced file holding ``data`` under ``.state/tmp/``; none left on a failure
        (a full disk, say)."""
        tmp_dir = self.root / TMP_DIR
        _make_dirs(tmp_dir)
        path = tmp_dir / f"{_HOST}-{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return path

    def _tidy(self) -> int:
        removed = 0
        try:
            entries = list(os.scandir(self.root / TMP_DIR))
        except FileNotFoundError:
            return 0
        now = time.time()
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if _left_behind(entry.name, entry.stat().st_mtime, now):
                    os.unlink(entry.path)
                    removed += 1
        return removed

    def _write(self, name: str, data: bytes) -> None:
        target = self._path(name)
        _make_dirs(target.parent)
        temporary = self._temporary(data)
        try:
            os.rename(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        _sync_dir(target.parent)

    def _create(self, name: str, data: bytes) -> bool:
        target = self._path(name)
        _make_dirs(target.parent)
        temporary = self._temporary(data)
        try:
            os.link(temporary, target)
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)
        _sync_dir(target.parent)
        return True

    def _replace(self, name: str, data: bytes, version: str) -> str | None:
        with self._locked():
            current = self._read(name)
            if current is None or current.version != version:
                return None
            self._write(name, data)
        return _version(data)

    def _delete(self, name: str) -> None:
        target = self._path(name)
        with self._locked():
            try:
                target.unlink()
            except FileNotFoundError:
                return
            if target.parent.name.endswith(".p"):
                # The partial tiles of a tile that is full now: their directory goes with them.
                with contextlib.suppress(OSError):
                    target.parent.rmdir()
                    _sync_dir(target.parent.parent)
                    return
        _sync_dir(target.parent)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with failpoints.store_lock(), self._flocked():
            yield

    @contextlib.contextmanager
    def _flocked(self) -> Iterator[None]:
        path = self.root / LOCK_FILE
        _make_dirs(path.parent)
        with _lock_fds_guard:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            _lock_fds.add(fd)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    break
                except InterruptedError:
                    continue
            yield
        finally:
            with _lock_fds_guard:
                _lock_fds.discard(fd)
                os.close(fd)  # closing the descriptor releases the flock (no child shares it)

    def _names(self, prefix: str, after: str, limit: int | None) -> list[str]:
        directory, _, _ = prefix.rpartition("/")
        start = self.root / directory if directory else self.root
        found: list[str] = []
        for name in _walk(start, f"{directory}/" if directory else "", prefix, after):
            if limit is not None and len(found) >= limit:
                break
            found.append(name)
        return found


def _walk(path: Path, base: str, prefix: str, after: str) -> Iterator[str]:
    """Names under ``path`` (whose names start with ``base``) that start with ``prefix`` and
    sort after ``after``, in bytewise order: a directory's entries are sorted with a ``/``
    after directory names, as their full names sort."""
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return
    keyed = []
    for entry in entries:
        is_dir = entry.is_dir(follow_symlinks=False)
        name = base + entry.name + ("/" if is_dir else "")
        if name.rstrip("/") == TMP_DIR or name == LOCK_FILE:
            continue
        keyed.append((name.encode(), name, is_dir, entry.path))
    keyed.sort()
    for _, name, is_dir, entry_path in keyed:
        if is_dir:
            # Skip a directory whose every name sorts before ``after`` or misses ``prefix``.
            if not (name.startswith(prefix) or prefix.startswith(name)):
                continue
            if after and name < after and not after.startswith(name):
                continue
            yield from _walk(Path(entry_path), name, prefix, after)
        elif name.startswith(prefix) and name > after:
            yield name


def _make_dirs(path: Path) -> None:
    """``mkdir -p``, each new directory fsynced into its parent (so it survives a crash)."""
    if path.is_dir():
        return
    _make_dirs(path.parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    _sync_dir(path.parent)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems cannot fsync a directory; the rename stands
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
