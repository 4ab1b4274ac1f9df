"""The one narrow interface every log-store backend implements: named immutable-or-replaced
objects, written whole, atomically and durably, with two conditional writes (create only if
absent; replace only if unchanged) on which the log's compare-and-swap rests.

Backends: ``memory`` (embedded mode, unit tests), ``file://`` (a POSIX directory: every
object appears by write, fsync, rename; conditional writes under a lock file) and
``s3://`` (S3-compatible object storage: conditional writes with ``If-None-Match`` and
``If-Match``). Names are relative paths with ``/`` separators (``tile/0/x001/234``,
``.state/tree``); the code that sequences the log never knows which backend it writes to.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from execution_proof.transparency.errors import LogError


class LogStoreError(LogError):
    """The log store could not do what was asked (unreachable, refused, out of space). The
    message names the store and the object, never a credential."""


@dataclass(frozen=True)
class Blob:
    """An object's bytes and its version: an opaque token that changes whenever the object
    is replaced (a content hash, an S3 ETag), for ``replace``."""

    data: bytes
    version: str


class ObjectStore(abc.ABC):
    url: str
    """Where the store is, as configured (``LOG_STORE``), without credentials: for messages."""

    @abc.abstractmethod
    async def read(self, name: str) -> Blob | None:
        """The object and its version, or None when there is none."""

    @abc.abstractmethod
    async def write(self, name: str, data: bytes) -> None:
        """Create or replace the object, atomically (a reader sees the old bytes or the new,
        never a part) and durably (it survives a crash once this returns)."""

    @abc.abstractmethod
    async def create(self, name: str, data: bytes) -> bool:
        """Create the object only if there is none by that name: True when created, False
        when one exists (its bytes untouched). Atomic and durable like ``write``."""

    @abc.abstractmethod
    async def replace(self, name: str, data: bytes, version: str) -> str | None:
        """Replace the object only if its version is still ``version``: the new version, or
        None when it changed (or is gone) meanwhile. Atomic and durable like ``write``."""

    @abc.abstractmethod
    async def delete(self, name: str) -> None:
        """Remove the object; nothing happens when there is none."""

    @abc.abstractmethod
    async def names(self, prefix: str, after: str = "", limit: int | None = None) -> list[str]:
        """Names that start with ``prefix`` and sort (bytewise) after ``after`` (a full name,
        or "" for all), in that order, at most ``limit`` of them."""

    async def tidy(self) -> int:
        """Remove what a writer that died mid-write left behind (temporary files); how many.
        Run when a process that writes the log starts."""
        return 0

    async def close(self) -> None:  # noqa: B027 - most backends hold nothing to close
        """Release connections and handles."""
