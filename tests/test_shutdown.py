"""Graceful shutdown, as a platform stops a machine (SIGTERM, then SIGKILL after a grace time):
the web server finishes the requests it is serving, and the job worker finishes its current job.

Each test holds work in flight on a condition the test controls (never a sleep), sends
SIGTERM, waits until the process has logged that it is stopping, and only then lets the
work finish: the work that was in flight completes and the process exits 0.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from rq.job import Job
from rq.serializers import JSONSerializer

from execution_proof.jobs.queue import open_queue
from execution_proof.kv.keys import api_key_key
from execution_proof.receipts.apikeys import hash_api_key
from tests.fake_providers import HOLD, FakeHumanCheck
from tests.servers import ServicePool, WorkerProcess, service_pool_fixture, wait_until

service_factory = service_pool_fixture()

HOLD_WAIT_S = 20.0


def hold_until_released(started_path: str, release_path: str) -> str:
    """A job that announces it started, then waits for the test's go-ahead (bounded)."""
    Path(started_path).write_text("started")
    deadline = time.monotonic() + HOLD_WAIT_S
    while not Path(release_path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("never released")
        time.sleep(0.02)
    return "finished after release"


@pytest.mark.slow
@pytest.mark.real_redis
@pytest.mark.parametrize("web_workers", [1, 2])
def test_web_server_finishes_in_flight_requests_on_sigterm(
    web_workers: int, redis_url: str, service_factory: ServicePool
) -> None:
    """A free claim waits on the (held) human-check provider when SIGTERM arrives: every Sanic
    worker logs that it is stopping, yet the claim completes with its key, which works in Redis."""
    human = FakeHumanCheck()
    try:
        service = service_factory.start(
            workers=web_workers,
            redis_url=redis_url,
            env={"HUMAN_CHECK_SECRET": "shutdown-test-secret", "HUMAN_CHECK_VERIFY_URL": human.url},
        )
        answer: dict[str, Any] = {}

        def claim() -> None:
            try:
                answer["response"] = httpx.post(
                    service.base_url + "/v1/claim/free", json={"turnstile_token": HOLD}, timeout=30
                )
            except httpx.HTTPError as exc:
                answer["error"] = exc

        caller = threading.Thread(target=claim)
        caller.start()
        assert human.held.wait(10), "the claim never reached the provider"
        assert service.process is not None
        service.request_stop()
        service.wait_for_output(r"Stopping worker", count=web_workers)
        assert service.process.poll() is None, "the server exited with a request in flight"

        human.release.set()
        caller.join(30)
        assert "error" not in answer, f"the in-flight request was cut: {answer.get('error')!r}"
        response = answer["response"]
        assert response.status_code == 200, response.text
        api_key = response.json()["api_key"]
        assert service.process.wait(20) == 0, service.stdout()[-3000:] + service.stderr()[-6000:]
        with redis.Redis.from_url(redis_url) as connection:
            assert connection.hget(api_key_key(hash_api_key(api_key)), "plan") == b"free", "the key was not written"
    finally:
        human.close()


@pytest.mark.slow
@pytest.mark.real_redis
def test_worker_finishes_its_current_job_on_sigterm(
    redis_url: str, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """RQ's warm shutdown: SIGTERM during a job lets the job finish, then the worker exits 0."""
    started, release = tmp_path / "started", tmp_path / "release"
    queue = open_queue(redis_url)
    job = queue.enqueue("tests.test_shutdown.hold_until_released", str(started), str(release))
    worker = workers({"REDIS_URL": redis_url})
    wait_until(started.exists, 30, "the job to start")

    worker.process.send_signal(signal.SIGTERM)
    wait_until(lambda: re.search(r"warm shut ?down requested", worker.log(), re.IGNORECASE) is not None, 10, "warm")
    assert worker.process.poll() is None, "the worker exited with a job in flight"
    assert not release.exists()

    release.write_text("go")
    assert worker.process.wait(30) == 0, worker.log()[-3000:]
    finished = Job.fetch(job.id, connection=queue.connection, serializer=JSONSerializer)
    assert finished.is_finished, worker.log()[-3000:]
    assert finished.return_value() == "finished after release"


class StartingManager:
    """The parts of Sanic's WorkerManager that wait_for_ack touches, just after a SIGTERM
    that came before the workers' acknowledgement: they are TERMINATED (never ack), and the
    stop message (None) waits on the pipe."""

    THRESHOLD = 50

    def __init__(self, shutting_down: bool) -> None:
        self._shutting_down = shutting_down
        self.pipe: list[Any] = [None]
        self.sent = 0
        self.monitor_subscriber = self
        self.monitor_publisher = self
        self.killed = False

    def _all_workers_ack(self) -> bool:
        return False

    def poll(self, timeout: float) -> bool:
        return bool(self.pipe)

    def recv(self) -> Any:
        return self.pipe.pop(0)

    def send(self, message: Any) -> None:
        self.sent += 1
        if self.sent > 1000:
            raise RuntimeError("wait_for_ack is spinning on the stop message")
        self.pipe.append(message)

    def kill(self) -> None:
        self.killed = True
        raise RuntimeError("killed")


def test_sanic_manager_stops_when_sigterm_arrives_before_the_workers_ack() -> None:
    """Sanic 25.12's own loop spins forever on this state; the installed one returns and leaves
    the stop message for monitor()."""
    from sanic.worker.manager import WorkerManager

    from execution_proof.web import sanic_fixes

    with pytest.raises(RuntimeError, match="spinning"):
        sanic_fixes._original_wait_for_ack(StartingManager(shutting_down=True))  # type: ignore[arg-type]

    manager = StartingManager(shutting_down=True)
    sanic_fixes.wait_for_ack(manager)
    assert manager.pipe == [None], "the stop message stays for monitor()"
    assert not manager.killed

    sanic_fixes.install()
    assert WorkerManager.wait_for_ack is sanic_fixes.wait_for_ack


class StoppingManager:
    """The parts of Sanic's WorkerManager that the stop path touches. Its shared worker state
    refuses every access made from inside the signal handler, which is what broke a read that
    the handler interrupted."""

    def __init__(self) -> None:
        self._shutting_down = False
        self.sent: list[Any] = []
        self.monitor_publisher = self
        self.in_handler = False
        self.shutdowns = 0
        self.kills = 0
        self.polls: list[Any] = []

    @property
    def worker_state(self) -> dict[str, Any]:
        if self.in_handler:
            raise AssertionError("the signal handler touched the manager's shared state")
        return {}

    def send(self, message: Any) -> None:
        self.sent.append(message)

    def shutdown(self) -> None:
        self.worker_state  # noqa: B018 - Sanic's shutdown() writes every worker's state
        self.shutdowns += 1
        self._shutting_down = True

    def kill(self) -> None:
        self.kills += 1
        from sanic.exceptions import ServerKilled

        raise ServerKilled

    def wait_for_ack(self) -> None:
        pass

    def _poll_monitor(self) -> Any:
        from sanic.worker.manager import MonitorCycle

        self.polls.append(self.sent[:])
        return MonitorCycle.BREAK if None in self.sent else None

    def _sync_states(self) -> None:
        self.worker_state  # noqa: B018

    def _cleanup_non_tracked_workers(self) -> None:
        pass


def test_sigterm_only_asks_the_monitor_to_stop_and_the_monitor_terminates_the_workers() -> None:
    from execution_proof.web import sanic_fixes

    sanic_original = StoppingManager()
    sanic_original.in_handler = True
    with pytest.raises(AssertionError, match="touched the manager's shared state"):
        sanic_fixes._original_shutdown_signal(sanic_original, signal.SIGTERM, None)  # type: ignore[arg-type]

    manager = StoppingManager()
    manager.in_handler = True
    sanic_fixes.shutdown_signal(manager, signal.SIGTERM, None)
    manager.in_handler = False
    assert manager.sent == [None] and manager.shutdowns == 0, "the handler only posts the stop message"

    sanic_fixes.monitor(manager)
    assert manager.shutdowns == 1, "the monitor terminated the workers once it read the stop message"

    manager.in_handler = True
    sanic_fixes.shutdown_signal(manager, signal.SIGTERM, None)
    assert manager.kills == 1, "a second signal kills, as in Sanic"


def test_install_replaces_the_stop_path_of_the_manager() -> None:
    """After ``install``, Sanic's own WorkerManager stops as the fixes do: its signal handler
    leaves the shared state alone and only posts the stop message, its monitor terminates the
    workers, and its wait for the workers' start-up returns once a stop has begun."""
    from sanic.worker.manager import WorkerManager

    from execution_proof.web import sanic_fixes

    sanic_fixes.install()
    manager = StoppingManager()
    manager.in_handler = True
    WorkerManager.shutdown_signal(manager, signal.SIGTERM, None)  # type: ignore[arg-type]
    manager.in_handler = False
    assert manager.sent == [None] and manager.shutdowns == 0, "the handler only posts the stop message"
    WorkerManager.monitor(manager)  # type: ignore[arg-type]
    assert manager.shutdowns == 1, "the monitor terminated the workers once it read the stop message"

    starting = StartingManager(shutting_down=True)
    WorkerManager.wait_for_ack(starting)  # type: ignore[arg-type]
    assert starting.pipe == [None] and not starting.killed, "the stop message stays for monitor()"
