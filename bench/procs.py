"""Child processes of the benchmark: start, wait for, stop (by process group), log."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
SERVICE_VARIABLES = (
    "REDIS_URL", "RECEIPT_ROOT_KEY", "RECEIPT_KEY_LIFETIME", "LIMITS", "PUBLIC_BASE_URL", "SERVICE_BASE_URL",
    "SERVICE_API_KEY", "SERVICE_ENV",
    "SIGNING_KEYS",  # retired (a service refuses to start with it): never passed on from the caller's environment
    "HOST", "PORT", "WEB_WORKERS", "RETENTION_DAYS", "JOBS_REDIS_URL", "REDIS_CLUSTER", "STORE_ACK", "LOG_FORMAT",
    "METRICS_HOST", "METRICS_PORT", "METRICS_TOKEN", "PROMETHEUS_MULTIPROC_DIR", "REAL_IP_HEADER", "PROXIES_COUNT",
    "PAYMENT_WEBHOOK_SECRET", "HUMAN_CHECK_SECRET", "HUMAN_CHECK_SITE_KEY", "BENCH_CEILING_SIZES", "LOG_SIGNING_KEY",
    "LOG_ORIGIN", "LOG_WITNESS_POLICY", "LOG_WITNESS_TIMEOUT_MS", "LOG_TSA_URLS", "LOG_TSA_INTERVAL_S", "LOG_TSA_ROOTS",
    "LOG_STORE", "LOG_MAX_PENDING", "LOG_PUBLIC_URL", "LOG_FAILPOINTS", "LOG_STALL_S",
)  # fmt: skip


class HarnessError(RuntimeError):
    """The benchmark could not run (a process failed, a scenario got no answer at all)."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- processes


@dataclass
class Proc:
    """A child process in its own session (so its workers can be stopped by group id)."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, name: str, cmd: Sequence[str], *, env: dict[str, str], log_path: Path) -> Proc:
        with open(log_path, "wb") as out:
            process = subprocess.Popen(  # noqa: S603 - our own command lines
                list(cmd), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return cls(name, process, log_path)

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # a worker that outlived its manager


def pinned(cmd: Sequence[str], cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus, *cmd] if cpus else list(cmd)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_http(proc: Proc, url: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            if not proc.alive():
                raise HarnessError(f"{proc.name} exited early ({proc.process.returncode}):\n{proc.tail()}")
            if time.monotonic() > deadline:
                raise HarnessError(f"{proc.name} did not answer {url} within {timeout:.0f} s:\n{proc.tail()}")
            time.sleep(0.1)
