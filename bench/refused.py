"""What a refused create costs the server: a minimal one next to one with a worst-case body.

A request that is refused for its key or its address must cost about what a minimal refused
request costs, whatever its body holds: the service authenticates and applies the address's
limits before it parses or scans the body. This script measures it from outside, as the
server's own CPU time per request (``/proc/PID/stat``, every process of the server), for:

- ``minimal``: an unknown API key and the body ``{}``;
- ``worst body``: the same key and the valid body with the most for the content scan to read
  (``"a."`` runs without an ``@``, the old scan's worst case);
- ``accepted``: a valid key creating a receipt, for scale;

then another client's create latency (p50, p99 of 200 creates one at a time), alone and beside
``--connections`` keep-alive connections sending the worst-body refused request back to back
(from a process of their own, stopped after the measurement or 60 s at the latest).

The accepted creates run first; after the refused shapes' first ten failures the address is
throttled, so the refused requests measured are 429s: the shape that a client with a bad key
and many connections sends. Loopback only, bounded in count.

    python -m bench.refused [--requests 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import orjson

from bench.harness import new_receipt_root, start_redis
from bench.procs import REPO, Proc, base_env, free_port, log, wait_http

UNKNOWN_KEY = "eps_" + "x" * 43
RUN = "a." * 128  # 256 characters: the longest code_ref, run_id or tag value
# Refused requests come from other loopback addresses than the accepted ones: an address that
# failed ten times is throttled, whatever key it sends next.
REFUSED_ADDRESS = "127.0.0.2"
ATTACKER_ADDRESS = "127.0.0.3"
ATTACK_LIMIT_S = 60.0  # the refused-request connections stop by themselves after this at the latest


def worst_body() -> bytes:
    """The create body with the most to scan: ``code_ref``, ``run_id`` and as many tags as the
    2,048-byte tag limit allows, each a 256-character run without an ``@`` (about 2.4 KB:
    every field is valid, so a service that parses first scans all of it)."""
    tags: dict[str, str] = {}
    while len(orjson.dumps({**tags, f"t{len(tags)}": RUN})) <= 2048:
        tags[f"t{len(tags)}"] = RUN
    return orjson.dumps({"input_hash": "sha256:" + "0" * 64, "code_ref": RUN, "run_id": RUN, "tags": tags})


def server_ticks(pid: int) -> int:
    """CPU clock ticks (user + system) of ``pid`` and every process below it."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, session, ... utime (12th), stime (13th).
        if int(fields[3]) == pid or int(entry.name) == pid:  # the server's own session
            total += int(fields[11]) + int(fields[12])
    return total


def cost_us(client: httpx.Client, pid: int, requests: int, send: object) -> tuple[float, dict[int, int]]:
    """Server CPU µs per request over ``requests`` calls of ``send``, and the statuses seen."""
    statuses: dict[int, int] = {}
    before = server_ticks(pid)
    for _ in range(requests):
        status = send(client)  # type: ignore[operator]
        statuses[status] = statuses.get(status, 0) + 1
    ticks = server_ticks(pid) - before
    return ticks * 1_000_000 / os.sysconf("SC_CLK_TCK") / requests, statuses


async def _hammer(port: int, request: bytes, connections: int, seconds: float) -> int:
    """``connections`` keep-alive connections sending ``request`` back to back for ``seconds``;
    the number of answers read."""
    answered = 0
    deadline = time.monotonic() + seconds

    async def one() -> None:
        nonlocal answered
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER_ADDRESS, 0))
        try:
            while time.monotonic() < deadline:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                answered += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return answered


def hammer(port: int, request: bytes, connections: int, seconds: float) -> None:
    """``_hammer`` in a process of its own (so the measuring client keeps its own core time)."""
    answered = asyncio.run(_hammer(port, request, connections, seconds))
    log(f"hammer: {answered} refused requests answered in {seconds:.0f} s")


