"""Request-path metrics counted in plain Python and folded into Prometheus in batches.

A Prometheus counter ``inc`` costs about 1.4 µs and a histogram ``observe`` about 2.8 µs in
multiprocess mode (a lock, a pid check and an mmap write per value; a linear bucket
search). A create touched about ten of them: some 15-20 µs of a worker's CPU per request
(bench/PROFILE.md). Here a request adds 1 to a list slot instead (a bucket found
by ``bisect``, under one uncontended lock), and ``flush`` moves the totals into the
Prometheus objects: one ``inc(n)`` per bucket that moved.

When values reach Prometheus:
- at every collection of the default registry in this process (a scrape of this process,
  the ``METRICS_TOKEN`` route, tests reading ``REGISTRY``): exact;
- in multiprocess mode (``serve``: the scrape reads every worker's files), at most
  ``FLUSH_S`` after the request, and at the worker's clean stop (``flush``);
- at once when no event loop runs in this thread (the CLI, the job worker).

Only the hot metrics go through here (requests, their durations, receipts issued, store
operation times); rare ones (refusals, errors, jobs) keep calling Prometheus directly.

Upstream: ``HistogramTally`` reads private attributes of prometheus-client 0.26.0's histogram
child (``_upper_bounds``, ``_buckets``, ``_sum``, set by ``Histogram._metric_init``; bucket
``i`` is the first bound ``>= amount``, as in ``Histogram.observe``) and calls their ``inc``.
pyproject.toml pins ``prometheus-client>=0.26.0,<0.27`` and tests/test_library_pins.py
fails on a release where those attributes or that code differ, so an upgrade is re-checked
here first. prometheus-client has no public way to add many observations at once: the
closest upstream threads are https://github.com/prometheus/client_python/pull/1124 (an
``observe`` with a count, closed unmerged) and
https://github.com/prometheus/client_python/issues/412 (the linear bucket search). No report
asks for what this module needs; its text is in docs/upstream-reports.md, ready to file.
"""

from __future__ import annotations

import asyncio
import threading
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

FLUSH_S = 1.0
"""Longest delay between a request and its values in the multiprocess files."""

_lock = threading.Lock()
_dirty: list[HistogramTally | CounterTally] = []
_timer: asyncio.TimerHandle | None = None
_timer_loop: asyncio.AbstractEventLoop | None = None


class HistogramTally:
    """``observe`` for one labelled Prometheus histogram child, batched."""

    __slots__ = ("_buckets", "_counts", "_sum", "_total", "bounds", "dirty")

    def __init__(self, child: Any) -> None:
        # The child's own bucket bounds (+Inf last) and values: prometheus-client keeps
        # them as ``_upper_bounds``, ``_buckets`` and ``_sum`` (tests/test_metrics.py checks
        # that a flush exposes exactly what ``observe`` would have).
        self.bounds: list[float] = list(child._upper_bounds)
        self._buckets = child._buckets
        self._sum = child._sum
        self._counts = [0] * len(self.bounds)
        self._total = 0.0
        self.dirty = False

    def observe(self, amount: float) -> None:
        with _lock:
            self._counts[bisect_left(self.bounds, amount)] += 1
            self._total += amount
            first, self.dirty = not self.dirty, True
        _touched(self, first)

    def _flush(self) -> None:
        for index, count in enumerate(self._counts):
            if count:
                self._buckets[index].inc(count)
                self._counts[index] = 0
        self._sum.inc(self._total)
        self._total = 0.0
        self.dirty = False


class CounterTally:
    """``inc`` (by 1) for one labelled Prometheus counter child, batched."""

    __slots__ = ("_child", "_count", "dirty")

    def __init__(self, child: Any) -> None:
        self._child = child
        self._count = 0
        self.dirty = False

    def inc(self) -> None:
        with _lock:
            self._count += 1
            first, self.dirty = not self.dirty, True
        _touched(self, first)

    def _flush(self) -> None:
        self._child.inc(self._count)
        self._count = 0
        self.dirty = False


def _touched(tally: HistogramTally | CounterTally, first: bool) -> None:
    """After a value: list the tally if it is its first since the last flush, and make sure
    a flush will come (a timer on this loop; a loop closed since, as in tests, gets a new one)."""
    if first:
        with _lock:
            _dirty.append(tally)
    if _timer is None or _timer_loop.is_closed():  # type: ignore[union-attr]
        _schedule()


def flush() -> None:
    """Move every batched value into Prometheus now (from any thread; a pending timer is
    left to fire and find little or nothing to do)."""
    with _lock:
        for tally in _dirty:
            tally._flush()
        _dirty.clear()


def _schedule() -> None:
    global _timer, _timer_loop
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush()  # no loop in this thread: nothing would run a timer
        return
    with _lock:
        if _timer is None or _timer_loop is not loop:  # none yet, or left on a closed loop
            _timer = loop.call_later(FLUSH_S, _flush_from_timer)
            _timer_loop = loop


def _flush_from_timer() -> None:
    global _timer
    with _lock:
        _timer = None
    flush()


class _FlushFirst(Collector):
    """Registered before any metric, so a collection of ``REGISTRY`` flushes first."""

    def collect(self) -> Iterable[Any]:
        flush()
        return ()

    def describe(self) -> Iterable[Any]:
        return ()


REGISTRY.register(_FlushFirst())
