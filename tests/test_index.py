"""The project's index buckets (kv/lua/index_buckets.lua, docs/redis.md): they grow by
linear hashing and stay small enough for listpack, every entry stays findable across splits,
and a lookup that lands on a truncated-hash collision checks the full hash."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.records import Counter, IssueOutcome
from execution_proof.kv.store import Store
from execution_proof.receipts.ids import new_receipt_id
from tests.conftest import auth, hash_of, index_field


async def plant(store: Store, project_id: str, tip: str | None, n: int) -> dict[str, str]:
    receipt_id = new_receipt_id(project_id)
    receipt_hash = hash_of(f"index-{project_id}-{n}")
    result = await store.receipts.issue_receipt(
        project_id=project_id,
        receipt_id=receipt_id,
        receipt_hash=receipt_hash,
        receipt_json=orjson.dumps({"receipt_id": receipt_id, "project_id": project_id, "receipt_hash": receipt_hash}),
        built_on_tip=tip,
        on_main=True,
        replay_key=f"ik_index{n}",
        fingerprint=f"fp{n}",
        key_hash=hash_of("index-key"),
        minute=Counter("1", 10**9, 120),
        month=Counter("202601", 10**9, 3600),
        input_hash=hash_of(f"in-{n % 50}"),  # 50 input hashes shared by many receipts
        output_hash=hash_of(f"out-{n}"),
    )
    assert result.outcome is IssueOutcome.ISSUED
    return {"receipt_id": receipt_id, "receipt_hash": receipt_hash, "replay_key": f"ik_index{n}"}


async def test_buckets_split_as_the_project_grows_and_every_entry_stays_found(store: Store) -> None:
    project_id = (await create_project_key(store.keys, project_name="grow", plan="pro"))["project_id"]
    planted, tip = [], None
    for n in range(400):
        planted.append(await plant(store, project_id, tip, n))
        tip = planted[-1]["receipt_hash"]
    meta = {k.decode(): int(v) for k, v in (await store.client.hgetall(keys.index_meta_key(project_id))).items()}
    buckets = 2 ** meta["level"] + meta["split"]
    sizes = [await store.client.hlen(keys.index_bucket_key(project_id, n)) for n in range(buckets)]
    # h, i and O per receipt; the 50 input hashes have 8 receipts each, more than a field
    # holds (four ids): their ids moved to the hash's sorted set.
    assert meta["count"] == sum(sizes) == 400 * 3, sizes
    assert buckets > 16 and max(sizes) <= 128, sizes
    for n in range(50):
        assert await index_field(store, project_id, keys.search_field("input_hash", hash_of(f"in-{n}"))) is None
        spilled = await store.client.zrange(keys.search_index_key(project_id, "input_hash", hash_of(f"in-{n}")), 0, -1)
        assert sorted(spilled) == sorted(keys.receipt_id_bytes(r["receipt_id"]) for r in planted[n::50])
    assert await store.client.exists(keys.index_bucket_key(project_id, buckets)) == 0, "no bucket past the last"
    for receipt in planted[::7]:
        assert (
            await store.receipts.find_receipt_id_by_hash(project_id, receipt["receipt_hash"]) == receipt["receipt_id"]
        )
        idem = await index_field(store, project_id, keys.idempotency_field(receipt["replay_key"]))
        assert idem is not None and idem[:16] == keys.receipt_id_bytes(receipt["receipt_id"])
    if isinstance(store.client, aioredis.Redis) and not type(store.client).__module__.startswith("fakeredis"):
        encodings = {await store.client.object("encoding", keys.index_bucket_key(project_id, n)) for n in range(8)}
        assert encodings <= {b"listpack", b"ziplist"}, encodings


async def test_a_truncated_hash_collision_is_not_a_match(client: Any, store: Store, api_key: dict[str, Any]) -> None:
    """Point the hash-index field of a hash that was never issued (same first 10 bytes as a
    real receipt's hash) at that receipt: the full-hash check refuses it everywhere."""
    _, made = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("a")}), headers=auth(api_key)
    )
    real = made.json["receipt"]
    twin = real["receipt_hash"][:27] + ("0" if real["receipt_hash"][27] != "0" else "1") + real["receipt_hash"][28:]
    assert keys.hash_index_field(twin) == keys.hash_index_field(real["receipt_hash"])
    _, by_hash = await client.get(f"/v1/receipts/{twin}", params={"project_id": real["project_id"]})
    assert by_hash.status_code == 404
    _, found = await client.get(f"/v1/receipts/{real['receipt_hash']}", params={"project_id": real["project_id"]})
    assert found.status_code == 200 and found.json["receipt"] == real

    # A branch naming the twin: verify finds no previous receipt, the bundle stops there.
    body = {"input_hash": hash_of("b"), "prev_receipt_hash": twin}
    _, branch = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(api_key))
    assert branch.json["receipt"]["chain_status"] == "branch"
    verify_body = {"receipt_id": branch.json["receipt"]["receipt_id"], "input_hash": hash_of("b")}
    _, checked = await client.post("/v1/verify", content=orjson.dumps(verify_body), headers=auth(api_key))
    assert checked.json["chain"]["prev_found"] is False and checked.json["checks"]["chain_link"] is False
    _, bundle = await client.get(f"/v1/receipts/{branch.json['receipt']['receipt_id']}/bundle")
    assert bundle.json["chain"] == [] and bundle.json["chain_complete"] is False


