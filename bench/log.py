"""The transparency log's figures: ``python -m bench.log`` (about 3 minutes, half a minute of it with
witnesses; ``--quick``: under 1).

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
4. the log's bytes per receipt in Redis (MEMORY USAGE of every log key ÷ entries);
5. with witnesses: two local ``service.py witness serve`` processes named by a
   ``LOG_WITNESS_POLICY`` (quorum: both), a new worker with the policy, and the same steady
   load as (2) for ``--witness-seconds``:

   - cosigned checkpoints per minute: distinct checkpoint sizes carrying both witnesses'
     valid cosignatures, seen by polling ``GET /v1/log/checkpoint`` every 20 ms (beside the
     worker's ``eps_log_checkpoints_total`` over the window, to show none were missed);
   - time from a probe's 201 to a ``log-proof`` whose checkpoint covers it and carries both
     valid cosignatures (p50, p99, max), and to the first proof at all;
   - one witness request's latency, p50 and p99 of ``eps_log_witness_request_seconds`` over
     the window, from the worker's metrics listener (interpolated within its buckets).

   Witnesses on loopback, on the same machine: their figures are a floor for real ones.

Prints a markdown section (append it to bench/RESULTS.md) and a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from bench import prom
from bench.procs import REPO, HarnessError, Proc, base_env, free_port, log, wait_http
from bench.production import ServiceSpec, fly_workers, open_loop
from bench.redis_kinds import start_kind
from bench.run import RAISED_LIMITS, Setup, Target, create_projects, new_signing_keys, run_load
from receipts import cosignature, note
from receipts.note import Signer

ORIGIN = "bench.example/log"
PROBE_EVERY_S = 0.05
POLL_EVERY_S = 0.01
PROBE_TIMEOUT_S = 20.0
CHECKPOINT_POLL_S = 0.02
WITNESSES = ("w1", "w2")
WITNESS_HISTOGRAM = "eps_log_witness_request_seconds"


def start_worker(
    tmp: Path, redis_url: str, signing_keys: str, log_key: str, name: str, extra: dict[str, str] | None = None
) -> Proc:
    env = base_env()
    env.update({"REDIS_URL": redis_url, "SIGNING_KEYS": signing_keys, "LOG_SIGNING_KEY": log_key,
                "LOG_ORIGIN": ORIGIN, "LOG_FORMAT": "json", **(extra or {})})  # fmt: skip
    return Proc.start(name, [sys.executable, "service.py", "worker"], env=env, log_path=tmp / f"{name}.log")


class Cosigned:
    """Whether a signed checkpoint is the log's and carries a valid cosignature of every
    witness (memoized by text: polls see the same checkpoint many times)."""

    def __init__(self, log_key: note.Verifier, witness_keys: list[cosignature.CosignerKey]) -> None:
        self.log_key = log_key
        self.witness_keys = witness_keys
        self.seen: dict[str, int | None] = {}

    def size(self, signed: str) -> int | None:
        """The checkpoint's size when it is fully cosigned, else None."""
        if signed not in self.seen:
            try:
                checkpoint, parsed = note.open_checkpoint(signed, self.log_key)
            except note.NoteError:
                self.seen[signed] = None
            else:
                valid = cosignature.cosignatures(parsed, self.witness_keys)
                self.seen[signed] = checkpoint.size if len(valid) == len(self.witness_keys) else None
        return self.seen[signed]