def create_latencies(client: httpx.Client, send: Callable[[httpx.Client], int], count: int) -> list[float]:
    """Milliseconds of ``count`` creates, one after another."""
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        assert send(client) == 201
        latencies.append((time.perf_counter() - started) * 1000)
    return sorted(latencies)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.refused", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per shape (default 1000)")
    parser.add_argument(
        "--connections", type=int, default=8, help="refused-request connections beside a client's creates (default 8)"
    )
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="eps-refused-"))
    redis_proc, url = start_redis(tmp, None, aof_always=False)
    port = free_port()
    env = {**base_env(), "REDIS_URL": url, "RECEIPT_ROOT_KEY": new_receipt_root(tmp), "LOG_FORMAT": "json"}
    raised = {"plans": {"pro": {"per_minute": 10**9, "monthly": 10**9}}, "ip_per_minute": {"authenticated": 10**9}}
    env["LIMITS"] = orjson.dumps(raised).decode()
    server = Proc.start(
        "service",
        [sys.executable, "service.py", "serve", "--port", str(port), "--workers", "1"],
        env=env,
        log_path=tmp / "service.log",
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(server, base + "/health")
        made = subprocess.run(
            [sys.executable, "service.py", "keys", "create", "--project", "refused", "--plan", "pro"],
            cwd=REPO,
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        )
        key = orjson.loads(made.stdout)["api_key"]
        worst = worst_body()
        json_headers = {"Content-Type": "application/json"}

        def refused_minimal(client: httpx.Client) -> int:
            headers = {**json_headers, "Authorization": f"Bearer {UNKNOWN_KEY}"}
            return client.post(base + "/v1/receipts", content=b"{}", headers=headers).status_code

        def refused_worst(client: httpx.Client) -> int:
            headers = {**json_headers, "Authorization": f"Bearer {UNKNOWN_KEY}"}
            return client.post(base + "/v1/receipts", content=worst, headers=headers).status_code

        counter = iter(range(10**9))

        def accepted(client: httpx.Client) -> int:
            body = orjson.dumps({"input_hash": "sha256:" + f"{next(counter):064x}"})
            headers = {**json_headers, "Authorization": f"Bearer {key}"}
            return client.post(base + "/v1/receipts", content=body, headers=headers).status_code

        rows = []
        with (
            httpx.Client(timeout=10.0) as accepting,
            httpx.Client(timeout=10.0, transport=httpx.HTTPTransport(local_address=REFUSED_ADDRESS)) as refused,
        ):
            for name, send, client in (
                ("accepted", accepted, accepting),
                ("minimal", refused_minimal, refused),
                ("worst body", refused_worst, refused),
            ):
                cost_us(client, server.process.pid, 50, send)  # warm up
                started = time.monotonic()
                us, statuses = cost_us(client, server.process.pid, args.requests, send)
                rows.append((name, us, statuses, time.monotonic() - started))
        log(f"worst body: {len(worst)} bytes")
        print("| request | server CPU per request | statuses |")
        print("|---|---:|---|")
        for name, us, statuses, _ in rows:
            print(f"| {name} | {us:,.0f} µs | {', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))} |")

        # Another client's creates, alone and beside connections of refused worst-body requests.
        request = (
            f"POST /v1/receipts HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {UNKNOWN_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(worst)}\r\n\r\n"
        ).encode() + worst
        count = 200
        with httpx.Client(timeout=10.0) as client:
            alone = create_latencies(client, accepted, count)
            attack = multiprocessing.get_context("spawn").Process(
                target=hammer, args=(port, request, args.connections, ATTACK_LIMIT_S)
            )
            attack.start()
            try:
                time.sleep(1.0)  # the connections are open and sending
                beside = create_latencies(client, accepted, count)
            finally:
                attack.terminate()
                attack.join(10)
        print()
        print(f"| another client's creates ({count}, one at a time) | p50 | p99 |")
        print("|---|---:|---:|")
        for name, latencies in (
            ("alone", alone),
            (f"beside {args.connections} connections of refused worst-body creates", beside),
        ):
            print(f"| {name} | {latencies[count // 2]:.1f} ms | {latencies[count * 99 // 100]:.1f} ms |")
        return 0
    finally:
        server.stop()
        redis_proc.stop()


if __name__ == "__main__":
    sys.exit(main())
