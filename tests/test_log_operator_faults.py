"""Faults that are operator actions (docs/log.md, "Never fork: what each fault
does"), reproduced by those actions against real processes: ``.state/`` copied aside and put
back with Redis flushed, a backup copied over the live store (newer tiles left behind) with
Redis restored, a new ``LOG_ORIGIN`` on the old Redis, a Redis restored from another
deployment's snapshot, a worker killed inside store creation, a truncated ``checkpoint`` (and a
damaged edge tile), ``/health`` across several web processes, junk in ``.state/tmp/``, and
``HEAD`` over real HTTP. Each test starts its own ``redis-server``, store, ``service.py serve``
and ``service.py worker`` processes (tests/log_stack.py).

After each scenario, where a log exists, it is judged from outside as a monitor would judge it:
every checkpoint served or stored is a prefix of the last (``Observer.assert_history``), Go's
``sumdb/tlog`` reads the store behind a plain web server with every checkpoint text seen as an
older checkpoint the tree must extend (``go_check``), the whole tree checks (``log_entries``),
no receipt id is in it twice, and every receipt acknowledged with its proof (``Prefer: wait``)
still proves against the store.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv import keys
from execution_proof.transparency import note, tlog
from execution_proof.usecases.log_reading import STATE_TTL_S
from tests.log_stack import (
    WAIT_S,
    Observer,
    Stack,
    assert_extends,
    assert_included,
    assert_paired,
    directory_state,
    entry_ids,
    files_beyond,
    go_check,
    is_leaf_of,
    log_entries,
    log_size,
    loud_records,
    stack_maker,
)
from tests.receipt_keys import KEY_ENTRIES
from tests.servers import ServiceProcess, WorkerProcess, assert_error_body, run_cli, wait_until
from tests.test_log_store_s3 import ACCESS_KEY, BUCKET, FOREIGN_VARIABLES, SECRET_KEY, MotoServer, moto  # noqa: F401

pytestmark = pytest.mark.slow

STALL_S = 2
"""``LOG_STALL_S`` of the tests that watch ``/health`` go stalled."""
JUDGED_WITHIN_S = STATE_TTL_S + STALL_S + STATE_TTL_S + 1.5
"""From the moment entries start waiting to the moment every web process that is asked says
``stalled``: a cached answer runs out (2 s), a web process sees them wait and, with no
integrator's progress mark in Redis, starts the clock there for all; ``LOG_STALL_S`` passes;
every cached ``ok`` runs out (2 s); and 1.5 s for a busy machine's slower polls."""
SEEN_WITHIN_S = STATE_TTL_S + 1.5
"""From a change in Redis or the store to every web process saying so (its cache of 2 s)."""


# --------------------------------------------------------------------------- shared checks


def log_state(base_url: str) -> str:
    """``/health``'s ``log`` (always 200), asked on a connection of its own."""
    response = httpx.get(base_url + "/health", timeout=10)
    assert response.status_code == 200, response.text
    return str(response.json()["log"])


