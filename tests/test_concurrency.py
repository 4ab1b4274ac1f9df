"""Chain placement and idempotency under real concurrency (docs/api.md, "Chain placement", "Idempotency").

Real redis-server, real ``service.py serve`` processes with 1 and 4 workers, concurrent
creates through ``httpx.AsyncClient`` over loopback. With 4 workers the per-process lock
cannot serialise creates, so only the store's compare-and-set keeps the chain linear.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv.keys import project_key
from tests.conftest import RedisServer, auth, hash_of
from tests.servers import ServicePool, ServiceProcess, create_key_cli, raw_json_member

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

CLIENT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module", params=[1, 4], ids=["workers1", "workers4"])
def service(
    request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path_factory: Any
) -> Iterator[ServiceProcess]:
    """One server per worker count for the module; each test makes its own project."""
    with ServicePool(tmp_path_factory.mktemp("concurrency")) as pool:
        yield pool.start(workers=request.param, redis_url=redis_server.url)


@pytest.fixture
def key(service: ServiceProcess, redis_server: RedisServer) -> dict[str, Any]:
    """A fresh project and key (through the CLI) on the server's Redis."""
    return create_key_cli(redis_server.url, project="concurrency", plan="pro")


@pytest.fixture
async def client(service: ServiceProcess) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=service.base_url, timeout=CLIENT_TIMEOUT_S, limits=limits) as http:
        yield http


def stored_tip(redis_server: RedisServer, project_id: str) -> str | None:
    """The project's main-chain tip as the store holds it."""
    with redis.Redis.from_url(redis_server.url) as conn:
        value = conn.hget(project_key(project_id), "tip")
    return value.decode() if isinstance(value, bytes) else value