async def probe(
    port: int, key: str, seconds: float, cosigned: Cosigned | None = None
) -> tuple[list[float], list[float], int]:
    """Seconds from each probe receipt's 201 to its proof being served; with ``cosigned``,
    also to a proof whose checkpoint covers it and carries every witness's cosignature.
    Both sorted, and the number of probes that did not get there within PROBE_TIMEOUT_S."""
    delays: list[float] = []
    cosigned_delays: list[float] = []
    missed = 0
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

        async def one(n: int) -> None:
            nonlocal missed
            body = {"input_hash": "sha256:" + f"{n:064x}"[-64:], "output_hash": "sha256:" + f"{n + 7:064x}"[-64:]}
            created = await client.post("/v1/receipts", headers=headers, content=orjson.dumps(body))
            at = time.monotonic()
            receipt_id = created.json()["receipt"]["receipt_id"]
            served = False
            while time.monotonic() - at < PROBE_TIMEOUT_S:
                answer = await client.get(f"/v1/receipts/{receipt_id}/log-proof")
                if answer.status_code == 200:
                    if not served:
                        served = True
                        delays.append(time.monotonic() - at)
                    if cosigned is None:
                        return
                    proof = note.parse_tlog_proof(answer.text)  # against the latest checkpoint
                    size = cosigned.size(proof.checkpoint)
                    if size is not None and proof.index < size:
                        cosigned_delays.append(time.monotonic() - at)
                        return
                await asyncio.sleep(POLL_EVERY_S)
            missed += 1

        tasks: list[asyncio.Task[None]] = []
        started = time.monotonic()
        n = int(time.time() * 1000) << 20
        while time.monotonic() - started < seconds:
            tasks.append(asyncio.create_task(one(n + len(tasks))))
            await asyncio.sleep(PROBE_EVERY_S)
        await asyncio.gather(*tasks)
    return sorted(delays), sorted(cosigned_delays), missed


async def poll_cosigned(port: int, cosigned: Cosigned, seconds: float) -> set[int]:
    """The sizes of the fully cosigned checkpoints published while polling for ``seconds``
    (not the one already published when it starts)."""
    sizes: set[int] = set()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        first = await client.get("/v1/log/checkpoint")
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            answer = await client.get("/v1/log/checkpoint")
            fresh = answer.status_code == 200 and answer.text != first.text
            if fresh and (size := cosigned.size(answer.text)) is not None:
                sizes.add(size)
            await asyncio.sleep(CHECKPOINT_POLL_S)
    return sizes


def witness_key(tmp: Path, label: str) -> tuple[Path, cosignature.CosignerKey]:
    """A new witness key made as an operator makes one (its file, its verifier key)."""
    done = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "service.py", "witness", "key", "new", "--name", f"witness.bench.example/{label}"],
        cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise HarnessError(f"witness key new failed: {done.stderr}")
    private, public = done.stdout.splitlines()
    path = tmp / f"witness-{label}.key"
    path.write_text(private + "\n")
    return path, cosignature.CosignerKey.parse(public)


def start_witness(tmp: Path, label: str, key_file: Path, log_vkey: str) -> tuple[Proc, str]:
    """A ``witness serve`` on loopback with fresh state, answering; (process, base URL)."""
    port = free_port()
    cmd = [
        sys.executable, "service.py", "witness", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--key-file", str(key_file), "--state", str(tmp / f"witness-{label}.state"), "--log", f"{ORIGIN}={log_vkey}",
    ]  # fmt: skip
    proc = Proc.start(f"witness-{label}", cmd, env=base_env(), log_path=tmp / f"witness-{label}.log")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.post(base + "/add-checkpoint", content=b"", timeout=1)  # any answer: it listens
            return proc, base
        except httpx.HTTPError:
            if not proc.alive() or time.monotonic() > deadline:
                proc.stop()
                raise HarnessError(f"witness {label} did not start:\n{proc.tail()}") from None
            time.sleep(0.1)


