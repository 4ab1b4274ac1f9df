"""The store: one class whose intent-named methods each do one atomic Redis operation (its
retention sweep and paid-claim records are its mixins in kv/store_retention.py and
kv/store_checkouts.py; the types it returns are in kv/records.py).

Scripts live in ``kv/lua/*.lua`` and are registered once (``register_script`` reloads them
after a Redis restart empties the script cache). Scripts answer small codes, mapped here
to domain results, so the web layer never sees Redis replies. Connection failures and
timeouts become ``StoreUnavailable`` (503): signing and recording fail closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from kv import keys
from kv.link import FastLink, LuaScript, PyLink, link_for
from kv.records import (
    KEY_RECORD_FIELDS,
    AuthOutcome,
    AuthResult,
    Counter,
    IssueItem,
    IssueOutcome,
    IssueResult,
    KeyRecord,
    _bytes,
    _checked_receipt_bytes,
    _IndexLookup,
    _key_record,
    _receipt_id,
    _text,
    _unavailable_as_503,
)
from kv.store_checkouts import CheckoutStore
from kv.store_retention import RetentionStore
from receipts.errors import StoreUnavailable
from runtime.store_ack import NO_ACK, StoreAck

LUA_DIR = Path(__file__).parent / "lua"


def _index_script(name: str) -> str:
    """A script that works on a project's index: the shared index functions, then it."""
    return (LUA_DIR / "index_buckets.lua").read_text() + (LUA_DIR / name).read_text()


