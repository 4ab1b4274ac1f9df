"""Fill the store with receipts through the service's own write path, fast.

Each receipt is made by ``usecases.issuing.ReceiptIssuer.issue`` (the code a create request runs
after authentication: request parsing, idempotency key, chain placement, Ed25519 signing)
on a ``kv.store.Store`` whose client *records* the script calls instead of sending them one
by one. The recorded ``issue_receipt`` calls (the exact keys and arguments ``Store`` built:
the compact receipt record, its index fields, tip, minute and month counters) are then sent
to the real Redis as pipelined ``EVALSHA`` of the script text ``Store`` registered, in order,
and every reply must say "issued" (code 0). So the stored keys and bytes are those of real
creates, at pipelining speed.

The recorder answers every issue with "issued", so the issuer's tip advances locally exactly
as Redis's does (the script would answer "tip moved" otherwise, and the load fails). Each
worker process owns whole projects (no two processes extend one chain).
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execution_proof.kv.keys import LogIdentity

PROJECT_FIELDS = ("project_id", "actor_id", "key_hash", "plan")
UNLIMITED = 10**15
BATCH = 2000
KEY_LIFETIME_S = 604_800
"""A preload's key lives the longest a key may (a week): a preload never outlasts it."""


@dataclass(frozen=True)
class Issued:
    project_index: int
    receipt_id: str
    input_hash: str


def bench_hash(nonce: str, kind: str, index: int) -> str:
    return "sha256:" + hashlib.sha256(f"{nonce}:{kind}:{index}".encode()).hexdigest()


class _RecordedScript:
    """Stands in for a registered script: records (text, keys, args), answers "issued"."""

    def __init__(self, text: str, calls: list[tuple[str, list[Any], list[Any]]]) -> None:
        self.text = text
        self.calls = calls

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> list[Any]:
        self.calls.append((self.text, list(keys or []), list(args or [])))
        return [0, b"", 1, 1]


class _RecordingClient:
    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[str, list[Any], list[Any]]] = []
        """Script calls (text, keys, args), and plain writes ("", [], command)."""

    def register_script(self, text: str) -> _RecordedScript:
        return _RecordedScript(text, self.calls)

    async def execute_command(self, *args: Any) -> Any:
        """The store's reads (the tip on a cold cache), answered by the real Redis; its
        ``SADD`` naming a project in the log's dirty set, recorded (answered 1, as Redis does
        for a new member; the store does not look)."""
        if args and args[0] == "SADD":
            self.calls.append(("", [], list(args)))
            return 1
        return self.real.execute_command(*args)

    async def aclose(self) -> None:
        return None


