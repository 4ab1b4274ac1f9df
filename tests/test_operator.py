"""Operator actions: list, reissue, suspend, unsuspend, delete a receipt (fakeredis and real Redis)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
from typing import Any

import orjson
import pytest

from execution_proof.cli import admin as cli
from execution_proof.kv.accounts import ProjectNameTaken, create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import load_limits
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests.clock import Clock
from tests.conftest import REPO, auth, hash_of
from tests.servers import clean_env

CONTACT = "abuse@receipts.example"


@pytest.fixture
def clock() -> Clock:
    return Clock(cli.parse_until_ms("2026-11-21T10:00:00Z"))


@pytest.fixture
def client(store: Store, receipt_root: str, clock: Clock) -> Any:
    settings = Settings(
        redis_url="redis://injected", receipt_root=receipt_root, operator_contact=CONTACT, limits=load_limits(None)
    )
    return create_app(settings, store=store, clock_ms=clock).asgi_client


async def run(action: Any, store: Store, capsys: pytest.CaptureFixture[str], **kwargs: Any) -> tuple[int, Any]:
    code = await action(store, argparse.Namespace(**kwargs))
    out = capsys.readouterr().out.strip()
    return code, orjson.loads(out) if out else None


async def create(client: Any, key: Any, label: str) -> Any:
    _, response = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of(label)}), headers=auth(key)
    )
    return response


async def test_list_shows_hashes_and_states_never_keys(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    key = await create_project_key(store.keys, project_name="p", plan="basic")
    code, listed = await run(cli._keys_list, store, capsys, project=key["project_id"])
    assert code == 0
    assert listed["keys"] == [
        {
            "key_hash": key["key_hash"],
            "actor_id": key["actor_id"],
            "plan": "basic",
            "created_at": listed["keys"][0]["created_at"],
            "state": "active",
            "suspended_until": None,
        }
    ]
    assert key["api_key"] not in orjson.dumps(listed).decode()
    code, _ = await run(cli._keys_list, store, capsys, project="prj_01AAAAAAAAAAAAAAAAAAAAAAAA")
    assert code == 1


async def test_reissue_revokes_old_keys_and_keeps_the_project(
    store: Store, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    key = await create_project_key(store.keys, project_name="p", plan="pro")
    first = (await create(client, key, "a")).json["receipt"]
    code, reissued = await run(cli._keys_reissue, store, capsys, project=key["project_id"])
    assert code == 0
    assert reissued["project_id"] == key["project_id"]
    assert reissued["plan"] == "pro"
    assert reissued["revoked_key_hashes"] == [key["key_hash"]]
    assert reissued["api_key"] != key["api_key"]
    assert (await create(client, key, "b")).status_code == 401, "the old key is revoked"
    second = await create(client, reissued, "b")
    assert second.status_code == 201
    assert second.json["receipt"]["prev_receipt_hash"] == first["receipt_hash"], "same project, same chain"
    code, listed = await run(cli._keys_list, store, capsys, project=key["project_id"])
    assert [k["state"] for k in listed["keys"]] == ["revoked", "active"]


async def test_suspension_forever_then_lifted(store: Store, client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    key = await create_project_key(store.keys, project_name="p", plan="free")
    code, result = await run(cli._keys_suspend, store, capsys, project=key["project_id"], until=None)
    assert (code, result["suspended_until"], result["keys_updated"]) == (0, "forever", 1)
    response = await create(client, key, "a")
    assert response.status_code == 403
    assert response.json["error"]["code"] == "forbidden"
    assert "suspended until further notice" in response.json["error"]["message"]
    assert CONTACT in response.json["error"]["message"]
    _, verify = await client.post("/v1/verify", content=b'{"receipt_id": "x", "input_hash": "y"}', headers=auth(key))
    assert verify.status_code == 403
    code, reissued = await run(cli._keys_reissue, store, capsys, project=key["project_id"])
    assert (await create(client, reissued, "b")).status_code == 403, "a reissued key inherits the suspension"
    code, _ = await run(cli._keys_unsuspend, store, capsys, project=key["project_id"])
    assert code == 0
    assert (await create(client, reissued, "c")).status_code == 201


async def test_timed_suspension_ends_by_itself(
    store: Store, client: Any, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    key = await create_project_key(store.keys, project_name="p", plan="free")
    code, result = await run(cli._keys_suspend, store, capsys, project=key["project_id"], until="2026-11-21T12:00:00Z")
    assert result["suspended_until"] == "2026-11-21T12:00:00.000Z"
    response = await create(client, key, "a")
    assert response.status_code == 403
    assert "until 2026-11-21T12:00:00.000Z" in response.json["error"]["message"]
    clock.now = cli.parse_until_ms("2026-11-21T12:00:00Z")
    assert (await create(client, key, "a")).status_code == 201
    code, _ = await run(cli._keys_suspend, store, capsys, project=key["project_id"], until="next tuesday")
    assert code == 2


async def test_delete_receipt_leaves_the_chain_reporting_a_missing_link(
    store: Store, client: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    key = await create_project_key(store.keys, project_name="p", plan="free")
    first = (await create(client, key, "a")).json["receipt"]
    second = (await create(client, key, "b")).json["receipt"]
    with caplog.at_level(logging.WARNING, logger="eps.audit"):
        code, event = await run(
            cli._receipts_delete, store, capsys, receipt_id=first["receipt_id"], reason="contained an e-mail address"
        )
    assert code == 0
    assert event["receipt_id"] == first["receipt_id"]
    assert event["reason"] == "contained an e-mail address"
    assert first["receipt_hash"] in caplog.text
    assert first["input_hash"] not in caplog.text, "the log names the receipt, never its content"
    _, read = await client.get(f"/v1/receipts/{first['receipt_id']}")
    assert read.status_code == 404
    _, by_hash = await client.get(f"/v1/receipts/{first['receipt_hash']}?project_id={key['project_id']}")
    assert by_hash.status_code == 404, "the hash index entry went with it"
    _, verify = await client.post(
        "/v1/verify",
        content=orjson.dumps({"receipt_id": second["receipt_id"], "input_hash": hash_of("b")}),
        headers=auth(key),
    )
    assert verify.json["checks"]["chain_link"] is False
    assert verify.json["chain"]["prev_found"] is False
    assert verify.json["checks"]["signature"] is True
    code, _ = await run(cli._receipts_delete, store, capsys, receipt_id=first["receipt_id"], reason="again")
    assert code == 1, "deleting twice finds nothing the second time"
    third = await create(client, key, "c")
    assert third.json["receipt"]["prev_receipt_hash"] == second["receipt_hash"], "the chain goes on"


@pytest.mark.slow
def test_operator_commands_as_subprocesses(redis_url: str) -> None:
    env = clean_env({"REDIS_URL": redis_url})  # the runner's environment, no service configuration

    def service(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "service.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )

    created = orjson.loads(service("keys", "create", "--project", "acme", "--plan", "basic").stdout)
    listed = service("keys", "list", "--project", created["project_id"])
    assert listed.returncode == 0
    assert orjson.loads(listed.stdout)["keys"][0]["key_hash"] == created["key_hash"]
    assert created["api_key"] not in listed.stdout
    suspended = service("keys", "suspend", "--project", created["project_id"], "--until", "2099-01-01")
    assert orjson.loads(suspended.stdout)["suspended_until"] == "2099-01-01T00:00:00.000Z"
    assert (
        orjson.loads(service("keys", "list", "--project", created["project_id"]).stdout)["keys"][0]["state"]
        == "suspended"
    )
    assert service("keys", "unsuspend", "--project", created["project_id"]).returncode == 0
    reissued = service("keys", "reissue", "--project", created["project_id"])
    assert orjson.loads(reissued.stdout)["api_key"].startswith("eps_")
    missing = service("receipts", "delete", "rcpt_01AAAAAAAAAAAAAAAAAAAAAAAA", "--reason", "test")
    assert missing.returncode == 1
    assert "no receipt" in missing.stderr


async def test_resending_a_deleted_receipts_request_issues_a_new_receipt(
    store: Store, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deletion leaves the idempotency record behind; it must not answer with a missing receipt."""
    key = await create_project_key(store.keys, project_name="p", plan="free")
    first = (await create(client, key, "a")).json["receipt"]
    await run(cli._receipts_delete, store, capsys, receipt_id=first["receipt_id"], reason="test")
    again = await create(client, key, "a")
    assert again.status_code == 201
    assert again.json["receipt"]["receipt_id"] != first["receipt_id"]
    replay = await create(client, key, "a")
    assert replay.status_code == 200
    assert replay.json["receipt"]["receipt_id"] == again.json["receipt"]["receipt_id"]


