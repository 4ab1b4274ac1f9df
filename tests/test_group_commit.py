"""Group commit (usecases/issuing.py): a project's concurrent creates are chained in memory and
written by one script call per group, on fakeredis and on a real redis-server.

Each test drives ``ReceiptIssuer`` directly with many concurrent creates and then walks the
stored chain back from the store's tip: every issued main receipt is on it exactly once, in
one line, and refusals (limits, replays) inside a group neither break the chain nor lose
the creates queued behind them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from execution_proof.kv.records import KeyRecord
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import RateLimited, StoreUnavailable
from execution_proof.receipts.limits import PlanLimits
from execution_proof.receipts.model import parse_create_request
from execution_proof.usecases.issuing import MAX_GROUP, Issued, ReceiptIssuer, group_size
from execution_proof.usecases.signing_keys import ReceiptKeys
from tests.conftest import hash_of
from tests.receipt_keys import started_receipt_keys

UNLIMITED = PlanLimits(per_minute=10**9, monthly=10**9)


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
async def keys(store: Store) -> AsyncIterator[ReceiptKeys]:
    """This process's receipt keys: a key ``TEST_ROOT`` certified, on the store's registry."""
    started = await started_receipt_keys(store, now_ms)
    yield started
    started.close()


def record(key: dict[str, Any]) -> KeyRecord:
    return KeyRecord(key["key_hash"], key["project_id"], key["actor_id"], key["plan"], False, "")


async def create(issuer: ReceiptIssuer, key: KeyRecord, label: str, plan: PlanLimits = UNLIMITED) -> Issued:
    return await issuer.issue(parse_create_request({"input_hash": hash_of(label)}), key, None, plan)


async def main_chain(store: Store, project_id: str) -> list[dict[str, Any]]:
    """The project's main chain from its first receipt to the tip, as stored."""
    exists, tip = await store.receipts.read_tip(project_id)
    assert exists
    chain: list[dict[str, Any]] = []
    while tip is not None:
        receipt_id = await store.receipts.find_receipt_id_by_hash(project_id, tip)
        assert receipt_id is not None, f"{tip} is on the chain but not stored"
        stored = await store.receipts.get_receipt_json(receipt_id)
        assert stored is not None
        receipt = orjson.loads(stored)
        chain.append(receipt)
        tip = receipt["prev_receipt_hash"]
        assert len(chain) < 10_000, "the chain loops"
    return chain[::-1]


async def test_concurrent_creates_on_one_project_are_committed_in_groups_as_one_chain(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any]
) -> None:
    issuer = ReceiptIssuer(store.receipts, keys)
    key = record(api_key)
    issued = await asyncio.gather(*(create(issuer, key, f"hot-{i}") for i in range(150)))
    assert not any(i.replayed for i in issued)
    chain = await main_chain(store, key.project_id)
    assert sorted(r["receipt_id"] for r in chain) == sorted(i.receipt["receipt_id"] for i in issued)
    assert all(r["chain_status"] == "main" for r in chain)
    assert max(issuer.batch_sizes) > 1, f"no group held more than one receipt: {issuer.batch_sizes}"
    assert sum(size * n for size, n in issuer.batch_sizes.items()) == 150
    assert issuer.pending_projects() == 0


async def test_a_refusal_inside_a_group_keeps_the_chain_and_the_creates_behind_it(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any]
) -> None:
    """Key A may make 3 creates a minute, key B any number; their creates interleave in
    the same groups. A's 4th-6th are refused; every other create is issued, on one chain."""
    issuer = ReceiptIssuer(store.receipts, keys)
    a = record(api_key)
    b = KeyRecord("sha256:" + "b" * 64, a.project_id, a.actor_id, "pro", False, "")
    await store.keys.add_project_key(b)
    tight = PlanLimits(per_minute=3, monthly=10**9)
    calls = []
    for i in range(6):
        calls += [create(issuer, a, f"a-{i}", tight), create(issuer, b, f"b-{i}")]
    results = await asyncio.gather(*calls, return_exceptions=True)
    from_a, from_b = results[0::2], results[1::2]
    assert sum(isinstance(r, Issued) for r in from_a) == 3
    assert sum(isinstance(r, RateLimited) for r in from_a) == 3
    assert all(isinstance(r, Issued) for r in from_b), from_b
    chain = await main_chain(store, a.project_id)
    issued_ids = {r.receipt["receipt_id"] for r in results if isinstance(r, Issued)}
    assert {r["receipt_id"] for r in chain} == issued_ids and len(chain) == 9
    assert max(issuer.batch_sizes) > 1


