"""One log line when a long-running loop starts failing (once per kind of failure) and one
when it passes again, instead of a line per retry: a Redis or a log store that is down for an
hour must not write thousands of lines (docs/observability.md, "Logs")."""

from __future__ import annotations

import logging
import time


class Outage:
    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what
        """What fails, as the lines name it: ``log integrator``, ``time-stamper``."""
        self.failing: dict[str, int] | None = None
        """While passes fail: each kind of failure and how many passes it failed (None: passing)."""
        self._since = 0.0

    def failed(self, exc: BaseException, trace: bool = False) -> None:
        """A pass failed with ``exc``: said (with its traceback when ``trace``) the first time
        its kind fails in this outage, counted otherwise."""
        kind = type(exc).__name__
        if self.failing is None:
            self.failing, self._since = {}, time.monotonic()
        if kind not in self.failing:
            self.logger.warning(
                "%s pass failed (%s: %s); retrying every pass, said again only when it passes",
                self.what,
                kind,
                exc if not trace else repr(exc),
                exc_info=trace,
            )
        self.failing[kind] = self.failing.get(kind, 0) + 1

    def passed(self) -> None:
        """A pass went through: the end of an outage is said once, with what failed how often."""
        if self.failing is None:
            return
        failing, self.failing = self.failing, None
        self.logger.warning(
            "%s passes again after %.1f s (failed passes: %s)",
            self.what,
            time.monotonic() - self._since,
            ", ".join(f"{kind} {count}" for kind, count in sorted(failing.items())),
        )
