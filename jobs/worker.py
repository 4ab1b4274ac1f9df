"""``python service.py worker``: an RQ worker with RQ's scheduler and the periodic schedule.

The worker runs every job enqueued on the service's queue (``jobs.queue``), JSON-serialised
(never pickle), with RQ's scheduler (``with_scheduler=True``: ``enqueue_at`` and retry
back-off), and a ``ScheduleThread`` that competes for the single schedule ownership
(``jobs.schedule``). Start as many workers as the load needs; exactly one owns the schedule
at a time, and RQ's own scheduler lock likewise lets one of them move due jobs. A job that
fails after its retries stays in RQ's failed registry. See ``docs/jobs.md``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid

import redis
from rq import Worker
from rq.serializers import JSONSerializer

from jobs.queue import QUEUE_NAME, open_queue
from jobs.schedule import OWNER_TTL_MS, TICK_S, ScheduleOwner, ScheduleThread
from web.config import load_settings

EMBEDDED_MESSAGE = (
    "error: the worker needs a real Redis: set REDIS_URL (the store its jobs work on; the queue "
    "is JOBS_REDIS_URL, which defaults to REDIS_URL). Without REDIS_URL the service runs in "
    "embedded mode, where jobs run inline inside the server process: there is no worker and no "
    "schedule to run"
)


QUEUE_ON_CLUSTER_MESSAGE = (
    "the job queue at JOBS_REDIS_URL (or REDIS_URL) is a Redis Cluster node; RQ cannot run on a "
    "cluster: point JOBS_REDIS_URL at a plain, non-cluster Redis (see docs/cluster.md)"
)


def worker_name() -> str:
    """Unique per process, readable in ``rq info`` and in the schedule-owner lock."""
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def worker_command(*, burst: bool = False) -> int:
    """The ``worker`` verb. Exit status 0 after a clean stop, 2 configuration or connection error."""
    settings = load_settings()
    if settings.embedded or not settings.jobs_redis_url:
        print(EMBEDDED_MESSAGE, file=sys.stderr)
        return 2
    try:
        connection = redis.Redis.from_url(settings.jobs_redis_url)
    except ValueError:
        # The URL may hold a password: say what is wrong without echoing it.
        print("error: JOBS_REDIS_URL (or REDIS_URL) is not a Redis URL", file=sys.stderr)
        return 2
    try:
        connection.ping()
        on_cluster = str(connection.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.RedisError:
        print("error: the job queue at JOBS_REDIS_URL (or REDIS_URL) is unreachable", file=sys.stderr)
        return 2
    finally:
        connection.close()
    if on_cluster:
        print(f"error: {QUEUE_ON_CLUSTER_MESSAGE}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    run_worker(settings.jobs_redis_url, burst=burst)
    return 0


def run_worker(
    jobs_redis_url: str,
    *,
    burst: bool = False,
    name: str | None = None,
    tick_s: float = TICK_S,
    owner_ttl_ms: int = OWNER_TTL_MS,
) -> bool:
    """Work until stopped (SIGTERM/SIGINT: finish the current job, release the schedule).

    ``burst``: run what is queued (and due) now, then return, without the periodic schedule.
    Returns whether any job ran.
    """
    connection = redis.Redis.from_url(jobs_redis_url)
    worker = Worker([QUEUE_NAME], connection=connection, serializer=JSONSerializer, name=name or worker_name())
    schedule: ScheduleThread | None = None
    if not burst:
        # Its own connection: the thread must never share a socket with the work loop.
        owner = ScheduleOwner(open_queue(jobs_redis_url), worker.name, owner_ttl_ms=owner_ttl_ms)
        schedule = ScheduleThread(owner, tick_s)
        schedule.start()
    try:
        return bool(worker.work(burst=burst, with_scheduler=True, logging_level="INFO"))
    finally:
        if schedule is not None:
            schedule.stop()
        connection.close()