def witnessed(
    tmp: Path, port: int, keys: list[str], rate: float, seconds: float, redis_url: str, signing_keys: str,
    signer: Signer, procs: list[Proc],
) -> dict[str, Any]:  # fmt: skip
    """Figure 5: two witnesses, a worker with the policy, the steady load, and the probes."""
    witness_keys = []
    lines = [f"log {signer.verifier.encode()}"]
    for label in WITNESSES:
        key_file, key = witness_key(tmp, label)
        proc, base = start_witness(tmp, label, key_file, signer.verifier.encode())
        procs.append(proc)
        witness_keys.append(key)
        lines.append(f"witness {label} {key.encode()} {base}")
    lines += [f"group every {len(WITNESSES)} {' '.join(WITNESSES)}", "quorum every"]
    policy = tmp / "policy.txt"
    policy.write_text("\n".join(lines) + "\n")
    metrics_port = free_port()
    extra = {"LOG_WITNESS_POLICY": str(policy), "METRICS_HOST": "127.0.0.1", "METRICS_PORT": str(metrics_port)}
    worker = start_worker(tmp, redis_url, signing_keys, signer.encode(), "worker-witnessed", extra)
    procs.append(worker)
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    wait_http(worker, metrics_url)
    cosigned = Cosigned(signer.verifier, witness_keys)
    # A first cosigned checkpoint (the witnesses' first, from size 0) before measuring.
    headers = {"Authorization": f"Bearer {keys[0]}", "Prefer": "wait=10"}
    httpx.post(f"http://127.0.0.1:{port}/v1/receipts", headers=headers, json={"input_hash": "sha256:" + "ab" * 32},
               timeout=20)  # fmt: skip
    deadline = time.monotonic() + 20
    while cosigned.size(httpx.get(f"http://127.0.0.1:{port}/v1/log/checkpoint", timeout=5).text) is None:
        if time.monotonic() > deadline or not worker.alive():
            raise HarnessError(f"no checkpoint cosigned by both witnesses within 20 s:\n{worker.tail()}")
        time.sleep(0.05)
    results: dict[str, Any] = {}

    def load() -> None:
        results["open"] = open_loop(port, keys, rate, seconds + 2, tmp, "log-witnessed")

    async def window() -> tuple[prom.Samples, set[int], prom.Samples]:
        before = await asyncio.to_thread(prom.scrape, metrics_url)
        sizes = await poll_cosigned(port, cosigned, seconds)
        after = await asyncio.to_thread(prom.scrape, metrics_url)
        return before, sizes, after

    async def measure() -> tuple[tuple[list[float], list[float], int], tuple[prom.Samples, set[int], prom.Samples]]:
        return await asyncio.gather(probe(port, keys[0], seconds, cosigned), window())

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(1.0)
    (served, delays, missed), (before, sizes, after) = asyncio.run(measure())
    thread.join()
    requests = prom.buckets(before, after, WITNESS_HISTOGRAM)
    count = requests[-1][1] if requests else 0.0
    spent = prom.total(after, WITNESS_HISTOGRAM + "_sum") - prom.total(before, WITNESS_HISTOGRAM + "_sum")
    failures = {
        f"{dict(pairs)['witness']}:{dict(pairs)['kind']}": value - before.get((name, pairs), 0.0)
        for (name, pairs), value in after.items()
        if name == "eps_log_witness_failures_total" and value > before.get((name, pairs), 0.0)
    }
    signed = prom.total(after, "eps_log_checkpoints_total") - prom.total(before, "eps_log_checkpoints_total")
    report = {
        "witness_rate": rate,
        "witness_open_p99_ms": results["open"]["p99_ms"],
        "witness_window_s": seconds,
        "cosigned_checkpoints": len(sizes),
        "cosigned_per_min": len(sizes) * 60 / seconds,
        "signed_checkpoints": signed,
        "cosignatures": {
            w: prom.total(after, "eps_log_witness_cosignatures_total", witness=w)
            - prom.total(before, "eps_log_witness_cosignatures_total", witness=w)
            for w in WITNESSES
        },
        "witness_failures": failures,
        "cosigned_delay_p50_s": _pct(delays, 0.5),
        "cosigned_delay_p99_s": _pct(delays, 0.99),
        "cosigned_delay_max_s": delays[-1] if delays else None,
        "cosigned_probes": len(delays),
        "cosigned_missed": missed,
        "witnessed_delay_p50_s": _pct(served, 0.5),
        "witnessed_delay_p99_s": _pct(served, 0.99),
        "witness_requests": count,
        "witness_request_p50_s": prom.quantile(requests, 0.5),
        "witness_request_p99_s": prom.quantile(requests, 0.99),
        "witness_request_mean_s": spent / count if count else None,
    }
    log(
        f"witnessed at {rate:.0f}/s: {len(sizes)} cosigned checkpoints in {seconds:.0f} s "
        f"(worker signed {signed:.0f}); "
        f"201 -> cosigned p50 {_pct(delays, 0.5):.3f} s p99 {_pct(delays, 0.99):.3f} s ({missed} missed); "
        f"witness request p50 {report['witness_request_p50_s'] * 1000:.1f} ms "
        f"p99 {report['witness_request_p99_s'] * 1000:.1f} ms over {count:.0f}"
    )
    return report


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
    parser.add_argument("--witness-seconds", type=float, default=20.0, help="the window of the witness figures")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1 round of 3 s, a 3,000-entry backlog, 8 s with witnesses"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.backlog, args.witness_seconds = 1, 3.0, 3_000, 8.0
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-log-"))
    signing_keys = new_signing_keys()
    signer = Signer.generate(ORIGIN)
    log_key = signer.encode()
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
        delays, _, _ = asyncio.run(probe(on, keys[0], args.seconds))
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
        # 5. with witnesses: a new worker with the policy, the same steady load.
        worker.stop()
        witness_figures = witnessed(
            tmp, on, keys, rate, args.witness_seconds, redis_kind.url, signing_keys, signer, procs
        )
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
            **witness_figures,
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
            f"| 201 → published checkpoint, p99 (max {r['delay_max_s'] or math.nan:.2f} s) "
            f"| {r['delay_p99_s']:.2f} s | aim ≤ 2 s |",
            f"| integrator throughput ({r['backlog_entries']:,} queued entries, worker start included) "
            f"| {r['integrator_entries_per_s']:,.0f} entries/s | aim ≥ 10 times creates/s |",
            f"| log bytes per receipt in Redis ({r['entries']:,} entries, MEMORY USAGE of every log key) "
            f"| {r['bytes_per_entry']:,.0f} | |",
            *witness_rows(r),
            "",
        ]
    )


