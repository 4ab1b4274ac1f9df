"""Merkle hashes of the published log, read from the store's tiles (docs/log.md).

``LogReader.compute(size, fn)`` runs ``fn`` on a ``receipts.tlog.TileHashes`` view of the
tree of ``size``; each tile the computation finds missing is fetched and the computation
run again (it is cheap; a proof needs a handful of tiles). Full tiles never change, so they
are kept in a small in-process LRU; partial ones are read fresh.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from receipts import tlog

T = TypeVar("T")
FULL_TILE_CACHE = 512  # 4 MiB of full tiles per process
MAX_FETCHES = 64


class LogDataMissing(RuntimeError):
    """A tile the published tree needs is not in the store (its data was lost)."""


class LogReader:
    def __init__(self, store: Any, origin: str) -> None:
        self.store = store
        self.origin = origin
        self._full: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    async def compute(self, size: int, fn: Callable[[tlog.TileHashes], T]) -> T:
        fetched: dict[tuple[int, int, int], bytes] = {}

        def read(level: int, index: int, width: int) -> bytes:
            if width == tlog.TILE_WIDTH and (level, index) in self._full:
                self._full.move_to_end((level, index))
                return self._full[(level, index)]
            if (level, index, width) in fetched:
                return fetched[(level, index, width)]
            raise tlog.MissingTile(level, index, width)

        for _ in range(MAX_FETCHES):
            try:
                return fn(tlog.TileHashes(size, read))
            except tlog.MissingTile as missing:
                data = await self.store.log_tile(self.origin, missing.level, missing.index, missing.width)
                if len(data) < missing.width * tlog.HASH_SIZE:
                    raise LogDataMissing(
                        f"tile {tlog.tile_path(missing.level, missing.index, missing.width)} of the log is missing "
                        f"from the store ({len(data)} of {missing.width * tlog.HASH_SIZE} bytes)"
                    ) from None
                fetched[(missing.level, missing.index, missing.width)] = data
                if missing.width == tlog.TILE_WIDTH:
                    self._full[(missing.level, missing.index)] = data
                    while len(self._full) > FULL_TILE_CACHE:
                        self._full.popitem(last=False)
        raise LogDataMissing("a log computation needed more tiles than any proof does")

    async def edge(self, size: int) -> dict[int, list[bytes]]:
        """The right-edge partial tiles of the tree of ``size`` (what ``tlog.extend`` needs)."""
        wanted = tlog.edge_tiles(size)
        datas = await self.store.log_tiles(self.origin, wanted) if wanted else []
        edge = {}
        for (level, index, width), data in zip(wanted, datas, strict=True):
            if len(data) < width * tlog.HASH_SIZE:
                raise LogDataMissing(f"the log's edge tile {tlog.tile_path(level, index, width)} is missing")
            edge[level] = tlog.split_tile(data[: width * tlog.HASH_SIZE])
        return edge

    async def bundle_prefix_length(self, size: int) -> int:
        """Bytes taken in the last entry bundle by the entries before ``size``."""
        index, count = divmod(size, tlog.TILE_WIDTH)
        if count == 0:
            return 0
        data = await self.store.log_bundle(self.origin, index)
        entries = _first_entries(data, count)
        if entries is None:
            raise LogDataMissing(f"the log's entry bundle {tlog.tile_path('entries', index, count)} is missing")
        return entries


def _first_entries(data: bytes, count: int) -> int | None:
    """Bytes of the first ``count`` entries of a bundle, or None when it holds fewer."""
    at = 0
    for _ in range(count):
        if at + 2 > len(data):
            return None
        at += 2 + int.from_bytes(data[at : at + 2], "big")
        if at > len(data):
            return None
    return at


def bundle_slice(data: bytes, count: int) -> bytes | None:
    """The first ``count`` entries of a stored bundle (what ``.p/<count>`` serves)."""
    end = _first_entries(data, count)
    return None if end is None else data[:end]
