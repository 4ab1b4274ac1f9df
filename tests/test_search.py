"""Search by input/output hash within one's own project (fakeredis and a real redis-server):
the endpoint, pagination, isolation between projects, the index written by the issue
script, operator deletion and the retention sweep."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from execution_proof.jobs.retention import DAY_MS, sweep
from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import load_limits
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests import retention_fixtures
from tests.clock import Clock
from tests.conftest import auth, hash_of, index_field, index_ids
from tests.retention_fixtures import NOW, OLD, Travel

app = retention_fixtures.app
clock = retention_fixtures.clock  # the shared retention-window fixtures
travel = retention_fixtures.travel


async def create(client: Any, key: Any, body: dict[str, Any]) -> Any:
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert response.status_code in (200, 201), response.text
    return response


async def search(client: Any, key: Any, **params: str) -> Any:
    _, response = await client.get("/v1/receipts", params=params, headers=auth(key))
    return response


async def search_all(client: Any, key: Any, limit: int, **params: str) -> tuple[list[dict[str, Any]], int]:
    """Every page: (receipts in order, number of pages)."""
    found: list[dict[str, Any]] = []
    pages, cursor = 0, None
    while True:
        response = await search(client, key, limit=str(limit), **params, **({"cursor": cursor} if cursor else {}))
        assert response.status_code == 200, response.text
        pages += 1
        found += response.json["receipts"]
        cursor = response.json["next_cursor"]
        if cursor is None:
            return found, pages


async def test_search_finds_own_receipts_newest_first(client: Any, api_key: dict[str, Any], clock: Clock) -> None:
    made = []
    for i in range(3):
        clock.now = NOW + i
        made.append((await create(client, api_key, {"input_hash": hash_of("in"), "run_id": f"r{i}"})).json["receipt"])
    other = (await create(client, api_key, {"input_hash": hash_of("other"), "output_hash": hash_of("in")})).json
    response = await search(client, api_key, input_hash=hash_of("in"))
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    assert list(response.json) == ["ok", "receipts", "next_cursor"]
    assert response.json["ok"] is True and response.json["next_cursor"] is None
    assert response.json["receipts"] == list(reversed(made)), "full receipts, newest first"
    by_output = await search(client, api_key, output_hash=hash_of("in").upper().replace("SHA256:", "sha256:"))
    assert by_output.json["receipts"] == [other["receipt"]], "output index is separate; hex case is ignored"
    assert (await search(client, api_key, output_hash=hash_of("nothing"))).json == {
        "ok": True,
        "receipts": [],
        "next_cursor": None,
    }


async def test_pagination_with_receipts_in_the_same_millisecond(
    client: Any, api_key: dict[str, Any], clock: Clock
) -> None:
    """A frozen clock gives every receipt the same score: the order falls back on the ids."""
    made = [
        (await create(client, api_key, {"input_hash": hash_of("same"), "run_id": f"r{i}"})).json["receipt"]
        for i in range(7)
    ]
    expected = sorted(made, key=lambda r: r["receipt_id"], reverse=True)
    for limit, pages in ((2, 4), (3, 3), (7, 1), (200, 1)):
        found, count = await search_all(client, api_key, limit, input_hash=hash_of("same"))
        assert found == expected and count == pages, limit
    first = await search(client, api_key, input_hash=hash_of("same"))
    assert len(first.json["receipts"]) == 7, "default limit 50"
    clock.now = NOW + 5
    made.append((await create(client, api_key, {"input_hash": hash_of("same"), "run_id": "later"})).json["receipt"])
    found, _ = await search_all(client, api_key, 3, input_hash=hash_of("same"))
    assert found[0]["run_id"] == "later" and len(found) == 8


async def test_replays_do_not_duplicate_entries(client: Any, store: Store, api_key: dict[str, Any]) -> None:
    body = {"input_hash": hash_of("r"), "output_hash": hash_of("o")}
    first = await create(client, api_key, body)
    replay = await create(client, api_key, body)
    assert replay.status_code == 200 and replay.json["idempotency"]["hit"] is True
    field = keys.search_field("input_hash", hash_of("r"))
    assert await index_ids(store, api_key["project_id"], field) == [first.json["receipt"]["receipt_id"]]
    assert len((await search(client, api_key, output_hash=hash_of("o"))).json["receipts"]) == 1


async def test_never_across_projects(client: Any, store: Store, api_key: dict[str, Any]) -> None:
    other = await create_project_key(store.keys, project_name="other", plan="free")
    mine = (await create(client, api_key, {"input_hash": hash_of("shared"), "output_hash": hash_of("o")})).json
    theirs = (await create(client, other, {"input_hash": hash_of("shared"), "output_hash": hash_of("o")})).json
    for key, receipt in ((api_key, mine["receipt"]), (other, theirs["receipt"])):
        for field, value in (("input_hash", hash_of("shared")), ("output_hash", hash_of("o"))):
            assert (await search(client, key, **{field: value})).json["receipts"] == [receipt]
    # A cursor naming another project's receipt is refused, not followed.
    from execution_proof.usecases.searching import encode_cursor

    foreign = encode_cursor(theirs["receipt"]["receipt_id"])
    refused = await search(client, api_key, input_hash=hash_of("shared"), cursor=foreign)
    assert refused.status_code == 400 and refused.json["error"]["details"]["field"] == "cursor"


async def test_both_hashes_find_the_receipts_with_both(client: Any, api_key: dict[str, Any], clock: Clock) -> None:
    """input_hash and output_hash together: the receipts that have both (an AND), paginated."""
    both = []
    for i in range(5):
        clock.now = NOW + 2 * i
        body = {"input_hash": hash_of("and-in"), "output_hash": hash_of("and-out"), "run_id": f"b{i}"}
        both.append((await create(client, api_key, body)).json["receipt"])
        clock.now = NOW + 2 * i + 1
        await create(client, api_key, {"input_hash": hash_of("and-in"), "output_hash": hash_of("x"), "run_id": f"i{i}"})
        await create(
            client, api_key, {"input_hash": hash_of("y"), "output_hash": hash_of("and-out"), "run_id": f"o{i}"}
        )
    await create(client, api_key, {"input_hash": hash_of("and-in"), "run_id": "no-output"})
    query = {"input_hash": hash_of("and-in"), "output_hash": hash_of("and-out").upper().replace("SHA256:", "sha256:")}
    first = await search(client, api_key, **query)
    assert first.status_code == 200, first.text
    assert [r["receipt_id"] for r in first.json["receipts"]] == [r["receipt_id"] for r in reversed(both)]
    for limit in (1, 2, 3, 7):
        found, _ = await search_all(client, api_key, limit, **query)
        assert [r["receipt_id"] for r in found] == [r["receipt_id"] for r in reversed(both)], limit
    nothing = await search(client, api_key, input_hash=hash_of("and-in"), output_hash=hash_of("y"))
    assert nothing.status_code == 200
    assert nothing.json["receipts"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, None),
        ({"input_hash": "sha256:abc"}, "input_hash"),
        ({"input_hash": hash_of("a"), "output_hash": "sha256:abc"}, "output_hash"),
        ({"input_hash": hash_of("a"), "output_hash": hash_of("b"), "cursor": "x"}, "cursor"),
        ({"output_hash": "md5:" + "0" * 32}, "output_hash"),
        ({"input_hash": ""}, "input_hash"),
        ({"input_hash": hash_of("a"), "limit": "0"}, "limit"),
        ({"input_hash": hash_of("a"), "limit": "201"}, "limit"),
        ({"input_hash": hash_of("a"), "limit": "ten"}, "limit"),
        ({"input_hash": hash_of("a"), "cursor": "not a cursor"}, "cursor"),
        ({"input_hash": hash_of("a"), "cursor": ""}, "cursor"),
        ({"input_hash": hash_of("a"), "project_id": "prj_x"}, None),
    ],
)
async def test_bad_queries_are_400(client: Any, api_key: dict[str, Any], params: dict[str, str], field: Any) -> None:
    response = await search(client, api_key, **params)
    assert response.status_code == 400, response.text
    assert response.json["error"]["code"] == "bad_request"
    if field is not None:
        assert response.json["error"]["details"]["field"] == field


async def test_search_needs_a_key_and_counts_like_verify(settings: Settings, store: Store) -> None:
    limits = {"plans": {"free": {"per_minute": 2}}, "ip_per_minute": {"authenticated": 100}}
    client = create_app(replace(settings, limits=load_limits(orjson.dumps(limits))), store=store).asgi_client
    _, anonymous = await client.get("/v1/receipts", params={"input_hash": hash_of("a")})
    assert anonymous.status_code == 401
    key = await create_project_key(store.keys, project_name="p", plan="free")
    assert (await search(client, key, input_hash=hash_of("a"))).status_code == 200
    assert (await search(client, key, input_hash=hash_of("a"))).status_code == 200
    limited = await search(client, key, input_hash=hash_of("a"))
    assert limited.status_code == 429 and limited.json["error"]["code"] == "rate_limited"
    assert limited.json["error"]["details"]["policy"] == "key"
    # The same address has made three authenticated requests this minute (the 429 counted too).
    ip_limits = {"ip_per_minute": {"authenticated": 4}}
    client = create_app(replace(settings, limits=load_limits(orjson.dumps(ip_limits))), store=store).asgi_client
    assert (await search(client, key, input_hash=hash_of("a"))).status_code == 200
    refused = await search(client, key, input_hash=hash_of("a"))
    assert refused.status_code == 429 and refused.json["error"]["details"]["policy"] == "ip-authenticated"


async def test_operator_delete_removes_the_receipt_from_both_indexes(
    client: Any, store: Store, api_key: dict[str, Any]
) -> None:
    gone = (await create(client, api_key, {"input_hash": hash_of("i"), "output_hash": hash_of("o")})).json["receipt"]
    kept = (await create(client, api_key, {"input_hash": hash_of("i")})).json["receipt"]
    assert await store.receipts.delete_receipt(gone["receipt_id"]) is not None
    pid = api_key["project_id"]
    assert await index_ids(store, pid, keys.search_field("input_hash", hash_of("i"))) == [kept["receipt_id"]]
    assert await index_field(store, pid, keys.search_field("output_hash", hash_of("o"))) is None
    assert (await search(client, api_key, input_hash=hash_of("i"))).json["receipts"] == [kept]
    assert (await search(client, api_key, output_hash=hash_of("o"))).json["receipts"] == []


async def test_an_index_entry_whose_receipt_is_gone_is_skipped(
    client: Any, store: Store, api_key: dict[str, Any]
) -> None:
    made = [
        (await create(client, api_key, {"input_hash": hash_of("s"), "run_id": f"{i}"})).json["receipt"]
        for i in range(3)
    ]
    newest, *older = sorted(made, key=lambda r: r["receipt_id"], reverse=True)  # one frozen millisecond
    await store.client.delete(keys.receipt_key(newest["receipt_id"]))  # e.g. a sweep in progress
    page = await search(client, api_key, input_hash=hash_of("s"), limit="1")
    assert page.json["receipts"] == [] and page.json["next_cursor"] is not None
    rest, _ = await search_all(client, api_key, 5, input_hash=hash_of("s"))
    assert rest == older


async def test_sweep_trims_the_search_sets(client: Any, store: Store, api_key: dict[str, Any], travel: Travel) -> None:
    await travel(OLD)
    old = (await create(client, api_key, {"input_hash": hash_of("mixed"), "output_hash": hash_of("o1")})).json
    only_old = (await create(client, api_key, {"input_hash": hash_of("only-old")})).json
    await travel(NOW - DAY_MS)  # exactly at the window's edge: kept
    edge = (await create(client, api_key, {"input_hash": hash_of("mixed"), "run_id": "edge"})).json
    await travel(NOW)
    fresh = (await create(client, api_key, {"input_hash": hash_of("mixed"), "run_id": "fresh"})).json
    pid = api_key["project_id"]
    names = {
        "mixed": keys.search_field("input_hash", hash_of("mixed")),
        "only_old": keys.search_field("input_hash", hash_of("only-old")),
        "o1": keys.search_field("output_hash", hash_of("o1")),
    }
    assert all([await index_field(store, pid, n) for n in names.values()])

    summary = await sweep(store.retention, 1.0, NOW)
    assert summary["removed"] == {"receipts": 2, "hash_index": 2, "idempotency": 2, "search_index": 3}
    assert await index_ids(store, pid, names["mixed"]) == [
        edge["receipt"]["receipt_id"],
        fresh["receipt"]["receipt_id"],
    ]
    assert await index_field(store, pid, names["only_old"]) is None, "emptied fields are gone"
    assert await index_field(store, pid, names["o1"]) is None
    found = (await search(client, api_key, input_hash=hash_of("mixed"))).json["receipts"]
    assert found == [fresh["receipt"], edge["receipt"]]
    assert old["receipt"] not in found and only_old["receipt"]["receipt_id"]
    again = await sweep(store.retention, 1.0, NOW)
    assert again["removed"]["search_index"] == 0, "safe to run twice"


async def test_sweep_leaves_foreign_x_keys_alone(store: Store) -> None:
    await store.client.set("x:not-a-zset", "value")
    await store.client.zadd("x:{ABCD}:foreign", {"member": 10})
    counts = await store.retention.expire_receipts(NOW)
    assert counts["search_index"] == 1 and counts["scanned"] == 2
    assert await store.client.get("x:not-a-zset") == b"value", "a key of another type is skipped"
