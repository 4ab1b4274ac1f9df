"""The production pass: the service as it is deployed, over every Redis connection kind.

Each kind (TLS, plain TCP, Unix socket and, with ``--cluster``, a local 3-master cluster) gets
its own Redis with ``appendfsync always`` and its own service with the web worker count that
fly.toml sets, unpinned (the workers share the machine's cores as in production). Then:

1. capacity: closed-loop creates over 32 projects, the kinds alternating round by round (so
   each ratio to plain TCP compares runs measured side by side), plus the plain-TCP service
   with one worker (scale-out: one worker against fly.toml's count);
2. latency without coordinated omission: an open loop (bench/loadgen.py, fixed arrival rate,
   latency from the due time) at half of each kind's measured capacity, after an unrecorded
   warm-up at that rate;
3. a hot project served by two service processes at once on the same plain-TCP Redis, the
   load split between them, then the fork check (bench/chain.py) on the project's chain.
"""

from __future__ import annotations

import re
import secrets
import statistics
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.chain import check_chain
from bench.harness import Setup, Target, create_projects, redis_settings, run_pass
from bench.procs import REPO, HarnessError, Proc, base_env, free_port, log, wait_http
from bench.redis_kinds import KIND_TITLES, RedisKind, start_kind

OPEN_LOOP_SHARE = 0.5
OPEN_LOOP_CONNECTIONS = 64
ONE_WORKER = "tcp-1w"
HOT_PROCESSES = 2


def fly_workers() -> int:
    """The web worker count fly.toml sets (``WEB_WORKERS``; 1 when it sets none)."""
    with open(REPO / "fly.toml", "rb") as handle:
        config = tomllib.load(handle)
    return int(config.get("env", {}).get("WEB_WORKERS", "1"))


@dataclass
class ServiceSpec:
    """What every service of the pass shares (the keys, limits and log settings)."""

    receipt_root: str
    limits: str
    log_format: str
    metrics: bool
    tmp: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, redis_kind: RedisKind, workers: int, extra_env: dict[str, str] | None = None) -> int:
        port = free_port()
        env = base_env()
        env.update(redis_kind.service_env())
        env.update(extra_env or {})
        env.update(
            {
                "RECEIPT_ROOT_KEY": self.receipt_root,
                "LIMITS": self.limits,
                "LOG_FORMAT": self.log_format,
                "SERVICE_ENV": "bench",
            }
        )
        if self.metrics:
            env["METRICS_PORT"] = str(free_port())
        cmd = [
            sys.executable, "service.py", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers),
        ]  # fmt: skip
        proc = Proc.start(f"service-{name}", cmd, env=env, log_path=self.tmp / f"service-{name}.log")
        self.procs.append(proc)
        wait_http(proc, f"http://127.0.0.1:{port}/health")
        return port

    def stop(self) -> None:
        while self.procs:
            self.procs.pop().stop()


