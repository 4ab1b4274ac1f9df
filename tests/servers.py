"""Real service processes for tests: ``python service.py serve`` as a subprocess, and the CLI.

``ServiceProcess`` starts the server on a free loopback port with a chosen environment,
captures stdout/stderr to files (so a test can read the printed demo key), waits until
``GET /health`` answers and stops it (SIGTERM, then SIGKILL of its own process group).
``ServicePool`` owns several and stops them all; the ``service_factory`` fixture hands one
to a test: a module declares ``service_factory = service_pool_fixture()``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson
import pytest
import redis

from tests.conftest import REPO, free_port
from tests.receipt_keys import TEST_ROOT_ENV

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
CLI_TIMEOUT_S = 60.0
SERVICE_PY = (sys.executable, "service.py")
"""How tests run the command line in a clone; an installed copy runs ``python -m execution_proof``."""
POLL_S = 0.05

# Variables that would change what a started process does; each test states its own.
CONFIG_VARIABLES = (
    "REDIS_URL",
    "RECEIPT_ROOT_KEY",
    "RECEIPT_KEY_LIFETIME",
    "SIGNING_KEYS",  # retired (refused at start): never passed on from the runner's environment
    "LIMITS",
    "PUBLIC_BASE_URL",
    "SERVICE_BASE_URL",
    "SERVICE_API_KEY",
    "SERVICE_ENV",
    "HOST",
    "PORT",
    "WEB_WORKERS",
    "RETENTION_DAYS",
    "JOBS_REDIS_URL",
    "LOG_SIGNING_KEY",
    "LOG_ORIGIN",
    "LOG_STORE",
    "LOG_PUBLIC_URL",
    "LOG_MAX_PENDING",
    "LOG_FAILPOINTS",
    "LOG_STALL_S",
    "LOG_WITNESS_POLICY",
    "LOG_TSA_URLS",
    "REDIS_CLUSTER",
    "METRICS_PORT",
    "METRICS_HOST",
    "METRICS_TOKEN",
    "LOG_FORMAT",
    "PROMETHEUS_MULTIPROC_DIR",
)

# Tests send bursts from one address; the checks still run (docs/limits.md), just with room.
RAISED_LIMITS = {
    "plans": {name: {"per_minute": 1_000_000, "monthly": 10_000_000} for name in ("free", "basic", "pro")},
    "ip_per_minute": {
        "public_key": 1_000_000,
        "get_receipt": 1_000_000,
        "unauthenticated": 1_000_000,
        "authenticated": 1_000_000,
        "log_tiles": 1_000_000,
    },
}


def clean_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The test runner's environment without service configuration, plus ``extra``.

    A ``None`` value in ``extra`` leaves the variable unset.
    """
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARIABLES}
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


class PortTaken(Exception):
    """The port ``free_port`` gave was taken by another process before the server bound it."""


