"""Stalls (docs/log.md, "Fencing: why a stale writer writes nothing
wrong"), with real processes: a ``python service.py worker`` stops itself at a step of a batch
(``LOG_FAILPOINTS=STEP=stop``: SIGSTOP, as a frozen VM or a long GC pause stops it), Redis is
left alone, flushed, or restarted on an older ``dump.rdb`` while it sleeps, another worker
takes the lease and carries the log on, and then the sleeper is continued (SIGCONT) in the
middle of what it was doing. The same with the sleeper's own ``sleep:MS`` (it wakes up by
itself), and on an ``s3://`` store (moto's server).

Each run is one log of its own (tests/log_stack.py ``Stack``: its own ``redis-server``, store,
``service.py serve`` and workers), read from outside when it is over:

- the sleeper is still running, said nothing at ERROR or CRITICAL and printed no traceback
  (a pause is not a fault; with Redis killed and restarted under it, only the job queue's
  own report of that outage, docs/observability.md), found the tree moved and said so at
  INFO when it stopped before its tree advanced, and carried the log on once the other
  worker stopped;
- the store holds no halt record and no staged batch; Redis's queues are empty;
- every checkpoint served or written while it ran is a prefix of the final one (consistency
  proofs from the store's tiles, and Go's ``golang.org/x/mod/sumdb/tlog`` over the store
  behind a plain web server, with every checkpoint seen as an older one); no full tile ever
  changed; no tile or bundle that existed when the sleeper woke holds other bytes after it,
  every partial tile left is a prefix of its longer versions (one history), and the tile
  routes serve the store's bytes;
- the whole tree checks (every entry, tile and root) and holds exactly what it must: no
  receipt id twice, the stopped batch (4,096 entries) in it once staged, the receipts Redis
  kept, the new ones, and nothing else;
- every receipt acknowledged with its proof (``Prefer: wait``) is at the index its proof
  named, and that proof still verifies against its own checkpoint; every receipt Redis still
  holds has its index there (and a sample of them a ``log-proof`` that verifies).

The runs go on at once, eight at a time (``stall_runs``), and each test asserts on its own.
Last, the fault point itself: ``stop`` stops the thread that reached the step before it goes
on (it did not always: runtime/failpoints.py).

tests/test_log_fencing.py runs the same story in process (each step, each Redis fault);
tests/test_log_faults.py kills workers instead of stopping them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import itertools
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.jobs.worker import RQ_RETRY_MESSAGE
from execution_proof.runtime.failpoints import STEPS
from execution_proof.transparency import note, tlog
from tests.log_stack import (
    WAIT_S,
    Observer,
    Stack,
    assert_included,
    assert_paired,
    certificate_indices,
    entry_ids,
    go_check,
    is_leaf_of,
    is_stopped,
    log_entries,
    log_records,
    log_size,
    loud_records,
    setup_store,
)
from tests.receipt_keys import KEY_ENTRIES
from tests.servers import WorkerProcess, clean_env, run_cli, wait_until
from tests.test_log_store_s3 import (  # noqa: F401 (moto: the session's fixture, asked for by name)
    ACCESS_KEY,
    BUCKET,
    FOREIGN_VARIABLES,
    SECRET_KEY,
    MotoServer,
    keys_in,
    moto,
    s3_client,
)

pytestmark = pytest.mark.slow

BATCH_STEPS = [step for step in STEPS if step not in ("created", "caught_half", "published")]
"""Every step inside a batch (``created`` is store creation; ``published`` ends the batch; a
catch-up's ``caught_half`` comes only after a fault: tests/test_log_restores.py)."""
REDIS_FAULTS = ["none", "flushall", "restore"]
S3_CASES = [("staged", "none"), ("staged", "flushall"), ("tiles_half", "none"), ("tiles_half", "flushall"),
            ("advanced", "restore")]  # fmt: skip
FIRST_RECEIPTS = 2
FIRST = log_size(FIRST_RECEIPTS)
"""Entries in the log before the stall (the server's key certificate and FIRST_RECEIPTS
receipts, each its entry and its dsse leaf): partial tiles and a partial bundle."""
BACKLOG = 4150
"""Receipts queued in two projects when the sleeper starts: its batch is a full 4,096 (queue
items: 8,192 entries), 54 stay queued."""
LATE = 40
"""Issued after the Redis snapshot: a restore forgets them (they are in the log only if the
stopped batch took them)."""
MAX_BATCH = 4096
"""The integrator's batch (docs/log.md, "Sequencing": up to 4,096 queue items a batch, a
receipt's entry and its dsse leaf being one item)."""
IN_FLIGHT = 8
"""Runs at once: most of a run is waiting (a lease running out, processes starting)."""
SLEEP_MS = 15_000
"""The sleeper's pause in ``sleep:MS``: past its 5 s lease, with room for the standby to take
the lease (up to 6.25 s after the pause began) and finish the batch before the sleeper wakes,
with eight runs at once on two cores; with 7 s that room was under a second."""
PROOF_SAMPLE = 20
"""Receipts (besides those acknowledged with a proof) whose ``log-proof`` route is checked; the
index Redis records is checked for every receipt it holds."""
OBSERVE_S = 0.2
"""The observer's poll: seven logs at once, each polled every 20 ms, took more than a core of
this process."""
QUEUE_OUTAGE = (("rq.worker", RQ_RETRY_MESSAGE), ("rq.scheduler", "raised an exception"))
TRACEBACK = "Traceback (most recent call last)"


# --------------------------------------------------------------------------- the store, from outside


class StoreView:
    """The log store's objects as another process reads them: a directory, or a bucket."""

    def __init__(self, directory: Path | None = None, moto_server: MotoServer | None = None, prefix: str = "") -> None:
        self.directory = directory
        self.moto = moto_server
        self.prefix = prefix
        self.client = s3_client(moto_server) if moto_server is not None else None

    def read(self, name: str) -> bytes | None:
        if self.directory is not None:
            try:
                return (self.directory / name).read_bytes()
            except FileNotFoundError:
                return None
        try:
            data: bytes = self.client.get_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}")["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return data

    def write(self, name: str, data: bytes) -> None:
        """As another writer would: whole or not at all (a rename, one PUT)."""
        if self.directory is not None:
            target = self.directory / name
            temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
            temporary.write_bytes(data)
            os.replace(temporary, target)
        else:
            self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{name}", Body=data)

    def names(self, under: str) -> list[str]:
        if self.directory is not None:
            root = self.directory / under
            return sorted(p.relative_to(self.directory).as_posix() for p in root.rglob("*") if p.is_file())
        assert self.moto is not None
        return sorted(key[len(self.prefix) + 1 :] for key in keys_in(self.moto, BUCKET, f"{self.prefix}/{under}"))

    def tiles(self) -> dict[str, bytes]:
        """Every tile and bundle, full or partial, by name."""
        found = {}
        for name in self.names("tile/"):
            data = self.read(name)
            if data is not None:  # a partial tile removed since it was listed
                found[name] = data
        return found

    def lease_token(self) -> str:
        """The token of the integrator that last took or renewed the lease ("" when none has,
        or it was given up), expired or not."""
        data = self.read(".state/lease")
        return "" if data is None else str(orjson.loads(data)["token"])

    def hold_lease(self, seconds: float) -> None:
        """Stand in for an integrator holding the lease (``until_ms`` ahead): workers wait."""
        until = int(time.time() * 1000 + seconds * 1000)
        self.write(".state/lease", orjson.dumps({"token": "held-by-the-test", "until_ms": until}))

    def drop_lease(self) -> None:
        self.write(".state/lease", orjson.dumps({"token": "", "until_ms": 0}))

    def tree(self) -> dict[str, Any]:
        data = self.read(".state/tree")
        assert data is not None, "no tree state"
        tree: dict[str, Any] = orjson.loads(data)
        return tree


