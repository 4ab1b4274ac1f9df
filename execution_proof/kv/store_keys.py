"""The store's projects and API keys: creating a project with its first key, project names,
key records and their authentication lookups, revocation, reissue and suspension
(kv/accounts.py builds on them; the types are in kv/records.py)."""

from __future__ import annotations

from typing import Any

from execution_proof.kv import keys
from execution_proof.kv.link import Link, LuaScript
from execution_proof.kv.records import (
    KEY_RECORD_FIELDS,
    AuthOutcome,
    AuthResult,
    Counter,
    KeyRecord,
    RedisClient,
    as_text,
    key_record_of,
    unavailable_as_503,
)


class KeyStore:
    """Projects and API keys (``store.keys``): the limiter's key lookups, the operator's and
    the claims' accounts (kv/accounts.py)."""

    def __init__(
        self,
        client: RedisClient,
        link: Link,
        is_cluster: bool,
        *,
        create_project: LuaScript,
        authenticate: LuaScript,
        hit_counter: LuaScript,
    ) -> None:
        self.client = client
        self.link = link
        self.is_cluster = is_cluster
        self._one_script = not is_cluster
        """``authenticate`` runs kv/lua/authenticate.lua: the key record and the address's
        counters share one script call. On a Cluster they live in different slots: two round
        trips instead (``_authenticate_in_two``)."""
        self._create_project = create_project
        self._authenticate = authenticate
        self._hit_counter = hit_counter

    @unavailable_as_503
    async def create_project(self, *, project_id: str, name: str, created_at: str, key: KeyRecord) -> None:
        """Create the project with its first key. Raises ``ValueError`` if the id exists.

        The key record lives in its own slot, so the two writes cannot share a script. It is
        written first: if the project write then fails, the key points at a project that
        does not exist (404 on use), and since the raw key was never shown, nobody holds it.
        """
        await self.write_key_record(key)
        created = await self._create_project.registered(
            keys=[keys.project_key(project_id), keys.project_api_keys_key(project_id)],
            args=[name, created_at, key.key_hash],
        )
        if not created:
            await self.client.delete(keys.api_key_key(key.key_hash))
            raise ValueError(f"project {project_id} already exists")

    @unavailable_as_503
    async def claim_project_name(self, name: str, project_id: str) -> str | None:
        """Reserve ``name`` for ``project_id``. None when reserved; else the id holding it.

        One HSETNX on one hash: of any number of concurrent claims of a name exactly one
        wins, on a single Redis or a cluster (one key, one slot).
        """
        if await self.client.hsetnx(keys.project_names_key(), name, project_id):
            return None
        return as_text(await self.client.hget(keys.project_names_key(), name)) or ""

    @unavailable_as_503
    async def release_project_name(self, name: str, project_id: str) -> None:
        """Undo ``claim_project_name`` after a failed create. Only the claimer releases, and
        no other claim can take the name while it is held, so read-then-delete is safe."""
        if as_text(await self.client.hget(keys.project_names_key(), name)) == project_id:
            await self.client.hdel(keys.project_names_key(), name)

    @unavailable_as_503
    async def find_project_by_name(self, name: str) -> str | None:
        """The id of the project ``keys create`` made with ``name``, or None."""
        return as_text(await self.client.hget(keys.project_names_key(), name))

    async def write_key_record(self, key: KeyRecord) -> None:
        """The key record alone, in its own slot: written first by ``create_project``,
        ``add_project_key`` and ``CheckoutStore.claim_checkout``."""
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

    @unavailable_as_503
    async def find_api_key(self, key_hash: str) -> KeyRecord | None:
        """The record for a key hash, or None when unknown."""
        return key_record_of(key_hash, await self.link.send("HMGET", keys.api_key_key(key_hash), *KEY_RECORD_FIELDS))

    @unavailable_as_503
    async def find_api_key_and_read_ip_counter(
        self, key_hash: str, ip_bucket: str, scope: str, window_id: str
    ) -> tuple[KeyRecord | None, int]:
        """``find_api_key`` and ``read_ip_counter`` in one round trip (pipelined on the link,
        not a transaction: both only read; the two keys live in different slots)."""
        return await self._find_and_read(key_hash, ip_bucket, scope, window_id)

    async def _find_and_read(
        self, key_hash: str, ip_bucket: str, scope: str, window_id: str
    ) -> tuple[KeyRecord | None, int]:
        record = self.link.send("HMGET", keys.api_key_key(key_hash), *KEY_RECORD_FIELDS)
        count = self.link.send("GET", keys.ip_counter_key(ip_bucket, scope, window_id))
        return key_record_of(key_hash, await record), int(await count or 0)

    @unavailable_as_503
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
        """The key lookup, the address's failed-auth throttle and its ``scope_name`` counter,
        with the outcomes kv/lua/authenticate.lua documents. Both counters use ``scope``'s
        minute window; nothing is counted unless ``count``, the key is usable and its project
        has no suspension set.

        On a plain Redis one script call does it all. On a Cluster the key record and the
        address's counters live in different slots: two round trips, the same checks in the
        same order (``_authenticate_in_two``)."""
        if not self._one_script:
            return await self._authenticate_in_two(key_hash, ip_bucket, scope, scope_name, failed_limit, count=count)
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
        record = key_record_of(key_hash, reply[2:]) if len(reply) > 2 else None
        return AuthResult(outcome, int(reply[1]), record)

    async def _authenticate_in_two(
        self,
        key_hash: str,
        ip_bucket: str,
        scope: Counter,
        scope_name: str,
        failed_limit: int,
        *,
        count: bool,
    ) -> AuthResult:
        """authenticate.lua's checks where its keys cannot share a script: the key record
        and the address's failed-auth count read together (one pipelined round trip), then,
        if the request is to be counted, the scope counter hit with hit_counter.lua."""
        record, failed = await self._find_and_read(key_hash, ip_bucket, "unauthenticated", scope.window_id)
        if failed >= failed_limit:
            return AuthResult(AuthOutcome.THROTTLED, failed)
        if record is None or record.revoked:
            return AuthResult(AuthOutcome.UNUSABLE, failed)
        if not count or record.suspended_until:
            return AuthResult(AuthOutcome.NOT_COUNTED, 0, record)
        reply: Any = await self.link.run_script(
            self._hit_counter,
            [keys.ip_counter_key(ip_bucket, scope_name, scope.window_id)],
            [scope.limit, scope.ttl_s],
        )
        outcome = AuthOutcome.COUNTED if int(reply[0]) else AuthOutcome.LIMITED
        return AuthResult(outcome, int(reply[1]), record)

    @unavailable_as_503
    async def revoke_api_key(self, key_hash: str) -> bool:
        """Mark a key revoked. False when no such key exists (nothing is written)."""
        name = keys.api_key_key(key_hash)
        if not await self.client.exists(name):
            return False
        await self.client.hset(name, "revoked", "1")
        return True

    @unavailable_as_503
    async def get_project(self, project_id: str) -> dict[str, str] | None:
        """The project record's fields (name, created_at, tip, suspended_until), or None."""
        raw = await self.client.hgetall(keys.project_key(project_id))
        return {as_text(k) or "": as_text(v) or "" for k, v in raw.items()} or None

    @unavailable_as_503
    async def list_project_keys(self, project_id: str) -> list[KeyRecord]:
        """Every key record of the project, oldest first (hashes and states, never keys)."""
        hashes = sorted(as_text(h) or "" for h in await self.client.smembers(keys.project_api_keys_key(project_id)))
        records = [await self.find_api_key(h) for h in hashes]
        return sorted((r for r in records if r is not None), key=lambda r: r.created_at)

    @unavailable_as_503
    async def add_project_key(self, key: KeyRecord) -> None:
        """A further key for an existing project (reissue): the record, then the set entry."""
        await self.write_key_record(key)
        await self.client.sadd(keys.project_api_keys_key(key.project_id), key.key_hash)

    @unavailable_as_503
    async def set_project_suspension(self, project_id: str, suspended_until: str) -> int:
        """Suspend ("forever" or Unix ms) or lift ("") on the project and each of its keys.

        Key records live in their own slots, so this is one write per key, in order; run
        again it converges. Returns how many key records were updated.
        """
        await self.client.hset(keys.project_key(project_id), "suspended_until", suspended_until)
        members = await self.client.smembers(keys.project_api_keys_key(project_id))
        updated = 0
        for member in members:
            name = keys.api_key_key(as_text(member) or "")
            if await self.client.exists(name):
                await self.client.hset(name, "suspended_until", suspended_until)
                updated += 1
        return updated
