"""The log under injected faults: ``python -m bench.log_soak`` (``--minutes 3`` of faults by
default, then a drain and the judges: about 4 minutes). A soak that tries to corrupt the
transparency log with its own workers, judged by code that did not write it.

Real processes, on loopback only: a ``redis-server`` of its own (temporary directory, free
port, ``appendonly yes``, ``appendfsync always``), a ``file://`` log store, ``python service.py
serve`` with the log (``LOG_SIGNING_KEY``, ``LOG_ORIGIN``, ``LOG_STORE``) and ``--workers``
``python service.py worker`` processes.

- **Load**: creates over HTTP at ``--rate`` a second (open loop, a bounded number in flight)
  across a few projects; a share of them with ``Prefer: wait=10``: each 201 that carries its
  log proof is kept with that proof (its index and text: docs/log.md, "What a 201 survives").
- **Faults**, drawn from ``--seed`` for the whole run (``make_plan``: the same seed, the same
  draws): every worker is (re)started with a random ``LOG_FAILPOINTS`` (one or two steps of a
  batch, each ``stop``, ``kill`` or ``sleep:MS`` with MS below or beyond the 5-s lease); a
  stopped worker gets SIGCONT after a random delay (some past the lease); a killed or exited
  worker is replaced, a worker whose life is over is stopped (SIGTERM) and replaced; Redis is
  saved now and then (``SAVE``, the dump kept aside, and a copy of the store taken beside it:
  checkpoint, then ``.state/``, then the tiles), and now and then restarted from an older dump
  (restore), put back from one under its open connections (``DEBUG RELOAD NOSAVE``: reload),
  flushed (``FLUSHALL``), or an older copy of the store is copied over the live one with Redis
  restarted from the dump of the same moment (``cp -a BACKUP/. STORE/``, no ``--delete``:
  overwrite). An overwrite of a store that grew since must be refused (``.state/halt``) before
  anything is signed on the older tree; the harness then puts the live files back, as an
  operator would, and runs ``log resume``. After each Redis fault, new API keys. Every fault
  that acted is counted by kind (a fault point says so in the worker's log).
- **Observe**: the checkpoint ``GET /v1/log/checkpoint`` serves and the store's ``checkpoint``
  file, polled every 50 ms: every distinct signed checkpoint kept, its signature checked as it
  arrives, each source's size never going back; the first bytes of every full tile.
- **Judge**, after the faults stop and the log drains with one healthy worker: Go's
  ``golang.org/x/mod/sumdb/tlog`` (tests/go/tlogcheck, built offline) over the store behind
  ``python -m http.server`` with every checkpoint observed (and every proof's) as ``-old``;
  ``check_tree`` over the whole tree and a consistency proof from each checkpoint observed;
  no receipt id twice; every receipt acknowledged with its proof found at its proof's index
  with its entry bytes, its proof verifying; no ``.state/halt``; full tiles unchanged; no
  worker that logged at ERROR or CRITICAL or printed a traceback (but RQ's "could not connect
  to Redis instance" while a restored Redis restarts: the restore's, not a pause's), none that
  exited other than by SIGTERM or its own ``kill``; the log drained. Counted beside them, to
  show the faults reached the fencing: wake-ups that found the tree moved (back to standby,
  at INFO) and entries a restored Redis still queued that were found in the tree instead.

Prints a JSON summary (``--out`` writes it to a file too). Exit 0: no corruption found; 1: a
finding (the processes' logs are kept, their folder named in the summary); 2: the harness
itself failed. Bounded: the fault phase ends after ``--minutes``, the drain after
``DRAIN_TIMEOUT_S``, each check after its own timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from bench.harness import RAISED_LIMITS, cpu_busy_share, create_projects, loadavg, machine_info, new_receipt_root
from bench.log import ORIGIN, SIGNER, log_state, start_worker, store_size, store_url
from bench.procs import REPO, HarnessError, Proc, base_env, free_port, log, wait_http
from bench.production import ServiceSpec
from bench.redis_kinds import RedisKind, persistence
from execution_proof.jobs.worker import RQ_RETRY_MESSAGE
from execution_proof.receipts import attestation
from execution_proof.runtime.failpoints import STEPS
from execution_proof.transparency import note, tlog
from execution_proof.transparency.tiles import TileMissing, TileReader, check_tree

LEASE_S = 5.0
"""The integrator's lease (docs/log.md): the sleeps and stops are drawn below and beyond it."""
FAULT_STEPS = tuple(step for step in STEPS if step != "created")
"""The steps of a batch (``created`` acts only while a store is created: once, at the start)."""
ACTIONS = ("stop", "kill", "sleep")
FAULT_KINDS = ("stop", "kill", "sleep", "restore", "reload", "flushall", "overwrite")
REDIS_FAULTS = ("restore", "reload", "flushall", "overwrite")
"""The faults the harness makes (the others are the workers' fault points)."""
BACKUPS_KEPT = 3
"""Copies of the store kept (one per save, the newest): an overwrite puts back one of them."""
REFUSAL_WAIT_S = 30.0
"""How long an overwrite may go unnoticed before it is a finding: the workers look at the store
before each batch and at least once a second while idle, but may be stopped or asleep."""
SHORT_MS = (200, 4_500)
LONG_MS = (5_500, 12_000)
"""``sleep:MS`` below and beyond the lease, half of them each."""
SHORT_CONT_S = (0.3, 4.5)
LONG_CONT_S = (5.5, 15.0)
"""How long a stopped worker stays stopped before its SIGCONT: half within the lease, half past it."""
LIFETIME_S = (5.0, 20.0)
"""How long a worker lives (unless its fault ends it first) before it is stopped and replaced."""
HEALTHY_SHARE = 0.15
"""The share of worker lives started without a fault point."""
TWO_POINTS_SHARE = 0.25
"""The share of faulty lives with two fault points (a sleep, then a kill, say)."""
SAVE_EVERY_S = (10.0, 25.0)
REDIS_FAULT_FIRST_S = (20.0, 40.0)
REDIS_FAULT_EVERY_S = (25.0, 60.0)
RESTORE_BACK = (1, 3)
"""A restore, a reload or an overwrite puts back the dump (and the store's copy) this many saves
before the newest (1: the newest)."""
PROJECTS = 4
WAIT_SHARE = 0.3
"""The share of creates sent with ``Prefer: wait=10``."""
MAX_IN_FLIGHT = 64
TICK_S = 0.1
POLL_S = 0.05
TILES_EVERY_S = 1.0
DRAIN_TIMEOUT_S = 180.0
SETTLE_S = 2.0
"""How long the observer goes on after the log drained (the last checkpoint served)."""
STOP_TIMEOUT_S = 15.0
GO_TIMEOUT_S = 600.0
GO_SOURCE = REPO / "tests" / "go" / "tlogcheck"
GO_X_MOD = Path("/usr/share/gocode/src/golang.org/x/mod/sumdb/tlog")
REACHED = re.compile(r"LOG_FAILPOINTS (\w+)=(stop|kill|sleep:\d+): reached")
"""A fault point's line (``LOG_FAILPOINTS staged=stop: reached (pid N)``)."""
FENCED = "the tree state moved under this integrator"
"""A worker that woke up (or lost a race) and found the tree moved: back to standby, at INFO."""
READ_BACK = re.compile(r"(\d+) queued entries were in the log already")
"""Entries a restored Redis still queued, found in the tree instead of added again."""
UNREACHABLE = "error: the job queue at JOBS_REDIS_URL (or REDIS_URL) is unreachable"
"""All a worker says when Redis does not answer as it starts (exit 2, cli/worker.py)."""
TRACEBACK = "Traceback (most recent call last)"
REFUSED = "LOG REFUSED"
"""A refused worker's one line (exit 2): expected while an overwrite lies over the store."""
REFUSAL_LINES = ("LOG REFUSED", "LOG HALTED", "the worker does not integrate")
MAX_MINUTES = 120.0
MAX_RATE = 200.0


