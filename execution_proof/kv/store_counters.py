"""The store's rate and quota counters: fixed-window hits, refunds and reads (the limits
themselves are receipts/limits.py; web/limits.py applies them)."""

from __future__ import annotations

from typing import Any

from execution_proof.kv import keys
from execution_proof.kv.link import Link, LuaScript
from execution_proof.kv.records import Counter, RedisClient, unavailable_as_503


class CounterStore:
    """The rate and quota counters (``store.counters``): the limiter's and the usage page's."""

    def __init__(
        self, client: RedisClient, link: Link, is_cluster: bool, *, hit_counter: LuaScript, refund_counter: LuaScript
    ) -> None:
        self.client = client
        self.link = link
        self.is_cluster = is_cluster
        self._hit_counter = hit_counter
        self._refund_counter = refund_counter

    async def _hit(self, key: str, counter: Counter) -> tuple[bool, int]:
        reply: Any = await self.link.run_script(self._hit_counter, [key], [counter.limit, counter.ttl_s])
        return bool(int(reply[0])), int(reply[1])

    @unavailable_as_503
    async def hit_key_counter(self, project_id: str, key_hash: str, counter: Counter) -> tuple[bool, int]:
        """Count one request of an API key in its minute window: (allowed, count)."""
        return await self._hit(keys.key_minute_counter_key(project_id, key_hash, counter.window_id), counter)

    @unavailable_as_503
    async def hit_ip_counter(self, ip_bucket: str, scope: str, counter: Counter) -> tuple[bool, int]:
        """Count one request from a client address under ``scope``: (allowed, count)."""
        return await self._hit(keys.ip_counter_key(ip_bucket, scope, counter.window_id), counter)

    @unavailable_as_503
    async def refund_ip_counter(self, ip_bucket: str, scope: str, window_id: str) -> int:
        """Take back one request counted under ``scope`` (one that was then refused for its
        body); the count after it. A counter already gone stays gone."""
        key = keys.ip_counter_key(ip_bucket, scope, window_id)
        return int(await self.link.run_script(self._refund_counter, [key], []))

    @unavailable_as_503
    async def read_ip_counter(self, ip_bucket: str, scope: str, window_id: str) -> int:
        """The current count, without counting."""
        return int(await self.link.send("GET", keys.ip_counter_key(ip_bucket, scope, window_id)) or 0)

    @unavailable_as_503
    async def read_usage(self, project_id: str, key_hash: str, minute_window_id: str, month_id: str) -> tuple[int, int]:
        """(requests by this key this minute, receipts of the project this month)."""
        values = await self.client.mget(
            [
                keys.key_minute_counter_key(project_id, key_hash, minute_window_id),
                keys.project_month_counter_key(project_id, month_id),
            ]
        )
        return int(values[0] or 0), int(values[1] or 0)
