"""Every Redis key the service uses, built in one pure module.

All keys of one project carry the project's slot tag in braces (``{TAG}``), so every
multi-key script touches a single Redis Cluster hash slot. The tag is derived from the
project id, and receipt ids carry it too (see ``receipts.ids``), so a public read by
receipt id finds the slot without another lookup. API-key records are single-key reads,
keyed by the key's hash.

A receipt is one ``receipt_key`` plus four fields of its project's index buckets
(``index_bucket_key``: hash index, idempotency record, input and output search entries);
docs/redis.md ("Key layout") has the sizes and the reasons.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from execution_proof.receipts.ids import (
    is_receipt_id,
    receipt_slot_tag,
    slot_tag,
    ulid_from_bytes,
    ulid_time_ms,
    ulid_to_bytes,
)


def _hex(hash_str: str) -> str:
    return hash_str.removeprefix("sha256:")


def project_key(project_id: str) -> str:
    """Hash: name, created_at, ``tip`` (the main chain tip, absent before the first receipt)."""
    return f"p:{{{slot_tag(project_id)}}}:{project_id}"


def project_names_key() -> str:
    """Hash: project name -> project id, for the names ``keys create`` gives (one per name)."""
    return "pn"


def project_api_keys_key(project_id: str) -> str:
    """Set of the project's API-key hashes (for listing, revoking and reissuing)."""
    return f"pk:{{{slot_tag(project_id)}}}:{project_id}"


def receipt_key(receipt_id: str) -> str:
    """String: the receipt's stored value: its compact record (receipts/compact.py) or, for a
    receipt it cannot hold exactly, its JSON bytes."""
    return f"r:{{{receipt_slot_tag(receipt_id)}}}:{receipt_id}"


SEARCH_FIELDS = {"input_hash": "i", "output_hash": "o"}
"""The receipt fields the search index covers, and the letter each one's index key carries."""


def search_index_key(project_id: str, field: str, hash_str: str) -> str:
    """Sorted set: ids of the project's receipts whose ``field`` (``input_hash`` or
    ``output_hash``) is ``hash_str``, each scored by its creation time (Unix ms), once the
    hash has more than four receipts (16-byte ids; up to four live in its ``search_field``)."""
    return f"x:{{{slot_tag(project_id)}}}:{project_id}:{SEARCH_FIELDS[field]}:{_hex(hash_str).lower()}"


# --- the project's index: bucketed hashes (docs/redis.md, "The receipt index") ---------
# Every per-receipt index entry (hash index, idempotency record, both search entries) is a
# field of one of the project's bucket hashes, small enough for Redis's listpack encoding.
# The buckets grow by linear hashing: ``index_meta_key`` holds ``level``, ``split`` and
# ``count`` (fields in all buckets); a field's bucket is ``index_bucket`` of its bytes 2-4.
# Fields are binary: a kind byte, then the first bytes of a SHA-256 value (truncated: every
# lookup checks the full value on the receipt it finds). Receipt ids in values are 16 bytes.

INDEX_LOAD = 48
"""Fields per bucket on average before the next bucket splits (kv/lua/index_buckets.lua).
An unsplit bucket holds up to twice that, below hash-max-listpack-entries (128)."""


def index_meta_key(project_id: str) -> str:
    """Hash: ``level``, ``split``, ``count`` of the project's index buckets. Its name is also
    the prefix of every bucket's name, so scripts that declare it reach the buckets (all in
    the project's slot: the name carries the ``{TAG}``)."""
    return f"b:{{{slot_tag(project_id)}}}:{project_id}"


def index_bucket_key(project_id: str, bucket: int) -> str:
    """Hash: bucket number ``bucket`` of the project's index (fields as above)."""
    return f"{index_meta_key(project_id)}:{bucket}"


