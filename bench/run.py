"""The benchmark: ``python -m bench`` (see ``--help`` and bench/RESULTS.md).

The production pass (bench/production.py: every Redis connection kind, fly.toml's worker
count, open loop, scale-out, a hot project on two processes) runs after the comparison pass
below; bench/report.py writes RESULTS.md from both.

The comparison pass starts its own redis-server, the service (``python service.py serve --workers 1``, limits
raised through ``LIMITS`` so every check still runs, JSON request logs and metrics on as in
production), the ceiling (bench/ceiling.py: a bare Sanic app on the same routes) and, unless
``--no-floor``, the floor (bench/floor.py: only what every implementation must do), then
loads each with the same generator (wrk when installed, else bench/loadgen.py), alternating
service and ceiling, for several rounds. Reports requests per second, p50/p99 latency,
errors and the ratio to the ceiling per scenario, Redis memory per stored receipt, and with
``--preload N`` every figure again with N more receipts stored.

Exit status: 0 when the harness ran (targets met or not, unless ``--check-targets``), 1 when
``--check-targets`` is given and a target is missed, 2 when the harness itself failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from bench.harness import (
    BENCH,
    RAISED_LIMITS,
    Setup,
    Target,
    cpu_busy_share,
    create_projects,
    loadavg,
    machine_info,
    new_receipt_root,
    redis_settings,
    run_load,
    run_pass,
    start_redis,
)
from bench.preload import preload
from bench.procs import HarnessError, Proc, base_env, free_port, log, pinned, wait_http
from bench.production import run_production
from bench.report import PROJECTS, Report, memory_markdown

SCENARIOS = ("create32", "hot", "read", "verify")
PRELOAD_PROJECTS = 256
ITEMS_SAMPLE = 10_000
FLOOR_ITEMS = 1_000
MEMORY_SCENARIO = "memory"
"""``--scenarios memory``: only the memory measurement (no service, no load; about a minute)."""
SCAN_SCENARIO = "scan"
"""``--scenarios scan``: only the content scan's cost per create body (bench/scan.py; in-process)."""
ALONE_SCENARIOS = (MEMORY_SCENARIO, SCAN_SCENARIO)
MEMORY_KINDS = (
    ("receipt record (`r:`)", "r:*"),
    ("index buckets (`b:{T}:prj_…:N`: hash index, idempotency, search)", "b:*:*:*"),
    ("index meta (`b:{T}:prj_…`: level, split, count)", "b:*"),
)
"""The keys a receipt's write adds to, by kind (docs/redis.md). ``b:*`` also matches the
buckets: memory_breakdown counts each key under the first pattern that matches it."""


# --------------------------------------------------------------------------- machine


def used_memory(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return int(client.info("memory")["used_memory"])


def memory_breakdown(url: str, receipts: int) -> list[tuple[str, int, float, float]]:
    """(kind, keys, mean MEMORY USAGE bytes per key, bytes per receipt) for each key kind a
    receipt's write adds to: every key of the kind is measured (buckets are shared by many
    receipts, so a sample of keys would not say what one receipt costs)."""
    rows = []
    seen: set[bytes] = set()
    with redis.Redis.from_url(url) as client:
        for title, pattern in MEMORY_KINDS:
            names = [name for name in client.scan_iter(match=pattern, count=1000) if name not in seen]
            seen.update(names)
            total = 0
            for start in range(0, len(names), 1000):
                pipe = client.pipeline(transaction=False)
                for name in names[start : start + 1000]:
                    pipe.memory_usage(name, samples=0)
                total += sum(int(size or 0) for size in pipe.execute())
            rows.append((title, len(names), total / len(names) if names else 0.0, total / receipts))
    return rows


def measure_memory(
    redis_url: str, receipt_root: str, projects: list[dict[str, Any]], count: int
) -> tuple[dict[str, Any], list[Any]]:
    """Write ``count`` receipts over ``projects`` through the issue path and measure them."""
    before = used_memory(redis_url)
    issued, secs = preload(
        redis_url,
        receipt_root,
        projects,
        count,
        nonce=secrets.token_hex(8),
        collect=True,
        processes=1 if count < 20_000 else 2,
    )
    delta = used_memory(redis_url) - before
    memory = {
        "count": count,
        "delta": delta,
        "bytes_per_receipt": delta / count,
        "breakdown": memory_breakdown(redis_url, count),
        "seconds": secs,
    }
    log(f"{count} fixture receipts in {secs:.1f} s: {memory['bytes_per_receipt']:.0f} bytes per receipt")
    return memory, issued


def run_memory_only(args: argparse.Namespace) -> int:
    """``--scenarios memory``: the memory measurement alone, printed as its RESULTS.md section."""
    _, redis_cpus, _ = cpu_plan(args.pin)
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-"))
    proc = None
    try:
        proc, redis_url = start_redis(tmp, redis_cpus, args.aof_always)
        projects = create_projects(redis_url, "bench", PROJECTS)
        memory, _ = measure_memory(redis_url, new_receipt_root(tmp), projects, max(args.memory_receipts, 500))
    except HarnessError as exc:
        log(f"HARNESS FAILURE: {exc}")
        return 2
    finally:
        if proc is not None:
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(memory_markdown(memory)))
    if args.json_out:
        Path(args.json_out).write_bytes(orjson.dumps(memory, option=orjson.OPT_INDENT_2))
    return 0


