"""The store's hot path to Redis: one multiplexed, automatically pipelined connection.

Profiling a create (bench/PROFILE.md) put about 43 % of a worker's CPU in redis-py and the
asyncio machinery under it: each command takes a pooled connection (an asyncio condition),
arms a timeout, writes, waits and parses, 50-90 us apiece. ``FastLink`` is what the store's
per-request commands (key lookup, counters, the issue script, receipt reads) go through when
the store is one Redis, over TCP, TLS (``rediss://``) or a Unix socket (``unix://``):

- every command of the process shares one connection; replies come back in order (RESP), so
  each waits on a future in a FIFO queue;
- commands sent during one event-loop turn leave in one ``write`` (automatic pipelining, as
  ioredis does): 32 concurrent requests cost one system call, not 32; and while a write is
  unanswered the next commands are held and leave together when its answer comes
  (``MAX_WRITES_IN_FLIGHT``), so each of Redis's turns gets one write per connection, over TCP,
  TLS and Unix sockets alike;
- commands are packed and replies parsed by hiredis (C);
- one timer per connection, not one per command, enforces the command timeout: when the
  oldest unanswered command is older than ``command_timeout_s`` the connection is dropped and
  every waiting command fails with ``redis.exceptions.TimeoutError``;
- a lost or refused connection fails the waiting commands with
  ``redis.exceptions.ConnectionError`` and the next command reconnects, so the store's
  existing mapping to 503 ``store_unavailable`` applies unchanged;
- a connection that has heard nothing for ``idle_reconnect_s`` (the pool's
  ``health_check_interval``, 30 s) is replaced before its next command, so a connection
  dropped silently by a firewall or the server never costs a request the 5 s timeout;
- TLS takes its ``SSLContext`` from redis-py's own ``RedisSSLContext``, built from the
  client's options, so ``rediss://`` URLs and ``ssl_*`` arguments mean what they mean to
  redis-py; a failed handshake (unknown CA, no client certificate) is a ``ConnectionError``;
- each (re)connect sends ``AUTH`` (username and password, or what the client's
  ``credential_provider`` answers at that moment) and ``SELECT`` before any command.

A command in flight when its caller is cancelled still gets its reply (it is dropped); the
order of the queue never breaks. ``PyLink`` offers the same calls over any redis-py client
(fakeredis for the embedded store and unit tests, Redis Cluster), so the store has one
code path: both are a ``Link``, the store's only view of them; ``link_for`` picks.

Upstream: an error reply becomes the exception redis-py would raise through
``redis._parsers.base.BaseParser.parse_error``, a private module of redis-py 8.1.0
(https://github.com/redis/redis-py/issues/2658: its maintainers call ``redis._parsers``
private, free to change in any release). redis-py has no public function that maps an error
reply to its exception class, so the import stays: pyproject.toml pins
``redis[hiredis]>=8.1.0,<8.2`` and tests/test_library_pins.py fails on a release whose
``parse_error`` differs, so an upgrade is re-checked here first.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from hashlib import sha1
from typing import Any, Protocol

import hiredis
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis._parsers.base import BaseParser
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, RedisSSLContext, SSLConnection, UnixDomainSocketConnection
from redis.credentials import CredentialProvider

from execution_proof.kv.cluster_link import ClusterLink
from execution_proof.kv.futures import Arg, SentScript, chain, fail_quietly, seen


@dataclass(frozen=True)
class LuaScript:
    """A script's source and SHA-1, with the redis-py ``Script`` that ``PyLink`` runs."""

    source: str
    sha: str
    registered: Any

    @classmethod
    def register(cls, client: Any, source: str) -> LuaScript:
        sha = sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()
        return cls(source, sha, client.register_script(source))


