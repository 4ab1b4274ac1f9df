"""Futures shared by the links (kv/link.py, kv/cluster_link.py): a failure that is always
marked as seen, one future settled from another, and a script sent ahead whose reply
loads the script when the server does not know it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Protocol

from redis.exceptions import NoScriptError

Arg = bytes | str | int | float


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


class Script(Protocol):
    """What a link needs of a ``LuaScript`` (kv/link.py) to run it."""

    @property
    def source(self) -> str: ...

    @property
    def sha(self) -> str: ...


class SentScript:
    """A script sent now with ``EVALSHA`` (a link's ``send_script``), so it leaves in the same
    write as the next command of this event-loop turn. Awaited, its reply; should the server
    not know the script (``NOSCRIPT``: it restarted, or never ran it), the await sends it
    again with ``EVAL``, which loads it (one more round trip, once per server start). Never
    awaited (its request was refused first), it is dropped like any command sent ahead."""

    __slots__ = ("_args", "_keys", "_script", "_send", "_sent")

    def __init__(
        self, send: Callable[..., Awaitable[Any]], script: Script, keys: Sequence[Arg], args: Sequence[Arg]
    ) -> None:
        self._send, self._script, self._keys, self._args = send, script, keys, args
        self._sent = send("EVALSHA", script.sha, len(keys), *keys, *args)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._reply().__await__()

    async def _reply(self) -> Any:
        try:
            return await self._sent
        except NoScriptError:
            keys = self._keys
            return await self._send("EVAL", self._script.source, len(keys), *keys, *self._args)