def loadgen(spec: dict[str, Any], tmp: Path, name: str) -> subprocess.Popen[str]:
    """Start one bench/loadgen.py run of ``spec`` (read its result with ``loadgen_result``)."""
    path = tmp / f"spec-{name}.json"
    path.write_bytes(orjson.dumps(spec))
    return subprocess.Popen(  # noqa: S603 - our own command line
        [sys.executable, "-m", "bench.loadgen", "run", str(path)],
        cwd=REPO,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def loadgen_result(process: subprocess.Popen[str], timeout: float, what: str) -> dict[str, Any]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    match = re.search(r"^BENCHJSON (.*)$", out, re.MULTILINE)
    if process.returncode != 0 or match is None:
        raise HarnessError(f"loadgen failed on {what} ({process.returncode}):\n{out[-1500:]}\n{err[-1500:]}")
    result: dict[str, Any] = orjson.loads(match.group(1))
    return result


def create_spec(port: int, keys: list[str], connections: int, seconds: float, mode: str = "create32") -> dict[str, Any]:
    return {
        "target_host": "127.0.0.1",
        "target_port": port,
        "host": f"127.0.0.1:{port}",
        "connections": connections,
        "seconds": seconds,
        "mode": mode,
        "items": keys,
        "nonce": secrets.token_hex(8),
    }


def open_loop(port: int, keys: list[str], rate: float, seconds: float, tmp: Path, name: str) -> dict[str, Any]:
    spec = create_spec(port, keys, OPEN_LOOP_CONNECTIONS, seconds)
    spec["rate"] = rate
    return loadgen_result(loadgen(spec, tmp, f"open-{name}"), seconds + 60, f"open loop {name}")


def hot_two_processes(
    services: ServiceSpec, redis_kind: RedisKind, connections: int, seconds: float, warmup: float
) -> dict[str, Any]:
    """One hot project, two service processes (1 worker each) on the same Redis, the
    connections split between them; then the fork check over every 201 answer."""

    project = create_projects(redis_kind.url, "bench-hot-pair", 1, cluster=redis_kind.cluster)[0]
    ports = [services.start(f"hot{n}", redis_kind, 1) for n in range(HOT_PROCESSES)]
    keys = [project["api_key"]]
    each = max(1, connections // HOT_PROCESSES)
    if warmup > 0:  # warm both processes on a throwaway project: the checked chain holds only measured creates
        spare = create_projects(redis_kind.url, "bench-hot-warm", 1, cluster=redis_kind.cluster)[0]
        warm = [
            loadgen(create_spec(p, [spare["api_key"]], each, warmup, "hot"), services.tmp, f"warm{p}") for p in ports
        ]
        for process in warm:
            loadgen_result(process, warmup + 60, "hot warm-up")
    runs = []
    for number, port in enumerate(ports):
        spec = create_spec(port, keys, each, seconds, "hot")
        spec["collect"] = str(services.tmp / f"bodies-hot{number}.txt")
        spec["source_id"] = number + 1  # distinct request bodies per process
        runs.append(loadgen(spec, services.tmp, f"hot{number}"))
    results = [loadgen_result(process, seconds + 60, "hot project, two processes") for process in runs]
    bodies = [
        line
        for number in range(len(ports))
        for line in (services.tmp / f"bodies-hot{number}.txt").read_bytes().decode().split("\n")
        if line
    ]
    check = check_chain(redis_kind.url, project["project_id"], bodies, cluster=redis_kind.cluster)
    statuses: dict[str, int] = {}
    for result in results:
        for code, n in result["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
    summary = {
        "processes": HOT_PROCESSES,
        "connections": each * HOT_PROCESSES,
        "rps": sum(r["rps"] for r in results),
        "p50_ms": max(r["p50_ms"] for r in results),
        "p99_ms": max(r["p99_ms"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "requests": sum(r["requests"] for r in results),
        "statuses": statuses,
        "per_process": results,
        "error_samples": [sample for result in results for sample in result.get("error_samples", [])][:5],
        "chain_ok": check.ok,
        "chain": check.describe(),
        "chain_walked": check.walked,
        "forks": len(check.missing),
    }
    log(
        f"hot project, {HOT_PROCESSES} processes: {summary['rps']:.0f} creates/s, {summary['errors']} errors; "
        f"chain: {summary['chain']}"
    )
    return summary


def run_production(
    args: Any, tmp: Path, receipt_root: str, limits: str, projects_count: int, generator: str
) -> dict[str, Any]:
    """The whole production pass; returns its results (rendered by bench/production_report.py)."""

    workers = fly_workers()
    kinds = ["tls", "tcp", "unix", *(["cluster"] if args.cluster else [])]
    redises: dict[str, RedisKind] = {}
    services = ServiceSpec(receipt_root, limits, args.log_format, not args.no_metrics, tmp)
    setup = Setup(tmp, generator, args.connections, args.wrk_threads, None, None)
    keys: dict[str, list[str]] = {}
    try:
        targets = []
        for kind in kinds:
            redises[kind] = start_kind(kind, tmp, None, args.aof_always)
            projects = create_projects(
                redises[kind].url, f"bench-{kind}", projects_count, cluster=redises[kind].cluster
            )
            keys[kind] = [p["api_key"] for p in projects]
            targets.append(Target(kind, services.start(kind, redises[kind], workers)))
            log(f"{kind}: service with {workers} workers on {redises[kind].url}")
        if workers != 1:
            keys[ONE_WORKER] = keys["tcp"]
            targets.append(Target(ONE_WORKER, services.start(ONE_WORKER, redises["tcp"], 1)))
        for name, lines in keys.items():
            path = tmp / f"items-{name}-create32.txt"
            path.write_text("\n".join(lines) + "\n")
            setup.own_items[(name, "create32")] = (path, lines)
        setup.items["create32"], setup.item_lists["create32"] = setup.own_items[("tcp", "create32")]

        closed = run_pass(setup, targets, ["create32"], args.rounds, args.seconds, args.warmup)["create32"]
        capacity = {name: statistics.median(r["rps"] for r in runs) for name, runs in closed.items()}
        opened = {}
        for target in targets:
            if target.name == ONE_WORKER:
                continue
            rate = max(1.0, OPEN_LOOP_SHARE * capacity[target.name])
            if args.warmup > 0:  # unrecorded: the service opens its connections for this concurrency
                open_loop(target.port, keys[target.name], rate, args.warmup, tmp, f"{target.name}-warm")
            result = open_loop(target.port, keys[target.name], rate, args.seconds, tmp, target.name)
            opened[target.name] = result
            log(
                f"open loop {target.name:7s} {rate:7.0f}/s: p50 {result['p50_ms']:.2f} ms  "
                f"p99 {result['p99_ms']:.2f} ms  max {result['max_ms']:.1f} ms  errors {result['errors']}"
            )
        for proc in services.procs:
            if not proc.alive():
                raise HarnessError(f"{proc.name} died during the production pass:\n{proc.tail()}")
        settings = {kind: redis_settings(redises[kind].admin_urls[0]) for kind in kinds}
        services.stop()
        hot = hot_two_processes(services, redises["tcp"], args.connections, args.seconds, args.warmup)
        return {
            "workers": workers,
            "kinds": kinds,
            "titles": {kind: KIND_TITLES[kind] for kind in kinds},
            "closed": closed,
            "capacity": capacity,
            "open": opened,
            "open_share": OPEN_LOOP_SHARE,
            "open_connections": OPEN_LOOP_CONNECTIONS,
            "hot": hot,
            "redis_settings": settings,
            "connections": args.connections,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "generator": generator,
        }
    finally:
        services.stop()
        for redis_kind in redises.values():
            redis_kind.stop()
