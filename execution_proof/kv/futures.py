"""Futures shared by the links (kv/link.py, kv/cluster_link.py): a failure that is always
marked as seen, and one future settled from another."""

from __future__ import annotations

import asyncio
from typing import Any


def seen(task: asyncio.Future[Any]) -> None:
    """Done-callback: retrieve a failure nobody awaits, so asyncio logs nothing."""
    if not task.cancelled():
        task.exception()


def fail_quietly(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail ``future``; whoever awaits it gets ``error`` raised. Marked as seen, so a future
    nobody awaits any more (its partner in a pair failed first) logs no "never retrieved"."""
    future.set_exception(error)
    future.exception()


def chain(done: asyncio.Future[Any], future: asyncio.Future[Any]) -> None:
    if done.cancelled():
        if not future.done():
            future.cancel()
        return
    # Retrieved even when nobody waits any more (the request was cancelled: its client hung
    # up): otherwise asyncio logs "Task exception was never retrieved" as an error.
    exc = done.exception()
    if future.done():
        return
    if exc is not None:
        fail_quietly(future, exc)
    else:
        future.set_result(done.result())
