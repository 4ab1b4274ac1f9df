"""kv/cluster_link.py on a real three-master Redis Cluster: the store follows a resharding and
a restarted node (docs/cluster.md).

- MOVED: a project's slot is moved to another master (``CLUSTER SETSLOT IMPORTING/MIGRATING``,
  ``MIGRATE``, ``SETSLOT NODE``) under two stores that already know the old owner; both follow
  it, their concurrent creates form one chain, and every earlier receipt is still read.
- ASK: while the slot is migrating (its keys already on the target), reads are answered by
  the target through ``ASKING``; a create (a multi-key script, TRYAGAIN on the target until
  the migration ends) answers 503 while the window stays open and 201 once it closes.
- A restarted master: its projects answer 503 (never 500) while it is down, the others keep
  working, and the link reconnects once it is back.

These tests change the session cluster's topology and leave it whole (every slot covered,
every node up) for the tests after them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.crc import key_slot

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.cluster_link import ClusterLink
from execution_proof.kv.connect import open_store
from execution_proof.kv.keys import project_key, receipt_key
from execution_proof.kv.store import Store
from tests.cluster import RedisClusterNodes, redis_cluster  # noqa: F401  (the session fixture)
from tests.conftest import hash_of
from tests.test_cluster import cluster_store, create, make_client, node_of_key  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

BURST = 16


@pytest.fixture
async def second_store(cluster_store: Store, redis_cluster: RedisClusterNodes) -> AsyncIterator[Store]:  # noqa: F811
    """Another store on the same cluster: a second process's link."""
    store = open_store(redis_cluster.url, cluster=True)
    yield store
    await store.close()


def node_id(cluster: RedisClusterNodes, port: int) -> str:
    with cluster.client(port) as node:
        value = node.execute_command("CLUSTER", "MYID")
    return value.decode() if isinstance(value, bytes) else str(value)


def start_migration(cluster: RedisClusterNodes, slot: int, source: int, target: int) -> None:
    """Mark ``slot`` migrating from ``source`` to ``target`` and move every key of it there."""
    with cluster.client(source) as src, cluster.client(target) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(cluster, source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(cluster, target))
        while names := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *names)


def finish_migration(cluster: RedisClusterNodes, slot: int, target: int) -> None:
    """``SETSLOT NODE`` on every master, the target first (as ``redis-cli --cluster`` does)."""
    owner = node_id(cluster, target)
    for port in sorted(cluster.ports, key=lambda p: p != target):
        with cluster.client(port) as node:
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)


def move_slot(cluster: RedisClusterNodes, slot: int, source: int, target: int) -> None:
    start_migration(cluster, slot, source, target)
    finish_migration(cluster, slot, target)


def other_port(cluster: RedisClusterNodes, port: int) -> int:
    return next(p for p in cluster.ports if p != port)


def assert_one_line(receipts: list[dict[str, Any]], before: str | None, tip: str) -> None:
    """The receipts extend the chain ending at ``before`` as one line ending at ``tip``."""
    prevs = [r["prev_receipt_hash"] for r in receipts]
    assert len(set(prevs)) == len(receipts), "two receipts built on the same tip: the chain forked"
    hashes = {r["receipt_hash"] for r in receipts}
    assert set(prevs) <= hashes | {before}
    assert hashes - set(prevs) == {tip}


async def test_a_moved_slot_is_followed_by_two_stores_without_a_fork(
    cluster_store: Store,  # noqa: F811
    second_store: Store,
    redis_cluster: RedisClusterNodes,  # noqa: F811
    receipt_root: str,
) -> None:
    clients = [make_client(cluster_store, receipt_root), make_client(second_store, receipt_root)]
    key = await create_project_key(cluster_store.keys, project_name="moved", plan="pro")
    earlier = [(await create(clients[i % 2], key, {"input_hash": hash_of(f"e{i}")})).json["receipt"] for i in range(4)]
    name = project_key(key["project_id"])
    slot, source = key_slot(name.encode()), node_of_key(redis_cluster, name)
    target = other_port(redis_cluster, source)
    links = [cluster_store.link, second_store.link]
    assert all(isinstance(link, ClusterLink) and link.slots[slot] == ("127.0.0.1", source) for link in links)

    move_slot(redis_cluster, slot, source, target)

    responses = await asyncio.gather(
        *(create(clients[i % 2], key, {"input_hash": hash_of(f"m{i}")}) for i in range(BURST))
    )
    assert [r.status_code for r in responses] == [201] * BURST, responses[0].text
    for link in links:
        assert isinstance(link, ClusterLink) and link.slots[slot] == ("127.0.0.1", target), "MOVED updates the map"
    assert node_of_key(redis_cluster, name) == target
    tip = (await second_store.keys.get_project(key["project_id"]) or {})["tip"]
    assert_one_line([r.json["receipt"] for r in responses], earlier[-1]["receipt_hash"], tip)
    for receipt in earlier:  # nothing lost in the move, each readable through either store
        for store in (cluster_store, second_store):
            assert await store.receipts.get_receipt_json(receipt["receipt_id"]) is not None
        assert node_of_key(redis_cluster, receipt_key(receipt["receipt_id"])) == target