def generator_ceiling(setup: Setup, seconds: float) -> dict[str, Any]:
    """The generator against a trivial asyncio HTTP responder: its own maximum rate."""
    port = free_port()
    proc = Proc.start(
        "null-server",
        pinned([sys.executable, "-m", "bench.loadgen", "null-server", "--port", str(port)], setup.server_cpus),
        env=base_env(),
        log_path=setup.tmp / "null-server.log",
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if not proc.alive() or time.monotonic() > deadline:
                raise HarnessError(f"null server did not start:\n{proc.tail()}")
            time.sleep(0.05)
        return run_load(setup, Target("null", port), "create32", seconds)
    finally:
        proc.stop()


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every scenario (default 3)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per scenario run (default 10)")
    parser.add_argument("--connections", type=int, default=32, help="concurrent keep-alive connections (default 32)")
    parser.add_argument("--preload", type=int, default=0, help="receipts to add before a second pass (1000000 = 1M)")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="comma list of "
        + ",".join(SCENARIOS)
        + f"; or {MEMORY_SCENARIO} alone: only Redis bytes per receipt"
        + f"; or {SCAN_SCENARIO} alone: only the content scan's cost per create body",
    )
    parser.add_argument("--out", help="markdown file to write (default bench/RESULTS.md; --quick: none)")
    parser.add_argument("--json", dest="json_out", help="also write the raw results as JSON here")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round of 2 s, small fixtures")
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto", help="auto: wrk if installed")
    parser.add_argument("--wrk-threads", type=int, default=2)
    parser.add_argument(
        "--pin", choices=("auto", "off"), default="auto", help="taskset pinning (auto: with >= 2 cores)"
    )
    parser.add_argument(
        "--aof-always",
        action="store_true",
        default=True,
        help="Redis appendonly yes + appendfsync always (the default: production's setting)",
    )
    parser.add_argument("--no-aof", dest="aof_always", action="store_false", help="Redis without persistence")
    parser.add_argument("--cluster", action="store_true", help="also measure a local 3-master Redis Cluster")
    parser.add_argument(
        "--no-production",
        dest="production",
        action="store_false",
        help="skip the production pass (connection kinds, open loop, scale-out, hot project on two processes)",
    )
    parser.add_argument("--log-format", choices=("json", "text"), default="json", help="the service's LOG_FORMAT")
    parser.add_argument("--no-metrics", action="store_true", help="run the service without METRICS_PORT")
    parser.add_argument("--memory-receipts", type=int, default=20_000, help="receipts written to measure memory")
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="skip the floor (bench/floor.py)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of unrecorded load per scenario and target")
    parser.add_argument("--from-json", help="do not run: render the report of a saved --json file again")
    parser.add_argument("--note", action="append", default=[], help="a line for RESULTS.md (repeatable)")
    parser.add_argument("--check-targets", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup = 1, 2.0, 1.0
        args.memory_receipts = min(args.memory_receipts, 2000)
    elif args.out is None:
        args.out = str(BENCH / "RESULTS.md")
    args.scenario_list = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.scenario_list) - {*SCENARIOS, *ALONE_SCENARIOS}
    if unknown or not args.scenario_list:
        parser.error(
            f"--scenarios: unknown {sorted(unknown)}; choose from {', '.join(SCENARIOS)}, "
            f"{MEMORY_SCENARIO} or {SCAN_SCENARIO}"
        )
    for alone in ALONE_SCENARIOS:
        if alone in args.scenario_list and len(args.scenario_list) > 1:
            parser.error(f"--scenarios {alone} runs alone")
    if args.rounds < 1 or args.seconds <= 0 or args.connections < 1:
        parser.error("--rounds, --seconds and --connections must be positive")
    return args


