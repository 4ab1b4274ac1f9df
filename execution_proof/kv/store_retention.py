"""The store's retention sweep (``store.retention.expire_receipts``; jobs/retention.py runs it, the design
is in docs/jobs.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from execution_proof.kv import keys
from execution_proof.kv.link import LuaScript
from execution_proof.kv.records import RedisClient, lenient_text, unavailable_as_503


class RetentionStore:
    """The retention sweep (``store.retention``): the sweep job's only way into the store."""

    def __init__(self, client: RedisClient, is_cluster: bool, *, expire_bucket: LuaScript) -> None:
        self.client = client
        self.is_cluster = is_cluster
        self._expire_bucket = expire_bucket

    SWEEP_BATCH = 1000
    """Keys asked of each SCAN call and handled per round trip by the sweep."""
    SWEEP_SCRIPTS_AT_ONCE = 50
    """Bucket scripts the sweep has in flight at once (one per index bucket)."""

    @unavailable_as_503
    async def expire_receipts(self, cutoff_ms: int, *, batch: int = SWEEP_BATCH) -> dict[str, int]:
        """Remove every receipt created before ``cutoff_ms`` (Unix ms) and every index entry
        naming it. Project records, and so each project's ``tip``, stay.

        SCAN passes, one per prefix, in this order: the index buckets (``b:``: one
        ``expire_index_bucket.lua`` per bucket removes its expired hash-index and
        idempotency fields and search ids, atomically), then the receipts (``r:``, with each
        one's log-index field; its log entry stays, the log is append-only), then the
        search sets (``x:``). In that order a replay never finds a record whose receipt is
        already gone: an identical create after the sweep issues a new receipt. The age
        comes from the receipt id each key (``r:``) or value names. The ``x:`` sets lose
        members scored (created) before the cutoff, one ZREMRANGEBYSCORE per set; Redis
        deletes a set left empty. Safe to run twice and concurrently: each entry is removed
        by exactly one run. Returns the counts removed (``receipts``, ``hash_index``,
        ``idempotency``, ``search_index`` = search ids) and ``scanned``, the keys examined.
        """
        (hash_index, idempotency, search_b), scanned_b = await self._expire_index_buckets(cutoff_ms, batch)
        receipts, scanned_r = await self._expire_receipt_records(cutoff_ms, batch)
        search_index, scanned_x = await self._expire_search_members(cutoff_ms, batch)
        return {
            "receipts": receipts,
            "hash_index": hash_index,
            "idempotency": idempotency,
            "search_index": search_index + search_b,
            "scanned": scanned_b + scanned_r + scanned_x,
        }

    async def _expire_index_buckets(self, cutoff_ms: int, batch: int) -> tuple[tuple[int, int, int], int]:
        """((hash-index fields, idempotency fields, search ids) removed, buckets scanned)."""
        removed = [0, 0, 0]
        scanned = 0
        async for names in self._scan_batches(keys.INDEX_BUCKET_KEY_MATCH, batch):
            scanned += len(names)
            buckets = [(name, meta) for name in names if (meta := keys.index_meta_of_bucket(lenient_text(name)))]
            for start in range(0, len(buckets), self.SWEEP_SCRIPTS_AT_ONCE):
                chunk = buckets[start : start + self.SWEEP_SCRIPTS_AT_ONCE]
                results = await asyncio.gather(
                    *(self._expire_bucket.registered(keys=[name, meta], args=[cutoff_ms]) for name, meta in chunk)
                )
                for result in results:
                    for kind in range(3):
                        removed[kind] += int(result[kind])
        return (removed[0], removed[1], removed[2]), scanned

    async def _scan_batches(self, match: str, batch: int) -> AsyncIterator[list[bytes | str]]:
        """Key names matching ``match``, ``batch`` at a time (a cluster client scans every node)."""
        names: list[bytes | str] = []
        async for name in self.client.scan_iter(match=match, count=batch):
            names.append(name)
            if len(names) >= batch:
                yield names
                names = []
        if names:
            yield names

    async def _expire_receipt_records(self, cutoff_ms: int, batch: int) -> tuple[int, int]:
        """(removed, scanned) for ``r:`` records older than the cutoff; the key names the id."""
        removed = scanned = 0
        async for names in self._scan_batches(keys.RECEIPT_KEY_MATCH, batch):
            scanned += len(names)
            expired = []
            for name in names:
                receipt_id = keys.receipt_id_in_receipt_key(lenient_text(name))
                if receipt_id is not None and keys.receipt_created_ms(receipt_id) < cutoff_ms:
                    expired.append(name)
            if expired:
                pipe = self.client.pipeline(transaction=False)
                for name in expired:
                    pipe.delete(name)
                results = await pipe.execute()
                removed += sum(int(result) for result in results)
        return removed, scanned

    async def _expire_search_members(self, cutoff_ms: int, batch: int) -> tuple[int, int]:
        """(members removed, sets scanned) for the ``x:`` search sets: one single-key
        ZREMRANGEBYSCORE per set (scores are creation ms; strictly before the cutoff)."""
        removed = scanned = 0
        async for names in self._scan_batches(keys.SEARCH_INDEX_KEY_MATCH, batch):
            scanned += len(names)
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.zremrangebyscore(name, "-inf", f"({cutoff_ms}")
            results = await pipe.execute(raise_on_error=False)
            removed += sum(r for r in results if isinstance(r, int))  # a foreign non-zset key errs
        return removed, scanned
