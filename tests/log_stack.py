"""One transparency log's real processes, and the log read from outside: what the fault tests
share (tests/test_log_faults.py, tests/test_log_stalls.py, tests/test_log_operator_faults.py).

``Stack`` is one log: its own ``redis-server``, a real directory as ``LOG_STORE``, ``python
service.py serve`` and any number of ``python service.py worker`` processes. ``Observer`` polls
the checkpoint the service serves and the store's ``checkpoint`` file from a thread, keeping
every distinct one (with its signed text) and the first bytes of every full tile. The log is
judged as a monitor would judge it: consistency proofs computed from the store's tiles,
``check_tree`` over the whole tree, and Go's ``golang.org/x/mod/sumdb/tlog`` (``go_check``,
tests/go/tlogcheck) over the store behind a plain web server, with every checkpoint ever seen
as an older checkpoint the tree must extend.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import redis.asyncio as aioredis

from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.records import KeyRecord, LogQueue
from execution_proof.kv.store import Store
from execution_proof.receipts import attestation
from execution_proof.receipts.limits import PlanLimits
from execution_proof.receipts.model import parse_create_request
from execution_proof.transparency import note, tlog
from execution_proof.transparency.tiles import TileReader, check_tree
from tests.conftest import REPO, RedisServer, hash_of, missing_binary
from tests.receipt_keys import KEY_ENTRIES, started_receipt_keys
from tests.servers import ServiceProcess, WorkerProcess, clean_env, wait_until

ORIGIN = "faults.example/v1/log"
WAIT_S = 60.0
"""How long a test waits for the log to reach a size: a lease left by a killed worker
expires after 5 s, and the CI machine runs nine logs at once in the crash test."""
GO_SOURCE = REPO / "tests" / "go" / "tlogcheck"
GO_X_MOD = Path("/usr/share/gocode/src/golang.org/x/mod/sumdb/tlog")
"""Where Debian's golang-golang-x-mod-dev puts the sources the Go checker builds against."""