def wait_for_exit(worker: WorkerProcess, what: str) -> int:
    try:
        status = worker.process.wait(WAIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: the worker did not exit within {WAIT_S:.0f} s:\n{worker.log()[-3000:]}")
    worker.stop()  # its RQ children, should any be left
    return status


def assert_refused_once(worker: WorkerProcess, *named: str) -> str:
    """The worker exited 2 after one line at CRITICAL, ``LOG REFUSED: ...`` naming ``named``,
    nothing else at ERROR or above, and no traceback. The line."""
    status = wait_for_exit(worker, "a refused worker")
    output = worker.log()
    assert status == 2, f"exit status {status}:\n{output[-3000:]}"
    lines = [line for line in output.splitlines() if "LOG REFUSED" in line]
    assert len(lines) == 1, output[-3000:]
    record = orjson.loads(lines[0])
    assert record["level"] == "critical", lines[0]
    for words in named:
        assert words in record["msg"], f"{words!r} is not in: {record['msg']}"
    assert loud_records(worker) == [f"critical: {record['msg']}"], loud_records(worker)
    assert "Traceback" not in output
    return str(record["msg"])


def proof_checkpoints(receipts: list[dict[str, Any]], verifier: note.Verifier) -> list[bytes]:
    """The signed checkpoint of every proof a 201 carried (``Prefer: wait``), each verified by
    the log's key."""
    texts = []
    for receipt in receipts:
        text = note.parse_tlog_proof(receipt["_proof"]).checkpoint
        note.open_checkpoint(text, verifier)
        texts.append(text.encode())
    return texts


def assert_acknowledged_prove(
    store_dir: Path, verifier: note.Verifier, acknowledged: list[dict[str, Any]], final: note.Checkpoint
) -> None:
    """Each receipt acknowledged with its proof: the proof it was given still verifies (the
    receipt's entry at its index under a checkpoint the log signed), that checkpoint is a
    prefix of ``final``, and the entry is at the same index of ``final``'s tree in the store,
    the dsse leaf of its attestation right after it."""
    entries = log_entries(store_dir, final)
    for receipt in acknowledged:
        proof = note.parse_tlog_proof(receipt["_proof"])
        checkpoint, _ = note.open_checkpoint(proof.checkpoint, verifier)
        entry = tlog.entry_bytes(receipt)
        tlog.verify_inclusion(tlog.leaf_hash(entry), proof.index, checkpoint.size, proof.path, checkpoint.root)
        assert_extends(store_dir, checkpoint, final)
        assert_included(store_dir, entry, proof.index, final)
        assert is_leaf_of(entries[proof.index + 1], receipt, final.origin)


def assert_whole(
    store_dir: Path,
    verifier: note.Verifier,
    final: note.Checkpoint,
    *,
    observers: list[Observer],
    receipts: list[dict[str, Any]],
    acknowledged: list[dict[str, Any]],
    checker: Path,
    tmp: Path,
    more_texts: list[bytes] = (),  # type: ignore[assignment]
) -> list[str]:
    """The log in ``store_dir`` is one history holding exactly ``receipts``, once each: every
    checkpoint each observer saw is a prefix of ``final``, Go's sumdb/tlog checks the store
    with every checkpoint text seen (observers, proofs, ``more_texts``) as an older one, the
    whole tree checks, each receipt entry is followed by its dsse leaf, and every acknowledged
    proof still proves. The ids, in log order."""
    texts: dict[bytes, None] = {}
    for observer in observers:
        observer.stop()
        observer.assert_history(final)
        texts.update(dict.fromkeys(observer.texts.values()))
    texts.update(dict.fromkeys(proof_checkpoints(acknowledged, verifier)))
    texts.update(dict.fromkeys(more_texts))
    summary = go_check(checker, store_dir, verifier.encode(), list(texts), tmp)
    assert f"size={final.size} " in summary, summary
    entries = log_entries(store_dir, final)
    ids = entry_ids(entries)
    assert len(ids) == len(set(ids)), "a receipt id is in the log twice"
    assert_paired(entries)
    assert set(ids) == {receipt["receipt_id"] for receipt in receipts}
    assert_acknowledged_prove(store_dir, verifier, acknowledged, final)
    return ids


def public_state(store_dir: Path) -> dict[str, tuple[str, int]]:
    """The public part of a ``file://`` store (``checkpoint``, every tile and bundle, their
    directories): content hash and mtime, by path."""
    state = {name: value for name, value in directory_state(store_dir).items() if not name.startswith((".state", "./"))}
    assert "checkpoint" in state
    return state


@dataclass
class Hammered:
    """What ``hammer`` was answered."""

    statuses: collections.Counter[tuple[str, str, int]] = field(default_factory=collections.Counter)
    checkpoints: dict[bytes, None] = field(default_factory=dict)

    def assert_never_500(self, allowed: set[int]) -> None:
        assert self.statuses, "nothing was asked"
        wrong = {key: count for key, count in self.statuses.items() if key[2] >= 500 and key[2] != 503}
        assert not wrong, f"answered 5xx: {wrong}"
        assert {status for _, _, status in self.statuses} <= allowed, self.statuses


def hammer(base_url: str, paths: list[str], *, until: Callable[[], bool], at_least_s: float) -> Hammered:
    """GET and HEAD of each path, round after round, for at least ``at_least_s`` and until
    ``until()`` holds (failing after ``WAIT_S``): every status answered, and every checkpoint
    served with 200."""
    answered = Hammered()
    started = time.monotonic()
    with httpx.Client(timeout=10) as client:
        while True:
            for path in paths:
                for method in ("GET", "HEAD"):
                    response = client.request(method, base_url + path)
                    answered.statuses[(method, path, response.status_code)] += 1
                    if method == "HEAD":
                        assert response.content == b"", path
                    elif path == "/v1/log/checkpoint" and response.status_code == 200:
                        answered.checkpoints[response.content] = None
            elapsed = time.monotonic() - started
            if elapsed >= at_least_s and until():
                return answered
            if elapsed > WAIT_S:
                pytest.fail(f"the awaited change did not come within {WAIT_S:.0f} s; answered {answered.statuses}")
            time.sleep(0.02)  # paces the rounds: the worker shares the two cores


def parses(path: Path, verifier: note.Verifier) -> bool:
    try:
        note.open_checkpoint(path.read_bytes(), verifier)
    except (note.NoteError, FileNotFoundError):
        return False
    return True


def stored_checkpoint(store_dir: Path, verifier: note.Verifier) -> note.Checkpoint:
    checkpoint, _ = note.open_checkpoint((store_dir / "checkpoint").read_bytes(), verifier)
    return checkpoint


def wait_for_stored(stack: Stack, size: int) -> note.Checkpoint:
    """The store's checkpoint once it covers ``size`` entries (for a log with no server)."""
    wait_until(
        lambda: parses(stack.store_dir / "checkpoint", stack.verifier) and stack.stored().size >= size,
        WAIT_S,
        f"a stored checkpoint of size {size}",
    )
    return stack.stored()


# --------------------------------------------------------------------------- where the store lives


class FilePlace:
    """A ``file://`` store, as an operator handles it: ``cp -a`` of ``.state/`` aside and back."""

    def __init__(self, stack: Stack, aside: Path) -> None:
        self.stack = stack
        self.aside = aside
        self.env: dict[str, str | None] = {"LOG_STORE": stack.env["LOG_STORE"]}

    def save_state(self) -> None:
        shutil.copytree(self.stack.store_dir / ".state", self.aside, symlinks=True)

    def put_back_state(self) -> None:
        shutil.rmtree(self.stack.store_dir / ".state")
        shutil.copytree(self.aside, self.stack.store_dir / ".state", symlinks=True)

    def public(self) -> dict[str, Any]:
        return dict(public_state(self.stack.store_dir))

    def state(self) -> dict[str, Any]:
        return {
            name: value for name, value in directory_state(self.stack.store_dir).items() if name.startswith(".state")
        }

    def halt(self) -> dict[str, Any] | None:
        path = self.stack.store_dir / ".state/halt"
        return dict(orjson.loads(path.read_bytes())) if path.exists() else None

    def local_copy(self, _: Path) -> Path:
        return self.stack.store_dir


class S3Place:
    """An ``s3://`` store on moto's S3 server, handled through another client (boto3): the
    objects under ``.state/`` copied aside, then every one of them deleted and the copies put
    back; the public objects listed with their bytes, ETags and modification times."""

    def __init__(self, server: MotoServer, prefix: str) -> None:
        import boto3

        self.prefix = prefix
        self.url = f"s3://{BUCKET}/{prefix}"
        self.client = boto3.client(
            "s3", endpoint_url=server.endpoint, region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        )  # fmt: skip
        self.env: dict[str, str | None] = dict.fromkeys(FOREIGN_VARIABLES)
        self.env |= {"LOG_STORE": self.url, "AWS_ENDPOINT_URL": server.endpoint, "AWS_REGION": "us-east-1",
                     "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}  # fmt: skip
        self.saved: dict[str, bytes] = {}

    def objects(self) -> dict[str, dict[str, Any]]:
        """Every object under the prefix, by name relative to it: its listing entry."""
        found = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=self.prefix + "/"):
            for entry in page.get("Contents", []):
                found[entry["Key"][len(self.prefix) + 1 :]] = entry
        return found

    def read(self, name: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}")["Body"].read()
        return body

    def save_state(self) -> None:
        self.saved = {name: self.read(name) for name in self.objects() if name.startswith(".state/")}
        assert ".state/tree" in self.saved

    def put_back_state(self) -> None:
        for name in self.objects():
            if name.startswith(".state/"):
                self.client.delete_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}")
        for name, data in self.saved.items():
            self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}", Body=data)

    def public(self) -> dict[str, Any]:
        found = {
            name: (hashlib.sha256(self.read(name)).hexdigest(), entry["ETag"], entry["LastModified"])
            for name, entry in self.objects().items()
            if not name.startswith(".state/")
        }
        assert "checkpoint" in found
        return found

    def state(self) -> dict[str, Any]:
        return {
            name: (hashlib.sha256(self.read(name)).hexdigest(), entry["ETag"], entry["LastModified"])
            for name, entry in self.objects().items()
            if name.startswith(".state/")
        }

    def halt(self) -> dict[str, Any] | None:
        if ".state/halt" not in self.objects():
            return None
        return dict(orjson.loads(self.read(".state/halt")))

    def local_copy(self, target: Path) -> Path:
        """The public objects, byte for byte, in a directory (for the checks that read a store
        from files: consistency from tiles, Go's checker behind http.server)."""
        for name in self.public():
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.read(name))
        return target


# --------------------------------------------------------------------------- the scenarios, side by side

LANES = 3
"""Scenarios run at once. Most of a scenario's time is waiting (a process starting, a lease
running out, ``LOG_STALL_S`` and the web's 2 s cache passing), which three spend together on
two cores; each has its own Redis, store and processes."""


