"""Redis's part of the transparency log (docs/log.md): only what is in flight. The log itself
(tiles, bundles, checkpoints, its tree state) lives in the log store (kv/logstore).

- Each project's queue of entries waiting to be sequenced (filled by the create script, in
  chain order), the dirty set naming projects whose queue may hold entries, and the count
  of entries waiting (``LOG_MAX_PENDING``).
- Each receipt's index in the log, appended to its hash-index field once integrated, so it
  expires and is deleted with the receipt.
- The synced size: every entry of the tree below it has left its queue and has its index.
- The progress mark (``/health``), and the id of the deployment this Redis serves (the lease
  in the store names it).
- The claim of the current time-stamping interval.

Every key, and each receipt's index, carries the log's tag, made of its origin and key
(kv/keys.py, ``LogIdentity``): two logs never share a queue, and a receipt indexed in one log
is not in another.
"""

from __future__ import annotations

import asyncio
from typing import Any

from execution_proof.kv import keys
from execution_proof.kv.link import Link, LuaScript
from execution_proof.kv.records import Client, lenient_text, unavailable_as_503
from execution_proof.receipts.errors import NotInLog
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.transparency.tlog import LogEntry

OLDEST_SAMPLE = 1024
"""How many projects of the dirty set ``log_oldest_waiting_ms`` looks at, at most (at random
beyond that: the integrator's own sample)."""