def index_bucket(field: bytes, level: int, split: int) -> int:
    """The bucket a field lives in (linear hashing; the same rule as index_buckets.lua)."""
    h = int.from_bytes(field[1:4], "big")
    bucket: int = h % (1 << level)
    return h % (2 << level) if bucket < split else bucket


def receipt_id_bytes(receipt_id: str) -> bytes:
    """The 16 bytes of a valid receipt id's ULID, as index values hold it."""
    return ulid_to_bytes(receipt_id[5:])


def receipt_id_from_bytes(raw: bytes) -> str:
    return "rcpt_" + ulid_from_bytes(raw)


def hash_index_field(receipt_hash: str) -> bytes:
    """Field ``h`` + the receipt hash's first 10 bytes; value: the receipt id (16 bytes),
    then, with a log, the log's tag (``LogIdentity.tag``, 4 bytes: the log it was queued
    for) and, once integrated, its index in that log (``LOG_INDEX_BYTES``)."""
    return b"h" + bytes.fromhex(_hex(receipt_hash))[:10]


def idempotency_field(replay_key: str) -> bytes:
    """Field ``i`` + the first 12 bytes of SHA-256 of the replay key (``ik_…``, opaque);
    value: the receipt id (16 bytes) + ``fingerprint_tail``."""
    return b"i" + hashlib.sha256(replay_key.encode("utf-8")).digest()[:12]


def fingerprint_tail(fingerprint: str) -> bytes:
    """8 bytes of SHA-256 of the idempotency fingerprint, kept to tell a reused
    ``Idempotency-Key`` with another body (409) from a replay."""
    return hashlib.sha256(fingerprint.encode("ascii")).digest()[:8]


def search_field(field: str, hash_str: str) -> bytes:
    """Field ``I`` (input_hash) or ``O`` (output_hash) + the hash's first 8 bytes; value:
    the ids (16 bytes each, in issue order) of the project's receipts with that hash, up to
    four (64 bytes, listpack's value limit); a fifth moves them all to ``search_index_key``."""
    return SEARCH_FIELDS[field].upper().encode() + bytes.fromhex(_hex(hash_str).lower())[:8]


def api_key_key(key_hash: str) -> str:
    """Hash: project_id, actor_id, plan, revoked ("0"/"1"), created_at."""
    return f"k:{_hex(key_hash)}"


def key_minute_counter_key(project_id: str, key_hash: str, window_id: str) -> str:
    """Integer: requests made with one API key in one minute window (project's slot)."""
    return f"m:{{{slot_tag(project_id)}}}:{_hex(key_hash)[:32]}:{window_id}"


def project_month_counter_key(project_id: str, month_id: str) -> str:
    """Integer: receipts the project issued in one calendar month (``YYYYMM``)."""
    return f"q:{{{slot_tag(project_id)}}}:{project_id}:{month_id}"


def ip_counter_key(ip_bucket: str, scope: str, window_id: str) -> str:
    """Integer: requests from one client address in one window, in the address's own slot."""
    return f"ip:{{{ip_bucket}}}:{scope}:{window_id}"


# --- retention: what the sweep (RetentionStore.expire_receipts) scans for, and how it dates a key ---
# Every key or value it removes names a receipt id, and the id's ULID carries its creation
# time, so the sweep needs no index of its own (the ``x:`` search sets are scored by that
# time and trimmed by score). The patterns never match ``rq:``, ``ip:``,
# ``pk:`` or any other prefix.

RECEIPT_KEY_MATCH = "r:*"
INDEX_BUCKET_KEY_MATCH = "b:*:*:*"
"""Bucket names have three colons; the meta key ``b:{TAG}:prj_…`` has two."""
SEARCH_INDEX_KEY_MATCH = "x:*"


def receipt_id_in_receipt_key(name: str) -> str | None:
    """The receipt id a ``receipt_key`` names, or None when ``name`` is not a receipt key."""
    receipt_id = name.rpartition(":")[2]
    return receipt_id if name.startswith("r:{") and is_receipt_id(receipt_id) else None


