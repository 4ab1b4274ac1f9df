"""The transparency log end to end, in process: creates queue entries in Redis, the integrator
moves them into the log store (a real directory here), the routes serve them and proofs
verify; on fakeredis and a real Redis. Crashes between any two steps of a batch, racing
integrators, Redis flushed or restored from an older snapshot, mismatched identities, a lost
store, backpressure and halting are driven here; with real processes and kill -9 in
test_log_faults.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from tlog_scales.backend import LocalBackend
from tlog_scales.reader import TilesReader
from tlog_scales.signing import Vkey

from execution_proof.jobs.log_config import LogConfig, LogRefused
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.kv.logstore.log import Identity
from execution_proof.kv.records import KeyRecord
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import SigningKeyUnavailable
from execution_proof.receipts.limits import PlanLimits, load_limits
from execution_proof.receipts.model import parse_create_request
from execution_proof.runtime.failpoints import STEPS
from execution_proof.runtime.settings import Settings
from execution_proof.transparency import note, tlog
from execution_proof.web.app import create_app
from tests import log_stack
from tests.clock import Clock
from tests.conftest import RedisServer, auth, hash_of, missing_binary
from tests.log_stack import RECEIPT_ENTRY, assert_paired, log_size
from tests.receipt_keys import KEY_ENTRIES, keys_at_the_clock
from tests.servers import RAISED_LIMITS

ORIGIN = "test.example/v1/log"
REPO = Path(__file__).resolve().parent.parent
UNLIMITED = PlanLimits(per_minute=10**9, monthly=10**9)


SIGNER = note.Signer.generate(ORIGIN)
IDENTITY = Identity(ORIGIN, SIGNER.verifier.encode())
"""The log's identity: its records in Redis carry it (docs/log.md, "What is in Redis")."""


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return SIGNER


def log_app(
    store: Store,
    log_store: LogStore,
    receipt_root: str,
    signer: note.Signer | None,
    clock_ms: Any = None,
    **settings: Any,
) -> Any:
    settings = {"limits": load_limits(orjson.dumps(RAISED_LIMITS)), **settings}
    config = Settings(
        redis_url="redis://injected-by-tests",
        receipt_root=receipt_root,
        env="test",
        log_origin=ORIGIN,
        log_signer=signer,
        **settings,
    )
    return create_app(config, store=store, log_store=log_store, clock_ms=clock_ms)


def ident(signer: note.Signer) -> Identity:
    """The log's identity (origin and key), which binds its records in Redis."""
    return Identity(signer.name, signer.verifier.encode())


async def integrator(store: Store, log_store: LogStore, signer: note.Signer, **config: Any) -> Integrator:
    """An integrator whose store checks have passed (``prepare``: creates the log if new)."""
    made = Integrator(store.log_queue, log_store, LogConfig(ORIGIN, signer, **config))
    await made.prepare()
    return made


async def create(client: Any, key: dict[str, Any], label: str, **headers: str) -> Any:
    body = {"input_hash": hash_of(f"in-{label}"), "output_hash": hash_of(f"out-{label}"), "receipt_kind": "release"}
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers={**auth(key), **headers})
    assert response.status in (200, 201), response.text
    return response.json


async def started(app: Any) -> Any:
    """``app`` started as a serving process starts (the ASGI client starts it at its first
    request; this one reads nothing of the log): its receipt key certified, the certificate
    queued for the log."""
    _, response = await app.asgi_client.get("/v1/public-key")
    assert response.status == 200 and response.json["active_kid"], response.text
    return app


async def issue(app: Any, key: dict[str, Any], labels: list[str]) -> list[dict[str, Any]]:
    """Many creates at once through the app's issuer (group commit, the route's own path
    after its HTTP checks): the ASGI test client costs tens of ms a request. The app is
    started first, and given a key certified at its clock when the test moved the clock
    outside its key's certificate (as a process running then would have had)."""
    services = app.ctx.services
    if services.receipt_keys.active_kid is None:
        await started(app)
    try:
        services.receipt_keys.signing(services.clock_ms())
    except SigningKeyUnavailable:
        await keys_at_the_clock(services.receipt_keys)
    record = KeyRecord(key["key_hash"], key["project_id"], key["actor_id"], key["plan"], False, "")
    issued = await asyncio.gather(
        *(
            app.ctx.services.issuer.issue(parse_create_request({"input_hash": hash_of(label)}), record, None, UNLIMITED)
            for label in labels
        )
    )
    return [one.receipt for one in issued]


async def proof_index(app: Any, signer: note.Signer, receipt: dict[str, Any]) -> int:
    """The receipt's verified index, through the app's log service instead of HTTP."""
    found = await app.ctx.services.log.proof(receipt)
    assert found is not None, receipt["receipt_id"]
    proof = note.parse_tlog_proof(found[1])
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, signer.verifier)
    tlog.verify_inclusion(
        tlog.leaf_hash(tlog.entry_bytes(receipt)), proof.index, checkpoint.size, proof.path, checkpoint.root
    )
    return proof.index


async def published(log_store: LogStore, signer: note.Signer) -> note.Checkpoint:
    """The checkpoint the store publishes (what a static web server in front of it serves)."""
    raw = await log_store.checkpoint()
    assert raw is not None
    checkpoint, _ = note.open_checkpoint(raw, signer.verifier)
    return checkpoint


async def served(client: Any, signer: note.Signer) -> note.Checkpoint:
    """The checkpoint the service's route serves."""
    _, response = await client.get("/v1/log/checkpoint")
    assert response.status == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    checkpoint, _ = note.open_checkpoint(response.text, signer.verifier)
    return checkpoint


async def check_proof(client: Any, signer: note.Signer, receipt: dict[str, Any]) -> int:
    """The receipt's tlog-proof verifies: signed checkpoint, its entry at its index."""
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}/log-proof")
    assert response.status == 200, response.text
    proof = note.parse_tlog_proof(response.text)
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, signer.verifier)
    leaf = tlog.leaf_hash(tlog.entry_bytes(receipt))
    tlog.verify_inclusion(leaf, proof.index, checkpoint.size, proof.path, checkpoint.root)
    return proof.index


