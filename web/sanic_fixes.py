"""A stop that arrives while Sanic's worker manager is still starting must still stop it.

Sanic 25.12's ``WorkerManager.wait_for_ack`` loops until every worker has acknowledged its
start-up, polling its message pipe every 0.1 s. A SIGTERM in that window (for example, the
platform stopping a machine that is still booting) runs ``shutdown_signal``: it puts the stop
message on the pipe and terminates the workers, marking them TERMINATED. They never
acknowledge now, and ``wait_for_ack`` takes the stop message off the pipe, puts it back and
``continue``s without counting a miss: it spins until a second signal SIGKILLs everything
(measured: 1 in 3-8 stops right after start hung until the platform's kill timeout, or
exited 1). ``install`` replaces ``wait_for_ack`` with the same loop that returns as soon as
a shutdown has begun, so ``monitor`` reads the stop message and the manager stops cleanly.
"""

from __future__ import annotations

from typing import Any

from sanic.response.types import HEADER_TRANSLATION_TABLE, BaseHTTPResponse
from sanic.worker.manager import WorkerManager

_original_wait_for_ack = WorkerManager.wait_for_ack
TERMINATE_EARLY = "__TERMINATE_EARLY__"


def wait_for_ack(self: Any) -> None:
    """``WorkerManager.wait_for_ack`` as in Sanic 25.12, plus the early return on shutdown."""
    misses = 0
    message = (
        "It seems that one or more of your workers failed to come online in the allowed time. "
        f"Sanic is shutting down to avoid a deadlock. The current threshold is {self.THRESHOLD / 10}s."
    )
    while not self._all_workers_ack():
        if getattr(self, "_shutting_down", False):
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


def install() -> None:
    """Patch the manager class (idempotent). Only the serving process calls this."""
    WorkerManager.wait_for_ack = wait_for_ack  # type: ignore[method-assign]


def _sanitize_header_value(value: str) -> str:
    """Sanic's header-value sanitising (drop CR, LF and NUL) without its cost when there is
    nothing to drop: ``str.translate`` with a deletion table walks every character in Python
    objects (about 1.2 us for a 60-character value, 20 values per create response), while
    ``isprintable`` is one C scan (0.08 us) and is False for every character the table drops.
    The result is identical for every string."""
    if value.isprintable():
        return value
    return value.translate(HEADER_TRANSLATION_TABLE)


def fast_header_values() -> None:
    """Install ``_sanitize_header_value`` (idempotent). The serving workers call this at import
    of the app, and bench/ceiling.py does too, so the ceiling gets the same help."""
    BaseHTTPResponse._sanitize_header_value = staticmethod(_sanitize_header_value)  # type: ignore[method-assign]