async def _issue_many(
    redis_url: str,
    receipt_root: str,
    projects: Sequence[dict[str, Any]],
    indexes: Sequence[int],
    nonce: str,
    collect: bool,
    log_identity: LogIdentity | None = None,
) -> list[tuple[int, str, str]]:
    import redis
    import redis.asyncio as aioredis

    from execution_proof.kv.records import KeyRecord, LogQueue
    from execution_proof.kv.store import Store
    from execution_proof.receipts.limits import PlanLimits
    from execution_proof.receipts.model import parse_create_request
    from execution_proof.runtime.signers import open_root
    from execution_proof.usecases.issuing import ReceiptIssuer
    from execution_proof.usecases.signing_keys import ReceiptKeys

    real = redis.Redis.from_url(redis_url)
    recorder = _RecordingClient(real)
    log = LogQueue(log_identity, 0) if log_identity is not None else None  # 0: no LOG_MAX_PENDING limit
    store = Store(recorder, log=log)  # type: ignore[arg-type]
    # This process's receipt key, certified by the run's root and published in the registry
    # like a serving process's (on a plain client: only the receipts' writes are recorded);
    # not logged, so the log holds exactly the receipts preloaded.
    registry = Store(aioredis.from_url(redis_url))
    keys = ReceiptKeys(
        registry.signing_keys,
        lambda: open_root(receipt_root),
        receipt_root,
        lifetime_s=KEY_LIFETIME_S,
        retention_days=180,
        clock_ms=lambda: int(time.time() * 1000),
    )
    await keys.start()
    issuer = ReceiptIssuer(store.receipts, keys, log_origin=log_identity.origin if log_identity is not None else None)
    plan = PlanLimits(per_minute=UNLIMITED, monthly=UNLIMITED)
    records = [
        KeyRecord(p["key_hash"], p["project_id"], p["actor_id"], p["plan"], revoked=False, created_at="")
        for p in projects
    ]
    shas: dict[str, str] = {}
    out: list[tuple[int, str, str]] = []

    def flush() -> None:
        pipe = real.pipeline(transaction=False)
        for text, keys, args in recorder.calls:
            if not text:
                pipe.sadd(args[1], *args[2:])  # the only command recorded
                continue
            sha = shas.get(text)
            if sha is None:
                sha = shas[text] = real.script_load(text)
            pipe.evalsha(sha, len(keys), *keys, *args)
        replies = pipe.execute()
        recorder.calls.clear()
        for reply in replies:
            if isinstance(reply, int):
                continue  # an SADD's count
            if int(reply[0]) != 0:
                raise RuntimeError(f"the issue script refused a preloaded receipt: {reply!r}")

    for index in indexes:
        project = index % len(records)
        input_hash = bench_hash(nonce, "i", index)
        req = parse_create_request(
            {
                "input_hash": input_hash,
                "output_hash": bench_hash(nonce, "o", index),
                "receipt_kind": "release",
                "tags": {"workflow_stage": "build"},
            }
        )
        issued = await issuer.issue(req, records[project], None, plan)
        if collect:
            out.append((project, issued.receipt["receipt_id"], input_hash))
        if len(recorder.calls) >= BATCH:
            flush()
    if recorder.calls:
        flush()
    real.close()
    keys.close()
    await registry.close()
    return out


def _worker_main(
    args: tuple[str, str, list[dict[str, Any]], int, int, int, str, bool, LogIdentity | None],
) -> list[tuple[int, str, str]]:
    redis_url, receipt_root, projects, count, worker, workers, nonce, collect, log_identity = args
    # Receipt i belongs to project i % len(projects); this worker takes the projects p with
    # p % workers == worker, so one project's chain is only extended by one process.
    indexes = [i for i in range(count) if (i % len(projects)) % workers == worker]
    return asyncio.run(_issue_many(redis_url, receipt_root, projects, indexes, nonce, collect, log_identity))


def preload(
    redis_url: str,
    receipt_root: str,
    projects: Sequence[dict[str, Any]],
    count: int,
    *,
    nonce: str,
    collect: bool = False,
    processes: int = 2,
    log_identity: LogIdentity | None = None,
) -> tuple[list[Issued], float]:
    """Issue ``count`` receipts spread round-robin over ``projects``: (issued if ``collect``, seconds),
    signed by a key ``receipt_root`` (a signer URI) certifies in each issuing process.

    ``projects``: dicts with project_id, actor_id, key_hash and plan (``create_project_key``'s
    output). Raises when the script refuses one (it must not: the limits are unlimited, the
    hashes are unique per ``nonce``, and no one else writes to these projects meanwhile).
    ``log_identity``: queue each receipt's entry for that log, as a service with the log does.
    """
    started = time.perf_counter()
    workers = max(1, min(processes, len(projects)))
    plain = [{name: p[name] for name in PROJECT_FIELDS} for p in projects]
    jobs = [(redis_url, receipt_root, plain, count, w, workers, nonce, collect, log_identity) for w in range(workers)]
    if workers == 1:
        outputs = [_worker_main(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            outputs = pool.map(_worker_main, jobs)
    results = [Issued(p, rid, ih) for raw in outputs for p, rid, ih in raw]
    return results, time.perf_counter() - started
