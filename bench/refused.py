"""What a refused create costs the server: a minimal one next to one with a worst-case body.

A request that is refused for its key or its address must cost about what a minimal refused
request costs, whatever its body holds: the service authenticates and applies the address's
limits before it parses or scans the body. This script measures it from outside, as the
server's own CPU time per request (``/proc/PID/stat``, every process of the server), for:

- ``minimal``: an unknown API key and the body ``{}``;
- ``worst body``: the same key and the valid body with the most for the content scan to read
  (``"a."`` runs without an ``@``, the old scan's worst case);
- ``accepted``: a valid key creating a receipt, for scale.

The accepted creates run first; after the refused shapes' first ten failures the address is
throttled, so the refused requests measured are 429s: the shape that a client with a bad key
and many connections sends. Loopback only, bounded in count.

    python -m bench.refused [--requests 1000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import orjson

from bench.run import REPO, Proc, base_env, free_port, log, new_signing_keys, start_redis, wait_http

UNKNOWN_KEY = "eps_" + "x" * 43
RUN = "a." * 128  # 256 characters: the longest code_ref, run_id or tag value


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.refused", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per shape (default 1000)")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="eps-refused-"))
    redis_proc, url = start_redis(tmp, None, aof_always=False)
    port = free_port()
    env = {**base_env(), "REDIS_URL": url, "SIGNING_KEYS": new_signing_keys(), "LOG_FORMAT": "json"}
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
        with httpx.Client(timeout=10.0) as client:
            for name, send in (("accepted", accepted), ("minimal", refused_minimal), ("worst body", refused_worst)):
                cost_us(client, server.process.pid, 50, send)  # warm up
                started = time.monotonic()
                us, statuses = cost_us(client, server.process.pid, args.requests, send)
                rows.append((name, us, statuses, time.monotonic() - started))
        log(f"worst body: {len(worst)} bytes")
        print("| request | server CPU per request | statuses |")
        print("|---|---:|---|")
        for name, us, statuses, _ in rows:
            print(f"| {name} | {us:,.0f} µs | {', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))} |")
        return 0
    finally:
        server.stop()
        redis_proc.stop()


if __name__ == "__main__":
    sys.exit(main())