async def test_a_hash_with_more_than_four_receipts_moves_to_its_set(
    client: Any, store: Store, api_key: dict[str, Any]
) -> None:
    """Search, delete and the sweep follow the ids into the hash's sorted set."""
    from execution_proof.jobs.retention import sweep

    pid = api_key["project_id"]
    made = []
    for n in range(6):
        body = {"input_hash": hash_of("popular"), "run_id": f"run-{n}"}
        _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(api_key))
        made.append(response.json["receipt"])
        field = await index_field(store, pid, keys.search_field("input_hash", hash_of("popular")))
        assert (field is not None) == (n < 4), n
    name = keys.search_index_key(pid, "input_hash", hash_of("popular"))
    assert sorted(await store.client.zrange(name, 0, -1)) == sorted(
        keys.receipt_id_bytes(r["receipt_id"]) for r in made
    )
    newest_first = sorted(made, key=lambda r: r["receipt_id"], reverse=True)
    _, page = await client.get("/v1/receipts", params={"input_hash": hash_of("popular")}, headers=auth(api_key))
    assert page.json["receipts"] == newest_first

    assert await store.receipts.delete_receipt(made[2]["receipt_id"]) is not None
    assert await store.client.zcard(name) == 5
    _, page = await client.get("/v1/receipts", params={"input_hash": hash_of("popular")}, headers=auth(api_key))
    assert page.json["receipts"] == [r for r in newest_first if r is not made[2]]

    far = keys.receipt_created_ms(made[-1]["receipt_id"]) + 10 * 86_400_000
    summary = await sweep(store.retention, 1.0, far)
    assert summary["removed"]["receipts"] == 5 and summary["removed"]["search_index"] == 5
    assert await store.client.exists(name) == 0


async def test_a_receipt_is_found_by_its_hash_with_its_record_in_one_call(store: Store) -> None:
    """kv/lua/find_receipt.lua names the record from the index meta key's slot tag and the
    16-byte id (index_buckets.lua's ULID text): for every receipt, across bucket splits, it
    returns the id and the record a read by id returns; a gone record is (id, None); an
    unknown hash is None."""
    project_id = (await create_project_key(store.keys, project_name="find", plan="pro"))["project_id"]
    planted, tip = [], None
    for n in range(150):
        planted.append(await plant(store, project_id, tip, n))
        tip = planted[-1]["receipt_hash"]
    for receipt in planted:
        found = await store.receipts.find_receipt_by_hash(project_id, receipt["receipt_hash"])
        assert found is not None
        assert found[0] == receipt["receipt_id"]
        assert found[1] == await store.receipts.get_receipt_json(receipt["receipt_id"], project_id)
        assert found[1] is not None and orjson.loads(found[1])["receipt_hash"] == receipt["receipt_hash"]
    assert await store.receipts.find_receipt_by_hash(project_id, hash_of("never issued")) is None
    gone = planted[3]
    await store.client.delete(keys.receipt_key(gone["receipt_id"]))
    assert await store.receipts.find_receipt_by_hash(project_id, gone["receipt_hash"]) == (gone["receipt_id"], None)