async def create(
    http: httpx.AsyncClient, key: dict[str, Any], body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return await http.post("/v1/receipts", content=orjson.dumps(body), headers={**auth(key), **(headers or {})})


async def read_by_hash(http: httpx.AsyncClient, receipt_hash: str, project_id: str) -> dict[str, Any]:
    response = await http.get(f"/v1/receipts/{receipt_hash}", params={"project_id": project_id})
    assert response.status_code == 200, (receipt_hash, response.text)
    receipt: dict[str, Any] = response.json()["receipt"]
    assert receipt["receipt_hash"] == receipt_hash
    return receipt


async def walk_main_chain(http: httpx.AsyncClient, tip: str, project_id: str, bound: int) -> list[dict[str, Any]]:
    """Receipts from ``tip`` back through ``prev_receipt_hash`` to the first (newest first)."""
    chain: list[dict[str, Any]] = []
    current: str | None = tip
    while current is not None:
        assert len(chain) < bound, f"chain longer than {bound} receipts (a cycle?)"
        receipt = await read_by_hash(http, current, project_id)
        chain.append(receipt)
        current = receipt["prev_receipt_hash"]
    return chain


def describe(responses: list[httpx.Response]) -> str:
    """Status counts and the first few unexpected bodies, for assertion messages."""
    odd = [f"{r.status_code}: {r.text[:300]}" for r in responses if r.status_code not in (200, 201)][:5]
    return f"{Counter(r.status_code for r in responses)} {odd}"


def assert_linear(main_receipts: list[dict[str, Any]]) -> None:
    """No two main receipts share a prev hash; each prev equals the tip it was built on."""
    prevs = [r["prev_receipt_hash"] for r in main_receipts]
    duplicated = [prev for prev, n in Counter(prevs).items() if n > 1]
    assert not duplicated, f"main receipts sharing a prev_receipt_hash: {duplicated}"
    for receipt in main_receipts:
        assert receipt["chain_status"] == "main"
        assert receipt["expected_prev_receipt_hash"] == receipt["prev_receipt_hash"], receipt["receipt_id"]


async def test_concurrent_creates_form_one_linear_chain(
    client: httpx.AsyncClient, key: dict[str, Any], redis_server: RedisServer
) -> None:
    project_id = key["project_id"]
    responses = await asyncio.gather(*(create(client, key, {"input_hash": hash_of(f"linear-{i}")}) for i in range(64)))
    assert [r.status_code for r in responses] == [201] * 64, describe(responses)
    receipts = [r.json()["receipt"] for r in responses]
    by_hash = {r["receipt_hash"]: r for r in receipts}
    assert len(by_hash) == 64
    assert [r["prev_receipt_hash"] for r in receipts].count(None) == 1
    assert_linear(receipts)
    for response in responses:
        body = response.json()
        assert body["idempotency"]["hit"] is False
        assert body["chain"]["status"] == "main"
        assert body["chain"]["prev_receipt_hash"] == body["receipt"]["prev_receipt_hash"]

    tip = stored_tip(redis_server, project_id)
    assert tip in by_hash, "the stored tip is not one of the 64 new receipts"
    chain = await walk_main_chain(client, tip, project_id, bound=64)
    assert len(chain) == 64
    assert {r["receipt_hash"] for r in chain} == set(by_hash)
    assert chain[-1]["prev_receipt_hash"] is None
    for stored in chain:
        assert stored == by_hash[stored["receipt_hash"]], "a read differs from its create response"
    # Each link was placed after its predecessor committed, so issue times never go backwards
    # from the first receipt to the tip: the tip is the newest main receipt.
    created = [r["created_at"] for r in reversed(chain)]
    assert created == sorted(created)


async def test_identical_concurrent_creates_issue_one_receipt(
    client: httpx.AsyncClient, key: dict[str, Any], redis_server: RedisServer
) -> None:
    body = {
        "input_hash": hash_of("identical"),
        "output_hash": hash_of("identical-out"),
        "receipt_kind": "release",
        "tags": {"workflow_stage": "build", "dropped": None},
    }
    responses = await asyncio.gather(*(create(client, key, body) for _ in range(16)))
    assert sorted(r.status_code for r in responses) == [200] * 15 + [201], describe(responses)
    for response in responses:
        assert response.json()["idempotency"]["hit"] is (response.status_code == 200)
    assert len({r.json()["receipt"]["receipt_id"] for r in responses}) == 1
    assert len({r.json()["idempotency"]["key"] for r in responses}) == 1
    receipt_bytes = {raw_json_member(r.content, "receipt") for r in responses}
    assert len(receipt_bytes) == 1, "replays must return the stored receipt byte for byte"

    receipt_id = responses[0].json()["receipt"]["receipt_id"]
    read = await client.get(f"/v1/receipts/{receipt_id}")
    assert read.status_code == 200
    assert raw_json_member(read.content, "receipt") in receipt_bytes
    assert stored_tip(redis_server, key["project_id"]) == responses[0].json()["receipt"]["receipt_hash"]


async def test_same_idempotency_key_with_different_bodies_conflicts(
    client: httpx.AsyncClient, key: dict[str, Any], redis_server: RedisServer
) -> None:
    header = {"Idempotency-Key": "order-2026-0001"}
    bodies = [{"input_hash": hash_of(f"conflict-{i}")} for i in range(16)]
    responses = await asyncio.gather(*(create(client, key, body, header) for body in bodies))
    assert sorted(r.status_code for r in responses) == [201] + [409] * 15, describe(responses)
    for response in responses:
        if response.status_code == 409:
            error = response.json()
            assert error["error"]["code"] == "idempotency_conflict"
            assert error["request_id"] == response.headers["x-request-id"]

    winner = next(r for r in responses if r.status_code == 201).json()["receipt"]
    assert stored_tip(redis_server, key["project_id"]) == winner["receipt_hash"], "a rejected create moved the tip"
    assert winner["prev_receipt_hash"] is None
    # The winning body with the same header is a plain replay.
    again = await create(client, key, {"input_hash": winner["input_hash"]}, header)
    assert again.status_code == 200
    assert again.json()["receipt"]["receipt_id"] == winner["receipt_id"]


async def test_branch_creates_never_move_the_tip(
    client: httpx.AsyncClient, key: dict[str, Any], redis_server: RedisServer
) -> None:
    project_id = key["project_id"]
    base = []
    for i in range(3):
        response = await create(client, key, {"input_hash": hash_of(f"base-{i}")})
        assert response.status_code == 201, response.text
        base.append(response.json()["receipt"])
    old_hashes = [base[0]["receipt_hash"], base[1]["receipt_hash"]]

    calls = []
    for i in range(24):
        calls.append(create(client, key, {"input_hash": hash_of(f"main-{i}")}))
        calls.append(
            create(client, key, {"input_hash": hash_of(f"branch-{i}"), "prev_receipt_hash": old_hashes[i % 2]})
        )
    responses = await asyncio.gather(*calls)
    assert [r.status_code for r in responses] == [201] * 48, describe(responses)
    mains = [r.json()["receipt"] for r in responses[0::2]]
    branches = [r.json()["receipt"] for r in responses[1::2]]

    main_hashes = {r["receipt_hash"] for r in [*base, *mains]}
    for i, branch in enumerate(branches):
        assert branch["chain_status"] == "branch"
        assert branch["prev_receipt_hash"] == old_hashes[i % 2]
        assert branch["expected_prev_receipt_hash"] in main_hashes, "a branch was built on a non-main tip"
    branch_hashes = {r["receipt_hash"] for r in branches}

    tip = stored_tip(redis_server, project_id)
    assert tip not in branch_hashes, "a branch receipt became the tip"
    assert tip in {r["receipt_hash"] for r in mains}
    chain = await walk_main_chain(client, tip, project_id, bound=27)
    assert {r["receipt_hash"] for r in chain} == main_hashes, "the main chain must hold every main receipt only"
    assert_linear([*base, *mains])

    # The next plain create continues from that tip.
    after = await create(client, key, {"input_hash": hash_of("after")})
    assert after.status_code == 201
    assert after.json()["receipt"]["prev_receipt_hash"] == tip


@pytest.mark.parametrize("service", [1], indirect=True, ids=["workers1"])
async def test_more_concurrent_creates_than_a_default_redis_pool_holds(
    service: ServiceProcess, key: dict[str, Any]
) -> None:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=service.base_url, timeout=CLIENT_TIMEOUT_S, limits=limits) as wide:
        responses = await asyncio.gather(*(create(wide, key, {"input_hash": hash_of(f"wide-{i}")}) for i in range(200)))
    assert [r.status_code for r in responses] == [201] * 200, describe(responses)
