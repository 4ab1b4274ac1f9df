"""``python service.py worker``: an RQ worker with RQ's scheduler and the periodic schedule.

The worker runs every job enqueued on the service's queue (``jobs.queue``), JSON-serialised
(never pickle), with RQ's scheduler (``with_scheduler=True``: ``enqueue_at`` and retry
back-off), and a ``ScheduleThread`` that competes for the single schedule ownership
(``jobs.schedule``). Start as many workers as the load needs; exactly one owns the schedule
at a time, and RQ's own scheduler lock likewise lets one of them move due jobs. A job that
fails after its retries stays in RQ's failed registry. See ``docs/jobs.md``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

import redis
from rq import Queue, Worker
from rq.exceptions import DeserializationError, InvalidJobOperation
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from execution_proof.jobs.queue import QUEUE_NAME, open_queue
from execution_proof.jobs.schedule import OWNER_TTL_MS, TICK_S, ScheduleOwner, ScheduleThread
from execution_proof.runtime.metrics import count_job

SCHEDULER_STOP_S = 5.0
"""How long a stopping worker waits for RQ's scheduler process after SIGTERM before killing it."""
STOP_REDELIVER_S = 0.05
"""How soon a stop signal that landed inside a log call is delivered again (``request_stop``)."""
RQ_RETRY_MESSAGE = "could not connect to Redis instance"
"""What RQ logs at every retry while the job queue's Redis is down (about once a second)."""