class Link(Protocol):
    """What the store calls on its way to Redis: ``FastLink``, ``ClusterLink`` or ``PyLink``
    (``link_for``). The stores use these verbs, never the class behind them."""

    @property
    def ordered(self) -> bool:
        """Whether commands sent on this link run in the order they were sent: one connection,
        whose commands Redis runs in order, so a command sent before another need not be
        awaited first. False for a Cluster (one connection per master) and for redis-py's
        pooled connections."""
        ...

    def send(self, *args: Arg) -> Awaitable[Any]:
        """Send one command now; await the result for its raw reply (a Redis error raised as
        redis-py's exception)."""
        ...

    def send_script(self, script: LuaScript, keys: Sequence[Arg], args: Sequence[Arg]) -> Awaitable[Any]:
        """Send ``script`` now (``EVALSHA``, so it shares a write with the next command of this
        event-loop turn); await the result for its reply, ``EVAL`` being sent first if the
        server does not know the script (kv/futures.py, ``SentScript``)."""
        ...

    async def run_script(self, script: LuaScript, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """Run ``script`` with ``keys`` and ``args``; its reply."""
        ...

    async def close(self) -> None:
        """Release what the link holds (not the redis-py client: the store closes that)."""
        ...


class PyLink:
    """The link over a redis-py client: each command is an ordinary redis-py call."""

    ordered = False
    """A pooled client: two commands may take two connections."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def send(self, *args: Arg) -> Awaitable[Any]:
        """The command as a task (already under way, like ``FastLink.send``'s queued command);
        a failure nobody awaits is marked seen, as ``FastLink`` does."""
        task: asyncio.Future[Any] = asyncio.ensure_future(self.client.execute_command(*args))
        task.add_done_callback(seen)
        return task

    def send_script(self, script: LuaScript, keys: Sequence[Arg], args: Sequence[Arg]) -> Awaitable[Any]:
        return SentScript(self.send, script, keys, args)

    async def run_script(self, script: LuaScript, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        return await script.registered(keys=list(keys), args=list(args))

    async def close(self) -> None:
        """The redis-py client is closed by its owner (the store)."""


class _Protocol(asyncio.Protocol):
    def __init__(self, link: FastLink) -> None:
        self.link = link
        self.reader = hiredis.Reader()
        self.transport: Any = None  # asyncio's or uvloop's TCP transport
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.sent_at: deque[float] = deque()
        self.last_heard = time.monotonic()
        self.written = 0  # commands written to the transport, set-up included
        self.replied = 0
        self.write_ends: deque[int] = deque()  # ``written`` after each write not fully answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.last_heard = time.monotonic()
        reader = self.reader
        reader.feed(data)
        waiting, sent_at = self.waiting, self.sent_at
        while (reply := reader.gets()) is not False:
            if not waiting:  # a reply nobody asked for: the stream is out of step
                self.fail(redis_errors.ConnectionError("Redis sent a reply that no command asked for"))
                return
            future = waiting.popleft()
            sent_at.popleft()
            self.replied += 1
            if future.done():  # its caller was cancelled; the reply still kept the order
                continue
            if isinstance(reply, hiredis.ReplyError):
                fail_quietly(future, BaseParser.parse_error(str(reply)))  # type: ignore[no-untyped-call]
            else:
                future.set_result(reply)
        write_ends = self.write_ends
        while write_ends and write_ends[0] <= self.replied:
            write_ends.popleft()
        link = self.link
        if link._outgoing and not link._flush_scheduled and link._protocol is self:
            link._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.fail(redis_errors.ConnectionError(f"the connection to Redis was lost: {exc or 'closed'}"))

    def fail(self, error: BaseException) -> None:
        """Fail every waiting command with ``error`` and drop the connection."""
        self.link._forget(self)
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                fail_quietly(future, error)
        self.sent_at.clear()


class FastLink:
    """One pipelined connection to one Redis over TCP, TLS or a Unix socket (see the
    module's description).

    ``ssl_context``: speak TLS, with this context (an ``ssl.SSLContext``, or redis-py's
    ``RedisSSLContext``, whose ``get()`` builds it at the first connect) and ``host`` as the
    server name the certificate is checked against. ``unix_path``: connect to this Unix
    socket instead of ``host``/``port``. ``credential_provider``: a redis-py
    ``CredentialProvider`` asked for ``(username, password)`` or ``(password,)`` at every
    connect (a token that rotates is fetched anew); it replaces ``username``/``password``.
    """

    ordered = True
    """One connection: Redis runs its commands in the order they were sent."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        connect_timeout_s: float = 2.0,
        command_timeout_s: float = 5.0,
        idle_reconnect_s: float = 30.0,
        ssl_context: ssl.SSLContext | RedisSSLContext | None = None,
        unix_path: str | None = None,
        credential_provider: CredentialProvider | None = None,
    ) -> None:
        if unix_path is not None and ssl_context is not None:
            raise ValueError("a Unix socket link does not speak TLS")
        if credential_provider is not None and (username is not None or password is not None):
            raise ValueError("give either username/password or a credential_provider, not both")
        self.host, self.port, self.db = host, port, db
        self.ssl_context, self.unix_path = ssl_context, unix_path
        self.credential_provider = credential_provider
        self.idle_reconnect_s = idle_reconnect_s
        """A connection that has not heard from Redis for this long is replaced before its next
        command (redis-py's ``health_check_interval`` pings instead; this costs no round trip)."""
        self.username, self.password = username, password
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self._protocol: _Protocol | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._outgoing: list[bytes] = []
        self._pid = os.getpid()
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None

    @classmethod
    def for_client(cls, client: aioredis.Redis) -> FastLink | None:
        """A link to the same server, database and credentials as ``client``'s pool, or None
        when the pool's connections are none of redis-py's TCP, TLS or Unix-socket classes.

        For TLS, redis-py's own ``SSLConnection`` is built from the pool's keyword arguments
        (no I/O) and its ``RedisSSLContext`` taken: the URL's and the caller's ``ssl_*``
        options (CA file or data, client certificate and key, ``ssl_cert_reqs``,
        ``ssl_check_hostname``, minimum version, ciphers) mean exactly what they mean to
        redis-py, defaults included."""
        pool = client.connection_pool
        kind = pool.connection_class
        if kind not in (Connection, SSLConnection, UnixDomainSocketConnection):
            return None
        kwargs = pool.connection_kwargs
        if kwargs.get("credential_provider") is not None and (kwargs.get("username") or kwargs.get("password")):
            return None  # redis-py refuses both at once (DataError): it says so, as before
        ssl_context = None
        if kind is SSLConnection:
            try:
                ssl_context = SSLConnection(**kwargs).ssl_context
            except redis_errors.RedisError:  # an option redis-py refuses: it says so, as before
                return None
        return cls(
            kwargs.get("host", "localhost"),
            int(kwargs.get("port", 6379)),
            db=int(kwargs.get("db", 0) or 0),
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            connect_timeout_s=float(kwargs.get("socket_connect_timeout") or 2.0),
            command_timeout_s=float(kwargs.get("socket_timeout") or 5.0),
            idle_reconnect_s=float(kwargs.get("health_check_interval") or 30.0),
            ssl_context=ssl_context,
            unix_path=kwargs.get("path") if kind is UnixDomainSocketConnection else None,
            credential_provider=kwargs.get("credential_provider"),
        )

    @property
    def address(self) -> str:
        """Where the link connects, for error messages."""
        if self.unix_path is not None:
            return f"unix:{self.unix_path}"
        return f"{self.host}:{self.port}" + (" (TLS)" if self.ssl_context is not None else "")

    # -- sending

    def send(self, *args: Arg) -> asyncio.Future[Any]:
        """Queue one command; the future resolves to its raw reply (bytes, int, list, None)."""
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if protocol is not None and self._loop is loop:
            if protocol.waiting or time.monotonic() - protocol.last_heard < self.idle_reconnect_s:
                return self._enqueue(protocol, _pack(args))
            # Quiet for a while: a firewall or the server may have dropped it without a word
            # (the next command would wait out the timeout). Nothing is waiting on it: replace it.
            protocol.fail(redis_errors.ConnectionError("an idle connection was replaced"))
        future: asyncio.Future[Any] = loop.create_future()
        packed = _pack(args)
        task = loop.create_task(self._send_after_connect(packed))
        task.add_done_callback(lambda done: chain(done, future))
        return future

    def send_script(self, script: LuaScript, keys: Sequence[Arg], args: Sequence[Arg]) -> SentScript:
        """EVALSHA now; awaited, EVAL when the server does not know the script yet."""
        return SentScript(self.send, script, keys, args)

    async def run_script(self, script: LuaScript, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """EVALSHA, loading the script with EVAL when the server does not know it yet."""
        try:
            return await self.send("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:
            return await self.send("EVAL", script.source, len(keys), *keys, *args)

    def _enqueue(self, protocol: _Protocol, packed: bytes) -> asyncio.Future[Any]:
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[Any] = loop.create_future()
        protocol.waiting.append(future)
        protocol.sent_at.append(time.monotonic())
        self._outgoing.append(packed)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self.command_timeout_s, self._check_timeouts)
        return future

    def _flush(self) -> None:
        self._flush_scheduled = False
        protocol = self._protocol
        if protocol is None or protocol.transport is None:
            self._outgoing = []
            return
        if len(protocol.write_ends) >= MAX_WRITES_IN_FLIGHT:
            return  # held: the reply that completes a write in flight sends it
        outgoing, self._outgoing = self._outgoing, []
        if outgoing:
            protocol.transport.write(b"".join(outgoing))
            protocol.written += len(outgoing)
            protocol.write_ends.append(protocol.written)

    def _check_timeouts(self) -> None:
        self._watchdog = None
        protocol = self._protocol
        if protocol is None or not protocol.sent_at:
            return
        waited = time.monotonic() - protocol.sent_at[0]
        if waited >= self.command_timeout_s:
            protocol.fail(redis_errors.TimeoutError(f"Redis did not answer within {self.command_timeout_s:g} s"))
            return
        assert self._loop is not None
        self._watchdog = self._loop.call_later(self.command_timeout_s - waited, self._check_timeouts)

    async def _send_after_connect(self, packed: bytes) -> Any:
        protocol = await self._connected()
        return await self._enqueue(protocol, packed)

    # -- connecting

    async def _connected(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or the store moved to another event loop
            if self._loop is not None and (self._loop.is_closed() or self._pid != os.getpid()):
                # Its transport and futures went with the closed loop, or belong to the process
                # this one was forked from: forget them without touching the shared socket.
                self._protocol = None
            self._drop()
            self._loop, self._connecting, self._watchdog = loop, None, None
            self._pid = os.getpid()
            self._outgoing, self._flush_scheduled = [], False
        if self._protocol is not None:
            return self._protocol
        if self._connecting is None:
            self._connecting = loop.create_future()
            connecting = self._connecting
            try:
                protocol = await self._connect(loop)
            except BaseException as exc:
                self._connecting = None
                connecting.set_exception(exc)
                connecting.exception()  # retrieved: the callers waiting on it get it raised
                raise
            self._connecting = None
            self._protocol = protocol
            connecting.set_result(protocol)
            return protocol
        return await asyncio.shield(self._connecting)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Protocol:
        """The transport: a Unix socket, TLS over TCP (handshake included) or plain TCP."""
        protocol: _Protocol
        if self.unix_path is not None:
            _, protocol = await loop.create_unix_connection(lambda: _Protocol(self), self.unix_path)
        elif self.ssl_context is not None:
            context = self.ssl_context
            if isinstance(context, RedisSSLContext):
                context = context.get()
            _, protocol = await loop.create_connection(
                lambda: _Protocol(self), self.host, self.port, ssl=context, server_hostname=self.host
            )
        else:
            _, protocol = await loop.create_connection(lambda: _Protocol(self), self.host, self.port)
        return protocol

    async def _credentials(self) -> tuple[Any, ...]:
        """AUTH's arguments, as redis-py sends them: the provider's, asked at each connect."""
        if self.credential_provider is not None:
            return tuple(await self.credential_provider.get_credentials_async())
        if self.password is None:
            return ()
        return (self.username, self.password) if self.username else (self.password,)

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Protocol:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                protocol = await self._open(loop)
        except TimeoutError as exc:
            raise redis_errors.TimeoutError(f"connecting to Redis at {self.address} timed out") from exc
        except Exception as exc:  # OSError, ssl.SSLError (a certificate refused), a bad context
            raise redis_errors.ConnectionError(f"cannot connect to Redis at {self.address}: {exc}") from exc
        setup: list[tuple[Arg, ...]] = []
        try:
            credentials = await self._credentials()
        except BaseException:
            protocol.fail(redis_errors.ConnectionError("no credentials for Redis"))
            raise
        if credentials:
            setup.append(("AUTH", *credentials))
        if self.db:
            setup.append(("SELECT", self.db))
        if setup:
            assert protocol.transport is not None
            futures = []
            for _ in setup:
                future: asyncio.Future[Any] = loop.create_future()
                protocol.waiting.append(future)
                protocol.sent_at.append(time.monotonic())
                futures.append(future)
            protocol.transport.write(b"".join(_pack(command) for command in setup))
            protocol.written += len(setup)
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    for future in futures:
                        await future
            except BaseException:
                protocol.fail(redis_errors.ConnectionError("Redis refused the connection's set-up"))
                raise
        return protocol

    def _forget(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None
            self._outgoing = []
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None

    def _drop(self) -> None:
        protocol = self._protocol
        if protocol is not None:
            protocol.fail(redis_errors.ConnectionError("the link was closed"))

    async def close(self) -> None:
        self._drop()


MAX_WRITES_IN_FLIGHT = 1
"""Writes a connection may have unanswered. Redis runs one connection's commands one event-loop
turn at a time (and, with ``appendfsync always``, fsyncs once per turn): what arrives while a
write is being answered waits for its next turn anyway. Held here, it leaves in one write when
the answer comes. Over plain TCP the kernel's socket buffer already joins such writes; over TLS
each write is a record and Redis reads one record per connection per turn, so without the hold
every small write cost its own turn and fsync (TLS ran at 0.57 of plain TCP; with it, 0.9-1.0)."""


def _pack(args: tuple[Arg, ...]) -> bytes:
    """One command in RESP, packed by hiredis (its stubs type the tuple as one element)."""
    packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
    return packed


def link_for(client: Any) -> Link:
    """``FastLink`` for a redis-py ``Redis`` over TCP, TLS or a Unix socket; ``ClusterLink``
    (kv/cluster_link.py: one ``FastLink`` per master, routed by slot, following MOVED and ASK)
    for a redis-py ``RedisCluster`` on TCP; ``PyLink`` for anything else (fakeredis, a TLS
    cluster)."""
    if type(client) is aioredis.Redis:
        fast = FastLink.for_client(client)
        if fast is not None:
            return fast
    if type(client) is RedisCluster:
        cluster = ClusterLink.for_client(client, FastLink)
        if cluster is not None:
            return cluster
    return PyLink(client)
