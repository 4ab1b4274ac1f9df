"""Fixes for Sanic 25.12's worker manager (the serving process).

1. A stop that arrives while Sanic's worker manager is still starting must still stop it.

Sanic 25.12's ``WorkerManager.wait_for_ack`` loops until every worker has acknowledged its
start-up, polling its message pipe every 0.1 s. A SIGTERM in that window (for example, the
platform stopping a machine that is still booting) runs ``shutdown_signal``: it puts the stop
message on the pipe and terminates the workers, marking them TERMINATED. They never
acknowledge now, and ``wait_for_ack`` takes the stop message off the pipe, puts it back and
``continue``s without counting a miss: it spins until a second signal SIGKILLs everything
(measured: 1 in 3-8 stops right after start hung until the platform's kill timeout, or
exited 1). ``install`` replaces ``wait_for_ack`` with the same loop that returns as soon as
a shutdown has begun, so ``monitor`` reads the stop message and the manager stops cleanly.

2. The SIGTERM handler must not talk to the manager's shared state. Sanic's
``shutdown_signal`` runs ``shutdown()`` inside the signal handler: it marks every worker
TERMINATED through the multiprocessing Manager proxy. A Python signal handler runs between
two bytecodes of the main thread, and the main thread spends its time in ``monitor()``,
which reads that same proxy (``_sync_states``) over the same connection. When the signal
lands inside such a read, the handler's request and reply interleave with it: the
interrupted read receives the handler's last reply (``None``) and ``monitor`` dies with
``AttributeError: 'NoneType' object has no attribute 'get'``. The server then exits 1
after finishing its requests (seen in CI: 2 runs in about 4,000 shutdown tests). Here the
handler only records the request and puts the stop message on the monitor's pipe; ``monitor``
reads it and calls ``shutdown()`` itself, from the main thread's own flow.

Upstream: the code copied and replaced here is Sanic 25.12.1's (``sanic/worker/manager.py``:
``WorkerManager.__init__`` registers the handler, ``wait_for_ack``, ``monitor``,
``shutdown_signal``, ``shutdown``, ``_poll_monitor``). pyproject.toml pins
``sanic>=25.12.1,<25.13`` and tests/test_library_pins.py fails on any release whose copy of
these differs, so an upgrade is re-checked here first. Fix 1 is the first point of Sanic's
report https://github.com/sanic-org/sanic/issues/2997 (signals during start-up); the fix
proposed upstream is https://github.com/sanic-org/sanic/pull/3063. Once a Sanic release
carries a fix, ``wait_for_ack`` here can go. Fix 2 has no upstream report:
its text is in docs/upstream-reports.md, ready to file. Both still show on Sanic 25.12.1: each
test in tests/test_shutdown.py runs Sanic's own method first and sees it fail
(docs/upstream-reports.md has the reproductions).
"""

from __future__ import annotations

from contextlib import suppress
from signal import Signals
from typing import Any

from sanic.exceptions import ServerKilled
from sanic.log import logger
from sanic.worker.manager import MonitorCycle, WorkerManager

_original_wait_for_ack = WorkerManager.wait_for_ack
_original_shutdown_signal = WorkerManager.shutdown_signal
_original_monitor = WorkerManager.monitor
TERMINATE_EARLY = "__TERMINATE_EARLY__"


def wait_for_ack(self: Any) -> None:
    """``WorkerManager.wait_for_ack`` as in Sanic 25.12, plus the early return on shutdown."""
    misses = 0
    message = (
        "It seems that one or more of your workers failed to come online in the allowed time. "
        f"Sanic is shutting down to avoid a deadlock. The current threshold is {self.THRESHOLD / 10}s."
    )
    while not self._all_workers_ack():
        if getattr(self, "_shutting_down", False) or getattr(self, "_stop_requested", False):
            return  # SIGTERM/SIGINT during start-up: monitor() reads the stop message next
        if self.monitor_subscriber.poll(0.1):
            monitor_msg = self.monitor_subscriber.recv()
            if monitor_msg != TERMINATE_EARLY:
                self.monitor_publisher.send(monitor_msg)
                continue
            misses = self.THRESHOLD
            message = "One of your worker processes terminated before startup was completed."
        misses += 1
        if misses > self.THRESHOLD:
            _log_and_kill(self, message)


def _log_and_kill(manager: Any, message: str) -> None:
    from sanic.log import error_logger

    error_logger.error("Not all workers acknowledged a successful startup. Shutting down.\n\n" + message)
    manager.kill()


def shutdown_signal(self: Any, signal: int, frame: Any) -> None:
    """SIGTERM/SIGINT: ask ``monitor`` to stop (no shared-state access in the handler); a
    second signal kills, as in Sanic."""
    if self._shutting_down or getattr(self, "_stop_requested", False):
        logger.info("Shutdown interrupted. Killing.")
        with suppress(ServerKilled):
            self.kill()
        return
    logger.info("Received signal %s. Shutting down.", Signals(signal).name)
    self._stop_requested = True
    self.monitor_publisher.send(None)


def monitor(self: Any) -> None:
    """``WorkerManager.monitor`` as in Sanic 25.12; once the stop message ends the loop, the
    workers are terminated here (``shutdown``), where the handler used to do it."""
    self.wait_for_ack()
    while True:
        try:
            cycle = self._poll_monitor()
            if cycle is MonitorCycle.BREAK:
                break
            elif cycle is MonitorCycle.CONTINUE:
                continue
            self._sync_states()
            self._cleanup_non_tracked_workers()
        except InterruptedError:
            raise
    if getattr(self, "_stop_requested", False) and not self._shutting_down:
        self.shutdown()


def install() -> None:
    """Patch the manager class (idempotent). Only the serving process calls this."""
    WorkerManager.wait_for_ack = wait_for_ack  # type: ignore[method-assign]
    WorkerManager.shutdown_signal = shutdown_signal  # type: ignore[method-assign]
    WorkerManager.monitor = monitor  # type: ignore[method-assign]
