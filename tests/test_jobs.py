"""Background jobs: the sweep job inline and on real workers, retries into the failed
registry, and the schedule's single owner (in-process with a fake clock, and as two real
``python service.py worker`` processes on the session's redis-server)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import multiprocessing
import os
import signal
import threading
import time
import types
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio as aioredis
from rq import Queue, Retry, Worker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.registry import FailedJobRegistry, FinishedJobRegistry, ScheduledJobRegistry
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from execution_proof.jobs import context as jobs_context
from execution_proof.jobs.queue import QUEUE_NAME, RETRY, open_queue
from execution_proof.jobs.retention import SWEEP_JOB
from execution_proof.jobs.schedule import OWNER_KEY, RETENTION_SWEEP, Periodic, ScheduleOwner, ScheduleThread
from execution_proof.jobs.worker import MeasuredWorker
from execution_proof.kv.store import Store
from tests.conftest import free_port
from tests.servers import WorkerProcess, run_cli, wait_until
from tests.test_retention import NOW, OLD, Planted, record_keys

HOUR = 3600
SLOT = 500_000  # a fixed slot for the fake clock: 10 minutes into it
IN_SLOT = SLOT * HOUR + 600.0


def always_fails(attempts_key: str) -> None:
    """A job that records each attempt (on the worker's REDIS_URL) and raises."""
    with redis.Redis.from_url(os.environ["REDIS_URL"]) as connection:
        connection.rpush(attempts_key, repr(time.time()))
    raise RuntimeError("this job always fails")


# --- the sweep job ----------------------------------------------------------------------


async def test_sweep_job_runs_inline_on_the_embedded_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Embedded mode: no worker; ``Queue(is_async=False)`` runs the job at once on the
    server's own in-process store (jobs.context shares it)."""
    server = fakeredis.FakeServer()
    store = Store(fakeredis.FakeAsyncRedis(server=server))
    planted = Planted(store)
    project_id = await planted.project()
    old = await planted.receipt(project_id, OLD)
    fresh = await planted.receipt(project_id, NOW)
    for name in ("REDIS_URL", "JOBS_REDIS_URL", "RECEIPT_ROOT_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RETENTION_DAYS", "1")
    monkeypatch.setattr(jobs_context, "_embedded_server", server)

    queue = open_queue(None, server)
    assert queue.is_async is False and queue.serializer is JSONSerializer
    job = await asyncio.to_thread(queue.enqueue, SWEEP_JOB, retry=RETRY)
    assert job.is_finished
    summary = job.return_value()
    assert summary["removed"] == {"receipts": 1, "hash_index": 1, "idempotency": 1, "search_index": 0}
    assert await record_keys(store) == {fresh["r"], fresh["h"], fresh["i"]}
    assert not await store.client.exists(old["r"])

    # The job is stored as JSON, never pickle.
    raw = fakeredis.FakeRedis(server=server).hget(job.key, "data")
    assert json.loads(zlib.decompress(raw))[0] == SWEEP_JOB
    await store.close()


@pytest.mark.slow
@pytest.mark.real_redis
async def test_sweep_job_on_a_real_burst_worker(redis_url: str, workers: Callable[..., WorkerProcess]) -> None:
    store = Store(aioredis.from_url(redis_url))
    planted = Planted(store)
    project_id = await planted.project()
    old = [await planted.receipt(project_id, OLD + n) for n in range(3)]
    fresh = await planted.receipt(project_id, NOW)
    queue = open_queue(redis_url)
    job = queue.enqueue(SWEEP_JOB, retry=RETRY)

    worker = workers({"REDIS_URL": redis_url, "RETENTION_DAYS": "1"}, "--burst")
    returncode = await asyncio.to_thread(worker.process.wait, 60)
    assert returncode == 0, worker.log()[-3000:]
    job = Job.fetch(job.id, connection=queue.connection, serializer=JSONSerializer)
    assert job.is_finished, worker.log()[-3000:]
    assert job.return_value()["removed"] == {"receipts": 3, "hash_index": 3, "idempotency": 3, "search_index": 0}
    assert await record_keys(store) == {fresh["r"], fresh["h"], fresh["i"]}
    assert not await store.client.exists(*(r["r"] for r in old))
    assert OWNER_KEY.encode() not in set(queue.connection.keys("eps:*")), "a burst worker owns no schedule"
    await store.close()


@pytest.mark.slow
@pytest.mark.real_redis
def test_failing_job_is_retried_with_back_off_then_kept_in_the_failed_registry(
    redis_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    queue = open_queue(redis_url)
    attempts_key = "test:attempts"
    job = queue.enqueue("tests.test_jobs.always_fails", attempts_key, retry=Retry(max=2, interval=[2, 4]))
    worker = workers({"REDIS_URL": redis_url})
    failed = FailedJobRegistry(queue=queue)
    wait_until(lambda: job.id in failed.get_job_ids(), 40, f"the job in the failed registry\n{worker.log()[-3000:]}")
    assert worker.stop() == 0

    job = Job.fetch(job.id, connection=queue.connection, serializer=JSONSerializer)
    assert job.is_failed and job.retries_left == 0
    result = job.latest_result()
    assert result is not None and "this job always fails" in (result.exc_string or "")
    times = [float(t) for t in queue.connection.lrange(attempts_key, 0, -1)]
    assert len(times) == 3, "the first run and two retries"
    # RQ schedules a retry at a whole second (the registry's score truncates the time), so a
    # back-off of N s can start up to 1 s early: the bounds allow that, and no more.
    assert times[1] - times[0] >= 1.0 and times[2] - times[1] >= 3.0, f"back-off of 2 s then 4 s: {times}"


def _scheduler_standin(ready: Any, ignore_term: bool) -> None:
    """A scheduler process that exits on SIGTERM, or (``ignore_term``) never does."""
    # The default otherwise: the fork inherits the test process's handlers, whatever they are.
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term else signal.SIG_DFL)
    ready.set()
    time.sleep(60)


@pytest.mark.parametrize("ignore_term", [False, True], ids=["stops on SIGTERM", "ignores SIGTERM"])
def test_a_stopping_worker_waits_for_the_scheduler_process_a_bounded_time(
    ignore_term: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """RQ joins its scheduler process without a limit (from the SIGTERM handler, mid-job): one
    that does not exit kept the worker from stopping. Ours waits ``scheduler_stop_s``, then kills it."""
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    process = context.Process(target=_scheduler_standin, args=(ready, ignore_term))
    process.start()
    try:
        assert ready.wait(10), "the stand-in did not start"
        worker = MeasuredWorker([QUEUE_NAME], connection=fakeredis.FakeRedis(), serializer=JSONSerializer)
        worker.scheduler = types.SimpleNamespace(_process=process)  # type: ignore[assignment]
        worker.scheduler_stop_s = 0.5
        with caplog.at_level(logging.WARNING, logger=worker.log.name):
            worker.stop_scheduler()
        assert not process.is_alive()
        assert process.exitcode == (-signal.SIGKILL if ignore_term else -signal.SIGTERM)
        warned = [r.getMessage() for r in caplog.records if "did not stop within" in r.getMessage()]
        assert len(warned) == (1 if ignore_term else 0), warned
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)


class _SignallingStream(io.StringIO):
    """A log stream whose write sends the process SIGTERM: the signal lands inside a log call."""

    def write(self, text: str) -> int:
        signal.raise_signal(signal.SIGTERM)
        return super().write(text)


def test_a_stop_signal_inside_a_log_call_prints_no_traceback_and_stops_the_worker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """RQ raises StopRequested from the SIGTERM handler when no job runs; in a log call the
    logging module caught it and printed "--- Logging error ---" with a traceback (seen in CI,
    beside a refusing integrator's one line). Ours remembers the stop there, prints nothing,
    and delivers the signal again outside the log call, where it stops the loop as RQ's does."""
    worker = MeasuredWorker([QUEUE_NAME], connection=fakeredis.FakeRedis(), serializer=JSONSerializer)
    assert worker.get_state() != WorkerStatus.BUSY and not worker._stop_requested
    logger = logging.getLogger("tests.signalled")
    handler = logging.StreamHandler(_SignallingStream())
    logger.addHandler(handler)
    previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker._install_signal_handlers()
        logger.warning("a line the stop signal interrupts")
        assert worker._stop_requested, "the stop was not remembered"
        assert "Logging error" not in capsys.readouterr().err
        with pytest.raises(StopRequested):  # delivered again, outside the log call
            threading.Event().wait(10)
        assert signal.getsignal(signal.SIGTERM) == worker.request_force_stop, "RQ's warm shutdown did not run"
    finally:
        logger.removeHandler(handler)
        for number, handler_before in previous.items():
            signal.signal(number, handler_before)


def test_a_stop_signal_after_the_work_loop_ended_is_ignored() -> None:
    """RQ's handlers stay installed after its loop ends: a signal then (the one delivered again
    above, late) must not raise StopRequested into whatever the process does next."""
    worker = MeasuredWorker([QUEUE_NAME], connection=fakeredis.FakeRedis(), serializer=JSONSerializer)
    worker.teardown()
    worker.request_stop(signal.SIGTERM, None)
    assert not worker._stop_requested


@pytest.mark.slow
def test_worker_needs_redis(tmp_path: Path) -> None:
    for env in ({}, {"JOBS_REDIS_URL": "redis://127.0.0.1:1/0"}):
        done = run_cli("worker", env=env)
        assert done.returncode == 2
        assert "REDIS_URL" in done.stderr and "embedded" in done.stderr and "inline" in done.stderr
    done = run_cli("worker", env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    assert done.returncode == 2 and "unreachable" in done.stderr and "Traceback" not in done.stderr


def test_a_worker_that_loses_redis_as_it_starts_says_so_in_one_line(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Redis gone between the worker's ping and RQ's first command (bench/log_soak.py found it:
    a worker started while a restore restarted Redis died of a ConnectionError raised in RQ's
    Worker constructor, with a traceback and exit status 1): exit 2, the same one line."""
    from execution_proof.cli import worker as worker_cli
    from execution_proof.jobs import worker as jobs_worker
    from execution_proof.runtime import logs

    def lost(*args: Any, **kwargs: Any) -> bool:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(jobs_worker, "run_worker", lost)
    monkeypatch.setattr(logs, "configure_logging", lambda log_format: None)
    for name in ("JOBS_REDIS_URL", "LOG_SIGNING_KEY", "LOG_STORE", "METRICS_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert worker_cli.worker_command(types.SimpleNamespace(burst=True)) == 2  # type: ignore[arg-type]
    assert capsys.readouterr().err == "error: the job queue at JOBS_REDIS_URL (or REDIS_URL) is unreachable\n"


# --- the schedule and its single owner ---------------------------------------------------


@pytest.fixture(params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.slow)])
def make_queue(request: pytest.FixtureRequest) -> Callable[[], Queue]:
    """Queues with their own connections to one jobs Redis, one per simulated worker."""
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        return lambda: Queue(QUEUE_NAME, connection=fakeredis.FakeRedis(server=server), serializer=JSONSerializer)
    url = request.getfixturevalue("redis_url")
    return lambda: open_queue(url)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def holder(queue: Queue) -> str | None:
    value = queue.connection.get(OWNER_KEY)
    return value.decode() if value is not None else None


def test_two_workers_one_owner_and_each_slot_enqueued_once(make_queue: Callable[[], Queue]) -> None:
    clock = FakeClock(IN_SLOT)
    a = ScheduleOwner(make_queue(), "worker-a", clock=clock)
    b = ScheduleOwner(make_queue(), "worker-b", clock=clock)
    enqueued = a.tick() + b.tick()
    for _ in range(5):
        enqueued += b.tick() + a.tick()
    assert (a.owning, b.owning) == (True, False)
    assert holder(a.queue) == "worker-a"
    assert enqueued == [RETENTION_SWEEP.job_id(SLOT), RETENTION_SWEEP.job_id(SLOT + 1)]

    queue = a.queue
    assert queue.job_ids == [RETENTION_SWEEP.job_id(SLOT)], "the current slot runs now"
    scheduled = ScheduledJobRegistry(queue=queue)
    assert scheduled.get_job_ids() == [RETENTION_SWEEP.job_id(SLOT + 1)], "the next one at its start"
    assert scheduled.get_scheduled_time(RETENTION_SWEEP.job_id(SLOT + 1)) == datetime.fromtimestamp(
        (SLOT + 1) * HOUR, UTC
    )
    job = Job.fetch(RETENTION_SWEEP.job_id(SLOT), connection=queue.connection, serializer=JSONSerializer)
    assert (job.func_name, list(job.args), job.kwargs) == (SWEEP_JOB, [], {})
    assert job.retries_left == RETRY.max and job.retry_intervals == RETRY.intervals
    assert job.timeout == RETENTION_SWEEP.job_timeout_s

    # An hour later the owner adds the slot after; nothing is enqueued twice.
    clock.now += HOUR
    assert b.tick() == []
    assert a.tick() == [RETENTION_SWEEP.job_id(SLOT + 2)]
    assert a.tick() == [] and b.tick() == []


def test_owner_handover_after_a_crash_and_after_a_release(make_queue: Callable[[], Queue]) -> None:
    clock = FakeClock(IN_SLOT)
    # A lock of 1 s: b's first tick comes well within it even on a loaded machine.
    a = ScheduleOwner(make_queue(), "worker-a", clock=clock, owner_ttl_ms=1_000)
    b = ScheduleOwner(make_queue(), "worker-b", clock=clock, owner_ttl_ms=1_000)
    assert len(a.tick()) == 2
    # a "crashes": it stops ticking. b cannot take over until the lock expires.
    assert b.tick() == [] and not b.owning
    wait_until(lambda: holder(b.queue) is None, 10, "a's lock to expire")
    assert b.tick() == [] and b.owning, "b owns now, and finds both slots already enqueued"
    assert holder(b.queue) == "worker-b"
    assert a.tick() == [] and not a.owning, "a, back, is not the owner any more"
    assert a.release() is False and holder(a.queue) == "worker-b", "a release never frees another's lock"

    # A clean shutdown releases at once: the next tick elsewhere takes over.
    assert b.release() is True and holder(b.queue) is None
    clock.now += HOUR
    assert a.tick() == [RETENTION_SWEEP.job_id(SLOT + 2)] and a.owning


@pytest.mark.real_redis
def test_many_concurrent_workers_one_owner(redis_url: str) -> None:
    clock = FakeClock(IN_SLOT)
    owners = [ScheduleOwner(open_queue(redis_url), f"worker-{n}", clock=clock) for n in range(8)]
    start = threading.Barrier(len(owners))
    claims: dict[str, int] = {}
    enqueued: list[str] = []
    lock = threading.Lock()

    def run(owner: ScheduleOwner) -> None:
        start.wait()
        for _ in range(40):
            ids = owner.tick()
            with lock:
                claims[owner.token] = claims.get(owner.token, 0) + int(owner.owning)
                enqueued.extend(ids)

    threads = [threading.Thread(target=run, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [token for token, count in claims.items() if count]
    assert len(winners) == 1 and claims[winners[0]] == 40, claims
    assert holder(owners[0].queue) == winners[0]
    assert sorted(enqueued) == sorted([RETENTION_SWEEP.job_id(SLOT), RETENTION_SWEEP.job_id(SLOT + 1)])


def test_schedule_thread_ticks_until_stopped_then_releases(make_queue: Callable[[], Queue]) -> None:
    quick = Periodic("quick", SWEEP_JOB, interval_s=HOUR, job_timeout_s=60)
    owner = ScheduleOwner(make_queue(), "worker-t", schedule=(quick,))
    thread = ScheduleThread(owner, tick_s=0.02)
    thread.start()
    wait_until(lambda: owner.owning, 5, "the thread to take ownership")
    wait_until(lambda: len(owner.queue.job_ids) == 1, 5, "the current slot's job")
    thread.stop()
    assert not thread.is_alive()
    assert holder(owner.queue) is None, "released on stop"


@pytest.mark.slow
@pytest.mark.real_redis
async def test_two_worker_processes_one_owner_one_sweep(redis_url: str, workers: Callable[..., WorkerProcess]) -> None:
    store = Store(aioredis.from_url(redis_url))
    planted = Planted(store)
    project_id = await planted.project()
    old = await planted.receipt(project_id, OLD)
    fresh = await planted.receipt(project_id, NOW)
    env = {"REDIS_URL": redis_url, "RETENTION_DAYS": "1"}
    until_next_hour = HOUR - time.time() % HOUR
    if until_next_hour < 20:  # the schedule works in clock hours: keep the test inside one
        await asyncio.sleep(until_next_hour + 0.5)
    pair = [workers(env), workers(env)]
    connection = redis.Redis.from_url(redis_url)
    queue = open_queue(redis_url)

    def names() -> dict[int, str]:
        return {int(w.name.rsplit(".", 2)[1]): w.name for w in Worker.all(connection=connection)}

    wait_until(lambda: len(names()) == 2, 30, "both workers to register")
    wait_until(lambda: not connection.exists(old["r"]), 30, "the scheduled sweep to remove the old receipt")
    await asyncio.sleep(1.0)  # both have ticked by now (each ticks at start)

    by_pid = names()
    owner_name = holder(queue)
    assert owner_name in by_pid.values()
    owner = next(w for w in pair if by_pid[w.pid] == owner_name)
    other = next(w for w in pair if w is not owner)
    assert f"schedule owner: this worker ({owner_name})" in owner.log()
    assert "schedule owner: this worker" not in other.log() and "scheduled eps-" not in other.log()

    markers = connection.keys("eps:jobs:slot:retention-sweep:*")
    assert len(markers) == 2 and {connection.get(m) for m in markers} == {owner_name.encode()}
    current = min(int(m.rsplit(b":", 1)[1]) for m in markers)
    job = Job.fetch(RETENTION_SWEEP.job_id(current), connection=connection, serializer=JSONSerializer)
    assert job.is_finished and len(job.results()) == 1, "the current slot's sweep ran once"
    assert job.return_value()["removed"] == {"receipts": 1, "hash_index": 1, "idempotency": 1, "search_index": 0}
    assert FinishedJobRegistry(queue=queue).get_job_ids() == [job.id]
    assert ScheduledJobRegistry(queue=queue).get_job_ids() == [RETENTION_SWEEP.job_id(current + 1)]
    assert await record_keys(store) == {fresh["r"], fresh["h"], fresh["i"]}
    assert await store.receipts.read_tip(project_id) == (True, fresh["receipt_hash"])

    assert [w.stop() for w in pair] == [0, 0]
    assert holder(queue) is None, "the owner released the schedule on SIGTERM"
    connection.close()
    await store.close()


def test_a_schedule_outage_is_one_line_down_and_one_line_back(caplog: pytest.LogCaptureFixture) -> None:
    """Redis refusing the schedule's ticks for ten ticks: one line when it starts, one when it
    ticks again, not one per tick."""
    ticks = 0
    done = threading.Event()

    class Owner:
        def tick(self) -> list[str]:
            nonlocal ticks
            ticks += 1
            if ticks == 15:
                done.set()
            if 2 <= ticks <= 11:
                raise redis.ConnectionError("Connection refused")
            return []

        def release(self) -> bool:
            return True

    caplog.set_level(logging.WARNING, "eps.jobs.schedule")
    thread = ScheduleThread(Owner(), tick_s=0.001)  # type: ignore[arg-type]
    thread.start()
    assert done.wait(10)
    thread.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "eps.jobs.schedule"]
    assert [m for m in said if "tick failed" in m] == [said[0]] and len(said) == 2, said
    assert "ticks again" in said[1], said


def test_a_job_queue_outage_is_one_line_down_and_one_line_back(caplog: pytest.LogCaptureFixture) -> None:
    """RQ's line at every retry while the queue's Redis is down passes once; the worker's
    first heartbeat that reaches Redis says it is back, with the retries it did not log."""
    import inspect

    import rq.worker.base

    from execution_proof.jobs.worker import RQ_RETRY_MESSAGE, MeasuredWorker, QueueOutage

    assert RQ_RETRY_MESSAGE in inspect.getsource(rq.worker.base), "RQ's retry line changed: QueueOutage matches nothing"
    server = fakeredis.FakeServer()
    worker = MeasuredWorker([QUEUE_NAME], connection=fakeredis.FakeRedis(server=server), serializer=JSONSerializer)
    worker.outage = QueueOutage()
    worker.log.addFilter(worker.outage)
    caplog.set_level(logging.INFO, "rq.worker")
    try:
        server.connected = False
        for _ in range(10):  # as RQ's dequeue loop: a heartbeat that fails, its retry line
            with pytest.raises(redis.ConnectionError):
                worker.heartbeat()
            worker.log.error(
                "Worker %s: could not connect to Redis instance: %s retrying in %d seconds...",
                worker.name,
                "refused",
                1,
            )
        server.connected = True
        worker.heartbeat()
        worker.heartbeat()
    finally:
        worker.log.removeFilter(worker.outage)
    said = [r.getMessage() for r in caplog.records if r.name == "rq.worker"]
    assert len([m for m in said if RQ_RETRY_MESSAGE in m]) == 1, said
    back = [m for m in said if "reachable again" in m]
    assert len(back) == 1 and "9 more retries" in back[0], said


def test_a_connection_lost_during_rq_maintenance_does_not_end_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    """RQ's maintenance (registry cleaning, at start and every 10 minutes) losing its
    connection to Redis (restarted with a command in flight): one WARNING, and the work loop
    goes on to wait for jobs. RQ alone quits its loop ("found an unhandled exception,
    quitting...") and the worker exited 0, its log integrator with it."""
    worker = MeasuredWorker(
        [QUEUE_NAME], connection=fakeredis.FakeRedis(server=fakeredis.FakeServer()), serializer=JSONSerializer
    )
    cleanings = 0
    clean_registries = worker.clean_registries

    def lost_once() -> None:
        nonlocal cleanings
        cleanings += 1
        if cleanings == 1:
            raise redis.ConnectionError("Error while reading from 127.0.0.1:6379 : (104, 'Connection reset by peer')")
        clean_registries()

    worker.clean_registries = lost_once  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, "rq.worker")
    worker.work(burst=True)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "rq.worker"]
    assert not [m for _, m in said if "unhandled exception" in m], said
    assert [level for level, m in said if "maintenance lost its connection" in m] == ["WARNING"], said
    assert any("done, quitting" in m for _, m in said), said
