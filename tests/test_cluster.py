"""The service on a real three-master Redis Cluster (``REDIS_CLUSTER=true``, docs/cluster.md).

The API's main flows run through the ASGI app on a cluster store (chains, replays, verify,
limits, claims, suspension and reissue, retention, operator delete), then through real
``service.py`` processes (serve with two workers, ``receipts delete``, the start-up errors).
Data spreads over every master, and every key of a project lives on one node.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv.accounts import create_project_key, reissue_project_key
from execution_proof.kv.cluster_link import ClusterLink
from execution_proof.kv.connect import open_store
from execution_proof.kv.keys import checkout_ref, project_key, receipt_key
from execution_proof.kv.records import ClaimOutcome
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.receipts.ids import new_project_id, slot_tag
from execution_proof.receipts.limits import load_limits
from execution_proof.runtime.settings import CLUSTER_NEEDS_JOBS_REDIS, ConfigError, Settings, load_settings
from execution_proof.web.app import create_app
from tests.cluster import RedisClusterNodes, redis_cluster  # noqa: F401  (the session fixture)
from tests.conftest import RedisServer, auth, hash_of
from tests.servers import RAISED_LIMITS, ServicePool, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

DAY_MS = 86_400_000
CONCURRENT_CREATES = 32
PROJECTS = 30


@pytest.fixture
async def cluster_store(redis_cluster: RedisClusterNodes) -> AsyncIterator[Store]:  # noqa: F811
    """A store on the session's cluster (``open_store(..., cluster=True)``), emptied first."""
    redis_cluster.flushall()
    store = open_store(redis_cluster.url, cluster=True)
    # authenticate.lua reads a key record and an address's counters (different slots): a
    # cluster store authenticates in two calls, which every test here goes through.
    assert store.is_cluster and not store.keys._one_script
    assert isinstance(store.link, ClusterLink), "per-request commands take the pipelined cluster link"
    yield store
    await store.close()


def make_client(
    store: Store, receipt_root: str, limits: dict[str, Any] | None = None, clock_ms: Callable[[], int] | None = None
) -> Any:
    settings = Settings(
        redis_url="redis://injected-by-tests",
        redis_cluster=True,
        receipt_root=receipt_root,
        env="test",
        limits=load_limits(orjson.dumps(limits or RAISED_LIMITS)),
    )
    return create_app(settings, store=store, clock_ms=clock_ms).asgi_client


async def create(client: Any, key: dict[str, Any], body: dict[str, Any], **headers: str) -> Any:
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers={**auth(key), **headers})
    return response


async def verify(client: Any, key: dict[str, Any], body: dict[str, Any]) -> Any:
    _, response = await client.post("/v1/verify", content=orjson.dumps(body), headers=auth(key))
    return response


def node_of_key(cluster: RedisClusterNodes, name: str) -> int:
    """The port of the master that holds ``name`` (asked of the nodes themselves)."""
    holders = []
    for port in cluster.ports:
        with cluster.client(port) as node:
            try:
                if node.exists(name):
                    holders.append(port)
            except redis.exceptions.MovedError:
                continue  # another master owns the key's slot
    assert len(holders) == 1, (name, holders)
    return holders[0]


def tagged_keys_per_node(cluster: RedisClusterNodes, tag: str) -> dict[int, int]:
    """How many keys carrying ``{tag}`` each master holds."""
    counts = {}
    for port in cluster.ports:
        with cluster.client(port) as node:
            counts[port] = sum(1 for _ in node.scan_iter(match=f"*{{{tag}}}*", count=1000))
    return counts


# --- the API on the cluster (ASGI) --------------------------------------------------------


