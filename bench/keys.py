"""What keys in a token cost: ``python -m bench.keys`` (about 12 minutes; ``--quick``: about 2).

Both phases run on one plain-TCP Redis with ``appendfsync always`` (production's setting),
services with fly.toml's web worker count, 32 projects, closed loop (wrk if installed), 32
connections; the two services of a phase alternate round by round (the order reversed every
other round), each run right after an unrecorded 3-s warm-up; a ratio is the median of the
rounds' ratios. A SoftHSM2 token (Debian ``softhsm2``) is made in the run's directory.

``roots`` creates/s with the receipt root in the token ÷ with a ``file:`` root, both with
   ``RECEIPT_KEY_LIFETIME=30`` and rounds of at least 60 s, so that every worker certifies a
   new key (a token signature, ``signing-key`` ``KEY_STATE_S`` reads) at least twice per
   round; the certificates made during each run are counted from the registry.
``log`` creates/s with the log on ÷ off, the log's key in the token (``LOG_SIGNING_KEY`` a
   ``pkcs11:`` URI: every checkpoint signed inside the token), the integrator in one
   ``service.py worker``.

Prints a markdown section (bench/RESULTS.md holds it) and a JSON line. Loopback only; every
phase is bounded in time and stops by itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import redis

from bench import log as log_bench
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
from bench.procs import REPO, HarnessError, base_env, log
from bench.production import ServiceSpec, fly_workers
from bench.redis_kinds import start_kind
from execution_proof.kv import keys as kv_keys
from execution_proof.kv.keys import LogIdentity

PHASES = ("roots", "log")
PROJECTS = 32
WARMUP_S = 3.0
PIN = "4321"
MODULES = ("/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so")


class Token:
    """A SoftHSM2 token in ``folder``: the environment its users need, and URIs."""

    def __init__(self, folder: Path) -> None:
        module = next((m for m in MODULES if Path(m).exists()), None)
        util = shutil.which("softhsm2-util")
        if module is None or util is None:
            raise HarnessError("SoftHSM2 is not installed (Debian: apt-get install softhsm2)")
        self.module = module
        (folder / "tokens").mkdir(parents=True)
        conf = folder / "softhsm2.conf"
        conf.write_text(f"directories.tokendir = {folder / 'tokens'}\nobjectstore.backend = file\n")
        self.env = {"SOFTHSM2_CONF": str(conf), "PKCS11_MODULE": module}
        self.pin_file = folder / "pin"
        fd = os.open(self.pin_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(PIN + "\n")
        done = subprocess.run(  # noqa: S603 - a fixed command line
            [util, "--init-token", "--free", "--label", "bench", "--pin", PIN, "--so-pin", "87654321"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(f"softhsm2-util --init-token failed: {done.stderr}")

    def uri(self, label: str) -> str:
        return f"pkcs11:token=bench;object={label}?pin-source=file:{quote(str(self.pin_file))}"

    def make(self, *verb: str) -> str:
        """``service.py VERB…`` with the token's environment: its stdout."""
        done = subprocess.run(  # noqa: S603 - our own command line
            [sys.executable, "service.py", *verb],
            cwd=REPO,
            env={**base_env(), **self.env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(f"{' '.join(verb[:3])} failed: {done.stderr}")
        return done.stdout


def certificates(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.hlen(kv_keys.signing_keys_key("certificates")))
    finally:
        client.close()


def alternate(
    setup: Setup, targets: list[Target], rounds: int, seconds: float, redis_url: str
) -> dict[str, list[dict[str, Any]]]:
    """Closed-loop rounds of ``create32``, the targets alternating; each run's figures with
    the certificates the registry gained during it."""
    runs: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
    for number in range(rounds):
        for target in targets if number % 2 == 0 else list(reversed(targets)):
            run_load(setup, target, "create32", WARMUP_S)
            before = certificates(redis_url)
            result = run_load(setup, target, "create32", seconds)
            result["certified"] = certificates(redis_url) - before
            result["refused"] = sum(n for code, n in result["statuses"].items() if not 200 <= int(code) < 300)
            runs[target.name].append(result)
            log(
                f"round {number + 1} {target.name}: {result['rps']:.0f} creates/s p99 {result['p99_ms']:.1f} ms, "
                f"{result['certified']} keys certified during it, {result['refused']} answers not 2xx"
            )
    return runs


def setup_for(tmp: Path, keys: list[str]) -> Setup:
    setup = Setup(tmp, "wrk" if shutil.which("wrk") else "python", 32, 2, None, None)
    items = tmp / "items.txt"
    items.write_text("\n".join(keys) + "\n")
    setup.items["create32"], setup.item_lists["create32"] = items, keys
    return setup


def ratio_of(runs: dict[str, list[dict[str, Any]]], top: str, bottom: str) -> dict[str, Any]:
    ratios = [a["rps"] / b["rps"] for a, b in zip(runs[top], runs[bottom], strict=True)]
    return {
        "ratio": statistics.median(ratios),
        "ratio_rounds": ratios,
        **{f"rounds_{name}": [r["rps"] for r in rs] for name, rs in runs.items()},
        **{f"p99_{name}_ms": [r["p99_ms"] for r in rs] for name, rs in runs.items()},
        **{f"certified_{name}": [r["certified"] for r in rs] for name, rs in runs.items()},
        **{f"refused_{name}": [r["refused"] for r in rs] for name, rs in runs.items()},
    }


def roots_phase(tmp: Path, token: Token, rounds: int, seconds: float) -> dict[str, Any]:
    token_root = orjson.loads(token.make("signing-key", "root", "new", "--signer", token.uri("receipt-root")))
    file_root = new_receipt_root(tmp)
    redis_kind = start_kind("tcp", tmp, None, True)
    limits = orjson.dumps(RAISED_LIMITS).decode()
    lifetime = {"RECEIPT_KEY_LIFETIME": "30"}
    by_file = ServiceSpec(file_root, limits, "json", False, tmp)
    by_token = ServiceSpec(token_root["signer"], limits, "json", False, tmp)
    try:
        keys = [p["api_key"] for p in create_projects(redis_kind.url, "bench-keys", PROJECTS)]
        ports = {
            "file": by_file.start("root-file", redis_kind, fly_workers(), lifetime),
            "token": by_token.start("root-token", redis_kind, fly_workers(), {**lifetime, **token.env}),
        }
        runs = alternate(
            setup_for(tmp, keys), [Target(n, p) for n, p in ports.items()], rounds, seconds, redis_kind.url
        )
        return {"roots": ratio_of(runs, "token", "file"), "roots_seconds": seconds}
    finally:
        by_file.stop()
        by_token.stop()
        redis_kind.stop()


def log_phase(tmp: Path, token: Token, rounds: int, seconds: float) -> dict[str, Any]:
    uri, vkey = token.make("log-key", "new", "--origin", log_bench.ORIGIN, "--signer", token.uri("log")).splitlines()
    root = new_receipt_root(tmp)
    store = tmp / "store"
    redis_kind = start_kind("tcp", tmp, None, True)
    services = ServiceSpec(root, orjson.dumps(RAISED_LIMITS).decode(), "json", False, tmp)
    worker = None
    try:
        keys = [p["api_key"] for p in create_projects(redis_kind.url, "bench-keys-log", PROJECTS)]
        log_env = {
            "LOG_SIGNING_KEY": uri,
            "LOG_ORIGIN": log_bench.ORIGIN,
            "LOG_STORE": log_bench.store_url(store),
            **token.env,
        }
        ports = {
            "on": services.start("log-on", redis_kind, fly_workers(), log_env),
            "off": services.start("log-off", redis_kind, fly_workers()),
        }
        worker = log_bench.start_worker(tmp, redis_kind.url, root, "worker", uri, store, token.env)
        runs = alternate(
            setup_for(tmp, keys), [Target(n, p) for n, p in ports.items()], rounds, seconds, redis_kind.url
        )
        if not worker.alive():
            raise HarnessError(f"the worker died:\n{worker.tail()}")
        identity = LogIdentity(log_bench.ORIGIN, vkey)
        client = redis.Redis.from_url(redis_kind.url)
        try:
            published = int(client.get(kv_keys.log_size_key(identity)) or 0)
        finally:
            client.close()
        return {"log": ratio_of(runs, "on", "off"), "log_seconds": seconds, "log_published_size": published}
    finally:
        if worker is not None:
            worker.stop()
        services.stop()
        redis_kind.stop()


def render(r: dict[str, Any]) -> str:
    lines = [
        "### Keys in a token (`python -m bench.keys`)",
        "",
        f"{r['machine'].get('cpu', '?')}, {r['workers']} web workers, load before {r['loadavg_before']}, "
        f"started {r['started']}, took {r['took_s'] / 60:.1f} min.",
        "",
        "| ratio | median | rounds (creates/s) | keys certified per run |",
        "|---|---|---|---|",
    ]
    if "roots" in r:
        x = r["roots"]
        lines.append(
            f"| creates/s, SoftHSM2 root ÷ `file:` root (`RECEIPT_KEY_LIFETIME=30`, {r['roots_seconds']:.0f}-s rounds) "
            f"| **{x['ratio']:.3f}** | token {', '.join(f'{v:.0f}' for v in x['rounds_token'])}; "
            f"file {', '.join(f'{v:.0f}' for v in x['rounds_file'])} "
            f"| token {x['certified_token']}; file {x['certified_file']} |"
        )
    if "log" in r:
        x = r["log"]
        lines.append(
            f"| creates/s, log on ÷ off, the log key in SoftHSM2 ({r['log_seconds']:.0f}-s rounds) "
            f"| **{x['ratio']:.3f}** | on {', '.join(f'{v:.0f}' for v in x['rounds_on'])}; "
            f"off {', '.join(f'{v:.0f}' for v in x['rounds_off'])} | (published size {r['log_published_size']}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.keys", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per phase")
    parser.add_argument("--seconds", type=float, default=60.0, help="each round (at least 60 for the roots phase)")
    parser.add_argument("--only", default=",".join(PHASES), help=f"phases to run, of {','.join(PHASES)}")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 10 s per phase")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 1, 10.0
    phases = [p.strip() for p in args.only.split(",") if p.strip()]
    if set(phases) - set(PHASES):
        parser.error(f"unknown phases: choose among {', '.join(PHASES)}")
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-keys-"))
    report: dict[str, Any] = {
        "phases": phases,
        "machine": machine_info(),
        "loadavg_before": loadavg(),
        "cpu_busy_before": cpu_busy_share(2.0),
        "workers": fly_workers(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rounds": args.rounds,
    }
    began = time.monotonic()
    try:
        token = Token(tmp / "softhsm")
        (tmp / "roots").mkdir()
        (tmp / "log").mkdir()
        if "roots" in phases:
            report.update(roots_phase(tmp / "roots", token, args.rounds, args.seconds))
        if "log" in phases:
            report.update(log_phase(tmp / "log", token, args.rounds, args.seconds))
    except HarnessError as exc:
        log(f"HARNESS FAILURE: {exc} (the processes' logs are kept in {tmp})")
        return 2
    shutil.rmtree(tmp, ignore_errors=True)
    report["took_s"] = time.monotonic() - began
    report["loadavg_after"] = loadavg()
    print(render(report))
    print("BENCHJSON " + orjson.dumps(report).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