# --------------------------------------------------------------------------- the plan (pure)


@dataclass(frozen=True)
class Life:
    """One worker process: its fault points, and what the harness does around them."""

    failpoints: str
    """``LOG_FAILPOINTS`` (empty: none)."""
    cont_after_s: float
    """After a ``stop`` acts, SIGCONT this long after the process stopped."""
    lifetime_s: float
    """Stopped (SIGTERM) and replaced this long after its start, unless stopped by its fault."""


@dataclass(frozen=True)
class RedisEvent:
    at_s: float
    kind: str
    """``save``, or one of ``REDIS_FAULTS``."""
    back: int = 0
    """``restore``, ``reload``, ``overwrite``: the dump this many saves before the newest (1: the newest)."""


@dataclass(frozen=True)
class Plan:
    seed: int
    seconds: float
    lives: tuple[tuple[Life, ...], ...]
    """Each worker slot's lives, in order (a slot whose lives run out gets healthy workers)."""
    redis: tuple[RedisEvent, ...]


def draw_failpoints(rng: random.Random) -> str:
    """A ``LOG_FAILPOINTS`` value: empty for a healthy life, else one or two steps of a batch,
    each stop, kill or sleep:MS (MS below or beyond the lease), in the order they are reached."""
    if rng.random() < HEALTHY_SHARE:
        return ""
    steps = rng.sample(FAULT_STEPS, 2 if rng.random() < TWO_POINTS_SHARE else 1)
    parts = []
    for step in sorted(steps, key=STEPS.index):
        action = rng.choice(ACTIONS)
        if action == "sleep":
            low, high = SHORT_MS if rng.random() < 0.5 else LONG_MS
            action = f"sleep:{rng.randint(low, high)}"
        parts.append(f"{step}={action}")
    return ",".join(parts)


def draw_life(rng: random.Random) -> Life:
    failpoints = draw_failpoints(rng)
    low, high = SHORT_CONT_S if rng.random() < 0.5 else LONG_CONT_S
    return Life(failpoints, round(rng.uniform(low, high), 2), round(rng.uniform(*LIFETIME_S), 2))


def make_plan(seed: int, seconds: float, workers: int) -> Plan:
    """Every draw of a run, from ``seed`` alone: each slot's lives from its own stream (a slot's
    faults do not depend on how fast another slot went through its own), Redis's events from
    another. At most one life per two seconds per slot: bounded, and more than a run uses."""
    lives = []
    for slot in range(workers):
        rng = random.Random(f"{seed}/worker/{slot}")
        lives.append(tuple(draw_life(rng) for _ in range(int(seconds / 2) + 4)))
    rng = random.Random(f"{seed}/redis")
    events: list[RedisEvent] = [RedisEvent(round(rng.uniform(2.0, 5.0), 2), "save")]
    at = events[0].at_s
    while (at := at + rng.uniform(*SAVE_EVERY_S)) < seconds:
        events.append(RedisEvent(round(at, 2), "save"))
    at = rng.uniform(*REDIS_FAULT_FIRST_S)
    while at < seconds:
        kind = rng.choice(REDIS_FAULTS)
        events.append(RedisEvent(round(at, 2), kind, rng.randint(*RESTORE_BACK) if kind != "flushall" else 0))
        at += rng.uniform(*REDIS_FAULT_EVERY_S)
    return Plan(seed, seconds, tuple(lives), tuple(sorted(events, key=lambda e: e.at_s)))


def fault_kind(action: str) -> str:
    """``stop``, ``kill`` or ``sleep`` for a fault point's action (``sleep:MS``)."""
    return action.partition(":")[0]


def reached_points(text: str) -> list[tuple[str, str]]:
    """(step, action) of each ``LOG_FAILPOINTS STEP=ACTION: reached`` a worker's log says."""
    return [(step, action) for step, action in REACHED.findall(text) if step in STEPS]


def exit_kind(code: int, text: str) -> str | None:
    """Why a worker exited with status ``code`` after logging ``text``, when a fault or the
    harness explains it; None when nothing does (a finding: a refused store exits 2 too)."""
    if code == 0:
        return "stopped (SIGTERM)"
    if code == -signal.SIGKILL:
        return "killed (its fault point, or not stopped within STOP_TIMEOUT_S)"
    if code == -signal.SIGTERM and not text.strip():
        return "SIGTERM before it had started"
    if code == 2 and UNREACHABLE in text.splitlines() and not loud_lines(text):
        return "Redis unreachable at its start (a restore restarting it)"
    return None


def loud_lines(text: str) -> list[str]:
    """What a worker's log (``LOG_FORMAT=json``) says at ERROR or CRITICAL, and each traceback
    (a record's ``exc`` at any level, or one printed raw)."""
    loud = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(orjson.JSONDecodeError):
                record = orjson.loads(line)
                if isinstance(record, dict):
                    level, message = str(record.get("level", "")).lower(), record.get("msg")
                    if TRACEBACK in str(record.get("exc", "")):
                        loud.append(f"a traceback at {level}: {message}"[:500])
                    elif level in ("error", "critical"):
                        loud.append(f"{level}: {message}"[:500])
                    continue
        if TRACEBACK in line:
            loud.append("a traceback")
    return loud


def without_queue_outage(text: str, lines: list[str]) -> tuple[list[str], int]:
    """``lines`` (``loud_lines`` of ``text``) less the job queue's own report of a Redis
    restart (docs/observability.md, "One line per outage"): RQ's ``could not connect`` line,
    and RQ's scheduler's exception (a process of its own: RQ logs it, and Python's
    multiprocessing prints the same tracebacks again, raw, under ``Process Scheduler:``).
    Returns what is left and how many lines of the report were taken out."""
    scheduler = [line for line in lines if "Scheduler [PID" in line and "raised an exception" in line]
    raw = [line for line in lines if line == "a traceback"]
    reported = sum(text.count(TRACEBACK) for text in _scheduler_records(text))
    left = [line for line in lines if RQ_RETRY_MESSAGE not in line and line not in scheduler]
    if raw and len(raw) == reported and "Process Scheduler:" in text:
        left = [line for line in left if line != "a traceback"]
    return left, len(lines) - len(left)


def without_refusals(lines: list[str], reasons: list[str]) -> tuple[list[str], int]:
    """``lines`` less those that say a refusal an overwrite brought (``REFUSAL_LINES`` with one
    of ``reasons``): how many went."""
    heads = [reason[:60] for reason in reasons if reason]
    left = [line for line in lines if not (any(s in line for s in REFUSAL_LINES) and any(h in line for h in heads))]
    return left, len(lines) - len(left)


