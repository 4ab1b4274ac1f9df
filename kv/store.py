"""The store: one class whose intent-named methods each do one atomic Redis operation.

Scripts live in ``kv/lua/*.lua`` and are registered once (``register_script`` reloads them
after a Redis restart empties the script cache). Scripts answer small codes, mapped here
to domain results, so the web layer never sees Redis replies. Connection failures and
timeouts become ``StoreUnavailable`` (503): signing and recording fail closed.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import orjson
import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from kv import keys
from receipts.errors import StoreUnavailable

LUA_DIR = Path(__file__).parent / "lua"
P = ParamSpec("P")
T = TypeVar("T")

UNAVAILABLE_ERRORS = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    redis_errors.ReadOnlyError,
    OSError,
)


def _unavailable_as_503(func: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await func(*args, **kwargs)
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable("the receipt store is unreachable; try again shortly") from exc

    return wrapper


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class KeyRecord:
    """What an API key stands for. ``key_hash`` is ``sha256:<hex>``; the raw key is never kept."""

    key_hash: str
    project_id: str
    actor_id: str
    plan: str
    revoked: bool
    created_at: str
    suspended_until: str = ""
    """"" (not suspended), "forever", or Unix milliseconds as text."""

    def suspended_at(self, now_ms: int) -> bool:
        """True while a suspension is in force; a timed one ends by itself."""
        if not self.suspended_until:
            return False
        return self.suspended_until == "forever" or now_ms < int(self.suspended_until)


class IssueOutcome(enum.Enum):
    ISSUED = 0
    REPLAY = 1
    IDEMPOTENCY_CONFLICT = 2
    TIP_MOVED = 3
    NO_PROJECT = 4
    RATE_LIMITED = 5
    QUOTA_EXCEEDED = 6


@dataclass(frozen=True)
class Counter:
    """One fixed-window counter: which window, its limit, and how long the key must live."""

    window_id: str
    limit: int
    ttl_s: int


@dataclass(frozen=True)
class IssueResult:
    outcome: IssueOutcome
    receipt_id: str | None = None
    tip: str | None = None
    minute_used: int = 0
    month_used: int = 0


class Store:
    """Async access to every record. Construct with a redis-py asyncio client (or fakeredis)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.embedded_server: Any = None
        """The in-process fakeredis server in embedded mode (jobs share it), else None."""
        self._issue = client.register_script((LUA_DIR / "issue_receipt.lua").read_text())
        self._create_project = client.register_script((LUA_DIR / "create_project.lua").read_text())
        self._hit_counter = client.register_script((LUA_DIR / "hit_counter.lua").read_text())
        self._delete_receipt = client.register_script((LUA_DIR / "delete_receipt.lua").read_text())

    async def close(self) -> None:
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
        raw = await self.client.hgetall(keys.api_key_key(key_hash))
        if not raw:
            return None
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return KeyRecord(
            key_hash=key_hash,
            project_id=fields.get("project_id") or "",
            actor_id=fields.get("actor_id") or "",
            plan=fields.get("plan") or "free",
            revoked=fields.get("revoked") == "1",
            created_at=fields.get("created_at") or "",
            suspended_until=fields.get("suspended_until") or "",
        )

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
        """Remove a receipt and its hash-index entry (one script). Returns what was removed
        (receipt_id, project_id, receipt_hash) or None when there was no such receipt."""
        stored = await self.get_receipt_json(receipt_id)
        if stored is None:
            return None
        receipt = orjson.loads(stored)
        project_id, receipt_hash = receipt["project_id"], receipt["receipt_hash"]
        await self._delete_receipt(
            keys=[keys.receipt_key(receipt_id), keys.receipt_hash_key(project_id, receipt_hash)],
            args=[receipt_id],
        )
        return {"receipt_id": receipt_id, "project_id": project_id, "receipt_hash": receipt_hash}

    @_unavailable_as_503
    async def read_tip(self, project_id: str) -> tuple[bool, str | None]:
        """(project exists, main chain tip or None)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(keys.project_key(project_id))
        pipe.hget(keys.project_key(project_id), "tip")
        exists, tip = await pipe.execute()
        return bool(exists), _text(tip) or None

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
    ) -> IssueResult:
        """Record a signed receipt if its tip still holds, it is not a replay, and the key's
        minute limit and the project's monthly quota allow it; count it in both at once."""
        reply: Any = await self._issue(
            keys=[
                keys.project_key(project_id),
                keys.idempotency_key(project_id, replay_key),
                keys.receipt_key(receipt_id),
                keys.receipt_hash_key(project_id, receipt_hash),
                keys.key_minute_counter_key(project_id, key_hash, minute.window_id),
                keys.project_month_counter_key(project_id, month.window_id),
            ],
            args=[
                built_on_tip or "",
                receipt_json,
                receipt_id,
                receipt_hash,
                "1" if on_main else "0",
                fingerprint,
                minute.limit,
                minute.ttl_s,
                month.limit,
                month.ttl_s,
                stale_receipt_id,
            ],
        )
        outcome = IssueOutcome(int(reply[0]))
        value = _text(reply[1]) or None
        return IssueResult(
            outcome,
            receipt_id=value if outcome is IssueOutcome.REPLAY else None,
            tip=value if outcome is IssueOutcome.TIP_MOVED else None,
            minute_used=int(reply[2]),
            month_used=int(reply[3]),
        )

    async def _hit(self, key: str, counter: Counter) -> tuple[bool, int]:
        reply: Any = await self._hit_counter(keys=[key], args=[counter.limit, counter.ttl_s])
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
    async def read_ip_counter(self, ip_bucket: str, scope: str, window_id: str) -> int:
        """The current count, without counting."""
        return int(await self.client.get(keys.ip_counter_key(ip_bucket, scope, window_id)) or 0)

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

    @_unavailable_as_503
    async def get_receipt_json(self, receipt_id: str) -> bytes | None:
        """The stored receipt bytes, or None (unknown, expired or deleted)."""
        value = await self.client.get(keys.receipt_key(receipt_id))
        return value.encode("utf-8") if isinstance(value, str) else value

    @_unavailable_as_503
    async def find_receipt_id_by_hash(self, project_id: str, receipt_hash: str) -> str | None:
        """The id of the project's receipt with this hash, or None."""
        return _text(await self.client.get(keys.receipt_hash_key(project_id, receipt_hash)))
