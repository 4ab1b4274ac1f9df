"""The transparency log end to end: creates queue entries, the integrator publishes
checkpoints, tiles and bundles, the routes serve them and proofs verify, on fakeredis and a
real Redis (and a 3-master cluster in test_log_cluster.py). Crashes between any two steps
of a batch, racing integrators and lost data are driven here."""

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

from jobs.log_integrator import Integrator, LogConfig, LogHalted
from kv import keys
from kv.accounts import create_project_key
from kv.records import KeyRecord
from kv.store import Store
from receipts import note, tlog
from receipts.limits import PlanLimits, load_limits
from receipts.model import parse_create_request
from runtime.settings import Settings
from tests.conftest import RedisServer, auth, hash_of, missing_binary
from tests.servers import RAISED_LIMITS
from web.app import create_app

ORIGIN = "test.example/log"
REPO = Path(__file__).resolve().parent.parent
UNLIMITED = PlanLimits(per_minute=10**9, monthly=10**9)


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


def log_app(store: Store, keyring: Any, signer: note.Signer | None) -> Any:
    settings = Settings(
        redis_url="redis://injected-by-tests",
        keyring=keyring,
        env="test",
        limits=load_limits(orjson.dumps(RAISED_LIMITS)),
        log_origin=ORIGIN,
        log_signer=signer,
    )
    return create_app(settings, store=store)


def integrator(store: Store, signer: note.Signer, **config: Any) -> Integrator:
    return Integrator(store, LogConfig(ORIGIN, signer, **config))


async def create(client: Any, key: dict[str, Any], label: str, **headers: str) -> Any:
    body = {"input_hash": hash_of(f"in-{label}"), "output_hash": hash_of(f"out-{label}"), "receipt_kind": "release"}
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers={**auth(key), **headers})
    assert response.status in (200, 201), response.text
    return response.json


async def issue(app: Any, key: dict[str, Any], labels: list[str]) -> list[dict[str, Any]]:
    """Many creates at once through the app's issuer (group commit, the route's own path
    after its HTTP checks): the ASGI test client costs tens of ms a request."""
    record = KeyRecord(key["key_hash"], key["project_id"], key["actor_id"], key["plan"], False, "")
    issued = await asyncio.gather(
        *(
            app.ctx.issuer.issue(parse_create_request({"input_hash": hash_of(label)}), record, None, UNLIMITED)
            for label in labels
        )
    )
    return [one.receipt for one in issued]


async def proof_index(app: Any, signer: note.Signer, receipt: dict[str, Any]) -> int:
    """As ``check_proof``, through the app's log service instead of HTTP."""
    found = await app.ctx.log.proof(receipt["receipt_id"])
    assert found is not None, receipt["receipt_id"]
    proof = note.parse_tlog_proof(found[1])
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, signer.verifier)
    tlog.verify_inclusion(
        tlog.leaf_hash(tlog.entry_bytes(receipt)), proof.index, checkpoint.size, proof.path, checkpoint.root
    )
    return proof.index


async def published(client: Any, signer: note.Signer) -> note.Checkpoint:
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


async def test_receipts_reach_the_log_and_their_proofs_verify(store: Store, keyring: Any, signer: note.Signer) -> None:
    client = log_app(store, keyring, signer).asgi_client
    keys_ = [await create_project_key(store, project_name=f"log-{i}", plan="pro") for i in range(3)]
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
    assert await integrator(store, signer).step(force=True) == 41
    checkpoint = await published(client, signer)
    assert checkpoint.size == 41 and checkpoint.origin == ORIGIN
    indices = [await check_proof(client, signer, r) for r in receipts]
    assert sorted(indices) == list(range(41))
    # Each project's receipts are in the log in their chain order.
    for project in {r["project_id"] for r in receipts}:
        mine = [i for i, r in zip(indices, receipts, strict=True) if r["project_id"] == project]
        assert mine == sorted(mine)
    # A replay adds no entry; the next pass has nothing to do.
    again = await create(client, keys_[0], "r0")
    assert again["idempotency"]["hit"] is True
    assert await integrator(store, signer).step(force=True) == 0
    assert (await published(client, signer)).size == 41
    _, described = await client.get("/v1/log")
    assert described.json == {
        "origin": ORIGIN,
        "log_vkey": signer.verifier.encode(),
        "checkpoint_url": "/v1/log/checkpoint",
        "witnesses": [],
        "policy": "",
    }
    assert described.headers["access-control-allow-origin"] == "*"