class ServiceProcess:
    """One ``python service.py serve`` process on a free loopback port.

    ``receipt_root``: the variables that name its receipt root (by default ``TEST_ROOT``
    through ``RECEIPT_ROOT_KEY=env:…``); ``None``: no ``RECEIPT_ROOT_KEY`` (embedded mode makes
    an ephemeral root and prints a demo key; with ``REDIS_URL`` the server refuses to start).
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        workers: int = 1,
        redis_url: str | None = None,
        receipt_root: Mapping[str, str] | None = TEST_ROOT_ENV,
        limits: Mapping[str, Any] | None = RAISED_LIMITS,
        env: Mapping[str, str | None] | None = None,
        app_dir: Path = REPO,
        entry: Sequence[str] = SERVICE_PY,
    ) -> None:
        self.port = free_port()
        self.app_dir = app_dir
        """Where the command runs (the repository, or the image's installed copy)."""
        self.entry = list(entry)
        """The command before the verb: ``python service.py``, or ``python -m execution_proof``."""
        self.workers = workers
        self.log_dir = log_dir
        self.stdout_path = log_dir / f"service-{self.port}.stdout"
        self.stderr_path = log_dir / f"service-{self.port}.stderr"
        extra: dict[str, str | None] = {
            "REDIS_URL": redis_url,
            **(receipt_root or {"RECEIPT_ROOT_KEY": None}),
            "LIMITS": orjson.dumps(limits).decode() if limits is not None else None,
        }
        extra.update(env or {})
        self.env = clean_env(extra)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            *self.entry, "serve",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--workers", str(self.workers),
        ]  # fmt: skip

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def _failure(self, why: str) -> str:
        return f"{why}\n--- stdout ---\n{self.stdout()[-4000:]}\n--- stderr ---\n{self.stderr()[-4000:]}"

    def start(self, timeout: float = START_TIMEOUT_S) -> ServiceProcess:
        """Start and wait until ``GET /health`` answers 200; fail with the captured output.
        A port another process took between ``free_port`` and the bind (tests that start many
        processes at once race for ports) is given up for another, up to three times."""
        for _ in range(3):
            try:
                return self._start(timeout)
            except PortTaken:
                self.port = free_port()
                self.stdout_path = self.log_dir / f"service-{self.port}.stdout"
                self.stderr_path = self.log_dir / f"service-{self.port}.stderr"
        return self._start(timeout)

    def _start(self, timeout: float) -> ServiceProcess:
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # A session of its own, so stop() can reach the worker processes by group id.
            self.process = subprocess.Popen(
                self.command(), cwd=self.app_dir, env=self.env, stdout=out, stderr=err, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1.0) as client:
            while not (self._answers_health(client) and self._workers_ready()):
                if self.process.poll() is not None:
                    if f"127.0.0.1:{self.port} is already in use" in self.stderr():
                        raise PortTaken(self.port)
                    pytest.fail(self._failure(f"service exited early with status {self.process.returncode}"))
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(self._failure(f"service was not ready within {timeout:.0f} s"))
                time.sleep(POLL_S)
        return self

    def _answers_health(self, client: httpx.Client) -> bool:
        try:
            return client.get(self.base_url + "/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _workers_ready(self) -> bool:
        """Every worker has told Sanic's manager it is up (the manager logs one line per worker).

        /health answers as soon as one worker serves; a SIGTERM before every worker has
        acknowledged start-up leaves Sanic's manager waiting ~30 s, so start() waits for both.
        """
        return len(re.findall(r"Worker ready", self.stdout() + self.stderr())) >= self.workers

    def wait_for_output(
        self, pattern: str, *, count: int = 1, timeout: float = 10.0, required: bool = True
    ) -> list[re.Match[str]]:
        """Poll stdout+stderr until ``pattern`` matches ``count`` times (or fail/return at the deadline)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            matches = list(regex.finditer(self.stdout() + "\n" + self.stderr()))
            if len(matches) >= count:
                return matches
            if time.monotonic() > deadline:
                if required:
                    pytest.fail(self._failure(f"{pattern!r} not printed {count} time(s) within {timeout:.0f} s"))
                return matches
            time.sleep(POLL_S)

    def request_stop(self) -> None:
        """Send SIGTERM without waiting (``stop`` then waits), so several servers stop in parallel."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the server; SIGKILL its process group if it (or a worker) outlives ``timeout``."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            self.request_stop()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group(process.pid)
                process.wait(timeout)
        deadline = time.monotonic() + timeout
        while _group_alive(process.pid):
            if time.monotonic() > deadline:
                self._kill_group(process.pid)
                break
            time.sleep(POLL_S)

    @staticmethod
    def _kill_group(pgid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ServicePool:
    """Starts service processes on demand and stops every one of them at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[ServiceProcess] = []

    def start(self, **options: Any) -> ServiceProcess:
        service = ServiceProcess(self.log_dir, **options)
        self.started.append(service)
        return service.start()

    def __enter__(self) -> ServicePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for service in self.started:
            service.request_stop()
        for service in self.started:
            service.stop()
        self.started.clear()


def service_pool_fixture(scope: Literal["function", "module", "session"] = "function") -> Any:
    """A pytest fixture (of ``scope``) yielding a ``ServicePool`` whose servers stop at teardown.

    In a test module: ``service_factory = service_pool_fixture()``, then
    ``service_factory.start(workers=..., redis_url=...)`` in a test.
    """

    @pytest.fixture(scope=scope)
    def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServicePool]:
        with ServicePool(tmp_path_factory.mktemp("services")) as started:
            yield started

    return pool


def run_cli(
    *args: str,
    env: Mapping[str, str | None] | None = None,
    timeout: float = CLI_TIMEOUT_S,
    app_dir: Path = REPO,
    entry: Sequence[str] = SERVICE_PY,
) -> subprocess.CompletedProcess[str]:
    """``python service.py ARGS`` (or ``entry ARGS``) in ``app_dir`` with a clean environment plus ``env``."""
    return subprocess.run(
        [*entry, *args],
        cwd=app_dir,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """``server`` (bound to loopback) answering from a thread: its base URL; shut down after."""
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()  # shutdown() waits a poll
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def verify_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python service.py verify ARGS`` in the repository, as a user runs it."""
    return subprocess.run(
        [sys.executable, "service.py", "verify", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def create_key_cli(redis_url: str, *, project: str = "tests", plan: str = "pro") -> dict[str, Any]:
    """``service.py keys create`` against ``redis_url``: the printed JSON (api_key, project_id, ...).

    The project is named ``project`` plus a random suffix: names are unique in a store, and
    tests share one Redis.
    """
    name = f"{project}-{secrets.token_hex(4)}"
    done = run_cli("keys", "create", "--project", name, "--plan", plan, env={"REDIS_URL": redis_url})
    assert done.returncode == 0, f"keys create failed ({done.returncode}): {done.stderr}"
    created: dict[str, Any] = orjson.loads(done.stdout)
    return created


def raw_json_member(body: bytes, name: str) -> bytes:
    """The exact bytes of the top-level member ``name`` of a JSON object (for byte-for-byte checks)."""
    text = body.decode("utf-8")
    decoder = json.JSONDecoder()
    space = re.compile(r"[ \t\r\n]*")
    index = space.match(text, 0).end()  # type: ignore[union-attr]
    if text[index : index + 1] != "{":
        raise ValueError("not a JSON object")
    index += 1
    while True:
        index = space.match(text, index).end()  # type: ignore[union-attr]
        key, index = decoder.raw_decode(text, index)
        index = space.match(text, index).end()  # type: ignore[union-attr]
        if text[index] != ":":
            raise ValueError("malformed JSON object")
        start = space.match(text, index + 1).end()  # type: ignore[union-attr]
        _, end = decoder.raw_decode(text, start)
        if key == name:
            return text[start:end].encode("utf-8")
        index = space.match(text, end).end()  # type: ignore[union-attr]
        if text[index] == "}":
            raise KeyError(name)
        if text[index] != ",":
            raise ValueError("malformed JSON object")
        index += 1


def assert_error_body(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The error shape of docs/api.md, "Errors": status, code, message, request_id = X-Request-Id."""
    assert response.status_code == status, response.text
    assert response.headers.get("content-type", "").startswith("application/json")
    body: dict[str, Any] = orjson.loads(response.content)
    assert set(body) == {"error", "request_id"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert set(body["error"]) <= {"code", "message", "details"}
    assert isinstance(body["request_id"], str)
    assert body["request_id"]
    assert response.headers.get("x-request-id") == body["request_id"]
    return body


def redis_snapshot(redis_url: str) -> dict[bytes, bytes | None]:
    """Every key of the database with its serialised value: equal snapshots mean nothing was written."""
    with redis.Redis.from_url(redis_url) as conn:
        return {name: conn.dump(name) for name in conn.scan_iter(count=1000)}  # type: ignore[misc]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


class WorkerProcess:
    """``python service.py worker`` in its own session, with its output in files."""

    def __init__(self, log_dir: Path, env: dict[str, str], *args: str) -> None:
        self.log_path = log_dir / f"worker-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "service.py", "worker", *args],
                cwd=REPO,
                env=clean_env(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
                pytest.fail(f"worker did not stop on SIGTERM:\n{self.log()[-3000:]}")
        with contextlib.suppress(ProcessLookupError):  # the scheduler child, should it linger
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.returncode
