"""The store's part of the transparency log (docs/log.md): the queues a create appends to,
the tree state the integrator advances with compare-and-set scripts, and the tiles and entry
bundles it writes and the routes read.

A batch goes through three phases, each ended by a script on the state key, so that any
integrator can finish a batch another one started (after a crash or a lost lock) and get
the same bytes: ``reserve`` (size and root advance, the journal names each project's
entries), ``tiles`` (tiles and bundles written with SETRANGE at fixed offsets, then the
checkpoint is published), ``ack`` (each project's entries leave its queue, their indices
recorded), then done.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kv import keys
from kv.link import Link, LuaScript
from kv.records import _unavailable_as_503


class LogStore:
    """The log's part of ``Store`` (kv/store.py), which holds the client and the scripts."""

    client: Any
    link: Link
    _log_reserve: LuaScript
    _log_advance: LuaScript
    _log_ack: LuaScript
    _log_lock: LuaScript

    # -- reading, for the routes and the integrator

    @_unavailable_as_503
    async def log_state(self, origin: str) -> dict[str, bytes]:
        reply = await self.link.send("HGETALL", keys.log_state_key(origin))
        if isinstance(reply, dict):
            return {_text(k): v for k, v in reply.items()}
        return {_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}

    @_unavailable_as_503
    async def log_checkpoint(self, origin: str) -> bytes | None:
        value: bytes | None = await self.link.send("HGET", keys.log_state_key(origin), "checkpoint")
        return value

    @_unavailable_as_503
    async def log_tile(self, origin: str, level: int, index: int, width: int) -> bytes:
        """The first ``width`` hashes of a tile (shorter when the store has fewer)."""
        value: bytes = await self.link.send("GETRANGE", keys.log_tile_key(origin, level, index), 0, width * 32 - 1)
        return value

    @_unavailable_as_503
    async def log_tiles(self, origin: str, wanted: list[tuple[int, int, int]]) -> list[bytes]:
        """Several tiles at once (one round trip): (level, index, width) each."""
        sends = [
            self.link.send("GETRANGE", keys.log_tile_key(origin, level, index), 0, width * 32 - 1)
            for level, index, width in wanted
        ]
        return list(await asyncio.gather(*sends))

    @_unavailable_as_503
    async def log_bundle(self, origin: str, index: int) -> bytes:
        value: bytes | None = await self.link.send("GET", keys.log_bundle_key(origin, index))
        return value or b""

    @_unavailable_as_503
    async def log_index(self, receipt_id: str) -> int | None:
        value = await self.link.send("HGET", keys.log_index_key(receipt_id), keys.receipt_id_bytes(receipt_id))
        return int(value) if value is not None else None

    @_unavailable_as_503
    async def log_dirty_projects(self, count: int) -> list[str]:
        members = await self.link.send("SRANDMEMBER", keys.LOG_DIRTY_KEY, count)
        return sorted(_text(m) for m in members)

    @_unavailable_as_503
    async def log_queued(self, project_ids: list[str], limit: int) -> dict[str, list[bytes]]:
        """Up to ``limit`` queued entries of each project, oldest first."""
        sends = [self.link.send("LRANGE", keys.log_queue_key(pid), 0, limit - 1) for pid in project_ids]
        replies = await asyncio.gather(*sends)
        return {pid: list(entries) for pid, entries in zip(project_ids, replies, strict=True)}

    @_unavailable_as_503
    async def log_queue_lengths(self, project_ids: list[str]) -> dict[str, int]:
        """How many entries each project's queue holds (one round trip)."""
        sends = [self.link.send("LLEN", keys.log_queue_key(pid)) for pid in project_ids]
        return {pid: int(n) for pid, n in zip(project_ids, await asyncio.gather(*sends), strict=True)}

    @_unavailable_as_503
    async def log_witness_sizes(self, origin: str) -> dict[str, int]:
        reply = await self.link.send("HGETALL", keys.log_witnesses_key(origin))
        pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
        return {_text(name): int(size) for name, size in pairs}

    @_unavailable_as_503
    async def log_witness_size(self, origin: str, witness: str, size: int) -> None:
        await self.link.send("HSET", keys.log_witnesses_key(origin), witness, size)

    # -- time-stamps (jobs/log_timestamps.py writes, the routes read)

    @_unavailable_as_503
    async def log_stamp(self, origin: str, size: int) -> bytes | None:
        value: bytes | None = await self.link.send("GET", keys.log_stamp_key(origin, size))
        return value

    @_unavailable_as_503
    async def log_stamp_covering(self, origin: str, index: int, tries: int = 8) -> tuple[int, bytes] | None:
        """The first time-stamped checkpoint whose tree holds entry ``index`` (size > index)
        and its record; None when there is none (yet, or any more). Sizes whose record has
        expired are dropped from the set on the way."""
        for _ in range(tries):
            members = await self.link.send(
                "ZRANGEBYSCORE", keys.log_stamps_key(origin), f"({index}", "+inf", "LIMIT", 0, 1
            )
            if not members:
                return None
            size = int(members[0])
            record = await self.log_stamp(origin, size)
            if record is not None:
                return size, record
            await self.link.send("ZREM", keys.log_stamps_key(origin), members[0])
        return None

    @_unavailable_as_503
    async def log_last_stamped(self, origin: str) -> int:
        members = await self.link.send("ZRANGE", keys.log_stamps_key(origin), -1, -1)
        return int(members[0]) if members else 0

    @_unavailable_as_503
    async def log_stamp_claim(self, origin: str, token: str, hold_ms: int) -> bool:
        """Claim this interval's stamping (SET NX PX): true for one caller per interval."""
        return bool(await self.link.send("SET", keys.log_stamping_key(origin), token, "NX", "PX", hold_ms))

    @_unavailable_as_503
    async def log_stamp_save(self, origin: str, size: int, record: bytes, ttl_s: int) -> None:
        """Keep a checkpoint's time-stamps for ``ttl_s``: the record first, then its size in
        the set (a reader that finds the size finds the record until it expires), then the
        oldest sizes whose records have expired leave the set."""
        await self.link.send("SET", keys.log_stamp_key(origin, size), record, "EX", ttl_s)
        await self.link.send("ZADD", keys.log_stamps_key(origin), size, size)
        oldest = await self.link.send("ZRANGE", keys.log_stamps_key(origin), 0, 15)
        for member in oldest:
            if await self.link.send("EXISTS", keys.log_stamp_key(origin, int(member))):
                break
            await self.link.send("ZREM", keys.log_stamps_key(origin), member)

    # -- writing, for the integrator

    @_unavailable_as_503
    async def log_lock(self, origin: str, token: str, action: str, hold_ms: int) -> bool:
        reply = await self.link.run_script(self._log_lock, [keys.log_lock_key(origin)], [token, action, hold_ms])
        return bool(int(reply))

    @_unavailable_as_503
    async def log_reserve(
        self, origin: str, size: int, root: bytes, new_size: int, new_root: bytes, batch: bytes
    ) -> bool:
        args: list[str | bytes] = [str(size), root if size else b"", str(new_size), new_root, batch]
        reply = await self.link.run_script(self._log_reserve, [keys.log_state_key(origin)], args)
        return bool(int(reply))

    @_unavailable_as_503
    async def log_write(
        self, origin: str, tiles: dict[tuple[int, int], tuple[int, bytes]], bundles: dict[int, tuple[int, bytes]]
    ) -> None:
        """Write tile and bundle bytes at their offsets (SETRANGE: a repeat writes the same
        bytes, and never shortens what a later batch wrote after them)."""
        sends = [
            self.link.send("SETRANGE", keys.log_tile_key(origin, level, index), offset, data)
            for (level, index), (offset, data) in tiles.items()
        ]
        sends += [
            self.link.send("SETRANGE", keys.log_bundle_key(origin, index), offset, data)
            for index, (offset, data) in bundles.items()
        ]
        await asyncio.gather(*sends)

    @_unavailable_as_503
    async def log_publish(self, origin: str, size: int, checkpoint: bytes) -> bool:
        reply = await self.link.run_script(
            self._log_advance, [keys.log_state_key(origin)], [str(size), "tiles", checkpoint]
        )
        return bool(int(reply))

    @_unavailable_as_503
    async def log_finish(self, origin: str, size: int) -> bool:
        reply = await self.link.run_script(self._log_advance, [keys.log_state_key(origin)], [str(size), "ack", ""])
        return bool(int(reply))

    @_unavailable_as_503
    async def log_ack(self, project_id: str, entries: list[bytes], receipt_ids: list[str], first_index: int) -> bool:
        """Take ``entries`` (the head of the project's queue) off it and record each receipt's
        index; a repeat finds them gone and does nothing."""
        reply = await self.link.run_script(
            self._log_ack,
            [keys.log_queue_key(project_id), keys.log_index_key(receipt_ids[0])],
            [len(entries), entries[-1], first_index, *(keys.receipt_id_bytes(r) for r in receipt_ids)],
        )
        return bool(int(reply))

    @_unavailable_as_503
    async def log_tidy_dirty(self, project_id: str, now_ms: int) -> None:
        """Drop the project from the dirty set unless its queue holds entries.

        A create marks its project, then queues its entry in another call: a create whose
        mark came just before the removal may queue after this looks. So the project is
        also put on the recheck list (first, so a crash cannot skip it), and
        ``log_recheck`` looks again once any such create has long finished."""
        await self.link.send("ZADD", keys.LOG_RECHECK_KEY, now_ms, project_id)
        await self.link.send("SREM", keys.LOG_DIRTY_KEY, project_id)
        if int(await self.link.send("LLEN", keys.log_queue_key(project_id))):
            await self.link.send("SADD", keys.LOG_DIRTY_KEY, project_id)

    @_unavailable_as_503
    async def log_recheck(self, before_ms: int, count: int = 256) -> int:
        """Look again at projects dropped before ``before_ms``: one whose queue holds entries
        goes back on the dirty set. Returns how many went back."""
        members = await self.link.send("ZRANGEBYSCORE", keys.LOG_RECHECK_KEY, 0, before_ms, "LIMIT", 0, count)
        back = 0
        for member in members:
            project_id = _text(member)
            if int(await self.link.send("LLEN", keys.log_queue_key(project_id))):
                await self.link.send("SADD", keys.LOG_DIRTY_KEY, project_id)
                back += 1
            await self.link.send("ZREM", keys.LOG_RECHECK_KEY, project_id)
        return back


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
