"""Evidence beyond the tree is a refusal (docs/log.md, "A new log, a refused store").

A store holds a tile or an entry bundle beyond its tree state only if it once held a larger
tree: no batch writes a tile before its staging won on the tree state, and the tree state
never goes back by itself. So such a file means that ``.state/`` (and with it, the published
``checkpoint``) was put back from an older copy while the newer files stayed, as ``cp -a
BACKUP/. STORE/`` leaves them. The anchor (the checkpoint) cannot see it then: the tree state
and the checkpoint agree. Integrating on would sign checkpoints of another history over the
one already published, and every proof given for the entries past the copy would name other
entries. The integrator looks at its start (every read of the store) and before it stages a
batch; it refuses, exactly as it refuses a ``.state/`` behind the checkpoint.

What it looks at, for a tree of size N (the new size of the batch the tree state names, if
any: a finisher writes its files again, with the same bytes): a few listings and reads,
never a listing of the store, so the same on ``file://`` and ``s3://``:

- at each level L the tree has hashes in (up to the first whose edge is tile 0), one listing
  of the edge tile's partial widths, ``tile/L/<N // 256**(L+1)>.p/``: a width larger than the
  tree's there is beyond it. Partial tiles of smaller widths, and those of tiles before the
  edge, are at or below the tree: a stale writer may create them again after their full tile
  exists (docs/log.md, "Fencing");
- one listing of the edge bundle's partial widths, ``tile/entries/<N // 256>.p/``, likewise;
- one read each of the full level-0 tile and the full bundle at the edge index (a GET, which
  for an absent object costs what a HEAD does): both exist only in a tree larger than N.

No read of a full tile at a higher level's edge: one exists only in a tree of at least
256**(L+1) * (its index + 1) entries, which is also a tree whose level-0 tile at N's edge is
full, and full tiles are never deleted, so the level-0 read already sees every such tree. The
listings of higher levels see nothing the level-0 ones miss either (a larger tree within the
same level-0 tile has the same hashes above it); they are one call a level, and still catch a
larger tree whose level-0 files were removed by hand.

Calls per look, made at once: one listing per level (one level below 256 entries, two below
65,536, three below 2**24; at most eight) plus three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from execution_proof.jobs.log_config import refuse
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.log import TreeState
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import tile_name


async def find_evidence_beyond(log_store: LogStore, size: int) -> str | None:
    """The name of the first tile or entry bundle found in the store beyond a tree of
    ``size`` (a partial one wider than the tree's at its place, or a full one the tree has
    not reached), or None. ``LogStoreError`` when the store cannot be read."""
    looks: list[Awaitable[str | None]] = []
    level = 0
    while True:
        index, width = divmod(size >> (tlog.TILE_HEIGHT * level), tlog.TILE_WIDTH)
        looks.append(_wider(log_store, tile_name(level, index) + ".p/", width))
        if index == 0:
            break
        level += 1
    index, width = divmod(size, tlog.TILE_WIDTH)
    looks.append(_wider(log_store, tile_name("entries", index) + ".p/", width))
    for full in (tile_name(0, index), tile_name("entries", index)):
        looks.append(_present(log_store, full))
    found = await asyncio.gather(*looks)
    return next((name for name in found if name is not None), None)


async def _wider(log_store: LogStore, prefix: str, width: int) -> str | None:
    """The first partial tile under ``prefix`` (``…/<N>.p/``) wider than ``width``."""
    for name in await log_store.objects.names(prefix):
        tail = name[len(prefix) :]
        if tail.isdigit() and width < int(tail) < tlog.TILE_WIDTH:
            return name
    return None


async def _present(log_store: LogStore, name: str) -> str | None:
    return name if await log_store.fetch(name) is not None else None


async def refuse_evidence_beyond(
    log_store: LogStore, tree: TreeState, check_current: Callable[[TreeState, str], Awaitable[None]]
) -> None:
    """Refuse the store (``refuse``: recorded in ``.state/halt``, ``LogRefused`` raised) when
    it holds a file beyond ``tree`` (the tree state as the caller read it), naming the file.
    First ``check_current(tree, "evidence")`` reads the tree state again and raises when it
    moved (the integrator's ``Overtaken``): the caller was stale, and the files belong to the
    current, larger tree."""
    size = tree.size if tree.staged is None else tree.staged.new_size
    found = await find_evidence_beyond(log_store, size)
    if found is None:
        return
    await check_current(tree, "evidence")
    staged = "" if tree.staged is None else f", the batch staged on size {tree.size} included"
    raise await refuse(
        log_store,
        f"the log store {log_store.url} holds {found}, beyond its tree state (size {size}{staged}): the store "
        "held a larger tree, and .state/ and the checkpoint were put back from an older copy while newer files "
        "stayed (a copy over the live store?). Nothing is signed until the store is one copy again: put the "
        "whole copy back (rsync -a --delete), or move every file beyond the tree aside, then `log resume`",
    )
