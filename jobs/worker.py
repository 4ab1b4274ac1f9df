"""``python service.py worker``: an RQ worker with RQ's scheduler and the periodic schedule.

The worker runs every job enqueued on the service's queue (``jobs.queue``), JSON-serialised
(never pickle), with RQ's scheduler (``with_scheduler=True``: ``enqueue_at`` and retry
back-off), and a ``ScheduleThread`` that competes for the single schedule ownership
(``jobs.schedule``). Start as many workers as the load needs; exactly one owns the schedule
at a time, and RQ's own scheduler lock likewise lets one of them move due jobs. A job that
fails after its retries stays in RQ's failed registry. See ``docs/jobs.md``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid

import redis
from rq import Queue, Worker
from rq.exceptions import DeserializationError, InvalidJobOperation
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from jobs.queue import QUEUE_NAME, open_queue
from jobs.schedule import OWNER_TTL_MS, TICK_S, ScheduleOwner, ScheduleThread
from web.config import load_settings
from web.logs import configure_logging
from web.metrics import count_job, start_metrics_listener

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
    configure_logging(settings.log_format)
    listener = (
        start_metrics_listener(settings.metrics_host, settings.metrics_port)
        if settings.metrics_port is not None
        else None
    )
    try:
        run_worker(settings.jobs_redis_url, burst=burst)
    finally:
        if listener is not None:
            listener.stop()
    return 0


class MeasuredWorker(Worker):
    """RQ's forking worker that counts each job's outcome and time (``eps_jobs_total``).

    Counted here, in the worker process, after the work horse has exited: the horse is a
    short-lived fork whose own counts would die with it. The outcome is the job's status
    as the horse (or RQ's failure handling) left it: finished is a success, a job queued or
    scheduled again is a retry, anything else a failure.
    """

    def execute_job(self, job: Job, queue: Queue) -> None:
        started = time.perf_counter()
        try:
            super().execute_job(job, queue)
        finally:
            count_job(job_name(job), job_outcome(job), time.perf_counter() - started)


def job_name(job: Job) -> str:
    """The job's function path; a job whose data cannot be read is ``other``."""
    try:
        return str(job.func_name)
    except DeserializationError:
        return "other"


def job_outcome(job: Job) -> str:
    try:
        status = job.get_status(refresh=True)
    except (InvalidJobOperation, redis.RedisError):
        return "unknown"
    if status == JobStatus.FINISHED:
        return "success"
    if status in (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED):
        return "retry"
    return "failure"


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
    worker = MeasuredWorker([QUEUE_NAME], connection=connection, serializer=JSONSerializer, name=name or worker_name())
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
