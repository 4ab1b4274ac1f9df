"""The transparency log's figures: ``python -m bench.log`` (about 9 minutes, 4 of them loading
and integrating a million entries; ``--quick``: about 1). The log lives in a ``file://`` log
store (``LOG_STORE``) in the run's temporary directory; Redis holds only what is in flight.

Phases (``--only`` runs some of them, in this order):

``load`` On one plain-TCP Redis with ``appendfsync always`` (production's setting), a service
   with the log (``LOG_SIGNING_KEY``, ``LOG_STORE``, plus ``service.py worker`` running the
   integrator) and one without, both with fly.toml's web worker count:

   1. creates/s with the log on and off, closed loop (wrk if installed), 32 connections, 32
      projects, the two alternating round by round (the order reversed every other round),
      each run right after an unrecorded 3-s warm-up of the same service; the ratio is the
      median of the rounds' ratios. Beside it, each run's CPU time per create of the service's
      processes, the worker's and Redis's (from /proc: steadier than creates/s on a machine
      shared with other work), and the most entries waiting for the log during the run;
   2. time from a 201 to a published checkpoint covering it, at a steady background load of
      half the log-on capacity: a probe creates a receipt every 50 ms and polls its
      ``log-proof`` every 10 ms (p50, p99, max).

``witness`` On the same services: two local ``service.py witness serve`` processes named by a
   ``LOG_WITNESS_POLICY`` (quorum: both), a new worker with the policy, and the same steady
   load for ``--witness-seconds``:

   - cosigned checkpoints per minute: distinct checkpoint sizes carrying both witnesses'
     valid cosignatures, seen by polling ``GET /v1/log/checkpoint`` every 20 ms (beside the
     worker's ``eps_log_checkpoints_total`` over the window, to show none were missed);
   - time from a probe's 201 to a ``log-proof`` whose checkpoint covers it and carries both
     valid cosignatures (p50, p99, max), and to the first proof at all;
   - one witness request's latency, p50 and p99 of ``eps_log_witness_request_seconds`` over
     the window, from the worker's metrics listener (interpolated within its buckets).

   Witnesses on loopback, on the same machine: their figures are a floor for real ones.

``memory`` Redis's bytes per receipt with the log on and off: for each, a fresh Redis (same
   settings), 32 projects, ``--memory-receipts`` receipts written through the service's issue
   path (bench/preload.py: the issuer's records, index fields and, with the log, its queued
   entries, with the same request hashes in both), then a worker started (with the log: until
   every entry is integrated and its queue is empty, each receipt's index recorded in its
   hash-index field) and stopped. Measured before and after, both ways: the sum of ``MEMORY
   USAGE`` (``SAMPLES 0``) over every key but RQ's own, and ``INFO memory`` ``used_memory``.

``integrate`` An integration run of ``--receipts`` receipts into a fresh ``file://`` store: that
   many receipts loaded as above into a fresh Redis with their log entries queued (each its
   entry and its attestation's leaf, one queue item: twice as many log entries; a backlog
   no service would accept past ``LOG_MAX_PENDING``: the integrator's busiest case), then one
   ``service.py worker`` until the published checkpoint reaches them all. The worker's RSS
   (``/proc/PID/status``) is sampled as the checkpoint passes every tenth of the run, with
   entries/s; then the store's bytes per entry (``du``, apparent and on disk), and the whole
   tree checked in one pass (``receipts.tiles.check_tree``: every entry hashes to its leaf,
   every tile to its place, the edge to the checkpoint's root), every queue empty, the log's
   size told to Redis at the tree's, and one entry in 1,000 found at its index in its receipt's hash-index
   field.

Prints a markdown section (bench/RESULTS.md holds it, with notes) and a JSON line. Loopback
only; every phase is bounded in time and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import secrets
import shutil
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
from bench.harness import (
    RAISED_LIMITS,
    Setup,
    Target,
    cpu_busy_share,
    create_projects,
    loadavg,
    machine_info,
    new_receipt_root,
    run_load,
)
from bench.preload import preload
from bench.procs import REPO, HarnessError, Proc, base_env, free_port, log, wait_http
from bench.production import ServiceSpec, fly_workers, open_loop
from bench.redis_kinds import RedisKind, start_kind
from execution_proof.kv import keys
from execution_proof.kv.keys import LogIdentity
from execution_proof.transparency import cosignature, note, tlog
from execution_proof.transparency.note import Signer

ORIGIN = "bench.example/log"
SIGNER = Signer.generate(ORIGIN)
"""The log's key for this run: Redis's log records carry its identity (origin and key)."""
IDENTITY = LogIdentity(ORIGIN, SIGNER.verifier.encode())
PROBE_EVERY_S = 0.05
POLL_EVERY_S = 0.01
PROBE_TIMEOUT_S = 20.0
CHECKPOINT_POLL_S = 0.02
WITNESSES = ("w1", "w2")
WITNESS_HISTOGRAM = "eps_log_witness_request_seconds"
PROJECTS = 32
WARMUP_S = 3.0
PHASES = ("load", "witness", "memory", "integrate")
RSS_EVERY_S = 0.1
INTEGRATE_TIMEOUT_S = 900.0
"""The integration run gives up (a harness failure) after this long: it stops by itself."""
DRAIN_TIMEOUT_S = 300.0
INDEX_SAMPLE = 1000
"""One receipt entry in about this many entries is looked up in Redis after the integration run."""
RECEIPT_ENTRY = tlog.ENTRY_HEADER.encode() + b"\n"


def store_url(path: Path) -> str:
    return f"file://{path}"


def start_worker(
    tmp: Path,
    redis_url: str,
    receipt_root: str,
    name: str,
    log_key: str | None,
    log_store: Path | None,
    extra: dict[str, str] | None = None,
) -> Proc:
    """``service.py worker``; with ``log_key`` (and its store) the integrator runs in it."""
    env = base_env()
    env.update({"REDIS_URL": redis_url, "RECEIPT_ROOT_KEY": receipt_root, "LOG_FORMAT": "json", **(extra or {})})
    if log_key is not None:
        assert log_store is not None
        env.update({"LOG_SIGNING_KEY": log_key, "LOG_ORIGIN": ORIGIN, "LOG_STORE": store_url(log_store)})
    return Proc.start(name, [sys.executable, "service.py", "worker"], env=env, log_path=tmp / f"{name}.log")


def start_metered_worker(
    tmp: Path, redis_url: str, receipt_root: str, name: str, log_key: str | None, log_store: Path | None,
    extra: dict[str, str] | None = None,
) -> tuple[Proc, str]:  # fmt: skip
    """A worker with its metrics listener, answering: (process, metrics URL)."""
    port = free_port()
    extra = {**(extra or {}), "METRICS_HOST": "127.0.0.1", "METRICS_PORT": str(port)}
    worker = start_worker(tmp, redis_url, receipt_root, name, log_key, log_store, extra)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_http(worker, url)
    except HarnessError:
        worker.stop()
        raise
    return worker, url


# --------------------------------------------------------------------------- probes


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


# --------------------------------------------------------------------------- load and latency


class Backlog:
    """Samples, every half second, the entries waiting for the log and the published size:
    whether the integrator keeps up with the creates (a round whose backlog grows measures
    creates/s with the integrator's work deferred, not done)."""

    def __init__(self, redis_url: str, store: Path) -> None:
        self.redis_url, self.store = redis_url, store
        self.samples: list[tuple[float, int, int]] = []  # (monotonic, pending, published size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Backlog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        # One GET a sample (log_state's SCAN of the whole keyspace would load the Redis measured).
        with redis.Redis.from_url(self.redis_url) as client:
            while not self._stop.is_set():
                with contextlib.suppress(redis.RedisError, OSError, note.NoteError):
                    pending = int(client.get(keys.log_pending_key(IDENTITY)) or 0)
                    self.samples.append((time.monotonic(), pending, store_size(self.store)))
                self._stop.wait(0.5)

    def during(self, start: float, end: float) -> tuple[int, int]:
        """(the most entries waiting, entries waiting at the last sample) between two times."""
        inside = [pending for at, pending, _ in self.samples if start <= at <= end] or [0]
        return max(inside), inside[-1]


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a process group (a
    service and its web workers, or a worker and its children)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[2]) == pgid:  # fields from the state on: state, ppid, pgrp, ...
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def load_phase(
    tmp: Path, ports: dict[str, int], groups: dict[str, int], keys: list[str], rounds: int, seconds: float,
    backlog: Backlog,
) -> tuple[dict[str, Any], float]:  # fmt: skip
    """Figures 1 and 2: the alternating closed-loop rounds, then the probes at half the log-on
    capacity. Returns the report's part and that rate. ``groups``: the process groups whose
    CPU time each run reports ("on", "off": the services; "worker": the integrator's)."""
    port_on = ports["on"]
    setup = Setup(tmp, "wrk" if _has_wrk() else "python", 32, 2, None, None)
    items = tmp / "items.txt"
    items.write_text("\n".join(keys) + "\n")
    for name in ("on", "off"):
        setup.own_items[(name, "create32")] = (items, keys)
    setup.items["create32"], setup.item_lists["create32"] = items, keys
    targets = [Target("on", ports["on"]), Target("off", ports["off"])]
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for number in range(rounds):
        for target in targets if number % 2 == 0 else list(reversed(targets)):
            # Unrecorded, right before each run: the first seconds on a service that sat idle
            # while the other was loaded are slower (runs measured cold were 20-35% below the
            # same service's next run, which skewed every other round's ratio).
            run_load(setup, target, "create32", WARMUP_S)
            started = time.monotonic()
            cpu = {name: group_cpu_s(pgid) for name, pgid in groups.items()}
            result = run_load(setup, target, "create32", seconds)
            creates = max(1, result["requests"])
            result["cpu_ms"] = {name: (group_cpu_s(pgid) - cpu[name]) * 1000 / creates for name, pgid in groups.items()}
            result["backlog"] = backlog.during(started, time.monotonic())
            runs[target.name].append(result)
            log(
                f"round {number + 1} log {target.name}: {result['rps']:.0f} creates/s p99 {result['p99_ms']:.1f} ms; "
                f"entries waiting for the log: at most {result['backlog'][0]}, {result['backlog'][1]} at the end; "
                f"CPU ms per create: service {result['cpu_ms'][target.name]:.3f}, "
                f"worker {result['cpu_ms']['worker']:.3f}, Redis {result['cpu_ms']['redis']:.3f}"
            )
    capacity = {name: statistics.median(r["rps"] for r in rs) for name, rs in runs.items()}
    ratios = [a["rps"] / b["rps"] for a, b in zip(runs["on"], runs["off"], strict=True)]
    rate = capacity["on"] / 2
    results: dict[str, Any] = {}

    def load() -> None:
        results["open"] = open_loop(port_on, keys, rate, seconds + 2, tmp, "log-steady")

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(1.0)
    started = time.monotonic()
    delays, _, missed = asyncio.run(probe(port_on, keys[0], seconds))
    steady_backlog = backlog.during(started, time.monotonic())
    thread.join()
    log(
        f"201 -> checkpoint at {rate:.0f}/s: p50 {_pct(delays, 0.5):.3f} s p99 {_pct(delays, 0.99):.3f} s; "
        f"entries waiting for the log: at most {steady_backlog[0]}"
    )
    return {
        "generator": setup.generator,
        "capacity_on": capacity["on"],
        "capacity_off": capacity["off"],
        "rounds_on": [r["rps"] for r in runs["on"]],
        "rounds_off": [r["rps"] for r in runs["off"]],
        "p99_on_ms": [r["p99_ms"] for r in runs["on"]],
        "p99_off_ms": [r["p99_ms"] for r in runs["off"]],
        "ratio_rounds": ratios,
        "backlog_on": [r["backlog"] for r in runs["on"]],
        "cpu_ms_on": statistics.median(r["cpu_ms"]["on"] for r in runs["on"]),
        "cpu_ms_off": statistics.median(r["cpu_ms"]["off"] for r in runs["off"]),
        "cpu_ms_worker": statistics.median(r["cpu_ms"]["worker"] for r in runs["on"]),
        "cpu_ms_redis_on": statistics.median(r["cpu_ms"]["redis"] for r in runs["on"]),
        "cpu_ms_redis_off": statistics.median(r["cpu_ms"]["redis"] for r in runs["off"]),
        "ratio": statistics.median(ratios),
        "round_seconds": seconds,
        "steady_rate": rate,
        "steady_open_p99_ms": results["open"]["p99_ms"],
        "delay_p50_s": _pct(delays, 0.5),
        "delay_p99_s": _pct(delays, 0.99),
        "delay_max_s": delays[-1] if delays else None,
        "probes": len(delays),
        "probes_missed": missed,
        "steady_backlog_max": steady_backlog[0],
    }, rate


