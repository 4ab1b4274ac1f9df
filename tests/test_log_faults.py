"""The faults the transparency log must survive (docs/log.md, "Never fork: what each fault does"), with real
processes: each test starts its own ``redis-server``, a real directory as ``LOG_STORE``,
``python service.py serve`` and ``python service.py worker`` processes, and looks at the log
from outside, as a monitor would: the checkpoints the service serves and the store's files.
tests/test_log.py drives the same faults in process; here the kill is a real kill -9 of a
worker (``LOG_FAILPOINTS=STEP=kill``), the race is between two worker processes, the restore is a
``redis-server`` restarted on an older ``dump.rdb``.

What every test holds the log to: a checkpoint seen once is a prefix of every later one
(consistency proofs computed from the store's tiles), no receipt id is in the log twice,
every receipt Redis holds has a log-proof that verifies, and a full tile once written keeps
its bytes. The last tests read the store's directory, served by a plain ``http.server``, with
two implementations nobody here wrote: tlog-scales and Go's ``golang.org/x/mod/sumdb/tlog``.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv import keys
from execution_proof.runtime.failpoints import STEPS
from execution_proof.transparency import cosignature, note, tlog
from tests.conftest import free_port, hash_of
from tests.log_stack import (
    ORIGIN,
    RECEIPT_ENTRY,
    WAIT_S,
    Stack,
    assert_extends,
    assert_included,
    assert_paired,
    certificate_indices,
    directory_state,
    entry_ids,
    go_checker,
    is_leaf_of,
    is_stopped,
    kill_9,
    log_entries,
    log_size,
    loud_records,
    static_server,
)
from tests.receipt_keys import KEY_ENTRIES
from tests.servers import (
    ServiceProcess,
    assert_error_body,
    create_key_cli,
    redis_snapshot,
    run_cli,
    serving,
    wait_until,
)
from tests.test_log_store_s3 import ACCESS_KEY, BUCKET, FOREIGN_VARIABLES, SECRET_KEY, MotoServer, moto  # noqa: F401

pytestmark = pytest.mark.slow

CRASH_POINTS = [step for step in STEPS if step not in ("created", "caught_half")]
"""Every step of a batch a worker can be killed at (``LOG_FAILPOINTS=STEP=kill``); a catch-up's
step is reached only after a fault: tests/test_log_restores.py."""

# --------------------------------------------------------------------------- 1. kill -9 at each step


@dataclass
class CrashRun:
    stack: Stack
    receipts: list[dict[str, Any]]
    before: note.Checkpoint
    crash_status: int
    crash_log: str
    final: note.Checkpoint


def run_crash(stack: Stack, point: str) -> CrashRun:
    """Five entries in the log (one batch, partial tiles: two receipts, each its entry and its
    dsse leaf, and the server's key certificate), then 150 more receipts (300 entries) over
    three projects queued while no worker runs; a worker started with
    ``LOG_FAILPOINTS=<point>=kill`` takes them in one batch, which completes tile 0, and kills
    itself there; another worker, started after, finishes."""
    stack.start_redis()
    stack.serve()
    observer = stack.observe()
    api_keys = stack.make_keys(3)
    receipts = stack.create(api_keys, 2)
    first = stack.worker()
    before = stack.wait_for_size(log_size(2))
    assert first.stop() == 0, first.log()[-2000:]
    receipts += stack.create(api_keys, 150)
    doomed = stack.worker(LOG_FAILPOINTS=f"{point}=kill")
    try:
        crash_status = doomed.process.wait(WAIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker with LOG_FAILPOINTS={point}=kill did not die:\n{doomed.log()[-3000:]}")
    doomed.stop()  # its RQ children, should any be left
    successor = stack.worker()
    final = stack.wait_for_size(log_size(152))
    # Killed after publication (which runs beside the sync), the doomed worker may have left
    # the checkpoint out and Redis behind it: the successor syncs once it has the lease.
    wait_until(lambda: stack.synced(log_size(152)), WAIT_S, "Redis to be in line with the tree of 305")
    successor.stop()
    observer.stop()
    return CrashRun(stack, receipts, before, crash_status, doomed.log(), final)


@pytest.fixture(scope="module")
def crash_runs(
    redis_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, concurrent.futures.Future[CrashRun]]]:
    """Every crash point's run, each on its own Redis, store and server, all at once: most of
    a run is the killed worker's lease running out (5 s), which the runs spend together."""
    folder = tmp_path_factory.mktemp("crashes")
    made = {point: Stack(folder / point, redis_binary, name=point) for point in CRASH_POINTS}
    try:
        with concurrent.futures.ThreadPoolExecutor(len(made)) as pool:
            runs = {point: pool.submit(run_crash, stack, point) for point, stack in made.items()}
            concurrent.futures.wait(runs.values())
        yield runs
    finally:
        with concurrent.futures.ThreadPoolExecutor(len(made)) as pool:
            list(pool.map(Stack.close, made.values()))


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_worker_killed_at_any_step_of_a_batch_is_finished_by_the_next(
    crash_runs: dict[str, concurrent.futures.Future[CrashRun]], point: str
) -> None:
    """kill -9 of the integrating worker after any step of a batch (stage, half the tiles,
    tiles, advance, unstage, half the acks, sync, sign, publish): the next worker finishes it.
    Every receipt has exactly one entry, its dsse leaf right after it, and a log-proof that
    verifies; the log only ever
    showed the old tree or the new one (served and on disk), the new one extends every
    checkpoint seen, no staged batch is left, and no full tile changed once it appeared."""
    run = crash_runs[point].result()
    stack = run.stack
    assert run.crash_status == -signal.SIGKILL, f"exit status {run.crash_status}:\n{run.crash_log[-3000:]}"
    assert f"LOG_FAILPOINTS {point}=kill: reached" in run.crash_log
    assert run.before.size == 5
    assert run.final.size == 305
    assert stack.stored() == run.final, "the store's checkpoint file is the one served"
    assert stack.observer is not None
    history = stack.observer.assert_history(run.final)
    assert {checkpoint.size for checkpoint in history} <= {0, 5, 305}, [c.size for c in history]
    ids = entry_ids(log_entries(stack.store_dir, run.final))
    assert len(ids) == len(set(ids)) == 152, "a receipt id is in the log twice"
    assert set(ids) == {receipt["receipt_id"] for receipt in run.receipts}
    stack.assert_fills(run.receipts, run.final)
    stack.assert_no_staging()
    assert stack.pending() == 0
    assert (stack.store_dir / "tile/0/000").exists() and not (stack.store_dir / "tile/0/000.p").exists()


# --------------------------------------------------------------------------- 2. two workers racing


def test_two_workers_racing_never_fork_and_lose_nothing(stacks: Callable[..., Stack]) -> None:
    """Two worker processes on one Redis and one store (started together on an empty store:
    they race to create it), creates flowing over HTTP from four projects meanwhile, and each
    worker killed -9 once and replaced while they flow, so the lease changes hands with
    entries in flight. Every checkpoint seen extends the last; the final tree holds each
    receipt issued exactly once, and each log-proof verifies."""
    stack = stacks("race")
    stack.start_redis()
    rivals = [stack.worker(), stack.worker()]
    stack.serve()
    observer = stack.observe()
    api_keys = stack.make_keys(4)
    receipts: list[dict[str, Any]] = []
    for round_ in range(8):
        receipts += stack.create(api_keys, 50)
        if round_ in (2, 5):
            victim = rivals.pop(0)
            assert kill_9(victim) == -signal.SIGKILL
            rivals.append(stack.worker())
        if round_:  # at most one round waits for the log (which holds the server's key certificate too)
            stack.wait_for_size(log_size(len(receipts) - 50))
    final = stack.wait_for_size(log_size(len(receipts)))
    assert final.size == log_size(len(receipts)) == log_size(400)
    observer.stop()
    observer.assert_history(final)
    ids = entry_ids(log_entries(stack.store_dir, final))
    assert len(set(ids)) == 400 and set(ids) == {receipt["receipt_id"] for receipt in receipts}
    stack.assert_fills(receipts, final)
    stack.assert_no_staging()


def staged_batches(store_dir: Path) -> list[str]:
    """The batches' entries in the store (``.state/staging/<size>.<nonce>``), by name."""
    found = []
    for directory, _, files in os.walk(store_dir / ".state" / "staging"):
        found += [(Path(directory) / name).relative_to(store_dir).as_posix() for name in files]
    return found


def mid_batch(store_dir: Path) -> bool:
    """Whether the tree state names a staged batch: staged, not yet advanced."""
    return "staged" in orjson.loads((store_dir / ".state" / "tree").read_bytes())


def lock_is_free(store_dir: Path) -> bool:
    """Whether the file store's lock (``.state/lock``) can be taken now (and let go at once)."""
    fd = os.open(store_dir / ".state" / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_worker_frozen_mid_batch_past_its_lease_forks_nothing_when_it_wakes(stacks: Callable[..., Stack]) -> None:
    """The sharpest race two workers can run: the active one stops dead in the middle of a
    batch (``LOG_FAILPOINTS=staged=stop``: it sends itself SIGSTOP once its batch is staged,
    as a VM paused or a process swapped out) for longer than its lease, the other takes the
    lease and finishes the staged batch itself while creates go on, then the first wakes up
    (SIGCONT) and carries on with its batch as if nothing happened. Its writes meet the
    other's: tiles already there with the same bytes, a tree state that moved (its
    compare-and-swap fails), a larger checkpoint published. Nothing forks, nothing is in the
    log twice, it says nothing above INFO about it, and it carries the log on once the other
    stops. (Every step, with Redis faults while it sleeps: tests/test_log_stalls.py.)"""
    stack = stacks("frozen")
    stack.start_redis()
    stack.serve()
    observer = stack.observe()
    api_keys = stack.make_keys(3)
    receipts = stack.create(api_keys, 300)
    active = stack.worker(LOG_FAILPOINTS="staged=stop")
    wait_until(lambda: is_stopped(active.pid), WAIT_S, "the active worker to stop itself with its batch staged")
    try:
        assert mid_batch(stack.store_dir) and staged_batches(stack.store_dir)
        assert lock_is_free(stack.store_dir), "it stopped outside the store's lock"
        # While it sleeps: the standby takes over (the lease runs out), finishes the batch the
        # sleeper staged, and goes on with new receipts.
        standby = stack.worker()
        receipts += stack.create(api_keys, 100)
        stack.wait_for_size(log_size(len(receipts)))
        assert "finishing the batch a stopped integrator staged" in standby.log()
        assert staged_batches(stack.store_dir) == []
    finally:
        active.process.send_signal(signal.SIGCONT)
    # The sleeper wakes in the middle of its batch; more receipts arrive.
    receipts += stack.create(api_keys, 50)
    stack.wait_for_size(log_size(len(receipts)))
    # The other stops: the one that slept carries the log on, from the tree as it is now.
    assert standby.stop() == 0
    receipts += stack.create(api_keys, 50)
    final = stack.wait_for_size(log_size(len(receipts)))
    assert final.size == log_size(len(receipts))
    assert active.process.poll() is None
    assert loud_records(active) == [], "the sleeper said more than INFO about being overtaken"
    observer.stop()
    observer.assert_history(final)
    ids = entry_ids(log_entries(stack.store_dir, final))
    assert len(set(ids)) == len(ids) and set(ids) == {receipt["receipt_id"] for receipt in receipts}
    stack.assert_fills(receipts, final)
    stack.assert_no_staging()


def test_a_worker_stopped_while_its_integrator_sleeps_mid_batch_exits_at_once_without_a_traceback(
    stacks: Callable[..., Stack],
) -> None:
    """SIGTERM while the integrator is paused in the middle of a batch for longer than the
    worker waits for it (``LOG_FAILPOINTS=staged=sleep:30000``): the worker exits 0 after its
    10 s, with one WARNING saying it leaves the integrator, no traceback (left to run into the
    interpreter's shutdown, its next store call failed with one), and the next worker
    finishes the staged batch."""
    stack = stacks("sigterm")
    stack.start_redis()
    stack.serve()
    api_keys = stack.make_keys(1)
    receipts = stack.create(api_keys, 5)
    sleeper = stack.worker(LOG_FAILPOINTS="staged=sleep:30000")
    wait_until(lambda: "staged=sleep:30000: reached" in sleeper.log(), WAIT_S, "the integrator to stage and sleep")
    sleeper.process.send_signal(signal.SIGTERM)
    assert sleeper.process.wait(25) == 0, sleeper.log()[-3000:]
    said = sleeper.log()
    assert "did not stop within 10 s" in said and "Traceback (most recent call last)" not in said, said[-3000:]
    assert mid_batch(stack.store_dir), "the batch is left staged, as a crash would leave it"
    successor = stack.worker()
    final = stack.wait_for_size(log_size(5))
    assert "finishing the batch a stopped integrator staged" in successor.log()
    stack.assert_fills(receipts, final)


# --------------------------------------------------------------------------- 3. Redis restored, Redis flushed


def test_redis_restored_from_an_older_rdb_never_forks_or_duplicates(stacks: Callable[..., Stack]) -> None:
    """The fault that forked the log when it lived in Redis (100 -> 109 -> 200 -> 100 -> 201):
    100 receipts queued; ``SAVE``; a worker puts them and 100 more in the log (published at
    200); Redis is killed and started again on the older ``dump.rdb`` (its queue holds the
    first 100 again, its synced size is 0); the worker is restarted; 100 more. No checkpoint
    ever goes back, each extends the last, the tree ends at 300 with no receipt id twice;
    every receipt Redis still holds has a working log-proof; the 100 Redis lost are still in
    the log, where they were."""
    stack = stacks("restore")
    stack.start_redis()
    stack.serve()
    observer = stack.observe()
    key = create_key_cli(stack.redis_url, project="restore")
    first = stack.create([key], 100)
    with redis.Redis.from_url(stack.redis_url) as conn:
        assert conn.save()
    older = stack.folder / "older.rdb"
    shutil.copyfile(Path(stack.redis.dir) / "dump.rdb", older)
    worker = stack.worker()
    second = stack.create([key], 100)
    at_200 = stack.wait_for_size(log_size(200))  # and the server's key certificate
    assert at_200.size == log_size(200)
    assert worker.stop() == 0
    stack.redis.stop(kill=True)
    shutil.copyfile(older, Path(stack.redis.dir) / "dump.rdb")
    stack.redis.start()  # the same port and directory: it loads the older dump.rdb
    with redis.Redis.from_url(stack.redis_url) as conn:
        assert conn.get(keys.log_size_key(stack.identity)) == b"0", "the snapshot predates the first batch"
        assert conn.exists(keys.receipt_key(second[0]["receipt_id"])) == 0
    restarted = stack.worker()
    wait_until(lambda: stack.client.get(stack.base_url + "/health").json()["store"] == "ok", 20, "the server's Redis")
    third = stack.create([key], 100)
    final = stack.wait_for_size(log_size(300))
    assert final.size == log_size(300)
    observer.stop()
    observer.assert_history(final)
    entries = log_entries(stack.store_dir, final)
    ids = entry_ids(entries)
    assert len(ids) == len(set(ids)) == 300, "a receipt id is in the log twice"
    assert_paired(entries)
    assert len(certificate_indices(entries)) == KEY_ENTRIES, "the restored certificate entered the log again"
    assert set(ids[:200]) == {r["receipt_id"] for r in first + second}
    assert set(ids[200:]) == {r["receipt_id"] for r in third}, "the log went on from 200"
    stack.assert_proofs(first + third)
    for receipt in second:  # gone from Redis, not from the log
        gone = stack.client.get(f"{stack.base_url}/v1/receipts/{receipt['receipt_id']}/log-proof")
        assert gone.status_code == 404
        index = entries.index(tlog.entry_bytes(receipt))
        assert_included(stack.store_dir, entries[index], index, final)
        assert is_leaf_of(entries[index + 1], receipt, ORIGIN)
    # The restored queue's entries were found in the tree, not added again.
    assert "queued entries were in the log already" in restarted.log()
    assert stack.pending() == 0


def test_redis_flushed_under_a_running_server_and_worker_the_log_goes_on(stacks: Callable[..., Stack]) -> None:
    """``FLUSHALL`` while the server and the worker run: Redis forgets the log, the store
    does not. With a new key (``service.py keys create``) the new receipts go into the log
    from its size (completing its first full tile), and nothing forks."""
    stack = stacks("flush")
    stack.start_redis()
    stack.serve()
    observer = stack.observe()
    worker = stack.worker()
    before = stack.create([create_key_cli(stack.redis_url, project="before-flush")], 100)
    at_100 = stack.wait_for_size(log_size(100))  # and the server's key certificate
    assert at_100.size == log_size(100)
    with redis.Redis.from_url(stack.redis_url) as conn:
        assert conn.flushall()
    after = stack.create([create_key_cli(stack.redis_url, project="after-flush")], 200)
    final = stack.wait_for_size(log_size(300))
    assert final.size == log_size(300)
    assert worker.process.poll() is None, f"the worker died of the flush:\n{worker.log()[-3000:]}"
    observer.stop()
    observer.assert_history(final)
    entries = log_entries(stack.store_dir, final)
    ids = entry_ids(entries)
    assert set(ids[:100]) == {r["receipt_id"] for r in before}
    assert set(ids[100:]) == {r["receipt_id"] for r in after} and len(set(ids)) == 300
    indices = stack.assert_proofs(after)
    assert sorted(indices) == list(range(at_100.size, final.size, 2))  # each followed by its leaf
    assert all(is_leaf_of(entries[i + 1], receipt, ORIGIN) for i, receipt in zip(indices, after, strict=True))
    gone = stack.client.get(f"{stack.base_url}/v1/receipts/{before[0]['receipt_id']}/log-proof")
    assert gone.status_code == 404  # Redis forgot the receipt; the log did not
    first = tlog.entry_bytes(before[0])
    assert_included(stack.store_dir, first, entries.index(first), final)


# --------------------------------------------------------------------------- 4. identities, a lost store


def assert_no_private_key(output: str, *signers: note.Signer) -> None:
    for signer in signers:
        secret = signer.encode()
        seed = secret.split("+", 4)[4]  # PRIVATE+KEY+<name>+<id>+<base64>, whose base64 may hold "+" too
        assert secret not in output and seed not in output, "a private key was printed"


def test_a_worker_of_another_identity_or_a_lost_store_is_refused_and_touches_nothing(
    stacks: Callable[..., Stack], tmp_path: Path
) -> None:
    """Against an existing store, ``service.py worker`` with another ``LOG_ORIGIN`` (and its
    key), or another ``LOG_SIGNING_KEY`` for the same origin, exits 2 naming both identities
    (origin and verifier key), prints no private key, and leaves every file of the store as
    it was. A ``LOG_STORE`` naming an empty (or missing) directory while Redis holds the log:
    exit 2 naming ``LOG_STORE``, nothing created there."""
    stack = stacks("identity")
    stack.start_redis()
    creator = stack.worker()
    wait_until(lambda: (stack.store_dir / "checkpoint").exists(), 30, "the worker to create the store")
    creator.stop()  # maybe before its signal handlers are in place: its exit status says nothing here
    assert stack.stored().size == 0
    untouched = directory_state(stack.store_dir)
    base_env = stack.worker_env()

    other_origin = note.Signer.generate("elsewhere.example/v1/log")
    done = run_cli(
        "worker", env={**base_env, "LOG_ORIGIN": other_origin.name, "LOG_SIGNING_KEY": other_origin.encode()}
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    for named in (ORIGIN, other_origin.name, stack.verifier.encode(), other_origin.verifier.encode()):
        assert named in output, f"{named} is not named in: {output}"
    assert_no_private_key(output, stack.signer, other_origin)

    other_key = note.Signer.generate(ORIGIN)
    done = run_cli("worker", env={**base_env, "LOG_SIGNING_KEY": other_key.encode()})
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert stack.verifier.encode() in output and other_key.verifier.encode() in output, output
    assert_no_private_key(output, stack.signer, other_key)
    assert directory_state(stack.store_dir) == untouched, "a refused worker changed the store"

    empty = tmp_path / "empty-store"
    empty.mkdir()
    missing = tmp_path / "no-such-store"
    for place in (empty, missing):
        done = run_cli("worker", env={**base_env, "LOG_STORE": f"file://{place}"})
        output = done.stdout + done.stderr
        assert done.returncode == 2, output
        assert "LOG_STORE" in output and str(place) in output, output
    assert list(empty.iterdir()) == [], "the refused worker created files in the empty store"
    assert not missing.exists()
    assert directory_state(stack.store_dir) == untouched


def test_a_server_in_embedded_mode_with_another_key_leaves_the_store_untouched(
    stacks: Callable[..., Stack], tmp_path: Path
) -> None:
    """Embedded mode (no ``REDIS_URL``) on an existing store with another key for the same
    origin: the server serves receipts, integrates nothing, and the store's files stay as
    they were."""
    stack = stacks("embedded")
    stack.start_redis()
    creator = stack.worker()
    wait_until(lambda: (stack.store_dir / "checkpoint").exists(), 30, "the worker to create the store")
    creator.stop()  # maybe before its signal handlers are in place: its exit status says nothing here
    untouched = directory_state(stack.store_dir)
    other_key = note.Signer.generate(ORIGIN)
    service = ServiceProcess(
        tmp_path, redis_url=None, receipt_root=None, env={**stack.env, "LOG_SIGNING_KEY": other_key.encode()}
    ).start()
    try:
        output = service.stdout() + service.stderr()
        assert "the log store is refused" in output and stack.verifier.encode() in output, output
        assert_no_private_key(output, stack.signer, other_key)
        demo = service.wait_for_output(r"eps_[A-Za-z0-9_-]{43}")[0].group(0)
        created = httpx.post(
            service.base_url + "/v1/receipts",
            headers={"Authorization": f"Bearer {demo}", "Prefer": "wait=2"},
            json={"input_hash": hash_of("embedded")},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        assert created.json()["log"]["status"] == "pending", "a refused store got the entry"
    finally:
        service.stop()
    assert directory_state(stack.store_dir) == untouched


@pytest.mark.parametrize("verb", ["serve", "worker"])
def test_redis_and_a_log_key_without_log_store_is_refused(verb: str) -> None:
    """``REDIS_URL`` and ``LOG_SIGNING_KEY`` but no ``LOG_STORE``: the server and the worker
    refuse to start (exit 2) with an error naming ``LOG_STORE`` (the log is never kept in
    Redis). The check comes before any connection: no Redis needs to answer."""
    signer = note.Signer.generate(ORIGIN)
    env = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "LOG_ORIGIN": ORIGIN, "LOG_SIGNING_KEY": signer.encode()}
    args = ["serve", "--host", "127.0.0.1", "--port", "0"] if verb == "serve" else ["worker"]
    done = run_cli(*args, env=env, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "LOG_STORE" in done.stderr
    assert_no_private_key(done.stdout + done.stderr, signer)


def test_embedded_mode_with_a_log_store_and_no_log_key_is_refused(tmp_path: Path) -> None:
    """No ``REDIS_URL``, ``LOG_STORE`` set, no ``LOG_SIGNING_KEY``: an ephemeral key could
    never match the store on the next start, so the server refuses, naming both variables,
    and creates no store."""
    store = tmp_path / "store"
    done = run_cli("serve", "--host", "127.0.0.1", "--port", "0", env={"LOG_STORE": f"file://{store}"}, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "LOG_STORE" in done.stderr and "LOG_SIGNING_KEY" in done.stderr, done.stderr
    assert not store.exists()


# --------------------------------------------------------------------------- 5. backpressure


def test_backpressure_over_http_refuses_without_a_trace_until_the_log_drains(stacks: Callable[..., Stack]) -> None:
    """``LOG_MAX_PENDING`` 5 besides the server's key certificate, and no worker: five creates are 201 (it counts
    receipts, not the two entries each adds to the log), the sixth 503 ``log_backlog`` with ``Retry-After``, using no monthly quota and writing nothing to Redis
    but the counters of the request's own rate limits; a replay still answers 200. A worker
    drains the queue and creates succeed again."""
    stack = stacks("backlog", LOG_MAX_PENDING=str(5 + KEY_ENTRIES))
    stack.start_redis()
    stack.serve()
    key = create_key_cli(stack.redis_url, project="backlog", plan="pro")
    headers = {"Authorization": f"Bearer {key['api_key']}"}
    created = stack.create([key], 5)
    assert stack.pending() == 5 + KEY_ENTRIES
    usage_before = stack.client.get(stack.base_url + "/v1/usage", headers=headers).json()
    before = redis_snapshot(stack.redis_url)
    body = {"input_hash": hash_of("refused")}
    refused = stack.client.post(stack.base_url + "/v1/receipts", headers=headers, json=body)
    after = redis_snapshot(stack.redis_url)
    assert_error_body(refused, 503, "log_backlog")
    assert refused.headers["retry-after"].isdigit() and int(refused.headers["retry-after"]) >= 1
    # What the refused request may write: the per-address counter of authenticated requests
    # (``ip:{ADDRESS}:authenticated:WINDOW``), which every request with a key bumps before the
    # key is looked up: the address's rate limit counts requests, refused or not. Nothing
    # else: no receipt, no queue entry, no idempotency record, no quota, not even the key's
    # own per-minute window (``m:``).
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    assert all(name.startswith(b"ip:") and b":authenticated:" in name for name in changed), sorted(changed)
    usage_after = stack.client.get(stack.base_url + "/v1/usage", headers=headers).json()
    assert usage_before["month"]["used"] == 5
    # Everything of the month but its countdown, which ticks between the two reads.
    ticking = "reset_in_seconds"
    assert {k: v for k, v in usage_after["month"].items() if k != ticking} == {
        k: v for k, v in usage_before["month"].items() if k != ticking
    }
    assert stack.pending() == 5 + KEY_ENTRIES
    # A replay of an existing receipt still answers.
    replay = stack.client.post(
        stack.base_url + "/v1/receipts", headers=headers, json={"input_hash": created[0]["input_hash"]}
    )
    assert replay.status_code == 200, replay.text
    assert replay.json()["idempotency"]["hit"] is True
    # A worker drains the queue; creates are accepted again.
    stack.worker()
    assert stack.wait_for_size(log_size(5)).size == log_size(5)
    wait_until(lambda: stack.pending() == 0, 20, "the pending count to drain")
    accepted = stack.client.post(stack.base_url + "/v1/receipts", headers=headers, json=body)
    assert accepted.status_code == 201, accepted.text


# --------------------------------------------------------------------------- 6. halt


class FakeWitness:
    """A witness on loopback that answers ``POST /add-checkpoint`` with 422 (it holds another
    history) until told to cosign (200 with a tlog-cosignature line by its key)."""

    def __init__(self) -> None:
        self.cosigner = cosignature.Cosigner.generate("witness.example/fake")
        self.cosigns = False
        self.requests = 0
        witness = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["content-length"])).decode()
                witness.requests += 1
                if self.path != "/add-checkpoint" or not witness.cosigns:
                    self._answer(422, b"inconsistent with the checkpoint I cosigned\n")
                    return
                signed = data.split("\n\n", 1)[1]  # after "old N", the proof and a blank line
                text = note.parse_note(signed).text
                self._answer(200, witness.cosigner.cosign(text, int(time.time())).encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def test_a_witness_showing_a_fork_halts_the_log_across_processes_until_resumed(
    stacks: Callable[..., Stack], tmp_path: Path
) -> None:
    """A witness answering 422 halts the worker's integrator: ``/health`` says ``"log":
    "halted"`` (still 200), ``/metrics`` ``eps_log_halted 1.0``, creates go on, and the
    worker says so once at critical level, not once per pass. ``log resume`` exits 0 (also
    with nothing halted); with the witness cosigning again the log publishes everything
    queued, cosigned, and ``/health`` says ``ok``."""
    witness = FakeWitness()
    with serving(witness.server) as url:
        policy = tmp_path / "policy.txt"
        token = secrets.token_hex(8)
        stack = stacks("halt", LOG_WITNESS_POLICY=str(policy), LOG_WITNESS_TIMEOUT_MS="3000")
        policy.write_text(f"log {stack.verifier.encode()}\nwitness w {witness.cosigner.key.encode()} {url}\nquorum w\n")
        stack.start_redis()
        stack.serve(METRICS_TOKEN=token)
        key = create_key_cli(stack.redis_url, project="halt")
        stack.create([key], 3)  # queued before the worker starts: one batch, the one disputed
        worker = stack.worker()

        def health() -> dict[str, Any]:
            response = stack.client.get(stack.base_url + "/health")
            assert response.status_code == 200
            answer: dict[str, Any] = response.json()
            return answer

        def halted_gauge() -> str:
            response = stack.client.get(stack.base_url + "/metrics", headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 200
            return next(line for line in response.text.splitlines() if line.startswith("eps_log_halted "))

        wait_until(lambda: health()["log"] == "halted", 30, f"/health to say halted (worker: {worker.log()[-2000:]})")
        halted_at = time.monotonic()
        assert (stack.store_dir / ".state/halt").exists()
        assert halted_gauge() == "eps_log_halted 1.0"
        assert stack.served().size == 0, "the checkpoint the witness disputed is not published"
        # The disputed batch left its queues when the tree advanced (before the witness was
        # asked); the tree waits in the store, unpublished. Creates go on and queue.
        stack.create([key], 2)
        assert stack.pending() == 2
        wait_until(lambda: time.monotonic() - halted_at > 4, 10, "a few seconds of a halted integrator")
        [halt_line] = [line for line in worker.log().splitlines() if "LOG HALTED" in line]
        assert orjson.loads(halt_line)["level"] == "critical", halt_line
        assert stack.served().size == 0 and stack.pending() == 2

        witness.cosigns = True
        for lifted in (True, False):  # the second run finds nothing halted, and says so
            done = run_cli("log", "resume", "--reason", "checked", env={"LOG_STORE": stack.env["LOG_STORE"]})
            assert done.returncode == 0, done.stderr
            assert orjson.loads(done.stdout.splitlines()[-1])["resumed"] is lifted
        final = stack.wait_for_size(log_size(5))  # and the server's key certificate
        assert final.size == log_size(5)
        served = stack.client.get(stack.base_url + "/v1/log/checkpoint").text
        assert cosignature.cosignatures(note.parse_note(served), [witness.cosigner.key]), "not cosigned"
        wait_until(lambda: health()["log"] == "ok", 10, "/health to say ok again")
        assert halted_gauge() == "eps_log_halted 0.0"
        assert worker.log().count("LOG HALTED") == 1
        assert worker.process.poll() is None


# --------------------------------------------------------------------------- 7 and 8: a log to copy and read


@pytest.fixture(scope="module")
def site(redis_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A log of 557 entries grown in three batches of receipts, each its entry and its dsse
    leaf (150, 1, 127: 301, 303 and 557 entries with the server's key certificate): full and
    partial tiles at levels 0 and 1, partial bundles; the checkpoints at 0 and 301 kept as
    files."""
    folder = tmp_path_factory.mktemp("site")
    stack = Stack(folder / "site", redis_binary, name="site")
    try:
        stack.start_redis()
        stack.serve()  # it creates the store: its size-0 checkpoint, kept before a worker runs
        kept: dict[int, Path] = {}
        assert stack.wait_for_size(0).size == 0
        kept[0] = folder / "checkpoint-0"
        kept[0].write_bytes((stack.store_dir / "checkpoint").read_bytes())
        assert stack.stored().size == 0
        stack.worker()
        api_keys = stack.make_keys(2)
        receipts: list[dict[str, Any]] = []
        for count in (150, 1, 127):
            receipts += stack.create(api_keys, count)
            reached = stack.wait_for_size(log_size(len(receipts)))
            assert reached.size == log_size(len(receipts))
            if reached.size == 301:
                kept[301] = folder / "checkpoint-301"
                kept[301].write_bytes((stack.store_dir / "checkpoint").read_bytes())
        assert note.parse_checkpoint(note.parse_note(kept[301].read_bytes()).text).size == 301
        yield {"stack": stack, "keys": api_keys, "receipts": receipts, "kept": kept, "folder": folder}
    finally:
        stack.close()


def export(site: dict[str, Any], target: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli("log", "export", "--to", target, env={"LOG_STORE": site["stack"].env["LOG_STORE"], **env})


def check_copy(store_dir: Path, verifier: note.Verifier) -> note.Checkpoint:
    """A copied store checks as any outsider checks a log: its checkpoint verifies under the
    log's key and the whole tree under it (every entry, every tile, the root), and it holds
    every receipt's entry with its dsse leaf after it."""
    checkpoint, _ = note.open_checkpoint((store_dir / "checkpoint").read_bytes(), verifier)
    assert_paired(log_entries(store_dir, checkpoint))
    return checkpoint


def test_log_export_copies_and_verifies_and_refuses_a_tampered_copy(site: dict[str, Any], tmp_path: Path) -> None:
    """``log export --to file:///OTHER``: exit 0 and one JSON line; the copy verifies; after
    the log grew, a second export into the same place (a prefix of the same log) brings it
    up to date; an export while receipts flow copies the checkpoint it started from; a full
    tile tampered with in the copy makes the next export exit 1; a ``--to`` that cannot be
    parsed or reached exits 2."""
    stack: Stack = site["stack"]
    target = tmp_path / "copy"
    done = export(site, f"file://{target}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    report = orjson.loads(lines[0])
    assert report["ok"] is True and report["size"] == stack.served().size
    copied = check_copy(target, stack.verifier)
    assert copied.size == report["size"]
    assert (target / ".state/identity").read_bytes() == (stack.store_dir / ".state/identity").read_bytes()

    grown = stack.create(site["keys"], 20)
    site["receipts"] += grown
    larger = stack.wait_for_size(copied.size + log_size(20, 0))
    done = export(site, f"file://{target}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert orjson.loads(done.stdout)["size"] == larger.size
    again = check_copy(target, stack.verifier)
    assert again.size == larger.size
    assert_extends(target, copied, again)

    # A live log: receipts keep coming (and partial tiles keep going) while it is copied.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        flowing = pool.submit(stack.create, site["keys"], 300, 2)
        live = tmp_path / "live"
        done = export(site, f"file://{live}")
        site["receipts"] += flowing.result()
    assert done.returncode == 0, done.stdout + done.stderr
    assert check_copy(live, stack.verifier).size == orjson.loads(done.stdout)["size"] >= larger.size
    assert_extends(
        stack.store_dir, check_copy(live, stack.verifier), stack.wait_for_size(log_size(len(site["receipts"])))
    )

    tile = target / "tile/0/000"
    tampered = bytearray(tile.read_bytes())
    tampered[0] ^= 1
    tile.write_bytes(bytes(tampered))
    done = export(site, f"file://{target}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert orjson.loads(done.stdout.splitlines()[-1])["ok"] is False

    for unusable in ("ftp://example.com/log", "file://relative/path", "s3://", "not a url"):
        done = export(site, unusable)
        assert done.returncode == 2, f"{unusable}: {done.stdout}{done.stderr}"
    aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}", "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}  # fmt: skip
    done = export(site, "s3://nobody-listens/log", **aws)
    assert done.returncode == 2, done.stdout + done.stderr
    assert SECRET_KEY not in done.stdout + done.stderr


def test_log_export_to_s3_and_back_gives_the_same_files(
    site: dict[str, Any],
    moto: MotoServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``file://`` to ``s3://`` (moto's S3 server) exits 0; exported back from ``s3://`` to
    another directory (``LOG_STORE`` the bucket), the public files are byte for byte the
    source's, and the tree verifies."""
    stack: Stack = site["stack"]
    aws: dict[str, str | None] = dict.fromkeys(FOREIGN_VARIABLES)
    aws |= {"AWS_ENDPOINT_URL": moto.endpoint, "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}  # fmt: skip
    bucket = f"s3://{BUCKET}/faults-{secrets.token_hex(4)}"
    done = run_cli("log", "export", "--to", bucket, env={"LOG_STORE": stack.env["LOG_STORE"], **aws})
    assert done.returncode == 0, done.stdout + done.stderr
    size = orjson.loads(done.stdout)["size"]
    back = tmp_path / "back"
    done = run_cli("log", "export", "--to", f"file://{back}", env={**aws, "LOG_STORE": bucket})
    assert done.returncode == 0, done.stdout + done.stderr
    assert orjson.loads(done.stdout)["size"] == size
    assert check_copy(back, stack.verifier).size == size == stack.stored().size
    public = [p.relative_to(back) for p in back.rglob("*") if p.is_file() and ".state" not in p.parts]
    assert Path("checkpoint") in public and len(public) > 4
    for name in public:
        assert (back / name).read_bytes() == (stack.store_dir / name).read_bytes(), name


# --------------------------------------------------------------------------- 8. implementations nobody here wrote


@pytest.fixture(scope="module")
def static_log(site: dict[str, Any]) -> Iterator[str]:
    """The site's store directory as it lies on disk, served by ``python -m http.server``."""
    with static_server(site["stack"].store_dir) as url:
        yield url


def test_tlog_scales_reads_the_store_served_by_a_plain_web_server(site: dict[str, Any], static_log: str) -> None:
    """tlog-scales' ``HttpBackend`` over ``http.server`` serving the store directory: our
    signature verifies under our verifier key, the root it computes from the tiles is the
    checkpoint's, the entries are the receipts' and their dsse leaves, and its inclusion and
    consistency proofs check (against the proofs the service serves, too)."""
    from tlog_scales.backend import HttpBackend
    from tlog_scales.reader import TilesReader
    from tlog_scales.signing import Vkey

    stack: Stack = site["stack"]
    reader = TilesReader(HttpBackend(static_log))
    theirs = reader.get_checkpoint()
    theirs.verify(Vkey.from_string(stack.verifier.encode()))  # raises unless it verifies
    ours = stack.stored()
    assert (theirs.size, theirs.root_hash) == (ours.size, ours.root) and ours.size >= 557
    assert reader.calculate_root_hash() == ours.root
    by_id = {receipt["receipt_id"]: receipt for receipt in site["receipts"]}
    certificates = certificate_indices(log_entries(stack.store_dir, ours))
    sampled = sorted({0, 1, 255, 256, 299, 300, 301, 302, 511, 512, ours.size - 2, ours.size - 1} - set(certificates))
    for index in sampled:
        entry = reader.get_entry(index)
        leaf = not entry.startswith(RECEIPT_ENTRY)  # else the dsse leaf of the receipt just before it
        receipt = by_id[tlog.LogEntry.parse(reader.get_entry(index - 1) if leaf else entry).receipt_id]
        assert is_leaf_of(entry, receipt, ORIGIN) if leaf else entry == tlog.entry_bytes(receipt)
        proof = reader.get_inclusion_proof(index, ours.size)
        proof.check(tlog.leaf_hash(entry), ours.root)
        served = note.parse_tlog_proof(
            stack.client.get(f"{stack.base_url}/v1/receipts/{receipt['receipt_id']}/log-proof").text
        )
        served_checkpoint = note.parse_checkpoint(note.parse_note(served.checkpoint).text)
        if served_checkpoint.size == ours.size:
            assert served.index == index - leaf
            if not leaf:
                assert list(served.path) == proof.node_hashes
    old = note.parse_checkpoint(note.parse_note(site["kept"][301].read_bytes()).text)
    reader.get_consistency_proof(old.size, ours.size).check(old.root, ours.root)


def test_go_sumdb_tlog_checks_the_store_served_by_a_plain_web_server(
    site: dict[str, Any], static_log: str, tmp_path: Path
) -> None:
    """Go's ``golang.org/x/mod/sumdb/note`` verifies the checkpoint's signature (our verifier
    key is signed-note standard) and ``golang.org/x/mod/sumdb/tlog`` reads the C2SP tiles
    through http.server: the tree hash is the root, every entry hashes to its leaf, inclusion
    and consistency proofs (from sizes 0 and 301) check, over a log whose receipts each have
    their dsse leaf. It fails, as it should, on a forged older checkpoint and on another key."""
    checker = go_checker(tmp_path)
    stack: Stack = site["stack"]
    kept = site["kept"]

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(checker), "-url", static_log, *args], capture_output=True, text=True, timeout=120, check=False
        )

    ours = stack.stored()
    entries = log_entries(stack.store_dir, ours)
    assert_paired(entries)
    assert sum(entry.startswith(tlog.DSSE_HEADER) for entry in entries) == len(entry_ids(entries)) >= 278
    done = check("-vkey", stack.verifier.encode(), "-old", str(kept[0]), "-old", str(kept[301]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"ok origin={ORIGIN} size={ours.size} ")
    assert f"entries={ours.size} " in done.stdout and "consistency=2" in done.stdout
    # A checkpoint of size 301 with another root, signed by the log's key: a fork it must see.
    forged = tmp_path / "forged"
    forged.write_text(note.sign_note(note.Checkpoint(ORIGIN, 301, bytes(32)).text(), stack.signer))
    done = check("-vkey", stack.verifier.encode(), "-old", str(forged))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "does not extend" in done.stderr
    stranger = note.Signer.generate(ORIGIN).verifier.encode()
    done = check("-vkey", stranger)
    assert done.returncode == 1 and "signature" in done.stderr, done.stdout + done.stderr
