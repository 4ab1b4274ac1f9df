"""The store's hot path to a Redis Cluster: one pipelined link per master, routed by slot.

``ClusterLink`` is the ``Link`` (kv/link.py) the store uses when ``REDIS_CLUSTER=true``. It
holds one node link per master (``FastLink``: one multiplexed, automatically pipelined
connection), so a cluster store sends its per-request commands the way a single-Redis store
does, instead of one pooled redis-py connection per command.

- **Routing.** A command goes to the master that owns the slot of its first key
  (``redis.crc.key_slot``, hash tags included): for ``EVALSHA``/``EVAL`` the first of the
  ``numkeys`` keys, else the command's first argument. Every multi-key command and script
  the store sends keeps its keys in one project's slot (``{TAG}``, docs/cluster.md).
- **Keyless commands** go where redis-py's cluster client sends them: ``PING``, ``ECHO``,
  ``INFO`` and the like, and a script with no keys, to the default node (the first
  start-up node while it is a master, else the owner of slot 0); ``SCRIPT ...`` to every
  master (the replies agree; ``SCRIPT EXISTS`` answers a script known to all of them).
  ``WAIT``/``WAITAOF`` are refused: they count the writes of the connection they run on,
  and a shared per-node connection has no "the node that took the write" to offer
  (``STORE_ACK`` runs on a plain Redis only; start-up refuses it with a cluster).
- **The slot map** comes from ``CLUSTER SLOTS`` (masters only; no replica reads), read at
  first use from the start-up nodes or any master known. It is read again, in the
  background, after a ``MOVED`` and after a connection error or timeout on a node; when
  errors repeat, at most once per ``refresh_interval_s``.
- **MOVED** (the slot has a new owner): the slot's owner is updated at once and the command
  is sent again to the new node. **ASK** (the slot is migrating and the key has left):
  ``ASKING`` and the command are sent together, in one write on the target's connection.
  A command follows at most ``MAX_REDIRECTIONS`` redirections, then fails with
  ``ClusterError`` (503). Neither reply means the command ran, so sending it again is safe.
- **TRYAGAIN** (a multi-key command in a slot being migrated) and **CLUSTERDOWN** are retried
  after a short pause, ``TRY_AGAIN_PAUSES_S`` in all, then raised (both 503).
- **A lost node** fails its waiting commands with ``ConnectionError`` or ``TimeoutError`` (503),
  as ``FastLink`` does; they are not sent again (a write may have been applied). The next
  command to that node reconnects; the map is re-read meanwhile, so a failover's new
  master is found.
- **NOSCRIPT** on a node: ``run_script`` (and an awaited ``send_script``) sends ``EVAL`` to
  the same slot (as ``FastLink``).

The module depends on no other module of ``kv`` but the futures the links share
(kv/futures.py): ``link_for`` (kv/link.py) hands it the node link's class.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from redis import exceptions as redis_errors
from redis.asyncio.connection import Connection
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from execution_proof.kv.futures import Arg, Script, SentScript, chain, fail_quietly, seen

Address = tuple[str, int]

MAX_REDIRECTIONS = 3
"""MOVED/ASK replies one command follows (a MOVED then an ASK is an ordinary resharding)."""
TRY_AGAIN_PAUSES_S = (0.05, 0.1, 0.2, 0.4)
"""Pauses before sending a command again after TRYAGAIN or CLUSTERDOWN (0.75 s in all)."""
REFRESH_INTERVAL_S = 1.0

KEYLESS = frozenset(
    {b"PING", b"ECHO", b"INFO", b"TIME", b"DBSIZE", b"CONFIG", b"CLUSTER", b"COMMAND", b"LASTSAVE", b"MEMORY"}
)
UNROUTABLE = frozenset({b"WAIT", b"WAITAOF", b"MULTI", b"EXEC", b"WATCH", b"ASKING", b"SELECT"})
RETRIED_LATER = (redis_errors.TryAgainError, redis_errors.ClusterDownError)


class NodeLink(Protocol):
    """One node's link (``FastLink``): ``send`` queues a command at once."""

    def send(self, *args: Arg) -> asyncio.Future[Any]: ...

    async def close(self) -> None: ...