def witness_rows(r: dict[str, Any]) -> list[str]:
    cosigned = ", ".join(f"{w} {n:,.0f}" for w, n in r["cosignatures"].items())
    failures = ", ".join(f"{k} {n:,.0f}" for k, n in sorted(r["witness_failures"].items())) or "none"
    return [
        "",
        f"With witnesses: two `service.py witness serve` processes on loopback (same machine, fresh state), "
        f"a `LOG_WITNESS_POLICY` with quorum both, a worker with that policy (`LOG_WITNESS_TIMEOUT_MS` default), "
        f"the same steady load of {r['witness_rate']:,.0f} creates/s (open-loop p99 {r['witness_open_p99_ms']:.1f} ms) "
        f"for {r['witness_window_s']:.0f} s. Cosignatures in the window: {cosigned}; witness failures: {failures}.",
        "",
        "| figure | measured | target |",
        "|---|---:|---|",
        f"| checkpoints cosigned by both witnesses, per minute ({r['cosigned_checkpoints']:,} distinct sizes seen "
        f"polling the checkpoint every {CHECKPOINT_POLL_S * 1000:.0f} ms; the worker signed "
        f"{r['signed_checkpoints']:,.0f}) | {r['cosigned_per_min']:,.0f} | |",
        f"| 201 → checkpoint covering it with both cosignatures, p50 ({r['cosigned_probes']} probes, "
        f"{r['cosigned_missed']} not within {PROBE_TIMEOUT_S:.0f} s) | {r['cosigned_delay_p50_s']:.2f} s | |",
        f"| 201 → checkpoint covering it with both cosignatures, p99 "
        f"(max {r['cosigned_delay_max_s'] or math.nan:.2f} s) | {r['cosigned_delay_p99_s']:.2f} s | |",
        f"| 201 → published checkpoint with witnesses, p50 / p99 "
        f"| {r['witnessed_delay_p50_s']:.2f} s / {r['witnessed_delay_p99_s']:.2f} s | |",
        f"| one witness request (POST /add-checkpoint as the worker sees it, {r['witness_requests']:,.0f} requests; "
        f"`eps_log_witness_request_seconds` buckets, interpolated; mean {_ms(r['witness_request_mean_s'])}), "
        f"p50 / p99 | {_ms(r['witness_request_p50_s'])} / {_ms(r['witness_request_p99_s'])} | |",
    ]


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


if __name__ == "__main__":
    sys.exit(main())
