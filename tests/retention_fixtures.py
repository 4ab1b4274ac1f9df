"""The clock and app the retention-window tests share (tests/test_retention.py,
tests/test_search.py): a one-day retention window, a clock at ``NOW``, and ``OLD`` ten
days before it, and ``travel`` to move the clock with the app's receipt key (certified anew
at the clock's time, as a process running then would have). Import the fixtures by name
into a test module."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from execution_proof.jobs.retention import DAY_MS
from execution_proof.kv.store import Store
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests.clock import Clock
from tests.receipt_keys import keys_at_the_clock

Travel = Callable[[int], Awaitable[None]]
NOW = int(time.time() * 1000)
OLD = NOW - 10 * DAY_MS


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def app(settings: Settings, store: Store, clock: Clock) -> Any:
    return create_app(replace(settings, retention_days=1.0), store=store, clock_ms=clock)


@pytest.fixture
def travel(app: Any, clock: Clock) -> Travel:
    """``await travel(ms)``: the clock set to ``ms`` and the app given a receipt key then."""

    async def to(moment: int) -> None:
        clock.now = moment
        await keys_at_the_clock(app.ctx.services.receipt_keys)

    return to