def find_redis_binary() -> str:
    """The redis-server binary (skips, or fails under REQUIRE_REAL_SERVICES=1, without it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_binary("redis-server", "the log's faults are proven against a real Redis")
    assert binary is not None
    return binary


# --------------------------------------------------------------------------- reading the log from outside


def fetcher(store_dir: Path) -> Callable[[str], Any]:
    """A ``TileReader`` fetch over the store's directory, as any static web server reads it."""

    async def fetch(name: str) -> bytes | None:
        try:
            return (store_dir / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    return fetch


def log_entries(store_dir: Path, checkpoint: note.Checkpoint) -> list[bytes]:
    """Every entry of the checkpoint's tree, read from the store's bundles, once the whole
    tree is checked (``check_tree``: each entry hashes to its leaf, each tile into the one
    above, the edge into the checkpoint's root)."""
    entries: list[bytes] = []
    reader = TileReader(fetcher(store_dir))
    asyncio.run(check_tree(reader, checkpoint.size, checkpoint.root, lambda _, batch: entries.extend(batch)))
    assert len(entries) == checkpoint.size
    return entries


RECEIPT_ENTRY = tlog.ENTRY_HEADER.encode() + b"\n"


def log_size(receipts: int, keys: int = KEY_ENTRIES) -> int:
    """The size of a log holding ``receipts`` receipts and ``keys`` key entries (by default
    one serving process's key certificate): each receipt enters it as two leaves, its entry
    and, right after it, the dsse leaf of its attestation (queued, counted by
    ``LOG_MAX_PENDING`` and integrated as one item)."""
    return 2 * receipts + keys


def entry_ids(entries: list[bytes]) -> list[str]:
    """The receipt ids of the receipt entries, in the log's order (receipt keys' certificates
    left out: ``certificate_indices``; and each receipt's dsse leaf, right after its entry)."""
    return [tlog.LogEntry.parse(e).receipt_id for e in entries if e.startswith(RECEIPT_ENTRY)]


def is_leaf_of(entry: bytes, receipt: dict[str, Any], origin: str) -> bool:
    """Whether ``entry`` is the dsse leaf of ``receipt``'s attestation in the log of ``origin``:
    a dsse 0.0.2 body (read strictly) naming the hash of the receipt's Statement, with a
    signature over it that verifies under the key the body names. Members a test added to
    the receipt (``_proof``) are left out."""
    try:
        body = attestation.parse_log_body(entry)
    except attestation.AttestationError:
        return False
    receipt = {name: value for name, value in receipt.items() if not name.startswith("_")}  # a test's notes
    payload = attestation.statement_bytes(receipt, origin)
    signed = attestation.Attestation(payload, str(receipt["sig_kid"]), body.signature).signed_by(body.public_key)
    return body.payload_hash == hashlib.sha256(payload).digest() and signed


def assert_paired(entries: list[bytes]) -> None:
    """Each receipt entry is followed by a dsse leaf that reads strictly, and each dsse leaf
    follows a receipt entry (what the monitor checks)."""
    for at, entry in enumerate(entries):
        if entry.startswith(RECEIPT_ENTRY):
            assert at + 1 < len(entries) and entries[at + 1].startswith(tlog.DSSE_HEADER), f"entry {at} has no leaf"
        if entry.startswith(b"{"):
            assert at > 0 and entries[at - 1].startswith(RECEIPT_ENTRY), f"leaf {at} follows no receipt entry"
            attestation.parse_log_body(entry)


def assert_placed(entries: list[bytes], receipts: list[dict[str, Any]], indices: list[int], origin: str) -> None:
    """``entries`` (a whole log) hold each receipt's entry at its index and the dsse leaf of
    its attestation at index + 1, and nothing else but key certificates: every entry once."""
    placed = sorted([*indices, *(i + 1 for i in indices), *certificate_indices(entries)])
    assert placed == list(range(len(entries))), "every entry exactly once"
    for receipt, index in zip(receipts, indices, strict=True):
        assert entries[index] == tlog.entry_bytes(receipt), index
        assert is_leaf_of(entries[index + 1], receipt, origin), index + 1


def certificate_indices(entries: list[bytes]) -> list[int]:
    """Where the log holds receipt keys' certificates."""
    return [i for i, entry in enumerate(entries) if entry.startswith(tlog.KEY_CERTIFICATE_HEADER)]


def assert_extends(store_dir: Path, old: note.Checkpoint, new: note.Checkpoint) -> None:
    """``new``'s tree extends ``old``'s: a consistency proof computed from the store's tiles
    verifies (RFC 9162)."""
    if old.size == new.size:
        assert old.root == new.root, f"two roots for size {old.size}: a fork"
        return
    assert old.size < new.size, f"the log went back from {old.size} to {new.size}"
    if old.size == 0:
        assert old.root == tlog.EMPTY_ROOT
        return
    reader = TileReader(fetcher(store_dir))
    proof = asyncio.run(reader.compute(new.size, lambda view: view.consistency_proof(old.size)))
    tlog.verify_consistency(old.size, old.root, new.size, new.root, proof)


def assert_included(store_dir: Path, entry: bytes, index: int, checkpoint: note.Checkpoint) -> None:
    """``entry`` is at ``index`` of the checkpoint's tree: an inclusion proof from the tiles."""
    reader = TileReader(fetcher(store_dir))
    path = asyncio.run(reader.compute(checkpoint.size, lambda view: view.inclusion_proof(index)))
    tlog.verify_inclusion(tlog.leaf_hash(entry), index, checkpoint.size, path, checkpoint.root)


def files_beyond(names: list[str], size: int) -> list[str]:
    """The tile and bundle names that a tree of ``size`` does not reach, worked out from each
    name alone (independently of the code under test): hash tile ``tile/L/N[.p/W]`` holds
    level-L hashes ``N*256`` to ``N*256 + W`` (W 256 for a full one), of which a tree of
    ``size`` has ``size >> 8L``; a bundle likewise, of ``size`` entries."""
    found = []
    for name in names:
        parts = name.split("/")
        if parts[0] != "tile":
            continue
        width = tlog.TILE_WIDTH
        if len(parts) > 3 and parts[-2].endswith(".p"):
            width = int(parts[-1])
            parts = [*parts[:-2], parts[-2].removesuffix(".p")]
        index = tlog.parse_tile_index(parts[2:])
        held = size if parts[1] == "entries" else size >> (tlog.TILE_HEIGHT * int(parts[1]))
        if index * tlog.TILE_WIDTH + width > held:
            found.append(name)
    return found


def full_tiles(store_dir: Path) -> dict[str, str]:
    """SHA-256 of each full tile and bundle in the store (partial ones, ``….p/<W>``, may go)."""
    found: dict[str, str] = {}
    for directory, subdirectories, files in os.walk(store_dir / "tile"):
        subdirectories[:] = [name for name in subdirectories if not name.endswith(".p")]
        for name in files:
            path = Path(directory) / name
            try:
                found[path.relative_to(store_dir).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
            except FileNotFoundError:
                continue
    return found


def directory_state(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and directory under ``root``: content hash (files) and mtime, by path."""
    state: dict[str, tuple[str, int]] = {}
    for directory, _, files in os.walk(root):
        path = Path(directory)
        state[path.relative_to(root).as_posix() + "/"] = ("dir", path.stat().st_mtime_ns)
        for name in files:
            file = path / name
            state[file.relative_to(root).as_posix()] = (
                hashlib.sha256(file.read_bytes()).hexdigest(),
                file.stat().st_mtime_ns,
            )
    return state


class Observer:
    """Polls, from a thread, the checkpoint the service serves and the store's ``checkpoint``
    file, keeping every distinct checkpoint each showed, in order (their signatures checked
    by the log's key as they arrive), and the SHA-256 of each full tile when it first
    appears."""

    def __init__(self, base_url: str | None, store_dir: Path, verifier: note.Verifier, interval: float = 0.02) -> None:
        self.base_url = base_url
        self.interval = interval
        """Seconds between polls: each reads the checkpoint twice and hashes every full tile."""
        self.store_dir = store_dir
        self.verifier = verifier
        self.seen: dict[str, list[note.Checkpoint]] = {"served": [], "file": []}
        self.texts: dict[tuple[int, bytes], bytes] = {}
        """The signed text of every distinct checkpoint seen, by (size, root): Go's checker
        reads them as older checkpoints the final tree must extend."""
        self.tiles: dict[str, str] = {}
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-observer", daemon=True)

    def start(self) -> Observer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                self.poll(client)
                self._stop.wait(self.interval)

    def poll(self, client: httpx.Client) -> None:
        if self.base_url is not None:
            try:
                response = client.get(self.base_url + "/v1/log/checkpoint")
            except httpx.HTTPError:
                response = None  # the server restarting its connection to Redis, say
            if response is not None and response.status_code == 200:
                self._keep("served", response.content)
        with contextlib.suppress(FileNotFoundError):
            self._keep("file", (self.store_dir / "checkpoint").read_bytes())
        for name, digest in full_tiles(self.store_dir).items():
            self.tiles.setdefault(name, digest)

    def _keep(self, source: str, data: bytes) -> None:
        try:
            checkpoint, _ = note.open_checkpoint(data, self.verifier)
        except note.NoteError as exc:
            self.problems.append(f"{source} checkpoint does not verify ({exc}): {data!r}")
            return
        kept = self.seen[source]
        self.texts.setdefault((checkpoint.size, checkpoint.root), data)
        if not kept or (kept[-1].size, kept[-1].root) != (checkpoint.size, checkpoint.root):
            kept.append(checkpoint)

    def assert_history(self, final: note.Checkpoint) -> list[note.Checkpoint]:
        """Every checkpoint observed verified; each source's sizes never went back and each
        checkpoint extends the one before it; every one is a prefix of ``final``. Full tiles
        kept their first bytes. Returns the distinct checkpoints seen."""
        assert not self.problems, self.problems
        distinct: dict[tuple[int, bytes], note.Checkpoint] = {}
        for source, seen in self.seen.items():
            sizes = [checkpoint.size for checkpoint in seen]
            assert sizes == sorted(sizes), f"the {source} checkpoint went back: {sizes}"
            for older, newer in itertools.pairwise(seen):
                assert_extends(self.store_dir, older, newer)
            distinct.update({(c.size, c.root): c for c in seen})
        for checkpoint in distinct.values():
            assert_extends(self.store_dir, checkpoint, final)
        now = full_tiles(self.store_dir)
        if final.size >= tlog.TILE_WIDTH:
            assert self.tiles, "no full tile appeared"
        changed = sorted(name for name, digest in self.tiles.items() if now.get(name) != digest)
        assert not changed, f"full tiles changed after they appeared: {changed}"
        return sorted(distinct.values(), key=lambda c: c.size)


# --------------------------------------------------------------------------- one log's processes


class Stack:
    """One log's processes: its own redis-server, a ``LOG_STORE`` directory, ``service.py
    serve`` and any number of ``service.py worker`` processes, all stopped by ``close``."""

    def __init__(self, folder: Path, binary: str, env: dict[str, str] | None = None, name: str = "log") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.store_dir = folder / "log"
        self.signer = note.Signer.generate(ORIGIN)
        self.redis = RedisServer(binary)
        self.env = {
            "LOG_SIGNING_KEY": self.signer.encode(),
            "LOG_ORIGIN": ORIGIN,
            "LOG_STORE": f"file://{self.store_dir}",
            **(env or {}),
        }
        self.service: ServiceProcess | None = None
        self.workers: list[WorkerProcess] = []
        self.observer: Observer | None = None
        self.client = httpx.Client(timeout=30)
        self.name = name
        self._labels = itertools.count()

    @property
    def redis_url(self) -> str:
        return self.redis.url

    @property
    def base_url(self) -> str:
        assert self.service is not None
        return self.service.base_url

    @property
    def verifier(self) -> note.Verifier:
        return self.signer.verifier

    @property
    def identity(self) -> keys.LogIdentity:
        """The log's identity in Redis: its signer's name (the origin) and verifier key, so a
        stack given another ``LOG_ORIGIN`` and key (a new log on an old Redis) names its own."""
        return keys.LogIdentity(self.signer.name, self.verifier.encode())

    def start_redis(self) -> Stack:
        self.redis.start()
        return self

    def serve(self, **env: str) -> ServiceProcess:
        self.service = ServiceProcess(self.folder, redis_url=self.redis_url, env={**self.env, **env})
        return self.service.start()

    def worker_env(self, **env: str) -> dict[str, str]:
        return {"REDIS_URL": self.redis_url, **self.env, **env}

    def worker(self, **env: str) -> WorkerProcess:
        worker = WorkerProcess(self.folder, self.worker_env(**env))
        self.workers.append(worker)
        return worker

    def observe(self, interval: float = 0.02) -> Observer:
        """An ``Observer`` of this log, started (``interval``: many logs at once poll less often)."""
        self.observer = Observer(
            self.base_url if self.service else None, self.store_dir, self.verifier, interval
        ).start()
        return self.observer

    def make_keys(self, count: int) -> list[dict[str, Any]]:
        """``count`` projects with a key each, made in process (setup, not what is tested:
        ``service.py keys create`` costs a Python start each)."""

        async def make() -> list[dict[str, Any]]:
            store = setup_store(self.redis_url)
            try:
                return [
                    await create_project_key(
                        store.keys, project_name=f"{self.name}-{n}-{secrets.token_hex(3)}", plan="pro"
                    )
                    for n in range(count)
                ]
            finally:
                await store.close()

        return asyncio.run(make())

    def create(self, api_keys: list[dict[str, Any]], count: int, threads: int = 8) -> list[dict[str, Any]]:
        """``count`` new receipts over HTTP, spread over the projects of ``api_keys``, several
        at once; each answered 201. The receipts, in the order they were asked for."""
        labels = [f"{self.name}-{next(self._labels)}" for _ in range(count)]

        def one(n: int) -> dict[str, Any]:
            key = api_keys[n % len(api_keys)]
            response = self.client.post(
                self.base_url + "/v1/receipts",
                headers={"Authorization": f"Bearer {key['api_key']}"},
                json={"input_hash": hash_of(labels[n])},
            )
            assert response.status_code == 201, response.text
            receipt: dict[str, Any] = response.json()["receipt"]
            return receipt

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, range(count)))

    def create_waiting(self, api_keys: list[dict[str, Any]], count: int, wait_s: int = 10) -> list[dict[str, Any]]:
        """``count`` creates over HTTP with ``Prefer: wait``, one after another: each receipt
        whose 201 carried its log proof (acknowledged with it: docs/log.md, "What a 201 survives"),
        with that proof text added as ``"_proof"``. A 201 without its proof fails the test."""
        made = []
        for n in range(count):
            key = api_keys[n % len(api_keys)]
            label = f"{self.name}-waited-{next(self._labels)}"
            response = self.client.post(
                self.base_url + "/v1/receipts",
                headers={"Authorization": f"Bearer {key['api_key']}", "Prefer": f"wait={wait_s}"},
                json={"input_hash": hash_of(label)},
            )
            assert response.status_code == 201, response.text
            body = response.json()
            assert "proof" in body["log"], f"no proof within {wait_s} s: {body['log']}"
            made.append({**body["receipt"], "_proof": body["log"]["proof"]})
        return made

    def issue(self, api_keys: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
        """``count`` receipts written straight into this log's Redis through the service's
        own issue path (signed, chained, their entries queued for this log), spread over the
        projects of ``api_keys``: setup for a backlog of thousands, which HTTP would take
        seconds to make. The receipts, in order. They are signed by a key of their own that
        ``TEST_ROOT`` certifies, published in the registry like a serving process's key but
        not logged: the log holds only the receipts issued here."""
        labels = [f"{self.name}-issued-{next(self._labels)}" for _ in range(count)]

        async def run() -> list[dict[str, Any]]:
            from execution_proof.usecases.issuing import ReceiptIssuer

            store = setup_store(self.redis_url, log=LogQueue(self.identity, 0))
            signing = await started_receipt_keys(store, now_ms)
            issuer = ReceiptIssuer(store.receipts, signing, now_ms, log_origin=self.identity.origin)
            unlimited = PlanLimits(per_minute=10**9, monthly=10**9)
            try:
                made: list[dict[str, Any]] = []
                for n in range(0, count, 200):
                    sends = []
                    for at in range(n, min(count, n + 200)):
                        key = api_keys[at % len(api_keys)]
                        record = KeyRecord(key["key_hash"], key["project_id"], key["actor_id"], key["plan"], False, "")
                        request = parse_create_request({"input_hash": hash_of(labels[at])})
                        sends.append(issuer.issue(request, record, None, unlimited))
                    made += [issued.receipt for issued in await asyncio.gather(*sends)]
                return made
            finally:
                signing.close()
                await store.close()

        return asyncio.run(run())

    def save_redis(self, path: Path) -> None:
        """``SAVE``, and the snapshot copied to ``path`` (for ``restore_redis``)."""
        with redis.Redis.from_url(self.redis_url) as conn:
            assert conn.save()
        shutil.copyfile(Path(self.redis.dir) / "dump.rdb", path)

    def restore_redis(self, path: Path) -> None:
        """Redis killed and started again, on the same port, from the snapshot at ``path``
        (an older one of this log's, or another deployment's): what a restore from backup does."""
        self.redis.stop(kill=True)
        shutil.copyfile(path, Path(self.redis.dir) / "dump.rdb")
        self.redis.start()

    def flush_redis(self) -> None:
        with redis.Redis.from_url(self.redis_url) as conn:
            assert conn.flushall()

    def served(self) -> note.Checkpoint:
        response = self.client.get(self.base_url + "/v1/log/checkpoint")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        checkpoint, _ = note.open_checkpoint(response.content, self.verifier)
        return checkpoint

    def stored(self) -> note.Checkpoint:
        checkpoint, _ = note.open_checkpoint((self.store_dir / "checkpoint").read_bytes(), self.verifier)
        return checkpoint

    def wait_for_size(self, size: int, timeout: float = WAIT_S) -> note.Checkpoint:
        """The served checkpoint once it covers at least ``size`` entries."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                checkpoint = self.served()
            except (httpx.HTTPError, AssertionError):
                checkpoint = None
            if checkpoint is not None and checkpoint.size >= size:
                return checkpoint
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {w.log_path.name}\n{w.log()[-1500:]}" for w in self.workers[-2:])
                pytest.fail(f"no checkpoint of size {size} within {timeout:.0f} s (now {checkpoint}):\n{logs}")
            time.sleep(0.05)

    def assert_proofs(self, receipts: list[dict[str, Any]]) -> list[int]:
        """Each receipt's ``GET /v1/receipts/{id}/log-proof`` verifies: a checkpoint signed by
        the log's key, the receipt's entry at the index the proof names. The indices."""
        indices = []
        for receipt in receipts:
            response = self.client.get(f"{self.base_url}/v1/receipts/{receipt['receipt_id']}/log-proof")
            assert response.status_code == 200, response.text
            proof = note.parse_tlog_proof(response.text)
            checkpoint, _ = note.open_checkpoint(proof.checkpoint, self.verifier)
            leaf = tlog.leaf_hash(tlog.entry_bytes(receipt))
            tlog.verify_inclusion(leaf, proof.index, checkpoint.size, proof.path, checkpoint.root)
            indices.append(proof.index)
        return indices

    def assert_fills(self, receipts: list[dict[str, Any]], final: note.Checkpoint) -> None:
        """Each receipt's log-proof verifies (``assert_proofs``), and with the log's receipt
        key certificates (one per serving process started) the receipts fill ``final``'s tree,
        each one's entry at its index and its dsse leaf right after it: every index exactly
        once (``assert_placed``)."""
        assert_placed(log_entries(self.store_dir, final), receipts, self.assert_proofs(receipts), final.origin)

    def assert_no_staging(self) -> None:
        staging = self.store_dir / ".state" / "staging"
        left = [str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()] if staging.exists() else []
        assert not left, f"staged batches left behind: {left}"

    def pending(self) -> int:
        with redis.Redis.from_url(self.redis_url) as conn:
            return int(conn.get(keys.log_pending_key(self.identity)) or 0)

    def synced(self, size: int) -> bool:
        """Whether Redis is in line with a tree of ``size``: an integrator told it the size,
        and no entry waits."""
        with redis.Redis.from_url(self.redis_url) as conn:
            told = conn.get(keys.log_size_key(self.identity))
            return (
                told is not None and int(told) == size and int(conn.get(keys.log_pending_key(self.identity)) or 0) == 0
            )

    def close(self) -> None:
        if self.observer is not None:
            self.observer.stop()
        self.client.close()  # no keep-alive connection for the server to wait on
        if self.service is not None:
            self.service.request_stop()  # it shuts down while the workers do
        for worker in self.workers:
            worker.stop()
        if self.service is not None:
            self.service.stop()
        self.redis.cleanup()


def is_stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP: state ``T`` in /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def log_records(worker: WorkerProcess) -> list[dict[str, Any]]:
    """A worker's JSON log records (``LOG_FORMAT=json``, the default with ``REDIS_URL``)."""
    records = []
    for line in worker.log().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(orjson.JSONDecodeError):
                records.append(orjson.loads(line))
    return records


SETUP_TIMEOUT_S = 30.0
"""The connect and command timeouts of the tests' own store (setup and reading back): the
service's (2 s and 5 s) are what it answers within; a test's setup on a loaded machine (CI:
two cores, a dozen processes) once took longer than 2 s to connect, and failed a run."""


def now_ms() -> int:
    return int(time.time() * 1000)


def setup_store(redis_url: str, log: LogQueue | None = None) -> Store:
    """The service's store over ``redis_url``, for a test's setup and reads, with generous timeouts."""
    client = aioredis.from_url(redis_url, socket_connect_timeout=SETUP_TIMEOUT_S, socket_timeout=SETUP_TIMEOUT_S)
    return Store(client) if log is None else Store(client, log=log)


def loud_records(worker: WorkerProcess) -> list[str]:
    """What a worker said at ERROR or CRITICAL, and any traceback it printed."""
    loud = [f"{r['level']}: {r.get('msg')}" for r in log_records(worker) if r.get("level") in ("error", "critical")]
    return loud + ["a traceback"] * ("Traceback (most recent call last)" in worker.log())


@contextlib.contextmanager
def static_server(directory: Path) -> Iterator[str]:
    """``python -m http.server`` over ``directory`` on a free loopback port: a log store as
    any static web server serves it. Yields its base URL."""
    from tests.conftest import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:

        def answers() -> bool:
            try:
                return httpx.get(url + "/checkpoint", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, 20, "python -m http.server")
        yield url
    finally:
        process.terminate()
        process.wait(10)


def go_check(checker: Path, store_dir: Path, vkey: str, olds: list[bytes], tmp: Path) -> str:
    """Go's ``golang.org/x/mod/sumdb/note`` and ``sumdb/tlog`` (tests/go/tlogcheck) over the
    store behind a plain web server: the checkpoint's signature, the tree hash over the tiles,
    every entry against its leaf, inclusion proofs, and a consistency proof from each of
    ``olds`` (signed checkpoints seen earlier, e.g. ``Observer.texts``). Fails the test unless
    all holds; its summary line."""
    tmp.mkdir(parents=True, exist_ok=True)
    args = []
    for n, text in enumerate(olds):
        path = tmp / f"old-{n}"
        path.write_bytes(text)
        args += ["-old", str(path)]
    with static_server(store_dir) as url:
        done = subprocess.run(
            [str(checker), "-url", url, "-vkey", vkey, *args], capture_output=True, text=True, timeout=300, check=False
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"consistency={len(olds)}" in done.stdout, done.stdout
    return done.stdout.strip()


def kill_9(worker: WorkerProcess) -> int:
    """SIGKILL a worker; its exit status (its RQ children go with its process group)."""
    worker.process.send_signal(signal.SIGKILL)
    status = worker.process.wait(10)
    worker.stop()
    return status


@contextlib.contextmanager
def stack_maker(folder: Path, binary: str) -> Iterator[Callable[..., Stack]]:
    """Makes ``Stack``s (a folder each under ``folder``); closes them all after (the
    ``stacks`` fixture of tests/conftest.py)."""
    made: list[Stack] = []

    def make(name: str = "log", **env: str) -> Stack:
        stack = Stack(folder / f"{name}-{len(made)}", binary, env, name)
        made.append(stack)
        return stack

    try:
        yield make
    finally:
        for stack in made:
            stack.close()


def go_checker(tmp_path: Path) -> Path:
    """``tests/go/tlogcheck`` built offline against Debian's x/mod sources (GOPATH mode: no
    module proxy, no download); skips (fails under REQUIRE_REAL_SERVICES=1) without them."""
    go = shutil.which("go")
    if go is None:
        missing_binary("go", "the log is cross-checked with Go's golang.org/x/mod/sumdb/tlog (apt: golang-go)")
    if not GO_X_MOD.is_dir():
        missing_binary("golang.org/x/mod", f"no {GO_X_MOD} (apt: golang-golang-x-mod-dev)")
    assert go is not None
    binary = tmp_path / "tlogcheck"
    env = clean_env(
        {"GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOFLAGS": "", "GOPROXY": "off",
         "GOCACHE": str(tmp_path / "gocache"), "CGO_ENABLED": "0"}
    )  # fmt: skip
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=GO_SOURCE, env=env, capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return binary