async def test_chain_main_and_branch_and_no_fork_under_concurrency(cluster_store: Store, receipt_root: str) -> None:
    client = make_client(cluster_store, receipt_root)
    key = await create_project_key(cluster_store.keys, project_name="chain", plan="pro")
    first = (await create(client, key, {"input_hash": hash_of("a")})).json["receipt"]
    second = (await create(client, key, {"input_hash": hash_of("b")})).json["receipt"]
    assert second["prev_receipt_hash"] == first["receipt_hash"] and second["chain_status"] == "main"
    branch = await create(client, key, {"input_hash": hash_of("c"), "prev_receipt_hash": first["receipt_hash"]})
    assert branch.status_code == 201, branch.text
    assert branch.json["receipt"]["chain_status"] == "branch"
    assert branch.json["receipt"]["expected_prev_receipt_hash"] == second["receipt_hash"]

    responses = await asyncio.gather(
        *(create(client, key, {"input_hash": hash_of(f"burst-{i}")}) for i in range(CONCURRENT_CREATES))
    )
    assert [r.status_code for r in responses] == [201] * CONCURRENT_CREATES
    receipts = [r.json["receipt"] for r in responses]
    assert all(r["chain_status"] == "main" for r in receipts)
    prevs = [r["prev_receipt_hash"] for r in receipts]
    assert len(set(prevs)) == CONCURRENT_CREATES, "two receipts built on the same tip: the chain forked"
    hashes = {r["receipt_hash"] for r in receipts}
    # A single line: every prev is the tip before the burst or another burst receipt, and
    # exactly one burst receipt (the stored tip) is nobody's prev.
    assert set(prevs) <= hashes | {second["receipt_hash"]}
    tip = (await cluster_store.keys.get_project(key["project_id"]) or {})["tip"]
    assert hashes - set(prevs) == {tip}


