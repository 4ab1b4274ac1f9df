"""Open the store: a real Redis from ``REDIS_URL``, or the embedded in-process one."""

from __future__ import annotations

import fakeredis
import redis.asyncio as aioredis

from kv.store import Store

CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 5.0


def open_store(redis_url: str | None, *, embedded_server: fakeredis.FakeServer | None = None) -> Store:
    """A Store on ``redis_url``; without one, on fakeredis (same Lua scripts, in memory).

    The embedded store keeps nothing across restarts and is private to one process.
    """
    if redis_url:
        client = aioredis.from_url(
            redis_url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=COMMAND_TIMEOUT_S,
            health_check_interval=30,
        )
        return Store(client)
    server = embedded_server or fakeredis.FakeServer()
    return Store(fakeredis.FakeAsyncRedis(server=server))
