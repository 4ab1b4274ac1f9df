"""How ``monitor`` fetches the log (cli/monitor.py): daemon fetch threads, each with its own
keep-alive connection (``Workers``), and the retries around every GET (``Fetcher``: backoff
with full jitter, ``Retry-After`` honoured, a deadline per request, and the log's silence
across a pass)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import random
import ssl  # asyncio loads it anyway (unlike http_client, no start-up to save by deferring it)
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

from execution_proof.client.http import HttpClient, HttpError, HttpUnreachable, Reply
from execution_proof.client.log_checks import LogInputError
from execution_proof.receipts import errors

CONCURRENCY = 16  # requests in flight
ATTEMPTS = 6  # tries of a request that fails without the server saying when to come back
PATIENCE = 60  # 429s with Retry-After ridden out for one request before giving up
BACKOFF_S = 0.25
BACKOFF_CAP_S = 20.0
REQUEST_TIMEOUT_S = 10.0  # connect, and between two reads of a reply
REQUEST_DEADLINE_S = 20.0  # one request in all (a reply that trickles in)
SILENCE_S = 30.0  # without an answer from the log, a pass stops: --once ends well within a minute
MAX_RESOURCE_BYTES = 16 << 20  # a tile is 8 KiB, a bundle 256 entries of about 250 bytes


class LogUnreachable(LogInputError, errors.Unreachable):
    """The log gave no usable reply (``execution_proof.Unreachable``): no answer for the
    silence limit, connections that failed every attempt, a certificate that does not
    verify, a redirect loop, a reply over the ceiling."""


class LogReplyError(LogInputError):
    """The log answered, not with what a log serves: a status other than 200, a resource
    the checkpoint needs that is missing (404), a checkpoint that is not a signed note.
    ``--json`` names it a ``ServiceError`` (the log's reply was refused)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


Get = Callable[[str], Awaitable[Reply]]
Sleep = Callable[[float], Awaitable[None]]


class Workers:
    """The fetch threads: ``size`` threads, each with its own ``HttpClient`` (one keep-alive
    connection to the log's host, redirects followed, TLS verified), so a blocking request
    never waits on another's connection; ``get`` hands one request to them and awaits it.

    Daemon threads: a request the pass stopped waiting for (its deadline passed) finishes in
    its thread, and neither the next pass nor the process's exit waits for it. One TLS
    context for them all (each ``HttpClient`` would otherwise load the system's CA store for its
    first https connection)."""

    def __init__(self, size: int = CONCURRENCY, *, tls: bool = False) -> None:
        self._jobs: queue.SimpleQueue[tuple[str, asyncio.Future[Reply]] | None] = queue.SimpleQueue()
        self._tls = ssl.create_default_context() if tls else None
        self._threads = [threading.Thread(target=self._work, name="monitor-fetch", daemon=True) for _ in range(size)]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Each thread ends after the request it is in (bounded by ``REQUEST_TIMEOUT_S`` per
        read), closing its connection; none is waited for."""
        for _ in self._threads:
            self._jobs.put(None)

    async def get(self, url: str) -> Reply:
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._jobs.put((url, future))
        return await future

    def _work(self) -> None:
        with HttpClient(timeout=REQUEST_TIMEOUT_S, max_bytes=MAX_RESOURCE_BYTES, tls=self._tls) as client:
            while (job := self._jobs.get()) is not None:
                url, future = job
                if future.cancelled():  # given up while it waited for a thread
                    continue
                try:
                    outcome: Reply | Exception = client.get(url)
                except Exception as exc:  # noqa: BLE001 - raised again by the coroutine that awaits it
                    outcome = exc
                _settle(future, outcome)


def _settle(future: asyncio.Future[Reply], outcome: Reply | Exception) -> None:
    """Hand a request's outcome to the coroutine awaiting ``future``, in its loop; nothing
    when that coroutine gave up on it or its loop has ended."""

    def resolve() -> None:
        if future.done():
            return
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # the loop is closed: the pass ended without this reply
        future.get_loop().call_soon_threadsafe(resolve)


@dataclass
class Fetcher:
    """GETs under the log's prefix: 200 is the body, 404 None; connection errors (refused,
    reset, timed out, TLS), a request past ``REQUEST_DEADLINE_S``, 429 and 5xx are retried
    with exponential backoff and full jitter (a 429's or 503's ``Retry-After`` is waited out
    as given); anything else (another status, too many redirects, a reply over the size
    ceiling, a certificate that does not verify), retries exhausted, or no answer from the
    log for ``silence_s`` (across every request of the pass), is ``LogUnreachable``, but a
    status that is not retried, or the last of a retried one, is ``LogReplyError``."""

    get: Get
    prefix: str
    sleep: Sleep = asyncio.sleep
    concurrency: int = CONCURRENCY
    silence_s: float = SILENCE_S
    clock: Callable[[], float] = time.monotonic
    requests: int = 0
    retries: int = 0
    waits: list[float] = field(default_factory=list)
    heard: float = field(init=False)
    """When the log last answered (or the pass began, or a wait it asked for ended)."""

    def __post_init__(self) -> None:
        self._gate = asyncio.Semaphore(self.concurrency)
        self.heard = self.clock()

    def _time_left(self) -> float:
        """Seconds left before the log's silence ends the pass."""
        return self.heard + self.silence_s - self.clock()

    async def fetch(self, path: str) -> bytes | None:
        url = self.prefix + path
        failures = limited = 0
        problem, answered = f"{url}: no reply", None
        while True:
            wait: float | None
            async with self._gate:
                left = self._time_left()
                if left <= 0:
                    raise LogUnreachable(f"the log has not answered for {self.silence_s:g} s ({problem})")
                self.requests += 1
                bound = min(REQUEST_DEADLINE_S, left)
                timer = asyncio.timeout(bound)
                try:
                    async with timer:
                        reply: Reply | None = await self.get(url)
                except TimeoutError:
                    if not timer.expired():
                        raise
                    reply, problem, answered = None, f"{url}: no reply within {bound:.3g} s", None
                except HttpError as exc:
                    if not transient(exc):
                        raise LogUnreachable(str(exc)) from exc
                    reply, problem, answered = None, str(exc), None
            if reply is None:
                wait = None
            else:
                self.heard = self.clock()
                status = reply.status
                if status == 200:
                    return reply.body
                if status == 404:
                    return None
                if status != 429 and status < 500:
                    raise LogReplyError(f"{url} answered HTTP {status}", status)
                problem, answered = f"{url} answered HTTP {status}", status
                wait = retry_after(reply) if status in (429, 503) else None
            if wait is not None and limited < PATIENCE:
                limited += 1
                asked = True
            else:
                failures += 1
                if failures >= ATTEMPTS:
                    if answered is not None:
                        raise LogReplyError(f"{problem} ({failures} attempts)", answered)
                    raise LogUnreachable(f"{problem} ({failures} attempts)")
                wait = min(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_S * 2**failures)), max(self._time_left(), 0))
                asked = False
            self.retries += 1
            self.waits.append(wait)
            await self.sleep(wait)
            if asked:  # the log asked for this pause: it is not silence
                self.heard = max(self.heard, self.clock())


def transient(exc: HttpError) -> bool:
    """Whether a failed request may succeed if tried again: the connection failed (refused,
    reset, timed out, a TLS error), not the reply (too many redirects, too large), the URL or
    the server's certificate (not trusted, or not for this host: no retry mends that)."""
    return isinstance(exc, HttpUnreachable)


def retry_after(reply: Reply) -> float | None:
    """Seconds from a ``Retry-After`` header in seconds (None when absent or a date)."""
    value = reply.headers.get("retry-after", "")
    return float(value) if value.strip().isdigit() else None