async def test_the_same_create_twice_in_one_group_is_one_receipt_and_a_replay(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any]
) -> None:
    issuer = ReceiptIssuer(store.receipts, keys)
    key = record(api_key)
    results = await asyncio.gather(
        create(issuer, key, "first"), create(issuer, key, "same"), create(issuer, key, "same"), create(issuer, key, "z")
    )
    first, same_a, same_b, last = results
    assert {same_a.replayed, same_b.replayed} == {False, True}
    assert same_a.receipt["receipt_id"] == same_b.receipt["receipt_id"]
    chain = await main_chain(store, key.project_id)
    assert [r["receipt_id"] for r in chain] == [
        first.receipt["receipt_id"],
        same_a.receipt["receipt_id"],
        last.receipt["receipt_id"],
    ]


async def test_two_issuers_on_one_project_retry_on_each_others_tips(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any]
) -> None:
    """Two processes' issuers (each with its own cached tip) never fork the chain."""
    other_keys = await started_receipt_keys(store, now_ms)  # the other process's own key
    first, second = ReceiptIssuer(store.receipts, keys), ReceiptIssuer(store.receipts, other_keys)
    key = record(api_key)
    calls = [create(first if i % 2 else second, key, f"two-{i}") for i in range(80)]
    issued = await asyncio.gather(*calls)
    chain = await main_chain(store, key.project_id)
    assert len(chain) == 80
    assert {r["receipt_id"] for r in chain} == {i.receipt["receipt_id"] for i in issued}
    assert {r["sig_kid"] for r in chain} == {keys.active_kid, other_keys.active_kid}
    other_keys.close()


async def test_a_create_that_keeps_losing_to_another_process_gets_in_with_a_smaller_group(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any]
) -> None:
    """Another process lands a receipt whenever this one commits more than one create at a
    time (a long group: built and signed while the tip moves). Shrinking the group of a
    create that lost (``group_size``) lets every create in; a fixed group of every queued
    create would lose until it answered 503 chain_contention."""
    rival = ReceiptIssuer(store.receipts, keys)
    key = record(api_key)
    rival_writes = 0

    class RacedStore:
        def __getattr__(self, name: str) -> Any:
            return getattr(store.receipts, name)

        async def issue_receipts(self, project_id: str, items: Any) -> Any:
            nonlocal rival_writes
            if len(items) > 1:
                rival_writes += 1
                await create(rival, key, f"rival-{rival_writes}")
            return await store.receipts.issue_receipts(project_id, items)

    issuer = ReceiptIssuer(RacedStore(), keys)  # type: ignore[arg-type]
    issued = await asyncio.gather(*(create(issuer, key, f"raced-{i}") for i in range(10)))
    chain = await main_chain(store, key.project_id)
    assert {i.receipt["receipt_id"] for i in issued} <= {r["receipt_id"] for r in chain}
    assert len(chain) == 10 + rival_writes
    assert issuer.batch_sizes[1] >= 1
    assert [group_size(attempts) for attempts in range(5)] == [MAX_GROUP, 16, 4, 1, 1]


async def test_a_store_failure_answers_every_create_of_the_group_and_the_next_group_works(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    issuer = ReceiptIssuer(store.receipts, keys)
    key = record(api_key)
    real = store.receipts.issue_receipts
    failures = [StoreUnavailable("the receipt store is unreachable; try again shortly")]

    async def failing_once(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args, **kwargs)

    monkeypatch.setattr(store.receipts, "issue_receipts", failing_once)
    results = await asyncio.gather(*(create(issuer, key, f"f-{i}") for i in range(20)), return_exceptions=True)
    failed = [r for r in results if isinstance(r, StoreUnavailable)]
    assert failed and all(isinstance(r, (Issued, StoreUnavailable)) for r in results)
    assert issuer.pending_projects() == 0, "nothing is left waiting"
    later = await create(issuer, key, "after")
    chain = await main_chain(store, key.project_id)
    assert chain[-1]["receipt_id"] == later.receipt["receipt_id"]
    assert len(chain) == 20 - len(failed) + 1, "the failed group wrote nothing"


async def test_a_caller_that_goes_away_does_not_stop_the_group(
    store: Store, keys: ReceiptKeys, api_key: dict[str, Any]
) -> None:
    issuer = ReceiptIssuer(store.receipts, keys)
    key = record(api_key)
    tasks = [asyncio.create_task(create(issuer, key, f"c-{i}")) for i in range(10)]
    await asyncio.sleep(0)
    tasks[3].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[3], asyncio.CancelledError)
    for _ in range(100):
        if issuer.pending_projects() == 0:
            break
        await asyncio.sleep(0.01)
    chain = await main_chain(store, key.project_id)
    assert len(chain) == 10, "the abandoned create was still written, like a write already in flight"
