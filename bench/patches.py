"""Two checkouts of the service at once, for a patch measured against the plain library.

    python -m bench.patches DIR_A DIR_B [--scenarios create32 read verify] [--rounds 5]
        [--seconds 6] [--json-out FILE]

bench/ab.sh without wrk: both services (``service.py serve --workers 1``, metrics on, JSON
request lines, limits raised as in ``python -m bench``) run at the same time on CPU 0 against
one loopback Redis (``--redis``: ``tcp``, ``tls``, ``unix`` or a 3-master ``cluster``, as
bench/redis_kinds.py starts them; AOF ``appendfsync always``, the production setting) on CPU 1, each
loaded by its own bench/loadgen.py (16 connections, closed loop) on CPU 1, so the machine's
drift hits both alike. Per round it prints each side's requests per second, p99, and the CPU
its worker spent per request (``/proc/PID/stat``), then the medians, the spread (lowest and
highest round) and the quotient B/A of each (median over rounds of the per-round quotient).
A and B are directories holding a checkout (``service.py`` and ``execution_proof/``): the one
with the patch and the one without. Every run is bounded: ``rounds`` x ``seconds`` per
scenario after 2 s of warm-up, loopback only.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.harness import RAISED_LIMITS
from bench.procs import REPO, HarnessError, Proc, base_env, free_port, log, pinned, wait_http
from bench.redis_kinds import KINDS, start_kind

SERVICE_CPUS = "0"
SIDE_CPUS = "1"
CONNECTIONS = 16
SEEDED = 300
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def _service(name: str, checkout: Path, tmp: Path, env: dict[str, str]) -> tuple[Proc, int]:
    port, metrics_port = free_port(), free_port()
    prom = tmp / f"prom-{name}"
    prom.mkdir()
    env = env | {"METRICS_PORT": str(metrics_port), "PROMETHEUS_MULTIPROC_DIR": str(prom)}
    env.pop("PYTHONPATH", None)  # each side imports its own checkout's package
    cmd = pinned([sys.executable, "service.py", "serve", "--port", str(port), "--workers", "1"], SERVICE_CPUS)
    with open(tmp / f"service-{name}.log", "wb") as out:
        process = subprocess.Popen(  # noqa: S603 - our own command line
            cmd, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    proc = Proc(name, process, tmp / f"service-{name}.log")
    wait_http(proc, f"http://127.0.0.1:{port}/health")
    return proc, port


def _worker_pid(proc: Proc) -> int:
    """The busiest process of the service's group: the Sanic worker, not the manager."""
    group = proc.process.pid
    best, most = group, -1
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and int(fields[11]) + int(fields[12]) > most:
            best, most = int(entry.name), int(fields[11]) + int(fields[12])
    return best


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _seed(port: int, api_keys: list[str]) -> tuple[list[str], list[str]]:
    reads, verifies = [], []
    with httpx.Client(timeout=10) as client:
        for n in range(SEEDED):
            key, input_hash = api_keys[n % len(api_keys)], f"sha256:{secrets.token_hex(32)}"
            answer = client.post(
                f"http://127.0.0.1:{port}/v1/receipts",
                json={"input_hash": input_hash, "output_hash": "sha256:" + "b" * 64, "tags": {"stage": "ab"}},
                headers={"Authorization": f"Bearer {key}"},
            )
            answer.raise_for_status()
            receipt_id = answer.json()["receipt"]["receipt_id"]
            reads.append(receipt_id)
            verifies.append(f"{key} {receipt_id} {input_hash}")
    return reads, verifies


def _load(tmp: Path, side: str, port: int, scenario: str, items: list[str], seconds: float) -> subprocess.Popen[str]:
    spec = {
        "target_host": "127.0.0.1",
        "target_port": port,
        "host": f"127.0.0.1:{port}",
        "connections": CONNECTIONS,
        "seconds": seconds,
        "mode": scenario,
        "items": items,
        "nonce": secrets.token_hex(8),
        "source_id": 1 if side == "A" else 2,
    }
    path = tmp / f"spec-{side}.json"
    path.write_bytes(orjson.dumps(spec))
    cmd = pinned([sys.executable, "-m", "bench.loadgen", "run", str(path)], SIDE_CPUS)
    return subprocess.Popen(cmd, cwd=REPO, env=base_env(), stdout=subprocess.PIPE, text=True)  # noqa: S603