def cpu_plan(mode: str) -> tuple[str | None, str | None, str | None]:
    """(server cpus, redis cpus, generator cpus) or Nones when not pinning."""
    if mode == "off" or shutil.which("taskset") is None:
        return None, None, None
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return None, None, None
    if len(cores) < 2:
        return None, None, None
    server, redis_cpu = str(cores[0]), str(cores[1])
    generator = ",".join(str(c) for c in cores[2:]) if len(cores) > 2 else redis_cpu
    return server, redis_cpu, generator


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.scenario_list == [MEMORY_SCENARIO]:
        return run_memory_only(args)
    if args.scenario_list == [SCAN_SCENARIO]:
        from bench.scan import main as scan_main

        return scan_main()
    if args.from_json:
        report = Report(**orjson.loads(Path(args.from_json).read_bytes()))
        report.setup_notes += [f"Note: {text}" for text in args.note]
    else:
        try:
            report = run(args)
        except HarnessError as exc:
            log(f"HARNESS FAILURE: {exc}")
            return 2
        report.busy_after = cpu_busy_share(0.5 if args.quick else 2.0)
        report.load_after = loadavg()
    text = report.markdown()
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        log(f"wrote {args.out}")
    if args.json_out:
        Path(args.json_out).write_bytes(orjson.dumps(dataclasses.asdict(report), option=orjson.OPT_INDENT_2))
        log(f"wrote {args.json_out}")
    if args.check_targets and not all(row[4] for row in report.issue_targets()):
        return 1
    return 0