def _scheduler_records(text: str) -> list[str]:
    """The messages (with their tracebacks) of RQ's scheduler's exception records."""
    found = []
    for line in text.splitlines():
        if line.startswith("{") and '"rq.scheduler"' in line:
            with contextlib.suppress(orjson.JSONDecodeError):
                record = orjson.loads(line)
                message = f"{record.get('msg')}{record.get('exc', '')}"
                if "raised an exception" in message:
                    found.append(message)
    return found


# --------------------------------------------------------------------------- the judge (pure)


@dataclass
class Acked:
    """A receipt whose 201 carried its log proof."""

    receipt: dict[str, Any]
    proof: str


@dataclass
class Verdict:
    findings: list[str] = field(default_factory=list)
    final_size: int = 0
    checkpoints: int = 0
    """Distinct checkpoints (size, root) judged against the final tree."""
    acked: int = 0
    entries: list[bytes] = field(default_factory=list)


def _fetch(store_dir: Path) -> Any:
    async def fetch(name: str) -> bytes | None:
        try:
            return (store_dir / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    return fetch


RECEIPT_ENTRY = tlog.ENTRY_HEADER.encode() + b"\n"


def receipt_ids(entries: Sequence[bytes]) -> list[str]:
    """The receipt ids of the receipt entries, in log order (key certificates and each
    receipt's dsse leaf, right after its entry, are entries of other kinds)."""
    return [tlog.LogEntry.parse(entry).receipt_id for entry in entries if entry.startswith(RECEIPT_ENTRY)]


def unpaired(entries: Sequence[bytes]) -> list[int]:
    """Where the log breaks a receipt's pair: a receipt entry that the dsse leaf of its
    attestation does not follow, or a dsse leaf after anything but a receipt entry."""
    found = []
    for at, entry in enumerate(entries):
        after = entries[at + 1] if at + 1 < len(entries) else b""
        before = entries[at - 1] if at else b""
        if (entry.startswith(RECEIPT_ENTRY) and not after.startswith(tlog.DSSE_HEADER)) or (
            entry.startswith(tlog.DSSE_HEADER) and not before.startswith(RECEIPT_ENTRY)
        ):
            found.append(at)
    return found


def is_leaf_of(entry: bytes, receipt: dict[str, Any], origin: str) -> bool:
    """Whether ``entry`` is a dsse leaf naming the hash of ``receipt``'s Statement in the log
    of ``origin`` (its signature is the service's to make; the leaf's form and hash are what
    a log's reader can hold it to)."""
    try:
        body = attestation.parse_log_body(entry)
        payload = attestation.statement_bytes(receipt, origin)
    except attestation.AttestationError:
        return False
    return body.payload_hash == hashlib.sha256(payload).digest()


def judge(store_dir: Path, verifier: note.Verifier, observed: Sequence[bytes], acked: Sequence[Acked]) -> Verdict:
    """The store as a monitor sees it, against what was observed and acknowledged while it
    ran: the published checkpoint verifies; the whole tree checks out (``check_tree``); no
    receipt id twice; every receipt entry followed by its dsse leaf and every leaf after a
    receipt entry; every checkpoint observed (and every acknowledged proof's checkpoint)
    verifies and is a prefix of the final tree (a consistency proof from the store's tiles);
    every acknowledged receipt's proof verifies, its entry is at its index and its leaf
    right after it; no halt."""
    verdict = Verdict()
    findings = verdict.findings
    halt = store_dir / ".state" / "halt"
    if halt.exists():
        findings.append(f"the log is halted (.state/halt): {halt.read_text(errors='replace')[:500]}")
    try:
        final, _ = note.open_checkpoint((store_dir / "checkpoint").read_bytes(), verifier)
    except (OSError, note.NoteError) as exc:
        findings.append(f"the store's checkpoint does not verify: {exc}")
        return verdict
    verdict.final_size = final.size
    entries: list[bytes] = []
    try:
        asyncio.run(
            check_tree(TileReader(_fetch(store_dir)), final.size, final.root, lambda _, batch: entries.extend(batch))
        )
    except (tlog.ProofError, TileMissing) as exc:
        findings.append(f"check_tree over the final tree of {final.size}: {exc}")
        return verdict
    verdict.entries = entries
    ids = Counter(receipt_ids(entries))
    twice = sorted(receipt_id for receipt_id, count in ids.items() if count > 1)
    if twice:
        findings.append(f"{len(twice)} receipt ids are in the log more than once: {twice[:5]}")
    broken = unpaired(entries)
    if broken:
        findings.append(f"{len(broken)} entries break a receipt's pair of entry and dsse leaf, at {broken[:5]}")
    texts = list(observed)
    for item in acked:
        receipt_id = item.receipt.get("receipt_id")
        try:
            proof = note.parse_tlog_proof(item.proof)
            checkpoint, _ = note.open_checkpoint(proof.checkpoint, verifier)
            entry = tlog.entry_bytes(item.receipt)
            tlog.verify_inclusion(tlog.leaf_hash(entry), proof.index, checkpoint.size, proof.path, checkpoint.root)
        except (note.NoteError, tlog.ProofError, ValueError, KeyError) as exc:
            findings.append(f"receipt {receipt_id}: its acknowledged proof does not verify: {exc}")
            continue
        texts.append(proof.checkpoint.encode())
        if proof.index >= final.size or entries[proof.index] != entry:
            findings.append(f"receipt {receipt_id}: acknowledged at index {proof.index}, not there in the final tree")
        elif proof.index + 1 >= final.size or not is_leaf_of(entries[proof.index + 1], item.receipt, final.origin):
            findings.append(f"receipt {receipt_id}: the dsse leaf of its attestation is not at {proof.index + 1}")
        verdict.acked += 1
    seen: dict[tuple[int, bytes], note.Checkpoint] = {}
    for text in texts:
        try:
            checkpoint, _ = note.open_checkpoint(text, verifier)
        except note.NoteError as exc:
            findings.append(f"a checkpoint observed does not verify ({exc}): {text[:200]!r}")
            continue
        seen.setdefault((checkpoint.size, checkpoint.root), checkpoint)
    verdict.checkpoints = len(seen)
    reader = TileReader(_fetch(store_dir))
    for checkpoint in sorted(seen.values(), key=lambda c: c.size):
        problem = _not_a_prefix(reader, checkpoint, final)
        if problem:
            findings.append(problem)
    return verdict


def _not_a_prefix(reader: TileReader, old: note.Checkpoint, final: note.Checkpoint) -> str | None:
    if old.size > final.size:
        return f"a checkpoint of size {old.size} was observed, the final tree has {final.size}: the log went back"
    if old.size == final.size:
        return None if old.root == final.root else f"two roots for size {old.size}: a fork"
    if old.size == 0:
        return None if old.root == tlog.EMPTY_ROOT else "a checkpoint of size 0 with a root that is not the empty one"
    try:
        proof = asyncio.run(reader.compute(final.size, lambda view: view.consistency_proof(old.size)))
        tlog.verify_consistency(old.size, old.root, final.size, final.root, proof)
    except (tlog.ProofError, TileMissing) as exc:
        return f"the checkpoint of size {old.size} is not a prefix of the final tree of {final.size}: {exc}"
    return None


# --------------------------------------------------------------------------- observing


def full_tiles(store_dir: Path, known: dict[str, str]) -> None:
    """Add the SHA-256 of each full tile and bundle not in ``known`` yet (partial ones may go)."""
    for directory, subdirectories, files in os.walk(store_dir / "tile"):
        subdirectories[:] = [name for name in subdirectories if not name.endswith(".p")]
        for name in files:
            path = Path(directory) / name
            relative = path.relative_to(store_dir).as_posix()
            if relative not in known:
                with contextlib.suppress(FileNotFoundError):
                    known[relative] = hashlib.sha256(path.read_bytes()).hexdigest()


class Observer:
    """Polls the served checkpoint and the store's ``checkpoint`` file from a thread, keeping
    every distinct signed text; what does not verify, or goes back, is a finding."""

    def __init__(self, base_url: str, store_dir: Path, verifier: note.Verifier) -> None:
        self.base_url, self.store_dir, self.verifier = base_url, store_dir, verifier
        self.texts: dict[bytes, note.Checkpoint] = {}
        """Every distinct signed checkpoint seen, in the order first seen."""
        self._last: dict[str, bytes] = {}
        self.latest: dict[str, tuple[int, bytes]] = {}
        """Each source's largest checkpoint so far (size, root)."""
        self.findings: list[str] = []
        self.tiles: dict[str, str] = {}
        self.polls = 0
        self.allow_back_until = 0.0
        """While an older copy of the store lies over the live one (an overwrite), its
        checkpoint is older: going back is the operator's doing then, counted, not a finding."""
        self.forgiven = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-observer", daemon=True)

    def start(self) -> Observer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        tiles_at = 0.0
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    answer = client.get(self.base_url + "/v1/log/checkpoint")
                    if answer.status_code == 200:
                        self.keep("served", answer.content)
                with contextlib.suppress(FileNotFoundError):
                    self.keep("file", (self.store_dir / "checkpoint").read_bytes())
                if time.monotonic() - tiles_at > TILES_EVERY_S:
                    full_tiles(self.store_dir, self.tiles)
                    tiles_at = time.monotonic()
                self.polls += 1
                self._stop.wait(POLL_S)
        full_tiles(self.store_dir, self.tiles)

    def keep(self, source: str, data: bytes) -> None:
        """One poll's answer from ``source`` (``served``, ``file``)."""
        if data == self._last.get(source):
            return
        checkpoint = self.texts.get(data)
        if checkpoint is None:
            try:
                checkpoint, _ = note.open_checkpoint(data, self.verifier)
            except note.NoteError as exc:
                self.findings.append(f"the {source} checkpoint does not verify ({exc}): {data[:200]!r}")
                return
            self.texts[data] = checkpoint
        self._last[source] = data
        latest = self.latest.get(source)
        if latest is not None:
            size, root = latest
            if checkpoint.size < size and time.monotonic() < self.allow_back_until:
                self.forgiven += 1
                self.latest[source] = (checkpoint.size, checkpoint.root)
                return
            if checkpoint.size < size:
                self.findings.append(f"the {source} checkpoint went back from {size} to {checkpoint.size}")
            elif checkpoint.size == size and checkpoint.root != root:
                self.findings.append(f"the {source} checkpoint showed two roots for size {size}")
        if latest is None or checkpoint.size >= latest[0]:
            self.latest[source] = (checkpoint.size, checkpoint.root)

    def changed_tiles(self) -> list[str]:
        """Full tiles whose bytes are not those they first had."""
        now: dict[str, str] = {}
        full_tiles(self.store_dir, now)
        return sorted(name for name, digest in self.tiles.items() if now.get(name) != digest)


# --------------------------------------------------------------------------- processes


class SoakRedis:
    """A redis-server of its own (production's AOF setting), restarted in place from an older
    dump when the plan says so."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise HarnessError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.tmp = tmp
        self.dir = tmp / "redis"
        self.dir.mkdir()
        (tmp / "snapshots").mkdir()
        self.port = free_port()
        self.proc: Proc | None = None
        self.starts = 0
        self.snapshots: list[Path] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, aof: bool = True) -> None:
        self.starts += 1
        cmd = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
            *(persistence(True) if aof else ["--appendonly", "no"]), "--maxmemory-policy", "noeviction",
            "--logfile", str(self.dir / "redis.log"), "--enable-debug-command", "yes",
        ]  # fmt: skip
        name = f"redis-{self.starts}"
        self.proc = Proc.start(name, cmd, env=base_env(), log_path=self.tmp / f"{name}.out")
        deadline = time.monotonic() + 30
        with redis.Redis(port=self.port, socket_connect_timeout=0.2) as client:
            while True:
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                    if client.ping():
                        return
                if not self.proc.alive() or time.monotonic() > deadline:
                    raise HarnessError(f"redis-server did not start:\n{self.proc.tail()}")
                time.sleep(0.05)

    def save(self) -> None:
        """``SAVE``, its dump kept aside for a later restore."""
        with redis.Redis.from_url(self.url) as client:
            client.save()
        kept = self.tmp / "snapshots" / f"{len(self.snapshots):03d}.rdb"
        shutil.copyfile(self.dir / "dump.rdb", kept)
        self.snapshots.append(kept)

    def snapshot(self, back: int) -> Path:
        """The dump kept ``back`` saves before the newest (1: the newest)."""
        return self.snapshots[-min(back, len(self.snapshots))]

    def reload(self, back: int) -> Path:
        """A dump kept earlier put back under every open connection (``DEBUG RELOAD NOSAVE``):
        the clients' next commands succeed on the older data, as after a replica promoted under
        them. The AOF is then rewritten from the reloaded data, so a later restart agrees."""
        snapshot = self.snapshot(back)
        shutil.copyfile(snapshot, self.dir / "dump.rdb")
        with redis.Redis.from_url(self.url) as client:
            client.execute_command("DEBUG", "RELOAD", "NOSAVE")
            client.bgrewriteaof()
            self._wait_for_aof(client)
        return snapshot

    def _wait_for_aof(self, client: redis.Redis) -> None:
        deadline = time.monotonic() + 60
        while True:
            info = client.info("persistence")
            if info["aof_enabled"] and not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                return
            if time.monotonic() > deadline:
                raise HarnessError("Redis did not finish rewriting its AOF within 60 s")
            time.sleep(0.05)

    def restore(self, back: int) -> Path:
        """Killed, then started again on the same port from a dump kept earlier: what a restore
        from a backup does. Redis 7 ignores ``dump.rdb`` when the AOF is on and none exists,
        so it starts with the AOF off and turns it on (a rewrite of the restored data)."""
        snapshot = self.snapshot(back)
        assert self.proc is not None
        self.proc.process.kill()
        self.proc.process.wait(STOP_TIMEOUT_S)
        shutil.rmtree(self.dir / "appendonlydir", ignore_errors=True)
        shutil.copyfile(snapshot, self.dir / "dump.rdb")
        self.start(aof=False)
        with redis.Redis.from_url(self.url) as client:
            client.config_set("appendonly", "yes")
            self._wait_for_aof(client)
        return snapshot

    def flushall(self) -> None:
        with redis.Redis.from_url(self.url) as client:
            client.flushall()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


def store_files(folder: Path) -> list[str]:
    """Every file of a ``file://`` store by relative name, but its driver's own (``.state/tmp/``
    and ``.state/lock``); files that vanish while it looks are left out."""
    names = []
    for directory, subdirectories, files in os.walk(folder):
        relative = Path(directory).relative_to(folder)
        if relative == Path(".state"):
            subdirectories[:] = [name for name in subdirectories if name != "tmp"]
        names += [(relative / name).as_posix() for name in files if (relative / name).as_posix() != ".state/lock"]
    return sorted(names)


@dataclass
class Overwritten:
    """A copy of the store put over the live one: what it overwrote and created, to undo it."""

    copy: Path
    saved: dict[str, bytes]
    """The live bytes of every file the copy overwrote."""
    created: list[str]
    """The files the copy added to the live store."""
    live_size: int
    copy_size: int
    at: float = field(default_factory=time.monotonic)


class StoreCopies:
    """Copies of the live store taken beside Redis's saves, and one of them copied over the live
    store the way ``cp -a BACKUP/. STORE/`` does (no ``--delete``), then undone the way an
    operator recovers (docs/log.md: the live files put back, ``log resume``)."""

    def __init__(self, tmp: Path, store: Path) -> None:
        self.folder = tmp / "store-copies"
        self.folder.mkdir()
        self.store = store
        self.copies: list[Path] = []
        """One per save, in order (the older ones' folders removed past ``BACKUPS_KEPT``)."""

    def take(self) -> None:
        """A copy of the live store: its checkpoint first, then ``.state/``, then the tiles, so
        the copy's checkpoint is never ahead of its tree state."""
        target = self.folder / f"{len(self.copies):03d}"
        names = store_files(self.store)
        order = {"checkpoint": 0, ".state": 1}
        for name in sorted(names, key=lambda n: order.get(n.split("/", 1)[0], 2)):
            with contextlib.suppress(FileNotFoundError):
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.store / name, target / name)
        self.copies.append(target)
        if len(self.copies) > BACKUPS_KEPT:
            shutil.rmtree(self.copies[-BACKUPS_KEPT - 1], ignore_errors=True)

    def overwrite(self, back: int) -> Overwritten:
        """Copy the copy taken ``back`` saves ago over the live store, file by file, in place.
        The store's lock (``.state/lock``, which every compare-and-swap of the ``file://``
        driver holds) is held meanwhile, so what is saved to undo it is what was overwritten."""
        copy = self.copies[-min(back, len(self.copies))]
        lock = os.open(self.store / ".state" / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            live = set(store_files(self.store))
            live_size = store_size(self.store)
            saved: dict[str, bytes] = {}
            created: list[str] = []
            for name in store_files(copy):
                target = self.store / name
                if name in live:
                    with contextlib.suppress(FileNotFoundError):
                        saved[name] = target.read_bytes()
                else:
                    created.append(name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(copy / name, target)
        finally:
            os.close(lock)
        return Overwritten(copy, saved, created, live_size, store_size(copy))

    def undo(self, overwritten: Overwritten) -> None:
        """Put the live files back (each written whole, then renamed into place) and remove the
        files the copy added; the halt stays, for ``log resume``."""
        for name, data in overwritten.saved.items():
            target = self.store / name
            temporary = target.with_name(f".{target.name}.undo")
            temporary.write_bytes(data)
            os.replace(temporary, target)
        for name in overwritten.created:
            if name != ".state/halt":
                with contextlib.suppress(FileNotFoundError):
                    (self.store / name).unlink()


def halt_record(store: Path) -> dict[str, Any] | None:
    """The store's ``.state/halt`` (``{"reason": "unreadable halt record"}`` if it is damaged)."""
    try:
        data = (store / ".state" / "halt").read_bytes()
    except FileNotFoundError:
        return None
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {"reason": "unreadable halt record"}
    return record if isinstance(record, dict) else {"reason": "unreadable halt record"}


def resume_log(store: Path, reason: str, tmp: Path) -> None:
    """``python service.py log resume --reason REASON``, as an operator runs it."""
    env = {**base_env(), "LOG_STORE": store_url(store)}
    done = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "service.py", "log", "resume", "--reason", reason], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise HarnessError(f"log resume failed ({done.returncode}): {done.stdout}{done.stderr}")


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (``T``: stopped), ``""`` when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@dataclass
class Slot:
    """One of the worker places: its planned lives and the process of the current one."""

    number: int
    lives: Iterator[Life]
    life: Life | None = None
    lives_started: int = 0
    proc: Proc | None = None
    started: float = 0.0
    stopped_at: float | None = None
    cont_at: float | None = None
    terminating_since: float | None = None
    read: int = 0


@dataclass
class Tally:
    faults: Counter[str] = field(default_factory=Counter)
    """Every fault that acted, by kind (stop, kill, sleep from the workers' logs; restore,
    flushall by the harness)."""
    details: Counter[str] = field(default_factory=Counter)
    """Beside them: sleeps and stops below or past the lease, saves, replacements, exits."""
    points: Counter[str] = field(default_factory=Counter)
    """Each fault point that acted, ``STEP=KIND``."""
    exits: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    """Workers that exited in a way no fault explains (``exit_kind``)."""
    events: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """The reason of each halt an overwrite brought (``.state/halt``): the workers' lines that
    say it are the refusal working, not findings."""
    refused_after_s: list[float] = field(default_factory=list)
    """How long after each overwrite of a grown store its halt was there."""
    refusals_expected_until: float = 0.0


class Workers:
    """The worker slots, driven by the plan: started, continued, stopped and replaced."""

    def __init__(self, tmp: Path, redis_url: str, receipt_root: str, store: Path, plan: Plan, tally: Tally) -> None:
        self.tmp, self.redis_url, self.receipt_root, self.store = tmp, redis_url, receipt_root, store
        self.tally = tally
        self.slots = [Slot(n, iter(lives)) for n, lives in enumerate(plan.lives)]
        self.logs: list[Path] = []
        self.began = time.monotonic()

    def note(self, text: str) -> None:
        self.tally.events.append(f"{time.monotonic() - self.began:7.1f} s {text}")

    def start(self, slot: Slot) -> None:
        slot.life = next(slot.lives, Life("", 1.0, LIFETIME_S[1]))
        slot.lives_started += 1
        name = f"worker-{slot.number}-{slot.lives_started:03d}"
        extra = {"LOG_FAILPOINTS": slot.life.failpoints} if slot.life.failpoints else {}
        slot.proc = start_worker(self.tmp, self.redis_url, self.receipt_root, name, SIGNER.encode(), self.store, extra)
        self.logs.append(slot.proc.log_path)
        slot.started, slot.read = time.monotonic(), 0
        slot.stopped_at = slot.cont_at = slot.terminating_since = None
        self.note(f"{name} started, LOG_FAILPOINTS={slot.life.failpoints or '(none)'}")

    def start_all(self) -> None:
        for slot in self.slots:
            self.start(slot)

    def _read_log(self, slot: Slot) -> None:
        assert slot.proc is not None
        try:
            with open(slot.proc.log_path, "rb") as handle:
                handle.seek(slot.read)
                data = handle.read()
        except OSError:
            return
        complete = data.rfind(b"\n") + 1
        slot.read += complete
        for step, action in reached_points(data[:complete].decode(errors="replace")):
            kind = fault_kind(action)
            self.tally.faults[kind] += 1
            self.tally.points[f"{step}={kind}"] += 1
            if kind == "sleep":
                long = int(action.partition(":")[2]) > LEASE_S * 1000
                self.tally.details["sleep past the lease" if long else "sleep within the lease"] += 1
            self.note(f"{slot.proc.name}: {step}={action} acted")

    def tick(self, now: float) -> None:
        for slot in self.slots:
            proc = slot.proc
            assert proc is not None
            assert slot.life is not None
            self._read_log(slot)
            if not proc.alive():
                self._exited(proc)
                proc.stop()  # its process group (RQ's children), should any be left
                self.tally.details["workers replaced"] += 1
                self.start(slot)
                continue
            # A fault point may stop it while it shuts down too (its integrator's last pass).
            stopped = process_state(proc.process.pid) in ("T", "t")
            if stopped and slot.stopped_at is None:
                slot.stopped_at, slot.cont_at = now, now + slot.life.cont_after_s
            if stopped and slot.cont_at is not None and now >= slot.cont_at:
                assert slot.stopped_at is not None
                os.kill(proc.process.pid, signal.SIGCONT)
                past = now - slot.stopped_at > LEASE_S
                self.tally.details["SIGCONT past the lease" if past else "SIGCONT within the lease"] += 1
                self.note(f"{proc.name} continued after {now - slot.stopped_at:.1f} s")
                slot.stopped_at = slot.cont_at = None
                if slot.terminating_since is not None:
                    slot.terminating_since = now  # its shutdown goes on from here
            elif slot.terminating_since is not None:
                if not stopped and now - slot.terminating_since > STOP_TIMEOUT_S:
                    self.note(f"{proc.name} did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM: killed")
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.process.pid, signal.SIGKILL)
            elif not stopped and now - slot.started > slot.life.lifetime_s:
                proc.process.send_signal(signal.SIGTERM)
                slot.terminating_since = now
                self.tally.details["workers stopped at the end of their life"] += 1

    def stop_all(self) -> None:
        """Every worker continued, then stopped (SIGTERM, then its group killed)."""
        for slot in self.slots:
            if slot.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.proc.process.pid, signal.SIGCONT)
        for slot in self.slots:
            if slot.proc is not None and slot.proc.alive():
                slot.proc.process.send_signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.proc is not None:
                # One SIGTERM: a second one landing in the interpreter's shutdown (its handlers
                # gone) ended a worker that was exiting 0 with -15.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    slot.proc.process.wait(STOP_TIMEOUT_S)
                self._read_log(slot)
                slot.proc.stop()
                self._exited(slot.proc)
                slot.proc = None

    def _exited(self, proc: Proc) -> None:
        code = proc.process.returncode
        self.tally.exits[str(code)] += 1
        self.note(f"{proc.name} exited {code}")
        text = proc.log_path.read_text(errors="replace") if proc.log_path.exists() else ""
        kind = exit_kind(code, text)
        if kind is None and code == 2 and time.monotonic() < self.tally.refusals_expected_until and REFUSED in text:
            kind = "refused the store an overwrite put back (exit 2)"
        if kind is None:
            self.tally.unexpected.append(f"{proc.name} exited {code}: {proc.tail(1500)}")
        else:
            self.tally.details[f"exits: {kind}"] += 1