# --------------------------------------------------------------------------- witnesses


def witness_key(tmp: Path, label: str) -> tuple[Path, cosignature.CosignerKey]:
    """A new witness key made as an operator makes one, in a new file of mode 0600 (a key file
    others may read is refused): (its file, its verifier key)."""
    path = tmp.resolve() / f"witness-{label}.key"
    done = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "service.py", "witness", "key", "new", "--name", f"witness.bench.example/{label}",
         "--signer", f"file:{path}"],
        cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise HarnessError(f"witness key new failed: {done.stderr}")
    _, public = done.stdout.splitlines()
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
    tmp: Path, port: int, keys: list[str], rate: float, seconds: float, redis_url: str, receipt_root: str,
    signer: Signer, log_store: Path, procs: list[Proc],
) -> dict[str, Any]:  # fmt: skip
    """The witness figures: two witnesses, a worker with the policy, the steady load, the probes."""
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
    worker, metrics_url = start_metered_worker(
        tmp, redis_url, receipt_root, "worker-witnessed", signer.encode(), log_store,
        {"LOG_WITNESS_POLICY": str(policy)},
    )  # fmt: skip
    procs.append(worker)
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


# --------------------------------------------------------------------------- Redis's bytes


def redis_memory(url: str) -> dict[str, Any]:
    """``used_memory``, and ``MEMORY USAGE ... SAMPLES 0`` summed over every key by its name's
    first part (``r``, ``b``, ``log``...), RQ's own keys (``rq``) apart: the worker writes
    them whether or not the log is on, and their size depends on its job history."""
    by_kind: dict[str, int] = {}
    counts: dict[str, int] = {}
    with redis.Redis.from_url(url) as client:
        names = list(client.scan_iter(count=1000))
        for start in range(0, len(names), 1000):
            chunk = names[start : start + 1000]
            pipe = client.pipeline(transaction=False)
            for name in chunk:
                pipe.memory_usage(name, samples=0)
            for name, size in zip(chunk, pipe.execute(), strict=True):
                kind = name.split(b":", 1)[0].decode(errors="replace")
                by_kind[kind] = by_kind.get(kind, 0) + int(size or 0)
                counts[kind] = counts.get(kind, 0) + 1
        used = int(client.info("memory")["used_memory"])
    keys_bytes = sum(size for kind, size in by_kind.items() if kind != "rq")
    return {"used_memory": used, "key_bytes": keys_bytes, "by_kind": by_kind, "counts": counts}


