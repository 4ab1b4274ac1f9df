"""Open the store: a real Redis from ``REDIS_URL``, or the embedded in-process one."""

from __future__ import annotations

import fakeredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from execution_proof.kv.records import LogQueue
from execution_proof.kv.store import Store
from execution_proof.runtime.store_ack import NO_ACK, StoreAck

CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 5.0
POOL_SIZE = 64
POOL_WAIT_S = 5.0
CLUSTER_CONNECTIONS_PER_NODE = 256
"""The cluster client has no blocking pool (past this it raises, a 503): so more room per node."""


def open_store(
    redis_url: str | None,
    *,
    embedded_server: fakeredis.FakeServer | None = None,
    cluster: bool = False,
    ack: StoreAck = NO_ACK,
    log: LogQueue | None = None,
) -> Store:
    """A Store on ``redis_url``; without one, on fakeredis (same Lua scripts, in memory).

    The embedded store keeps nothing across restarts and is private to one process; its
    server is ``embedded_server`` when given (jobs share the server's), else a new one.
    ``cluster`` (``REDIS_CLUSTER=true``): ``redis_url`` is one node of a Redis Cluster; the
    client discovers the others and routes each command by its key's slot (docs/cluster.md).
    ``ack`` (``STORE_ACK``) and ``log`` (the log's identity and ``LOG_MAX_PENDING``) are how
    the store's creates are made durable and where they queue their log entries.
    """
    if redis_url and cluster:
        return Store(
            RedisCluster.from_url(
                redis_url,
                max_connections=CLUSTER_CONNECTIONS_PER_NODE,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=COMMAND_TIMEOUT_S,
                health_check_interval=30,
            ),
            ack=ack,
            log=log,
        )
    if redis_url:
        # A blocking pool makes a burst wait for a free connection (up to POOL_WAIT_S)
        # instead of failing: redis-py's default pool raises past 100 connections, which
        # would turn load into false "store unavailable" answers.
        pool = aioredis.BlockingConnectionPool.from_url(
            redis_url,
            max_connections=POOL_SIZE,
            timeout=POOL_WAIT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=COMMAND_TIMEOUT_S,
            health_check_interval=30,
        )
        return Store(aioredis.Redis(connection_pool=pool), ack=ack, log=log)
    server = embedded_server or fakeredis.FakeServer()
    return Store(fakeredis.FakeAsyncRedis(server=server), ack=ack, log=log, embedded_server=server)