@dataclass
class Lane:
    """What one scenario gets: a maker of ``Stack``s (closed when it ends), a folder of its
    own, Go's checker, and moto's server on demand."""

    stacks: Callable[..., Stack]
    tmp_path: Path
    tlogcheck: Path
    moto: Callable[[], MotoServer]


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest,
    redis_binary: str,
    tlogcheck: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future[None]]]:
    """Every selected test's scenario (``SCENARIOS``, by test id), started at once on
    ``LANES`` threads, longest first, each closing its stacks when it ends; each test waits
    for its own and re-raises what failed in it."""
    selected = [
        item.name for item in request.session.items if item.module is not None and item.module.__name__ == __name__
    ]
    moto_server: list[MotoServer] = []
    if any("[s3]" in name for name in selected):
        moto_server.append(request.getfixturevalue("moto"))

    def run(name: str, folder: Path) -> None:
        with stack_maker(folder / "stacks", redis_binary) as make:
            SCENARIOS[name][0](Lane(make, folder, tlogcheck, lambda: moto_server[0]))

    with ThreadPoolExecutor(LANES, thread_name_prefix="scenario") as pool:
        futures = {
            name: pool.submit(run, name, tmp_path_factory.mktemp(name.removeprefix("test_")[:40]))
            for name in sorted(selected, key=lambda name: -SCENARIOS[name][1])
        }
        yield futures
        wait(futures.values())


# --------------------------------------------------------------------------- 1. .state/ put back


def assert_state_changes(before: dict[str, Any], after: dict[str, Any]) -> None:
    """What a refused worker changed under ``.state/``: the halt it recorded, and the lease it
    took before it read the tree state (with, on ``file://``, the directories they were renamed
    into); nothing else (the tree state, the identity, the witnesses, the time-stamps)."""
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    assert ".state/halt" in changed
    assert changed <= {".state/halt", ".state/lease", ".state/", ".state/tmp/"}, changed


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_a_state_directory_put_back_with_redis_flushed_is_refused_and_signs_nothing(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest, backend: str
) -> None:
    """The log grows to 49 entries (``.state/`` copied aside then) and to 109; the workers stop;
    the old ``.state/`` is put back and Redis flushed (so its synced size says nothing). A worker
    started then exits 2 with one line at CRITICAL, ``LOG REFUSED``, saying the published
    checkpoint (109) is ahead of the tree state (49), and no traceback; ``.state/halt`` records
    the refusal, ``/health`` says ``halted``, not one public object changed (checkpoint, tiles,
    bundles: bytes and modification times) and under ``.state/`` only the halt and the lease
    the worker took did. ``log resume`` exits 0, and the next worker refuses again, for the
    cause is still there. The log as published still checks whole.

    On ``s3://`` (moto's server): ``.state/``'s objects are deleted and the copies put back
    through another client, and the public objects compared by listing (bytes, ETag,
    modification time). What an emulator cannot prove: how a real S3 or Tigris orders the
    delete and put of ``.state/tree`` against a reader (the refusal reads the checkpoint and
    the tree state, as any S3 returns them once written), nor a real bucket's ETags (the
    refusal does not rest on them: a put-back ``.state/tree`` has its old ETag on moto too)."""
    runs[request.node.name].result()