def settled(stack: Stack, view: StoreView) -> bool:
    """Nothing queued, no batch staged, and the checkpoint served is the tree state's."""
    try:
        if stack.pending():
            return False
        tree = view.tree()
        return "staged" not in tree and stack.served().size == tree["size"]
    except (OSError, AssertionError, httpx.HTTPError, ValueError):
        return False  # Redis restarting, the server reconnecting, a file being replaced


def redis_ready(stack: Stack) -> bool:
    try:
        return bool(stack.client.get(stack.base_url + "/health").json()["store"] == "ok")
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def one_history(tiles: dict[str, bytes]) -> list[str]:
    """Tiles of one index whose bytes are not prefixes of each other (a full tile and its
    partial ones, ``<N>.p/<W>``): each names two versions that belong to different trees."""
    by_tile: dict[str, list[str]] = {}
    for name in tiles:
        by_tile.setdefault(name.split(".p/")[0], []).append(name)
    wrong = []
    for names in by_tile.values():
        ordered = sorted(names, key=lambda name: len(tiles[name]))
        for shorter, longer in itertools.pairwise(ordered):
            if not tiles[longer].startswith(tiles[shorter]):
                wrong.append(f"{shorter} is not a prefix of {longer}")
    return wrong


def redis_indices(stack: Stack, receipts: list[dict[str, Any]]) -> dict[str, int | None]:
    """For each receipt Redis still holds, its index in the log as Redis records it (None:
    not integrated): what its ``log-proof`` is built from."""

    async def run() -> dict[str, int | None]:
        store = setup_store(stack.redis_url)

        async def one(receipt: dict[str, Any]) -> tuple[str, bool, int | None]:
            rid = receipt["receipt_id"]
            if await store.receipts.get_receipt_json(rid) is None:
                return rid, False, None
            index = await store.log_queue.log_index(stack.identity, receipt["project_id"], rid, receipt["receipt_hash"])
            return rid, True, index

        try:
            found: dict[str, int | None] = {}
            for at in range(0, len(receipts), 500):
                for rid, held, index in await asyncio.gather(*(one(r) for r in receipts[at : at + 500])):
                    if held:
                        found[rid] = index
            return found
        finally:
            await store.close()

    return asyncio.run(run())


