"""The benchmark's open loop counts a server's stall in every request due during it (no
coordinated omission), and the fork check tells one chain from a fork."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.chain import ChainCheck, main_receipt_ids
from bench.loadgen import NullServer, run_load, run_open
from tests.conftest import free_port

STALL_S = 0.3


class StallingServer(NullServer):
    """Answers like NullServer, but holds its first answer back for STALL_S."""

    stalled = False

    def data_received(self, data: bytes) -> None:
        if StallingServer.stalled:
            super().data_received(data)
            return
        StallingServer.stalled = True
        asyncio.get_running_loop().call_later(STALL_S, super().data_received, data)


def spec(port: int) -> dict[str, Any]:
    return {"host": f"127.0.0.1:{port}", "mode": "hot", "items": ["eps_key"], "nonce": "0" * 16}


async def measure(open_loop: bool) -> dict[str, Any]:
    StallingServer.stalled = False
    port = free_port()
    server = await asyncio.get_running_loop().create_server(StallingServer, "127.0.0.1", port)
    try:
        if open_loop:
            return await run_open("127.0.0.1", port, spec(port), connections=1, rate=200.0, seconds=1.0)
        return await run_load("127.0.0.1", port, spec(port), connections=1, seconds=1.0)
    finally:
        server.close()


@pytest.mark.slow
async def test_open_loop_latency_counts_from_the_due_time() -> None:
    closed, opened = await measure(False), await measure(True)
    # Closed loop: one request waited through the stall, the rest never saw it.
    assert closed["p99_ms"] < STALL_S * 1000 / 2
    # Open loop: every request due during the stall waited for it (a quarter of them or more).
    assert opened["requests"] == opened["scheduled"] == 200
    assert opened["errors"] == 0
    assert opened["p99_ms"] >= STALL_S * 1000 * 0.8
    assert opened["p50_ms"] < STALL_S * 1000 / 2


def test_fork_check_needs_every_main_receipt_on_the_chain() -> None:
    body = b'{"ok":true,"receipt":{"receipt_id":"rcpt_%d"},"chain":{"status":"main"}}'
    bodies = [(body % n).decode() for n in range(3)] + ['{"receipt":{"receipt_id":"x"},"chain":{"status":"branch"}}']
    main, other = main_receipt_ids(bodies)
    assert main == ["rcpt_0", "rcpt_1", "rcpt_2"] and other == 1
    assert ChainCheck(issued_main=3, walked=3).ok
    assert not ChainCheck(issued_main=3, walked=2, missing=["rcpt_1"]).ok