async def log_entries(log_store: LogStore, size: int) -> list[bytes]:
    """Every entry of the store's tree of ``size``, read from its bundles."""
    from execution_proof.transparency.tiles import TileReader

    reader = TileReader(log_store.fetch)
    entries: list[bytes] = []
    for index in range((size + 255) // 256):
        entries += await reader.bundle(index, tlog.tile_width(size, 0, index))
    return entries


def receipt_ids(entries: list[bytes]) -> list[str]:
    """The receipt ids of the receipt entries, in order (receipt keys' certificates and the
    receipts' dsse leaves left out)."""
    return [tlog.LogEntry.parse(e).receipt_id for e in entries if e.startswith(RECEIPT_ENTRY)]


def is_leaf_of(entry: bytes, receipt: dict[str, Any], origin: str = ORIGIN) -> bool:
    """Whether ``entry`` is the dsse leaf of ``receipt``'s attestation (tests/log_stack.py)."""
    return log_stack.is_leaf_of(entry, receipt, origin)


async def assert_in_place(
    log_store: LogStore, size: int, receipts: list[dict[str, Any]], indices: list[int], origin: str = ORIGIN
) -> None:
    """The log of ``size`` holds each receipt's entry at its index and the dsse leaf of its
    attestation at index + 1, and nothing else but key certificates: every entry once."""
    log_stack.assert_placed(await log_entries(log_store, size), receipts, indices, origin)


async def certificate_indices(log_store: LogStore, size: int) -> list[int]:
    """Where the log's first ``size`` entries hold a receipt key's certificate."""
    entries = await log_entries(log_store, size)
    return [i for i, entry in enumerate(entries) if entry.startswith(tlog.KEY_CERTIFICATE_HEADER)]


async def assert_extends(log_store: LogStore, old: note.Checkpoint, new: note.Checkpoint) -> None:
    from execution_proof.transparency.tiles import TileReader

    proof = await TileReader(log_store.fetch).compute(new.size, lambda v: v.consistency_proof(old.size))
    tlog.verify_consistency(old.size, old.root, new.size, new.root, proof)


async def queued(store: Store) -> int:
    projects = await store.log_queue.log_all_dirty_projects(IDENTITY)
    return sum((await store.log_queue.log_queue_lengths(IDENTITY, projects)).values()) if projects else 0


async def test_receipts_reach_the_log_and_their_proofs_verify(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    worker = await integrator(store, log_store, signer)
    # A new log publishes its empty tree at once.
    empty = await served(client, signer)
    assert (empty.size, empty.root) == (0, tlog.EMPTY_ROOT)
    keys_ = [await create_project_key(store.keys, project_name=f"log-{i}", plan="pro") for i in range(3)]
    receipts = []
    for n in range(40):
        body = await create(client, keys_[n % 3], f"r{n}")
        assert body["log"] == {
            "status": "pending",
            "proof_url": f"/v1/receipts/{body['receipt']['receipt_id']}/log-proof",
        }
        receipts.append(body["receipt"])
    _, pending = await client.get(f"/v1/receipts/{receipts[0]['receipt_id']}/log-proof")
    assert pending.status == 409 and pending.json["error"]["code"] == "log_pending"
    assert pending.headers["retry-after"] == "1"
    _, huge = await client.get("/v1/log/checkpoints/" + "9" * 5000 + "/timestamps")
    assert huge.status == 404
    long_wait = await create(client, keys_[0], "long-wait", Prefer="wait=" + "9" * 5000)
    assert long_wait["log"]["status"] == "pending"
    receipts.append(long_wait["receipt"])
    # Pending counts queue items (each receipt's: its entry and its leaf; the app's key
    # certificate); the step returns the leaves it added.
    assert await store.log_queue.log_pending(IDENTITY) == 41 + KEY_ENTRIES
    size = log_size(41)
    assert await worker.step(force=True) == size
    assert await store.log_queue.log_pending(IDENTITY) == 0
    checkpoint = await published(log_store, signer)
    assert checkpoint.size == size and checkpoint.origin == ORIGIN
    indices = [await check_proof(client, signer, r) for r in receipts]
    await assert_in_place(log_store, size, receipts, indices)
    # Each project's receipts are in the log in their chain order.
    for project in {r["project_id"] for r in receipts}:
        mine = [i for i, r in zip(indices, receipts, strict=True) if r["project_id"] == project]
        assert mine == sorted(mine)
    # A replay adds no entry; the next pass has nothing to do.
    again = await create(client, keys_[0], "r0")
    assert again["idempotency"]["hit"] is True
    assert await worker.step(force=True) == 0
    assert (await published(log_store, signer)).size == size
    _, described = await client.get("/v1/log")
    assert described.json == {
        "origin": ORIGIN,
        "log_vkey": signer.verifier.encode(),
        "checkpoint_url": "/v1/log/checkpoint",
        "tiles_url": described.json["tiles_url"],
        "witnesses": [],
        "policy": "",
    }
    assert described.json["tiles_url"].endswith("/v1/log/")
    assert described.headers["access-control-allow-origin"] == "*"
    # Nothing of the log is left in Redis but the sizes and the indices.
    assert await queued(store) == 0
    assert await store.log_queue.log_size(IDENTITY) == size
    assert [name async for name in store.client.scan_iter(match="lt:*")] == []


async def test_the_tiles_url_is_where_outsiders_read_the_log(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    await integrator(store, log_store, signer)
    configured = log_app(store, log_store, receipt_root, signer, log_public_url="https://cdn.example/log/").asgi_client
    _, described = await configured.get("/v1/log")
    assert described.json["tiles_url"] == "https://cdn.example/log/"
    plain = log_app(store, log_store, receipt_root, signer).asgi_client
    request, described = await plain.get("/v1/log", headers={"Host": "eps.example:8443"})
    assert described.json["tiles_url"] == f"{request.scheme}://eps.example:8443/v1/log/"


async def test_the_published_directory_is_a_log_tlog_scales_reads(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    """An implementation nobody here wrote (tlog-scales) reads the store's directory as it
    lies on disk (what any static web server serves), and the service's routes: same
    checkpoint, root and proofs, and our signature verifies."""
    app = log_app(store, log_store, receipt_root, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="scales", plan="pro")
    worker = await integrator(store, log_store, signer)
    receipts = []
    old: note.Checkpoint | None = None
    for batch, count in enumerate((150, 1, 127)):  # with the app's key certificate: 301, 303, 557 entries
        receipts += await issue(app, key, [f"b{batch}-{n}" for n in range(count)])
        await worker.step(force=True)
        old = old or await published(log_store, signer)
    assert old is not None
    checkpoint = await published(log_store, signer)
    assert checkpoint.size == log_size(278) == 557
    certificates = await certificate_indices(log_store, 557)
    assert len(certificates) == KEY_ENTRIES
    reader = TilesReader(LocalBackend(tmp_path / "log"))
    theirs = reader.get_checkpoint()
    theirs.verify(Vkey.from_string(signer.verifier.encode()))  # raises unless our signature verifies
    assert theirs.size == 557 and theirs.root_hash == checkpoint.root
    assert reader.calculate_root_hash() == checkpoint.root
    by_id = {r["receipt_id"]: r for r in receipts}
    for index in sorted({0, 1, 255, 256, 299, 300, 301, 302, 555, 556} - set(certificates)):
        entry = reader.get_entry(index)
        # A receipt's entry, or the dsse leaf of the receipt whose entry is just before it.
        leaf = not entry.startswith(RECEIPT_ENTRY)
        receipt = by_id[tlog.LogEntry.parse(reader.get_entry(index - 1) if leaf else entry).receipt_id]
        assert is_leaf_of(entry, receipt) if leaf else entry == tlog.entry_bytes(receipt)
        proof = reader.get_inclusion_proof(index, 557)
        _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}/log-proof")
        ours = note.parse_tlog_proof(response.text)
        assert ours.index == index - leaf
        if not leaf:
            assert list(ours.path) == proof.node_hashes
        proof.check(tlog.leaf_hash(entry), checkpoint.root)
    consistency = reader.get_consistency_proof(old.size, 557)
    consistency.check(old.root, checkpoint.root)
    # The routes serve the same bytes as the directory holds; full ones are immutable.
    for path in ("tile/0/000", "tile/0/002.p/45", "tile/1/000.p/2", "tile/entries/000", "tile/entries/002.p/45"):
        _, response = await client.get(f"/v1/log/{path}")
        assert response.status == 200, path
        assert response.body == (tmp_path / "log" / path).read_bytes()
        full = ".p/" not in path
        assert (response.headers["cache-control"] == "public, max-age=31536000, immutable") == full


async def test_partial_tiles_go_once_full_and_older_widths_are_still_served(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="partials", plan="pro")
    worker = await integrator(store, log_store, signer)
    for count, size in ((1, 3), (2, 7), (150, 307)):  # and the app's key certificate, in the first step
        await issue(app, key, [f"p{count}-{n}" for n in range(count)])
        await worker.step(force=True)
        assert (await published(log_store, signer)).size == size
    # Widths 3 and 7 of tile 0 were published, then the tile filled: only the full one is left.
    assert not (tmp_path / "log/tile/0/000.p").exists()
    assert not (tmp_path / "log/tile/entries/000.p").exists()
    full = (tmp_path / "log/tile/0/000").read_bytes()
    _, older = await client.get("/v1/log/tile/0/000.p/7")
    assert older.status == 200 and older.body == full[: 7 * 32]
    _, bundle = await client.get("/v1/log/tile/entries/000.p/3")
    assert len(tlog.split_bundle(bundle.body)) == 3


async def test_tile_routes_refuse_what_is_not_published(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="tiles", plan="pro")
    worker = await integrator(store, log_store, signer)
    for n in range(2):  # two receipts' entries and leaves, and the app's key certificate: 5 entries
        await create(client, key, f"t{n}")
    await worker.step(force=True)
    _, ok = await client.get("/v1/log/tile/0/000.p/5")
    assert ok.status == 200 and len(ok.body) == 5 * 32
    _, older = await client.get("/v1/log/tile/0/000.p/3")
    assert older.status == 200 and older.body == ok.body[: 3 * 32]
    _, bundle = await client.get("/v1/log/tile/entries/000.p/5")
    assert len(tlog.split_bundle(bundle.body)) == 5
    for path in ("0/000", "0/000.p/6", "1/000.p/1", "0/001.p/1", "0/0.p/1", "00/000.p/1", "64/000", "0/000.p/0",
                 "0/000.p/256", "0/x000/000.p/1", "x/000", "entries/000.p/6", "9" * 5000 + "/000",
                 "0/000.p/" + "9" * 5000):  # fmt: skip
        _, response = await client.get(f"/v1/log/tile/{path}")
        assert response.status == 404, path
        assert response.json["error"]["code"] == "not_found"


async def test_tiles_have_their_own_generous_limit(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """An honest monitor reads many tiles: they count against ``log_tiles``, never against
    the public-key limit the checkpoint and proofs share."""
    limits = {"ip_per_minute": {"public_key": 2, "log_tiles": 50}}
    noon = 1_790_000_000_000 // 60_000 * 60_000 + 30_000  # mid-minute, and it stays there: one window
    client = log_app(
        store, log_store, receipt_root, signer, clock_ms=lambda: noon, limits=load_limits(orjson.dumps(limits))
    ).asgi_client
    key = await create_project_key(store.keys, project_name="tile-limit", plan="pro")
    worker = await integrator(store, log_store, signer)
    await create(client, key, "one")
    await worker.step(force=True)
    for _ in range(20):
        _, response = await client.get("/v1/log/tile/0/000.p/1")
        assert response.status == 200
        assert response.headers["ratelimit-policy"] == '"ip-log_tiles";q=50;w=60'
    _, checkpoint = await client.get("/v1/log/checkpoint")
    assert checkpoint.status == 200 and checkpoint.headers["ratelimit-policy"] == '"ip-public_key";q=2;w=60'
    for _ in range(31):  # 51 tile requests in all: one over its limit
        _, response = await client.get("/v1/log/tile/entries/000.p/1")
    assert response.status == 429 and response.json["error"]["code"] == "rate_limited"


async def test_without_a_log_key_the_log_routes_answer_503_and_creates_are_unchanged(
    store: Store, log_store: LogStore, receipt_root: str
) -> None:
    client = log_app(store, log_store, receipt_root, None).asgi_client
    key = await create_project_key(store.keys, project_name="nolog", plan="pro")
    body = await create(client, key, "x")
    assert "log" not in body
    for path in (
        "/v1/log",
        "/v1/log/checkpoint",
        "/v1/log/tile/0/000.p/1",
        f"/v1/receipts/{body['receipt']['receipt_id']}/log-proof",
    ):
        _, response = await client.get(path)
        assert response.status == 503 and response.json["error"]["code"] == "log_unavailable", path
    assert not await store.client.exists(keys.log_queue_key(IDENTITY, body["receipt"]["project_id"]))
    _, health = await client.get("/health")
    assert health.json["log"] == "off"


async def test_prefer_wait_returns_the_proof_once_a_checkpoint_covers_the_receipt(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="wait", plan="pro")
    worker = await integrator(store, log_store, signer, interval_s=0.05)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        body = await create(client, key, "w", Prefer="wait=5")
    finally:
        stop.set()
        await running
    proof = note.parse_tlog_proof(body["log"]["proof"])
    # The receipt's entry is first, or follows the app's key certificate (a pass may take the
    # certificate, queued at the app's start, alone); its leaf is right after it.
    assert body["log"]["index"] == proof.index in (0, KEY_ENTRIES)
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, signer.verifier)
    tlog.verify_inclusion(
        tlog.leaf_hash(tlog.entry_bytes(body["receipt"])), proof.index, checkpoint.size, proof.path, checkpoint.root
    )
    await assert_in_place(log_store, checkpoint.size, [body["receipt"]], [proof.index])


async def test_a_waiting_create_whose_wait_meets_an_outage_answers_201_pending(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis (or the log store) failing while a ``Prefer: wait`` create waits for its proof:
    the receipt is issued, so the answer is its 201 with the pending form, not a 503 that
    invites a retry issuing a second receipt (bench/log_soak.py found it: a Redis restarted
    under such a wait answered 503 ``store_unavailable`` for a receipt Redis kept)."""
    from execution_proof.receipts.errors import StoreUnavailable
    from execution_proof.usecases.log_reading import LogService

    async def outage(self: LogService, receipt: dict[str, Any], seconds: float) -> None:
        raise StoreUnavailable("the receipt store is unreachable; try again shortly")

    monkeypatch.setattr(LogService, "wait_for_proof", outage)
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="wait-outage", plan="pro")
    body = await create(client, key, "w", Prefer="wait=5")
    assert body["log"] == {"status": "pending", "proof_url": f"/v1/receipts/{body['receipt']['receipt_id']}/log-proof"}
    _, kept = await client.get(f"/v1/receipts/{body['receipt']['receipt_id']}")
    assert kept.status == 200


class Crash(BaseException):
    """An integrator cut short in process (a BaseException: nothing on the way catches it)."""


class CrashAt:
    """Stands in for ``Failpoints`` in process: the step raises ``Crash`` (the real fault
    points SIGKILL, SIGSTOP or sleep: test_log_faults.py)."""

    def __init__(self, step: str) -> None:
        self.step = step

    def reach(self, step: str) -> None:
        if step == self.step:
            raise Crash(step)


BATCH_STEPS = [step for step in STEPS if step not in ("created", "caught_half", "batch")]
INNER_LOOP_STEPS = ("acked_half",)
"""The crash point the inner loop runs (Redis half acknowledged, the one that needs the tiles,
the tree state and Redis to agree); every point runs under ``slow``."""


@pytest.mark.parametrize(
    "point", [pytest.param(step, marks=() if step in INNER_LOOP_STEPS else pytest.mark.slow) for step in BATCH_STEPS]
)
async def test_a_crash_between_any_two_steps_is_finished_by_the_next_integrator(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, point: str
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    key_a = await create_project_key(store.keys, project_name="crash-a", plan="pro")
    key_b = await create_project_key(store.keys, project_name="crash-b", plan="pro")
    worker = await integrator(store, log_store, signer)
    first = await issue(app, key_a, ["c0", "c1", "c2"]) + await issue(app, key_b, ["c3", "c4", "c5"])
    await worker.step(force=True)
    before = await published(log_store, signer)
    # 300 more, so the batch completes a tile: every kind of write is in it.
    second = await issue(app, key_a, [f"a{n}" for n in range(150)]) + await issue(
        app, key_b, [f"b{n}" for n in range(150)]
    )
    doomed = await integrator(store, log_store, signer)
    doomed.failpoints = CrashAt(point)
    with pytest.raises(Crash):
        await doomed.step(force=True)
    # Whatever the point, what is published is the old tree or the new, never anything else.
    shown = await published(log_store, signer)
    assert shown.size in (before.size, before.size + log_size(300, 0))
    successor = await integrator(store, log_store, signer)
    await successor.step(force=True)  # finishes the batch
    await successor.step(force=True)  # nothing left
    after = await published(log_store, signer)
    size = log_size(306)  # and the app's key certificate
    assert after.size == size, "every entry exactly once"
    await assert_extends(log_store, before, after)
    indices = [await proof_index(app, signer, r) for r in first + second]
    await assert_in_place(log_store, size, first + second, indices)
    assert await queued(store) == 0
    assert await store.log_queue.log_pending(IDENTITY) == 0
    assert len(set(receipt_ids(await log_entries(log_store, size)))) == 306
    assert await log_store.staging_names() == []


async def test_racing_integrators_never_fork_and_lose_nothing(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    keys_ = [await create_project_key(store.keys, project_name=f"race-{i}", plan="pro") for i in range(4)]
    rivals = [await integrator(store, log_store, signer), await integrator(store, log_store, signer)]
    await started(app)  # once, before the creates race
    seen: list[note.Checkpoint] = []
    receipts: list[dict[str, Any]] = []
    for round_ in range(12):
        made = await asyncio.gather(
            *(issue(app, k, [f"x{round_}-{i}-{n}" for n in range(5)]) for i, k in enumerate(keys_))
        )
        receipts += [r for batch in made for r in batch]
        # The rivals race each other (no lease between them) and a create arriving meanwhile.
        *_, late = await asyncio.gather(*(r.step(force=True) for r in rivals), issue(app, keys_[0], [f"y{round_}"]))
        receipts += late
        seen.append(await published(log_store, signer))
    for rival in rivals:
        await rival.step(force=True)
        await rival.step(force=True)
    final = await published(log_store, signer)
    assert final.size == log_size(len(receipts)) == log_size(252)
    for old in seen:
        await assert_extends(log_store, old, final)
    indices = [await proof_index(app, signer, r) for r in receipts]
    await assert_in_place(log_store, final.size, receipts, indices)


async def test_lost_tiles_refuse_to_extend_instead_of_signing_a_fork(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="lost", plan="pro")
    worker = await integrator(store, log_store, signer)
    await issue(app, key, [f"l{n}" for n in range(4)])  # and the app's key certificate: 9 entries
    await worker.step(force=True)
    before = await published(log_store, signer)
    assert before.size == log_size(4) == 9
    (tmp_path / "log/tile/0/000.p/9").unlink()
    await issue(app, key, ["l-next"])
    with pytest.raises(LogRefused, match="tile"):
        await (await integrator(store, log_store, signer)).step(force=True)
    # The refusal is recorded in the store: every integrator (and web process) sees it.
    halted = await log_store.halted()
    assert halted is not None and "tile/0/000.p/9 is missing" in halted["reason"]
    waiting = await integrator(store, log_store, signer)
    assert await waiting.step(force=True) == 0 and waiting.halted is not None
    (tmp_path / "log/tile/0/000.p/9").write_bytes(b"\x00" * 9 * 32)  # data, but not the tree's
    assert await log_store.resume("put a tile back") is not None
    with pytest.raises(LogRefused, match="do not hash"):
        await (await integrator(store, log_store, signer)).step(force=True)
    assert await published(log_store, signer) == before


@pytest.mark.slow
async def test_redis_restored_from_an_older_snapshot_never_forks_or_duplicates(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """The fault that forked the Redis-resident log: 100 receipts, a snapshot, 100 more
    (published), Redis restored from the snapshot, the integrator restarted, 100 more. The
    log goes on from 200: no checkpoint that does not extend the last, no receipt id twice,
    and every receipt Redis still has gets a working proof."""
    app = log_app(store, log_store, receipt_root, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="restore", plan="pro")
    worker = await integrator(store, log_store, signer)
    first = await issue(app, key, [f"one-{n}" for n in range(100)])
    # The snapshot is taken while these 100 still wait: the restore brings them back queued.
    snapshot = {name: await store.client.dump(name) async for name in store.client.scan_iter()}
    await worker.step(force=True)
    second = await issue(app, key, [f"two-{n}" for n in range(100)])
    await worker.step(force=True)
    at_200 = await published(log_store, signer)
    assert at_200.size == log_size(200)  # and the app's key certificate
    await store.client.flushall()
    for name, value in snapshot.items():
        await store.client.restore(name, 0, value)
    assert await store.log_queue.log_size(IDENTITY) == 0 and await queued(store) == 100 + KEY_ENTRIES
    restarted = await integrator(store, log_store, signer)
    third = await issue(app, key, [f"three-{n}" for n in range(100)])
    await restarted.step(force=True)
    await restarted.step(force=True)
    final = await published(log_store, signer)
    assert final.size == log_size(300)
    await assert_extends(log_store, at_200, final)
    entries = await log_entries(log_store, final.size)
    ids = receipt_ids(entries)
    assert len(ids) == len(set(ids)) == 300
    assert len(await certificate_indices(log_store, final.size)) == KEY_ENTRIES, "the certificate once"
    assert_paired(entries)
    # Receipts Redis still holds (the first 100, restored; the last 100) prove their place,
    # their leaves right after them.
    for receipt in first + third:
        index = await check_proof(client, signer, receipt)
        assert entries[index] == tlog.entry_bytes(receipt) and is_leaf_of(entries[index + 1], receipt)
    # The second 100 are gone from Redis, not from the log.
    assert {r["receipt_id"] for r in second} <= set(ids)
    assert await queued(store) == 0 and await store.log_queue.log_pending(IDENTITY) == 0


async def test_a_flushed_redis_loses_nothing_the_log_holds(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="flush", plan="pro")
    worker = await integrator(store, log_store, signer)
    before = await issue(app, key, [f"f{n}" for n in range(50)])
    await worker.step(force=True)
    at_50 = await published(log_store, signer)
    await store.client.flushall()
    # The store is not empty and Redis knows no log: the log goes on, never starts again.
    again = await integrator(store, log_store, signer)
    key = await create_project_key(store.keys, project_name="after-flush", plan="pro")
    after = await issue(app, key, [f"g{n}" for n in range(20)])
    await again.step(force=True)
    await worker.step(force=True)  # the old one, whose memory predates the flush, adds nothing
    final = await published(log_store, signer)
    assert final.size == log_size(70)  # and the app's key certificate, before the flush
    await assert_extends(log_store, at_50, final)
    assert len(await certificate_indices(log_store, final.size)) == KEY_ENTRIES
    entries = await log_entries(log_store, final.size)
    assert receipt_ids(entries) == [r["receipt_id"] for r in before] + [r["receipt_id"] for r in after]
    assert_paired(entries)


async def test_a_store_of_another_log_is_refused_naming_both(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    await integrator(store, log_store, signer)
    other_origin = note.Signer.generate("other.example/v1/log")
    with pytest.raises(LogRefused) as refused:
        await Integrator(store.log_queue, log_store, LogConfig(other_origin.name, other_origin)).prepare()
    assert ORIGIN in str(refused.value) and "other.example/v1/log" in str(refused.value)
    other_key = note.Signer.generate(ORIGIN)
    with pytest.raises(LogRefused) as refused:
        await Integrator(store.log_queue, log_store, LogConfig(ORIGIN, other_key)).prepare()
    message = str(refused.value)
    assert signer.verifier.encode() in message and other_key.verifier.encode() in message
    assert other_key.encode() not in message and signer.encode() not in message  # never a private key
    assert (await published(log_store, signer)).size == 0


async def test_an_empty_store_beside_a_redis_that_knows_the_log_is_refused(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="lost-store", plan="pro")
    await integrator(store, log_store, signer)
    await issue(app, key, ["queued"])
    mistyped = LogStore(FileObjects(tmp_path / "mistyped"))
    with pytest.raises(LogRefused, match="LOG_STORE"):
        await Integrator(store.log_queue, mistyped, LogConfig(ORIGIN, signer)).prepare()
    assert not (tmp_path / "mistyped/checkpoint").exists()
    # A Redis that only knows the log's size is enough to refuse.
    await store.client.flushall()
    await store.log_queue.log_tell_size(IDENTITY, 0)
    with pytest.raises(LogRefused, match="LOG_STORE"):
        await Integrator(store.log_queue, mistyped, LogConfig(ORIGIN, signer)).prepare()
    # And a store that holds tiles but no identity is nobody's log.
    (tmp_path / "stray/tile/0").mkdir(parents=True)
    (tmp_path / "stray/tile/0/000.p/1").parent.mkdir(parents=True)
    (tmp_path / "stray/tile/0/000.p/1").write_bytes(b"\x00" * 32)
    await store.client.flushall()
    with pytest.raises(LogRefused, match="no identity"):
        await Integrator(
            store.log_queue, LogStore(FileObjects(tmp_path / "stray")), LogConfig(ORIGIN, signer)
        ).prepare()


async def test_two_logs_on_one_redis_never_share_a_queue(
    store: Store, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    other = note.Signer.generate("second.example/v1/log")
    first_store, second_store = LogStore(FileObjects(tmp_path / "a")), LogStore(FileObjects(tmp_path / "b"))
    app = log_app(store, first_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="two-logs", plan="pro")
    first = await integrator(store, first_store, signer)
    receipts = await issue(app, key, ["only-the-first"])
    second = Integrator(store.log_queue, second_store, LogConfig(other.name, other))
    await second.prepare()
    assert await second.step(force=True) == 0
    assert await first.step(force=True) == log_size(1)  # its entry and leaf, and the app's key certificate
    assert (await published(second_store, other)).size == 0
    assert await proof_index(app, signer, receipts[0]) in (0, 1)


async def test_backpressure_refuses_creates_without_using_quota(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    # Room for three receipts besides the app's key certificate.
    client = log_app(store, log_store, receipt_root, signer, log_max_pending=3 + KEY_ENTRIES).asgi_client
    key = await create_project_key(store.keys, project_name="backlog", plan="free")
    worker = await integrator(store, log_store, signer)
    bodies = [await create(client, key, f"b{n}") for n in range(3)]
    _, usage_before = await client.get("/v1/usage", headers=auth(key))
    body = {"input_hash": hash_of("in-refused"), "output_hash": hash_of("out-refused"), "receipt_kind": "release"}
    _, refused = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert refused.status == 503
    assert refused.json["error"]["code"] == "log_backlog"
    assert int(refused.headers["retry-after"]) >= 1
    _, usage_after = await client.get("/v1/usage", headers=auth(key))
    assert usage_before.json["month"]["used"] == 3
    # Everything but the seconds to the month's end, which tick between the two reads.
    month_before, month_after = dict(usage_before.json["month"]), dict(usage_after.json["month"])
    assert abs(month_before.pop("reset_in_seconds") - month_after.pop("reset_in_seconds")) <= 5
    assert month_after == month_before
    assert usage_after.json["minute"]["used"] == usage_before.json["minute"]["used"]
    assert await store.log_queue.log_pending(IDENTITY) == 3 + KEY_ENTRIES
    # A replay of a receipt that exists still answers.
    replay = await create(client, key, "b0")
    assert replay["idempotency"]["hit"] is True and replay["receipt"] == bodies[0]["receipt"]
    await worker.step(force=True)
    _, accepted = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert accepted.status == 201


async def test_a_witness_that_saw_a_fork_halts_the_log_until_resumed(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    """A witness answering 422 (or 409 with a larger tree) shows a history signed with our
    key that is not ours: nothing more is signed, creates go on, /health and /metrics say
    so, and ``log resume`` lifts it."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from execution_proof.transparency.cosignature import Cosigner
    from execution_proof.transparency.policy import parse_policy
    from tests.servers import serving

    answers: list[tuple[int, bytes, str]] = [(422, b"inconsistent with what I cosigned\n", "text/plain")]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            status, body, kind = answers[0]
            self.send_response(status)
            self.send_header("content-type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    witness = Cosigner.generate("witness.example")
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        policy = parse_policy(f"log {signer.verifier.encode()}\nwitness w {witness.key.encode()} {url}\nquorum w\n")
        app = log_app(store, log_store, receipt_root, signer, log_policy=policy, metrics_token="t0ken")
        client = app.asgi_client
        key = await create_project_key(store.keys, project_name="halt", plan="pro")
        worker = await integrator(store, log_store, signer, policy=policy, witness_timeout_ms=2000)
        await create(client, key, "before")
        await worker.step(force=True)
        halted = await log_store.halted()
        assert halted is not None and halted["evidence"]["status"] == 422
        assert (await published(log_store, signer)).size == 0  # the evidence's tree is not published
        _, health = await client.get("/health")
        assert health.status == 200 and health.json["log"] == "halted"
        _, metrics = await client.get("/metrics", headers={"Authorization": "Bearer t0ken"})
        assert "eps_log_halted 1.0" in metrics.text
        # Creates go on and queue; nothing is signed, however often the integrator runs.
        await create(client, key, "while-halted")
        for _ in range(3):
            assert await worker.step(force=True) == 0
        assert (await published(log_store, signer)).size == 0
        assert await queued(store) == 1
        # An operator looks, then lifts the halt; the witness agrees again.
        answers[0] = (200, b"", "text/plain")
        assert await log_store.resume("our own test witness; checked") is not None
        restarted = await integrator(store, log_store, signer, policy=policy, witness_timeout_ms=2000)
        # The empty 200 it answers is a failure: without jitter its backoff has passed at once,
        # and the witness is asked again at the next checkpoint.
        assert restarted.witnesses is not None
        restarted.witnesses.jitter = lambda: 0.0
        await restarted.step(force=True)
        assert (await published(log_store, signer)).size == log_size(2)
        app.ctx.services.log._state = (-1e9, "halted")  # forget the cached answer
        _, health = await client.get("/health")
        assert health.json["log"] == "ok"
        # A 409 naming a larger tree than ours is evidence too.
        answers[0] = (409, b"99\n", "text/x.tlog.size")
        await create(client, key, "after")
        await restarted.step(force=True)
        halted = await log_store.halted()
        assert halted is not None and halted["evidence"]["status"] == 409 and halted["evidence"]["size"] == 99


async def test_the_dirty_set_forgets_empty_projects_but_never_a_queued_entry(store: Store, receipt_root: str) -> None:
    key = await create_project_key(store.keys, project_name="dirty", plan="pro")
    project = key["project_id"]
    dirty = keys.log_dirty_key(IDENTITY)
    await store.client.sadd(dirty, project)
    await store.log_queue.log_tidy_dirty(IDENTITY, [project], now_ms=1_000)
    assert not await store.client.sismember(dirty, project)
    # A create that marked the project just before the removal queues its entry after it.
    await store.client.rpush(keys.log_queue_key(IDENTITY, project), b"late entry")
    assert await store.log_queue.log_recheck(IDENTITY, before_ms=2_000) == 1
    assert await store.client.sismember(dirty, project)
    assert not await store.client.zcard(keys.log_recheck_key(IDENTITY))
    # Several projects at once: the one with a queued entry stays, the empty one goes.
    other = (await create_project_key(store.keys, project_name="dirty-2", plan="pro"))["project_id"]
    await store.client.sadd(dirty, other)
    await store.log_queue.log_tidy_dirty(IDENTITY, [project, other], now_ms=3_000)
    assert await store.client.smembers(dirty) == {project.encode()}
    assert await store.client.zcard(keys.log_recheck_key(IDENTITY)) == 2


def test_log_key_new_prints_a_signer_key_and_its_verifier_key() -> None:
    done = subprocess.run(
        [sys.executable, "service.py", "log-key", "new", "--origin", "example.com/v1/log"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    skey, vkey = done.stdout.splitlines()
    signer = note.Signer.parse(skey)
    assert signer.name == "example.com/v1/log" and signer.verifier.encode() == vkey
    text = note.Checkpoint("example.com/v1/log", 1, b"\0" * 32).text()
    note.verify_note(note.sign_note(text, signer), [note.Verifier.parse(vkey)])
    assert base64.b64decode(vkey.split("+", 2)[2])[0] == 1


def test_the_log_verbs_need_only_log_store(tmp_path: Path) -> None:
    """``log resume`` and ``log export`` touch the log store alone: an operator runs them with
    ``LOG_STORE`` set and neither ``REDIS_URL`` nor the log's private key (which the embedded
    server's check of ``LOG_STORE`` asks for)."""
    from tests.servers import run_cli

    store = f"file://{tmp_path / 'store'}"
    done = run_cli("log", "resume", "--reason", "nothing to lift", env={"LOG_STORE": store})
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout) == {"resumed": False, "halt": None}
    done = run_cli("log", "export", "--to", f"file://{tmp_path / 'copy'}", env={"LOG_STORE": store})
    assert done.returncode == 2 and "holds no log" in done.stderr, done.stderr  # an empty store, not a config error


@pytest.mark.slow
async def test_a_redis_killed_and_restarted_with_aof_always_loses_no_entry_and_forks_nothing(
    receipt_root: str, signer: note.Signer, log_store: LogStore
) -> None:
    """kill -9 of a redis-server running appendfsync always, mid-way through the log's life:
    every receipt acknowledged by a 201 before the kill reaches the log after the restart,
    and the log extends what it published before (no fork)."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_binary("redis-server", "the restart test needs a real Redis")
    assert binary is not None
    server = RedisServer(binary, ["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    store = Store(aioredis.from_url(server.url))
    try:
        app = log_app(store, log_store, receipt_root, signer)
        key = await create_project_key(store.keys, project_name="restart", plan="pro")
        worker = await integrator(store, log_store, signer)
        before_kill = await issue(app, key, [f"k{n}" for n in range(300)])
        await worker.step(force=True)
        first = await published(log_store, signer)
        before_kill += await issue(app, key, [f"q{n}" for n in range(40)])  # queued, not yet in the log
        server.stop(kill=True)
        server.process = None
        server.start()  # the same directory: the AOF is replayed
        with contextlib.suppress(redis_errors.ConnectionError):
            await store.link.send("PING")  # the lost connection fails its next command; then it reconnects
        after = await issue(app, key, [f"a{n}" for n in range(5)])
        await worker.step(force=True)
        final = await published(log_store, signer)
        assert final.size == log_size(345)  # and the app's key certificate
        await assert_extends(log_store, first, final)
        indices = [await proof_index(app, signer, r) for r in before_kill + after]
        await assert_in_place(log_store, final.size, before_kill + after, indices)
    finally:
        await store.close()
        server.cleanup()


async def test_the_sweep_forgets_an_expired_receipts_log_index_but_the_log_keeps_its_entry(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    import time

    app = log_app(store, log_store, receipt_root, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="sweep", plan="pro")
    worker = await integrator(store, log_store, signer)
    receipts = await issue(app, key, [f"s{n}" for n in range(4)])
    await worker.step(force=True)
    size = log_size(4)  # and the app's key certificate
    entries = await log_entries(log_store, size)
    assert await store.log_queue.log_index(
        IDENTITY, key["project_id"], receipts[0]["receipt_id"], receipts[0]["receipt_hash"]
    ) == entries.index(tlog.entry_bytes(receipts[0]))
    summary = await store.retention.expire_receipts(int(time.time() * 1000) + 86_400_000)
    assert summary["receipts"] == 4
    assert (
        await store.log_queue.log_index(
            IDENTITY, key["project_id"], receipts[0]["receipt_id"], receipts[0]["receipt_hash"]
        )
        is None
    )
    _, gone = await client.get(f"/v1/receipts/{receipts[0]['receipt_id']}/log-proof")
    assert gone.status == 404
    assert (await published(log_store, signer)).size == size
    _, bundle = await client.get(f"/v1/log/tile/entries/000.p/{size}")
    assert tlog.split_bundle(bundle.body) == entries
    assert receipt_ids(entries) == [r["receipt_id"] for r in receipts]
    assert all(is_leaf_of(entries[entries.index(tlog.entry_bytes(r)) + 1], r) for r in receipts)


async def test_a_deleted_receipt_takes_its_log_index_with_it(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="delete", plan="pro")
    worker = await integrator(store, log_store, signer)
    [receipt] = await issue(app, key, ["gone"])
    await worker.step(force=True)
    assert await store.receipts.delete_receipt(receipt["receipt_id"]) is not None
    assert await store.receipts.find_receipt_id_by_hash(key["project_id"], receipt["receipt_hash"]) is None
    assert (
        await store.log_queue.log_index(IDENTITY, key["project_id"], receipt["receipt_id"], receipt["receipt_hash"])
        is None
    )
    assert (await published(log_store, signer)).size == log_size(1)  # the log keeps the entry and its leaf


async def test_head_answers_every_log_route_like_get_without_a_body_and_counts_alike(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """docs/log.md, "Routes": HEAD on every route of the log's table answers as GET (status and
    headers), with no body, and takes one from the same limit. (Content-Length over real HTTP:
    tests/test_log_operator_faults.py.)"""
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="head", plan="pro")
    worker = await integrator(store, log_store, signer)
    receipt = (await create(client, key, "head"))["receipt"]
    await worker.step(force=True)
    for path in (
        "/v1/log",
        "/v1/log/checkpoint",
        "/v1/log/tile/0/000.p/1",
        "/v1/log/tile/entries/000.p/1",
        f"/v1/receipts/{receipt['receipt_id']}/log-proof",
        "/v1/log/checkpoints/1/timestamps",
        "/v1/log/tile/0/001",
    ):
        _, got = await client.get(path)
        _, head = await client.head(path)
        assert head.status == got.status, path
        assert head.body == b"", path
        for name in ("content-type", "cache-control", "access-control-allow-origin", "ratelimit-policy"):
            assert head.headers.get(name) == got.headers.get(name), (path, name)
        if got.status == 200:
            remaining = [int(r.headers["ratelimit"].split(";r=")[1].split(";")[0]) for r in (got, head)]
            assert remaining[1] == remaining[0] - 1, f"{path}: HEAD is counted like GET"


async def test_a_receipt_of_another_log_or_of_none_is_not_in_this_log(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    """A new origin on the same Redis is a new log: the old log's receipts answer 404
    ``not_in_log`` on their log-proof and bundle (never a proof that does not verify), are
    never queued into the new log, and a replay of one is still a 200 whose ``log`` is the
    pending form. A receipt issued while the service ran without a log is not in it either."""
    old_client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="new-origin", plan="pro")
    old_worker = await integrator(store, log_store, signer)
    old = (await create(old_client, key, "old"))["receipt"]
    await old_worker.step(force=True)
    await check_proof(old_client, signer, old)
    plain = (await create(log_app(store, log_store, receipt_root, None).asgi_client, key, "no-log"))["receipt"]

    other = note.Signer.generate("elsewhere.example/v1/log")
    new_store = LogStore(FileObjects(tmp_path / "new-log"))
    config = Settings(
        redis_url="redis://injected-by-tests", receipt_root=receipt_root, env="test", log_origin=other.name, log_signer=other,
        limits=load_limits(orjson.dumps(RAISED_LIMITS)),
    )  # fmt: skip
    new_app = create_app(config, store=store, log_store=new_store)
    client = new_app.asgi_client
    new_worker = Integrator(store.log_queue, new_store, LogConfig(other.name, other))
    await new_worker.prepare()
    fresh = (await create(client, key, "fresh"))["receipt"]
    replay = await create(client, key, "old", Prefer="wait=1")
    assert replay["idempotency"]["hit"] is True and replay["log"]["status"] == "pending"
    await new_worker.step(force=True)
    for receipt in (old, plain):
        for path in ("log-proof", "bundle"):
            _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}/{path}")
            assert response.status == 404, (path, response.text)
            assert response.json["error"]["code"] == "not_in_log"
    _, proof = await client.get(f"/v1/receipts/{fresh['receipt_id']}/log-proof")
    assert proof.status == 200
    checkpoint = await published(new_store, other)
    assert checkpoint.size == log_size(1), "the old log's receipt was queued into the new log"
    entries = await log_entries(new_store, checkpoint.size)
    assert receipt_ids(entries) == [fresh["receipt_id"]]
    at = entries.index(tlog.entry_bytes(fresh))
    assert is_leaf_of(entries[at + 1], fresh, other.name)
    # The old log still proves its own receipt.
    await check_proof(old_client, signer, old)


async def test_a_proof_is_checked_before_it_is_served(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """An index in Redis that names another entry (a Redis of another deployment with the
    same log's key, say) gives 404 ``not_in_log``, not a proof that fails to verify."""
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="leaf", plan="pro")
    worker = await integrator(store, log_store, signer)
    first = (await create(client, key, "first"))["receipt"]
    second = (await create(client, key, "second"))["receipt"]
    await worker.step(force=True)
    # Swap the two receipts' recorded indices (the tree also holds their leaves and the app's
    # key certificate).
    size = log_size(2)
    entries = await log_entries(log_store, size)
    at_first, at_second = entries.index(tlog.entry_bytes(first)), entries.index(tlog.entry_bytes(second))
    await store.log_queue.log_ack(
        IDENTITY,
        key["project_id"],
        size,
        size,
        [(tlog.entry_bytes(first), at_second), (tlog.entry_bytes(second), at_first)],
    )
    for receipt in (first, second):
        _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}/log-proof")
        assert response.status == 404 and response.json["error"]["code"] == "not_in_log", response.text


async def test_health_counts_a_stall_from_one_moment_in_every_web_process(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """No integrator has marked its progress on this Redis (none ran yet): two web processes,
    the second asked for the first time once entries have waited ``LOG_STALL_S`` since the
    first saw them, both say ``stalled`` (the first set the mark; each used to count from
    when it was first asked, and the second said ``ok`` for ``LOG_STALL_S`` more)."""
    first, second = (log_app(store, log_store, receipt_root, signer, log_stall_s=0.3) for _ in range(2))
    key = await create_project_key(store.keys, project_name="stall-clock", plan="pro")
    await integrator(store, log_store, signer)  # creates the log; marks no progress
    await create(first.asgi_client, key, "waits")
    assert await store.log_queue.log_progress(IDENTITY) is None
    _, response = await first.asgi_client.get("/health")
    assert response.json["log"] == "ok", "a fresh entry is not a stall"
    await asyncio.sleep(0.4)  # LOG_STALL_S passes with nothing published
    _, response = await second.asgi_client.get("/health")
    assert response.json["log"] == "stalled"


async def test_health_says_stalled_when_entries_wait_and_nothing_is_published(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """``/health``: ``ok`` while the log keeps up; ``stalled`` once the oldest entry waiting in
    Redis is older than ``LOG_STALL_S`` and nothing was published for as long (by the
    integrators' progress mark in Redis); ``ok`` again once an integrator publishes; ``halted``
    over ``stalled``. An entry's age is its receipt id's time: the app's clock makes it."""
    # 5 s: "a fresh entry is not a stall" holds however loaded the machine; a stall is made
    # below by setting the progress mark to 0 and the clock back, not by waiting.
    now_ms = int(time.time() * 1000)
    clock = Clock(now_ms)
    app = log_app(store, log_store, receipt_root, signer, clock_ms=clock, log_stall_s=5)
    client = app.asgi_client
    service = app.ctx.services.log
    key = await create_project_key(store.keys, project_name="stall", plan="pro")
    older = await create_project_key(store.keys, project_name="stall-older", plan="pro")
    worker = await integrator(store, log_store, signer)
    await worker.step(force=True)  # nothing waits: its progress is marked

    async def health() -> str:
        service._state = (-1e9, "")  # past the 2 s cache
        _, response = await client.get("/health")
        assert response.status == 200
        return str(response.json["log"])

    assert await health() == "ok"
    await create(client, key, "waits")
    assert await health() == "ok", "a fresh entry is not a stall"
    await store.client.set(keys.log_progress_key(IDENTITY), 0)  # no integrator for a long time
    assert await health() == "ok", "a fresh entry is not a stall, however long no integrator ran"
    clock.set(now_ms - 60_000)
    await keys_at_the_clock(app.ctx.services.receipt_keys)  # a key for a minute ago
    await create(client, older, "waited")  # its receipt was made a minute ago: it has waited that long
    clock.set(now_ms)
    assert await health() == "stalled"
    await store.client.set(keys.log_progress_key(IDENTITY), int(time.time() * 1000))
    assert await health() == "ok", "an integrator marked its progress just now"
    await store.client.set(keys.log_progress_key(IDENTITY), 0)
    assert await health() == "stalled"
    await worker.step(force=True)
    assert await health() == "ok"
    # The tree ahead of the published checkpoint is waiting too.
    await create(client, key, "unpublished")
    worker.failpoints = CrashAt("signed")
    with pytest.raises(Crash):
        await worker.step(force=True)
    await store.client.set(keys.log_progress_key(IDENTITY), 0)
    assert await health() == "stalled"  # its entry is fresh: the tree ahead of the checkpoint waits
    await log_store.halt("a test", {"kind": "refused", "detail": "a test"})
    assert await health() == "halted"


async def test_a_batch_never_splits_a_receipt_from_its_leaf_and_the_backlog_counts_receipts(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    """A receipt's entry and the dsse leaf of its attestation are one queue item: counted once
    by ``LOG_MAX_PENDING`` (seven receipts, fourteen entries, fit under a max of seven besides
    the app's key certificate; the eighth is refused) and taken whole by a batch, whose
    ``max_batch`` counts items: with batches of three, every checkpoint ends between two items,
    each leaf right after its receipt's entry, never in the next batch."""
    client = log_app(store, log_store, receipt_root, signer, log_max_pending=7 + KEY_ENTRIES).asgi_client
    keys_ = [await create_project_key(store.keys, project_name=f"items-{i}", plan="pro") for i in range(3)]
    bodies = [await create(client, keys_[n % 3], f"i{n}") for n in range(7)]
    assert await store.log_queue.log_pending(IDENTITY) == 7 + KEY_ENTRIES
    queued_entries = await store.log_queue.log_queue_lengths(IDENTITY, [k["project_id"] for k in keys_])
    assert sum(queued_entries.values()) == 7, "a receipt's entry and its leaf wait as one item"
    body = {"input_hash": hash_of("in-over"), "output_hash": hash_of("out-over"), "receipt_kind": "release"}
    _, refused = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(keys_[0]))
    assert refused.status == 503 and refused.json["error"]["code"] == "log_backlog"
    worker = await integrator(store, log_store, signer, max_batch=3)
    sizes = [0]
    while added := await worker.step(force=True):
        assert added <= 2 * 3
        sizes.append((await published(log_store, signer)).size)
        assert sizes[-1] == sizes[-2] + added
    assert len(sizes) - 1 == 3, sizes  # eight items, three a batch
    assert sizes[-1] == log_size(7)
    entries = await log_entries(log_store, sizes[-1])
    for size in sizes:
        assert_paired(entries[:size])
    receipts = [b["receipt"] for b in bodies]
    await assert_in_place(log_store, sizes[-1], receipts, [await check_proof(client, signer, r) for r in receipts])


async def test_an_export_copies_every_entry_and_the_newest_receipts_time_past_its_leaf(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    """``log export`` (kv/logstore/export.py) copies a log whose every receipt has its dsse
    leaf byte for byte, verifies it, and writes the copy's tree state with the newest receipt's
    time, read from the receipt entries (the log's last entry is a leaf, which names none)."""
    from execution_proof.kv.keys import receipt_created_ms
    from execution_proof.kv.logstore.export import export

    app = log_app(store, log_store, receipt_root, signer)
    key = await create_project_key(store.keys, project_name="exported", plan="pro")
    worker = await integrator(store, log_store, signer)
    receipts = await issue(app, key, [f"x{n}" for n in range(139)])
    await worker.step(force=True)
    receipts += await issue(app, key, ["x-last"])  # a batch of its own: the log ends with its leaf
    await worker.step(force=True)
    size = log_size(140)
    target = LogStore(FileObjects(tmp_path / "copy"))
    report = await export(log_store, target)
    assert report["size"] == size
    entries = await log_entries(log_store, size)
    assert entries[-1].startswith(tlog.DSSE_HEADER)
    assert await log_entries(target, size) == entries
    assert_paired(entries)
    copied, source = await target.tree(), await log_store.tree()
    assert copied is not None and source is not None
    newest = max(receipt_created_ms(r["receipt_id"]) for r in receipts)
    assert copied.newest_ms == source.newest_ms == newest
    assert (await published(target, signer)) == (await published(log_store, signer))