# --------------------------------------------------------------------------- one run


def loud_lines(worker: WorkerProcess, redis_restarted: bool) -> list[str]:
    """``loud_records``: what the worker said at ERROR or CRITICAL, and any traceback. With
    Redis killed and restarted under it (a restore), less the job queue's own report of that
    outage (docs/observability.md, "One line per outage"), each at most once: RQ's first
    ``could not connect`` line, and RQ's scheduler's exception (a process of its own: RQ logs
    it, and Python's multiprocessing prints the same traceback again, raw, under ``Process
    Scheduler:``). Everything else, the log's integrator (``eps.log``) first, is held to
    WARNING and below either way."""
    if not redis_restarted:
        return loud_records(worker)
    loud, said = [], dict.fromkeys((name for name, _ in QUEUE_OUTAGE), 0)
    raw, reported, text = 0, 0, worker.log()
    for line in text.splitlines():
        try:
            record = orjson.loads(line) if line.startswith("{") else None
        except orjson.JSONDecodeError:
            record = None
        if record is None:
            raw += line.count(TRACEBACK)
            continue
        message = f"{record.get('msg')}{record.get('exc', '')}"
        outage = next((name for name, part in QUEUE_OUTAGE if record.get("logger") == name and part in message), None)
        if outage is not None:
            said[outage] += 1
            reported += message.count(TRACEBACK) if outage == "rq.scheduler" else 0
        elif record.get("level") in ("error", "critical") or TRACEBACK in message:
            loud.append(f"{record.get('level')}: {record.get('logger')}: {record.get('msg')}")
    if raw and (raw != reported or "Process Scheduler:" not in text):
        loud.append(f"{raw} tracebacks printed, {reported} of them RQ's scheduler's")
    return loud + [f"{name} reported the outage {count} times" for name, count in said.items() if count > 1]


def rq_waits_for_jobs(stack: Stack, worker: WorkerProcess) -> bool:
    """Whether the worker's RQ loop waits for a job (its state ``idle`` in Redis): there RQ
    rides out a Redis restart with its retries. A connection lost during RQ's start-up
    (``_start_scheduler``: the scheduler's lock) ends the process with a traceback instead;
    a worker stopped that early and woken after a restore is a crash test, not this one."""
    with redis.Redis.from_url(stack.redis_url) as conn:
        return any(conn.hget(key, "state") == b"idle" for key in conn.scan_iter(f"rq:worker:*.{worker.pid}.*"))


@dataclass
class StallRun:
    """What one run left, read while its processes still ran (Redis, the routes) or after
    (the store's files, or the bucket exported to a directory)."""

    step: str
    fault: str
    action: str
    store_dir: Path
    """The store as a directory: the ``file://`` store itself, or the bucket exported."""
    wrote_locally: bool
    """Whether the stack's own folder holds a store (an ``s3://`` run must not)."""
    verifier: note.Verifier
    observer: Observer
    tree_at_stall: dict[str, Any]
    """The store's tree state while the sleeper slept, before anyone else ran."""
    sleeper_log: str
    sleeper_records: list[dict[str, Any]]
    sleeper_reached: bool
    sleeper_alive: bool
    sleeper_loud: list[str]
    sleeper_exit: int
    sleeper_carried_on: bool
    halt: bytes | None
    staging_left: list[str]
    pending: int
    final: note.Checkpoint
    go: str
    made: dict[str, dict[str, Any]]
    """Every receipt made, by id."""
    first: list[str]
    backlog: list[str]
    late: list[str]
    after_fault: list[str]
    """The ids made after the fault (after the stall began)."""
    waited: list[dict[str, Any]]
    """The receipts acknowledged with their log proof (``"_proof"``)."""
    expected_in_redis: set[str]
    in_redis: dict[str, int | None]
    sampled: dict[str, int]
    """Receipts whose ``log-proof`` route was checked: the index each proof named."""
    tiles_at_wake: dict[str, bytes]
    tiles_after: dict[str, bytes]
    routes_differ: list[str]
    """Tiles and bundles whose ``GET /v1/log/tile/...`` did not answer the store's bytes."""


