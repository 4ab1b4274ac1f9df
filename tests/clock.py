"""The injectable app clock the tests share (``create_app(..., clock_ms=Clock(...))``)."""

from __future__ import annotations

from datetime import datetime


def ms(text: str) -> int:
    """Unix milliseconds of an ISO time such as ``2026-11-21T10:00:15.200Z``."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class Clock:
    """Unix milliseconds, set by the test: ``Clock("2026-11-21T10:00:00Z")`` or ``Clock(ms)``."""

    def __init__(self, start: int | str) -> None:
        self.now = ms(start) if isinstance(start, str) else start

    def __call__(self) -> int:
        return self.now

    def set(self, moment: int | str) -> None:
        self.now = ms(moment) if isinstance(moment, str) else moment

    @property
    def unix(self) -> int:
        return self.now // 1000