async def test_during_a_migration_reads_follow_ask_and_a_create_waits_for_its_end(
    cluster_store: Store,  # noqa: F811
    redis_cluster: RedisClusterNodes,  # noqa: F811
    receipt_root: str,
) -> None:
    client = make_client(cluster_store, receipt_root)
    key = await create_project_key(cluster_store.keys, project_name="ask", plan="pro")
    first = (await create(client, key, {"input_hash": hash_of("a1"), "output_hash": hash_of("o1")})).json["receipt"]
    name = project_key(key["project_id"])
    slot, source = key_slot(name.encode()), node_of_key(redis_cluster, name)
    target = other_port(redis_cluster, source)
    link = cluster_store.link
    assert isinstance(link, ClusterLink)

    start_migration(redis_cluster, slot, source, target)
    try:
        assert await cluster_store.receipts.get_receipt_json(first["receipt_id"]) is not None  # GET: ASK
        found = await cluster_store.receipts.find_receipt_id_by_hash(
            key["project_id"], first["receipt_hash"]
        )  # EVALSHA: ASK
        assert found == first["receipt_id"]
        assert await cluster_store.receipts.read_tip(key["project_id"]) == (True, first["receipt_hash"])
        _, by_hash = await client.get(f"/v1/receipts/{first['receipt_hash']}", params={"project_id": key["project_id"]})
        assert by_hash.status_code == 200, by_hash.text
        assert link.slots[slot] == ("127.0.0.1", source), "ASK is for one command: the map keeps the owner"

        # The issue script's keys are partly on the target (the project) and partly nowhere
        # (the new receipt): the target answers TRYAGAIN until the slot is its own.
        refused = await create(client, key, {"input_hash": hash_of("a2")})
        assert refused.status_code == 503, refused.text
        assert refused.json["error"]["code"] == "store_unavailable"

        pending = asyncio.ensure_future(create(client, key, {"input_hash": hash_of("a3")}))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(finish_migration, redis_cluster, slot, target)
    except BaseException:
        finish_migration(redis_cluster, slot, target)
        raise
    issued = await pending
    assert issued.status_code == 201, issued.text
    assert issued.json["receipt"]["prev_receipt_hash"] == first["receipt_hash"], "the refused create wrote nothing"
    assert (await cluster_store.keys.get_project(key["project_id"]) or {})["tip"] == issued.json["receipt"][
        "receipt_hash"
    ]


async def test_a_restarted_master_is_503_while_down_and_reconnected_after(
    cluster_store: Store,  # noqa: F811
    redis_cluster: RedisClusterNodes,  # noqa: F811
    receipt_root: str,
) -> None:
    client = make_client(cluster_store, receipt_root)
    projects = [
        await create_project_key(cluster_store.keys, project_name=f"restart-{i}", plan="pro") for i in range(12)
    ]
    receipts = [(await create(client, k, {"input_hash": hash_of(k["project_id"])})).json["receipt"] for k in projects]
    holders = [node_of_key(redis_cluster, project_key(k["project_id"])) for k in projects]
    # Every request also counts its client address in that address's own slot
    # (kv.keys.ip_counter_key): the master holding those counters must stay up, or every
    # read is a 503. The victim is a master holding projects but no counter.
    counter_ports = set()
    for port in redis_cluster.ports:
        with redis_cluster.client(port) as node:
            if node.keys("ip:*"):
                counter_ports.add(port)
    assert counter_ports, "the requests above counted their address"
    victim_port = next(port for port in holders if port not in counter_ports)
    node = next(n for n in redis_cluster.nodes if n.port == victim_port)
    down = [i for i, port in enumerate(holders) if port == victim_port]
    up = [i for i, port in enumerate(holders) if port != victim_port]
    assert up, "twelve projects spread over more than one master"

    with redis_cluster.client(victim_port) as victim:
        victim.save()  # the node comes back with its data (the test nodes run without AOF)
    node.stop(kill=True)
    try:
        for i in down:
            refused = await create(client, projects[i], {"input_hash": hash_of(f"down-{i}")})
            assert refused.status_code == 503, refused.text
            _, read = await client.get(f"/v1/receipts/{receipts[i]['receipt_id']}")
            assert read.status_code == 503, read.text
        for i in up:  # the other masters are unaffected
            _, read = await client.get(f"/v1/receipts/{receipts[i]['receipt_id']}")
            assert read.status_code == 200, read.text
    finally:
        node.start()
        redis_cluster.wait_until_ready()

    for i in down:
        again = await create(client, projects[i], {"input_hash": hash_of(f"back-{i}")})
        assert again.status_code == 201, again.text
        assert again.json["receipt"]["prev_receipt_hash"] == receipts[i]["receipt_hash"]