class LogQueueStore:
    """What the log has in flight in Redis (``store.log_queue``): the integrator's, the
    stamper's and the log's read side; the receipt store counts creates' entries here."""

    def __init__(
        self,
        client: Client,
        link: Link,
        is_cluster: bool,
        *,
        log_ack: LuaScript,
        log_synced: LuaScript,
        find_index_field: LuaScript,
    ) -> None:
        self.client = client
        self.link = link
        self.is_cluster = is_cluster
        self._log_ack = log_ack
        self._log_synced = log_synced
        self._find_index_field = find_index_field

    # -- the queues

    @unavailable_as_503
    async def log_dirty_projects(self, log: keys.LogIdentity, count: int) -> list[str]:
        """Up to ``count`` projects of the dirty set, at random, sorted."""
        members = await self.link.send("SRANDMEMBER", keys.log_dirty_key(log), count)
        return sorted(lenient_text(m) for m in members)

    @unavailable_as_503
    async def log_all_dirty_projects(self, log: keys.LogIdentity) -> list[str]:
        """Every project of the dirty set and of the recheck list (for a reconciliation)."""
        found: set[str] = set()
        async for member in self.client.sscan_iter(keys.log_dirty_key(log), count=1000):
            found.add(lenient_text(member))
        async for member, _ in self.client.zscan_iter(keys.log_recheck_key(log), count=1000):
            found.add(lenient_text(member))
        return sorted(found)

    @unavailable_as_503
    async def log_queued(self, log: keys.LogIdentity, limits: dict[str, int]) -> dict[str, list[bytes]]:
        """Up to ``limits[project]`` queued entries of each project, oldest first (-1: all)."""
        wanted = {pid: limit for pid, limit in limits.items() if limit}  # LRANGE 0 -1 would be all
        sends = [
            self.link.send("LRANGE", keys.log_queue_key(log, pid), 0, limit - 1 if limit > 0 else -1)
            for pid, limit in wanted.items()
        ]
        replies = await asyncio.gather(*sends)
        found = {pid: list(entries) for pid, entries in zip(wanted, replies, strict=True)}
        return {pid: found.get(pid, []) for pid in limits}

    @unavailable_as_503
    async def log_queue_lengths(self, log: keys.LogIdentity, project_ids: list[str]) -> dict[str, int]:
        """How many entries each project's queue holds (one round trip)."""
        sends = [self.link.send("LLEN", keys.log_queue_key(log, pid)) for pid in project_ids]
        return {pid: int(n) for pid, n in zip(project_ids, await asyncio.gather(*sends), strict=True)}

    @unavailable_as_503
    async def log_tidy_dirty(self, log: keys.LogIdentity, project_ids: list[str], now_ms: int) -> None:
        """Drop the projects from the dirty set, but for those whose queue holds entries.

        A create marks its project, then queues its entry in another call: a create whose
        mark came just before the removal may queue after this looks. So the projects are
        also put on the recheck list (first, so a crash cannot skip one), and
        ``log_recheck`` looks again once any such create has long finished.

        Each step covers every project at once (four round trips, however many projects: a
        batch empties the queue of each project it takes entries from, and these writes
        wait for Redis's fsync one by one), and each is awaited before the next, so every
        project's steps keep their order."""
        if not project_ids:
            return
        dirty = keys.log_dirty_key(log)
        await self.link.send(
            "ZADD", keys.log_recheck_key(log), *(part for pid in project_ids for part in (now_ms, pid))
        )
        await self.link.send("SREM", dirty, *project_ids)
        lengths = await self.log_queue_lengths(log, project_ids)
        queued = [pid for pid in project_ids if lengths[pid]]
        if queued:
            await self.link.send("SADD", dirty, *queued)

    @unavailable_as_503
    async def log_recheck(self, log: keys.LogIdentity, before_ms: int, count: int = 256) -> int:
        """Look again at projects dropped before ``before_ms``: one whose queue holds entries
        goes back on the dirty set. Returns how many went back."""
        recheck = keys.log_recheck_key(log)
        members = await self.link.send("ZRANGEBYSCORE", recheck, 0, before_ms, "LIMIT", 0, count)
        back = 0
        for member in members:
            project_id = lenient_text(member)
            if int(await self.link.send("LLEN", keys.log_queue_key(log, project_id))):
                await self.link.send("SADD", keys.log_dirty_key(log), project_id)
                back += 1
            await self.link.send("ZREM", recheck, project_id)
        return back

    @unavailable_as_503
    async def log_ack(self, log: keys.LogIdentity, project_id: str, acks: list[tuple[bytes, int]]) -> int:
        """Entries of the project are in the log at these indices: take them off its queue
        and record each receipt's index (kv/lua/log_ack.lua). Returns how many left the
        queue; a repeat takes none and records the same indices."""
        args: list[Any] = ["0" if self.is_cluster else "1", log.tag]
        for entry, index in acks:
            fields = LogEntry.parse(entry)
            args += [
                entry,
                keys.receipt_id_bytes(fields.receipt_id),
                keys.hash_index_field(fields.receipt_hash),
                index.to_bytes(keys.LOG_INDEX_BYTES, "big"),
            ]
        queue = keys.log_queue_key(log, project_id)
        pending = queue if self.is_cluster else keys.log_pending_key(log)
        taken = int(await self.link.run_script(self._log_ack, [queue, keys.index_meta_key(project_id), pending], args))
        if self.is_cluster and taken:
            await self.link.send("DECRBY", keys.log_pending_key(log), taken)
        return taken

    # -- counts and marks

    @unavailable_as_503
    async def log_pending(self, log: keys.LogIdentity) -> int:
        """Entries queued and not yet in the tree (approximate on a Cluster)."""
        return int(await self.link.send("GET", keys.log_pending_key(log)) or 0)

    @unavailable_as_503
    async def log_count_pending(self, log: keys.LogIdentity, count: int) -> None:
        """On a Cluster, where the create script cannot reach it: count entries just queued."""
        await self.link.send("INCRBY", keys.log_pending_key(log), count)

    @unavailable_as_503
    async def log_set_pending(self, log: keys.LogIdentity, count: int) -> None:
        """On a Cluster: set the count to what the integrator just measured (it drifts when a
        process dies between a create and its count)."""
        await self.link.send("SET", keys.log_pending_key(log), count)

    @unavailable_as_503
    async def log_synced(self, log: keys.LogIdentity) -> int | None:
        value = await self.link.send("GET", keys.log_synced_key(log))
        return None if value is None else int(value)

    @unavailable_as_503
    async def log_mark_synced(self, log: keys.LogIdentity, was: int | None, size: int) -> bool:
        """Move the synced size from ``was`` (None: none recorded) to ``size``; False when it
        was another (a restore moved it back: the integrator reconciles)."""
        args = ["" if was is None else str(was), str(size)]
        return bool(int(await self.link.run_script(self._log_synced, [keys.log_synced_key(log)], args)))

    @unavailable_as_503
    async def log_has_trace(self, log: keys.LogIdentity) -> bool:
        """Whether this Redis knows of a log with this origin: its synced size, entries
        waiting, or projects named dirty. An empty log store beside such a Redis is a lost or
        mistyped ``LOG_STORE``, never the start of a new log."""
        synced, pending, dirty = await asyncio.gather(
            self.link.send("EXISTS", keys.log_synced_key(log)),
            self.link.send("GET", keys.log_pending_key(log)),
            self.link.send("SCARD", keys.log_dirty_key(log)),
        )
        return bool(int(synced)) or int(pending or 0) > 0 or int(dirty) > 0

    @unavailable_as_503
    async def log_index(self, log: keys.LogIdentity, project_id: str, receipt_id: str, receipt_hash: str) -> int | None:
        """The receipt's index in ``log``, or None until it is integrated (or once it is gone).
        ``NotInLog`` when it was issued without a log or for another one: it is not in this
        log, and never will be."""
        value = await self.link.run_script(
            self._find_index_field, [keys.index_meta_key(project_id)], [keys.hash_index_field(receipt_hash)]
        )
        place = keys.parse_log_index(value, receipt_id) if isinstance(value, bytes) else None
        if place is None:
            return None
        tag, index = place
        if tag != log.tag:
            raise NotInLog(
                "this receipt is not in this service's transparency log: it was issued without a log, or for another "
                f"log (the log now is {log.origin})"
            )
        return index

    @unavailable_as_503
    async def log_progress(self, log: keys.LogIdentity) -> int | None:
        """When (Unix ms) an integrator last published a checkpoint or found nothing waiting."""
        value = await self.link.send("GET", keys.log_progress_key(log))
        return None if value is None else int(value)

    @unavailable_as_503
    async def log_mark_progress(self, log: keys.LogIdentity, now_ms: int) -> None:
        await self.link.send("SET", keys.log_progress_key(log), now_ms)

    @unavailable_as_503
    async def log_progress_or_start(self, log: keys.LogIdentity, now_ms: int) -> int:
        """The progress mark, first set to ``now_ms`` if there is none (no integrator marked
        its progress on this Redis: none ever ran, or Redis forgot): the web process that first
        finds entries waiting starts the stall's clock for every web process, so they agree."""
        await self.link.send("SET", keys.log_progress_key(log), now_ms, "NX")
        value = await self.link.send("GET", keys.log_progress_key(log))
        return now_ms if value is None else int(value)

    @unavailable_as_503
    async def log_oldest_waiting_ms(self, log: keys.LogIdentity, sample: int = OLDEST_SAMPLE) -> int | None:
        """When (Unix ms) the oldest entry waiting in this Redis was made: the oldest of the
        heads of the queues of the dirty projects (up to ``sample`` of them), by the creation
        time in each head's receipt id; None when none waits. Two round trips."""
        projects = await self.log_dirty_projects(log, sample)
        if not projects:
            return None
        heads = await asyncio.gather(*(self.link.send("LINDEX", keys.log_queue_key(log, pid), 0) for pid in projects))
        made = [ms for head in heads if isinstance(head, bytes) and (ms := _made_ms(head)) is not None]
        return min(made, default=None)

    @unavailable_as_503
    async def log_deployment(self, log: keys.LogIdentity, proposed: str) -> str:
        """The id of the deployment this Redis serves, ``proposed`` made it if there is none
        (SET NX): every integrator working from this Redis reads the same one."""
        await self.link.send("SET", keys.log_deployment_key(log), proposed, "NX")
        value = await self.link.send("GET", keys.log_deployment_key(log))
        return proposed if value is None else lenient_text(value)

    @unavailable_as_503
    async def log_stamp_claim(self, log: keys.LogIdentity, token: str, hold_ms: int) -> bool:
        """Claim this interval's stamping (SET NX PX): true for one caller per interval."""
        return bool(await self.link.send("SET", keys.log_stamping_key(log), token, "NX", "PX", hold_ms))


def _made_ms(entry: bytes) -> int | None:
    """The creation time of a queued entry's receipt (its id's), None if it names none."""
    try:
        receipt_id = LogEntry.receipt_id_of(entry)
    except (IndexError, UnicodeDecodeError):
        return None
    return keys.receipt_created_ms(receipt_id) if is_receipt_id(receipt_id) else None