async def test_replay_is_one_201_then_200s_with_the_same_bytes(cluster_store: Store, receipt_root: str) -> None:
    client = make_client(cluster_store, receipt_root)
    key = await create_project_key(cluster_store.keys, project_name="replay", plan="pro")
    # The app started first (a server serves once its start is over; the test client starts
    # it at its first request, which eight at once would race).
    assert (await client.get("/health"))[1].status_code == 200
    body = {"input_hash": hash_of("r"), "tags": {"b": "2", "a": "1"}}
    responses = await asyncio.gather(*(create(client, key, body) for _ in range(8)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 7 + [201]
    assert len({orjson.dumps(r.json["receipt"]) for r in responses}) == 1
    header = await create(client, key, {"input_hash": hash_of("h")}, **{"Idempotency-Key": "job-1"})
    again = await create(client, key, {"input_hash": hash_of("h")}, **{"Idempotency-Key": "job-1"})
    conflict = await create(client, key, {"input_hash": hash_of("x")}, **{"Idempotency-Key": "job-1"})
    assert (header.status_code, again.status_code, conflict.status_code) == (201, 200, 409)


async def test_verify_ok_and_tampered_and_reads_by_id_and_hash(cluster_store: Store, receipt_root: str) -> None:
    client = make_client(cluster_store, receipt_root)
    key = await create_project_key(cluster_store.keys, project_name="verify", plan="pro")
    first = (await create(client, key, {"input_hash": hash_of("1"), "output_hash": hash_of("2")})).json["receipt"]
    second = (await create(client, key, {"input_hash": hash_of("3")})).json["receipt"]
    ok = await verify(client, key, {"receipt_id": second["receipt_id"], "input_hash": hash_of("3")})
    assert ok.json["ok"] is True and ok.json["chain"]["prev_found"] is True
    _, by_id = await client.get(f"/v1/receipts/{first['receipt_id']}")
    assert by_id.status_code == 200 and by_id.json["receipt"] == first
    _, by_hash = await client.get(f"/v1/receipts/{first['receipt_hash']}", params={"project_id": key["project_id"]})
    assert by_hash.status_code == 200 and by_hash.json["receipt"]["receipt_id"] == first["receipt_id"]
    _, found = await client.get(
        "/v1/receipts", params={"output_hash": hash_of("2")}, headers={"Authorization": auth(key)["Authorization"]}
    )
    assert found.status_code == 200, found.text
    assert [r["receipt_id"] for r in found.json["receipts"]] == [first["receipt_id"]]
    await cluster_store.client.set(receipt_key(first["receipt_id"]), orjson.dumps({**first, "tags": {"x": "y"}}))
    bad = await verify(client, key, {"receipt_id": first["receipt_id"], "input_hash": hash_of("1")})
    assert bad.json["ok"] is False and bad.json["checks"]["receipt_hash_recompute"] is False
    link = await verify(client, key, {"receipt_id": second["receipt_id"], "input_hash": hash_of("3")})
    assert link.json["checks"]["chain_link"] is False


async def test_minute_limit_and_monthly_quota_refuse_exactly_at_the_limit(
    cluster_store: Store, receipt_root: str
) -> None:
    now = [int(time.time() * 1000) // 60_000 * 60_000 + 1_000]  # early in a minute window
    limits = {"plans": {"free": {"per_minute": 5, "monthly": 1000}, "basic": {"per_minute": 1000, "monthly": 4}}}
    client = make_client(cluster_store, receipt_root, limits, clock_ms=lambda: now[0])
    minute_key = await create_project_key(cluster_store.keys, project_name="minute", plan="free")
    codes = [(await create(client, minute_key, {"input_hash": hash_of(f"m{i}")})).status_code for i in range(6)]
    assert codes == [201] * 5 + [429]
    quota_key = await create_project_key(cluster_store.keys, project_name="quota", plan="basic")
    codes = [(await create(client, quota_key, {"input_hash": hash_of(f"q{i}")})).status_code for i in range(5)]
    assert codes == [201] * 4 + [429]
    _, usage = await client.get("/v1/usage", headers={"Authorization": auth(quota_key)["Authorization"]})
    assert usage.status_code == 200, usage.text
    assert "4" in usage.text  # read_usage's MGET of two same-slot counters answers on the cluster


async def test_claim_suspend_reissue_on_the_cluster(cluster_store: Store, receipt_root: str) -> None:
    client = make_client(cluster_store, receipt_root)
    # A paid checkout: the lookup key lives in its own slot, the session in the project's.
    project_id = new_project_id()
    assigned = await cluster_store.checkouts.index_checkout(
        ref=checkout_ref("cs_test_1"), candidate_project_id=project_id, plan="basic", created_ms=1, indexed_at_ms=2
    )
    assert assigned == project_id
    key = await create_project_key(cluster_store.keys, project_name="operator", plan="pro")
    from execution_proof.kv.accounts import new_key_record

    _, record = new_key_record(project_id, "basic", actor_id="act_x", now_ms=1_795_219_200_000)  # 2026-11-21
    outcome = await cluster_store.checkouts.claim_checkout(
        ref=checkout_ref("cs_test_1"), project_name="claimed", key=record, now_ms=3, window_ms=DAY_MS
    )
    assert outcome is ClaimOutcome.CLAIMED
    assert (await cluster_store.keys.get_project(project_id) or {}).get("name") == "claimed"
    # Operator path: suspend (project + every key record, across slots), then reissue.
    assert await cluster_store.keys.set_project_suspension(key["project_id"], "forever") == 1
    refused = await create(client, key, {"input_hash": hash_of("s")})
    assert refused.status_code == 403
    await cluster_store.keys.set_project_suspension(key["project_id"], "")
    new = await reissue_project_key(cluster_store.keys, key["project_id"])
    assert new is not None
    assert (await create(client, key, {"input_hash": hash_of("old")})).status_code == 401
    assert (await create(client, new, {"input_hash": hash_of("new")})).status_code == 201


async def test_authenticate_answers_the_scripts_outcomes_on_the_cluster(cluster_store: Store) -> None:
    """``KeyStore.authenticate`` on a cluster (two round trips: the key record and the
    address's counters live in different slots) answers, step by step, what
    kv/lua/authenticate.lua answers on a plain Redis, and counts the same."""
    import fakeredis

    from execution_proof.kv.records import Counter

    plain = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    scope = Counter("w1", 2, 60)

    async def outcomes(store: Store) -> list[Any]:
        key = await create_project_key(store.keys, project_name="auth", plan="pro")
        revoked = await create_project_key(store.keys, project_name="revoked", plan="pro")
        await store.keys.revoke_api_key(revoked["key_hash"])
        seen: list[Any] = []

        async def auth(key_hash: str, bucket: str, *, count: bool = True) -> None:
            result = await store.keys.authenticate(key_hash, bucket, scope, "authenticated", 2, count=count)
            record = result.record
            seen.append((result.outcome.name, result.count, None if record is None else record.plan))

        await auth(key["key_hash"], "a", count=False)  # usable, not counted
        await auth(key["key_hash"], "a")  # counted: 1
        await auth(key["key_hash"], "a")  # counted: 2
        await auth(key["key_hash"], "a")  # the scope's limit is used up
        await auth("sha256:" + "0" * 64, "b")  # unknown key
        await auth(revoked["key_hash"], "b")  # revoked key
        await store.counters.hit_ip_counter("b", "unauthenticated", scope)
        await store.counters.hit_ip_counter("b", "unauthenticated", scope)
        await auth(key["key_hash"], "b")  # the address is throttled, whatever the key
        await store.keys.set_project_suspension(key["project_id"], "forever")
        await auth(key["key_hash"], "c")  # a suspension set: the caller decides, nothing counted
        seen.append(await store.counters.read_ip_counter("c", "authenticated", "w1"))
        return seen

    try:
        on_cluster, one_script = await outcomes(cluster_store), await outcomes(plain)
    finally:
        await plain.close()
    assert on_cluster == one_script
    assert [name for name, *_ in on_cluster[:-1]] == [
        "NOT_COUNTED", "COUNTED", "COUNTED", "LIMITED", "UNUSABLE", "UNUSABLE", "THROTTLED", "NOT_COUNTED",
    ]  # fmt: skip


async def test_data_spreads_over_every_master_and_the_sweep_covers_them_all(
    cluster_store: Store,
    receipt_root: str,
    redis_cluster: RedisClusterNodes,  # noqa: F811
) -> None:
    now = int(time.time() * 1000)
    old_client = make_client(cluster_store, receipt_root, clock_ms=lambda: now - 10 * DAY_MS)
    new_client = make_client(cluster_store, receipt_root)
    projects = await asyncio.gather(
        *(create_project_key(cluster_store.keys, project_name=f"spread-{i}", plan="pro") for i in range(PROJECTS))
    )
    old_ids: list[str] = []
    new_ids: list[str] = []
    for i, key in enumerate(projects):
        old = await create(old_client, key, {"input_hash": hash_of(f"old-{i}"), "output_hash": hash_of(f"o-{i}")})
        new = await create(new_client, key, {"input_hash": hash_of(f"new-{i}")})
        assert (old.status_code, new.status_code) == (201, 201)
        old_ids.append(old.json["receipt"]["receipt_id"])
        new_ids.append(new.json["receipt"]["receipt_id"])

    sizes = {}
    for port in redis_cluster.ports:
        with redis_cluster.client(port) as node:
            sizes[port] = node.dbsize()
    assert all(size > 0 for size in sizes.values()), sizes
    masters_with_projects = set()
    for key in projects:
        per_node = tagged_keys_per_node(redis_cluster, slot_tag(key["project_id"]))
        holding = [port for port, count in per_node.items() if count]
        assert len(holding) == 1, (key["project_id"], per_node)
        masters_with_projects.add(holding[0])
        assert node_of_key(redis_cluster, project_key(key["project_id"])) == holding[0]
    assert masters_with_projects == set(redis_cluster.ports), "30 projects should reach all three masters"
    old_masters = {node_of_key(redis_cluster, receipt_key(receipt_id)) for receipt_id in old_ids}
    assert old_masters == set(redis_cluster.ports), "expired receipts sit on every master"

    counts = await cluster_store.retention.expire_receipts(now - DAY_MS, batch=7)  # small batches: many SCAN rounds
    assert counts["receipts"] == PROJECTS
    assert counts["hash_index"] == PROJECTS and counts["idempotency"] == PROJECTS
    assert counts["search_index"] == 2 * PROJECTS
    for receipt_id in old_ids:
        assert await cluster_store.receipts.get_receipt_json(receipt_id) is None
    for receipt_id in new_ids:
        assert await cluster_store.receipts.get_receipt_json(receipt_id) is not None
    for port in redis_cluster.ports:
        with redis_cluster.client(port) as node:
            left = list(node.scan_iter(match="r:*", count=1000))
            assert all(n.decode().rpartition(":")[2] in new_ids for n in left), port
    for key in projects:
        assert (await cluster_store.keys.get_project(key["project_id"]) or {}).get("tip"), "tips stay"
    again = await cluster_store.retention.expire_receipts(now - DAY_MS)
    assert again["receipts"] == again["hash_index"] == again["idempotency"] == again["search_index"] == 0


async def test_operator_delete_on_the_cluster(cluster_store: Store, receipt_root: str) -> None:
    client = make_client(cluster_store, receipt_root)
    key = await create_project_key(cluster_store.keys, project_name="delete", plan="pro")
    receipt = (await create(client, key, {"input_hash": hash_of("d")})).json["receipt"]
    removed = await cluster_store.receipts.delete_receipt(receipt["receipt_id"])
    assert removed == {
        "receipt_id": receipt["receipt_id"],
        "project_id": key["project_id"],
        "receipt_hash": receipt["receipt_hash"],
    }
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}")
    assert response.status_code in (404, 410)
    assert await cluster_store.receipts.delete_receipt(receipt["receipt_id"]) is None


# --- real processes with REDIS_CLUSTER=true -----------------------------------------------


def cluster_env(cluster: RedisClusterNodes, jobs: RedisServer | None) -> dict[str, str | None]:
    return {
        "REDIS_URL": cluster.url,
        "REDIS_CLUSTER": "true",
        "JOBS_REDIS_URL": jobs.url if jobs else None,
    }


def test_serve_and_worker_refuse_a_cluster_without_jobs_redis_url(
    redis_cluster: RedisClusterNodes,  # noqa: F811
) -> None:
    for verb in ("serve", "worker"):
        done = run_cli(verb, env=cluster_env(redis_cluster, None))
        assert done.returncode == 2, (verb, done.stdout, done.stderr)
        assert CLUSTER_NEEDS_JOBS_REDIS in done.stderr, (verb, done.stderr)
        assert "Traceback" not in done.stderr


def test_worker_refuses_a_queue_on_a_cluster_node(redis_cluster: RedisClusterNodes) -> None:  # noqa: F811
    env = {"REDIS_URL": redis_cluster.url, "REDIS_CLUSTER": "true", "JOBS_REDIS_URL": redis_cluster.url}
    done = run_cli("worker", "--burst", env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "RQ cannot run on a cluster" in done.stderr


async def test_real_service_with_two_workers_on_the_cluster(
    redis_cluster: RedisClusterNodes,  # noqa: F811
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    redis_cluster.flushall()
    env = cluster_env(redis_cluster, redis_server)
    created = run_cli("keys", "create", "--project", "cluster", "--plan", "pro", env=env)
    assert created.returncode == 0, created.stderr
    key = orjson.loads(created.stdout)
    with ServicePool(tmp_path_factory.mktemp("cluster")) as pool:
        service = pool.start(workers=2, redis_url=redis_cluster.url, env=env)
        async with httpx.AsyncClient(base_url=service.base_url, timeout=30) as http:
            responses = await asyncio.gather(
                *(
                    http.post("/v1/receipts", content=orjson.dumps({"input_hash": hash_of(f"p{i}")}), headers=auth(key))
                    for i in range(CONCURRENT_CREATES)
                )
            )
            assert [r.status_code for r in responses] == [201] * CONCURRENT_CREATES, responses[0].text
            receipts = [r.json()["receipt"] for r in responses]
            prevs = [r["prev_receipt_hash"] for r in receipts]
            assert len(set(prevs)) == CONCURRENT_CREATES, "the chain forked across worker processes"
            assert prevs.count(None) == 1
            victim = receipts[0]["receipt_id"]
            deleted = run_cli("receipts", "delete", victim, "--reason", "test", env=env)
            assert deleted.returncode == 0, deleted.stderr
            gone = await http.get(f"/v1/receipts/{victim}")
            assert gone.status_code in (404, 410)
    swept = run_cli("expire", env=env)
    assert swept.returncode == 0, swept.stderr


# --- configuration (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDIS_CLUSTER": "true"}, "needs REDIS_URL"),
        ({"REDIS_CLUSTER": "true", "REDIS_URL": "redis://h:1"}, CLUSTER_NEEDS_JOBS_REDIS),
        ({"REDIS_CLUSTER": "maybe", "REDIS_URL": "redis://h:1"}, "REDIS_CLUSTER must be true or false"),
    ],
)
def test_cluster_settings_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(env)


def test_cluster_settings() -> None:
    env = {"REDIS_URL": "redis://h:1", "JOBS_REDIS_URL": "redis://j:2"}
    assert load_settings({**env, "REDIS_CLUSTER": "true"}).redis_cluster is True
    assert load_settings({**env, "REDIS_CLUSTER": "false"}).redis_cluster is False
    plain = load_settings({"REDIS_URL": "redis://h:1"})
    assert plain.redis_cluster is False and plain.jobs_redis_url == "redis://h:1"


async def test_an_unreachable_cluster_is_store_unavailable_not_a_crash() -> None:
    """No reachable node raises RedisClusterException in redis-py: the store maps it to 503."""
    from tests.conftest import free_port

    store = open_store(f"redis://127.0.0.1:{free_port()}", cluster=True)
    try:
        with pytest.raises(StoreUnavailable):
            await store.ping()
        with pytest.raises(StoreUnavailable):
            await store.keys.find_api_key(hash_of("any"))
    finally:
        await store.close()