async def test_tiles_and_bundles_are_read_by_tlog_scales(
    store: Store, keyring: Any, signer: note.Signer, tmp_path: Path
) -> None:
    """An implementation nobody here wrote (tlog-scales) reads our checkpoint, tiles and
    bundles from the routes, verifies the signature and computes the same root and proofs."""
    app = log_app(store, keyring, signer)
    client = app.asgi_client
    key = await create_project_key(store, project_name="scales", plan="pro")
    worker = integrator(store, signer)
    receipts = []
    old_size = 0
    for batch, count in enumerate((300, 1, 255)):
        receipts += await issue(app, key, [f"b{batch}-{n}" for n in range(count)])
        if batch == 0:
            await worker.step(force=True)
            old_size = (await published(client, signer)).size
            old_root = (await published(client, signer)).root
        else:
            await worker.step(force=True)
    checkpoint = await published(client, signer)
    assert checkpoint.size == 556
    # Mirror every path a reader of this tree may fetch into a directory, through the routes.
    paths = ["checkpoint"]
    for level in range(2):
        hashes = checkpoint.size >> (8 * level)
        for index in range(hashes // 256 + 1):
            width = tlog.tile_width(checkpoint.size, level, index)
            if width:
                paths.append("tile/" + tlog.tile_path(level, index, width))
                if level == 0:
                    paths.append("tile/" + tlog.tile_path("entries", index, width))
    for path in paths:
        _, response = await client.get(f"/v1/log/{path}")
        assert response.status == 200, path
        full = "/" in path and ".p/" not in path
        if full:
            assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(response.body)
    reader = TilesReader(LocalBackend(tmp_path))
    theirs = reader.get_checkpoint()
    theirs.verify(Vkey.from_string(signer.verifier.encode()))  # raises unless our signature verifies
    assert theirs.size == 556 and theirs.root_hash == checkpoint.root
    assert reader.calculate_root_hash() == checkpoint.root
    for index in (0, 255, 256, 299, 300, 555):
        assert reader.get_entry(index) in {tlog.entry_bytes(r) for r in receipts}
        proof = reader.get_inclusion_proof(index, 556)
        _, response = await client.get(
            f"/v1/receipts/{tlog.parse_entry(reader.get_entry(index))['receipt_id']}/log-proof"
        )
        ours = note.parse_tlog_proof(response.text)
        assert ours.index == index and list(ours.path) == proof.node_hashes
        proof.check(tlog.leaf_hash(reader.get_entry(index)), checkpoint.root)
    consistency = reader.get_consistency_proof(old_size, 556)
    tlog.verify_consistency(old_size, old_root, 556, checkpoint.root, consistency.node_hashes)
    consistency.check(old_root, checkpoint.root)


async def test_tile_routes_refuse_what_is_not_published(store: Store, keyring: Any, signer: note.Signer) -> None:
    client = log_app(store, keyring, signer).asgi_client
    key = await create_project_key(store, project_name="tiles", plan="pro")
    for n in range(5):
        await create(client, key, f"t{n}")
    await integrator(store, signer).step(force=True)
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


async def test_without_a_log_key_the_log_routes_answer_503_and_creates_are_unchanged(
    store: Store, keyring: Any
) -> None:
    client = log_app(store, keyring, None).asgi_client
    key = await create_project_key(store, project_name="nolog", plan="pro")
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
    assert not await store.client.exists(keys.log_queue_key(body["receipt"]["project_id"]))


async def test_prefer_wait_returns_the_proof_once_a_checkpoint_covers_the_receipt(
    store: Store, keyring: Any, signer: note.Signer
) -> None:
    client = log_app(store, keyring, signer).asgi_client
    key = await create_project_key(store, project_name="wait", plan="pro")
    stop = asyncio.Event()
    running = asyncio.create_task(integrator(store, signer, interval_s=0.05).run(stop))
    try:
        body = await create(client, key, "w", Prefer="wait=5")
    finally:
        stop.set()
        await running
    proof = note.parse_tlog_proof(body["log"]["proof"])
    assert body["log"]["index"] == proof.index == 0
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, signer.verifier)
    tlog.verify_inclusion(
        tlog.leaf_hash(tlog.entry_bytes(body["receipt"])), 0, checkpoint.size, proof.path, checkpoint.root
    )


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["log_write", "log_publish", "log_ack", "log_finish"])
async def test_a_crash_between_any_two_steps_is_finished_by_the_next_integrator(
    store: Store, keyring: Any, signer: note.Signer, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = log_app(store, keyring, signer)
    client = app.asgi_client
    key_a = await create_project_key(store, project_name="crash-a", plan="pro")
    key_b = await create_project_key(store, project_name="crash-b", plan="pro")
    first = [(await create(client, k, f"c{n}"))["receipt"] for n, k in enumerate([key_a, key_b] * 3)]
    await integrator(store, signer).step(force=True)
    before = await published(client, signer)
    # 300 more, so the batch completes a tile: every kind of write is in it.
    second = await issue(app, key_a, [f"a{n}" for n in range(150)]) + await issue(
        app, key_b, [f"b{n}" for n in range(150)]
    )

    real = getattr(Store, step)

    async def crash(self: Store, *args: Any, **kwargs: Any) -> Any:
        if step == "log_ack":
            await real(self, *args, **kwargs)  # one project acknowledged, then the crash
        raise Crash(step)

    monkeypatch.setattr(Store, step, crash)
    with pytest.raises(Crash):
        await integrator(store, signer).step(force=True)
    monkeypatch.setattr(Store, step, real)
    # A crash after publishing shows the new checkpoint; before, the old one.
    shown = await published(client, signer)
    assert shown.size in (before.size, before.size + 300)
    successor = integrator(store, signer)
    await successor.step(force=True)  # finishes the batch
    await successor.step(force=True)  # nothing left
    after = await published(client, signer)
    assert after.size == 306, "every entry exactly once"
    await check_proof(client, signer, second[-1])
    indices = sorted([await proof_index(app, signer, r) for r in first + second])
    assert indices == list(range(306))
    async with store.client.pipeline(transaction=False) as pipe:
        for receipt in first:
            pipe.llen(keys.log_queue_key(receipt["project_id"]))
        assert sum(await pipe.execute()) == 0
    # The new tree extends the one published before the crash.
    view = await app.ctx.log.reader.compute(306, lambda v: v.consistency_proof(6))
    tlog.verify_consistency(before.size, before.root, after.size, after.root, view)


async def test_racing_integrators_never_fork_and_lose_nothing(store: Store, keyring: Any, signer: note.Signer) -> None:
    app = log_app(store, keyring, signer)
    client = app.asgi_client
    keys_ = [await create_project_key(store, project_name=f"race-{i}", plan="pro") for i in range(4)]
    rivals = [integrator(store, signer), integrator(store, signer)]
    seen: list[note.Checkpoint] = []
    receipts: list[dict[str, Any]] = []
    for round_ in range(12):
        made = await asyncio.gather(
            *(issue(app, k, [f"x{round_}-{i}-{n}" for n in range(5)]) for i, k in enumerate(keys_))
        )
        receipts += [r for batch in made for r in batch]
        # The rivals race each other and a create arriving meanwhile.
        *_, late = await asyncio.gather(*(r.step(force=True) for r in rivals), issue(app, keys_[0], [f"y{round_}"]))
        receipts += late
        seen.append(await published(client, signer))
    for rival in rivals:
        await rival.step(force=True)
    final = await published(client, signer)
    assert final.size == len(receipts) == 252
    for old in seen:
        proof = await app.ctx.log.reader.compute(final.size, lambda v, size=old.size: v.consistency_proof(size))
        tlog.verify_consistency(old.size, old.root, final.size, final.root, proof)
    assert sorted([await proof_index(app, signer, r) for r in receipts]) == list(range(252))


async def integrated(
    store: Store, keyring: Any, signer: note.Signer, name: str, count: int
) -> tuple[Any, dict[str, Any], Integrator]:
    """A client, a project's key with ``count`` receipts created over HTTP, and the
    integrator that put them in the log."""
    client = log_app(store, keyring, signer).asgi_client
    key = await create_project_key(store, project_name=name, plan="pro")
    for n in range(count):
        await create(client, key, f"{name}-{n}")
    worker = integrator(store, signer)
    await worker.step(force=True)
    return client, key, worker


async def test_lost_tiles_halt_the_log_instead_of_signing_a_fork(
    store: Store, keyring: Any, signer: note.Signer
) -> None:
    client, key, worker = await integrated(store, keyring, signer, "lost", 10)
    before = await published(client, signer)
    await store.client.delete(keys.log_tile_key(ORIGIN, 0, 0))
    await create(client, key, "l-next")
    with pytest.raises(LogHalted, match="tile"):
        await worker.step(force=True)
    with pytest.raises(LogHalted):
        await integrator(store, signer).step(force=True)  # a fresh one finds it too
    assert await published(client, signer) == before


async def test_a_store_rolled_back_to_an_older_tree_halts_the_integrator_that_saw_more(
    store: Store, keyring: Any, signer: note.Signer
) -> None:
    client, key, worker = await integrated(store, keyring, signer, "rollback", 3)
    state_key = keys.log_state_key(ORIGIN)
    older = await store.client.hgetall(state_key)
    for n in range(3):
        await create(client, key, f"p{n}")
    await worker.step(force=True)
    assert (await published(client, signer)).size == 6
    await store.client.delete(state_key)
    await store.client.hset(state_key, mapping=older)  # the store "restored from a backup"
    with pytest.raises(LogHalted, match="fewer than the 6"):
        await worker.step(force=True)


async def test_the_dirty_set_forgets_empty_projects_but_never_a_queued_entry(store: Store, keyring: Any) -> None:
    key = await create_project_key(store, project_name="dirty", plan="pro")
    project = key["project_id"]
    await store.client.sadd(keys.LOG_DIRTY_KEY, project)
    await store.log_tidy_dirty(project, now_ms=1_000)
    assert not await store.client.sismember(keys.LOG_DIRTY_KEY, project)
    # A create that marked the project just before the removal queues its entry after it.
    await store.client.rpush(keys.log_queue_key(project), b"late entry")
    assert await store.log_recheck(before_ms=2_000) == 1
    assert await store.client.sismember(keys.LOG_DIRTY_KEY, project)
    assert not await store.client.zcard(keys.LOG_RECHECK_KEY)


def test_log_key_new_prints_a_signer_key_and_its_verifier_key() -> None:
    done = subprocess.run(
        [sys.executable, "service.py", "log-key", "new", "--origin", "example.com/log"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    skey, vkey = done.stdout.splitlines()
    signer = note.Signer.parse(skey)
    assert signer.name == "example.com/log" and signer.verifier.encode() == vkey
    text = note.Checkpoint("example.com/log", 1, b"\0" * 32).text()
    note.verify_note(note.sign_note(text, signer), [note.Verifier.parse(vkey)])
    assert base64.b64decode(vkey.split("+", 2)[2])[0] == 1


@pytest.mark.slow
async def test_a_redis_killed_and_restarted_with_aof_always_loses_no_entry_and_forks_nothing(
    keyring: Any, signer: note.Signer
) -> None:
    """kill -9 of a redis-server running appendfsync always, mid-way through the log's life:
    every receipt acknowledged by a 201 before the kill reaches the log after the restart,
    and the integrator that saw the old checkpoints extends them (no fork, no halt)."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_binary("redis-server", "the restart test needs a real Redis")
    assert binary is not None
    server = RedisServer(binary, ["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    store = Store(aioredis.from_url(server.url))
    try:
        app = log_app(store, keyring, signer)
        client = app.asgi_client
        key = await create_project_key(store, project_name="restart", plan="pro")
        before_kill = await issue(app, key, [f"k{n}" for n in range(300)])
        worker = integrator(store, signer)
        await worker.step(force=True)
        first = await published(client, signer)
        before_kill += await issue(app, key, [f"q{n}" for n in range(40)])  # queued, not yet in the log
        server.stop(kill=True)
        server.process = None
        server.start()  # the same directory: the AOF is replayed
        with contextlib.suppress(redis_errors.ConnectionError):
            await store.link.send("PING")  # the lost connection fails its next command; then it reconnects
        after = await issue(app, key, [f"a{n}" for n in range(5)])
        await worker.step(force=True)
        final = await published(client, signer)
        assert final.size == 345
        proof = await app.ctx.log.reader.compute(final.size, lambda v: v.consistency_proof(first.size))
        tlog.verify_consistency(first.size, first.root, final.size, final.root, proof)
        assert sorted([await proof_index(app, signer, r) for r in before_kill + after]) == list(range(345))
    finally:
        await store.close()
        server.cleanup()


async def test_the_sweep_forgets_an_expired_receipts_log_index_but_the_log_keeps_its_entry(
    store: Store, keyring: Any, signer: note.Signer
) -> None:
    app = log_app(store, keyring, signer)
    client = app.asgi_client
    key = await create_project_key(store, project_name="sweep", plan="pro")
    receipts = await issue(app, key, [f"s{n}" for n in range(4)])
    await integrator(store, signer).step(force=True)
    index_key = keys.log_index_key(receipts[0]["receipt_id"])
    assert await store.client.hlen(index_key) == 4
    summary = await store.expire_receipts(int(time.time() * 1000) + 86_400_000)
    assert summary["receipts"] == 4
    assert await store.client.hlen(index_key) == 0
    _, gone = await client.get(f"/v1/receipts/{receipts[0]['receipt_id']}/log-proof")
    assert gone.status == 404
    assert (await published(client, signer)).size == 4
    _, bundle = await client.get("/v1/log/tile/entries/000.p/4")
    assert tlog.split_bundle(bundle.body) == [tlog.entry_bytes(r) for r in receipts]


class _Interleaved:
    """A store for one integrator whose first reserve waits for ``between`` to run first."""

    def __init__(self, store: Store, between: Any) -> None:
        self._store, self._between, self.reserves = store, between, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def log_reserve(self, *args: Any) -> bool:
        if not self.reserves:
            await self._between()
        reserved: bool = await self._store.log_reserve(*args)
        self.reserves.append(reserved)
        return reserved


async def test_an_integrator_whose_tree_moved_before_its_reserve_writes_nothing(
    store: Store, keyring: Any, signer: note.Signer
) -> None:
    """A computes a batch; before it reserves, a create lands and B integrates it with A's
    entries; A's reserve must fail (the compare-and-set), so nothing of A's batch is written."""
    app = log_app(store, keyring, signer)
    client = app.asgi_client
    key = await create_project_key(store, project_name="interleave", plan="pro")
    receipts = await issue(app, key, [f"i{n}" for n in range(10)])
    rival = integrator(store, signer)

    async def between() -> None:
        receipts.extend(await issue(app, key, ["late"]))
        assert await rival.step(force=True) == 11

    proxy = _Interleaved(store, between)
    first = Integrator(proxy, LogConfig(ORIGIN, signer))
    assert await first.step(force=True) == 0
    assert proxy.reserves == [False]
    final = await published(client, signer)
    assert final.size == 11
    assert sorted([await proof_index(app, signer, r) for r in receipts]) == list(range(11))
    assert await first.step(force=True) == 0  # and afterwards it follows the tree B made