def index_meta_of_bucket(name: str) -> str | None:
    """The ``index_meta_key`` of a bucket's name, or None when ``name`` is not a bucket's."""
    meta, _, number = name.rpartition(":")
    if not name.startswith("b:{") or not number.isascii() or not number.isdigit() or meta.count(":") != 2:
        return None
    return meta


def receipt_created_ms(receipt_id: str) -> int:
    """Creation time (Unix ms) of a valid receipt id: the first ten characters of its ULID
    (decoded by receipts/ids.py, the one ULID decoder)."""
    return ulid_time_ms(receipt_id[5:15])


def webhook_event_key(event_id: str) -> str:
    """String: marks a payment webhook event id as processed (expires after the retry period)."""
    return f"we:{event_id}"


CHECKOUT_REF_HEX = 32
"""Hex digits of a checkout reference: 128 bits of SHA-256."""


def checkout_ref(session_id: str) -> str:
    """The opaque reference of a checkout session: the first 32 hex digits of SHA-256 of its
    id (UTF-8). The session id reveals the paid key, so Redis, job ids and arguments, project
    names and log lines carry this reference instead; a claim hashes the id it is given."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:CHECKOUT_REF_HEX]


def is_checkout_ref(value: object) -> bool:
    """Whether ``value`` is shaped like a ``checkout_ref`` (32 lowercase hex digits)."""
    return (
        isinstance(value, str) and len(value) == CHECKOUT_REF_HEX and all(char in "0123456789abcdef" for char in value)
    )


def checkout_lookup_key(ref: str) -> str:
    """Hash: ``seen_at`` (the webhook arrived) and, once indexed, the pre-assigned ``project_id``.

    A single key in its own slot: it finds the project slot that holds the session record.
    """
    return f"cs:{ref}"


def checkout_session_key(project_id: str, ref: str) -> str:
    """Hash in the pre-assigned project's slot: plan, created_ms, state (claimable/claimed),
    indexed_at, and after the claim claimed_at, actor_id, key_hash, project_id."""
    return f"cs:{{{slot_tag(project_id)}}}:{ref}"


# --- the transparency log (docs/log.md) ------------------------------------------------
# Redis holds only what is in flight; the log itself lives in the log store (kv/logstore).
# A create appends its entry to its project's queue (in the project's slot, in chain order)
# and names the project in the log's dirty set; the integrator moves queued entries into
# the tree, then records each receipt's index in its hash-index field (so it expires with
# the receipt). Every key and every index carries the log's tag, made of its whole identity
# (origin and key): two logs never share a queue, and a receipt indexed in one log is never
# taken for an entry of another (docs/log.md, "What is in Redis").

LOG_TAG_BYTES = 4


@dataclass(frozen=True)
class LogIdentity:
    """Which log Redis's log records belong to: its origin and verifier key (signed-note
    form). ``tag``: the first 4 bytes of SHA-256(origin ‖ 0x0A ‖ verifier key), in every key
    name of the log (as 8 hex digits) and in each receipt's hash-index value."""

    origin: str
    vkey: str
    tag: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(f"{self.origin}\n{self.vkey}".encode()).digest()
        object.__setattr__(self, "tag", digest[:LOG_TAG_BYTES])

    @property
    def tag_hex(self) -> str:
        return self.tag.hex()


LOG_OWN_QUEUE = "~log"
"""The queue of entries that belong to no project (a key certificate, a revocation): in the
dirty set and in key names like a project's, in a slot of its own."""


def _queue_slot(log: LogIdentity, queue: str) -> str:
    return f"log-{log.tag_hex}" if queue == LOG_OWN_QUEUE else slot_tag(queue)


