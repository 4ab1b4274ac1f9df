"""Shared fixtures: a real redis-server per session, stores, the test receipt root and a fixed
signing key, the app.

Tests that need a binary that is missing skip with the reason, unless
REQUIRE_REAL_SERVICES=1 (set by .ci/run), which turns the skip into a failure.

Hypothesis runs under one of two profiles, named by HYPOTHESIS_PROFILE (or pytest's
``--hypothesis-profile``): ``ci`` (100 examples per property, Hypothesis's own deadline) or
``dev`` (10 examples, for the inner loop ``pytest -m "not slow"``). Without a name, ``ci`` is
used when REQUIRE_REAL_SERVICES=1 or CI is set, ``dev`` otherwise. A property that needs
another count states it at the ``ci`` profile's 100, as
``N * settings.default.max_examples // 100``: ``ci`` runs N examples, ``dev`` a tenth of N.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import hypothesis
import orjson
import pytest
import redis
import redis.asyncio as aioredis

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.kv.store import Store
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.signing import KeyRing, load_key_ring
from execution_proof.runtime.settings import Settings
from execution_proof.transparency.signer import SeedSigner, write_key_file
from execution_proof.web.app import create_app
from tests import asgi_client

ASSETS = Path(__file__).parent / "assets"
REPO = Path(__file__).resolve().parent.parent

# Both profiles build on the settings Hypothesis picks by itself: its own "ci" profile (no
# deadline, derandomized) where it detects a CI environment, else "default" (200 ms deadline).
_HYPOTHESIS_BASE = hypothesis.settings.get_profile(hypothesis.settings.get_current_profile_name())
hypothesis.settings.register_profile("ci", _HYPOTHESIS_BASE, max_examples=100)
hypothesis.settings.register_profile("dev", _HYPOTHESIS_BASE, max_examples=10)


def require_real_services() -> bool:
    return os.environ.get("REQUIRE_REAL_SERVICES") == "1"


def hypothesis_profile() -> str:
    """HYPOTHESIS_PROFILE, else ``ci`` under REQUIRE_REAL_SERVICES=1 or CI, else ``dev``."""
    named = os.environ.get("HYPOTHESIS_PROFILE")
    if named:
        return named
    return "ci" if require_real_services() or os.environ.get("CI") else "dev"


hypothesis.settings.load_profile(hypothesis_profile())

# ``app.asgi_client`` runs the app's start-up before its first request only (tests/asgi_client.py).
asgi_client.install()


def missing_binary(name: str, why: str) -> None:
    """Skip (or, under REQUIRE_REAL_SERVICES=1, fail) because ``name`` is not installed."""
    message = f"{name} is not installed: {why}"
    if require_real_services():
        pytest.fail(message + " (REQUIRE_REAL_SERVICES=1 forbids skipping)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server on a free loopback port in its own temporary directory.

    ``ready_kwargs``: how ``redis.Redis`` reaches it to see it answer (default: TCP on
    ``port``; a TLS-only or Unix-socket server names its own way in)."""

    def __init__(self, binary: str, extra: list[str] | None = None, ready_kwargs: dict[str, Any] | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="eps-redis-")
        self.port = free_port()
        self.binary = binary
        self.extra = extra or []
        self.ready_kwargs = ready_kwargs
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server. The first start on a port another process took meanwhile (tests
        that start many processes at once race for ports) moves to another, up to three times;
        a restart keeps its port, which clients already name."""
        for _ in range(2 if self.process is None else 0):
            try:
                self._start()
                return
            except RuntimeError:
                if self.process is not None and self.process.poll() is None:
                    raise
                self.process, self.port = None, free_port()
        self._start()

    def _start(self) -> None:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--appendonly", "no",
            "--logfile", os.path.join(self.dir, "redis.log"),
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_until_ready()

    def wait_until_ready(self, timeout: float = 10.0) -> None:
        """Poll PING until the server answers (also while it loads an AOF after a restart)."""
        deadline = time.monotonic() + timeout
        with redis.Redis(**(self.ready_kwargs or {"port": self.port}), socket_connect_timeout=0.2) as client:
            while True:
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline or (self.process is not None and self.process.poll() is not None):
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.02)

    def stop(self, kill: bool = False) -> None:
        if self.process and self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            self.process.wait(10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing_binary("redis-server", "store behaviour is proven on a real Redis")
    assert binary is not None
    server = RedisServer(binary)
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's real Redis, emptied for this test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def vectors() -> dict[str, Any]:
    return dict(orjson.loads((ASSETS / "receipt_vectors.json").read_bytes()))


TEST_ROOT = SeedSigner(hashlib.sha256(b"execution-proof test receipt root").digest())
"""The receipt root of the tests' services (``receipt_root``)."""