class QueueOutage(logging.Filter):
    """One line per outage of the job queue's Redis instead of RQ's line per retry: the first
    of RQ's retry lines passes, the rest are dropped until ``recovered`` (the worker's next
    heartbeat that reaches Redis), which says how long it lasted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.since: float | None = None
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if RQ_RETRY_MESSAGE not in str(record.msg):
            return True
        if self.since is None:
            self.since = self.clock()
            return True
        self.dropped += 1
        return False

    def recovered(self, log: logging.Logger) -> None:
        if self.since is None:
            return
        log.warning(
            "the job queue's Redis is reachable again after %.1f s (%d more retries not logged)",
            self.clock() - self.since,
            self.dropped,
        )
        self.since, self.dropped = None, 0


def _inside_logging(frame: FrameType | None) -> bool:
    """Whether ``frame``, or a frame that called it, runs the logging module's code (whose
    handlers catch any exception a signal handler raises there)."""
    while frame is not None:
        if frame.f_code.co_filename == logging.__file__:
            return True
        frame = frame.f_back
    return False


def worker_name() -> str:
    """Unique per process, readable in ``rq info`` and in the schedule-owner lock."""
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


class MeasuredWorker(Worker):
    """RQ's forking worker that counts each job's outcome and time (``eps_jobs_total``).

    Counted here, in the worker process, after the work horse has exited: the horse is a
    short-lived fork whose own counts would die with it. The outcome is the job's status
    as the horse (or RQ's failure handling) left it: finished is a success, a job queued or
    scheduled again is a retry, anything else a failure.
    """

    outage: QueueOutage | None = None
    scheduler_stop_s: float = SCHEDULER_STOP_S
    stop_requested: threading.Event | None = None
    """Set by a SIGTERM the process received before RQ's own handlers were in place (the
    ``worker`` verb's handler until then): the work loop stops at its first turn."""

    def _install_signal_handlers(self) -> None:
        """RQ's handlers, then a stop requested before them honoured (without this, it was lost
        or, with no handler at all yet, SIGTERM killed the process: exit status -15)."""
        super()._install_signal_handlers()  # type: ignore[no-untyped-call]
        if self.stop_requested is not None and self.stop_requested.is_set():
            self._stop_requested = True

    def stop_scheduler(self) -> None:
        """RQ's, with a bound: SIGTERM to the scheduler process, then wait at most
        ``scheduler_stop_s`` and kill it. RQ waits without a limit, from inside the SIGTERM
        handler when a job is running, so a scheduler process that does not exit kept the
        whole worker from stopping (seen in CI: a worker still running 20 s after SIGTERM,
        with "warm shut down requested" its last line). Killing it loses nothing: moving due
        jobs to the queue is one transaction, and its lock expires by itself."""
        # RQ declares _process as None (it is set when the scheduler process starts).
        process: Any = getattr(self.scheduler, "_process", None)
        if process is None or not process.pid:
            return
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGTERM)
        process.join(self.scheduler_stop_s)
        if process.is_alive():
            self.log.warning(
                "the scheduler process %s did not stop within %.0f s of SIGTERM; killing it",
                process.pid,
                self.scheduler_stop_s,
            )
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)
            process.join(self.scheduler_stop_s)

    left_work_loop: bool = False
    """Set once RQ's work loop has ended (``teardown``): a stop signal after it has nothing to stop."""

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        """RQ's SIGTERM/SIGINT handler (a warm shutdown), never inside a log call. When no job
        runs, RQ raises ``StopRequested`` from the handler, in whatever frame the signal landed;
        in a log call's ``stream.write`` the logging module caught it and printed "--- Logging
        error ---" with a traceback, and the worker went on (seen in CI: a worker whose log
        integrator refused the store, which signals the main thread, printed a traceback beside
        its one ``LOG REFUSED`` line). There, the stop is remembered and the signal delivered
        again ``STOP_REDELIVER_S`` later, by then outside the log call; the work loop also stops
        at its next turn on the flag alone."""
        if self.left_work_loop:
            return
        if self.get_state() != WorkerStatus.BUSY and _inside_logging(frame):
            self._stop_requested = True
            main = threading.main_thread().ident
            assert main is not None  # the main thread has started: it runs this handler
            again = threading.Timer(STOP_REDELIVER_S, signal.pthread_kill, (main, signum))
            again.daemon = True
            again.start()
            return
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]

    def _shutdown(self) -> None:
        """RQ's warm shutdown, with the stop remembered first (``request_stop``)."""
        self._stop_requested = True
        super()._shutdown()  # type: ignore[no-untyped-call]

    def teardown(self) -> None:
        self.left_work_loop = True
        super().teardown()  # type: ignore[no-untyped-call]

    def run_maintenance_tasks(self) -> None:
        """RQ's (registry cleaning, every 10 minutes and at start), with a lost connection to
        Redis survived. RQ rides out an outage only while it waits for a job; a connection
        lost during its maintenance (Redis restarted with a command in flight) ended its work
        loop ("found an unhandled exception, quitting...") and the worker exited 0, its log
        integrator with it (seen in tests/test_log_stalls.py: Redis restored while the worker
        was stopped in its first maintenance). Maintenance runs again at its next turn."""
        try:
            super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
        except redis.ConnectionError as exc:
            self.log.warning("RQ's maintenance lost its connection to Redis (%s): it runs again at its next turn", exc)

    def heartbeat(self, *args: Any, **kwargs: Any) -> None:
        super().heartbeat(*args, **kwargs)
        if self.outage is not None:
            self.outage.recovered(self.log)

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
    stop_requested: threading.Event | None = None,
) -> bool:
    """Work until stopped (SIGTERM/SIGINT: finish the current job, release the schedule).

    ``burst``: run what is queued (and due) now, then return, without the periodic schedule.
    ``stop_requested``: set when a stop was asked before RQ's signal handlers were installed.
    Returns whether any job ran.
    """
    connection = redis.Redis.from_url(jobs_redis_url)
    worker = MeasuredWorker([QUEUE_NAME], connection=connection, serializer=JSONSerializer, name=name or worker_name())
    worker.stop_requested = stop_requested
    worker.outage = QueueOutage()
    worker.log.addFilter(worker.outage)
    schedule: ScheduleThread | None = None
    if not burst:
        # Its own connection: the thread must never share a socket with the work loop.
        owner = ScheduleOwner(open_queue(jobs_redis_url), worker.name, owner_ttl_ms=owner_ttl_ms)
        schedule = ScheduleThread(owner, tick_s)
        schedule.start()
    try:
        return bool(worker.work(burst=burst, with_scheduler=True, logging_level="INFO"))
    finally:
        worker.log.removeFilter(worker.outage)
        if schedule is not None:
            schedule.stop()
        connection.close()