def run(args: argparse.Namespace) -> Report:
    started_at = time.monotonic()
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python -m bench", *args.argv]).strip()
    machine = machine_info()
    generator = args.generator
    if generator == "auto":
        generator = "wrk" if machine["wrk"] else "python"
    elif generator == "wrk" and not machine["wrk"]:
        raise HarnessError("--generator wrk: wrk is not installed")
    server_cpus, redis_cpus, generator_cpus = cpu_plan(args.pin)
    load_before = loadavg()
    busy_before = cpu_busy_share(0.5 if args.quick else 2.0)
    log(f"generator {generator}; pinning server={server_cpus} redis={redis_cpus} generator={generator_cpus}")
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-"))
    procs: list[Proc] = []
    try:
        redis_proc, redis_url = start_redis(tmp, redis_cpus, args.aof_always)
        procs.append(redis_proc)
        receipt_root = new_receipt_root(tmp)
        projects = create_projects(redis_url, "bench", PROJECTS)
        hot = create_projects(redis_url, "bench-hot", 1)

        # Fixtures for read/verify, and the memory measurement, through the real issue path.
        memory, issued = measure_memory(redis_url, receipt_root, projects, max(args.memory_receipts, 500))

        setup = Setup(tmp, generator, args.connections, args.wrk_threads, server_cpus, generator_cpus)
        rng = secrets.SystemRandom()
        sample = rng.sample(issued, min(ITEMS_SAMPLE, len(issued)))
        setup.item_lists = {
            "create32": [p["api_key"] for p in projects],
            "hot": [hot[0]["api_key"]],
            "read": [i.receipt_id for i in sample],
            "verify": [f"{projects[i.project_index]['api_key']} {i.receipt_id} {i.input_hash}" for i in sample],
        }
        for name, lines in setup.item_lists.items():
            path = tmp / f"items-{name}.txt"
            path.write_text("\n".join(lines) + "\n")
            setup.items[name] = path

        service_port = free_port()
        metrics_port = None if args.no_metrics else free_port()
        env = base_env()
        env.update(
            {
                "REDIS_URL": redis_url,
                "RECEIPT_ROOT_KEY": receipt_root,
                "LIMITS": orjson.dumps(RAISED_LIMITS).decode(),
                "LOG_FORMAT": args.log_format,
                "SERVICE_ENV": "bench",
            }
        )
        if metrics_port is not None:
            env["METRICS_PORT"] = str(metrics_port)
        service_cmd = [
            sys.executable, "service.py", "serve", "--host", "127.0.0.1", "--port", str(service_port), "--workers", "1",
        ]  # fmt: skip
        service = Proc.start("service", pinned(service_cmd, server_cpus), env=env, log_path=tmp / "service.log")
        procs.append(service)
        wait_http(service, f"http://127.0.0.1:{service_port}/health")
        sizes = sample_sizes(service_port, setup, sample[0])

        ceiling_port = free_port()
        ceiling_env = base_env()
        ceiling_env["BENCH_CEILING_SIZES"] = orjson.dumps(sizes).decode()
        ceiling = Proc.start(
            "ceiling",
            pinned([sys.executable, "-m", "bench.ceiling", "--port", str(ceiling_port)], server_cpus),
            env=ceiling_env,
            log_path=tmp / "ceiling.log",
        )
        procs.append(ceiling)
        wait_http(ceiling, f"http://127.0.0.1:{ceiling_port}/health")
        targets = [Target("service", service_port), Target("ceiling", ceiling_port)]
        if args.floor:
            floor_port = free_port()
            floor_cmd = [sys.executable, "-m", "bench.floor", "--port", str(floor_port), "--redis-url", redis_url]
            floor = Proc.start("floor", pinned(floor_cmd, server_cpus), env=base_env(), log_path=tmp / "floor.log")
            procs.append(floor)
            wait_http(floor, f"http://127.0.0.1:{floor_port}/health")
            seed_floor(floor_port, setup, FLOOR_ITEMS if not args.quick else 50)
            targets.append(Target("floor", floor_port))

        log("measuring the generator's own ceiling")
        gen_ceiling = generator_ceiling(setup, 2.0 if args.quick else 4.0)
        log(f"generator ceiling {gen_ceiling['rps']:.0f} rps")

        empty = run_pass(setup, targets, args.scenario_list, args.rounds, args.seconds, args.warmup)
        targets = targets[:2]  # the floor stores nothing of the service's: once is enough

        production = None
        if args.production:
            log("production pass: connection kinds, open loop, scale-out, hot project on two processes")
            production = run_production(
                args, tmp, receipt_root, orjson.dumps(RAISED_LIMITS).decode(), PROJECTS, generator
            )

        preloaded = None
        preload_info = None
        if args.preload > 0:
            more = create_projects(redis_url, "bench-preload", PRELOAD_PROJECTS)
            before = used_memory(redis_url)
            log(f"preloading {args.preload:,} receipts")
            _, secs = preload(redis_url, receipt_root, more, args.preload, nonce=secrets.token_hex(8), processes=2)
            after = used_memory(redis_url)
            preload_info = {
                "count": args.preload,
                "projects": PRELOAD_PROJECTS,
                "seconds": secs,
                "processes": 2,
                "delta": after - before,
                "bytes_per_receipt": (after - before) / args.preload,
                "used_after": after,
            }
            log(f"preloaded in {secs:.0f} s: {preload_info['bytes_per_receipt']:.0f} bytes per receipt")
            preloaded = run_pass(setup, targets, args.scenario_list, args.rounds, args.seconds, args.warmup)

        for proc in procs:
            if not proc.alive():
                raise HarnessError(f"{proc.name} died during the run:\n{proc.tail()}")
        notes = [
            f"Redis: own redis-server on a loopback port, {redis_settings(redis_url)} "
            + (
                "(the production durability setting)."
                if args.aof_always
                else "(no persistence: production runs appendonly yes + appendfsync always; "
                "measure that with `--aof-always`)."
            ),
            "Service: `python service.py serve --workers 1` with REDIS_URL, RECEIPT_ROOT_KEY (a `file:` root made "
            "for the run), LIMITS raised to "
            "10^9 (every limit and quota check still runs), "
            f"LOG_FORMAT={args.log_format} (one log line per request, to a file), "
            + ("metrics on (METRICS_PORT set, as in production)." if metrics_port else "metrics off."),
            "Ceiling: bench/ceiling.py, a bare Sanic app (1 worker, same routes and status codes, parses the JSON "
            "body, answers a JSON body of the service's size; no Redis, no signing).",
            *(
                [
                    "Floor: bench/floor.py, the least each route must do on this stack (parse, hash the key, "
                    "one Redis round trip, build, hash and sign the receipt and its attestation, or resolve its "
                    "key in a registry and verify its signature; no limits, "
                    "idempotency, chain, validation, log line or metrics), run with the empty store only: its "
                    "ratio is the best any implementation could reach here."
                ]
                if args.floor
                else []
            ),
            f"Load: {args.connections} keep-alive connections, closed loop, {args.rounds} round(s) of "
            f"{args.seconds:g} s per scenario and target after {args.warmup:g} s of warm-up, service and ceiling "
            "alternating (order reversed every other round). Every create sends input/output hashes never sent "
            "before (a new receipt, not a replay); create32 picks one of 32 projects' keys at random per request, "
            f"hot always uses one key; read and verify pick among {len(sample):,} receipts at random.",
            (
                f"CPU pinning (taskset): service and ceiling on CPU {server_cpus}, redis on CPU {redis_cpus}, "
                f"generator on CPU {generator_cpus}."
                if server_cpus
                else "No CPU pinning."
            ),
        ]
        notes += [f"Note: {text}" for text in args.note]
        return Report(
            started=started,
            command=command,
            machine=machine,
            setup_notes=notes,
            load_before=load_before,
            load_after="",
            busy_before=busy_before,
            busy_after=float("nan"),  # measured by main() once every process of ours has stopped
            generator=generator,
            generator_ceiling=gen_ceiling,
            sizes=sizes,
            memory=memory,
            empty=empty,
            preloaded=preloaded,
            preload_info=preload_info,
            quick=args.quick,
            duration_s=time.monotonic() - started_at,
            production=production,
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def seed_floor(port: int, setup: Setup, count: int) -> None:
    """Receipts for the floor's read and verify runs, issued by the floor itself (it keeps its
    own records, under ``floor:``)."""
    key = setup.item_lists["create32"][0]
    reads, verifies = [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
        for _ in range(count):
            input_hash = f"sha256:{secrets.token_hex(32)}"
            body = {"input_hash": input_hash, "output_hash": f"sha256:{'b' * 64}", "tags": {"stage": "bench"}}
            created = client.post("/v1/receipts", json=body, headers={"Authorization": f"Bearer {key}"})
            if created.status_code != 201:
                raise HarnessError(f"floor create answered {created.status_code}: {created.text[:300]}")
            receipt_id = orjson.loads(created.content)["receipt"]["receipt_id"]
            reads.append(receipt_id)
            verifies.append(f"{key} {receipt_id} {input_hash}")
    for scenario, lines in (("read", reads), ("verify", verifies)):
        path = setup.tmp / f"items-floor-{scenario}.txt"
        path.write_text("\n".join(lines) + "\n")
        setup.own_items[("floor", scenario)] = (path, lines)


def sample_sizes(port: int, setup: Setup, fixture: Any) -> dict[str, int]:
    """One request of each kind to the service: checks it works, and measures its body sizes."""
    base = f"http://127.0.0.1:{port}"
    key = setup.item_lists["create32"][0]
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(timeout=10.0) as client:
        nonce = secrets.token_hex(8)
        body = {
            "input_hash": f"sha256:{nonce}{'0' * 48}",
            "output_hash": f"sha256:{nonce}{'1' * 48}",
            "receipt_kind": "release",
            "tags": {"workflow_stage": "build"},
        }
        created = client.post(base + "/v1/receipts", headers=headers, content=orjson.dumps(body))
        read = client.get(base + f"/v1/receipts/{fixture.receipt_id}")
        verify_key = setup.item_lists["verify"][0].split()[0]
        verified = client.post(
            base + "/v1/verify",
            headers={**headers, "Authorization": f"Bearer {verify_key}"},
            content=orjson.dumps(
                {
                    "receipt_id": setup.item_lists["verify"][0].split()[1],
                    "input_hash": setup.item_lists["verify"][0].split()[2],
                }
            ),
        )
    for name, response, status in (("create", created, 201), ("read", read, 200), ("verify", verified, 200)):
        if response.status_code != status:
            raise HarnessError(f"service {name} answered {response.status_code}, not {status}: {response.text[:500]}")
    if not orjson.loads(verified.content).get("ok"):
        raise HarnessError(f"service verify of a fixture receipt is not ok: {verified.text[:500]}")
    return {"create": len(created.content), "read": len(read.content), "verify": len(verified.content)}