def log_queue_key(log: LogIdentity, queue: str) -> str:
    """List: a queue's log entries not yet in the tree, oldest first (entry bytes). A queue is
    a project's (named by its id, in the project's slot) or ``LOG_OWN_QUEUE``."""
    return f"lq:{{{_queue_slot(log, queue)}}}:{log.tag_hex}:{queue}"


def log_synced_key(log: LogIdentity, queue: str) -> str:
    """Integer: the queue's synced size, in the queue's slot: no entry of the tree below it is
    in the queue (jobs/log_sync.py). A restore puts a queue and its synced size back together."""
    return f"ls:{{{_queue_slot(log, queue)}}}:{log.tag_hex}:{queue}"


def log_dirty_key(log: LogIdentity) -> str:
    """Set: ids of projects whose queue may hold entries (the integrator's worklist)."""
    return f"log:{log.tag_hex}:dirty"


def log_recheck_key(log: LogIdentity) -> str:
    """Sorted set: projects taken off the dirty set, by when (ms), to be looked at again."""
    return f"log:{log.tag_hex}:recheck"


def log_size_key(log: LogIdentity) -> str:
    """Integer: a size the log's tree has reached, as an integrator last told this Redis (never
    more than the tree's). A create that starts an empty queue sets the queue's synced size
    to it: the new entry cannot be in the tree below it (jobs/log_sync.py). Its presence is
    this Redis's trace of the log: an empty log store beside it is refused."""
    return f"log:{log.tag_hex}:size"


def log_pending_key(log: LogIdentity) -> str:
    """Integer: entries queued and not yet in the tree (``LOG_MAX_PENDING``'s count)."""
    return f"log:{log.tag_hex}:pending"


def log_progress_key(log: LogIdentity) -> str:
    """Integer (Unix ms): the last time an integrator published a checkpoint or found nothing
    waiting (only the integrator that holds the lease sets it); ``/health`` says ``stalled``
    when the oldest waiting entry and this are older than ``LOG_STALL_S``."""
    return f"log:{log.tag_hex}:progress"


def log_deployment_key(log: LogIdentity) -> str:
    """String: a random id of the deployment this Redis serves, made by the first integrator
    that asks (SET NX). An integrator writes it into the store's lease, so a standby can tell
    an integrator of its own deployment (which reads this Redis) from one of another
    deployment that shares the log's store but not this Redis."""
    return f"log:{log.tag_hex}:deployment"


def log_stamping_key(log: LogIdentity) -> str:
    """String with a TTL of ``LOG_TSA_INTERVAL_S``: whoever set it stamps this interval."""
    return f"log:{log.tag_hex}:stamping"


LOG_INDEX_BYTES = 8
"""A receipt's index in the log, appended to its hash-index field's value (after the 16-byte
receipt id and the 4-byte tag of the log it was queued for) once integrated: big-endian."""


def parse_log_index(value: bytes, receipt_id: str) -> tuple[bytes | None, int | None] | None:
    """What a hash-index value says of the receipt's place in a log: (the tag of the log it
    was queued for, or None when it was issued without one; its index there, or None until
    integrated). None when the value is not the receipt's (another receipt's, or malformed)."""
    if value[:16] != receipt_id_bytes(receipt_id):
        return None
    rest = value[16:]
    if not rest:
        return None, None
    if len(rest) == LOG_TAG_BYTES:
        return rest, None
    if len(rest) == LOG_TAG_BYTES + LOG_INDEX_BYTES:
        return rest[:LOG_TAG_BYTES], int.from_bytes(rest[LOG_TAG_BYTES:], "big")
    return None


SIGNING_KEYS_SLOT = "{signing-keys}"
"""The registry of receipt keys (kv/store_signing_keys.py): every key in one hash slot."""


def signing_keys_key(part: str) -> str:
    """The registry's hashes ``roots``, ``certificates`` and ``revocations`` (kid → the JSON
    document) and its ``version`` (an integer moved by every change)."""
    return f"sk:{SIGNING_KEYS_SLOT}:{part}"