def log_state(url: str) -> dict[str, int]:
    """What the log has in flight in a Redis: entries counted pending, entries in queues,
    queues, the log's size as told to Redis (-1: none), projects in the dirty set."""
    with redis.Redis.from_url(url) as client:
        tag = IDENTITY.tag_hex
        queues = list(client.scan_iter(match=f"lq:*:{tag}:*", count=1000))
        queued = sum(int(client.llen(name)) for name in queues)
        synced = client.get(keys.log_size_key(IDENTITY))
        return {
            "pending": int(client.get(keys.log_pending_key(IDENTITY)) or 0),
            "queued": queued,
            "queues": len(queues),
            "synced": -1 if synced is None else int(synced),
            "dirty": int(client.scard(keys.log_dirty_key(IDENTITY))),
        }


def store_size(path: Path) -> int:
    """The size of the tree the store's published checkpoint names (0 before the first)."""
    try:
        text = (path / "checkpoint").read_text()
    except FileNotFoundError:
        return 0
    return note.parse_checkpoint(note.parse_note(text).text).size


def create_log(redis_url: str, store: Path, signer: Signer) -> None:
    """Create the log store as the server does at its start (``prepare_log``), before any
    entry is queued: a worker refuses an empty store beside a Redis holding the log's entries."""
    from execution_proof.jobs.log_config import prepare_log
    from execution_proof.kv.connect import open_store
    from execution_proof.kv.logstore import open_log_store

    async def run() -> None:
        kv, log_store = open_store(redis_url), open_log_store(store_url(store))
        try:
            await prepare_log(kv.log_queue, log_store, ORIGIN, signer)
        finally:
            await kv.close()
            await log_store.close()

    asyncio.run(run())


