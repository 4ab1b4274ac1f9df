"""The in-memory log store: embedded mode without ``LOG_STORE``, and unit tests. Nothing
survives the process; every other property of the interface holds (versions, conditional
writes, sorted listing)."""

from __future__ import annotations

import bisect
import itertools
import threading

from execution_proof.kv.logstore.objects import Blob, ObjectStore


class MemoryObjects(ObjectStore):
    def __init__(self) -> None:
        self.url = "memory:"
        self._objects: dict[str, Blob] = {}
        self._names: list[str] = []
        self._versions = itertools.count(1)
        # The embedded server and a test's helpers may share one store across threads.
        self._lock = threading.Lock()

    def _put(self, name: str, data: bytes) -> str:
        version = str(next(self._versions))
        if name not in self._objects:
            bisect.insort(self._names, name)
        self._objects[name] = Blob(bytes(data), version)
        return version

    async def read(self, name: str) -> Blob | None:
        return self._objects.get(name)

    async def write(self, name: str, data: bytes) -> None:
        with self._lock:
            self._put(name, data)

    async def create(self, name: str, data: bytes) -> bool:
        with self._lock:
            if name in self._objects:
                return False
            self._put(name, data)
            return True

    async def replace(self, name: str, data: bytes, version: str) -> str | None:
        with self._lock:
            current = self._objects.get(name)
            if current is None or current.version != version:
                return None
            return self._put(name, data)

    async def delete(self, name: str) -> None:
        with self._lock:
            if self._objects.pop(name, None) is not None:
                self._names.pop(bisect.bisect_left(self._names, name))

    async def names(self, prefix: str, after: str = "", limit: int | None = None) -> list[str]:
        with self._lock:
            start = max(bisect.bisect_left(self._names, prefix), bisect.bisect_right(self._names, after))
            found: list[str] = []
            for name in itertools.islice(self._names, start, None):
                if not name.startswith(prefix) or (limit is not None and len(found) >= limit):
                    break
                found.append(name)
            return found