def _result(process: subprocess.Popen[str], seconds: float) -> dict[str, Any]:
    out, _ = process.communicate(timeout=seconds + 60)
    match = re.search(r"^BENCHJSON (.*)$", out, re.MULTILINE)
    if process.returncode != 0 or match is None:
        raise HarnessError(f"the load generator failed ({process.returncode}): {out[-2000:]}")
    result: dict[str, Any] = orjson.loads(match.group(1))
    return result


def _spread(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--scenarios", nargs="+", default=["create32", "read", "verify"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--redis", choices=KINDS, default="tcp", help="the kind of Redis (bench/redis_kinds.py)")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "a": str(args.a), "b": str(args.b), "redis": args.redis, "load_before": os.getloadavg(), "scenarios": {}
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="eps-patches-") as name:
        tmp = Path(name)
        redis = start_kind(args.redis, tmp, SIDE_CPUS, aof_always=True)
        services: list[Proc] = []
        try:
            from bench.harness import create_projects, new_receipt_root

            projects = create_projects(redis.url, "ab", 32, cluster=redis.cluster)
            api_keys = [project["api_key"] for project in projects]
            env = (
                base_env()
                | redis.service_env()
                | {
                    "RECEIPT_ROOT_KEY": new_receipt_root(tmp),
                    "LIMITS": orjson.dumps(RAISED_LIMITS).decode(),
                    "LOG_FORMAT": "json",
                }
            )
            a, port_a = _service("A", args.a.resolve(), tmp, env)
            services.append(a)
            b, port_b = _service("B", args.b.resolve(), tmp, env)
            services.append(b)
            reads, verifies = _seed(port_a, api_keys)
            items = {"create32": api_keys, "hot": api_keys[:1], "read": reads, "verify": verifies}
            sides = (("A", port_a), ("B", port_b))
            for scenario in args.scenarios:
                rows: list[dict[str, Any]] = []
                warm = [_load(tmp, side, port, scenario, items[scenario], 2) for side, port in sides]
                for process in warm:
                    _result(process, 2)
                workers = {"A": _worker_pid(a), "B": _worker_pid(b)}  # the busiest once warmed up
                for round_no in range(1, args.rounds + 1):
                    before = {side: _cpu_ticks(pid) for side, pid in workers.items()}
                    loads = {
                        side: _load(tmp, side, port, scenario, items[scenario], args.seconds) for side, port in sides
                    }
                    results = {side: _result(process, args.seconds) for side, process in loads.items()}
                    row: dict[str, Any] = {"round": round_no}
                    for side, result in results.items():
                        row[side] = {
                            "rps": result["rps"],
                            "p99_ms": result["p99_ms"],
                            "cpu_us": (_cpu_ticks(workers[side]) - before[side]) * TICK_US / max(1, result["requests"]),
                            "errors": result["errors"],
                        }
                    rows.append(row)
                    print(
                        f"{scenario} round {round_no}: "
                        + "  ".join(
                            f"{side} {row[side]['rps']:,.0f}/s p99 {row[side]['p99_ms']:.2f} ms "
                            f"{row[side]['cpu_us']:.0f} us/request, {row[side]['errors']} errors"
                            for side in ("A", "B")
                        )
                        + f"  B/A cpu {row['B']['cpu_us'] / row['A']['cpu_us']:.3f}",
                        flush=True,
                    )
                summary = {
                    f"{side} {figure}": _spread([row[side][figure] for row in rows], 2 if figure == "p99_ms" else 0)
                    for side in ("A", "B")
                    for figure in ("rps", "p99_ms", "cpu_us")
                }
                for figure in ("rps", "p99_ms", "cpu_us"):
                    summary[f"B/A {figure}"] = _spread([row["B"][figure] / row["A"][figure] for row in rows], 3)
                print(f"{scenario} medians (lowest-highest): " + "; ".join(f"{k} {v}" for k, v in summary.items()))
                report["scenarios"][scenario] = {"rounds": rows, "summary": summary}
        finally:
            for proc in reversed(services):
                proc.stop()
            redis.stop()
    report["load_after"] = os.getloadavg()
    log(f"load average before {report['load_before']}, after {report['load_after']}")
    if args.json_out:
        Path(args.json_out).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
