"""The transparency log's figures: ``python -m bench.log`` (about 3 minutes).

On one plain-TCP Redis with ``appendfsync always`` (production's setting), a service with
the log (``LOG_SIGNING_KEY``, plus ``service.py worker`` running the integrator) and one
without, both with fly.toml's web worker count:

1. creates/s with the log on and off, closed loop (wrk if installed), 32 connections, 32
   projects, the two alternating round by round;
2. time from a 201 to a published checkpoint covering it, at a steady background load of
   half the log-on capacity: a probe creates a receipt every 50 ms and polls its
   ``log-proof`` every 10 ms (p50, p99, max);
3. the integrator's throughput: creates with the worker stopped, then the time the worker
   takes to publish a checkpoint covering all of them;
4. the log's bytes per receipt in Redis (MEMORY USAGE of every log key ÷ entries).

Prints a markdown section (append it to bench/RESULTS.md) and a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from bench.procs import Proc, base_env, log
from bench.production import ServiceSpec, fly_workers, open_loop
from bench.redis_kinds import start_kind
from bench.run import RAISED_LIMITS, Setup, Target, create_projects, new_signing_keys, run_load
from receipts.note import Signer

ORIGIN = "bench.example/log"
PROBE_EVERY_S = 0.05
POLL_EVERY_S = 0.01
PROBE_TIMEOUT_S = 20.0


def start_worker(tmp: Path, redis_url: str, signing_keys: str, log_key: str, name: str) -> Proc:
    env = base_env()
    env.update({"REDIS_URL": redis_url, "SIGNING_KEYS": signing_keys, "LOG_SIGNING_KEY": log_key,
                "LOG_ORIGIN": ORIGIN, "LOG_FORMAT": "json"})  # fmt: skip
    return Proc.start(name, [sys.executable, "service.py", "worker"], env=env, log_path=tmp / f"{name}.log")


async def probe(port: int, key: str, seconds: float) -> list[float]:
    """Seconds from each probe receipt's 201 to its proof being served."""
    delays: list[float] = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

        async def one(n: int) -> None:
            body = {"input_hash": "sha256:" + f"{n:064x}"[-64:], "output_hash": "sha256:" + f"{n + 7:064x}"[-64:]}
            created = await client.post("/v1/receipts", headers=headers, content=orjson.dumps(body))
            at = time.monotonic()
            receipt_id = created.json()["receipt"]["receipt_id"]
            while time.monotonic() - at < PROBE_TIMEOUT_S:
                answer = await client.get(f"/v1/receipts/{receipt_id}/log-proof")
                if answer.status_code == 200:
                    delays.append(time.monotonic() - at)
                    return
                await asyncio.sleep(POLL_EVERY_S)

        tasks: list[asyncio.Task[None]] = []
        started = time.monotonic()
        n = int(time.time() * 1000) << 20
        while time.monotonic() - started < seconds:
            tasks.append(asyncio.create_task(one(n + len(tasks))))
            await asyncio.sleep(PROBE_EVERY_S)
        await asyncio.gather(*tasks)
    return sorted(delays)


def checkpoint_size(port: int) -> int:
    text = httpx.get(f"http://127.0.0.1:{port}/v1/log/checkpoint", timeout=5).text
    return int(text.split("\n")[1]) if text.count("\n") > 2 else 0