def run_stall(
    stack: Stack, step: str, fault: str, checker: Path, moto_server: MotoServer | None = None, action: str = "stop"
) -> StallRun:
    """``FIRST`` receipts in the log; ``BACKLOG`` queued in two projects, Redis saved, ``LATE``
    more; worker A (``LOG_FAILPOINTS=<step>=<action>``) takes 4,096 of them in one batch and
    stops at ``step``. While it sleeps: the Redis ``fault``, worker B takes the lease and
    integrates what Redis holds, three creates are acknowledged with their proofs. A is
    continued (or wakes by itself); more creates; B stops and A carries the log on.

    With ``sleep:MS`` A holds the lease, and B waits as a standby, before the backlog comes
    (so B's start is not part of the race with A's wake); A's batch is then whatever it found
    queued first."""
    if moto_server is not None:
        prefix = stack.env["LOG_STORE"].removeprefix(f"s3://{BUCKET}/")
        view = StoreView(moto_server=moto_server, prefix=prefix)
    else:
        view = StoreView(directory=stack.store_dir)
    stack.start_redis()
    stack.serve()
    observer = stack.observe(OBSERVE_S)
    api_keys = stack.make_keys(2)
    first_worker = stack.worker()
    first = stack.create(api_keys, FIRST_RECEIPTS, threads=2)
    stack.wait_for_size(FIRST)
    assert first_worker.stop() == 0, first_worker.log()[-3000:]
    failpoint = f"{step}={action}"
    if action == "stop":
        # A waits behind a lease the test holds until its RQ loop waits for jobs and the
        # backlog is queued: its batch is a full 4,096, and RQ's start-up (which a Redis
        # restart ends) is over when it stops.
        successor = None
        view.hold_lease(WAIT_S)
        sleeper = stack.worker(LOG_FAILPOINTS=failpoint)
        wait_until(lambda: rq_waits_for_jobs(stack, sleeper), WAIT_S, "A's RQ loop to wait for jobs")
    else:
        # A holds the lease, and B waits as a standby, before the backlog comes: B's start is
        # no part of the race with A's wake.
        sleeper = stack.worker(LOG_FAILPOINTS=failpoint)
        wait_until(lambda: view.lease_token() != "", WAIT_S, "A to take the lease")
        sleeper_token = view.lease_token()
        successor = stack.worker()
        wait_until(lambda: rq_waits_for_jobs(stack, successor), WAIT_S, "B to start")
    backlog = stack.issue(api_keys, BACKLOG)
    snapshot = stack.folder / "snapshot.rdb"
    stack.save_redis(snapshot)  # entries queued: a restore brings back entries the log may hold by then
    late = stack.issue(api_keys, LATE)
    made = first + backlog + late
    if action == "stop":
        view.drop_lease()
    reached = f"LOG_FAILPOINTS {failpoint}: reached"
    try:
        if action == "stop":
            wait_until(lambda: is_stopped(sleeper.pid) or sleeper.process.poll() is not None, WAIT_S, f"A at {step}")
            assert is_stopped(sleeper.pid), f"the worker did not stop at {step}:\n{sleeper.log()[-3000:]}"
        else:
            wait_until(lambda: reached in sleeper.log() or sleeper.process.poll() is not None, WAIT_S, f"A at {step}")
        tree_at_stall = view.tree()
        if action == "stop":  # no one else runs: the lease is still the one it took
            sleeper_token = view.lease_token()
            assert sleeper_token not in ("", "held-by-the-test"), "the sleeper stopped without the lease"
        if fault == "flushall":
            stack.flush_redis()
            api_keys = stack.make_keys(2)
            expected_in_redis: set[str] = set()
        elif fault == "restore":
            stack.restore_redis(snapshot)
            expected_in_redis = {r["receipt_id"] for r in first + backlog}
        else:
            expected_in_redis = {r["receipt_id"] for r in made}
        wait_until(lambda: redis_ready(stack), WAIT_S, "the server's Redis")
        if successor is None:
            successor = stack.worker()
        wait_until(lambda: view.lease_token() not in ("", sleeper_token), WAIT_S, "B to take the lease")
        wait_until(lambda: settled(stack, view), WAIT_S, "B to integrate what Redis holds")
        after = stack.create_waiting(api_keys, 3)
        tiles_at_wake = view.tiles()
    finally:
        if action == "stop":
            sleeper.process.send_signal(signal.SIGCONT)
    if action != "stop":
        wait_until(
            lambda: "the tree state moved under this integrator" in sleeper.log(),
            SLEEP_MS / 1000 + WAIT_S,
            f"the sleeper to wake and find the tree moved:\n{sleeper.log()[-2000:]}",
        )
    # The sleeper is awake in the middle of its batch; B goes on.
    after += stack.create(api_keys, 20, threads=2)
    after += stack.create_waiting(api_keys, 2)
    wait_until(lambda: settled(stack, view), WAIT_S, "the log to cover the creates")
    # B stops: the one that slept carries the log on.
    assert successor.stop() == 0, successor.log()[-3000:]
    wait_until(lambda: view.lease_token() == sleeper_token, WAIT_S, "the sleeper to take the lease back")
    after += stack.create_waiting(api_keys, 3)
    wait_until(lambda: settled(stack, view), WAIT_S, "the log to cover the creates")
    sleeper_carried_on = view.lease_token() == sleeper_token  # the only worker left: it published them
    final = stack.served()
    made += after
    waited = [r for r in after if "_proof" in r]

    in_redis = redis_indices(stack, made)
    rng = random.Random(f"{step}-{fault}-{action}")
    held = [receipt for receipt in made if receipt["receipt_id"] in in_redis and "_proof" not in receipt]
    sample = waited + rng.sample(held, min(PROOF_SAMPLE, len(held)))
    sampled = dict(zip([r["receipt_id"] for r in sample], stack.assert_proofs(sample), strict=True))
    served_tiles = {name: stack.client.get(f"{stack.base_url}/v1/log/{name}") for name in view.tiles()}
    pending = stack.pending()
    sleeper_alive = sleeper.process.poll() is None
    sleeper_exit = sleeper.stop()
    observer.stop()
    halt = view.read(".state/halt")
    staging_left = view.names(".state/staging/")
    tiles_after = view.tiles()
    routes_differ = [
        name
        for name, response in served_tiles.items()
        if (response.status_code != 200 or response.content != tiles_after.get(name))
        and not (".p/" in name and response.status_code == 404)  # a partial tile removed meanwhile
    ]
    if moto_server is not None:
        store_dir = stack.folder / "exported"
        done = run_cli("log", "export", "--to", f"file://{store_dir}", env=stack.worker_env())
        assert done.returncode == 0, done.stdout + done.stderr
        assert orjson.loads(done.stdout)["size"] == final.size
        # The export holds the final tree's tiles only; the consistency proofs between the
        # checkpoints seen need the bucket's own (the partial tiles of smaller trees): a copy.
        mirror = stack.folder / "mirror"
        for name, data in {**tiles_after, "checkpoint": view.read("checkpoint") or b""}.items():
            (mirror / name).parent.mkdir(parents=True, exist_ok=True)
            (mirror / name).write_bytes(data)
        observer.store_dir = mirror
        # It polled the routes only: the full tiles it knows are those of the sleeper's wake.
        for name, data in tiles_at_wake.items():
            if ".p/" not in name:
                observer.tiles.setdefault(name, hashlib.sha256(data).hexdigest())
    else:
        store_dir = stack.store_dir
    go = go_check(checker, store_dir, stack.verifier.encode(), list(observer.texts.values()), stack.folder / "go")
    return StallRun(
        step=step,
        fault=fault,
        action=action,
        store_dir=store_dir,
        wrote_locally=stack.store_dir.exists(),
        verifier=stack.verifier,
        observer=observer,
        tree_at_stall=tree_at_stall,
        sleeper_log=sleeper.log(),
        sleeper_records=log_records(sleeper),
        sleeper_reached=reached in sleeper.log(),
        sleeper_alive=sleeper_alive,
        sleeper_loud=loud_lines(sleeper, redis_restarted=fault == "restore"),
        sleeper_exit=sleeper_exit,
        sleeper_carried_on=sleeper_carried_on,
        halt=halt,
        staging_left=staging_left,
        pending=pending,
        final=final,
        go=go,
        made={r["receipt_id"]: r for r in made},
        first=[r["receipt_id"] for r in first],
        backlog=[r["receipt_id"] for r in backlog],
        late=[r["receipt_id"] for r in late],
        after_fault=[r["receipt_id"] for r in after],
        waited=waited,
        expected_in_redis=expected_in_redis | {r["receipt_id"] for r in after},
        in_redis=in_redis,
        sampled=sampled,
        tiles_at_wake=tiles_at_wake,
        tiles_after=tiles_after,
        routes_differ=routes_differ,
    )


