"""The store on fakeredis and a real redis-server: slots, script outcomes, script-cache loss."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.records import Counter, IssueOutcome
from execution_proof.kv.store import Store
from execution_proof.receipts.ids import new_project_id, new_receipt_id, receipt_slot_tag, slot_tag
from tests.conftest import hash_of

LUA = Path(__file__).resolve().parent.parent / "execution_proof" / "kv" / "lua"


LOG = keys.LogIdentity("example.com/v1/log", "example.com/v1/log+00000000+AQ==")


def script_key_sets(project_id: str) -> dict[str, list[str]]:
    """Every key list the store passes to each script on a Cluster, as Store builds them (on
    a plain Redis the count of waiting log entries stands in for the repeated queue key)."""
    receipt_id = new_receipt_id(project_id)
    queue = keys.log_queue_key(LOG, project_id)
    return {
        "issue_receipt.lua": [
            keys.project_key(project_id),
            keys.receipt_key(receipt_id),
            keys.index_meta_key(project_id),
            keys.key_minute_counter_key(project_id, hash_of("key"), "29000000"),
            keys.project_month_counter_key(project_id, "202612"),
            keys.search_index_key(project_id, "input_hash", hash_of("in")),
            keys.search_index_key(project_id, "output_hash", hash_of("out")),
            queue,
            queue,
            keys.log_synced_key(LOG, project_id),
            queue,
        ],
        "log_ack.lua": [queue, keys.log_synced_key(LOG, project_id), keys.index_meta_key(project_id), queue],
        "log_read.lua": [queue, keys.log_synced_key(LOG, project_id)],
        "log_size.lua": [keys.log_size_key(LOG)],
        "find_index_field.lua": [keys.index_meta_key(project_id)],
        "find_receipt.lua": [keys.index_meta_key(project_id)],
        "expire_index_bucket.lua": [keys.index_bucket_key(project_id, 5), keys.index_meta_key(project_id)],
        "create_project.lua": [keys.project_key(project_id), keys.project_api_keys_key(project_id)],
        "hit_counter.lua": [keys.ip_counter_key("2001:db8::/64", "authenticated", "29000000")],
        "refund_counter.lua": [keys.ip_counter_key("2001:db8::/64", "authenticated", "29000000")],
        "authenticate.lua": [
            keys.api_key_key(hash_of("key")),
            keys.ip_counter_key("2001:db8::/64", "unauthenticated", "29000000"),
            keys.ip_counter_key("2001:db8::/64", "authenticated", "29000000"),
        ],
        "delete_receipt.lua": [
            keys.receipt_key(receipt_id),
            keys.index_meta_key(project_id),
            keys.search_index_key(project_id, "input_hash", hash_of("in")),
            keys.search_index_key(project_id, "output_hash", hash_of("out")),
        ],
        "index_checkout.lua": [keys.checkout_session_key(project_id, keys.checkout_ref("cs_test_1"))],
        "claim_checkout.lua": [
            keys.checkout_session_key(project_id, keys.checkout_ref("cs_test_1")),
            keys.project_key(project_id),
            keys.project_api_keys_key(project_id),
        ],
        "publish_key_document.lua": [keys.signing_keys_key("certificates"), keys.signing_keys_key("version")],
        # The index buckets a script reaches through its declared index meta key.
        "index buckets": [keys.index_meta_key(project_id), *(keys.index_bucket_key(project_id, n) for n in range(64))],
    }


PLAIN_REDIS_ONLY = {"authenticate.lua"}
"""Scripts the store runs only when it is not a cluster (``KeyStore.authenticate`` on a plain Redis)."""


@pytest.mark.parametrize("attempt", range(50))
def test_every_script_touches_one_hash_slot(attempt: int) -> None:
    project_id = new_project_id()
    for script, key_list in script_key_sets(project_id).items():
        if script in PLAIN_REDIS_ONLY:
            continue
        slots = {key_slot(k.encode()) for k in key_list}
        assert len(slots) == 1, (script, key_list)


def test_every_script_covers_its_declared_keys() -> None:
    """Each script's header declares exactly the KEYS the store passes; every call names a KEYS entry."""
    sets = script_key_sets(new_project_id())
    for path in sorted(LUA.glob("*.lua")):
        text = path.read_text()
        if path.name == "index_buckets.lua":
            # The shared index functions: the one place bucket names are made, each from the
            # declared meta key's name (so in its slot, as the slot test above checks).
            made = re.findall(r"(\w+(?:\.\w+)?) \.\. ':' \.\.", text)
            assert made and set(made) == {"idx.meta"}, made
            assert "idx = {meta = meta" in text
            continue
        declared = {int(n) for n in re.findall(r"^-- KEYS\[(\d+)\]", text, re.M)}
        assert declared == set(range(1, len(sets[path.name]) + 1)), path.name
        assert re.search(r"^-- Returns", text, re.M), f"{path.name} must say what it returns"
        calls = re.findall(r"redis\.call\('(\w+)',\s*([^,)]+)", text)
        # A script may reach Redis only through the shared index functions, on a declared key.
        assert calls or re.search(r"idx_get\(KEYS\[\d+\]", text), path.name
        for command, first_arg in calls:
            # KEYS[n], or KEYS[k + n] in the group-commit script (receipt k's block of KEYS)
            assert re.fullmatch(r"KEYS\[(?:\d+|k \+ \d+)\]", first_arg.strip()), (
                f"{path.name}: {command} on {first_arg}: keys must come from KEYS, never be built in Lua"
            )


