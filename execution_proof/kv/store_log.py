"""Redis's part of the transparency log (docs/log.md): only what is in flight. The log itself
(tiles, bundles, checkpoints, its tree state) lives in the log store (kv/logstore).

- Each project's queue of entries waiting to be sequenced (filled by the create script, in
  chain order; entries of no project wait in the log's own queue), the dirty set naming
  queues that may hold entries, and the count of entries waiting (``LOG_MAX_PENDING``).
- Each queue's synced size, in the queue's slot: no entry of the tree below it is in the
  queue (jobs/log_sync.py); and the log's size as an integrator last told this Redis.
- Each receipt's index in the log, appended to its hash-index field once integrated, so it
  expires and is deleted with the receipt.
- The progress mark (``/health``), and the id of the deployment this Redis serves (the lease
  in the store names it).
- The claim of the current time-stamping interval.

Every key, and each receipt's index, carries the log's tag, made of its origin and key
(kv/keys.py, ``LogIdentity``): two logs never share a queue, and a receipt indexed in one log
is not in another.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from execution_proof.kv import keys
from execution_proof.kv.link import Link, LuaScript
from execution_proof.kv.logstore.log import entry_created_ms
from execution_proof.kv.records import RedisClient, lenient_text, unavailable_as_503
from execution_proof.receipts.errors import NotInLog
from execution_proof.transparency import tlog
from execution_proof.transparency.tlog import LogEntry

RECEIPT_ENTRY = tlog.ENTRY_HEADER.encode() + b"\n"
"""How a receipt entry starts (the kind whose index is recorded beside its receipt)."""
OLDEST_SAMPLE = 1024
"""How many projects of the dirty set ``log_oldest_waiting_ms`` looks at, at most (at random
beyond that: the integrator's own sample)."""


@dataclass(frozen=True)
class QueueRead:
    """A queue's first entries and its synced size, read together (kv/lua/log_read.lua)."""

    synced: int
    entries: list[bytes]


@dataclass(frozen=True)
class CreateCounts:
    """The log's counts as a create's script is handed them (kv/lua/issue_receipt.lua,
    ``LogQueueStore.counts_for_create``): the keys it reads them from (KEYS[9], KEYS[11])
    or the values read before it (ARGV[18], ARGV[20]; "" = read the key)."""

    pending_key: str
    size_key: str
    pending: str
    size: str
    counted_after: bool
    """The script cannot count the entries it queues: ``count_created`` does, after it."""


@dataclass(frozen=True)
class Acked:
    """What ``log_ack`` did: ``done`` (the synced size moved; ``taken`` entries left the queue),
    else nothing, the synced size being ``synced``."""

    done: bool
    taken: int
    synced: int


class LogQueueStore:
    """What the log has in flight in Redis (``store.log_queue``): the integrator's, the
    stamper's and the log's read side; the receipt store counts creates' entries here."""

    def __init__(
        self,
        client: RedisClient,
        link: Link,
        is_cluster: bool,
        *,
        log_ack: LuaScript,
        log_read: LuaScript,
        log_size: LuaScript,
        find_index_field: LuaScript,
    ) -> None:
        self.client = client
        self.link = link
        self.is_cluster = is_cluster
        self._log_ack = log_ack
        self._log_read = log_read
        self._log_size = log_size
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
    async def log_queued(self, log: keys.LogIdentity, limits: dict[str, int]) -> dict[str, QueueRead]:
        """Up to ``limits[queue]`` entries of each queue, oldest first (-1: all), each queue's
        read together with its synced size (kv/lua/log_read.lua), side by side."""
        wanted = {queue: limit for queue, limit in limits.items() if limit}  # LRANGE 0 -1 would be all
        replies = await asyncio.gather(
            *(
                self.link.run_script(
                    self._log_read,
                    [keys.log_queue_key(log, queue), keys.log_synced_key(log, queue)],
                    [limit],
                )
                for queue, limit in wanted.items()
            )
        )
        found = {queue: QueueRead(int(reply[0]), list(reply[1:])) for queue, reply in zip(wanted, replies, strict=True)}
        return {queue: found.get(queue, QueueRead(0, [])) for queue in limits}

    @unavailable_as_503
    async def log_queue_states(self, log: keys.LogIdentity, queues: list[str]) -> dict[str, tuple[int, int]]:
        """Each queue's length and synced size (one round trip; not read together: a hint of
        which queues to read, never what a batch is made of)."""
        sends = [
            send
            for queue in queues
            for send in (
                self.link.send("LLEN", keys.log_queue_key(log, queue)),
                self.link.send("GET", keys.log_synced_key(log, queue)),
            )
        ]
        replies = await asyncio.gather(*sends)
        return {queue: (int(replies[2 * n]), int(replies[2 * n + 1] or 0)) for n, queue in enumerate(queues)}

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
    async def log_ack(
        self, log: keys.LogIdentity, queue: str, was: int, size: int, acks: list[tuple[bytes, int]]
    ) -> Acked:
        """The queue's ``acks`` (queue items, each with its first entry's index) are in the tree of ``size``: take
        them off the queue, record each receipt's index and move the queue's synced size from
        ``was`` to ``size``, at once (kv/lua/log_ack.lua), if it is still ``was``. With no
        ``acks``, the synced size alone moves (the tree grew by entries of other queues)."""
        args: list[Any] = ["0" if self.is_cluster else "1", log.tag, was, size]
        for entry, index in acks:
            receipt = LogEntry.parse(tlog.item_entries(entry)[0]) if entry.startswith(RECEIPT_ENTRY) else None
            args += [
                entry,
                keys.receipt_id_bytes(receipt.receipt_id) if receipt is not None else b"",
                keys.hash_index_field(receipt.receipt_hash) if receipt is not None else b"",
                index.to_bytes(keys.LOG_INDEX_BYTES, "big"),
            ]
        queue_key = keys.log_queue_key(log, queue)
        meta = queue_key if queue == keys.LOG_OWN_QUEUE else keys.index_meta_key(queue)
        pending = queue_key if self.is_cluster else keys.log_pending_key(log)
        code, value = await self.link.run_script(
            self._log_ack, [queue_key, keys.log_synced_key(log, queue), meta, pending], args
        )
        if int(code):
            return Acked(False, 0, int(value))
        taken = int(value)
        if self.is_cluster and taken:
            await self.link.send("DECRBY", keys.log_pending_key(log), taken)
        return Acked(True, taken, size)

    @unavailable_as_503
    async def queue_own_entry(self, log: keys.LogIdentity, entry: bytes) -> None:
        """Queue an entry that belongs to no project (a key certificate, a revocation) in the
        log's own queue, name the queue dirty and count it, in that order: an entry counted
        is always findable (three commands, in three slots on a Cluster)."""
        await self.link.send("RPUSH", keys.log_queue_key(log, keys.LOG_OWN_QUEUE), entry)
        await self.link.send("SADD", keys.log_dirty_key(log), keys.LOG_OWN_QUEUE)
        await self.link.send("INCR", keys.log_pending_key(log))

    # -- counts and marks

    @unavailable_as_503
    async def log_pending(self, log: keys.LogIdentity) -> int:
        """Entries queued and not yet in the tree (approximate on a Cluster)."""
        return int(await self.link.send("GET", keys.log_pending_key(log)) or 0)

    async def counts_for_create(self, log: keys.LogIdentity, queue_key: str, *, logged: bool) -> CreateCounts:
        """What a create's script, whose keys are in the project's slot, is handed for the
        count of entries waiting and the log's size. On a plain Redis the script reads both
        keys and counts its entries itself (nothing is sent here). On a Cluster they live in
        other slots: read here, side by side, when the create queues entries (the count is
        approximate, docs/log.md "Backpressure"), the script's two keys name the queue again,
        and ``count_created`` counts the entries after the script."""
        if not self.is_cluster:
            return CreateCounts(keys.log_pending_key(log), keys.log_size_key(log), "", "", counted_after=False)
        pending, size = await self.log_pending_and_size(log) if logged else ("", "")
        return CreateCounts(queue_key, queue_key, pending, size, counted_after=True)

    async def count_created(self, log: keys.LogIdentity, counts: CreateCounts, queued: int) -> None:
        """After a create's script queued ``queued`` entries: count them where the script
        could not (``counts.counted_after``: a Cluster)."""
        if counts.counted_after and queued:
            await self.log_count_pending(log, queued)

    @unavailable_as_503
    async def log_count_pending(self, log: keys.LogIdentity, count: int) -> None:
        """On a Cluster, where the create script cannot reach it: count entries just queued."""
        await self.link.send("INCRBY", keys.log_pending_key(log), count)

    @unavailable_as_503
    async def log_measured_pending(self, log: keys.LogIdentity, count: int) -> None:
        """The integrator counted ``count`` entries waiting in every queue of the dirty set. On
        a Cluster, where creates count outside their script, the count is set to it (it drifts
        when a process dies between a create and its count); a plain Redis counts exactly."""
        if self.is_cluster:
            await self.link.send("SET", keys.log_pending_key(log), count)

    @unavailable_as_503
    async def log_pending_and_size(self, log: keys.LogIdentity) -> tuple[str, str]:
        """A Cluster's create reads these before its script (they live in other slots): the
        count of entries waiting and the log's size, side by side ("0" for none)."""
        pending, size = await asyncio.gather(
            self.link.send("GET", keys.log_pending_key(log)), self.link.send("GET", keys.log_size_key(log))
        )
        return lenient_text(pending or b"0"), lenient_text(size or b"0")

    @unavailable_as_503
    async def log_size(self, log: keys.LogIdentity) -> int | None:
        """The log's size as an integrator last told this Redis (None: never, or forgotten)."""
        value = await self.link.send("GET", keys.log_size_key(log))
        return None if value is None else int(value)

    @unavailable_as_503
    async def log_tell_size(self, log: keys.LogIdentity, size: int) -> int:
        """Tell this Redis the tree has reached ``size`` (kv/lua/log_size.lua: the size kept
        only grows); returns the size kept, larger than ``size`` when Redis knew a larger tree."""
        return int(await self.link.run_script(self._log_size, [keys.log_size_key(log)], [size]))

    @unavailable_as_503
    async def log_has_trace(self, log: keys.LogIdentity) -> bool:
        """Whether this Redis knows of a log with this origin: its size, entries
        waiting, or projects named dirty. An empty log store beside such a Redis is a lost or
        mistyped ``LOG_STORE``, never the start of a new log."""
        size, pending, dirty = await asyncio.gather(
            self.link.send("EXISTS", keys.log_size_key(log)),
            self.link.send("GET", keys.log_pending_key(log)),
            self.link.send("SCARD", keys.log_dirty_key(log)),
        )
        return bool(int(size)) or int(pending or 0) > 0 or int(dirty) > 0

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
        made = [ms for head in heads if isinstance(head, bytes) and (ms := entry_created_ms(head)) is not None]
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
