"""What the store hands out: key records, results and outcomes, and the helpers every store
module shares (decoding replies, turning an unreachable Redis into ``StoreUnavailable``)."""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeAlias, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from execution_proof.kv import keys
from execution_proof.kv.errors import UNAVAILABLE_ERRORS
from execution_proof.receipts import compact
from execution_proof.receipts.errors import CorruptRecord, StoreUnavailable
from execution_proof.runtime.metrics import STORE_OPERATION_SECONDS, count_store_error

P = ParamSpec("P")
T = TypeVar("T")

RedisClient = aioredis.Redis | RedisCluster
"""The redis-py client a store is built on: one Redis, or a Redis Cluster (fakeredis stands in for the first)."""


def unavailable_as_503(func: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Wraps a sub-store's operation: an unreachable Redis becomes ``StoreUnavailable`` (503).
    Also the store's one measuring point: every operation's time and failures (runtime.metrics).
    The sub-store (the first argument) has ``is_cluster`` and ``client`` for a cluster's first use."""
    operation = func.__name__
    observe = STORE_OPERATION_SECONDS.labels(operation).observe

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        started = time.perf_counter()
        try:
            if getattr(args[0], "is_cluster", False):
                # Learn the slot map before the first command. redis-py 8.1's cluster client
                # initialises lazily, and commands racing that first initialisation fail with
                # AttributeError on a half-open connection (docs/cluster.md). Once it is
                # initialised this is an attribute check; its own lock serialises the first.
                await args[0].client.initialize()  # type: ignore[attr-defined]
            return await func(*args, **kwargs)
        except UNAVAILABLE_ERRORS as exc:
            count_store_error(operation, type(exc).__name__)
            raise StoreUnavailable("the receipt store is unreachable; try again shortly") from exc
        except RedisError as exc:
            count_store_error(operation, type(exc).__name__)
            raise
        except StoreUnavailable as exc:
            if exc.details and exc.details.get("reason") == "not_acknowledged":
                count_store_error(operation, "not_acknowledged")
            raise
        finally:
            observe(time.perf_counter() - started)

    return wrapper


def as_text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else value


KEY_RECORD_FIELDS = ("project_id", "actor_id", "plan", "revoked", "created_at", "suspended_until")


def key_record_of(key_hash: str, values: list[Any]) -> KeyRecord | None:
    """A key record from ``HMGET`` of ``KEY_RECORD_FIELDS``, or None when the key is unknown
    (HMGET of a missing hash answers every field None)."""
    if all(value is None for value in values):
        return None
    project_id, actor_id, plan, revoked, created_at, suspended_until = (as_text(v) for v in values)
    return KeyRecord(
        key_hash=key_hash,
        project_id=project_id or "",
        actor_id=actor_id or "",
        plan=plan or "free",
        revoked=revoked == "1",
        created_at=created_at or "",
        suspended_until=suspended_until or "",
    )


def as_bytes(value: bytes | str | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


IndexLookup: TypeAlias = Awaitable[Any]
"""A hash-index lookup sent ahead (``ReceiptStore.prefetch_receipt_by_hash``: the link's
``send_script``); ``ReceiptStore.prefetched_receipt_by_hash`` awaits it for the receipt."""


def checked_receipt_bytes(value: bytes | str | None, receipt_id: str, project_id: str | None = None) -> bytes | None:
    """The receipt JSON of a stored value (compact record or JSON) read by ``receipt_id`` (of
    ``project_id``, when given): None when absent; ``CorruptRecord`` for a value that cannot be
    decoded or is another receipt's."""
    stored = as_bytes(value)
    if stored is None:
        return None
    try:
        return compact.decode_as(stored, receipt_id, project_id)
    except ValueError as exc:
        raise CorruptRecord(receipt_id, str(exc)) from None


HASH_INDEX_LENGTHS = (16, 16 + keys.LOG_TAG_BYTES, 16 + keys.LOG_TAG_BYTES + keys.LOG_INDEX_BYTES)
"""A hash-index value: the receipt id, then the tag of the log it was queued for, then its index there."""


def receipt_id_of(value: bytes | str | None) -> str | None:
    """A receipt id as the index holds it (16 bytes), as text; None for anything else."""
    if isinstance(value, bytes) and len(value) in HASH_INDEX_LENGTHS:
        return keys.receipt_id_from_bytes(value[:16])  # a hash-index value may carry the log's tag and index
    return None


def lenient_text(value: bytes | str) -> str:
    """Text of a key or value the sweep merely inspects (a foreign non-UTF-8 one must not stop it)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


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
    LOG_BACKLOG = 7


class AuthOutcome(enum.Enum):
    """What ``KeyStore.authenticate`` found (kv/lua/authenticate.lua)."""

    COUNTED = 0
    THROTTLED = 1
    UNUSABLE = 2
    LIMITED = 3
    NOT_COUNTED = 4


@dataclass(frozen=True)
class AuthResult:
    outcome: AuthOutcome
    count: int
    """THROTTLED/UNUSABLE: the address's failed-auth count; COUNTED/LIMITED: its scope count."""
    record: KeyRecord | None = None


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
    unacknowledged: StoreUnavailable | None = None
    """With ``STORE_ACK``: the 503 for an issued or replayed receipt whose write was not
    acknowledged in time (the receipt is written; the same request again replays it)."""


@dataclass(frozen=True)
class IssueItem:
    """One signed receipt for ``ReceiptStore.issue_receipts``, with what its script checks and counts."""

    receipt_id: str
    receipt_hash: str
    receipt_json: bytes
    built_on_tip: str | None
    on_main: bool
    replay_key: str
    fingerprint: str
    key_hash: str
    minute: Counter
    month: Counter
    stale_receipt_id: str = ""
    input_hash: str | None = None
    output_hash: str | None = None
    stored_value: bytes = b""
    """What the receipt record holds (``receipts.compact.encode``); b"": ``receipt_json``."""
    log_entry: bytes = b""
    """The receipt's transparency-log entry (``receipts.tlog.entry_bytes``); b"": no log."""


@dataclass(frozen=True)
class LogQueue:
    """Where creates queue their transparency-log entries: the log's identity (every key of
    the log, and each receipt's hash-index value, carries its tag) and ``LOG_MAX_PENDING``."""

    identity: keys.LogIdentity
    max_pending: int


@dataclass(frozen=True)
class CheckoutRecord:
    """A checkout as the store holds it, under its reference (``keys.checkout_ref``).

    ``state``: "seen" (webhook arrived, not indexed yet), "claimable" or "claimed".
    """

    ref: str
    project_id: str | None
    state: str
    plan: str = ""
    created_ms: int = 0


class ClaimOutcome(enum.Enum):
    CLAIMED = 0
    NOT_INDEXED = 1
    ALREADY_CLAIMED = 2
    EXPIRED = 3