# --- naming a project: unique names, the same --project for every keys command -----------


async def test_concurrent_creates_of_one_name_make_one_project(store: Store) -> None:
    results = await asyncio.gather(
        *(create_project_key(store.keys, project_name="demo", plan="free", unique_name=True) for _ in range(8)),
        return_exceptions=True,
    )
    created = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, ProjectNameTaken)]
    assert len(created) == 1 and len(refused) == 7, results
    assert {r.project_id for r in refused} == {created[0]["project_id"]}
    named = [name async for name in store.client.scan_iter(match="p:*") if await store.client.hget(name, "name")]
    assert len(named) == 1, "the refused creates wrote no project"
    assert len(await store.keys.list_project_keys(created[0]["project_id"])) == 1


async def test_keys_create_refuses_a_taken_name(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    code, first = await run(cli._keys_create, store, capsys, project="acme", plan="basic")
    assert code == 0
    code = await cli._keys_create(store, argparse.Namespace(project="acme", plan="pro"))
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert f"a project named 'acme' already exists ({first['project_id']})" in captured.err
    for bad in ("", "prj_01AAAAAAAAAAAAAAAAAAAAAAAA"):
        assert await cli._keys_create(store, argparse.Namespace(project=bad, plan="free")) == 2
    assert "--project must be a name" in capsys.readouterr().err


async def test_every_keys_command_takes_the_project_by_id_or_name(
    store: Store, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, created = await run(cli._keys_create, store, capsys, project="acme", plan="pro")
    project_id = created["project_id"]
    for ref in (project_id, "acme"):
        code, listed = await run(cli._keys_list, store, capsys, project=ref)
        assert (code, listed["project_id"]) == (0, project_id)
    code, result = await run(cli._keys_suspend, store, capsys, project="acme", until=None)
    assert (code, result["project_id"]) == (0, project_id)
    assert (await create(client, created, "a")).status_code == 403
    code, result = await run(cli._keys_unsuspend, store, capsys, project="acme")
    assert (code, result["project_id"]) == (0, project_id)
    code, reissued = await run(cli._keys_reissue, store, capsys, project="acme")
    assert (code, reissued["project_id"]) == (0, project_id)
    assert (await create(client, reissued, "b")).status_code == 201

    for action, extra in (
        (cli._keys_list, {}),
        (cli._keys_reissue, {}),
        (cli._keys_suspend, {"until": None}),
        (cli._keys_unsuspend, {}),
    ):
        assert await action(store, argparse.Namespace(project="nobody", **extra)) == 1
        assert "no project named 'nobody'" in capsys.readouterr().err
        assert await action(store, argparse.Namespace(project="prj_01AAAAAAAAAAAAAAAAAAAAAAAA", **extra)) == 1
        assert "no project prj_01AAAAAAAAAAAAAAAAAAAAAAAA" in capsys.readouterr().err
