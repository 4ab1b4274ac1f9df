"""A stop during start-up, with and without web/sanic_fixes.py's worker-manager fixes.

    python -m bench.early_stop DIR_A DIR_B [--trials 8] [--workers 2]

Each trial starts ``service.py serve --workers N`` from a checkout (a loopback Redis, so
Sanic's worker manager runs), waits for its "listening on" line (the manager starts next),
sends SIGTERM after a random delay inside the workers' start-up (``DELAYS_S``), and waits at
most ``STOP_WAIT_S`` for the process to end: it exits 0 (a clean stop), ends another way (a
status, or killed by the signal itself: -15), or hangs (then its group is killed). A and B
alternate, trial by trial, with the same delays. A and B are directories holding a checkout:
one that installs the fixes and one that does not (``sanic_fixes.install()`` left out of
cli/serve.py). Bounded: ``trials`` x 2 starts, each at most ``STOP_WAIT_S`` after its signal.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import new_receipt_root
from bench.procs import base_env, free_port
from bench.redis_kinds import start_kind

READY_LINE = b"listening on"
"""What ``serve`` logs just before Sanic's worker manager starts its workers."""
READY_WAIT_S = 60.0
DELAYS_S = (0.0, 2.0)
"""SIGTERM this long after that line (uniform): while the workers start and before they
acknowledge (each imports the app first: a second or more on this machine)."""
STOP_WAIT_S = 15.0


def _trial(checkout: Path, env: dict[str, str], delay_s: float, workers: int, log_path: Path) -> str:
    port = free_port()
    cmd = [sys.executable, "service.py", "serve", "--port", str(port), "--workers", str(workers)]
    start = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as out:
        process = subprocess.Popen(  # noqa: S603 - our own command line
            cmd, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + READY_WAIT_S
    while READY_LINE not in log_path.read_bytes()[start:] and process.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    time.sleep(delay_s)
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        code = None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # a hung manager, or a worker it left behind
    process.wait()
    if code is None:
        return "hung"
    return "exit 0" if code == 0 else f"exit {code}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261127)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    outcomes: dict[str, collections.Counter[str]] = {"A": collections.Counter(), "B": collections.Counter()}
    with tempfile.TemporaryDirectory(prefix="eps-early-stop-") as name:
        tmp = Path(name)
        redis = start_kind("tcp", tmp, None, aof_always=False)
        try:
            env = base_env() | redis.service_env() | {"RECEIPT_ROOT_KEY": new_receipt_root(tmp)}
            env.pop("PYTHONPATH", None)  # each side imports its own checkout's package
            for trial in range(1, args.trials + 1):
                delay = rng.uniform(*DELAYS_S)
                for side, checkout in (("A", args.a.resolve()), ("B", args.b.resolve())):
                    outcome = _trial(checkout, env, delay, args.workers, tmp / f"serve-{side}.log")
                    outcomes[side][outcome] += 1
                    print(f"trial {trial} {side}: SIGTERM after {delay:.2f} s: {outcome}", flush=True)
        finally:
            redis.stop()
    for side in ("A", "B"):
        print(f"{side} ({args.trials} stops): " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes[side].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