def wait_integrated(worker: Proc, store: Path, redis_url: str, size: int, timeout: float) -> None:
    """Until the store's checkpoint has ``size`` entries and Redis has none in flight."""
    deadline = time.monotonic() + timeout
    while True:
        if store_size(store) >= size:
            state = log_state(redis_url)
            if state["pending"] == 0 and state["queued"] == 0 and state["synced"] >= size:
                return
        if not worker.alive():
            raise HarnessError(f"{worker.name} exited while integrating:\n{worker.tail()}")
        if time.monotonic() > deadline:
            raise HarnessError(f"{worker.name}: {size} entries not integrated within {timeout:.0f} s: "
                               f"{store_size(store)} published, {log_state(redis_url)}")  # fmt: skip
        time.sleep(0.2)


def memory_phase(tmp: Path, receipt_root: str, signer: Signer, count: int) -> dict[str, Any]:
    """Redis's bytes per receipt after ``count`` receipts, created and (log on) integrated."""
    nonce = secrets.token_hex(8)
    modes: dict[str, Any] = {}
    for mode in ("off", "on"):
        directory = tmp / f"memory-{mode}"
        directory.mkdir()
        redis_kind = start_kind("tcp", directory, None, True)
        worker: Proc | None = None
        try:
            projects = create_projects(redis_kind.url, "bench-memory", PROJECTS)
            log_key, store = (signer.encode(), directory / "store") if mode == "on" else (None, None)
            if store is not None:
                create_log(redis_kind.url, store, signer)
            before = redis_memory(redis_kind.url)
            identity = IDENTITY if mode == "on" else None
            _, seconds = preload(redis_kind.url, receipt_root, projects, count, nonce=nonce, log_identity=identity)
            loaded = redis_memory(redis_kind.url)
            started = time.monotonic()
            worker, _ = start_metered_worker(directory, redis_kind.url, receipt_root, f"worker-memory-{mode}",
                                             log_key, store)  # fmt: skip
            if store is not None:
                wait_integrated(worker, store, redis_kind.url, count, DRAIN_TIMEOUT_S)
            integrated = time.monotonic() - started
            worker.stop()
            worker = None
            time.sleep(1.0)  # the worker's connections closed, their buffers freed
            after = redis_memory(redis_kind.url)
            state = log_state(redis_kind.url)
        finally:
            if worker is not None:
                worker.stop()
            redis_kind.stop()
        modes[mode] = {
            "before": before,
            "loaded": loaded,
            "after": after,
            "log_state": state,
            "load_seconds": seconds,
            "integrate_seconds": integrated,
            "key_bytes_per_receipt": (after["key_bytes"] - before["key_bytes"]) / count,
            "used_bytes_per_receipt": (after["used_memory"] - before["used_memory"]) / count,
            "queued_key_bytes_per_receipt": (loaded["key_bytes"] - before["key_bytes"]) / count,
        }
        log(
            f"memory, log {mode}: {count} receipts, {modes[mode]['key_bytes_per_receipt']:.1f} bytes per receipt "
            f"(MEMORY USAGE), {modes[mode]['used_bytes_per_receipt']:.1f} (used_memory); in flight {state}"
        )
    kinds = sorted(set(modes["on"]["after"]["by_kind"]) | set(modes["off"]["after"]["by_kind"]))
    by_kind = {
        kind: (
            modes["on"]["after"]["by_kind"].get(kind, 0) - modes["on"]["before"]["by_kind"].get(kind, 0)
            - modes["off"]["after"]["by_kind"].get(kind, 0) + modes["off"]["before"]["by_kind"].get(kind, 0)
        ) / count
        for kind in kinds
        if kind != "rq"
    }  # fmt: skip
    return {
        "memory_receipts": count,
        "memory_modes": modes,
        "memory_key_on": modes["on"]["key_bytes_per_receipt"],
        "memory_key_off": modes["off"]["key_bytes_per_receipt"],
        "memory_key_diff": modes["on"]["key_bytes_per_receipt"] - modes["off"]["key_bytes_per_receipt"],
        "memory_used_on": modes["on"]["used_bytes_per_receipt"],
        "memory_used_off": modes["off"]["used_bytes_per_receipt"],
        "memory_used_diff": modes["on"]["used_bytes_per_receipt"] - modes["off"]["used_bytes_per_receipt"],
        "memory_queued_diff": modes["on"]["queued_key_bytes_per_receipt"]
        - modes["off"]["queued_key_bytes_per_receipt"],
        "memory_diff_by_kind": by_kind,
    }


