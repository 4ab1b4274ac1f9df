"""The store: sub-stores, each with intent-named methods that do one atomic Redis operation.

``Store`` is a composition, built whole by its constructor (``open_store`` in kv/connect.py
calls it): it opens the link and registers the scripts once, then gives each sub-store
exactly what it needs. Receipts (kv/store_receipts.py, ``store.receipts``), rate and quota
counters (kv/store_counters.py, ``store.counters``), projects and API keys
(kv/store_keys.py, ``store.keys``), the registry of receipt keys (kv/store_signing_keys.py,
``store.signing_keys``), the retention sweep (kv/store_retention.py,
``store.retention``), paid-claim records (kv/store_checkouts.py, ``store.checkouts``) and
what the transparency log has in flight (kv/store_log.py, ``store.log_queue``; the log
itself is in kv/logstore). The types they return, and the helpers they share, are in
kv/records.py. Nothing is set on a store after it is built.

Scripts live in ``kv/lua/*.lua`` and are registered one way, ``LuaScript.register`` (its
source and SHA for the link's ``EVALSHA``, and redis-py's ``register_script``, which
reloads a script after a Redis restart empties the script cache, for calls through the
client). Scripts answer small codes, mapped to domain results, so the web layer never sees
Redis replies. Connection failures and timeouts become ``StoreUnavailable`` (503): signing
and recording fail closed.
"""

from __future__ import annotations

from pathlib import Path

import fakeredis
from redis.asyncio.cluster import RedisCluster

from execution_proof.kv.link import Link, LuaScript, link_for
from execution_proof.kv.records import LogQueue, RedisClient, unavailable_as_503
from execution_proof.kv.store_checkouts import CheckoutStore
from execution_proof.kv.store_counters import CounterStore
from execution_proof.kv.store_keys import KeyStore
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.kv.store_retention import RetentionStore
from execution_proof.kv.store_signing_keys import KeyRegistry
from execution_proof.runtime.store_ack import NO_ACK, StoreAck

LUA_DIR = Path(__file__).parent / "lua"


def register(client: RedisClient, name: str, *, on_index: bool = False) -> LuaScript:
    """The script ``kv/lua/<name>``, registered with ``client``. ``on_index``: a script that
    works on a project's index, so the shared index functions (index_buckets.lua) come first."""
    source = (LUA_DIR / name).read_text()
    if on_index:
        source = (LUA_DIR / "index_buckets.lua").read_text() + source
    return LuaScript.register(client, source)


class Store:
    """Async access to every record, one sub-store per concern. Construct with a redis-py
    asyncio client, a redis-py asyncio ``RedisCluster`` (``REDIS_CLUSTER=true``,
    docs/cluster.md) or fakeredis.

    ``ack``: what a create waits for after its write (``STORE_ACK``, docs/redis.md). ``log``:
    where creates queue their log entries (``LOG_SIGNING_KEY`` set), else None.
    ``embedded_server``: the in-process fakeredis server in embedded mode (jobs share it).
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        ack: StoreAck = NO_ACK,
        log: LogQueue | None = None,
        embedded_server: fakeredis.FakeServer | None = None,
    ) -> None:
        self.client = client
        self.embedded_server = embedded_server
        self.link: Link = link_for(client)
        """The per-request commands' way to Redis (kv/link.py): one pipelined connection to a
        plain Redis, else the redis-py client itself."""
        self.is_cluster = isinstance(client, RedisCluster)
        """Decided once: ``isinstance`` against redis-py's cluster class goes through typing's
        protocol check (about 2 us), too slow for every operation."""
        link, is_cluster = self.link, self.is_cluster
        find_index_field = register(client, "find_index_field.lua", on_index=True)
        hit_counter = register(client, "hit_counter.lua")
        self.log_queue = LogQueueStore(
            client,
            link,
            is_cluster,
            log_ack=register(client, "log_ack.lua", on_index=True),
            log_read=register(client, "log_read.lua"),
            log_size=register(client, "log_size.lua"),
            find_index_field=find_index_field,
        )
        self.receipts = ReceiptStore(
            client,
            link,
            is_cluster,
            self.log_queue,
            issue=register(client, "issue_receipt.lua", on_index=True),
            find_index_field=find_index_field,
            find_receipt=register(client, "find_receipt.lua", on_index=True),
            delete_receipt=register(client, "delete_receipt.lua", on_index=True),
            ack=ack,
            log=log,
        )
        self.counters = CounterStore(
            client,
            link,
            is_cluster,
            hit_counter=hit_counter,
            refund_counter=register(client, "refund_counter.lua"),
        )
        self.keys = KeyStore(
            client,
            link,
            is_cluster,
            create_project=register(client, "create_project.lua"),
            authenticate=register(client, "authenticate.lua"),
            hit_counter=hit_counter,
        )
        self.checkouts = CheckoutStore(
            client,
            is_cluster,
            self.keys,
            index_checkout=register(client, "index_checkout.lua"),
            claim_checkout=register(client, "claim_checkout.lua"),
        )
        self.retention = RetentionStore(client, is_cluster, expire_bucket=register(client, "expire_index_bucket.lua"))
        self.signing_keys = KeyRegistry(client, link, is_cluster, publish=register(client, "publish_key_document.lua"))

    async def close(self) -> None:
        await self.link.close()
        await self.client.aclose()

    @unavailable_as_503
    async def ping(self) -> bool:
        return bool(await self.client.ping())
