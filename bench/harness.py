"""What every bench shares: the machine it runs on, a Redis of its own, projects and signing
keys to load with, and one timed run of a scenario against a target (``run_load``, rounds of
them in ``run_pass``). bench/run.py, bench/production.py and the log benches build on it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis

from bench.procs import REPO, HarnessError, Proc, base_env, free_port, log, pinned

BENCH = Path(__file__).resolve().parent

# --------------------------------------------------------------------------- machine

# The same raised limits as tests/servers.py: every counter still runs, none refuses.
RAISED_LIMITS = {
    "plans": {name: {"per_minute": 1_000_000_000, "monthly": 1_000_000_000} for name in ("free", "basic", "pro")},
    "ip_per_minute": {
        "public_key": 1_000_000_000,
        "get_receipt": 1_000_000_000,
        "unauthenticated": 1_000_000_000,
        "authenticated": 1_000_000_000,
    },
}


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    redis_version = _first_line(["redis-server", "--version"])
    wrk = shutil.which("wrk")
    import sanic

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sanic": sanic.__version__,
        "redis": redis_version,
        "wrk": _first_line([wrk, "--version"]) if wrk else None,
    }


def _first_line(cmd: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=10, check=False)  # noqa: S603
    except OSError:
        return "unknown"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def cpu_busy_share(seconds: float) -> float:
    """Share (0-1) of all cores busy over ``seconds``, from /proc/stat (the machine's own load)."""

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    try:
        total0, idle0 = read()
        time.sleep(seconds)
        total1, idle1 = read()
    except (OSError, ValueError, IndexError):
        return float("nan")
    total = total1 - total0
    return 1.0 - (idle1 - idle0) / total if total > 0 else float("nan")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


# --------------------------------------------------------------------------- redis


def start_redis(tmp: Path, cpus: str | None, aof_always: bool) -> tuple[Proc, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise HarnessError("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    data = tmp / "redis"
    data.mkdir()
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if aof_always else ["--appendonly", "no"]
    cmd = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
        *persistence, "--maxmemory-policy", "noeviction", "--logfile", str(data / "redis.log"),
    ]  # fmt: skip
    proc = Proc.start("redis-server", pinned(cmd, cpus), env=base_env(), log_path=tmp / "redis.stdout")
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    with redis.Redis(port=port, socket_connect_timeout=0.2) as client:
        while True:
            with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                if client.ping():
                    return proc, url
            if not proc.alive() or time.monotonic() > deadline:
                raise HarnessError(f"redis-server did not start:\n{proc.tail()}")
            time.sleep(0.05)


def redis_settings(url: str) -> str:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        parts = []
        for name in ("save", "appendonly", "appendfsync", "maxmemory-policy"):
            value = client.config_get(name).get(name, "?")
            parts.append(f'{name} "{value}"' if name == "save" else f"{name} {value}")
        return ", ".join(parts)


# --------------------------------------------------------------------------- setup


async def _create_projects(url: str, prefix: str, count: int, cluster: bool) -> list[dict[str, Any]]:
    from execution_proof.kv.accounts import create_project_key
    from execution_proof.kv.connect import open_store

    store = open_store(url, cluster=cluster)
    try:
        return [await create_project_key(store.keys, project_name=f"{prefix}-{n}", plan="pro") for n in range(count)]
    finally:
        await store.close()


def create_projects(url: str, prefix: str, count: int, *, cluster: bool = False) -> list[dict[str, Any]]:
    return asyncio.run(_create_projects(url, prefix, count, cluster))


def new_receipt_root(folder: Path) -> str:
    """A receipt root for one run, made as an operator makes one (``signing-key root new``) in
    a new file of mode 0600 in ``folder``: the signer URI to set as ``RECEIPT_ROOT_KEY``."""
    path = folder.resolve() / f"receipt-root-{secrets.token_hex(4)}.key"
    done = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "service.py", "signing-key", "root", "new", "--signer", f"file:{path}"],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise HarnessError(f"signing-key root new failed: {done.stderr}")
    signer: str = orjson.loads(done.stdout)["signer"]
    return signer


# --------------------------------------------------------------------------- load


@dataclass
class Target:
    name: str  # "service" or "ceiling"
    port: int


@dataclass
class Setup:
    tmp: Path
    generator: str  # "wrk" or "python"
    connections: int
    wrk_threads: int
    server_cpus: str | None
    generator_cpus: str | None
    items: dict[str, Path] = field(default_factory=dict)
    item_lists: dict[str, list[str]] = field(default_factory=dict)
    own_items: dict[tuple[str, str], tuple[Path, list[str]]] = field(default_factory=dict)
    """(target, scenario) -> items of a target that cannot read the service's receipts (the floor)."""

    def items_for(self, target: str, scenario: str) -> tuple[Path, list[str]]:
        own = self.own_items.get((target, scenario))
        return own if own is not None else (self.items[scenario], self.item_lists[scenario])


def run_load(setup: Setup, target: Target, scenario: str, seconds: float) -> dict[str, Any]:
    """One timed run of ``scenario`` against ``target``: the generator's normalised result."""
    nonce = secrets.token_hex(8)
    seconds = max(1.0, seconds)
    items_path, item_list = setup.items_for(target.name, scenario)
    if setup.generator == "wrk":
        cmd = [
            "wrk", "-t", str(setup.wrk_threads), "-c", str(setup.connections), "-d", f"{round(seconds)}s",
            "--timeout", "10s", "-s", str(BENCH / "scenario.lua"), f"http://127.0.0.1:{target.port}",
            "--", scenario, str(items_path), nonce,
        ]  # fmt: skip
    else:
        spec = {
            "target_host": "127.0.0.1",
            "target_port": target.port,
            "host": f"127.0.0.1:{target.port}",
            "connections": setup.connections,
            "seconds": seconds,
            "mode": scenario,
            "items": item_list,
            "nonce": nonce,
        }
        spec_path = setup.tmp / f"spec-{scenario}.json"
        spec_path.write_bytes(orjson.dumps(spec))
        cmd = [sys.executable, "-m", "bench.loadgen", "run", str(spec_path)]
    done = subprocess.run(  # noqa: S603 - our own command line
        pinned(cmd, setup.generator_cpus),
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
    )
    match = re.search(r"^BENCHJSON (.*)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or match is None:
        raise HarnessError(
            f"{setup.generator} failed on {scenario}/{target.name} ({done.returncode}):\n{done.stdout[-2000:]}\n"
            f"{done.stderr[-2000:]}"
        )
    raw = orjson.loads(match.group(1))
    result = raw if setup.generator == "python" else _normalise_wrk(raw)
    ok = sum(n for code, n in result["statuses"].items() if 200 <= int(code) < 300)
    if ok == 0:
        raise HarnessError(f"{scenario}/{target.name}: no 2xx answer at all: {result}")
    return result


def _normalise_wrk(raw: dict[str, Any]) -> dict[str, Any]:
    duration = raw["duration_us"] / 1e6
    statuses = {str(k): int(v) for k, v in sorted(raw["statuses"].items(), key=lambda kv: int(kv[0]))}
    non_2xx = sum(n for code, n in statuses.items() if not 200 <= int(code) < 300)
    socket_errors = raw["connect"] + raw["read"] + raw["write"] + raw["timeout"]
    return {
        "generator": "wrk",
        "requests": raw["requests"],
        "duration_s": duration,
        "rps": raw["requests"] / duration if duration > 0 else 0.0,
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "errors": non_2xx + socket_errors,
        "conn_errors": raw["connect"] + raw["read"] + raw["write"],
        "timeouts": raw["timeout"],
        "statuses": statuses,
    }


def run_pass(
    setup: Setup, targets: Sequence[Target], scenarios: Sequence[str], rounds: int, seconds: float, warmup: float
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Warm up, then ``rounds`` rounds of every scenario on every target (order alternating)."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {s: {t.name: [] for t in targets} for s in scenarios}
    if warmup > 0:
        for scenario in scenarios:
            for target in targets:
                run_load(setup, target, scenario, warmup)
    for number in range(rounds):
        order = list(targets) if number % 2 == 0 else list(reversed(targets))
        for scenario in scenarios:
            for target in order:
                result = run_load(setup, target, scenario, seconds)
                results[scenario][target.name].append(result)
                log(
                    f"round {number + 1}/{rounds} {scenario:8s} {target.name:7s} {result['rps']:9.0f} rps  "
                    f"p50 {result['p50_ms']:6.2f} ms  p99 {result['p99_ms']:6.2f} ms  errors {result['errors']}"
                )
    return results
