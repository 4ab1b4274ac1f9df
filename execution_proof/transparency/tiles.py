"""Reading a tiled log (C2SP tlog-tiles) from wherever it is served: the service's log store,
a directory behind a plain web server, a CDN. Pure: the caller hands in ``fetch``, which
returns the bytes at a path under the log's prefix (``checkpoint``,
``tile/0/x001/234.p/7``, ``tile/entries/005``) or None when there is nothing there. The
server and ``verify`` read through this one reader (the monitor reads bundle by bundle as it
hashes, transparency/monitor.py).

- A partial tile or entry bundle that is gone is read as the prefix of the full one: a log
  may delete partial tiles once the full tile exists (tlog-tiles, "Partial Tiles").
- Full tiles never change, so they are kept in a small LRU; partial ones are read fresh.
- A computation (a root, an inclusion or consistency proof) first works out every tile it
  needs (``tlog.tiles_needed``), fetches them all at once, then runs.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from execution_proof.transparency import tlog
from execution_proof.transparency.errors import LogError

T = TypeVar("T")
Fetch = Callable[[str], Awaitable[bytes | None]]
FULL_TILE_CACHE = 512  # 4 MiB of full hash tiles
CONCURRENCY = 16


class TileMissing(LogError, LookupError):
    """A tile or entry bundle the tree of the given size needs cannot be read (absent, or
    shorter than its width): the log lost data, or the reader was pointed at the wrong place."""

    def __init__(self, path: str, detail: str = "is missing") -> None:
        super().__init__(f"{path} {detail}")
        self.path = path


def tile_name(level: int | str, index: int, width: int = tlog.TILE_WIDTH) -> str:
    """The path of a hash tile (``level`` an int) or an entry bundle (``"entries"``) under
    the log's prefix, as tlog-tiles names it."""
    return "tile/" + tlog.tile_path(level, index, width)


class TileReader:
    def __init__(self, fetch: Fetch, *, cache: int = FULL_TILE_CACHE, concurrency: int = CONCURRENCY) -> None:
        self._fetch = fetch
        self._cache_size = cache
        self._full: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._gate = asyncio.Semaphore(concurrency)

    async def _read(self, level: int | str, index: int, width: int) -> bytes | None:
        """The resource's bytes, the full one's standing in for a partial one that is gone."""
        async with self._gate:
            data = await self._fetch(tile_name(level, index, width))
            if data is None and width < tlog.TILE_WIDTH:
                data = await self._fetch(tile_name(level, index))
        return data

    async def tile(self, level: int, index: int, width: int) -> bytes:
        """The first ``width`` hashes of hash tile ``index`` of ``level``; ``TileMissing``."""
        if width == tlog.TILE_WIDTH and (level, index) in self._full:
            self._full.move_to_end((level, index))
            return self._full[(level, index)]
        data = await self._read(level, index, width)
        if data is None or len(data) < width * tlog.HASH_SIZE:
            held = "is missing" if data is None else f"holds {len(data)} bytes, not {width * tlog.HASH_SIZE}"
            raise TileMissing(tile_name(level, index, width), held)
        data = data[: width * tlog.HASH_SIZE]
        if width == tlog.TILE_WIDTH:
            self._full[(level, index)] = data
            while len(self._full) > self._cache_size:
                self._full.popitem(last=False)
        return data

    async def bundle(self, index: int, width: int) -> list[bytes]:
        """The first ``width`` entries of entry bundle ``index``; ``TileMissing`` when it
        cannot be read or holds fewer (``tlog.ProofError`` when it is not a bundle at all)."""
        data = await self._read("entries", index, width)
        if data is None:
            raise TileMissing(tile_name("entries", index, width))
        entries = tlog.split_bundle(data)
        if len(entries) < width:
            raise TileMissing(tile_name("entries", index, width), f"holds {len(entries)} entries, not {width}")
        return entries[:width]

    async def tiles(self, wanted: Sequence[tuple[int, int, int]]) -> dict[tuple[int, int, int], bytes]:
        """Several tiles at once: (level, index, width) -> their bytes."""
        datas = await asyncio.gather(*(self.tile(*one) for one in wanted))
        return dict(zip(wanted, datas, strict=True))

    async def compute(self, size: int, fn: Callable[[tlog.TileHashes], T]) -> T:
        """``fn`` over the tree of ``size``, its tiles fetched first, all at once."""
        fetched = await self.tiles(tlog.tiles_needed(size, fn))
        return fn(tlog.TileHashes(size, lambda level, index, width: fetched[(level, index, width)]))

    async def edge(self, size: int) -> dict[int, list[bytes]]:
        """The right-edge partial tiles of the tree of ``size`` (what ``tlog.extend`` needs)."""
        fetched = await self.tiles(tlog.edge_tiles(size))
        return {level: tlog.split_tile(data) for (level, _, _), data in fetched.items()}


async def check_tree(
    reader: TileReader, size: int, root: bytes, on_entries: Callable[[int, list[bytes]], None] | None = None
) -> None:
    """Check a whole published tree in one pass, linear in its size, holding a few tiles at a
    time: every entry hashes to its leaf in the level-0 tile, every full tile of every level
    hashes to its place in the level above, and the edge hashes to ``root``. ``on_entries``
    sees each bundle's entries (first index, entries) as they pass. ``tlog.ProofError`` names
    the first thing that does not hold; ``TileMissing`` what cannot be read."""
    level = 0
    edge: dict[int, list[bytes]] = {}
    while size >> (tlog.TILE_HEIGHT * level):
        count = size >> (tlog.TILE_HEIGHT * level)
        parent: tuple[int, list[bytes]] | None = None
        for index in range((count + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
            width = tlog.tile_width(size, level, index)
            hashes = tlog.split_tile(await reader.tile(level, index, width))
            if level == 0:
                entries = await reader.bundle(index, width)
                for offset, entry in enumerate(entries):
                    if tlog.leaf_hash(entry) != hashes[offset]:
                        raise tlog.ProofError(f"entry {index * tlog.TILE_WIDTH + offset} does not hash to its leaf")
                if on_entries is not None:
                    on_entries(index * tlog.TILE_WIDTH, entries)
            if width < tlog.TILE_WIDTH:
                edge[level] = hashes
                continue
            up = index // tlog.TILE_WIDTH
            if parent is None or parent[0] != up:
                up_width = tlog.tile_width(size, level + 1, up)
                parent = (up, tlog.split_tile(await reader.tile(level + 1, up, up_width)))
            if tlog.merkle_root(hashes) != parent[1][index % tlog.TILE_WIDTH]:
                raise tlog.ProofError(f"tile {tile_name(level, index)} does not hash to its place in level {level + 1}")
        level += 1
    if tlog.root_from_edge(size, edge) != root:
        raise tlog.ProofError(f"the tiles of the tree of size {size} do not hash to its root")