class Store(RetentionStore, CheckoutStore):
    """Async access to every record. Construct with a redis-py asyncio client, a redis-py
    asyncio ``RedisCluster`` (``REDIS_CLUSTER=true``, docs/cluster.md) or fakeredis."""

    def __init__(self, client: aioredis.Redis | RedisCluster) -> None:
        self.client = client
        self.embedded_server: Any = None
        """The in-process fakeredis server in embedded mode (jobs share it), else None."""
        self.ack: StoreAck = NO_ACK
        """What a create waits for after its write (``STORE_ACK``, docs/redis.md)."""
        self.link: FastLink | PyLink = link_for(client)
        """The per-request commands' way to Redis (kv/link.py): one pipelined connection to a
        plain Redis, else the redis-py client itself."""
        self._issue = LuaScript.register(client, _index_script("issue_receipt.lua"))
        self._find_index_field = LuaScript.register(client, _index_script("find_index_field.lua"))
        self._expire_bucket = client.register_script((LUA_DIR / "expire_index_bucket.lua").read_text())
        self._create_project = client.register_script((LUA_DIR / "create_project.lua").read_text())
        self._hit_counter = LuaScript.register(client, (LUA_DIR / "hit_counter.lua").read_text())
        self._refund_counter = LuaScript.register(client, (LUA_DIR / "refund_counter.lua").read_text())
        self._authenticate = LuaScript.register(client, (LUA_DIR / "authenticate.lua").read_text())
        self.is_cluster = isinstance(client, RedisCluster)
        """Decided once: ``isinstance`` against redis-py's cluster class goes through typing's
        protocol check (about 2 us), too slow for every operation."""
        self.one_call_auth = not self.is_cluster
        """``authenticate`` may be used: one script reads the key record and the address's
        counters (on a Cluster they live in different slots: two round trips instead)."""
        self._delete_receipt = client.register_script(_index_script("delete_receipt.lua"))
        self._index_checkout = client.register_script((LUA_DIR / "index_checkout.lua").read_text())
        self._claim_checkout = client.register_script((LUA_DIR / "claim_checkout.lua").read_text())

    async def close(self) -> None:
        await self.link.close()
        await self.client.aclose()

    @_unavailable_as_503
    async def ping(self) -> bool:
        return bool(await self.client.ping())

    @_unavailable_as_503
    async def create_project(self, *, project_id: str, name: str, created_at: str, key: KeyRecord) -> None:
        """Create the project with its first key. Raises ``ValueError`` if the id exists.

        The key record lives in its own slot, so the two writes cannot share a script. It is
        written first: if the project write then fails, the key points at a project that
        does not exist (404 on use), and since the raw key was never shown, nobody holds it.
        """
        await self._write_key_record(key)
        created = await self._create_project(
            keys=[keys.project_key(project_id), keys.project_api_keys_key(project_id)],
            args=[name, created_at, key.key_hash],
        )
        if not created:
            await self.client.delete(keys.api_key_key(key.key_hash))
            raise ValueError(f"project {project_id} already exists")

    @_unavailable_as_503
    async def claim_project_name(self, name: str, project_id: str) -> str | None:
        """Reserve ``name`` for ``project_id``. None when reserved; else the id holding it.

        One HSETNX on one hash: of any number of concurrent claims of a name exactly one
        wins, on a single Redis or a cluster (one key, one slot).
        """
        if await self.client.hsetnx(keys.project_names_key(), name, project_id):
            return None
        return _text(await self.client.hget(keys.project_names_key(), name)) or ""

    @_unavailable_as_503
    async def release_project_name(self, name: str, project_id: str) -> None:
        """Undo ``claim_project_name`` after a failed create. Only the claimer releases, and
        no other claim can take the name while it is held, so read-then-delete is safe."""
        if _text(await self.client.hget(keys.project_names_key(), name)) == project_id:
            await self.client.hdel(keys.project_names_key(), name)

    @_unavailable_as_503
    async def find_project_by_name(self, name: str) -> str | None:
        """The id of the project ``keys create`` made with ``name``, or None."""
        return _text(await self.client.hget(keys.project_names_key(), name))

    async def _write_key_record(self, key: KeyRecord) -> None:
        await self.client.hset(
            keys.api_key_key(key.key_hash),
            mapping={
                "project_id": key.project_id,
                "actor_id": key.actor_id,
                "plan": key.plan,
                "revoked": "1" if key.revoked else "0",
                "created_at": key.created_at,
                "suspended_until": key.suspended_until,
            },
        )

    @_unavailable_as_503
    async def find_api_key(self, key_hash: str) -> KeyRecord | None:
        """The record for a key hash, or None when unknown."""
        return _key_record(key_hash, await self.link.send("HMGET", keys.api_key_key(key_hash), *KEY_RECORD_FIELDS))

    @_unavailable_as_503
    async def find_api_key_and_read_ip_counter(
        self, key_hash: str, ip_bucket: str, scope: str, window_id: str
    ) -> tuple[KeyRecord | None, int]:
        """``find_api_key`` and ``read_ip_counter`` in one round trip (pipelined on the link,
        not a transaction: both only read; the two keys live in different slots)."""
        record = self.link.send("HMGET", keys.api_key_key(key_hash), *KEY_RECORD_FIELDS)
        count = self.link.send("GET", keys.ip_counter_key(ip_bucket, scope, window_id))
        return _key_record(key_hash, await record), int(await count or 0)

    @_unavailable_as_503
    async def authenticate(
        self,
        key_hash: str,
        ip_bucket: str,
        scope: Counter,
        scope_name: str,
        failed_limit: int,
        *,
        count: bool,
    ) -> AuthResult:
        """The key lookup, the address's failed-auth throttle and its ``scope_name`` counter
        in one script call (kv/lua/authenticate.lua; only when ``one_call_auth``). Both
        counters use ``scope``'s minute window; nothing is counted unless ``count``, the key
        is usable and its project has no suspension set."""
        reply: Any = await self.link.run_script(
            self._authenticate,
            [
                keys.api_key_key(key_hash),
                keys.ip_counter_key(ip_bucket, "unauthenticated", scope.window_id),
                keys.ip_counter_key(ip_bucket, scope_name, scope.window_id),
            ],
            [failed_limit, scope.limit, scope.ttl_s, "1" if count else "0"],
        )
        outcome = AuthOutcome(int(reply[0]))
        record = _key_record(key_hash, reply[2:]) if len(reply) > 2 else None
        return AuthResult(outcome, int(reply[1]), record)

    @_unavailable_as_503
    async def revoke_api_key(self, key_hash: str) -> bool:
        """Mark a key revoked. False when no such key exists (nothing is written)."""
        name = keys.api_key_key(key_hash)
        if not await self.client.exists(name):
            return False
        await self.client.hset(name, "revoked", "1")
        return True

    @_unavailable_as_503
    async def get_project(self, project_id: str) -> dict[str, str] | None:
        """The project record's fields (name, created_at, tip, suspended_until), or None."""
        raw = await self.client.hgetall(keys.project_key(project_id))
        return {_text(k) or "": _text(v) or "" for k, v in raw.items()} or None

    @_unavailable_as_503
    async def list_project_keys(self, project_id: str) -> list[KeyRecord]:
        """Every key record of the project, oldest first (hashes and states, never keys)."""
        hashes = sorted(_text(h) or "" for h in await self.client.smembers(keys.project_api_keys_key(project_id)))
        records = [await self.find_api_key(h) for h in hashes]
        return sorted((r for r in records if r is not None), key=lambda r: r.created_at)

    @_unavailable_as_503
    async def add_project_key(self, key: KeyRecord) -> None:
        """A further key for an existing project (reissue): the record, then the set entry."""
        await self._write_key_record(key)
        await self.client.sadd(keys.project_api_keys_key(key.project_id), key.key_hash)

    @_unavailable_as_503
    async def set_project_suspension(self, project_id: str, suspended_until: str) -> int:
        """Suspend ("forever" or Unix ms) or lift ("") on the project and each of its keys.

        Key records live in their own slots, so this is one write per key, in order; run
        again it converges. Returns how many key records were updated.
        """
        await self.client.hset(keys.project_key(project_id), "suspended_until", suspended_until)
        members = await self.client.smembers(keys.project_api_keys_key(project_id))
        updated = 0
        for member in members:
            name = keys.api_key_key(_text(member) or "")
            if await self.client.exists(name):
                await self.client.hset(name, "suspended_until", suspended_until)
                updated += 1
        return updated

    @_unavailable_as_503
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
        await self._delete_receipt(
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

    @_unavailable_as_503
    async def read_tip(self, project_id: str) -> tuple[bool, str | None]:
        """(project exists, main chain tip or None)."""
        exists = self.link.send("EXISTS", keys.project_key(project_id))
        tip = self.link.send("HGET", keys.project_key(project_id), "tip")
        return bool(await exists), _text(await tip) or None

    @_unavailable_as_503
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

    @_unavailable_as_503
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
        for item in items:
            receipt_id_bytes = keys.receipt_id_bytes(item.receipt_id)
            script_keys += [
                project_key,
                keys.receipt_key(item.receipt_id),
                meta_key,
                keys.key_minute_counter_key(project_id, item.key_hash, item.minute.window_id),
                keys.project_month_counter_key(project_id, item.month.window_id),
                *self._search_keys(project_id, item.input_hash, item.output_hash),
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
            ]
        if self.ack.enabled:
            reply, unacknowledged = await self._issue_acknowledged(script_keys, script_args, items)
        else:
            reply, unacknowledged = await self.link.run_script(self._issue, script_keys, script_args), None
        results = []
        for at in range(0, len(reply), 4):
            outcome = IssueOutcome(int(reply[at]))
            value = (_receipt_id(reply[at + 1]) if outcome is IssueOutcome.REPLAY else _text(reply[at + 1])) or None
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

    async def _hit(self, key: str, counter: Counter) -> tuple[bool, int]:
        reply: Any = await self.link.run_script(self._hit_counter, [key], [counter.limit, counter.ttl_s])
        return bool(int(reply[0])), int(reply[1])

    @_unavailable_as_503
    async def hit_key_counter(self, project_id: str, key_hash: str, counter: Counter) -> tuple[bool, int]:
        """Count one request of an API key in its minute window: (allowed, count)."""
        return await self._hit(keys.key_minute_counter_key(project_id, key_hash, counter.window_id), counter)

    @_unavailable_as_503
    async def hit_ip_counter(self, ip_bucket: str, scope: str, counter: Counter) -> tuple[bool, int]:
        """Count one request from a client address under ``scope``: (allowed, count)."""
        return await self._hit(keys.ip_counter_key(ip_bucket, scope, counter.window_id), counter)

    @_unavailable_as_503
    async def refund_ip_counter(self, ip_bucket: str, scope: str, window_id: str) -> int:
        """Take back one request counted under ``scope`` (one that was then refused for its
        body); the count after it. A counter already gone stays gone."""
        key = keys.ip_counter_key(ip_bucket, scope, window_id)
        return int(await self.link.run_script(self._refund_counter, [key], []))

    @_unavailable_as_503
    async def read_ip_counter(self, ip_bucket: str, scope: str, window_id: str) -> int:
        """The current count, without counting."""
        return int(await self.link.send("GET", keys.ip_counter_key(ip_bucket, scope, window_id)) or 0)

    @_unavailable_as_503
    async def read_usage(self, project_id: str, key_hash: str, minute_window_id: str, month_id: str) -> tuple[int, int]:
        """(requests by this key this minute, receipts of the project this month)."""
        values = await self.client.mget(
            [
                keys.key_minute_counter_key(project_id, key_hash, minute_window_id),
                keys.project_month_counter_key(project_id, month_id),
            ]
        )
        return int(values[0] or 0), int(values[1] or 0)

    def prefetch_receipt_json(self, receipt_id: str) -> Awaitable[Any]:
        """Send the receipt's read now, so it leaves in the same write as the next command of
        this event-loop turn (a limit check, say); hand the result to
        ``prefetched_receipt_json``. A prefetch nobody awaits (the request was refused) is dropped."""
        return self.link.send("GET", keys.receipt_key(receipt_id))

    def prefetch_receipt_id_by_hash(self, project_id: str, receipt_hash: str) -> _IndexLookup:
        """As ``prefetch_receipt_json``, for ``prefetched_text``: the lookup script is sent
        now (``EVALSHA``; should Redis not know the script yet, ``prefetched_text`` sends it
        with ``EVAL``, one more round trip once per Redis start)."""
        script_keys, script_args = self._hash_lookup(project_id, receipt_hash)
        script = self._find_index_field
        sent = self.link.send("EVALSHA", script.sha, len(script_keys), *script_keys, *script_args)
        return _IndexLookup(sent, script_keys, script_args)

    @staticmethod
    def _hash_lookup(project_id: str, receipt_hash: str) -> tuple[list[Any], list[Any]]:
        """``find_index_field.lua``'s KEYS and ARGV for a receipt hash: the index meta key;
        the hash-index field."""
        return [keys.index_meta_key(project_id)], [keys.hash_index_field(receipt_hash)]

    @_unavailable_as_503
    async def prefetched_receipt_json(self, sent: Awaitable[Any], receipt_id: str) -> bytes | None:
        """The receipt JSON of ``prefetch_receipt_json(receipt_id)``, or None; as ``get_receipt_json``."""
        return _checked_receipt_bytes(await sent, receipt_id)

    @_unavailable_as_503
    async def prefetched_text(self, sent: _IndexLookup) -> str | None:
        """The receipt id a ``prefetch_receipt_id_by_hash`` found, or None."""
        try:
            reply = await sent.sent
        except NoScriptError:  # Redis restarted since, or never ran it: EVAL loads it too
            source = self._find_index_field.source
            reply = await self.link.send("EVAL", source, len(sent.keys), *sent.keys, *sent.args)
        return _receipt_id(reply)

    @_unavailable_as_503
    async def get_receipt_json(self, receipt_id: str, project_id: str | None = None) -> bytes | None:
        """The receipt's JSON bytes, exactly as every read returns them, or None (unknown,
        expired or deleted). The stored value may be a compact record: it is decoded here.

        Raises ``CorruptRecord`` when the stored value cannot be decoded, or is not this
        receipt's record (another ``receipt_id``; another project than ``project_id``, when
        given): a read never hands out another receipt than the one it was asked for."""
        return _checked_receipt_bytes(await self.prefetch_receipt_json(receipt_id), receipt_id, project_id)

    @_unavailable_as_503
    async def find_receipt_id_by_hash(self, project_id: str, receipt_hash: str) -> str | None:
        """The id of the project's receipt with this hash, or None. The index keys a
        truncated hash: the caller checks the full ``receipt_hash`` of the receipt it reads."""
        script_keys, script_args = self._hash_lookup(project_id, receipt_hash)
        return _receipt_id(await self.link.run_script(self._find_index_field, script_keys, script_args))

    @_unavailable_as_503
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
        packed = _bytes(replies[0]) or b""
        found = {keys.receipt_id_from_bytes(packed[at : at + 16]) for at in range(0, len(packed) - 15, 16)}
        for members in replies[1:]:
            found.update(receipt_id for member in members if (receipt_id := _receipt_id(member)))
        ids = sorted((m for m in found if after is None or m < after), reverse=True)
        page, more = ids[:limit], len(ids) > limit
        stored = await self.client.mget([keys.receipt_key(m) for m in page]) if page else []
        receipts = []
        for receipt_id, value in zip(page, stored, strict=True):
            receipt_json = _checked_receipt_bytes(value, receipt_id, project_id)
            if receipt_json is not None and orjson.loads(receipt_json).get(field) == hash_str:
                receipts.append(receipt_json)
        return receipts, (page[-1] if more else None)
