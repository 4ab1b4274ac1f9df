"""The job queue: RQ with the JSON serializer (never pickle), reached through ``JOBS_REDIS_URL``.

In embedded mode there is no worker process: jobs run inline (``is_async=False``) on a
synchronous fakeredis client that shares the embedded store's in-process server.
Enqueueing from the web process runs in a thread, so it never blocks the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from execution_proof.receipts.errors import StoreUnavailable

QUEUE_NAME = "eps"
RETRY = Retry(max=5, interval=[1, 5, 30, 120, 600])
"""Back-off for failed jobs; after the last try the job stays in RQ's failed registry."""


def open_queue(jobs_redis_url: str | None, embedded_server: fakeredis.FakeServer | None = None) -> Queue:
    """The service's queue. Without a URL, an inline queue on the embedded server."""
    if jobs_redis_url:
        return Queue(QUEUE_NAME, connection=redis.Redis.from_url(jobs_redis_url), serializer=JSONSerializer)
    connection = fakeredis.FakeRedis(server=embedded_server or fakeredis.FakeServer())
    return Queue(QUEUE_NAME, connection=connection, serializer=JSONSerializer, is_async=False)


async def enqueue(queue: Queue, func_path: str, *args: Any, job_id: str | None = None) -> None:
    """Enqueue ``func_path(*args)`` with retries, off the event loop.

    ``job_id`` makes enqueueing idempotent for work that must happen once per id. Raises
    ``StoreUnavailable`` when the queue's Redis does not answer.
    """
    try:
        await asyncio.to_thread(queue.enqueue, func_path, *args, job_id=job_id, retry=RETRY)
    except (redis.RedisError, OSError) as exc:
        raise StoreUnavailable("the job queue is unreachable; try again shortly") from exc