class ClusterLink:
    """The ``Link`` over a Redis Cluster (see the module's description)."""

    ordered = False
    """One connection per master: commands to two slots may run in either order."""

    def __init__(
        self,
        startup_nodes: Sequence[Address],
        node_link: Callable[[str, int], NodeLink],
        *,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        self.startup_nodes = [(host, int(port)) for host, port in startup_nodes]
        self.node_link = node_link
        """Makes the link to one node: ``FastLink`` with the cluster client's credentials and timeouts."""
        self.refresh_interval_s = refresh_interval_s
        self.slots: list[Address | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        self.masters: list[Address] = []
        self.links: dict[Address, NodeLink] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._refreshed_at = -float("inf")
        self._stale = False

    @classmethod
    def for_client(cls, client: Any, node_link: Callable[..., NodeLink]) -> ClusterLink | None:
        """A link to the cluster of redis-py's ``RedisCluster`` ``client``: its start-up nodes,
        credentials and timeouts; ``node_link`` (``FastLink``) is called with the host, the
        port and keyword options. None when the client's connections are not plain TCP
        (TLS): that client keeps redis-py."""
        kwargs = client.connection_kwargs
        if kwargs.get("connection_class", Connection) is not Connection:
            return None
        if kwargs.get("credential_provider") is not None:
            return None
        options = {
            "username": kwargs.get("username"),
            "password": kwargs.get("password"),
            "connect_timeout_s": float(kwargs.get("socket_connect_timeout") or 2.0),
            "command_timeout_s": float(kwargs.get("socket_timeout") or 5.0),
            "idle_reconnect_s": float(kwargs.get("health_check_interval") or 30.0),
        }
        return cls(
            [(node.host, int(node.port)) for node in client.startup_nodes],
            lambda host, port: node_link(host, port, **options),
        )

    # -- sending

    def send(self, *args: Arg) -> asyncio.Future[Any]:
        """Send one command to its slot's master now (once the slot map is known); the future
        resolves to its raw reply after any redirection."""
        loop = asyncio.get_running_loop()
        outer: asyncio.Future[Any] = loop.create_future()
        name = _command_name(args)
        if self.masters and not self._stale and name not in UNROUTABLE and name != b"SCRIPT":
            address = self._address_for(name, args)
            if address is not None:
                inner = self._link(address).send(*args)
                inner.add_done_callback(lambda done: self._settle(done, outer, args))
                return outer
        task = loop.create_task(self._execute(args))
        task.add_done_callback(lambda done: chain(done, outer))
        return outer

    def send_script(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> SentScript:
        """EVALSHA to the keys' master now; awaited, EVAL there when it does not know the script."""
        return SentScript(self.send, script, keys, args)

    async def run_script(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """EVALSHA on the keys' master, loading the script with EVAL there when it does not know it."""
        try:
            return await self.send("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis_errors.NoScriptError:
            return await self.send("EVAL", script.source, len(keys), *keys, *args)

    async def close(self) -> None:
        refreshing, self._refreshing = self._refresh_running(), None
        if refreshing is not None:
            refreshing.cancel()
        links, self.links = list(self.links.values()), {}
        for link in links:
            await link.close()

    def _settle(self, done: asyncio.Future[Any], outer: asyncio.Future[Any], args: tuple[Arg, ...]) -> None:
        """The first answer of a command sent directly: passed on, or handed to ``_execute``
        when it is a redirection or a pause to wait out."""
        if done.cancelled():
            if not outer.done():
                outer.cancel()
            return
        exc = done.exception()  # retrieved even when nobody waits any more
        if outer.done():
            return
        if exc is None:
            outer.set_result(done.result())
        elif isinstance(exc, (redis_errors.AskError, *RETRIED_LATER)):
            task = asyncio.get_running_loop().create_task(self._execute(args, exc))
            task.add_done_callback(lambda retried: chain(retried, outer))
        else:
            self._after_failure(exc)
            fail_quietly(outer, exc)

    async def _execute(self, args: tuple[Arg, ...], error: BaseException | None = None) -> Any:
        """Send ``args`` until it is answered: after ``error`` (a redirection or TRYAGAIN of an
        earlier attempt), with the slot map read first when it is not known yet."""
        name = _command_name(args)
        if name in UNROUTABLE:
            raise ValueError(f"{name.decode()} cannot be sent over a cluster link (see kv/cluster_link.py)")
        if not self.masters or self._stale:
            await self._refresh()
        if name == b"SCRIPT":
            return await self._on_every_master(args)
        redirections = pauses = 0
        asking: Address | None = None
        while True:
            if error is not None:
                if isinstance(error, redis_errors.MovedError):
                    self.slots[error.slot_id] = (error.host, error.port)
                    self._refresh_soon()
                    redirections += 1
                elif isinstance(error, redis_errors.AskError):
                    asking = (error.host, error.port)
                    redirections += 1
                else:  # TRYAGAIN, CLUSTERDOWN
                    if pauses >= len(TRY_AGAIN_PAUSES_S):
                        raise error
                    if isinstance(error, redis_errors.ClusterDownError):
                        self._refresh_soon()
                    await asyncio.sleep(TRY_AGAIN_PAUSES_S[pauses])
                    pauses, redirections = pauses + 1, 0  # back to the owner: it may redirect again
                if redirections > MAX_REDIRECTIONS:
                    raise redis_errors.ClusterError(f"too many cluster redirections for {name.decode()}") from error
            address = asking or self._address_for(name, args)
            if address is None:
                raise redis_errors.ClusterError("the cluster's slot map does not cover this key's slot")
            link = self._link(address)
            try:
                if asking is not None:
                    # One write on the target's connection: ASKING applies to the next command.
                    asked = link.send("ASKING")
                    reply = link.send(*args)
                    asking = None
                    await asked
                    return await reply
                return await link.send(*args)
            except (redis_errors.AskError, *RETRIED_LATER) as exc:
                error = exc
            except BaseException as exc:
                self._after_failure(exc)
                raise

    async def _on_every_master(self, args: tuple[Arg, ...]) -> Any:
        """``SCRIPT ...`` on every master; the first master's reply (``EXISTS``: known to all)."""
        replies = await asyncio.gather(*(self._link(address).send(*args) for address in self.masters))
        if _command_name(args[1:]) == b"EXISTS":
            return [int(all(known)) for known in zip(*replies, strict=True)]
        return replies[0]

    def _after_failure(self, exc: BaseException) -> None:
        if isinstance(exc, (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)):
            self._refresh_soon()  # the node may have failed over: learn who owns its slots now

    # -- routing

    def _address_for(self, name: bytes, args: tuple[Arg, ...]) -> Address | None:
        if name in (b"EVALSHA", b"EVAL", b"EVAL_RO", b"EVALSHA_RO", b"FCALL", b"FCALL_RO"):
            key = args[3] if len(args) > 3 and int(args[2]) > 0 else None
        elif name in KEYLESS or len(args) < 2:
            key = None
        else:
            key = args[1]
        if key is None:
            return self._default_node()
        return self.slots[key_slot(_as_bytes(key))]

    def _default_node(self) -> Address | None:
        for address in self.startup_nodes:
            if address in self.masters:
                return address
        return self.slots[0]

    def _link(self, address: Address) -> NodeLink:
        link = self.links.get(address)
        if link is None:
            link = self.links[address] = self.node_link(*address)
        return link

    # -- the slot map

    def _refresh_soon(self) -> None:
        """Read the slot map again in the background (at most once per ``refresh_interval_s``)."""
        if self._refresh_running() is None and time.monotonic() - self._refreshed_at >= self.refresh_interval_s:
            self._start_refresh()

    async def _refresh(self) -> None:
        """The slot map, read now (one reader at a time; the others wait for its result)."""
        await asyncio.shield(self._refresh_running() or self._start_refresh())

    def _refresh_running(self) -> asyncio.Task[None] | None:
        refreshing = self._refreshing
        if refreshing is None or refreshing.done() or refreshing.get_loop() is not asyncio.get_running_loop():
            return None  # none, finished, or left behind on a closed event loop
        return refreshing

    def _start_refresh(self) -> asyncio.Task[None]:
        refreshing = self._refreshing = asyncio.get_running_loop().create_task(self._read_slots())
        refreshing.add_done_callback(seen)
        return refreshing

    async def _read_slots(self) -> None:
        self._refreshed_at = time.monotonic()
        candidates = list(dict.fromkeys([*self.masters, *self.startup_nodes]))
        failures: list[str] = []
        for address in candidates:
            try:
                reply = await self._link(address).send("CLUSTER", "SLOTS")
            except (redis_errors.RedisError, OSError) as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            self._apply_slots(reply, address)
            return
        self._stale = bool(self.masters)  # keep the old map, but read it before the next command
        raise redis_errors.RedisClusterException(
            "no node of the Redis Cluster answered CLUSTER SLOTS: " + "; ".join(failures)
        )

    def _apply_slots(self, reply: Any, asked: Address) -> None:
        slots: list[Address | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        masters: dict[Address, None] = {}
        for start, end, master, *_replicas in reply:
            host = _text(master[0]) or asked[0]  # an empty host: the node we asked
            address = (host, int(master[1]))
            masters[address] = None
            for slot in range(int(start), int(end) + 1):
                slots[slot] = address
        self.slots, self.masters, self._stale = slots, list(masters), False
        for address in [a for a in self.links if a not in masters and a not in self.startup_nodes]:
            link = self.links.pop(address)
            asyncio.get_running_loop().create_task(link.close()).add_done_callback(seen)


def _command_name(args: Sequence[Arg]) -> bytes:
    if not args:
        return b""
    return _as_bytes(args[0]).upper()


def _as_bytes(value: Arg) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