def assert_changed_nothing(run: StallRun) -> None:
    """Everything a run must leave (the module's docstring)."""
    context = f"{run.step}={run.action}, Redis {run.fault}"
    assert run.sleeper_reached, f"{context}: the fault point was not reached:\n{run.sleeper_log[-3000:]}"
    # A pause is not a fault: the sleeper lives on, quietly, and carries the log on.
    assert run.sleeper_alive, f"{context}: the sleeper died:\n{run.sleeper_log[-3000:]}"
    assert run.sleeper_loud == [], f"{context}: the sleeper said more than WARNING:\n{run.sleeper_log[-4000:]}"
    assert run.sleeper_carried_on, f"{context}: the sleeper did not take the lease back once B stopped"
    moved = [r for r in run.sleeper_records if "the tree state moved under this integrator" in str(r.get("msg"))]
    assert all(record["level"] == "info" for record in moved), moved
    if BATCH_STEPS.index(run.step) < BATCH_STEPS.index("advanced"):
        # Before its tree advanced, its next compare-and-swap (or a queue's synced size in Redis) finds
        # the tree moved, and it says so (eps_log_fenced counts it). After, what is left of its batch is idempotent
        # (acks, a synced size set only from its old value, a checkpoint never published
        # over a larger one): it goes back to standby when its lease is not renewed.
        # With Redis restarted under it, its first Redis command may fail first: the pass is
        # given up as an outage (at WARNING), the tree state read again all the same.
        outage = run.fault == "restore" and "log integrator pass failed" in run.sleeper_log
        assert moved or outage, f"{context}: the sleeper never found the tree moved:\n{run.sleeper_log[-3000:]}"
    assert run.sleeper_exit == 0, f"{context}: exit status {run.sleeper_exit}"
    assert run.halt is None, f"{context}: the log halted: {run.halt!r}"
    assert run.staging_left == [], f"{context}: staged batches left behind: {run.staging_left}"
    assert run.pending == 0

    # One history: every checkpoint seen is a prefix of the last (ours and Go's proofs), no
    # full tile changed, nothing the sleeper found at its wake holds other bytes now.
    run.observer.assert_history(run.final)
    assert run.go.startswith(f"ok origin={run.final.origin} size={run.final.size} "), run.go
    changed = [name for name, data in run.tiles_at_wake.items() if run.tiles_after.get(name, data) != data]
    assert not changed, f"{context}: tiles changed after the sleeper woke: {changed}"
    gone = [name for name in run.tiles_at_wake if name not in run.tiles_after and ".p/" not in name]
    assert not gone, f"{context}: full tiles went after the sleeper woke: {gone}"
    assert one_history(run.tiles_after) == []
    assert run.routes_differ == [], f"{context}: the tile routes do not serve the store's bytes: {run.routes_differ}"

    # The whole tree checks, and holds exactly what it must.
    entries = log_entries(run.store_dir, run.final)
    ids = entry_ids(entries)
    assert len(set(ids)) == len(ids), f"{context}: a receipt id is in the log twice"
    assert_paired(entries)
    # The server's key certificate is among the first FIRST entries, before any receipt's
    # position the checks below name: a receipt whose entry is at tree index i >= FIRST is
    # ids[(i - KEY_ENTRIES) // 2] (each receipt before it has its entry and its leaf).
    certificates = certificate_indices(entries)
    assert len(certificates) == KEY_ENTRIES and all(i < FIRST for i in certificates), certificates
    assert set(ids[:FIRST_RECEIPTS]) == set(run.first)
    queued = set(run.backlog + run.late)
    stall = run.tree_at_stall
    batch_end = stall["staged"]["new_size"] if "staged" in stall else stall["size"]
    if run.step == "batch":
        assert batch_end == FIRST, stall  # read from Redis, never staged: only Redis can bring it back
    elif run.action == "stop":
        assert batch_end == FIRST + 2 * MAX_BATCH, f"{context}: the stopped batch is not a full one: {stall}"
    assert (batch_end - FIRST) % 2 == 0, f"{context}: the stopped batch split a receipt from its leaf: {stall}"
    batch = set(ids[FIRST_RECEIPTS : FIRST_RECEIPTS + (batch_end - FIRST) // 2])
    assert 2 * len(batch) == batch_end - FIRST and batch <= queued, f"{context}: the stopped batch is not in the log"
    survivors = {"none": queued, "flushall": set(), "restore": set(run.backlog)}[run.fault]
    expected = set(run.first) | batch | survivors | set(run.after_fault)
    missing, foreign = sorted(expected - set(ids)), sorted(set(ids) - expected)
    assert not missing and not foreign, f"{context}: missing {missing[:5]} ({len(missing)}), extra {foreign[:5]}"

    # Acknowledged with its proof: at that index, and the proof verifies against its checkpoint.
    assert len(run.waited) == 8
    for receipt in run.waited:
        proof = note.parse_tlog_proof(receipt["_proof"])
        checkpoint, _ = note.open_checkpoint(proof.checkpoint, run.verifier)
        leaf = tlog.leaf_hash(tlog.entry_bytes(receipt))
        tlog.verify_inclusion(leaf, proof.index, checkpoint.size, proof.path, checkpoint.root)
        assert_included(run.store_dir, tlog.entry_bytes(receipt), proof.index, run.final)
        assert is_leaf_of(entries[proof.index + 1], receipt, run.final.origin)

    # Redis holds what it should; each receipt it holds is in the log where Redis says.
    assert set(run.in_redis) == run.expected_in_redis, f"{context}: Redis holds other receipts than expected"
    for rid, index in run.in_redis.items():
        assert index is not None, f"{context}: {rid} has no index"
        assert entries[index] == tlog.entry_bytes(run.made[rid]), f"{context}: {rid} is not at its index {index}"
        assert is_leaf_of(entries[index + 1], run.made[rid], run.final.origin), f"{context}: {rid}'s leaf"
    for rid, index in run.sampled.items():
        assert run.in_redis.get(rid, index) == index


# --------------------------------------------------------------------------- every run, at once

STOPPED = "test_a_worker_stopped_at_any_step_changes_nothing_when_it_wakes"
ON_S3 = "test_a_worker_stopped_mid_batch_on_s3_changes_nothing_when_it_wakes"
SLEEPING = "test_a_worker_that_sleeps_past_its_lease_goes_back_to_standby_quietly"
Case = tuple[str, str, str]
"""(the test's name, step, Redis fault)."""


def selected(request: pytest.FixtureRequest) -> list[Case]:
    """The cases this session runs (all, or those ``-k`` or node ids selected): only those
    are run. The s3:// and the sleeping ones first: they wait most (on moto's one request at
    a time, on the sleep), so they wait while the others work."""
    cases = []
    for item in request.session.items:
        name = getattr(item, "originalname", "")
        if name in (STOPPED, ON_S3):
            cases.append((name, item.callspec.params["step"], item.callspec.params["fault"]))
        elif name == SLEEPING:
            cases.append((name, "tiles", "none"))
    return sorted(cases, key=lambda case: case[0] == STOPPED)


@pytest.fixture(scope="module")
def stall_runs(
    request: pytest.FixtureRequest,
    redis_binary: str,
    tmp_path_factory: pytest.TempPathFactory,
    tlogcheck: Path,
) -> dict[Case, concurrent.futures.Future[StallRun]]:
    """Every selected run, each on its own Redis, store and server, ``IN_FLIGHT`` at a time,
    each closed as soon as it is over (its files stay): most of a run is waiting (a lease
    running out, processes starting, moto, a sleep), which the runs spend together. Without
    moto's server the s3:// runs are skipped (failed under REQUIRE_REAL_SERVICES=1), not the
    others."""
    folder = tmp_path_factory.mktemp("stalls")
    cases = selected(request)
    moto_server: MotoServer | None = None
    moto_missing: BaseException | None = None
    if any(case[0] == ON_S3 for case in cases):
        try:
            moto_server = request.getfixturevalue("moto")
        except (pytest.skip.Exception, pytest.fail.Exception) as exc:
            moto_missing = exc

    def run(test: str, step: str, fault: str) -> StallRun:
        name = {STOPPED: "file", ON_S3: "s3", SLEEPING: "sleep"}[test] + f"-{step}-{fault}"
        env: dict[str, Any] = {}
        if test == ON_S3:
            if moto_missing is not None:
                raise moto_missing
            assert moto_server is not None
            env = {"LOG_STORE": f"s3://{BUCKET}/stalls-{secrets.token_hex(4)}", "AWS_ENDPOINT_URL": moto_server.endpoint,
                   "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                   **dict.fromkeys(FOREIGN_VARIABLES)}  # fmt: skip
        stack = Stack(folder / name, redis_binary, env, name=name)
        try:
            action = f"sleep:{SLEEP_MS}" if test == SLEEPING else "stop"
            return run_stall(stack, step, fault, tlogcheck, moto_server if test == ON_S3 else None, action)
        finally:
            stack.close()

    with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
        runs = {case: pool.submit(run, *case) for case in cases}
        concurrent.futures.wait(runs.values())
    return runs


# --------------------------------------------------------------------------- 1. each step x each Redis fault


@pytest.mark.parametrize("fault", REDIS_FAULTS)
@pytest.mark.parametrize("step", BATCH_STEPS)
def test_a_worker_stopped_at_any_step_changes_nothing_when_it_wakes(
    stall_runs: dict[Case, concurrent.futures.Future[StallRun]], step: str, fault: str
) -> None:
    """A worker stopped (SIGSTOP) at ``step`` of a full batch of 4,096, Redis left alone,
    flushed, or restored from a snapshot holding queued entries while it sleeps, another
    worker carrying the log on, then continued: it changes nothing (the module's docstring
    says what that means, ``assert_changed_nothing`` checks it)."""
    assert_changed_nothing(stall_runs[(STOPPED, step, fault)].result())


# --------------------------------------------------------------------------- 2. on s3:// (moto)


@pytest.mark.parametrize(("step", "fault"), S3_CASES, ids=[f"{step}-{fault}" for step, fault in S3_CASES])
def test_a_worker_stopped_mid_batch_on_s3_changes_nothing_when_it_wakes(
    stall_runs: dict[Case, concurrent.futures.Future[StallRun]], step: str, fault: str
) -> None:
    """The same story on an ``s3://`` store (moto's S3 server), for a subset of the cases:
    stopped with its batch staged and with half its tiles written, Redis left alone or
    flushed; stopped after advancing the tree, Redis restored. The log is read through the
    service's routes (checkpoints, log proofs), through the bucket itself (lease, tree state,
    staging, halt, every tile), and exported with ``log export --to file://DIR``, with the
    same checks as a directory (the whole tree, Go's sumdb/tlog).

    What this cannot prove: moto is an emulator. Its server (tests/moto_server.py) answers one
    request at a time, so the atomicity of conditional writes (``If-None-Match``, ``If-Match``)
    under real concurrency is moto's lock here, not S3's; nor does it say anything of S3's
    durability, of its consistency across regions, or of a PUT that hangs inside S3 past the
    lease (the stop here is the process's, between requests)."""
    run = stall_runs[(ON_S3, step, fault)].result()
    assert not run.wrote_locally, "the log went to a directory, not the bucket"
    assert_changed_nothing(run)


# --------------------------------------------------------------------------- 3. a sleep past the lease


def test_a_worker_that_sleeps_past_its_lease_goes_back_to_standby_quietly(
    stall_runs: dict[Case, concurrent.futures.Future[StallRun]],
) -> None:
    """``LOG_FAILPOINTS=tiles=sleep:MS`` (``SLEEP_MS``, 15 s): the worker blocks (its lease
    renewals with it) with every tile of its batch written and the tree not advanced, longer
    than its 5 s lease. The other worker, waiting as a standby, takes the lease, finishes the
    staged batch and goes on; the sleeper wakes by itself, its advance fails (the tree moved),
    it says so at INFO ("the tree state moved under this integrator") and nothing above
    WARNING, goes back to standby, and carries the log on once the other stops. The log is
    whole (the same checks as the stopped worker's)."""
    run = stall_runs[(SLEEPING, "tiles", "none")].result()
    assert_changed_nothing(run)
    moved = [record for record in run.sleeper_records if "the tree state moved under" in str(record.get("msg"))]
    assert moved and all(record["level"] == "info" for record in moved), run.sleeper_log[-3000:]
    assert "(at advance)" in str(moved[0]["msg"]), moved


# --------------------------------------------------------------------------- 4. the stop itself

STOPPING_CHILD = """
import os, sys, threading
from execution_proof.runtime.failpoints import Failpoints

points = Failpoints.parse("tiles=stop")
out = open(sys.argv[1], "w")
def integrator():
    points.reach("tiles")
    for n in range(1, 100_000):
        out.write(f"{n}\\n")
        out.flush()
threading.Thread(target=integrator).start()
read, _ = os.pipe()
os.read(read, 1)  # the main thread waits in a system call, as RQ's does (BLMOVE)
"""


def all_stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped."""
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    return bool(tasks) and all((task / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t") for task in tasks)


def ran_on_after_its_stop(out: Path) -> bool:
    """One trial: whether the child's thread wrote anything once its process was stopped; it
    goes on after SIGCONT either way."""
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPING_CHILD, str(out)], cwd=out.parent, env=clean_env(), stderr=subprocess.PIPE
    )
    try:
        wait_until(lambda: all_stopped(child.pid) or child.poll() is not None, 30, "the child to stop itself")
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        ran_on = out.exists() and out.read_text() != ""
        child.send_signal(signal.SIGCONT)
        wait_until(lambda: out.exists() and out.read_text() != "", 30, "the child to go on after SIGCONT")
        return ran_on
    finally:
        child.kill()
        child.wait(10)


def test_a_stop_fault_point_stops_the_thread_that_reaches_it_before_it_goes_on(tmp_path: Path) -> None:
    """``STEP=stop`` stops the process before the thread that reached STEP does anything
    more, and SIGCONT lets it go on. (A SIGSTOP sent to the process was taken by another
    thread, and the integrator's thread ran on meanwhile, in one trial of four, as far as into
    the file store's lock: stopped there, it blocked every other worker.) Twenty trials: a
    thread that writes as soon as it passes the point has written nothing once the process
    is stopped."""
    ran_on = [trial for trial in range(20) if ran_on_after_its_stop(tmp_path / f"count-{trial}")]
    assert ran_on == [], f"the thread ran on past its stop point in trials {ran_on}"