# --------------------------------------------------------------------------- the integration run


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def du_bytes(path: Path, apparent: bool) -> int:
    """``du -s`` of a directory in bytes: its apparent size (the files' lengths), or the disk
    blocks it takes."""
    cmd = ["du", "-s", "-B1", *(["--apparent-size"] if apparent else []), str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)  # noqa: S603
    return int(done.stdout.split()[0])


async def check_store(store: Path, redis_url: str, signer: Signer) -> dict[str, Any]:
    """The whole tree checked in one pass against the published checkpoint (signature
    included); one entry in ``INDEX_SAMPLE`` looked up at its index in Redis."""
    from execution_proof.kv.connect import open_store
    from execution_proof.kv.logstore import open_log_store
    from execution_proof.transparency.tiles import TileReader, check_tree

    log_store = open_log_store(store_url(store))
    kv = open_store(redis_url)
    try:
        raw = await log_store.checkpoint()
        assert raw is not None
        checkpoint, _ = note.open_checkpoint(raw.decode(), signer.verifier)
        sampled: list[tuple[int, bytes]] = []
        entries = 0

        def seen(first: int, bundle: list[bytes]) -> None:
            # A receipt's entry each INDEX_SAMPLE entries (the first of two places: one of them
            # is a receipt's, the other its dsse leaf, or a key certificate).
            nonlocal entries
            entries += len(bundle)
            sampled.extend(
                (first + n, entry)
                for n, entry in enumerate(bundle)
                if (first + n) % INDEX_SAMPLE in (0, 1) and entry.startswith(RECEIPT_ENTRY)
            )

        started = time.monotonic()
        await check_tree(TileReader(log_store.fetch), checkpoint.size, checkpoint.root, seen)
        took = time.monotonic() - started
        wrong = 0
        for index, entry in sampled:
            fields = tlog.LogEntry.parse(entry)
            found = await kv.log_queue.log_index(IDENTITY, fields.project_id, fields.receipt_id, fields.receipt_hash)
            wrong += found != index
        return {
            "checked_size": checkpoint.size,
            "checked_entries": entries,
            "check_seconds": took,
            "indices_sampled": len(sampled),
            "indices_wrong": wrong,
        }
    finally:
        await kv.close()
        await log_store.close()