class Load:
    """Creates over HTTP at a steady rate (open loop) from a thread, spread over the projects'
    keys (``keys`` may be replaced while it runs); a share of them with ``Prefer: wait=10``."""

    def __init__(self, port: int, rate: float, seed: int, keys: list[str]) -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.rate = rate
        self.rng = random.Random(f"{seed}/load")
        self.seed = seed
        self.keys = keys
        self.statuses: Counter[str] = Counter()
        self.created = 0
        self.waited = 0
        self.skipped = 0
        self.acked: list[Acked] = []
        self.ids: list[str] = []
        """Every receipt answered 201, with its proof or not."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="soak-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=16)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30, limits=limits) as client:
            tasks: set[asyncio.Task[None]] = set()
            n = 0
            next_at = time.monotonic()
            while not self._stop.is_set():
                if len(tasks) < MAX_IN_FLIGHT:
                    key, wait = self.rng.choice(self.keys), self.rng.random() < WAIT_SHARE
                    task = asyncio.create_task(self._one(client, n, key, wait))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                else:
                    self.skipped += 1
                n += 1
                next_at += 1 / self.rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, client: httpx.AsyncClient, n: int, key: str, wait: bool) -> None:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        if wait:
            headers["Prefer"] = "wait=10"
        body = {"input_hash": "sha256:" + hashlib.sha256(f"soak/{self.seed}/{n}".encode()).hexdigest()}
        try:
            answer = await client.post("/v1/receipts", headers=headers, content=orjson.dumps(body))
        except httpx.HTTPError as exc:
            self.statuses[type(exc).__name__] += 1
            return
        self.statuses[str(answer.status_code)] += 1
        if answer.status_code != 201:
            return
        made = answer.json()
        self.created += 1
        self.ids.append(made["receipt"]["receipt_id"])
        self.waited += wait
        proof = (made.get("log") or {}).get("proof")
        if proof is not None:
            self.acked.append(Acked(made["receipt"], proof))


# --------------------------------------------------------------------------- Go's checker


def build_tlogcheck(tmp: Path) -> Path:
    """tests/go/tlogcheck built offline against Debian's x/mod sources (GOPATH mode: no module
    proxy, no download), as tests/log_stack.py builds it."""
    go = shutil.which("go")
    if go is None:
        raise HarnessError("go is not installed (apt-get install golang-go golang-golang-x-mod-dev)")
    if not GO_X_MOD.is_dir():
        raise HarnessError(f"no {GO_X_MOD} (apt-get install golang-golang-x-mod-dev)")
    binary = tmp / "tlogcheck"
    env = base_env()
    env.update({"GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOFLAGS": "", "GOPROXY": "off",
                "CGO_ENABLED": "0"})  # fmt: skip
    if "GOCACHE" not in env and "HOME" not in env and "XDG_CACHE_HOME" not in env:
        env["GOCACHE"] = str(tmp / "gocache")  # else Go's own cache: the next run builds in seconds
    done = subprocess.run(  # noqa: S603 - our own command line
        [go, "build", "-o", str(binary), "."], cwd=GO_SOURCE, env=env, capture_output=True, text=True,
        timeout=GO_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise HarnessError(f"go build of tests/go/tlogcheck failed:\n{done.stdout}{done.stderr}")
    return binary


def go_check(checker: Path, store_dir: Path, vkey: str, olds: Sequence[bytes], tmp: Path) -> tuple[int, str]:
    """Go's checker over the store behind ``python -m http.server``, with each of ``olds`` as
    an older checkpoint the tree must extend: (exit status, its output)."""
    folder = tmp / "go-olds"
    folder.mkdir(exist_ok=True)
    args = []
    for n, text in enumerate(olds):
        path = folder / f"old-{n}"
        path.write_bytes(text)
        args += ["-old", str(path)]
    port = free_port()
    server = Proc.start(
        "http-server", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                        str(store_dir)], env=base_env(), log_path=tmp / "http-server.log",
    )  # fmt: skip
    try:
        wait_http(server, f"http://127.0.0.1:{port}/checkpoint")
        done = subprocess.run(  # noqa: S603 - our own command line
            [str(checker), "-url", f"http://127.0.0.1:{port}", "-vkey", vkey, *args],
            capture_output=True, text=True, timeout=GO_TIMEOUT_S, check=False,
        )  # fmt: skip
    finally:
        server.stop()
    return done.returncode, (done.stdout + done.stderr).strip()


# --------------------------------------------------------------------------- the run


def new_keys(redis_url: str, label: str) -> list[str]:
    return [project["api_key"] for project in create_projects(redis_url, f"soak-{label}", PROJECTS)]


def redis_event(
    event: RedisEvent, soak_redis: SoakRedis, copies: StoreCopies, load: Load, tally: Tally, say: Any
) -> Overwritten | None:
    """Carry out one event of the plan; an overwrite is returned, to be watched and undone."""
    if event.kind == "save":
        soak_redis.save()
        copies.take()
        tally.details["saves"] += 1
        say(f"redis SAVE, dump {len(soak_redis.snapshots) - 1} kept, and a copy of the store")
        return None
    overwritten = None
    if event.kind == "restore":
        snapshot = soak_redis.restore(event.back)
        say(f"redis restarted from dump {snapshot.stem} (of {len(soak_redis.snapshots)})")
    elif event.kind == "reload":
        snapshot = soak_redis.reload(event.back)
        say(f"redis put back from dump {snapshot.stem} under its connections (DEBUG RELOAD NOSAVE)")
    elif event.kind == "overwrite":
        tally.refusals_expected_until = float("inf")
        overwritten = copies.overwrite(event.back)
        snapshot = soak_redis.restore(event.back)
        say(
            f"copy {overwritten.copy.name} of the store (size {overwritten.copy_size}) copied over the live one "
            f"(size {overwritten.live_size}), redis restarted from dump {snapshot.stem}"
        )
    else:
        soak_redis.flushall()
        say("redis FLUSHALL")
    tally.faults[event.kind] += 1
    load.keys = new_keys(soak_redis.url, f"{event.kind}-{tally.faults[event.kind]}")
    return overwritten


def watch_overwrite(
    overwritten: Overwritten, copies: StoreCopies, tally: Tally, findings: list[str], tmp: Path, say: Any
) -> bool:
    """One look at an overwrite in progress: once the store grown since its copy is refused
    (``.state/halt``), or at once when it had not grown, the live files are put back and the
    log resumed. True when it is over. Not refused within ``REFUSAL_WAIT_S``: a finding."""
    waited = time.monotonic() - overwritten.at
    record = halt_record(copies.store)
    grown = overwritten.live_size > overwritten.copy_size
    if record is None and grown and waited < REFUSAL_WAIT_S:
        return False
    if record is not None:
        evidence = record.get("evidence")
        detail = evidence.get("detail") if isinstance(evidence, dict) else None
        tally.refusals.append(str(detail or record.get("reason", "")))  # what the workers' lines say
        tally.refused_after_s.append(round(waited, 2))
        say(f"refused after {waited:.1f} s: {str(record.get('reason', ''))[:200]}")
    elif grown:
        findings.append(
            f"a copy of the store of size {overwritten.copy_size} lay over the live store of size "
            f"{overwritten.live_size} for {REFUSAL_WAIT_S:.0f} s and the log was not refused"
        )
    copies.undo(overwritten)
    resume_log(copies.store, "soak: the live files put back after an older copy was copied over them", tmp)
    tally.refusals_expected_until = time.monotonic() + 15.0
    tally.details["overwrites refused" if record is not None else "overwrites of a store that had not grown"] += 1
    say("the live files put back, log resume")
    return True


def drain(tmp: Path, redis_url: str, receipt_root: str, store: Path) -> tuple[Proc, float, str | None]:
    """One healthy worker until nothing waits: (the worker, seconds, None or why not)."""
    worker = start_worker(tmp, redis_url, receipt_root, "worker-drain", SIGNER.encode(), store)
    started = time.monotonic()
    while True:
        with contextlib.suppress(redis.RedisError, OSError, note.NoteError):
            state = log_state(redis_url)
            size = store_size(store)
            if state["pending"] == 0 and state["queued"] == 0 and state["synced"] == size:
                return worker, time.monotonic() - started, None
        if not worker.alive():
            return worker, time.monotonic() - started, f"the drain worker exited {worker.process.returncode}"
        if time.monotonic() - started > DRAIN_TIMEOUT_S:
            why = f"the log did not drain within {DRAIN_TIMEOUT_S:.0f} s: {store_size(store)} published"
            return worker, time.monotonic() - started, f"{why}, in Redis {log_state(redis_url)}"
        time.sleep(0.2)


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The soak: faults for ``args.minutes``, the drain, the judges. The report."""
    plan = make_plan(args.seed, args.minutes * 60, args.workers)
    store = tmp / "store"
    tally = Tally()
    report: dict[str, Any] = {
        "seed": args.seed,
        "minutes": args.minutes,
        "workers": args.workers,
        "rate": args.rate,
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_info(),
        "loadavg_before": loadavg(),
        "cpu_busy_before": cpu_busy_share(2.0),
    }
    began = time.monotonic()
    log("building tests/go/tlogcheck")
    checker = build_tlogcheck(tmp)
    receipt_root = new_receipt_root(tmp)
    soak_redis = SoakRedis(tmp)
    copies = StoreCopies(tmp, store)
    overwrite_findings: list[str] = []
    services = ServiceSpec(receipt_root, orjson.dumps(RAISED_LIMITS).decode(), "json", False, tmp)
    workers: Workers | None = None
    load: Load | None = None
    observer: Observer | None = None
    drainer: Proc | None = None
    try:
        soak_redis.start()
        keys = new_keys(soak_redis.url, "start")
        log_env = {"LOG_SIGNING_KEY": SIGNER.encode(), "LOG_ORIGIN": ORIGIN, "LOG_STORE": store_url(store)}
        port = services.start("soak", RedisKind("tcp", soak_redis.url), 1, log_env)
        observer = Observer(f"http://127.0.0.1:{port}", store, SIGNER.verifier).start()
        workers = Workers(tmp, soak_redis.url, receipt_root, store, plan, tally)
        workers.start_all()
        load = Load(port, args.rate, args.seed, keys).start()
        log(f"faults for {args.minutes:g} min (seed {args.seed}, {args.workers} workers, {args.rate:g} creates/s)")
        faults_began = time.monotonic()
        events = list(plan.redis)
        progress_at = faults_began
        overwriting: Overwritten | None = None
        while (now := time.monotonic()) - faults_began < plan.seconds or overwriting is not None:
            if overwriting is not None and watch_overwrite(
                overwriting, copies, tally, overwrite_findings, tmp, workers.note
            ):
                overwriting = None
                observer.allow_back_until = time.monotonic() + 5.0
            while overwriting is None and events and now - faults_began >= events[0].at_s:
                if events[0].kind == "overwrite":
                    observer.allow_back_until = float("inf")  # before the older checkpoint is copied in
                overwriting = redis_event(events.pop(0), soak_redis, copies, load, tally, workers.note)
            workers.tick(now)
            if now - progress_at > 30:
                progress_at = now
                log(f"{now - faults_began:.0f} s: size {store_size(store)}, {load.created} creates "
                    f"({len(load.acked)} with proof), faults {dict(tally.faults)}")  # fmt: skip
            time.sleep(TICK_S)
        report["fault_seconds"] = time.monotonic() - faults_began
        load.stop()
        workers.stop_all()
        log(f"faults over: {dict(tally.faults)}; draining with one healthy worker")
        drainer, drained_s, not_drained = drain(tmp, soak_redis.url, receipt_root, store)
        report["drain_seconds"] = drained_s
        time.sleep(SETTLE_S)
        observer.stop()
        drainer.stop()
        workers.logs.append(drainer.log_path)
        services.stop()
        report["redis_after"] = log_state(soak_redis.url)
    finally:
        if load is not None:
            load.stop()
        if workers is not None:
            workers.stop_all()
        if observer is not None:
            observer.stop()
        if drainer is not None:
            drainer.stop()
        services.stop()
        soak_redis.stop()
    assert observer is not None
    assert load is not None
    assert workers is not None
    log("judging: check_tree, consistency, receipts, then Go's tlogcheck")
    judged_at = time.monotonic()
    findings = list(observer.findings) + overwrite_findings  # the log's: what a monitor would see
    if not_drained:
        findings.append(not_drained)
    olds = list(observer.texts)
    verdict = judge(store, SIGNER.verifier, olds, load.acked)
    findings += verdict.findings
    changed = observer.changed_tiles()
    if changed:
        findings.append(f"full tiles changed after they appeared: {changed[:5]}")
    proof_checkpoints = [note.parse_tlog_proof(a.proof).checkpoint.encode() for a in load.acked]
    go_olds = list(dict.fromkeys(olds + proof_checkpoints))
    go_status, go_output = go_check(checker, store, SIGNER.verifier.encode(), go_olds, tmp)
    go_summary = go_output.splitlines()[-1] if go_output else ""
    if go_status == 2:
        raise HarnessError(f"Go's tlogcheck could not run: {go_output}")
    if go_status != 0:
        findings.append(f"Go's tlogcheck: {go_output[-1000:]}")
    elif f"consistency={len(go_olds)}" not in go_output:
        findings.append(f"Go's tlogcheck checked fewer older checkpoints than the {len(go_olds)} given: {go_output}")
    log_findings = len(findings)
    loud: dict[str, list[str]] = {}  # the processes': what an operator would see
    outage_lines = fenced = read_back = refusal_lines = 0
    for path in workers.logs:
        text = path.read_text(errors="replace") if path.exists() else ""
        fenced += text.count(FENCED)
        read_back += sum(int(n) for n in READ_BACK.findall(text))
        lines = loud_lines(text)
        if tally.refusals:  # an overwrite's refusal saying so: the refusal working
            lines, said = without_refusals(lines, tally.refusals)
            refusal_lines += said
        if tally.faults["restore"] or tally.faults["overwrite"]:  # the job queue's own report of a Redis restart
            lines, reported = without_queue_outage(text, lines)
            outage_lines += reported
        if lines:
            loud[path.stem] = lines
            findings.append(f"{path.stem} logged: {lines[:3]}")
    findings += [f"unexpected exit: {what}" for what in tally.unexpected]
    unreachable = tally.details[f"exits: {exit_kind(2, UNREACHABLE)}"]
    if unreachable and not (tally.faults["restore"] or tally.faults["overwrite"]):
        findings.append(f"{unreachable} workers found Redis unreachable at their start, and no restore restarted it")
    ids = set(receipt_ids(verdict.entries))
    if findings:  # for whoever looks into them: what the load was told
        answered = {"answered_201": load.ids, "acknowledged_with_proof": [a.receipt for a in load.acked]}
        (tmp / "answered.json").write_bytes(orjson.dumps(answered))
    report.update(
        {
            "took_s": time.monotonic() - began,
            "judge_seconds": time.monotonic() - judged_at,
            "worker_lives": sum(slot.lives_started for slot in workers.slots),
            "creates": load.created,
            "creates_waited": load.waited,
            "creates_with_proof": len(load.acked),
            "creates_with_proof_in_log": sum(1 for a in load.acked if a.receipt["receipt_id"] in ids),
            "creates_in_log": sum(1 for receipt_id in load.ids if receipt_id in ids),
            "log_entries_never_answered_201": len(ids - set(load.ids)),
            "creates_waited_without_proof": load.waited - len(load.acked),
            "answers": dict(load.statuses),
            "not_sent_in_flight_cap": load.skipped,
            "faults": {kind: tally.faults.get(kind, 0) for kind in FAULT_KINDS},
            "fault_details": dict(tally.details),
            "fault_points": dict(sorted(tally.points.items())),
            "worker_exits": dict(tally.exits),
            "checkpoints_observed": len(olds),
            "checkpoints_judged": verdict.checkpoints,
            "observer_polls": observer.polls,
            "full_tiles": len(observer.tiles),
            "final_size": verdict.final_size,
            "acked_checked": verdict.acked,
            "go_summary": go_summary,
            "loud": loud,
            "redis_outage_lines": outage_lines,
            "fenced": fenced,
            "read_back_from_tree": read_back,
            "overwrites": {
                "refused_after_s": tally.refused_after_s,
                "reasons": [reason[:300] for reason in tally.refusals],
                "checkpoints_going_back_while_a_copy_lay_over_the_store": observer.forgiven,
                "refusal_lines": refusal_lines,
            },
            "corruptions": len(findings),
            "corruptions_of_the_log": log_findings,
            "corruptions_of_the_processes": len(findings) - log_findings,
            "findings": findings,
            "events": tally.events,
            "loadavg_after": loadavg(),
        }
    )
    return report


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.log_soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long faults are injected (default 3)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes at once, 2 to 6 (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="the faults' seed (default: drawn, and reported)")
    parser.add_argument("--rate", type=float, default=10.0, help="creates per second (default 10)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON summary to this file")
    parser.add_argument("--keep", action="store_true", help="keep the processes' logs and the store when all holds")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES:
        parser.error(f"--minutes must be above 0 and at most {MAX_MINUTES:g}")
    if not 2 <= args.workers <= 6:
        parser.error("--workers must be 2 to 6")
    if not 0 < args.rate <= MAX_RATE:
        parser.error(f"--rate must be above 0 and at most {MAX_RATE:g}")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-soak-"))
    try:
        report = run(args, tmp)
    except HarnessError as exc:
        log(f"HARNESS FAILURE: {exc} (the processes' logs are kept in {tmp})")
        print(orjson.dumps({"seed": args.seed, "harness_failure": str(exc), "logs": str(tmp)}).decode())
        return 2
    if report["corruptions"] or args.keep:
        report["logs"] = str(tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    log(
        f"{report['corruptions']} corruptions; size {report['final_size']}, {report['creates']} creates "
        f"({report['creates_with_proof']} with proof), faults {report['faults']}, "
        f"{report['checkpoints_observed']} checkpoints observed; Go: {report['go_summary']}"
    )
    return 1 if report["corruptions"] else 0


if __name__ == "__main__":
    sys.exit(main())