def log_bytes(url: str) -> int:
    """Bytes (MEMORY USAGE) of every log key."""
    client = redis.Redis.from_url(url)
    total = 0
    for pattern in ("lq:*", "li:*", "lt:*", "le:*", "log:*"):
        for name in client.scan_iter(match=pattern, count=1000):
            total += int(client.memory_usage(name, samples=0) or 0)
    client.close()
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.log", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--backlog", type=int, default=20_000, help="entries for the integrator throughput")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-log-"))
    signing_keys = new_signing_keys()
    log_key = Signer.generate(ORIGIN).encode()
    workers = fly_workers()
    redis_kind = start_kind("tcp", tmp, None, True)
    services = ServiceSpec(signing_keys, orjson.dumps(RAISED_LIMITS).decode(), "json", True, tmp)
    procs: list[Proc] = []
    try:
        keys = [p["api_key"] for p in create_projects(redis_kind.url, "bench-log", 32)]
        on = services.start("log-on", redis_kind, workers, {"LOG_SIGNING_KEY": log_key, "LOG_ORIGIN": ORIGIN})
        off = services.start("log-off", redis_kind, workers)
        worker = start_worker(tmp, redis_kind.url, signing_keys, log_key, "worker")
        procs.append(worker)
        setup = Setup(tmp, "wrk" if _has_wrk() else "python", 32, 2, None, None)
        items = tmp / "items.txt"
        items.write_text("\n".join(keys) + "\n")
        for name in ("on", "off"):
            setup.own_items[(name, "create32")] = (items, keys)
        setup.items["create32"], setup.item_lists["create32"] = items, keys
        targets = [Target("on", on), Target("off", off)]
        runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for target in targets:
            run_load(setup, target, "create32", 2)
        for number in range(args.rounds):
            for target in targets if number % 2 == 0 else list(reversed(targets)):
                result = run_load(setup, target, "create32", args.seconds)
                runs[target.name].append(result)
                log(
                    f"round {number + 1} log {target.name}: {result['rps']:.0f} creates/s p99 {result['p99_ms']:.1f} ms"
                )
        capacity = {name: statistics.median(r["rps"] for r in rs) for name, rs in runs.items()}
        ratios = [a["rps"] / b["rps"] for a, b in zip(runs["on"], runs["off"], strict=True)]
        # 2. 201 -> checkpoint at a steady half-capacity background load.
        rate = capacity["on"] / 2
        results: dict[str, Any] = {}

        def load() -> None:
            results["open"] = open_loop(on, keys, rate, args.seconds + 2, tmp, "log-steady")

        thread = threading.Thread(target=load)
        thread.start()
        time.sleep(1.0)
        delays = asyncio.run(probe(on, keys[0], args.seconds))
        thread.join()
        log(f"201 -> checkpoint at {rate:.0f}/s: p50 {_pct(delays, 0.5):.3f} s p99 {_pct(delays, 0.99):.3f} s")
        # 3. the integrator's throughput on a backlog.
        worker.stop()
        size_before = _wait_stable(on)
        backlog = open_loop(on, keys, min(rate * 2, 3000), args.backlog / min(rate * 2, 3000), tmp, "log-backlog")
        queued = backlog["requests"]
        restart = time.monotonic()
        worker = start_worker(tmp, redis_kind.url, signing_keys, log_key, "worker-2")
        procs.append(worker)
        target_size = size_before + queued
        while checkpoint_size(on) < target_size and time.monotonic() - restart < 120:
            time.sleep(0.02)
        took = time.monotonic() - restart
        published = checkpoint_size(on)
        log(f"integrator: {queued} entries in {took:.2f} s (worker start included)")
        # 4. bytes per receipt.
        total = log_bytes(redis_kind.url)
        report = {
            "capacity_on": capacity["on"],
            "capacity_off": capacity["off"],
            "ratio_rounds": ratios,
            "ratio": statistics.median(ratios),
            "steady_rate": rate,
            "steady_open_p99_ms": results["open"]["p99_ms"],
            "delay_p50_s": _pct(delays, 0.5),
            "delay_p99_s": _pct(delays, 0.99),
            "delay_max_s": delays[-1] if delays else None,
            "probes": len(delays),
            "backlog_entries": queued,
            "backlog_seconds": took,
            "integrator_entries_per_s": queued / took if took else None,
            "log_bytes": total,
            "entries": published,
            "bytes_per_entry": total / published if published else None,
            "workers": workers,
        }
        print(render(report))
        print("BENCHJSON " + orjson.dumps(report).decode())
        return 0
    finally:
        for proc in procs:
            proc.stop()
        services.stop()
        redis_kind.stop()


def _wait_stable(port: int) -> int:
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 1.5:
        size = checkpoint_size(port)
        if size != last:
            last, since = size, time.monotonic()
        time.sleep(0.1)
    return last


def _has_wrk() -> bool:
    import shutil

    return shutil.which("wrk") is not None


def _pct(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(fraction * len(values)))]


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            "## The transparency log (`python -m bench.log`)",
            "",
            f"Plain-TCP Redis, AOF always; services with {r['workers']} web workers, with and without the log "
            "(the log-on one with `service.py worker` integrating), closed loop, 32 connections, 32 projects.",
            "",
            "| figure | measured | target |",
            "|---|---:|---|",
            f"| creates/s, log on | {r['capacity_on']:,.0f} | |",
            f"| creates/s, log off | {r['capacity_off']:,.0f} | |",
            f"| log on ÷ log off (median of rounds {', '.join(f'{x:.2f}' for x in r['ratio_rounds'])}) "
            f"| {r['ratio']:.2f} | ≥ 0.9 |",
            f"| 201 → published checkpoint, p50 (at {r['steady_rate']:,.0f} creates/s, {r['probes']} probes) "
            f"| {r['delay_p50_s']:.2f} s | |",
            f"| 201 → published checkpoint, p99 | {r['delay_p99_s']:.2f} s | aim ≤ 2 s |",
            f"| integrator throughput ({r['backlog_entries']:,} queued entries, worker start included) "
            f"| {r['integrator_entries_per_s']:,.0f} entries/s | aim ≥ 10 times creates/s |",
            f"| log bytes per receipt in Redis ({r['entries']:,} entries, MEMORY USAGE of every log key) "
            f"| {r['bytes_per_entry']:,.0f} | |",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
