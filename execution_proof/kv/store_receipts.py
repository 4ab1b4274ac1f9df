"""The store's receipts: issuing (one script per group, with the optional ``STORE_ACK`` wait),
reads by id and by hash (also sent ahead, to share a write with the next command), search
by hash, and deletion. The index they use is kv/lua/index_buckets.lua (docs/redis.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from execution_proof.kv import keys
from execution_proof.kv.link import Link, LuaScript
from execution_proof.kv.records import (
    Counter,
    IndexLookup,
    IssueItem,
    IssueOutcome,
    IssueResult,
    LogQueue,
    RedisClient,
    as_bytes,
    as_text,
    checked_receipt_bytes,
    receipt_id_of,
    unavailable_as_503,
)
from execution_proof.kv.store_log import CreateCounts, LogQueueStore
from execution_proof.receipts import compact
from execution_proof.receipts.errors import CorruptRecord, StoreUnavailable
from execution_proof.runtime.store_ack import NO_ACK, StoreAck


def _no_log_counts(project_key: str) -> CreateCounts:
    """A create without a log: the script's log keys are unused, and name a key of its slot."""
    return CreateCounts(project_key, project_key, "", "", counted_after=False)


class ReceiptStore:
    """Receipts (``store.receipts``): the issuer's writes and every read of a receipt.

    Built with how a create is made durable (``ack``, ``STORE_ACK``, docs/redis.md) and where
    it queues its log entry (``log``, ``LOG_SIGNING_KEY`` set; None: no log). How the issue
    script gets the log's count of entries waiting and its size, and whatever counting the
    script cannot do, is the log queue store's (``counts_for_create``, ``count_created``)."""

    def __init__(
        self,
        client: RedisClient,
        link: Link,
        is_cluster: bool,
        log_queue: LogQueueStore,
        *,
        issue: LuaScript,
        find_index_field: LuaScript,
        find_receipt: LuaScript,
        delete_receipt: LuaScript,
        ack: StoreAck = NO_ACK,
        log: LogQueue | None = None,
    ) -> None:
        self.client = client
        self.link = link
        self.is_cluster = is_cluster
        self.ack = ack
        self.log = log
        self._log_queue = log_queue
        self._issue = issue
        self._find_index_field = find_index_field
        self._find_receipt = find_receipt
        self._delete_receipt = delete_receipt

    def configured(self, *, ack: StoreAck, log: LogQueue | None) -> ReceiptStore:
        """These receipts, on the same link and scripts, with creates that wait for ``ack``
        and queue their log entries to ``log`` (an app handed a store by a test issues with
        its own settings this way; the store handed in is left as it was)."""
        return ReceiptStore(
            self.client,
            self.link,
            self.is_cluster,
            self._log_queue,
            issue=self._issue,
            find_index_field=self._find_index_field,
            find_receipt=self._find_receipt,
            delete_receipt=self._delete_receipt,
            ack=ack,
            log=log,
        )

    async def _mark_for_log(
        self, log: keys.LogIdentity, project_id: str, script_on_link: bool
    ) -> Awaitable[Any] | None:
        """Name the project in the log's dirty set before its entries are queued. On a link
        whose commands run in the order sent (``Link.ordered``) the mark leaves first, in the
        same write as the script that queues them; elsewhere (a Cluster, fakeredis, a script
        sent on another connection for ``STORE_ACK``) it is awaited first. Returns what the
        caller awaits after the script, if any."""
        marked = self.link.send("SADD", keys.log_dirty_key(log), project_id)
        if script_on_link and self.link.ordered:
            return marked
        await marked
        return None

    @unavailable_as_503
    async def read_tip(self, project_id: str) -> tuple[bool, str | None]:
        """(project exists, main chain tip or None)."""
        exists = self.link.send("EXISTS", keys.project_key(project_id))
        tip = self.link.send("HGET", keys.project_key(project_id), "tip")
        return bool(await exists), as_text(await tip) or None

    @unavailable_as_503
    async def issue_receipt(
        self,
        *,
        project_id: str,
        receipt_id: str,
        receipt_hash: str,
        receipt_json: bytes,
        built_on_tip: str | None,
        on_main: bool,
        replay_key: str,
        fingerprint: str,
        key_hash: str,
        minute: Counter,
        month: Counter,
        stale_receipt_id: str = "",
        input_hash: str | None = None,
        output_hash: str | None = None,
    ) -> IssueResult:
        """Record a signed receipt if its tip still holds, it is not a replay, and the key's
        minute limit and the project's monthly quota allow it; count it in both at once.
        The receipt id joins the search indexes of its ``input_hash`` and ``output_hash``.
        (``issue_receipts`` with one receipt; raises the not-acknowledged 503 itself.)"""
        item = IssueItem(
            receipt_id, receipt_hash, receipt_json, built_on_tip, on_main, replay_key, fingerprint,
            key_hash, minute, month, stale_receipt_id, input_hash, output_hash,
        )  # fmt: skip
        [result] = await self._issue_receipts(project_id, [item])
        if result.unacknowledged is not None:
            raise result.unacknowledged
        return result

    @unavailable_as_503
    async def issue_receipts(self, project_id: str, items: list[IssueItem]) -> list[IssueResult]:
        """Group commit: record ``items`` (receipts of one project, each chained on the one
        before it where it is on main) in order, in one script call. The first receipt that
        is not issued ends the call: the result list stops with it, and the receipts after
        it (built on it) are the caller's to rebuild. With ``STORE_ACK``, an issued or
        replayed result whose write was not acknowledged carries the 503 in ``unacknowledged``."""
        return await self._issue_receipts(project_id, items)

    async def _issue_receipts(self, project_id: str, items: list[IssueItem]) -> list[IssueResult]:
        script_keys: list[Any] = []
        script_args: list[Any] = []
        project_key = keys.project_key(project_id)
        meta_key = keys.index_meta_key(project_id)
        log = self.log
        logged = log is not None and any(item.log_entry for item in items)
        log_queue = keys.log_queue_key(log.identity, project_id) if log is not None else project_key
        log_synced = keys.log_synced_key(log.identity, project_id) if log is not None else project_key
        counts = (
            await self._log_queue.counts_for_create(log.identity, log_queue, logged=logged)
            if log is not None
            else _no_log_counts(project_key)
        )
        log_tag = log.identity.tag if log is not None else b""
        max_pending = str(log.max_pending) if log is not None else "0"
        for item in items:
            receipt_id_bytes = keys.receipt_id_bytes(item.receipt_id)
            script_keys += [
                project_key,
                keys.receipt_key(item.receipt_id),
                meta_key,
                keys.key_minute_counter_key(project_id, item.key_hash, item.minute.window_id),
                keys.project_month_counter_key(project_id, item.month.window_id),
                *self._search_keys(project_id, item.input_hash, item.output_hash),
                log_queue,
                counts.pending_key,
                log_synced,
                counts.size_key,
            ]
            stale = item.stale_receipt_id
            script_args += [
                item.built_on_tip or "",
                item.stored_value or item.receipt_json,
                item.receipt_hash,
                "1" if item.on_main else "0",
                item.minute.limit,
                item.minute.ttl_s,
                item.month.limit,
                item.month.ttl_s,
                keys.receipt_id_bytes(stale) if stale else b"",
                receipt_id_bytes,
                keys.hash_index_field(item.receipt_hash),
                keys.idempotency_field(item.replay_key),
                keys.fingerprint_tail(item.fingerprint),
                keys.search_field("input_hash", item.input_hash) if item.input_hash else b"",
                keys.search_field("output_hash", item.output_hash) if item.output_hash else b"",
                item.log_entry if log is not None else b"",
                max_pending,
                counts.pending,
                log_tag if item.log_entry else b"",
                counts.size,
            ]
        marked = (
            await self._mark_for_log(log.identity, project_id, not self.ack.enabled)
            if log is not None and logged
            else None
        )
        if self.ack.enabled:
            reply, unacknowledged = await self._issue_acknowledged(script_keys, script_args, items)
        else:
            reply, unacknowledged = await self.link.run_script(self._issue, script_keys, script_args), None
        if marked is not None:
            await marked
        if logged and counts.counted_after:
            assert log is not None
            queued = sum(
                1
                for at, item in zip(range(0, len(reply), 4), items, strict=False)
                if item.log_entry and int(reply[at]) == IssueOutcome.ISSUED.value
            )
            await self._log_queue.count_created(log.identity, counts, queued)
        results = []
        for at in range(0, len(reply), 4):
            outcome = IssueOutcome(int(reply[at]))
            value = (receipt_id_of(reply[at + 1]) if outcome is IssueOutcome.REPLAY else as_text(reply[at + 1])) or None
            results.append(
                IssueResult(
                    outcome,
                    receipt_id=value if outcome is IssueOutcome.REPLAY else None,
                    tip=value if outcome is IssueOutcome.TIP_MOVED else None,
                    minute_used=int(reply[at + 2]),
                    month_used=int(reply[at + 3]),
                    unacknowledged=(
                        unacknowledged(items[at // 4].receipt_id if outcome is IssueOutcome.ISSUED else value or "")
                        if unacknowledged is not None and outcome in (IssueOutcome.ISSUED, IssueOutcome.REPLAY)
                        else None
                    ),
                )
            )
        return results

    async def _issue_acknowledged(
        self, script_keys: list[Any], script_args: list[Any], items: list[IssueItem]
    ) -> tuple[Any, Callable[[str], StoreUnavailable] | None]:
        """The issue script, then WAIT / WAITAOF on the same connection (both count that
        connection's writes, so one wait covers the whole group). Only an issue or a replay
        is waited for: a replay's minute counter is a later write, so its WAIT covers the
        earlier receipt as well.

        Not reached within the timeout: each issued or replayed receipt's result carries a
        503 ``store_unavailable`` naming the receipt, which IS written and chained; the same
        request again replays it and waits again.
        """
        client: Any = self.client  # a plain Redis: start-up refuses STORE_ACK with a cluster
        async with client.client() as conn:
            reply: Any = await self._issue.registered(keys=script_keys, args=script_args, client=conn)
            codes = {int(reply[at]) for at in range(0, len(reply), 4)}
            if not codes & {IssueOutcome.ISSUED.value, IssueOutcome.REPLAY.value}:
                return reply, None
            ack = self.ack
            if ack.mode == "aof":
                counts: Any = await conn.execute_command("WAITAOF", 1, 0, ack.timeout_ms)
                reached, got = int(counts[0]) >= 1, int(counts[0])
                required = 1
            else:
                got = int(await conn.execute_command("WAIT", ack.replicas, ack.timeout_ms))
                reached, required = got >= ack.replicas, ack.replicas
        if reached:
            return reply, None

        def not_acknowledged(written_id: str) -> StoreUnavailable:
            return StoreUnavailable(
                f"the receipt was written but not acknowledged by {ack.describe()}; "
                "send the same request again to confirm it (it replays the same receipt)",
                details={
                    "reason": "not_acknowledged",
                    "receipt_id": written_id,
                    "written": True,
                    "acknowledged": got,
                    "required": required,
                    "ack": ack.mode,
                },
            )

        return reply, not_acknowledged

    def prefetch_receipt_json(self, receipt_id: str) -> Awaitable[Any]:
        """Send the receipt's read now, so it leaves in the same write as the next command of
        this event-loop turn (a limit check, say); hand the result to
        ``prefetched_receipt_json``. A prefetch nobody awaits (the request was refused) is dropped."""
        return self.link.send("GET", keys.receipt_key(receipt_id))

    def prefetch_receipt_by_hash(self, project_id: str, receipt_hash: str) -> IndexLookup:
        """As ``prefetch_receipt_json``, by the receipt's hash within its project, for
        ``prefetched_receipt_by_hash``: one script finds the id in the project's index and
        reads the record it names (kv/lua/find_receipt.lua; should Redis not know the script
        yet, awaiting it sends it again, one more round trip once per Redis start)."""
        return self.link.send_script(
            self._find_receipt,
            [keys.index_meta_key(project_id)],
            [keys.hash_index_field(receipt_hash)],
        )

    @unavailable_as_503
    async def prefetched_receipt_by_hash(self, sent: IndexLookup, project_id: str) -> tuple[str, bytes | None] | None:
        """What ``prefetch_receipt_by_hash`` found: None when the index has no such hash,
        else (the receipt id it names, the receipt's JSON bytes or None when the record is
        gone). ``CorruptRecord`` as ``get_receipt_json``. The index keys a truncated hash: the
        caller checks the full ``receipt_hash`` of the receipt."""
        reply = await sent
        if not reply:
            return None
        raw_id, stored = reply
        receipt_id = keys.receipt_id_from_bytes(as_bytes(raw_id) or b"")
        return receipt_id, checked_receipt_bytes(stored or None, receipt_id, project_id)

    async def find_receipt_by_hash(self, project_id: str, receipt_hash: str) -> tuple[str, bytes | None] | None:
        """``prefetched_receipt_by_hash`` of a lookup sent now: one round trip."""
        return await self.prefetched_receipt_by_hash(
            self.prefetch_receipt_by_hash(project_id, receipt_hash), project_id
        )

    @unavailable_as_503
    async def prefetched_receipt_json(self, sent: Awaitable[Any], receipt_id: str) -> bytes | None:
        """The receipt JSON of ``prefetch_receipt_json(receipt_id)``, or None; as ``get_receipt_json``."""
        return checked_receipt_bytes(await sent, receipt_id)

    @unavailable_as_503
    async def get_receipt_json(self, receipt_id: str, project_id: str | None = None) -> bytes | None:
        """The receipt's JSON bytes, exactly as every read returns them, or None (unknown,
        expired or deleted). The stored value may be a compact record: it is decoded here.

        Raises ``CorruptRecord`` when the stored value cannot be decoded, or is not this
        receipt's record (another ``receipt_id``; another project than ``project_id``, when
        given): a read never hands out another receipt than the one it was asked for."""
        return checked_receipt_bytes(await self.prefetch_receipt_json(receipt_id), receipt_id, project_id)

    @unavailable_as_503
    async def get_attested_receipt(self, receipt_id: str) -> tuple[bytes, compact.Kept | None] | None:
        """The receipt's JSON bytes (as ``get_receipt_json``) and what its record keeps beside
        it (its attestation's signature and log origin; None for a record that keeps nothing),
        or None when there is no such receipt. ``CorruptRecord`` as ``get_receipt_json``."""
        stored = as_bytes(await self.prefetch_receipt_json(receipt_id))
        receipt_json = checked_receipt_bytes(stored, receipt_id)
        if stored is None or receipt_json is None:
            return None
        try:
            return receipt_json, compact.kept(stored)
        except ValueError as exc:
            raise CorruptRecord(receipt_id, str(exc)) from None

    @unavailable_as_503
    async def find_receipt_id_by_hash(self, project_id: str, receipt_hash: str) -> str | None:
        """The id of the project's receipt with this hash, or None. The index keys a
        truncated hash: the caller checks the full ``receipt_hash`` of the receipt it reads."""
        return receipt_id_of(
            await self.link.run_script(
                self._find_index_field, [keys.index_meta_key(project_id)], [keys.hash_index_field(receipt_hash)]
            )
        )

    @unavailable_as_503
    async def search_receipts(
        self, project_id: str, field: str, hash_str: str, limit: int, after: str | None = None
    ) -> tuple[list[bytes], str | None]:
        """The project's receipts whose ``field`` is ``hash_str``, newest first: (receipt
        JSON bytes, id to continue after or None). ``after`` is the last id of the previous
        page; the order is (created ms, receipt id) descending, which is the ids' own order.

        The ids come from the index field (up to four) and from the hash's sorted set (a
        page of it, in the same round trip: the ids of a hash with more than four
        receipts). Ids whose receipt is gone (deleted or expired a moment ago), or whose full
        hash differs (the field is truncated), are skipped, so a page can hold fewer than
        ``limit`` receipts while more follow.
        """
        name = keys.search_index_key(project_id, field, hash_str)
        pipe = self.client.pipeline(transaction=False)
        if after is None:
            pipe.zrevrangebyscore(name, "+inf", "-inf", start=0, num=limit + 1)
        else:
            score = keys.receipt_created_ms(after)
            pipe.zrevrangebyscore(name, score, score)
            pipe.zrevrangebyscore(name, f"({score}", "-inf", start=0, num=limit + 1)
        field_value, replies = await asyncio.gather(
            self.link.run_script(
                self._find_index_field, [keys.index_meta_key(project_id)], [keys.search_field(field, hash_str)]
            ),
            pipe.execute(),
        )
        replies = [field_value, *replies]
        packed = as_bytes(replies[0]) or b""
        found = {keys.receipt_id_from_bytes(packed[at : at + 16]) for at in range(0, len(packed) - 15, 16)}
        for members in replies[1:]:
            found.update(receipt_id for member in members if (receipt_id := receipt_id_of(member)))
        ids = sorted((m for m in found if after is None or m < after), reverse=True)
        page, more = ids[:limit], len(ids) > limit
        stored = await self.client.mget([keys.receipt_key(m) for m in page]) if page else []
        receipts = []
        for receipt_id, value in zip(page, stored, strict=True):
            receipt_json = checked_receipt_bytes(value, receipt_id, project_id)
            if receipt_json is not None and orjson.loads(receipt_json).get(field) == hash_str:
                receipts.append(receipt_json)
        return receipts, (page[-1] if more else None)

    @unavailable_as_503
    async def delete_receipt(self, receipt_id: str) -> dict[str, str] | None:
        """Remove a receipt and its hash-index and search entries (one script). Returns what
        was removed (receipt_id, project_id, receipt_hash) or None when there was no such
        receipt."""
        stored = await self.get_receipt_json(receipt_id)
        if stored is None:
            return None
        receipt = orjson.loads(stored)
        project_id, receipt_hash = receipt["project_id"], receipt["receipt_hash"]
        input_hash, output_hash = receipt.get("input_hash"), receipt.get("output_hash")
        await self._delete_receipt.registered(
            keys=[
                keys.receipt_key(receipt_id),
                keys.index_meta_key(project_id),
                *self._search_keys(project_id, input_hash, output_hash),
            ],
            args=[
                keys.receipt_id_bytes(receipt_id),
                keys.hash_index_field(receipt_hash),
                keys.search_field("input_hash", input_hash) if isinstance(input_hash, str) else b"",
                keys.search_field("output_hash", output_hash) if isinstance(output_hash, str) else b"",
            ],
        )
        return {"receipt_id": receipt_id, "project_id": project_id, "receipt_hash": receipt_hash}

    @staticmethod
    def _search_keys(project_id: str, input_hash: Any, output_hash: Any) -> list[str]:
        """The two search-set KEYS of a receipt (``x:``: a hash's ids once it has more than
        four receipts).

        Both KEYS are always passed (scripts declare fixed KEYS, all in the project's slot):
        a missing output hash repeats the input's key, a missing input hash (only in tests
        that plant bare records) names a set that is never written.
        """
        has_input, has_output = isinstance(input_hash, str), isinstance(output_hash, str)
        input_key = keys.search_index_key(project_id, "input_hash", input_hash if has_input else "")
        output_key = keys.search_index_key(project_id, "output_hash", output_hash) if has_output else input_key
        return [input_key, output_key]
