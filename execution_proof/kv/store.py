"""The store: one class whose intent-named methods each do one atomic Redis operation.

``Store`` holds the client, the pipelined link and the registered scripts; its methods live
in one mixin per concern: receipts (kv/store_receipts.py), rate and quota counters
(kv/store_counters.py), projects and API keys (kv/store_keys.py), the retention sweep
(kv/store_retention.py), paid-claim records (kv/store_checkouts.py) and what the
transparency log has in flight (kv/store_log.py; the log itself is in kv/logstore). The types they
return, and the helpers they share, are in kv/records.py.

Scripts live in ``kv/lua/*.lua`` and are registered once (``register_script`` reloads them
after a Redis restart empties the script cache). Scripts answer small codes, mapped to
domain results, so the web layer never sees Redis replies. Connection failures and
timeouts become ``StoreUnavailable`` (503): signing and recording fail closed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from execution_proof.kv.link import Link, LuaScript, link_for
from execution_proof.kv.records import LogQueue, _unavailable_as_503
from execution_proof.kv.store_checkouts import CheckoutStore
from execution_proof.kv.store_counters import CounterStore
from execution_proof.kv.store_keys import KeyStore
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.kv.store_retention import RetentionStore
from execution_proof.runtime.store_ack import NO_ACK, StoreAck

LUA_DIR = Path(__file__).parent / "lua"


def _index_script(name: str) -> str:
    """A script that works on a project's index: the shared index functions, then it."""
    return (LUA_DIR / "index_buckets.lua").read_text() + (LUA_DIR / name).read_text()


class Store(ReceiptStore, CounterStore, KeyStore, RetentionStore, CheckoutStore, LogQueueStore):
    """Async access to every record. Construct with a redis-py asyncio client, a redis-py
    asyncio ``RedisCluster`` (``REDIS_CLUSTER=true``, docs/cluster.md) or fakeredis."""

    def __init__(self, client: aioredis.Redis | RedisCluster) -> None:
        self.client = client
        self.embedded_server: Any = None
        """The in-process fakeredis server in embedded mode (jobs share it), else None."""
        self.ack: StoreAck = NO_ACK
        """What a create waits for after its write (``STORE_ACK``, docs/redis.md)."""
        self.link: Link = link_for(client)
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
        self._log_ack = LuaScript.register(client, _index_script("log_ack.lua"))
        self._log_synced = LuaScript.register(client, (LUA_DIR / "log_synced.lua").read_text())
        self.log: LogQueue | None = None
        """Where creates queue their log entries (``LOG_SIGNING_KEY`` set), else None."""

    async def close(self) -> None:
        await self.link.close()
        await self.client.aclose()

    @_unavailable_as_503
    async def ping(self) -> bool:
        return bool(await self.client.ping())
