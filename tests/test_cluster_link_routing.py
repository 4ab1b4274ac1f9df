"""kv/cluster_link.py's routing rules, with scripted node links instead of a cluster.

Each test states one rule: a command goes to its first key's slot owner (for a script, the
first of its keys), keyless commands to the default node, ``SCRIPT`` to every master,
``WAIT`` nowhere; ``MOVED`` updates the map and retries, ``ASK`` sends ``ASKING`` with the
command to the named node only, ``TRYAGAIN`` is retried then raised, and redirections are
bounded. The real cluster's behaviour is in tests/test_cluster_link.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis import exceptions as redis_errors
from redis._parsers.base import BaseParser
from redis.crc import key_slot

from execution_proof.kv import cluster_link
from execution_proof.kv.cluster_link import ClusterLink

A, B, C = ("10.0.0.1", 7000), ("10.0.0.2", 7000), ("10.0.0.1", 7002)
SLOTS = [[0, 5460, [b"10.0.0.1", 7000, b"a"]], [5461, 10922, [b"10.0.0.2", 7000, b"b"]], [10923, 16383, [b"", 7002]]]


def error(reply: str) -> BaseException:
    return BaseParser.parse_error(reply)  # type: ignore[no-untyped-call, no-any-return]


class ScriptedNode:
    """A node link that records what it is sent and answers through ``answer``."""

    def __init__(self, address: tuple[str, int], answer: Callable[[tuple[str, int], tuple[Any, ...]], Any]) -> None:
        self.address, self.answer = address, answer
        self.sent: list[tuple[Any, ...]] = []

    def send(self, *args: Any) -> asyncio.Future[Any]:
        self.sent.append(args)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        reply = SLOTS if args == ("CLUSTER", "SLOTS") else self.answer(self.address, args)
        if isinstance(reply, BaseException):
            future.set_exception(reply)
        else:
            future.set_result(reply)
        return future

    async def close(self) -> None:
        pass


def cluster(answer: Callable[[tuple[str, int], tuple[Any, ...]], Any]) -> tuple[ClusterLink, dict[Any, ScriptedNode]]:
    nodes: dict[Any, ScriptedNode] = {}

    def node_link(host: str, port: int) -> ScriptedNode:
        nodes[(host, port)] = ScriptedNode((host, port), answer)
        return nodes[(host, port)]

    return ClusterLink([A], node_link), nodes


def key_on(address: tuple[str, int]) -> str:
    """A key whose slot ``SLOTS`` gives to ``address``."""
    ranges = {A: range(0, 5461), B: range(5461, 10923), C: range(10923, 16384)}
    return next(f"key-{i}" for i in range(10_000) if key_slot(f"key-{i}".encode()) in ranges[address])


def commands(node: ScriptedNode) -> list[tuple[Any, ...]]:
    return [args for args in node.sent if args != ("CLUSTER", "SLOTS")]


async def test_commands_and_scripts_go_to_their_first_keys_owner_and_keyless_ones_to_the_default_node() -> None:
    link, nodes = cluster(lambda address, args: address)
    on_b, on_c = key_on(B), key_on(C)
    assert await link.send("GET", on_b) == B
    assert await link.send("EVALSHA", "0" * 40, 2, on_c, on_b, "arg") == C, "the first of the script's keys"
    assert await link.send("EVALSHA", "0" * 40, 0, on_b) == A, "no keys: the default node (a start-up node)"
    assert await link.send("PING") == A
    assert link.masters == [A, B, C], "an empty host in CLUSTER SLOTS is the node asked"
    assert commands(nodes[C]) == [("EVALSHA", "0" * 40, 2, on_c, on_b, "arg")]


async def test_script_goes_to_every_master_and_wait_is_refused() -> None:
    link, nodes = cluster(lambda address, args: [1, 0] if address == A else [1, 1])
    await link.send("PING")
    assert await link.send("SCRIPT", "EXISTS", "x", "y") == [1, 0], "known only where every master knows it"
    assert all(commands(nodes[address])[-1] == ("SCRIPT", "EXISTS", "x", "y") for address in (A, B, C))
    with pytest.raises(ValueError, match="WAIT"):
        await link.send("WAIT", 1, 100)


async def test_moved_updates_the_slot_owner_and_sends_the_command_there() -> None:
    on_a = key_on(A)
    slot = key_slot(on_a.encode())

    def answer(address: tuple[str, int], args: tuple[Any, ...]) -> Any:
        return error(f"MOVED {slot} 10.0.0.2:7000") if address == A else b"value"

    link, nodes = cluster(answer)
    assert await link.send("GET", on_a) == b"value"
    assert link.slots[slot] == B and link.slots[slot + 1 if slot < 5460 else slot - 1] == A, "only that slot"
    assert await link.send("GET", on_a) == b"value"
    assert commands(nodes[A]) == [("GET", on_a)], "the second command goes straight to the new owner"


async def test_ask_sends_asking_with_the_command_to_the_target_and_keeps_the_map() -> None:
    on_a = key_on(A)
    slot = key_slot(on_a.encode())

    def answer(address: tuple[str, int], args: tuple[Any, ...]) -> Any:
        if address == A:
            return error(f"ASK {slot} 10.0.0.1:7002")
        return b"OK" if args == ("ASKING",) else b"moved-key"

    link, nodes = cluster(answer)
    assert await link.send("GET", on_a) == b"moved-key"
    assert commands(nodes[C]) == [("ASKING",), ("GET", on_a)]
    assert link.slots[slot] == A


async def test_tryagain_is_retried_then_raised_and_redirections_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_link, "TRY_AGAIN_PAUSES_S", (0.0, 0.0))
    on_a = key_on(A)
    slot = key_slot(on_a.encode())
    tries = [0]

    def flaky(address: tuple[str, int], args: tuple[Any, ...]) -> Any:
        tries[0] += 1
        return error("TRYAGAIN Multiple keys request during rehashing of slot") if tries[0] < 3 else b"done"

    link, _ = cluster(flaky)
    assert await link.send("GET", on_a) == b"done"
    tries[0] = -10
    with pytest.raises(redis_errors.TryAgainError):
        await link.send("GET", on_a)

    link, _ = cluster(lambda address, args: error(f"MOVED {slot} {address[0]}:{address[1]}"))  # a loop
    with pytest.raises(redis_errors.ClusterError, match="too many cluster redirections"):
        await link.send("GET", on_a)


async def test_noscript_loads_the_script_on_the_same_node() -> None:
    on_b = key_on(B)

    def answer(address: tuple[str, int], args: tuple[Any, ...]) -> Any:
        return error("NOSCRIPT No matching script.") if args[0] == "EVALSHA" else (address, args[0])

    link, _ = cluster(answer)
    script = type("Script", (), {"sha": "0" * 40, "source": "return 1"})()
    assert await link.run_script(script, [on_b], []) == (B, "EVAL")


async def test_no_reachable_node_is_a_cluster_exception() -> None:
    def unreachable(host: str, port: int) -> Any:
        node = ScriptedNode((host, port), lambda address, args: None)
        node.send = lambda *args: _failed(redis_errors.ConnectionError("refused"))  # type: ignore[method-assign]
        return node

    link = ClusterLink([A, B], unreachable)
    with pytest.raises(redis_errors.RedisClusterException, match="no node of the Redis Cluster"):
        await link.send("GET", "k")


def _failed(exc: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future
