"""The transparency log on a 3-master Redis Cluster: creates queue entries in their project's
slot, the count of waiting entries (in its own slot) is kept beside the scripts, and the
integrator moves everything into the log store."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof.jobs.log_timestamps import Stamper, TsaConfig
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.connect import open_store
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import load_limits
from execution_proof.runtime.settings import Settings
from execution_proof.transparency import note, timestamps, tlog
from execution_proof.web.app import create_app
from tests.cluster import RedisClusterNodes, redis_cluster  # noqa: F401  (the session fixture)
from tests.conftest import auth, hash_of
from tests.local_tsa import LocalTsa
from tests.servers import RAISED_LIMITS
from tests.test_log import (
    KEY_ENTRIES,
    ORIGIN,
    assert_in_place,
    check_proof,
    create,
    ident,
    integrator,
    issue,
    log_size,
    published,
)

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster_store(redis_cluster: RedisClusterNodes) -> AsyncIterator[Store]:  # noqa: F811
    redis_cluster.flushall()
    store = open_store(redis_cluster.url, cluster=True)
    yield store
    await store.close()


def cluster_app(store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, **settings: Any) -> Any:
    config = Settings(
        redis_url="redis://injected-by-tests", redis_cluster=True, receipt_root=receipt_root, env="test",
        limits=load_limits(orjson.dumps(RAISED_LIMITS)), log_origin=ORIGIN, log_signer=signer, **settings,
    )  # fmt: skip
    return create_app(config, store=store, log_store=log_store)


async def test_the_log_works_on_a_cluster(cluster_store: Store, log_store: LogStore, receipt_root: str) -> None:
    signer = note.Signer.generate(ORIGIN)
    app = cluster_app(cluster_store, log_store, receipt_root, signer)
    client = app.asgi_client
    worker = await integrator(cluster_store, log_store, signer)
    project_keys = [await create_project_key(cluster_store.keys, project_name=f"cl-{i}", plan="pro") for i in range(6)]
    receipts = [(await create(client, project_keys[0], "over-http"))["receipt"]]
    for n, key in enumerate(project_keys):
        receipts += await issue(app, key, [f"c{n}-{i}" for i in range(100)])
    # Pending counts queue items: each receipt's (its entry and its dsse leaf) and the app's key
    # certificate, in the log's own queue (its own slot). The step adds the leaves.
    assert await cluster_store.log_queue.log_pending(ident(signer)) == 601 + KEY_ENTRIES
    size = log_size(601)
    assert await worker.step(force=True) == size
    assert await cluster_store.log_queue.log_pending(ident(signer)) == 0
    assert await cluster_store.log_queue.log_size(ident(signer)) == size
    checkpoint = await published(log_store, signer)
    assert checkpoint.size == size
    indices = [await check_proof(client, signer, receipt) for receipt in receipts]
    await assert_in_place(log_store, size, receipts, indices)
    index, width = divmod(size, 256)
    _, tile = await client.get(f"/v1/log/tile/0/{index:03d}.p/{width}")
    assert tile.status == 200 and len(tile.body) == width * 32
    entries = tlog.split_bundle((await client.get(f"/v1/log/tile/entries/{index:03d}.p/{width}"))[1].body)
    assert [tlog.leaf_hash(e) for e in entries] == tlog.split_tile(tile.body)


async def test_backpressure_on_a_cluster(cluster_store: Store, log_store: LogStore, receipt_root: str) -> None:
    """On a Cluster the count of waiting entries is read before the script and counted after
    it (approximate under concurrency): one at a time, it is exact."""
    signer = note.Signer.generate(ORIGIN)
    # Room for four receipts besides the app's key certificate.
    client = cluster_app(cluster_store, log_store, receipt_root, signer, log_max_pending=4 + KEY_ENTRIES).asgi_client
    worker = await integrator(cluster_store, log_store, signer)
    key = await create_project_key(cluster_store.keys, project_name="cl-backlog", plan="pro")
    for n in range(4):
        await create(client, key, f"b{n}")
    body = {"input_hash": hash_of("in-refused"), "receipt_kind": "release"}
    _, refused = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert refused.status == 503 and refused.json["error"]["code"] == "log_backlog"
    assert (await create(client, key, "b0"))["idempotency"]["hit"] is True  # a replay still answers
    await worker.step(force=True)
    _, accepted = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert accepted.status == 201


async def test_time_stamps_are_kept_and_served_on_a_cluster(
    cluster_store: Store, log_store: LogStore, receipt_root: str, tmp_path: Path
) -> None:
    """The stamper claims its interval in the Cluster and keeps its record in the log store."""
    signer = note.Signer.generate(ORIGIN)
    app = cluster_app(cluster_store, log_store, receipt_root, signer)
    client = app.asgi_client
    worker = await integrator(cluster_store, log_store, signer)
    key = await create_project_key(cluster_store.keys, project_name="cl-stamped", plan="pro")
    receipts = await issue(app, key, ["s0", "s1"])  # each its entry and leaf, and the app's key certificate: 5
    await worker.step(force=True)
    tsa = LocalTsa(tmp_path / "tsa").start()
    try:
        assert await Stamper(cluster_store.log_queue, log_store, ident(signer), TsaConfig((tsa.url,))).step() == 5
    finally:
        tsa.stop()
    _, response = await client.get("/v1/log/checkpoints/5/timestamps")
    assert response.status == 200 and len(response.json["timestamps"]) == 1
    _, bundle = await client.get(f"/v1/receipts/{receipts[1]['receipt_id']}/bundle")
    assert bundle.json["timestamps"] == response.json["timestamps"]
    text = note.parse_note(response.json["checkpoint"]).text
    der = base64.b64decode(response.json["timestamps"][0]["response_base64"])
    timestamps.verify_token(der, text, timestamps.load_roots(tsa.roots_pem.read_bytes()))