def integrate_phase(tmp: Path, receipt_root: str, signer: Signer, receipts: int) -> dict[str, Any]:
    """The integration run: ``receipts`` queued (each its entry and its attestation's leaf: two
    log entries, one queue item), one worker until they are all published."""
    entries = 2 * receipts
    directory = tmp / "integrate"
    directory.mkdir()
    store = directory / "store"
    redis_kind = start_kind("tcp", directory, None, True)
    worker: Proc | None = None
    try:
        projects = create_projects(redis_kind.url, "bench-integrate", PROJECTS)
        create_log(redis_kind.url, store, signer)
        log(f"integration run: loading {receipts:,} receipts with their {entries:,} log entries")
        _, load_seconds = preload(
            redis_kind.url, receipt_root, projects, receipts, nonce=secrets.token_hex(8), log_identity=IDENTITY
        )
        queued = log_state(redis_kind.url)
        log(f"loaded in {load_seconds:.0f} s ({receipts / load_seconds:,.0f} receipts/s): {queued}")
        marks = [entries * n // 10 for n in range(1, 11)]
        samples: list[tuple[float, int, int]] = []  # (seconds since start, size, RSS KiB)
        at_marks: list[tuple[int, float, int]] = []
        started = time.monotonic()
        worker, metrics_url = start_metered_worker(directory, redis_kind.url, receipt_root, "worker-integrate",
                                                   signer.encode(), store)  # fmt: skip
        answered = time.monotonic() - started
        pid = worker.process.pid
        hwm = 0
        while True:
            size = store_size(store)
            rss, hwm = rss_kib(pid)
            now = time.monotonic() - started
            samples.append((now, size, rss))
            while marks and size >= marks[0]:
                at_marks.append((marks.pop(0), now, rss))
            if not marks:
                break
            if not worker.alive():
                raise HarnessError(f"the worker exited during the integration run:\n{worker.tail()}")
            if now > INTEGRATE_TIMEOUT_S:
                raise HarnessError(f"integration run: {size:,} of {entries:,} entries in {now:.0f} s; gave up")
            time.sleep(RSS_EVERY_S)
        took = time.monotonic() - started
        first_at = next((t for t, s, _ in samples if s > 0), 0.0)
        metrics = prom.scrape(metrics_url)
        wait_integrated(worker, store, redis_kind.url, entries, DRAIN_TIMEOUT_S)
        worker.stop()
        worker = None
        state = log_state(redis_kind.url)
        apparent, on_disk = du_bytes(store, True), du_bytes(store, False)
        files = sum(1 for path in store.rglob("*") if path.is_file())
        log(f"integrated {entries:,} entries in {took:.1f} s; checking the tree")
        checked = asyncio.run(check_store(store, redis_kind.url, signer))
    finally:
        if worker is not None:
            worker.stop()
        redis_kind.stop()
    batches = prom.total(metrics, "eps_log_batch_duration_seconds_count")
    tenth = at_marks[0]
    report = {
        "integrate_receipts": receipts,
        "integrate_entries": entries,
        "integrate_load_seconds": load_seconds,
        "integrate_queued": queued,
        "integrate_seconds": took,
        "integrate_worker_answered_s": answered,
        "integrate_first_checkpoint_s": first_at,
        "integrate_entries_per_s": entries / took,
        "integrate_steady_entries_per_s": (entries - tenth[0]) / (at_marks[-1][1] - tenth[1]),
        "integrate_rss_marks": [(size, rss) for size, _, rss in at_marks],
        "integrate_rss_first_kib": samples[0][2],
        "integrate_rss_hwm_kib": hwm,
        "integrate_batches": batches,
        "integrate_batch_mean_s": (
            prom.total(metrics, "eps_log_batch_duration_seconds_sum") / batches if batches else None
        ),
        "integrate_after": state,
        "store_apparent_bytes": apparent,
        "store_disk_bytes": on_disk,
        "store_files": files,
        "store_apparent_per_entry": apparent / entries,
        "store_disk_per_entry": on_disk / entries,
        **checked,
    }
    ok = (
        checked["checked_size"] == entries
        and checked["checked_entries"] == entries
        and checked["indices_wrong"] == 0
        and state["queued"] == 0
        and state["pending"] == 0
        and state["synced"] == entries
        and queued["pending"] == receipts
    )
    if not ok:
        raise HarnessError(f"the integration run's log does not check out: {report}")
    log(
        f"integration run: {entries / took:,.0f} entries/s; RSS "
        + ", ".join(f"{size // 1000}k {rss / 1024:.0f} MiB" for size, _, rss in at_marks)
        + f"; store {apparent / entries:.0f} B/entry apparent, {on_disk / entries:.0f} on disk; tree checked"
    )
    return report


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.log", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating closed-loop rounds (log on, log off)")
    parser.add_argument("--seconds", type=float, default=10.0, help="each round, and the probes' window")
    parser.add_argument("--witness-seconds", type=float, default=20.0, help="the window of the witness figures")
    parser.add_argument("--memory-receipts", type=int, default=100_000, help="receipts for Redis's bytes")
    parser.add_argument(
        "--receipts", type=int, default=500_000, help="receipts of the integration run (two log entries each)"
    )
    parser.add_argument("--only", default=",".join(PHASES), help=f"phases to run, of {','.join(PHASES)}")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 round of 3 s, 8 s with witnesses, 5,000 receipts, 20,000 entries",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.witness_seconds = 1, 3.0, 8.0
        args.memory_receipts, args.receipts = 5_000, 10_000
    phases = [phase.strip() for phase in args.only.split(",") if phase.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}: choose among {', '.join(PHASES)}")
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-log-"))
    receipt_root = new_receipt_root(tmp)
    signer = SIGNER
    report: dict[str, Any] = {
        "phases": phases,
        "machine": machine_info(),
        "loadavg_before": loadavg(),
        "cpu_busy_before": cpu_busy_share(2.0),
        "workers": fly_workers(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    began = time.monotonic()
    try:
        if "load" in phases or "witness" in phases:
            report.update(service_phases(tmp, receipt_root, signer, args, phases))
        if "memory" in phases:
            report.update(memory_phase(tmp, receipt_root, signer, args.memory_receipts))
        if "integrate" in phases:
            report.update(integrate_phase(tmp, receipt_root, signer, args.receipts))
    except HarnessError as exc:
        log(f"HARNESS FAILURE: {exc} (the processes' logs are kept in {tmp})")
        return 2
    # The integration run leaves about 1.5 GB (its Redis's AOF, the store): gone once measured.
    shutil.rmtree(tmp, ignore_errors=True)
    report["took_s"] = time.monotonic() - began
    report["loadavg_after"] = loadavg()
    print(render(report))
    print("BENCHJSON " + orjson.dumps(report).decode())
    return 0


def service_phases(tmp: Path, receipt_root: str, signer: Signer, args: Any, phases: list[str]) -> dict[str, Any]:
    """The phases with the two services on one Redis and one log store: load, witness."""
    log_store = tmp / "store"
    redis_kind: RedisKind = start_kind("tcp", tmp, None, True)
    services = ServiceSpec(receipt_root, orjson.dumps(RAISED_LIMITS).decode(), "json", True, tmp)
    procs: list[Proc] = []
    report: dict[str, Any] = {}
    try:
        keys = [p["api_key"] for p in create_projects(redis_kind.url, "bench-log", PROJECTS)]
        log_env = {"LOG_SIGNING_KEY": signer.encode(), "LOG_ORIGIN": ORIGIN, "LOG_STORE": store_url(log_store)}
        on = services.start("log-on", redis_kind, fly_workers(), log_env)
        on_proc = services.procs[-1]
        off = services.start("log-off", redis_kind, fly_workers())
        off_proc = services.procs[-1]
        worker = start_worker(tmp, redis_kind.url, receipt_root, "worker", signer.encode(), log_store)
        procs.append(worker)
        rate = 0.0
        if "load" in phases:
            groups = {
                "on": on_proc.process.pid,
                "off": off_proc.process.pid,
                "worker": worker.process.pid,
                "redis": redis_kind.procs[0].process.pid,
            }
            with Backlog(redis_kind.url, log_store) as backlog:
                figures, rate = load_phase(
                    tmp, {"on": on, "off": off}, groups, keys, args.rounds, args.seconds, backlog
                )
            report.update(figures)
            if not worker.alive():
                raise HarnessError(f"the worker died during the load phase:\n{worker.tail()}")
        if "witness" in phases:
            worker.stop()
            if not rate:  # without the load phase: half of one short log-on round
                setup = Setup(tmp, "wrk" if _has_wrk() else "python", 32, 2, None, None)
                items = tmp / "items.txt"
                items.write_text("\n".join(keys) + "\n")
                setup.items["create32"], setup.item_lists["create32"] = items, keys
                rate = run_load(setup, Target("on", on), "create32", args.seconds)["rps"] / 2
            report.update(
                witnessed(tmp, on, keys, rate, args.witness_seconds, redis_kind.url, receipt_root, signer,
                          log_store, procs)
            )  # fmt: skip
        return report
    finally:
        for proc in procs:
            proc.stop()
        services.stop()
        redis_kind.stop()


def _has_wrk() -> bool:
    return shutil.which("wrk") is not None


def _pct(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(fraction * len(values)))]


# --------------------------------------------------------------------------- the report


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        f"## The transparency log (`python -m bench.log`, {r['started']}, took {r['took_s']:.0f} s)",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB; Python {m['python']}; {m['redis']}. "
        f"Load average {r['loadavg_before']} before, {r['loadavg_after']} after; CPU busy before: "
        f"{r['cpu_busy_before'] * 100:.0f}%. Plain-TCP Redis, AOF always; the log in a `file://` store.",
        "",
        "| figure | measured | target |",
        "|---|---:|---|",
    ]
    if "ratio" in r:
        rounds = ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
        lines += [
            f"| creates/s, log on ({len(r['rounds_on'])} rounds of {r['round_seconds']:.0f} s: "
            f"{', '.join(f'{x:,.0f}' for x in r['rounds_on'])}) | {r['capacity_on']:,.0f} | |",
            f"| creates/s, log off ({', '.join(f'{x:,.0f}' for x in r['rounds_off'])}) | {r['capacity_off']:,.0f} | |",
            f"| log on ÷ log off, `file://` (median of rounds {rounds}) | {r['ratio']:.2f} | ≥ 0.9 |",
            f"| CPU ms per create, medians of the runs: service on / off {r['cpu_ms_on']:.3f} / {r['cpu_ms_off']:.3f}, "
            f"worker {r['cpu_ms_worker']:.3f}, "
            f"Redis on / off {r['cpu_ms_redis_on']:.3f} / {r['cpu_ms_redis_off']:.3f}; "
            f"entries waiting for the log, at most {max(b[0] for b in r['backlog_on']):,} "
            f"| {_cpu_ratio(r):.2f} (off ÷ on) | |",
            f"| 201 → published checkpoint, p50 (at {r['steady_rate']:,.0f} creates/s, {r['probes']} probes, "
            f"{r['probes_missed']} not within {PROBE_TIMEOUT_S:.0f} s) | {r['delay_p50_s']:.2f} s | |",
            f"| 201 → published checkpoint, p99 (max {r['delay_max_s'] or math.nan:.2f} s) "
            f"| {r['delay_p99_s']:.2f} s | ≤ 0.5 s |",
        ]
    if "memory_key_diff" in r:
        n = r["memory_receipts"]
        lines += [
            f"| Redis bytes per receipt, log on minus log off ({n:,} receipts created and integrated; "
            f"MEMORY USAGE of every key: on {r['memory_key_on']:,.1f}, off {r['memory_key_off']:,.1f}) "
            f"| {r['memory_key_diff']:,.1f} | ≤ 64 |",
            f"| the same by `used_memory` (on {r['memory_used_on']:,.1f}, off {r['memory_used_off']:,.1f}) "
            f"| {r['memory_used_diff']:,.1f} | ≤ 64 |",
            f"| the same while every entry still waits in its queue (MEMORY USAGE) "
            f"| {r['memory_queued_diff']:,.1f} | |",
        ]
    if "integrate_entries" in r:
        marks = " / ".join(f"{rss / 1024:.0f}" for _, rss in r["integrate_rss_marks"])
        tenths = " / ".join(f"{size // 1000:,}k" for size, _ in r["integrate_rss_marks"])
        lines += [
            f"| integration run, `file://`: entries/s ({r['integrate_entries']:,} entries of "
            f"{r['integrate_receipts']:,} receipts queued, worker start "
            f"included; {r['integrate_steady_entries_per_s']:,.0f}/s from the first tenth on) "
            f"| {r['integrate_entries_per_s']:,.0f} | |",
            f"| the worker's RSS at {tenths} entries, MiB (peak {r['integrate_rss_hwm_kib'] / 1024:.0f}) "
            f"| {marks} | flat |",
            f"| store bytes per entry, apparent / on disk ({r['store_files']:,} files) "
            f"| {r['store_apparent_per_entry']:,.0f} / {r['store_disk_per_entry']:,.0f} | |",
            f"| the tree checked (`check_tree`, {r['checked_entries']:,} entries in {r['check_seconds']:.1f} s; "
            f"{r['indices_sampled']:,} indices looked up in Redis) | {r['indices_wrong']} wrong | 0 |",
        ]
    if "cosigned_per_min" in r:
        lines += witness_rows(r)
    lines.append("")
    return "\n".join(lines)


def _cpu_ratio(r: dict[str, Any]) -> float:
    """The CPU of one create with the log off ÷ with it on (service, worker and Redis)."""
    off = float(r["cpu_ms_off"] + r["cpu_ms_redis_off"])
    return off / float(r["cpu_ms_on"] + r["cpu_ms_worker"] + r["cpu_ms_redis_on"])


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