@pytest.fixture(scope="session")
def signing_keys_json() -> str:
    """A fixed two-key set: ``test-2026`` active, ``test-2025`` retired (public only), for
    tests that sign receipts themselves (vectors, the verifier's own tests); a service's
    receipts are signed by keys ``TEST_ROOT`` certifies (tests/receipt_keys.py)."""
    return (ASSETS / "signing_keys.json").read_text()


@pytest.fixture(scope="session")
def keyring(signing_keys_json: str) -> KeyRing:
    return load_key_ring(signing_keys_json)


@pytest.fixture(params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.slow)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The same tests on the embedded store and on a real redis-server (``slow``: the full
    suite proves every store behaviour on real Redis, the inner loop on fakeredis)."""
    if request.param == "fakeredis":
        client: Any = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        client = aioredis.from_url(request.getfixturevalue("redis_url"))
    store = Store(client)
    yield store
    await store.close()


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    """The log store: a real directory (``tmp_path/log``), laid out as tlog-tiles names things."""
    store = LogStore(FileObjects(tmp_path / "log"))
    yield store
    await store.close()


@pytest.fixture(scope="session")
def receipt_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ``file:`` receipt root (mode 0600) with a fixed seed: the root every in-process test
    service certifies its keys with."""
    path = tmp_path_factory.mktemp("root") / "receipt-root.key"
    write_key_file(path, b64url_encode(TEST_ROOT.seed))
    return f"file:{path}"


@pytest.fixture
def settings(receipt_root: str) -> Settings:
    return Settings(redis_url="redis://injected-by-tests", receipt_root=receipt_root, env="test")


@pytest.fixture
def app(settings: Settings, store: Store) -> Any:
    return create_app(settings, store=store)


@pytest.fixture
def client(app: Any) -> Any:
    """sanic-testing's ASGI client: ``_, response = await client.get(...)``."""
    return app.asgi_client


@pytest.fixture
async def api_key(store: Store) -> dict[str, Any]:
    """A fresh project with a free key: api_key, project_id, actor_id, plan, key_hash."""
    return await create_project_key(store.keys, project_name="tests", plan="free")


def auth(key: dict[str, Any] | str) -> dict[str, str]:
    raw = key if isinstance(key, str) else key["api_key"]
    return {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"}


def hash_of(label: str) -> str:
    """A deterministic, valid ``sha256:`` value for a test label."""
    import hashlib

    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    """Starts ``python service.py worker`` processes (tests.servers.WorkerProcess); stops them after."""
    from tests.servers import WorkerProcess

    started: list[WorkerProcess] = []

    def start(env: dict[str, str], *args: str) -> WorkerProcess:
        worker = WorkerProcess(tmp_path, env, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


async def index_field(store: Store, project_id: str, field: bytes) -> bytes | None:
    """The value of one field of a project's index buckets (kv/keys.py), found as the
    scripts find it: the meta hash's level and split name the bucket."""
    from execution_proof.kv import keys

    level, split = await store.client.hmget(keys.index_meta_key(project_id), "level", "split")
    bucket = keys.index_bucket(field, int(level or 0), int(split or 0))
    value: bytes | None = await store.client.hget(keys.index_bucket_key(project_id, bucket), field)
    return value


async def index_ids(store: Store, project_id: str, field: bytes) -> list[str]:
    """The receipt ids an index field holds (16 bytes each), in their stored order."""
    from execution_proof.kv import keys

    value = await index_field(store, project_id, field) or b""
    return [keys.receipt_id_from_bytes(value[at : at + 16]) for at in range(0, len(value), 16)]


# --- one transparency log's real processes (tests/log_stack.py) -----------------------------


@pytest.fixture(scope="module")
def redis_binary() -> str:
    """The redis-server binary (skips, or fails under REQUIRE_REAL_SERVICES=1, without it)."""
    from tests.log_stack import find_redis_binary

    return find_redis_binary()


@pytest.fixture
def stacks(redis_binary: str, tmp_path: Path) -> Iterator[Any]:
    """Makes ``tests.log_stack.Stack``s (a folder each under the test's tmp_path): its own
    redis-server, LOG_STORE directory, server and workers; closes them after."""
    from tests.log_stack import stack_maker

    with stack_maker(tmp_path, redis_binary) as make:
        yield make


@pytest.fixture(scope="module")
def tlogcheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/go/tlogcheck (Go's sumdb/note and sumdb/tlog), built once for the module."""
    from tests.log_stack import go_checker

    return go_checker(tmp_path_factory.mktemp("tlogcheck"))


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[Any]:
    """A service with a transparency log (``tests.log_stack.Stack``: its own redis-server and
    store) and an API key (``.api_key``), no worker yet: the client's tests start one when
    they want proofs."""
    from tests.log_stack import stack_maker

    with stack_maker(tmp_path_factory.mktemp("logged"), redis_binary) as make:
        stack = make("logged")
        stack.start_redis()
        stack.serve()
        stack.api_key = stack.make_keys(1)[0]["api_key"]
        yield stack