def test_receipt_ids_carry_their_project_slot_tag() -> None:
    for _ in range(100):
        project_id = new_project_id()
        receipt_id = new_receipt_id(project_id)
        assert receipt_slot_tag(receipt_id) == slot_tag(project_id)
        assert key_slot(keys.receipt_key(receipt_id).encode()) == key_slot(keys.project_key(project_id).encode())


async def issue(store: Store, project_id: str, tip: str | None, label: str, **overrides: Any) -> Any:
    receipt_id = new_receipt_id(project_id)
    args = {
        "project_id": project_id,
        "receipt_id": receipt_id,
        "receipt_hash": hash_of(label),
        "receipt_json": b'{"receipt_id":"' + receipt_id.encode() + b'"}',
        "built_on_tip": tip,
        "on_main": True,
        "replay_key": "ik_" + label,
        "fingerprint": "f" + label,
        "key_hash": hash_of("key"),
        "minute": Counter("1000", 100, 120),
        "month": Counter("202611", 1000, 3600),
    }
    args.update(overrides)
    return await store.receipts.issue_receipt(**args), receipt_id


async def test_issue_script_outcomes(store: Store) -> None:
    created = await create_project_key(store.keys, project_name="p", plan="free")
    pid = created["project_id"]
    assert await store.receipts.read_tip(pid) == (True, None)
    result, rid = await issue(store, pid, None, "a")
    assert result.outcome is IssueOutcome.ISSUED
    assert await store.receipts.read_tip(pid) == (True, hash_of("a"))
    assert await store.receipts.find_receipt_id_by_hash(pid, hash_of("a")) == rid
    stale, _ = await issue(store, pid, None, "b")
    assert stale.outcome is IssueOutcome.TIP_MOVED and stale.tip == hash_of("a")
    replay, _ = await issue(store, pid, None, "a")
    assert replay.outcome is IssueOutcome.REPLAY and replay.receipt_id == rid
    conflict, _ = await issue(store, pid, hash_of("a"), "a", fingerprint="other")
    assert conflict.outcome is IssueOutcome.IDEMPOTENCY_CONFLICT
    branch, _ = await issue(store, pid, hash_of("a"), "c", on_main=False)
    assert branch.outcome is IssueOutcome.ISSUED
    assert await store.receipts.read_tip(pid) == (True, hash_of("a")), "a branch leaves the tip alone"
    missing, _ = await issue(store, new_project_id(), None, "d")
    assert missing.outcome is IssueOutcome.NO_PROJECT


async def test_refused_issue_writes_nothing(store: Store) -> None:
    created = await create_project_key(store.keys, project_name="p", plan="free")
    pid = created["project_id"]
    await issue(store, pid, None, "a")
    before = await dump(store)
    refusals = [
        ({"built_on_tip": None}, IssueOutcome.TIP_MOVED),
        ({"fingerprint": "fa-other", "replay_key": "ik_a"}, IssueOutcome.IDEMPOTENCY_CONFLICT),
        ({"minute": Counter("1000", 1, 120)}, IssueOutcome.RATE_LIMITED),
        ({"month": Counter("202611", 1, 3600)}, IssueOutcome.QUOTA_EXCEEDED),
        ({"project_id": new_project_id()}, IssueOutcome.NO_PROJECT),
    ]
    for kwargs, expected in refusals:
        tip = kwargs.pop("built_on_tip", hash_of("a"))
        result, rid = await issue(store, str(kwargs.pop("project_id", pid)), tip, "new", **kwargs)
        assert result.outcome is expected
        assert await store.receipts.get_receipt_json(rid) is None
    assert await dump(store) == before, "a refused issue writes nothing, counters included"


async def dump(store: Store) -> dict[bytes, Any]:
    return {key: await store.client.dump(key) for key in sorted(await store.client.keys("*"))}


async def test_issue_counts_minute_and_month_once(store: Store) -> None:
    created = await create_project_key(store.keys, project_name="p", plan="free")
    pid = created["project_id"]
    result, _ = await issue(store, pid, None, "a")
    assert (result.minute_used, result.month_used) == (1, 1)
    replay, _ = await issue(store, pid, None, "a")
    assert replay.outcome is IssueOutcome.REPLAY
    assert (replay.minute_used, replay.month_used) == (2, 1), "a replay is a request but not a new receipt"
    second, _ = await issue(store, pid, hash_of("a"), "b")
    assert (second.minute_used, second.month_used) == (3, 2)
    assert await store.counters.read_usage(pid, hash_of("key"), "1000", "202611") == (3, 2)
    ttl = await store.client.ttl(keys.key_minute_counter_key(pid, hash_of("key"), "1000"))
    assert 0 < ttl <= 120


@pytest.mark.parametrize("store", ["redis-server"], indirect=True)
async def test_scripts_survive_a_flushed_script_cache(store: Store) -> None:
    """A Redis restart empties the script cache; register_script reloads on NOSCRIPT."""
    created = await create_project_key(store.keys, project_name="p", plan="free")
    await store.client.script_flush()
    result, _ = await issue(store, created["project_id"], None, "a")
    assert result.outcome is IssueOutcome.ISSUED
