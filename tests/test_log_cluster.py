"""The transparency log on a 3-master Redis Cluster: creates queue entries in their project's
slot, the integrator's scripts each stay in one slot, and tiles and bundles spread over the
masters."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.crc import key_slot

from jobs.log_integrator import Integrator, LogConfig
from jobs.log_timestamps import Stamper, TsaConfig
from kv import keys
from kv.accounts import create_project_key
from kv.connect import open_store
from kv.store import Store
from receipts import note, timestamps, tlog
from receipts.limits import load_limits
from runtime.settings import Settings
from tests.cluster import RedisClusterNodes, redis_cluster  # noqa: F401  (the session fixture)
from tests.local_tsa import LocalTsa
from tests.servers import RAISED_LIMITS
from tests.test_log import ORIGIN, check_proof, create, issue, published
from web.app import create_app

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster_store(redis_cluster: RedisClusterNodes) -> AsyncIterator[Store]:  # noqa: F811
    redis_cluster.flushall()
    store = open_store(redis_cluster.url, cluster=True)
    yield store
    await store.close()


def cluster_app(store: Store, keyring: Any, signer: note.Signer) -> Any:
    settings = Settings(
        redis_url="redis://injected-by-tests", redis_cluster=True, keyring=keyring, env="test",
        limits=load_limits(orjson.dumps(RAISED_LIMITS)), log_origin=ORIGIN, log_signer=signer,
    )  # fmt: skip
    return create_app(settings, store=store)


async def test_the_log_works_on_a_cluster_and_spreads_its_tiles(cluster_store: Store, keyring: Any) -> None:
    signer = note.Signer.generate(ORIGIN)
    app = cluster_app(cluster_store, keyring, signer)
    client = app.asgi_client
    project_keys = [await create_project_key(cluster_store, project_name=f"cl-{i}", plan="pro") for i in range(6)]
    receipts = [(await create(client, project_keys[0], "over-http"))["receipt"]]
    for n, key in enumerate(project_keys):
        receipts += await issue(app, key, [f"c{n}-{i}" for i in range(100)])
    worker = Integrator(cluster_store, LogConfig(ORIGIN, signer))
    assert await worker.step(force=True) == 601
    checkpoint = await published(client, signer)
    assert checkpoint.size == 601
    for receipt in receipts[::37]:
        await check_proof(client, signer, receipt)
    stored = [keys.log_tile_key(ORIGIN, 0, n) for n in range(3)] + [keys.log_bundle_key(ORIGIN, n) for n in range(3)]
    slots = {key_slot(name.encode()) for name in stored}
    assert len(slots) == len(stored), "each tile and bundle in its own slot"
    _, tile = await client.get("/v1/log/tile/0/002.p/89")
    assert tile.status == 200 and len(tile.body) == 89 * 32
    entries = tlog.split_bundle((await client.get("/v1/log/tile/entries/002.p/89"))[1].body)
    assert [tlog.leaf_hash(e) for e in entries] == tlog.split_tile(tile.body)


async def test_time_stamps_are_kept_and_served_on_a_cluster(cluster_store: Store, keyring: Any, tmp_path: Path) -> None:
    """The stamper's keys (claim, record, sorted set) live in different slots; each command
    names one key, so a cluster serves them as a single Redis does."""
    signer = note.Signer.generate(ORIGIN)
    app = cluster_app(cluster_store, keyring, signer)
    client = app.asgi_client
    key = await create_project_key(cluster_store, project_name="cl-stamped", plan="pro")
    receipts = await issue(app, key, [f"s{i}" for i in range(5)])
    await Integrator(cluster_store, LogConfig(ORIGIN, signer)).step(force=True)
    tsa = LocalTsa(tmp_path / "tsa").start()
    try:
        assert await Stamper(cluster_store, ORIGIN, TsaConfig((tsa.url,), keep_s=3600)).step() == 5
    finally:
        tsa.stop()
    _, response = await client.get("/v1/log/checkpoints/5/timestamps")
    assert response.status == 200 and len(response.json["timestamps"]) == 1
    _, bundle = await client.get(f"/v1/receipts/{receipts[2]['receipt_id']}/bundle")
    assert bundle.json["timestamps"] == response.json["timestamps"]
    text = note.parse_note(response.json["checkpoint"]).text
    der = base64.b64decode(response.json["timestamps"][0]["response_base64"])
    timestamps.verify_token(der, text, timestamps.load_roots(tsa.roots_pem.read_bytes()))