def _a_state_directory_put_back_with_redis_flushed_is_refused_and_signs_nothing(lane: Lane, backend: str) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    place: FilePlace | S3Place
    if backend == "s3":
        s3 = S3Place(lane.moto(), f"rollback-{secrets.token_hex(4)}")
        stack = stacks("rollback-s3", **s3.env)  # the variables moto's client must not read, unset
        place = s3
    else:
        stack = stacks("rollback")
        place = FilePlace(stack, tmp_path / "state-aside")
    stack.start_redis()
    stack.serve()
    observer = stack.observe()
    worker = stack.worker()
    api_keys = stack.make_keys(2)
    acknowledged = stack.create_waiting(api_keys, 2)
    receipts = acknowledged + stack.create(api_keys, 22)  # and the server's key certificate: 49 entries
    assert stack.wait_for_size(log_size(24)).size == 49
    place.save_state()
    more = stack.create_waiting(api_keys, 2)
    acknowledged += more
    receipts += more + stack.create(api_keys, 28)
    final = stack.wait_for_size(log_size(54))
    assert final.size == 109
    assert worker.stop() == 0
    published = place.public()

    place.put_back_state()
    stack.flush_redis()
    state = place.state()
    reason = assert_refused_once(stack.worker(), "(size 109) is ahead of the tree state", "(size 49)")
    assert_state_changes(state, place.state())
    halted = place.halt()
    assert halted is not None and halted["evidence"]["kind"] == "refused", halted
    assert halted["evidence"]["detail"] in reason
    assert place.public() == published, "a refused worker changed a public object"
    wait_until(lambda: log_state(stack.base_url) == "halted", SEEN_WITHIN_S + 5, "/health to say halted")
    assert stack.served() == final

    done = run_cli("log", "resume", "--reason", "looked: .state/ was put back from a copy", env=place.env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert orjson.loads(done.stdout.splitlines()[-1])["resumed"] is True
    assert place.halt() is None
    state = place.state()
    assert_refused_once(stack.worker(), "(size 109) is ahead of the tree state")
    assert_state_changes(state, place.state())
    assert place.halt() is not None, "the refusal whose cause is still there is recorded again"
    assert place.public() == published
    wait_until(lambda: log_state(stack.base_url) == "halted", SEEN_WITHIN_S + 5, "/health to say halted again")
    assert stack.served() == final

    observer.stop()
    observer.store_dir = place.local_copy(tmp_path / "public-copy")
    assert stored_checkpoint(observer.store_dir, stack.verifier) == final
    assert_whole(
        observer.store_dir, stack.verifier, final, observers=[observer], receipts=receipts,
        acknowledged=acknowledged, checker=tlogcheck, tmp=tmp_path / "go",
    )  # fmt: skip


# --------------------------------------------------------------------------- 2. a new origin, the old Redis

NEW_ORIGIN = "renamed.example/v1/log"


def test_a_new_origin_on_an_old_redis_says_not_in_log_for_the_old_receipts(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """A log (origin A) holds 20 receipts; the server and worker are restarted with a new
    ``LOG_ORIGIN`` (its own key) and a new, empty store on the same Redis. Every old receipt's
    ``log-proof`` and ``bundle`` answer 404 ``not_in_log`` (not one 200, not even once the new
    log holds entries at their indices); a replay of an old receipt answers 200, its ``log`` in
    the pending form; new receipts get proofs under the new key; the new log holds only new
    receipts, and the old store still proves the old ones."""
    runs[request.node.name].result()


def _a_new_origin_on_an_old_redis_says_not_in_log_for_the_old_receipts(lane: Lane) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    old_log = stacks("origin-a")
    old_log.start_redis()
    old_log.serve()
    old_observer = old_log.observe()
    old_worker = old_log.worker()
    api_keys = old_log.make_keys(2)
    old_acknowledged = old_log.create_waiting(api_keys, 2)
    old = old_acknowledged + old_log.create(api_keys, 18)  # and the server's key certificate
    old_final = old_log.wait_for_size(log_size(20))
    assert old_final.size == 41
    old_log.assert_proofs(old)
    assert old_worker.stop() == 0
    old_observer.stop()
    assert old_log.service is not None
    old_log.service.stop()

    new_log = stacks("origin-b")
    new_log.redis.cleanup()
    new_log.redis = old_log.redis  # the same Redis
    new_log.signer = note.Signer.generate(NEW_ORIGIN)
    new_log.env |= {"LOG_ORIGIN": NEW_ORIGIN, "LOG_SIGNING_KEY": new_log.signer.encode()}
    new_log.serve()
    new_observer = new_log.observe()
    new_log.worker()
    # The new store is a new log: its first entry is its server's key certificate.
    assert new_log.wait_for_size(KEY_ENTRIES).size == KEY_ENTRIES, "the new store is a new log"
    key_of = {key["project_id"]: key for key in api_keys}

    def assert_not_in_new_log() -> None:
        for receipt in old:
            for route in ("log-proof", "bundle"):
                response = new_log.client.get(f"{new_log.base_url}/v1/receipts/{receipt['receipt_id']}/{route}")
                assert_error_body(response, 404, "not_in_log")

    assert_not_in_new_log()
    for receipt in old[:4]:
        replay = new_log.client.post(
            new_log.base_url + "/v1/receipts",
            headers={"Authorization": f"Bearer {key_of[receipt['project_id']]['api_key']}", "Prefer": "wait=1"},
            json={"input_hash": receipt["input_hash"]},
        )
        assert replay.status_code == 200, replay.text
        body = replay.json()
        assert body["idempotency"]["hit"] is True and body["receipt"]["receipt_id"] == receipt["receipt_id"]
        assert body["log"] == {"status": "pending", "proof_url": f"/v1/receipts/{receipt['receipt_id']}/log-proof"}
    new_acknowledged = new_log.create_waiting(api_keys, 2)
    new = new_acknowledged + new_log.create(api_keys, 8)
    new_final = new_log.wait_for_size(log_size(10))
    assert new_final.size == 21 and new_final.origin == NEW_ORIGIN
    new_log.assert_fills(new, new_final)
    assert_not_in_new_log()  # indices 0-20 are the new log's entries now: still none is given
    assert new_log.pending() == 0

    new_ids = assert_whole(
        new_log.store_dir, new_log.verifier, new_final, observers=[new_observer], receipts=new,
        acknowledged=new_acknowledged, checker=tlogcheck, tmp=tmp_path / "go-new",
    )  # fmt: skip
    assert not set(new_ids) & {receipt["receipt_id"] for receipt in old}
    assert old_log.stored() == old_final, "the old store was left as it was"
    assert_whole(
        old_log.store_dir, old_log.verifier, old_final, observers=[old_observer], receipts=old,
        acknowledged=old_acknowledged, checker=tlogcheck, tmp=tmp_path / "go-old",
    )  # fmt: skip


# --------------------------------------------------------------------------- 3. another deployment's Redis


def test_a_redis_restored_from_another_deployment_is_not_taken_for_this_log(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """Deployment X (origin O, key Kx, its store and Redis) makes 199 receipts, 99 in its log
    of 199 entries (each receipt's and its dsse leaf, with its server's key certificate) and
    100 still queued (no worker for them); its Redis is saved. Deployment Y (the same origin O,
    another key Ky, its own store) has a log of 29 when its Redis is restored from X's
    snapshot. Y's server answers every one of X's
    receipts' ``log-proof`` with 404
    ``not_in_log`` (0 of them 200, while Y's tree holds entries at their indices); Y's worker
    leaves X's 100 queued entries where they are (X's queue, X's count) and Y's log goes on
    with its own new receipts only."""
    runs[request.node.name].result()


def _a_redis_restored_from_another_deployment_is_not_taken_for_this_log(lane: Lane) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    x = stacks("deploy-x")
    x.start_redis()
    x.serve()
    x_worker = x.worker()
    x_keys = x.make_keys(3)
    x_integrated = x.create_waiting(x_keys, 2) + x.create(x_keys, 97)  # and X's key certificate
    x_log = x.wait_for_size(log_size(99))
    assert x_log.size == 199
    x.assert_fills(x_integrated, x_log)
    assert x_worker.stop() == 0
    x_queued = x.create(x_keys, 100)
    assert x.pending() == 100
    snapshot = tmp_path / "deploy-x.rdb"
    x.save_redis(snapshot)

    y = stacks("deploy-y")
    assert y.verifier.name == x.verifier.name and y.verifier.encode() != x.verifier.encode()
    y.start_redis()
    y.serve()
    observer = y.observe()
    y_worker = y.worker()
    y_keys = y.make_keys(2)
    y_acknowledged = y.create_waiting(y_keys, 2)
    y_receipts = y_acknowledged + y.create(y_keys, 12)  # and Y's key certificate
    assert y.wait_for_size(log_size(14)).size == 29
    first_receipts = len(y_receipts)
    assert y_worker.stop() == 0
    y.restore_redis(snapshot)
    wait_until(lambda: y.client.get(y.base_url + "/health").json()["store"] == "ok", 20, "Y's server's Redis")

    y.worker()
    y_receipts += y.create_waiting(x_keys, 2)  # X's projects, in the Redis Y has now
    y_acknowledged += y_receipts[-2:]
    y_receipts += y.create(x_keys, 18)
    final = y.wait_for_size(log_size(34))
    assert final.size == 69
    y.assert_proofs(y_receipts[first_receipts:])
    answers = collections.Counter()
    for receipt in x_integrated + x_queued:
        response = y.client.get(f"{y.base_url}/v1/receipts/{receipt['receipt_id']}/log-proof")
        answers[response.status_code] += 1
        assert_error_body(response, 404, "not_in_log")
    assert answers == {404: len(x_integrated + x_queued)}
    with redis.Redis.from_url(y.redis_url) as conn:
        assert int(conn.get(keys.log_pending_key(x.identity)) or 0) == 100, "X's queue was touched"
        x_waiting = sum(conn.llen(keys.log_queue_key(x.identity, key["project_id"])) for key in x_keys)
        assert x_waiting == 100
        assert int(conn.get(keys.log_size_key(y.identity)) or 0) == 69
    assert y.pending() == 0
    ids = assert_whole(
        y.store_dir, y.verifier, final, observers=[observer], receipts=y_receipts,
        acknowledged=y_acknowledged, checker=tlogcheck, tmp=tmp_path / "go",
    )  # fmt: skip
    assert not set(ids) & {receipt["receipt_id"] for receipt in x_integrated + x_queued}


# --------------------------------------------------------------------------- 4. killed inside creation


def test_a_worker_killed_inside_store_creation_is_finished_by_the_next(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """A server checks (and would finish) the store at its start; this one came up before its
    Redis answered, so it left the check to the worker (it says so), and the store was still
    empty. A worker with ``LOG_FAILPOINTS=created=kill`` dies by SIGKILL right after writing
    the store's identity: ``.state/identity``, no ``.state/tree``, no checkpoint (the route
    answers 404, not 500). Receipts made meanwhile queue; ``/health`` (``LOG_STALL_S=2``)
    says ``stalled`` once they have waited, every time it is asked, until a second worker
    finishes the creation ("finished creating"), integrates them (each proves) and ``/health``
    says ``ok`` again."""
    runs[request.node.name].result()


def _a_worker_killed_inside_store_creation_is_finished_by_the_next(lane: Lane) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    stack = stacks("creation")
    stack.serve(LOG_STALL_S=str(STALL_S))  # before its Redis: it cannot check the store
    assert stack.service is not None
    stack.service.wait_for_output("could not check the log store at start-up")
    assert not stack.store_dir.exists()
    stack.start_redis()
    wait_until(lambda: stack.client.get(stack.base_url + "/health").json()["store"] == "ok", 20, "the server's Redis")
    observer = stack.observe()

    doomed = stack.worker(LOG_FAILPOINTS="created=kill")
    assert wait_for_exit(doomed, "LOG_FAILPOINTS=created=kill") == -signal.SIGKILL, doomed.log()[-3000:]
    assert "LOG_FAILPOINTS created=kill: reached" in doomed.log()
    state = stack.store_dir / ".state"
    assert (state / "identity").exists() and not (state / "tree").exists()
    assert not (stack.store_dir / "checkpoint").exists()
    assert_error_body(stack.client.get(stack.base_url + "/v1/log/checkpoint"), 404, "not_found")

    api_keys = stack.make_keys(2)
    waiting = stack.create(api_keys, 10)
    created_at = time.monotonic()
    answers: list[tuple[float, str]] = []
    while time.monotonic() - created_at < JUDGED_WITHIN_S + 2:
        answers.append((time.monotonic() - created_at, log_state(stack.base_url)))
        time.sleep(0.1)
    late = [state for at, state in answers if at > JUDGED_WITHIN_S]
    assert late and set(late) == {"stalled"}, answers
    assert stack.pending() == 10

    finisher = stack.worker()
    wait_until(lambda: "finished creating the transparency log" in finisher.log(), WAIT_S, "the creation finished")
    # The server's key certificate waited in the server (never beside a store not yet made)
    # until the store existed: it enters the log with them.
    stack.wait_for_size(log_size(10))
    acknowledged = stack.create_waiting(api_keys, 2)
    receipts = waiting + acknowledged
    final = stack.wait_for_size(log_size(12))
    stack.assert_fills(receipts, final)
    wait_until(lambda: log_state(stack.base_url) == "ok", SEEN_WITHIN_S + 5, "/health to say ok again")
    assert [log_state(stack.base_url) for _ in range(5)] == ["ok"] * 5
    assert "created a new transparency log" not in finisher.log()
    assert finisher.process.poll() is None
    assert_whole(
        stack.store_dir, stack.verifier, final, observers=[observer], receipts=receipts,
        acknowledged=acknowledged, checker=tlogcheck, tmp=tmp_path / "go",
    )  # fmt: skip


# --------------------------------------------------------------------------- 5. a truncated checkpoint


def test_a_truncated_checkpoint_is_published_again_and_no_route_answers_500(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """The store's ``checkpoint`` truncated under a running, idle server and worker: while GET
    and HEAD of the checkpoint, a log-proof, a tile, a bundle and ``/v1/log`` are asked over and
    over, no answer is a 500 (the checkpoint served is the last good one); the worker publishes
    it again from the tree state (it parses, the same tree), and the log goes on whole.

    Then the checkpoint truncated again and the edge tile damaged too: the tiles prove nothing,
    so the worker refuses (exit 2, one ``LOG REFUSED``, ``.state/halt``), nothing is published
    or written, no route answers 500, ``/health`` says ``halted``. With the tile put back and
    ``log resume``, a new worker publishes the checkpoint again and the log goes on."""
    runs[request.node.name].result()


def _a_truncated_checkpoint_is_published_again_and_no_route_answers_500(lane: Lane) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    stack = stacks("truncated")
    stack.start_redis()
    stack.serve()
    observers = [stack.observe()]
    worker = stack.worker()
    api_keys = stack.make_keys(2)
    acknowledged = stack.create_waiting(api_keys, 2)
    receipts = acknowledged + stack.create(api_keys, 12)  # and the server's key certificate: 29 entries
    before = stack.wait_for_size(log_size(14))
    wait_until(lambda: parses(stack.store_dir / "checkpoint", stack.verifier), WAIT_S, "the stored checkpoint")
    assert stack.stored() == before
    observers[-1].stop()  # it would take the truncated file for a checkpoint that does not verify
    checkpoint_file = stack.store_dir / "checkpoint"
    good = checkpoint_file.read_bytes()
    proof_of = f"/v1/receipts/{receipts[0]['receipt_id']}/log-proof"
    paths = ["/v1/log", "/v1/log/checkpoint", proof_of, "/v1/log/tile/0/000.p/29", "/v1/log/tile/entries/000.p/29"]

    checkpoint_file.write_bytes(good[: len(good) // 2])
    answered = hammer(stack.base_url, paths, until=lambda: parses(checkpoint_file, stack.verifier), at_least_s=2.0)
    answered.assert_never_500({200})
    assert set(answered.checkpoints) == {good}, "a checkpoint other than the last good one was served"
    republished = stack.stored()
    assert (republished.size, republished.root) == (before.size, before.root)
    assert "published again from the tree state (size 29)" in worker.log()
    assert loud_records(worker) == []
    observers.append(stack.observe())
    receipts += stack.create(api_keys, 5)
    more = stack.create_waiting(api_keys, 1)
    acknowledged += more
    receipts += more
    grown = stack.wait_for_size(log_size(20))
    assert_whole(
        stack.store_dir, stack.verifier, grown, observers=observers, receipts=receipts,
        acknowledged=acknowledged, checker=tlogcheck, tmp=tmp_path / "go", more_texts=list(answered.checkpoints),
    )  # fmt: skip
    wait_until(lambda: stack.stored() == stack.served(), WAIT_S, "the server to read the newest checkpoint")

    # Truncated again, and the edge tile damaged: the tree state cannot be proven.
    edge = stack.store_dir / "tile/0/000.p/41"
    edge_bytes = edge.read_bytes()
    last_good = checkpoint_file.read_bytes()
    checkpoint_file.write_bytes(b"")
    edge.write_bytes(bytes(len(edge_bytes)))
    damaged = public_state(stack.store_dir)
    paths = ["/v1/log", "/v1/log/checkpoint", proof_of, "/v1/log/tile/0/000.p/41", "/v1/log/tile/entries/000.p/41"]
    answered = hammer(stack.base_url, paths, until=lambda: worker.process.poll() is not None, at_least_s=2.0)
    answered.assert_never_500({200, 503})
    assert set(answered.checkpoints) <= {last_good}, "a checkpoint other than the last good one was served"
    assert_refused_once(worker, "do not hash to its tree of size 41")
    halted = stack.store_dir / ".state/halt"
    assert halted.exists() and orjson.loads(halted.read_bytes())["evidence"]["kind"] == "refused"
    assert public_state(stack.store_dir) == damaged, "a refused worker wrote to the store"
    wait_until(lambda: log_state(stack.base_url) == "halted", SEEN_WITHIN_S + 5, "/health to say halted")
    # The receipt is in the log (its checkpoint commits to it, the bundle holds it): the store
    # failing to prove it is a 503, never "not in this log".
    assert answered.statuses[("GET", proof_of, 503)] and not answered.statuses[("GET", proof_of, 404)]
    for route in (proof_of, proof_of.replace("/log-proof", "/bundle")):
        assert_error_body(stack.client.get(stack.base_url + route), 503, "store_unavailable")

    # The operator puts the tile back and resumes: the checkpoint is published again.
    edge.write_bytes(edge_bytes)
    done = run_cli("log", "resume", "--reason", "the edge tile was restored", env={"LOG_STORE": stack.env["LOG_STORE"]})
    assert done.returncode == 0, done.stdout + done.stderr
    resumed = stack.worker()
    wait_until(lambda: parses(checkpoint_file, stack.verifier), WAIT_S, "the checkpoint published again")
    assert stack.stored() == grown
    observers.append(stack.observe())
    more = stack.create_waiting(api_keys, 1)
    acknowledged += more
    receipts += more
    final = stack.wait_for_size(log_size(21))
    assert resumed.process.poll() is None
    wait_until(lambda: log_state(stack.base_url) == "ok", SEEN_WITHIN_S + 5, "/health to say ok")
    assert_whole(
        stack.store_dir, stack.verifier, final, observers=observers, receipts=receipts,
        acknowledged=acknowledged, checker=tlogcheck, tmp=tmp_path / "go-after",
    )  # fmt: skip


# --------------------------------------------------------------------------- 6. /health in every web process


def request_pids(service: ServiceProcess, request_ids: list[str]) -> dict[str, int]:
    """The pid of the web process that answered each request (its request log line)."""
    found: dict[str, int] = {}

    def read() -> bool:
        for line in (service.stdout() + "\n" + service.stderr()).splitlines():
            if line.startswith("{") and '"request_id"' in line:
                record = orjson.loads(line)
                if record.get("msg") == "request":
                    found[record["request_id"]] = record["pid"]
        return all(request_id in found for request_id in request_ids)

    wait_until(read, 10, "the request lines of the answers")
    return found


def assert_every_process_says(service: ServiceProcess, since: float, after_s: float, state: str) -> None:
    """``/health`` asked over and over, each time on a new connection (so the kernel hands them
    to either web process), until ``after_s`` seconds after ``since`` and then for at least one
    more second and until two web processes (told apart by each answer's request id in their
    request log lines) have answered: every answer after ``after_s`` says ``state``."""
    answers: list[tuple[float, str, str]] = []  # (seconds since ``since``, request id, ``log``)
    while True:
        response = httpx.get(service.base_url + "/health", timeout=10)
        assert response.status_code == 200
        answers.append((time.monotonic() - since, response.headers["x-request-id"], response.json()["log"]))
        late = [(request_id, said) for at, request_id, said in answers if at > after_s]
        if answers[-1][0] > after_s + 1 and len(late) % 4 == 0:
            pids = request_pids(service, [request_id for request_id, _ in late])
            if len({pids[request_id] for request_id, _ in late}) >= 2:
                break
        if answers[-1][0] > after_s + 30:
            pytest.fail(f"one web process answered every time after {after_s} s: {late}")
        time.sleep(0.05)
    assert {said for _, said in late} == {state}, [(round(at, 2), said) for at, _, said in answers]


def metrics_gauge(service: ServiceProcess, token: str, name: str) -> str:
    response = httpx.get(service.base_url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 200
    return next(line for line in response.text.splitlines() if line.startswith(name + " "))


def test_health_says_stalled_then_ok_and_a_refusal_is_halted_in_every_web_process(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """``service.py serve`` with two web processes, ``LOG_STALL_S=2`` and no worker: a create,
    and from a few seconds after it every answer of ``/health``, from both processes, says
    ``stalled`` (``eps_log_stalled`` 1). A worker starts: every answer says ``ok`` once it has
    published. Then ``.state/`` is put back from a copy under the running worker and a receipt
    arrives: the worker refuses while it runs (exit 2, one ``LOG REFUSED`` line), and every
    answer of both processes says ``halted`` (``eps_log_halted`` 1); nothing public changed."""
    runs[request.node.name].result()


def _health_says_stalled_then_ok_and_a_refusal_is_halted_in_every_web_process(lane: Lane) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    token = secrets.token_hex(8)
    stack = stacks("health")
    stack.start_redis()
    stack.service = ServiceProcess(
        stack.folder, workers=2, redis_url=stack.redis_url,
        env={**stack.env, "LOG_STALL_S": str(STALL_S), "METRICS_TOKEN": token},
    ).start()  # fmt: skip
    service = stack.service
    observer = stack.observe()
    api_keys = stack.make_keys(2)
    receipts = stack.create(api_keys, 1)
    waiting_since = time.monotonic()
    assert_every_process_says(service, waiting_since, JUDGED_WITHIN_S, "stalled")
    assert [metrics_gauge(service, token, "eps_log_stalled") for _ in range(4)] == ["eps_log_stalled 1.0"] * 4

    worker = stack.worker()
    certified = 2 * KEY_ENTRIES  # each of the two web processes' key certificate
    stack.wait_for_size(log_size(1, certified))
    published_at = time.monotonic()
    assert_every_process_says(service, published_at, SEEN_WITHIN_S, "ok")
    acknowledged = stack.create_waiting(api_keys, 2)
    receipts += acknowledged
    assert stack.wait_for_size(log_size(3, certified)).size == log_size(3, certified)
    aside = tmp_path / "state-aside"
    shutil.copytree(stack.store_dir / ".state", aside)
    receipts += stack.create(api_keys, 5)
    final = stack.wait_for_size(log_size(8, certified))
    assert final.size == log_size(8, certified)
    wait_until(
        lambda: parses(stack.store_dir / "checkpoint", stack.verifier) and stack.stored() == final, 10, "size 18"
    )
    published = public_state(stack.store_dir)

    shutil.rmtree(stack.store_dir / ".state")
    shutil.copytree(aside, stack.store_dir / ".state")
    queued = stack.create(api_keys, 1)
    assert_refused_once(
        worker, f"(size {log_size(8, certified)}) is ahead of the tree state", f"(size {log_size(3, certified)})"
    )
    refused_at = time.monotonic()
    assert_every_process_says(service, refused_at, SEEN_WITHIN_S, "halted")
    assert [metrics_gauge(service, token, "eps_log_halted") for _ in range(4)] == ["eps_log_halted 1.0"] * 4
    assert public_state(stack.store_dir) == published, "a refused worker changed a public file"
    assert stack.pending() == 1 and stack.served() == final
    assert not {r["receipt_id"] for r in queued} & {r["receipt_id"] for r in receipts}
    assert_whole(
        stack.store_dir, stack.verifier, final, observers=[observer], receipts=receipts,
        acknowledged=acknowledged, checker=tlogcheck, tmp=tmp_path / "go",
    )  # fmt: skip


# --------------------------------------------------------------------------- 7. .state/tmp/


def test_temporary_files_left_in_the_store_are_removed_when_a_worker_starts(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """Files in ``.state/tmp/`` of an existing store (what writers that died between writing
    and renaming leave) are gone once a worker has started, which says how many it removed;
    nothing else in the store changed (bytes and modification times; the lease it takes
    aside), and the log goes on."""
    runs[request.node.name].result()


def _temporary_files_left_in_the_store_are_removed_when_a_worker_starts(lane: Lane) -> None:
    stacks = lane.stacks
    tlogcheck = lane.tlogcheck
    tmp_path = lane.tmp_path
    stack = stacks("tmp")
    stack.start_redis()
    worker = stack.worker()
    wait_for_stored(stack, 0)  # the store is created before any entry queues (else it is refused)
    api_keys = stack.make_keys(1)
    receipts = stack.issue(api_keys, 5)  # no server: no key certificate, each receipt's entry and leaf
    wait_for_stored(stack, log_size(5, 0))
    assert worker.stop() == 0
    tmp = stack.store_dir / ".state/tmp"
    junk = {
        secrets.token_hex(8): secrets.token_bytes(4096),
        secrets.token_hex(8): b"",
        "left-by-a-crash": b"x" * 70_000,
    }
    for name, data in junk.items():
        (tmp / name).write_bytes(data)

    def unchanged() -> dict[str, tuple[str, int]]:
        volatile = {"./", ".state/", ".state/tmp/", ".state/lease"}
        return {
            name: value
            for name, value in directory_state(stack.store_dir).items()
            if name not in volatile and not name.startswith(".state/tmp/")
        }

    before = unchanged()
    started = stack.worker()
    wait_until(lambda: not any(tmp.iterdir()), WAIT_S, "the temporary files to be removed")
    wait_until(lambda: f"removed {len(junk)} temporary files" in started.log(), 10, "the worker to say so")
    assert unchanged() == before, "the worker changed more than .state/tmp/ and its lease"
    receipts += stack.issue(api_keys, 2)
    final = wait_for_stored(stack, log_size(7, 0))
    assert final.size == 14
    assert started.process.poll() is None
    assert loud_records(started) == []
    assert_whole(
        stack.store_dir, stack.verifier, final, observers=[], receipts=receipts, acknowledged=[],
        checker=tlogcheck, tmp=tmp_path / "go",
    )  # fmt: skip


# --------------------------------------------------------------------------- 8. HEAD over HTTP


def remaining(response: httpx.Response) -> tuple[int, int]:
    """(r, t) of the ``RateLimit`` field: requests left in the window, seconds until it ends."""
    fields = dict(part.split("=", 1) for part in response.headers["ratelimit"].split(";")[1:])
    return int(fields["r"]), int(fields["t"])


def test_head_over_http_answers_like_get_with_its_content_length(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """Over real HTTP (``service.py serve``), HEAD of each route of the log's table — the
    description, the checkpoint, full and partial hash tiles of two levels, full and partial
    entry bundles, a log-proof, a checkpoint's time-stamps, and a tile beyond the tree (404) —
    answers with GET's status and headers, a ``Content-Length`` equal to the length of GET's
    body, and no body; and it takes one from the same per-address limit (``RateLimit``'s ``r``
    one lower than the GET's just before it)."""
    runs[request.node.name].result()


def _head_over_http_answers_like_get_with_its_content_length(lane: Lane) -> None:
    stacks = lane.stacks
    stack = stacks("head")
    stack.start_redis()
    stack.serve()
    stack.worker()
    api_keys = stack.make_keys(2)
    receipts = stack.issue(api_keys, 149)  # and the server's key certificate: 299 entries
    final = stack.wait_for_size(log_size(149))
    assert final.size == 299
    paths = {
        "/v1/log": 200,
        "/v1/log/checkpoint": 200,
        "/v1/log/tile/0/000": 200,
        "/v1/log/tile/0/001.p/43": 200,
        "/v1/log/tile/1/000.p/1": 200,
        "/v1/log/tile/entries/000": 200,
        "/v1/log/tile/entries/001.p/43": 200,
        f"/v1/receipts/{receipts[0]['receipt_id']}/log-proof": 200,
        "/v1/log/checkpoints/299/timestamps": 200,
        "/v1/log/tile/0/002": 404,
    }
    varying = {"date", "x-request-id", "ratelimit", "connection", "keep-alive"}
    # An error answer carries no ``RateLimit`` field: a 404's GET and HEAD are counted by the
    # change in a tile's ``r`` (the same ``log_tiles`` limit) around them.
    counter = "/v1/log/tile/0/000"
    with httpx.Client(timeout=10) as client:
        for path, status in paths.items():
            for _ in range(3):  # again, should the limit's window end in the middle
                around = [client.get(stack.base_url + counter)] if status != 200 else []
                got = client.get(stack.base_url + path)
                head = client.head(stack.base_url + path)
                around += [client.get(stack.base_url + counter)] if status != 200 else []
                measured = around or [got, head]
                if remaining(measured[1])[1] <= remaining(measured[0])[1]:
                    break
            assert got.status_code == head.status_code == status, (path, got.text)
            assert head.content == b"", path
            assert int(head.headers["content-length"]) == len(got.content) > 0, path
            assert int(got.headers["content-length"]) == len(got.content), path
            assert {k: v for k, v in head.headers.items() if k not in varying} == {
                k: v for k, v in got.headers.items() if k not in varying
            }, path
            if status == 200:
                assert remaining(head)[0] == remaining(got)[0] - 1, f"{path}: HEAD is counted like GET"
            else:
                assert remaining(around[1])[0] == remaining(around[0])[0] - 3, f"{path}: GET and HEAD counted"
            if status == 200 and "tile" in path:
                assert got.content == (stack.store_dir / path.removeprefix("/v1/log/")).read_bytes(), path


# --------------------------------------------------------------------------- 9. a backup copied over the store


def test_a_backup_copied_over_a_live_store_is_refused_until_the_newer_files_go(
    runs: dict[str, Future[None]], request: pytest.FixtureRequest
) -> None:
    """The operator's case, no witness: the log at 49 entries, the worker stopped, the store
    copied aside and Redis saved; the log goes on to 109 (two receipts acknowledged with their
    proofs past 49); the worker stopped, the copy put back over the store without deleting
    anything (``cp -a BACKUP/. STORE/``: ``.state/`` and the checkpoint at 49,
    ``tile/0/000.p/109`` and the other newer files left) and Redis restored from its dump. The
    tree state and the checkpoint agree, yet a worker started then exits 2 with one ``LOG
    REFUSED`` line naming a file beyond 49, ``.state/halt`` records the refusal, ``/health``
    says ``halted``, no checkpoint beyond 49 is published and no public byte changes. ``log
    resume`` alone: the next worker refuses again. With the newer files moved aside and ``log
    resume`` (and the web process restarted: it never serves a checkpoint older than one it has
    served), the log goes on from 49 and checks whole with Go's sumdb/tlog; the checkpoints
    signed past 49 are abandoned (the new tree does not extend them), as docs/log.md says of
    this recovery."""
    runs[request.node.name].result()


def _a_backup_copied_over_a_live_store_is_refused_until_the_newer_files_go(lane: Lane) -> None:
    stack = lane.stacks("copied-over")
    store_dir = stack.store_dir
    stack.start_redis()
    stack.serve()
    before = stack.observe()
    worker = stack.worker()
    api_keys = stack.make_keys(2)
    acknowledged = stack.create_waiting(api_keys, 2)
    receipts = acknowledged + stack.create(api_keys, 22)  # and the server's key certificate: 49 entries
    assert stack.wait_for_size(log_size(24)).size == 49
    assert wait_for_stored(stack, 49).size == 49
    assert worker.stop() == 0
    backup = lane.tmp_path / "backup"
    shutil.copytree(store_dir, backup, symlinks=True)  # cp -a STORE BACKUP
    dump = lane.tmp_path / "dump-49.rdb"
    stack.save_redis(dump)

    worker = stack.worker()
    abandoned = stack.create_waiting(api_keys, 2)
    stack.create(api_keys, 28)
    at_109 = stack.wait_for_size(log_size(54))
    assert at_109.size == 109
    assert worker.stop() == 0
    before.stop()
    before.assert_history(at_109)
    newer = {name: value[0] for name, value in public_state(store_dir).items() if name.startswith("tile/")}

    shutil.copytree(backup, store_dir, symlinks=True, dirs_exist_ok=True)  # cp -a BACKUP/. STORE/
    stack.restore_redis(dump)
    assert stored_checkpoint(store_dir, stack.verifier).size == 49
    copied = public_state(store_dir)
    assert {name: value[0] for name, value in copied.items() if name.startswith("tile/")} == newer
    beyond = files_beyond([name for name in copied if not name.endswith("/")], 49)
    assert "tile/0/000.p/109" in beyond and "tile/entries/000.p/109" in beyond, beyond
    published = Observer(None, store_dir, stack.verifier).start()  # the store's checkpoint, from now on

    reason = assert_refused_once(stack.worker(), "beyond its tree state (size 49)")
    named = re.search(r"holds (tile/\S+), beyond", reason)
    assert named is not None and named.group(1) in beyond, reason
    halted = orjson.loads((store_dir / ".state/halt").read_bytes())
    assert halted["evidence"]["kind"] == "refused" and named.group(1) in halted["evidence"]["detail"], halted
    wait_until(lambda: log_state(stack.base_url) == "halted", SEEN_WITHIN_S + 5, "/health to say halted")
    assert public_state(store_dir) == copied, "a refused worker changed a public file"

    done = run_cli("log", "resume", "--reason", "resumed without looking", env={"LOG_STORE": stack.env["LOG_STORE"]})
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (store_dir / ".state/halt").exists()
    assert_refused_once(stack.worker(), "beyond its tree state (size 49)")
    assert (store_dir / ".state/halt").exists(), "a resume alone halts again: the newer files are there"
    wait_until(lambda: log_state(stack.base_url) == "halted", SEEN_WITHIN_S + 5, "/health to say halted again")
    assert public_state(store_dir) == copied, "a refused worker changed a public file"
    published.stop()
    assert {checkpoint.size for checkpoint in published.seen["file"]} == {49}, published.seen
    assert not published.problems, published.problems

    # The documented recovery: the newer files moved aside, then `log resume`.
    aside = lane.tmp_path / "newer-files"
    for name in beyond:
        (aside / name).parent.mkdir(parents=True, exist_ok=True)
        (store_dir / name).rename(aside / name)
    done = run_cli(
        "log", "resume", "--reason", "moved the files beyond 49 aside", env={"LOG_STORE": stack.env["LOG_STORE"]}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert stack.service is not None
    stack.service.stop()  # it holds the checkpoint of 109 it read, and never serves an older one
    stack.serve()
    after = stack.observe()
    worker = stack.worker()
    more = stack.create_waiting(api_keys, 2)
    acknowledged += more
    receipts += more + stack.create(api_keys, 18)  # and the restarted server's key certificate
    final = stack.wait_for_size(49 + log_size(20))
    assert final.size == 90
    assert worker.process.poll() is None and loud_records(worker) == []
    wait_until(lambda: log_state(stack.base_url) == "ok", SEEN_WITHIN_S + 5, "/health to say ok")
    up_to_49 = [text for (size, _), text in before.texts.items() if size <= 49]
    assert_whole(
        store_dir, stack.verifier, final, observers=[after, published], receipts=receipts,
        acknowledged=acknowledged, checker=lane.tlogcheck, tmp=lane.tmp_path / "go", more_texts=up_to_49,
    )  # fmt: skip
    for receipt in abandoned:
        checkpoint, _ = note.open_checkpoint(note.parse_tlog_proof(receipt["_proof"]).checkpoint, stack.verifier)
        assert 49 < checkpoint.size <= 109
        with pytest.raises(tlog.ProofError):
            assert_extends(store_dir, checkpoint, final)


SCENARIOS: dict[str, tuple[Callable[[Lane], None], float]] = {
    "test_health_says_stalled_then_ok_and_a_refusal_is_halted_in_every_web_process": (
        _health_says_stalled_then_ok_and_a_refusal_is_halted_in_every_web_process, 45),
    "test_a_truncated_checkpoint_is_published_again_and_no_route_answers_500": (
        _a_truncated_checkpoint_is_published_again_and_no_route_answers_500, 25),
    "test_a_backup_copied_over_a_live_store_is_refused_until_the_newer_files_go": (
        _a_backup_copied_over_a_live_store_is_refused_until_the_newer_files_go, 25),
    "test_a_state_directory_put_back_with_redis_flushed_is_refused_and_signs_nothing[s3]": (
        functools.partial(_a_state_directory_put_back_with_redis_flushed_is_refused_and_signs_nothing, backend="s3"), 22),
    "test_a_state_directory_put_back_with_redis_flushed_is_refused_and_signs_nothing[file]": (
        functools.partial(_a_state_directory_put_back_with_redis_flushed_is_refused_and_signs_nothing, backend="file"), 20),
    "test_a_worker_killed_inside_store_creation_is_finished_by_the_next": (
        _a_worker_killed_inside_store_creation_is_finished_by_the_next, 18),
    "test_a_redis_restored_from_another_deployment_is_not_taken_for_this_log": (
        _a_redis_restored_from_another_deployment_is_not_taken_for_this_log, 16),
    "test_a_new_origin_on_an_old_redis_says_not_in_log_for_the_old_receipts": (
        _a_new_origin_on_an_old_redis_says_not_in_log_for_the_old_receipts, 14),
    "test_head_over_http_answers_like_get_with_its_content_length": (
        _head_over_http_answers_like_get_with_its_content_length, 12),
    "test_temporary_files_left_in_the_store_are_removed_when_a_worker_starts": (
        _temporary_files_left_in_the_store_are_removed_when_a_worker_starts, 10),
}  # fmt: skip
"""Each test's scenario, by test id, with about how many seconds it takes alone (the longest
start first)."""
