"""Records written by the release before the index buckets (old layout) keep working until
they age out (docs/redis.md, "Migration"): readable byte for byte, replayable, findable by
hash, searchable (alone and mixed with new receipts of the same hash, across pages),
verifiable, bundle-walkable, deletable and expirable. They are planted by that release's own
issue script (tests/old_layout.py), as production holds them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jobs.retention import sweep
from kv import keys
from kv.store import Store
from receipts.ids import new_receipt_id
from receipts.model import (
    build_receipt,
    format_created_at,
    idempotency_fingerprint,
    parse_create_request,
    place_in_chain,
    replay_key,
)
from receipts.signing import KeyRing
from tests import retention_fixtures
from tests.clock import Clock
from tests.conftest import auth, hash_of, index_field
from tests.old_layout import plant_old_receipt
from tests.retention_fixtures import NOW, OLD

app = retention_fixtures.app
clock = retention_fixtures.clock  # the shared retention-window fixtures


class OldRelease:
    """Issues receipts as the old release did: the same request parsing, chain placement,
    signing and serialisation, then its issue script with its key layout."""

    def __init__(self, store: Store, keyring: KeyRing, key: dict[str, Any]) -> None:
        self.store, self.keyring, self.key = store, keyring, key
        self.tip: str | None = None

    async def issue(self, body: dict[str, Any], at_ms: int) -> tuple[dict[str, Any], bytes, str]:
        """(receipt, its stored JSON bytes, its idempotency replay key)."""
        req = parse_create_request(body)
        project_id = self.key["project_id"]
        placement = place_in_chain(req.prev_receipt_hash, self.tip)
        receipt = build_receipt(
            req,
            receipt_id=new_receipt_id(project_id, at_ms),
            project_id=project_id,
            actor_id=self.key["actor_id"],
            created_at=format_created_at(at_ms),
            placement=placement,
            keyring=self.keyring,
        )
        receipt_json = orjson.dumps(receipt)
        fingerprint = idempotency_fingerprint(project_id, req)
        rkey = replay_key(fingerprint)
        await plant_old_receipt(
            self.store,
            receipt,
            built_on_tip=self.tip,
            on_main=placement.advances_tip,
            replay_key=rkey,
            fingerprint=fingerprint,
            receipt_json=receipt_json,
        )
        if placement.advances_tip:
            self.tip = receipt["receipt_hash"]
        return receipt, receipt_json, rkey


async def post(client: Any, path: str, key: Any, body: dict[str, Any]) -> Any:
    _, response = await client.post(path, content=orjson.dumps(body), headers=auth(key))
    return response


async def get(client: Any, path: str, **params: str) -> Any:
    _, response = await client.get(path, params=params)
    return response


async def search(client: Any, key: Any, **params: str) -> Any:
    _, response = await client.get("/v1/receipts", params=params, headers=auth(key))
    return response


@pytest.fixture
async def old_release(store: Store, keyring: KeyRing, api_key: dict[str, Any]) -> OldRelease:
    return OldRelease(store, keyring, api_key)


async def test_old_records_are_in_the_old_layout(store: Store, old_release: OldRelease) -> None:
    """The planting is faithful: JSON in ``r:``, strings in ``h:``/``i:``, sorted sets in ``x:``, no index."""
    body = {"input_hash": hash_of("in"), "output_hash": hash_of("out"), "tags": {"stage": "build"}}
    receipt, receipt_json, rkey = await old_release.issue(body, NOW - 1000)
    pid, rid = receipt["project_id"], receipt["receipt_id"]
    assert await store.client.get(keys.receipt_key(rid)) == receipt_json
    assert await store.client.get(keys.receipt_hash_key(pid, receipt["receipt_hash"])) == rid.encode()
    assert (await store.client.get(keys.idempotency_key(pid, rkey))).startswith(rid.encode() + b" ")
    for field in ("input_hash", "output_hash"):
        assert await store.client.zrange(keys.search_index_key(pid, field, body[field]), 0, -1) == [rid.encode()]
    assert await store.client.exists(keys.index_meta_key(pid)) == 0


async def test_old_records_read_replay_find_search_verify_and_walk(
    client: Any, store: Store, api_key: dict[str, Any], old_release: OldRelease
) -> None:
    shared = hash_of("shared-input")
    first, first_json, first_key = await old_release.issue({"input_hash": shared, "run_id": "old-1"}, NOW - 3000)
    second, second_json, _ = await old_release.issue(
        {"input_hash": shared, "output_hash": hash_of("o"), "receipt_kind": "release", "tags": {"é": "𝄞"}}, NOW - 2000
    )

    # Read by id: the very bytes the old release stored.
    for receipt, receipt_json in ((first, first_json), (second, second_json)):
        response = await get(client, f"/v1/receipts/{receipt['receipt_id']}")
        assert response.status_code == 200
        assert response.body == b'{"ok":true,"receipt":' + receipt_json + b"}"
        by_hash = await get(client, f"/v1/receipts/{receipt['receipt_hash']}", project_id=receipt["project_id"])
        assert by_hash.body == response.body

    # Replay: the same request answers the old receipt (200, same replay key), no new one.
    replay = await post(client, "/v1/receipts", api_key, {"input_hash": shared, "run_id": "old-1"})
    assert replay.status_code == 200, replay.text
    assert replay.json["idempotency"] == {"hit": True, "key": first_key}
    assert orjson.dumps(replay.json["receipt"]) == first_json

    # New receipts continue the old chain; one shares the old receipts' input hash.
    new = await post(client, "/v1/receipts", api_key, {"input_hash": shared, "run_id": "new-1"})
    assert new.status_code == 201
    newest = new.json["receipt"]
    assert newest["prev_receipt_hash"] == second["receipt_hash"]
    assert await store.client.exists(keys.index_meta_key(api_key["project_id"])) == 1, "new ones use the index"

    # Search merges the old sorted set and the new index field, newest first, across pages.
    expected = [newest, second, first]
    page = await search(client, api_key, input_hash=shared)
    assert page.json["receipts"] == expected and page.json["next_cursor"] is None
    walked, cursor = [], None
    while True:
        params = {"input_hash": shared, "limit": "1", **({"cursor": cursor} if cursor else {})}
        page = await search(client, api_key, **params)
        walked += page.json["receipts"]
        cursor = page.json["next_cursor"]
        if cursor is None:
            break
    assert walked == expected
    assert (await search(client, api_key, output_hash=hash_of("o"))).json["receipts"] == [second]

    # Verify: the new receipt's link to an old one is found through the old hash index.
    checked = await post(client, "/v1/verify", api_key, {"receipt_id": newest["receipt_id"], "input_hash": shared})
    assert checked.json["ok"] is True and checked.json["chain"]["prev_found"] is True
    old_checked = await post(client, "/v1/verify", api_key, {"receipt_id": second["receipt_id"], "input_hash": shared})
    assert old_checked.json["ok"] is True, old_checked.json

    # Bundle: the walk goes from the new receipt through both old ones to the chain's start.
    bundle = await get(client, f"/v1/receipts/{newest['receipt_id']}/bundle")
    assert bundle.json["chain"] == [second, first] and bundle.json["chain_complete"] is True
    assert (
        b"," + second_json + b"," + first_json + b"]" in bundle.body or second_json + b"," + first_json in bundle.body
    )


async def test_operator_delete_removes_an_old_record_and_its_entries(
    client: Any, store: Store, api_key: dict[str, Any], old_release: OldRelease
) -> None:
    body = {"input_hash": hash_of("del-in"), "output_hash": hash_of("del-out")}
    gone, _, _ = await old_release.issue(body, NOW - 1000)
    kept, _, _ = await old_release.issue({"input_hash": hash_of("del-in")}, NOW - 500)
    pid = api_key["project_id"]
    removed = await store.delete_receipt(gone["receipt_id"])
    assert removed == {"receipt_id": gone["receipt_id"], "project_id": pid, "receipt_hash": gone["receipt_hash"]}
    assert await store.client.exists(keys.receipt_key(gone["receipt_id"])) == 0
    assert await store.client.exists(keys.receipt_hash_key(pid, gone["receipt_hash"])) == 0
    assert await store.client.zrange(keys.search_index_key(pid, "input_hash", hash_of("del-in")), 0, -1) == [
        kept["receipt_id"].encode()
    ]
    assert await store.client.exists(keys.search_index_key(pid, "output_hash", hash_of("del-out"))) == 0
    assert (await get(client, f"/v1/receipts/{gone['receipt_id']}")).status_code == 404
    by_hash = await get(client, f"/v1/receipts/{gone['receipt_hash']}", project_id=pid)
    assert by_hash.status_code == 404
    assert (await search(client, api_key, input_hash=hash_of("del-in"))).json["receipts"] == [kept]
    # The old idempotency record names a receipt that is gone: the same request issues anew.
    again = await post(client, "/v1/receipts", api_key, body)
    assert again.status_code == 201 and again.json["receipt"]["receipt_id"] != gone["receipt_id"]
    assert await store.delete_receipt(gone["receipt_id"]) is None


async def test_the_sweep_expires_old_records_with_new_ones_alongside(
    client: Any, store: Store, api_key: dict[str, Any], old_release: OldRelease, clock: Clock
) -> None:
    pid = api_key["project_id"]
    old, _, old_key = await old_release.issue({"input_hash": hash_of("x"), "output_hash": hash_of("y")}, OLD)
    kept_old, _, _ = await old_release.issue({"input_hash": hash_of("x")}, NOW - 1000)
    clock.now = OLD
    new_old = (await post(client, "/v1/receipts", api_key, {"input_hash": hash_of("x"), "run_id": "n"})).json
    clock.now = NOW
    new_kept = (await post(client, "/v1/receipts", api_key, {"input_hash": hash_of("x"), "run_id": "k"})).json

    summary = await sweep(store, 1.0, NOW)
    # Two expired receipts (one per layout): each with its hash index entry and idempotency
    # record; search ids: the old one's two (x:…:i:, x:…:o:) and the new one's one.
    assert summary["removed"] == {"receipts": 2, "hash_index": 2, "idempotency": 2, "search_index": 3}
    for name in (
        keys.receipt_key(old["receipt_id"]),
        keys.receipt_hash_key(pid, old["receipt_hash"]),
        keys.idempotency_key(pid, old_key),
        keys.search_index_key(pid, "output_hash", hash_of("y")),
        keys.receipt_key(new_old["receipt"]["receipt_id"]),
    ):
        assert await store.client.exists(name) == 0, name
    assert await index_field(store, pid, keys.hash_index_field(new_old["receipt"]["receipt_hash"])) is None
    found = (await search(client, api_key, input_hash=hash_of("x"))).json["receipts"]
    assert found == [new_kept["receipt"], kept_old]
    again = await sweep(store, 1.0, NOW)
    assert again["removed"] == {"receipts": 0, "hash_index": 0, "idempotency": 0, "search_index": 0}
    # Past its window the old receipt's request issues a new receipt.
    anew = await post(client, "/v1/receipts", api_key, {"input_hash": hash_of("x"), "output_hash": hash_of("y")})
    assert anew.status_code == 201


async def test_a_compact_record_and_its_json_read_the_same(client: Any, store: Store, api_key: dict[str, Any]) -> None:
    """Both value forms side by side: a new receipt is compact, an old one JSON; both read the same way."""
    created = await post(client, "/v1/receipts", api_key, {"input_hash": hash_of("c")})
    rid = created.json["receipt"]["receipt_id"]
    stored = await store.client.get(keys.receipt_key(rid))
    assert stored[:1] != b"{" and len(stored) < len(orjson.dumps(created.json["receipt"])) / 2
    read = await get(client, f"/v1/receipts/{rid}")
    assert read.body == b'{"ok":true,"receipt":' + orjson.dumps(created.json["receipt"]) + b"}"
    # The same receipt stored as JSON (as the old release wrote it) reads identically.
    await store.client.set(keys.receipt_key(rid), orjson.dumps(created.json["receipt"]))
    assert (await get(client, f"/v1/receipts/{rid}")).body == read.body
