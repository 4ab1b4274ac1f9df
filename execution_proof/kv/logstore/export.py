"""``log export``: copy a log from one store to another and verify the copy (docs/log.md,
"Moving a log"). The verb is cli/log_ops.py.

Every entry is copied as bytes and checked against its leaf, whatever its kind (a receipt's
entry, the dsse leaf of its attestation right after it, a key certificate or revocation):
a copy holds the same tree. The only entries read for what they say are the receipt entries,
for the newest receipt's time the copy's tree state keeps (``newest_created_ms``: a dsse
leaf or a key entry names no receipt)."""

from __future__ import annotations

import asyncio

import orjson

from execution_proof.kv.logstore.log import (
    LEASE,
    STAGING,
    STAMPED,
    STATE,
    TIMESTAMPS,
    TREE,
    LogStore,
    LogStoreConflict,
    TreeState,
    checkpoint_size,
    newest_created_ms,
    size_name,
)
from execution_proof.transparency import note, tlog
from execution_proof.transparency.errors import LogError
from execution_proof.transparency.tiles import TileMissing, TileReader, check_tree

COPY_CONCURRENCY = 16


class ExportFailed(LogError):
    """The copy does not verify (exit 1)."""


class CannotExport(LogError):
    """The export cannot run (exit 2)."""


async def export(source: LogStore, target: LogStore) -> dict[str, str | int]:
    """Copy ``source``'s log up to its checkpoint as of now into ``target`` (empty, or holding
    a prefix of the same log), then verify the copy as any outsider would, reading it back:
    every entry, every tile, the root, the checkpoint's signature. The tree state and the
    checkpoint are written last, so the target is a complete log of the old size until the
    new one is."""
    identity = await source.identity()
    raw = await source.checkpoint()
    if identity is None or raw is None:
        raise CannotExport(f"{source.url} holds no log (no .state/identity or no checkpoint)")
    try:
        checkpoint, _ = note.open_checkpoint(raw, note.Verifier.parse(identity.vkey))
    except note.NoteError as exc:
        raise CannotExport(f"the checkpoint of {source.url} does not verify under its own identity: {exc}") from exc
    theirs = await target.identity()
    if theirs is not None and theirs != identity:
        raise ExportFailed(f"{target.url} holds another log ({theirs.origin}, {theirs.vkey})")
    held = await target.tree()
    size, root = checkpoint.size, checkpoint.root
    reader = TileReader(source.fetch)
    if held is not None and held.size > size:
        raise ExportFailed(f"{target.url} holds {held.size} entries, more than the {size} being exported")
    if held is not None and held.size:
        try:
            old_root = await reader.compute(size, lambda view: view.mth(0, held.size))
        except (TileMissing, tlog.ProofError) as exc:
            raise CannotExport(f"cannot read {source.url}: {exc}") from exc
        if old_root != held.root:
            raise ExportFailed(f"{target.url} holds a tree of size {held.size} that is not a prefix of this log")

    gate = asyncio.Semaphore(COPY_CONCURRENCY)

    async def copy_tile(level: int | str, index: int, width: int) -> None:
        async with gate:
            if level == "entries":
                data = b"".join(tlog.bundle_entry(e) for e in await reader.bundle(index, width))
            else:
                data = await reader.tile(int(level), index, width)
            await target.write_tile(level, index, data, width)

    copies = []
    level = 0
    while size >> (tlog.TILE_HEIGHT * level):
        count = size >> (tlog.TILE_HEIGHT * level)
        for index in range((count + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
            width = tlog.tile_width(size, level, index)
            copies.append(copy_tile(level, index, width))
            if level == 0:
                copies.append(copy_tile("entries", index, width))
        level += 1
    try:
        await asyncio.gather(*copies)
    except LogStoreConflict as exc:
        raise ExportFailed(str(exc)) from exc
    except TileMissing as exc:
        raise CannotExport(f"cannot read {source.url}: {exc}") from exc

    kept, stamped = 0, 0
    for name in await source.objects.names(STATE):
        if not _exported_state(name, size):
            continue
        blob = await source.objects.read(name)
        if blob is not None:
            await target.objects.write(name, blob.data)
            kept += 1
            if name.startswith(TIMESTAMPS):
                stamped = int(name.removeprefix(TIMESTAMPS).replace("/", ""))
    if stamped:
        await target.objects.write(STAMPED, orjson.dumps({"size": stamped}))

    newest = 0

    def note_entries(first: int, entries: list[bytes]) -> None:
        nonlocal newest
        newest = max(newest, newest_created_ms(entries))

    try:
        await check_tree(TileReader(target.fetch), size, root, note_entries)
    except (tlog.ProofError, TileMissing) as exc:
        raise ExportFailed(f"the copy in {target.url} does not verify: {exc}") from exc
    if await target.replace_tree(held, TreeState(size, root, newest)) is None:
        raise ExportFailed(f"{target.url}'s tree state changed while the export ran")
    await target.publish(raw)
    if checkpoint_size(await target.checkpoint() or b"") != size:
        raise ExportFailed(f"{target.url}'s checkpoint is not the exported one")
    return {"from": source.url, "to": target.url, "size": size, "state_objects": kept}


def _exported_state(name: str, size: int) -> bool:
    """The ``.state/`` objects an export copies: identity, witnesses, halt, resumes, time-
    stamps of the exported checkpoints. Not the tree state (written last, from the copy),
    the newest stamped size (written from what was copied), the lease or staged batches,
    which belong to the source's integrator. A driver's own files (the ``file://`` driver's
    temporary files and lock) are never among the names it lists."""
    if name in (TREE, LEASE, STAMPED) or name.startswith(STAGING):
        return False
    return not (name.startswith(TIMESTAMPS) and name > size_name(TIMESTAMPS, size))
