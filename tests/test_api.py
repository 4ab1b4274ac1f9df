"""Every endpoint and status code of docs/api.md, on fakeredis and a real redis-server."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from execution_proof.kv.store import Store
from execution_proof.receipts.apikeys import hash_api_key
from execution_proof.receipts.canonical import compute_receipt_hash
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import KeyCertificate, root_kid
from execution_proof.runtime.settings import ConfigError, Settings, require_receipt_root
from execution_proof.transparency.signer import SeedSigner, write_key_file
from execution_proof.usecases.signing_keys import RootUnavailable
from execution_proof.web.app import create_app
from tests.clock import Clock
from tests.conftest import TEST_ROOT, auth, hash_of
from tests.receipt_keys import TEST_ROOT_KID, assert_signed_by_test_root, in_key_registry

TEST_ROOT_PUBLIC = b64url_encode(TEST_ROOT.public_key())
NOON = 1_790_000_000_000

H1, H2, H3 = hash_of("input-1"), hash_of("output-1"), hash_of("params-1")
RECEIPT_FIELDS = [
    "receipt_id",
    "project_id",
    "actor_id",
    "created_at",
    "input_hash",
    "output_hash",
    "params_hash",
    "env_hash",
    "code_ref",
    "run_id",
    "tags",
    "receipt_kind",
    "status",
    "prev_receipt_hash",
    "receipt_hash",
    "signature",
    "sig_kid",
    "chain_status",
    "expected_prev_receipt_hash",
]


async def create(client: Any, key: Any, body: dict[str, Any], **headers: str) -> Any:
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers={**auth(key), **headers})
    return response


RATE_COUNTER_PREFIXES = (b"m:", b"ip:")


async def snapshot(store: Store, *, ignore_rate_counters: bool = False) -> dict[bytes, Any]:
    """Every key and value in the store, to prove a rejected request changed nothing.

    Per-minute request counters may be left out: a replay is a served request and counts
    against them, while it must not touch receipts, tips, indexes or the monthly quota. The
    receipt keys' registry is left out: the app writes it when it starts, at its first request.
    """
    out: dict[bytes, Any] = {}
    async for key in store.client.scan_iter(count=1000):
        if (ignore_rate_counters and key.startswith(RATE_COUNTER_PREFIXES)) or in_key_registry(key):
            continue
        kind = await store.client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "string":
            out[key] = await store.client.get(key)
        elif kind == "hash":
            out[key] = await store.client.hgetall(key)
        elif kind == "set":
            out[key] = await store.client.smembers(key)
        else:
            out[key] = kind
    return out


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["request_id"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text
    return dict(body)


# --- entry information and keys ---------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/health"])
async def test_entry_information(client: Any, path: str) -> None:
    _, response = await client.get(path)
    assert response.status_code == 200
    body = response.json
    for field in ("product", "subtitle", "env", "docs_url"):
        assert isinstance(body[field], str) and body[field]
    assert set(body["endpoints"]) == {"public_key", "create_receipt", "get_receipt", "verify"}
    assert response.headers["x-request-id"].startswith("req_")


async def test_public_key_lists_every_process_key_with_its_certificate(
    client: Any, store: Store, settings: Settings, api_key: dict[str, Any]
) -> None:
    """Each serving process's key, certified by the root (``TEST_ROOT`` here); every process
    lists every process's keys and answers ``active_kid`` with its own."""
    other = create_app(settings, store=store).asgi_client  # another process of the deployment
    made = (await create(other, api_key, {"input_hash": H1})).json["receipt"]
    _, response = await client.get("/v1/public-key")
    assert response.status_code == 200
    body = response.json
    assert set(body) == {"keys", "active_kid", "roots", "revocations"}
    assert body["roots"] == [{"kid": TEST_ROOT_KID, "alg": "Ed25519", "public_key_base64url": TEST_ROOT_PUBLIC}]
    assert body["revocations"] == []
    kids = [k["kid"] for k in body["keys"]]
    assert len(kids) == 2 and body["active_kid"] in kids and made["sig_kid"] in kids
    assert body["active_kid"] != made["sig_kid"], "each process signs with a key of its own"
    for entry in body["keys"]:
        assert set(entry) == {"kid", "alg", "public_key_base64url", "certificate"} and entry["alg"] == "Ed25519"
        certificate = KeyCertificate.parse(entry["certificate"])
        assert (certificate.kid, b64url_encode(certificate.public_key)) == (entry["kid"], entry["public_key_base64url"])
        assert certificate.root_kid == TEST_ROOT_KID and certificate.signed_by(TEST_ROOT.public_key())
    assert_signed_by_test_root(made, body)
    assert "private" not in response.text


async def test_without_a_usable_receipt_key_creates_are_500_and_write_nothing(
    store: Store, api_key: dict[str, Any], tmp_path: Path
) -> None:
    """With ``REDIS_URL`` and no ``RECEIPT_ROOT_KEY`` the server does not start. A process
    whose key has expired, and whose root cannot certify a new one (its key file gone),
    refuses creates with 500 ``signing_key_unavailable`` and ``Retry-After``, writes
    nothing, and still publishes its keys."""
    with pytest.raises(ConfigError, match="RECEIPT_ROOT_KEY is not set"):
        require_receipt_root(Settings(redis_url="redis://injected"))
    root_file = tmp_path / "root.key"
    write_key_file(root_file, b64url_encode(TEST_ROOT.seed))
    clock = Clock(NOON)
    app = create_app(
        Settings(redis_url="redis://injected", receipt_root=f"file:{root_file}"), store=store, clock_ms=clock
    )
    client = app.asgi_client
    assert (await create(client, api_key, {"input_hash": H1})).status_code == 201
    keys = app.ctx.services.receipt_keys
    root_file.unlink()
    clock.now += 86_400_000 + 1  # past the key's certificate (a day)
    with pytest.raises(RootUnavailable, match="RECEIPT_ROOT_KEY file:"):
        await keys.renew()
    await keys.refresh()  # the key state is read: what refuses is the key's expiry
    before = await snapshot(store)
    response = await create(client, api_key, {"input_hash": H2})
    assert_error(response, 500, "signing_key_unavailable")
    assert response.headers["retry-after"].isdigit() and int(response.headers["retry-after"]) >= 1
    assert await snapshot(store) == before
    _, published = await client.get("/v1/public-key")
    assert published.status_code == 200 and [k["kid"] for k in published.json["keys"]] == [keys.active_kid]
    _, health = await client.get("/health")
    assert health.json["keys"] == "unavailable"
    _, response = await client.get("/")
    assert response.status_code == 200


# --- creating receipts ------------------------------------------------------------------


async def test_create_returns_every_field_and_a_valid_signature(client: Any, api_key: dict[str, Any]) -> None:
    response = await create(client, api_key, {"input_hash": H1, "tags": {"workflow_stage": "build", "x": None}})
    assert response.status_code == 201, response.text
    body = response.json
    receipt = body["receipt"]
    assert list(receipt) == RECEIPT_FIELDS
    assert body["ok"] is True
    assert receipt["project_id"] == api_key["project_id"]
    assert receipt["actor_id"] == api_key["actor_id"]
    assert receipt["status"] == "issued"
    assert receipt["tags"] == {"workflow_stage": "build"}
    for field in ("output_hash", "params_hash", "env_hash", "code_ref", "run_id", "receipt_kind", "prev_receipt_hash"):
        assert receipt[field] is None
    assert receipt["receipt_id"].startswith("rcpt_") and len(receipt["receipt_id"]) == 31
    assert receipt["created_at"].endswith("Z") and len(receipt["created_at"]) == 24
    assert receipt["receipt_hash"] == compute_receipt_hash(receipt)
    _, published = await client.get("/v1/public-key")
    assert_signed_by_test_root(receipt, published.json)
    assert "=" not in receipt["signature"]
    assert body["idempotency"]["hit"] is False and body["idempotency"]["key"].startswith("ik_")
    assert body["chain"] == {"status": "main", "expected_prev_receipt_hash": None, "prev_receipt_hash": None}
    _, read = await client.get(f"/v1/receipts/{receipt['receipt_id']}")
    assert read.status_code == 200
    assert read.json == {"ok": True, "receipt": receipt}


async def test_all_optional_fields_are_stored(client: Any, api_key: dict[str, Any]) -> None:
    body = {
        "input_hash": H1,
        "output_hash": H2.upper().replace("SHA256:", "sha256:"),
        "params_hash": H3,
        "env_hash": hash_of("env"),
        "code_ref": "git:4f2a9c1",
        "run_id": "nightly-42",
        "tags": {"event_type": "release", "template_version": "1"},
        "receipt_kind": "release",
        "project_id": api_key["project_id"],
        "actor_id": api_key["actor_id"],
    }
    response = await create(client, api_key, body)
    assert response.status_code == 201, response.text
    receipt = response.json["receipt"]
    assert receipt["output_hash"] == H2  # hex is normalised to lowercase
    for field in ("params_hash", "env_hash", "code_ref", "run_id", "tags", "receipt_kind"):
        assert receipt[field] == body[field]


async def test_chain_placement_main_then_branch(client: Any, api_key: dict[str, Any]) -> None:
    first = (await create(client, api_key, {"input_hash": hash_of("a")})).json["receipt"]
    second = (await create(client, api_key, {"input_hash": hash_of("b")})).json["receipt"]
    assert second["prev_receipt_hash"] == first["receipt_hash"] == second["expected_prev_receipt_hash"]
    assert second["chain_status"] == "main"
    explicit = await create(client, api_key, {"input_hash": hash_of("c"), "prev_receipt_hash": second["receipt_hash"]})
    assert explicit.status_code == 201
    third = explicit.json["receipt"]
    assert third["chain_status"] == "main" and third["prev_receipt_hash"] == second["receipt_hash"]
    branch = await create(client, api_key, {"input_hash": hash_of("d"), "prev_receipt_hash": first["receipt_hash"]})
    assert branch.status_code == 201
    b = branch.json["receipt"]
    assert b["chain_status"] == "branch"
    assert b["prev_receipt_hash"] == first["receipt_hash"]
    assert b["expected_prev_receipt_hash"] == third["receipt_hash"]
    assert branch.json["chain"] == {
        "status": "branch",
        "expected_prev_receipt_hash": third["receipt_hash"],
        "prev_receipt_hash": first["receipt_hash"],
    }
    after = (await create(client, api_key, {"input_hash": hash_of("e")})).json["receipt"]
    assert after["prev_receipt_hash"] == third["receipt_hash"], "a branch must not move the main tip"


async def test_prev_given_on_a_project_without_tip_is_a_branch(client: Any, api_key: dict[str, Any]) -> None:
    response = await create(client, api_key, {"input_hash": H1, "prev_receipt_hash": hash_of("elsewhere")})
    assert response.status_code == 201
    receipt = response.json["receipt"]
    assert receipt["chain_status"] == "branch" and receipt["expected_prev_receipt_hash"] is None
    first_main = (await create(client, api_key, {"input_hash": H2})).json["receipt"]
    assert first_main["prev_receipt_hash"] is None and first_main["chain_status"] == "main"


async def test_replay_returns_the_same_receipt_bytes(client: Any, api_key: dict[str, Any], store: Store) -> None:
    body = {"input_hash": H1, "tags": {"b": "2", "a": "1"}, "receipt_kind": "document"}
    first = await create(client, api_key, body)
    assert first.status_code == 201
    before = await snapshot(store, ignore_rate_counters=True)
    again = await create(
        client, api_key, {"receipt_kind": "document", "tags": {"a": "1", "b": "2", "c": None}, "input_hash": H1}
    )
    assert again.status_code == 200
    assert again.json["idempotency"] == {"hit": True, "key": first.json["idempotency"]["key"]}
    raw_first = first.content.split(b'"receipt":', 1)[1].split(b',"idempotency"', 1)[0]
    raw_again = again.content.split(b'"receipt":', 1)[1].split(b',"idempotency"', 1)[0]
    assert raw_first == raw_again
    assert await snapshot(store, ignore_rate_counters=True) == before, "a replay writes nothing but counters"


async def test_logical_input_differences_are_new_receipts(client: Any, api_key: dict[str, Any]) -> None:
    base = {"input_hash": H1}
    first = await create(client, api_key, base)
    variants = [
        {**base, "receipt_kind": "release"},
        {**base, "run_id": "r1"},
        {**base, "tags": {"k": "v"}},
        {**base, "prev_receipt_hash": first.json["receipt"]["receipt_hash"]},
    ]
    for variant in variants:
        response = await create(client, api_key, variant)
        assert response.status_code == 201, variant


async def test_idempotency_key_header(client: Any, api_key: dict[str, Any], store: Store) -> None:
    first = await create(client, api_key, {"input_hash": H1}, **{"Idempotency-Key": "job-7"})
    assert first.status_code == 201
    replay = await create(client, api_key, {"input_hash": H1}, **{"Idempotency-Key": "job-7"})
    assert replay.status_code == 200 and replay.json["receipt"] == first.json["receipt"]
    before = await snapshot(store)
    conflict = await create(client, api_key, {"input_hash": H2}, **{"Idempotency-Key": "job-7"})
    assert_error(conflict, 409, "idempotency_conflict")
    after = await snapshot(store)
    changed = {k for k in after if after[k] != before.get(k)}
    assert all(k.startswith(b"ip:") for k in changed), "only the address's request counter may move"
    other = await create(client, api_key, {"input_hash": H1}, **{"Idempotency-Key": "job-8"})
    assert other.status_code == 201, "a new header key is a new receipt"
    bad = await create(client, api_key, {"input_hash": H1}, **{"Idempotency-Key": "x" * 300})
    assert_error(bad, 400, "bad_request")


async def test_replays_are_scoped_to_the_project(client: Any, store: Store, api_key: dict[str, Any]) -> None:
    from execution_proof.kv.accounts import create_project_key

    other = await create_project_key(store.keys, project_name="other", plan="free")
    a = await create(client, api_key, {"input_hash": H1})
    b = await create(client, other, {"input_hash": H1})
    assert a.status_code == b.status_code == 201
    assert a.json["receipt"]["receipt_id"] != b.json["receipt"]["receipt_id"]


# --- validation: 400, nothing written ---------------------------------------------------

INVALID_BODIES = [
    ({}, "input_hash"),
    ({"input_hash": None}, "input_hash"),
    ({"input_hash": "sha256:abc"}, "input_hash"),
    ({"input_hash": "sha1:" + "0" * 64}, "input_hash"),
    ({"input_hash": "sha256:" + "g" * 64}, "input_hash"),
    ({"input_hash": "sha256:" + "0" * 65}, "input_hash"),
    ({"input_hash": 12}, "input_hash"),
    ({"input_hash": H1, "output_hash": "nope"}, "output_hash"),
    ({"input_hash": H1, "params_hash": ["x"]}, "params_hash"),
    ({"input_hash": H1, "env_hash": "sha256:" + "0" * 63}, "env_hash"),
    ({"input_hash": H1, "prev_receipt_hash": "sha256:"}, "prev_receipt_hash"),
    ({"input_hash": H1, "code_ref": "x" * 257}, "code_ref"),
    ({"input_hash": H1, "run_id": "y" * 257}, "run_id"),
    ({"input_hash": H1, "run_id": 5}, "run_id"),
    ({"input_hash": H1, "tags": ["a"]}, "tags"),
    ({"input_hash": H1, "tags": "a=b"}, "tags"),
    ({"input_hash": H1, "tags": {"a": 1}}, "tags"),
    ({"input_hash": H1, "tags": {"a": {"b": "c"}}}, "tags"),
    ({"input_hash": H1, "tags": {"": "v"}}, "tags"),
    ({"input_hash": H1, "tags": {"k" * 65: "v"}}, "tags"),
    ({"input_hash": H1, "tags": {"k": ""}}, "tags"),
    ({"input_hash": H1, "tags": {"k": "v" * 257}}, "tags"),
    ({"input_hash": H1, "tags": {f"k{i}": "v" for i in range(21)}}, "tags"),
    ({"input_hash": H1, "tags": {f"k{i}": "v" * 200 for i in range(11)}}, "tags"),
    ({"input_hash": H1, "receipt_kind": "workflow_audit"}, "receipt_kind"),
    ({"input_hash": H1, "receipt_kind": 3}, "receipt_kind"),
    ({"input_hash": H1, "project_id": 7}, "project_id"),
]


@pytest.mark.parametrize(("body", "field"), INVALID_BODIES)
async def test_invalid_fields_are_400_and_write_nothing(
    client: Any, api_key: dict[str, Any], store: Store, body: dict[str, Any], field: str
) -> None:
    before = await snapshot(store)
    response = await create(client, api_key, body)
    error = assert_error(response, 400, "bad_request")
    assert error["error"]["details"]["field"] == field
    assert await snapshot(store) == before


async def test_limits_at_the_edge_are_accepted(client: Any, api_key: dict[str, Any]) -> None:
    body = {
        "input_hash": H1,
        "code_ref": "c" * 256,
        "run_id": "r" * 256,
        "tags": {f"{i:02d}" + "k" * 62: "v" * 30 for i in range(20)},
    }
    assert len(orjson.dumps(body["tags"])) <= 2048
    response = await create(client, api_key, body)
    assert response.status_code == 201, response.text
    assert len(response.json["receipt"]["tags"]) == 20


async def test_receipt_kind_error_names_allowed_values(client: Any, api_key: dict[str, Any]) -> None:
    response = await create(client, api_key, {"input_hash": H1, "receipt_kind": "workflow_audit"})
    assert response.json["error"]["details"]["allowed"] == ["release", "document", "audit_pack"]


async def test_unknown_fields_are_rejected(client: Any, api_key: dict[str, Any]) -> None:
    response = await create(client, api_key, {"input_hash": H1, "raw_data": "secret"})
    error = assert_error(response, 400, "bad_request")
    assert error["error"]["details"]["fields"] == ["raw_data"]


@pytest.mark.parametrize(
    "raw",
    [b"{", b"[]", b'"x"', b"null", b"\xff\xfe", b'{"input_hash": "\\ud800"}', b"", b"1e999999"],
)
async def test_malformed_json_is_400(client: Any, api_key: dict[str, Any], raw: bytes) -> None:
    _, response = await client.post("/v1/receipts", content=raw, headers=auth(api_key))
    assert_error(response, 400, "bad_request")


FORBIDDEN = [
    ("code_ref", "contact alice@example.com", "email"),
    ("run_id", "card 4111 1111 1111 1111", "card_number"),
    ("run_id", "call +44 20 7946 0958", "phone_number"),
    ("code_ref", "-----BEGIN RSA PRIVATE KEY-----", "private_key"),
    ("code_ref", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
    ("run_id", "Bearer abcdefghijklmnop", "bearer_token"),
    ("code_ref", "AKIAIOSFODNN7EXAMPLE", "cloud_credential"),
    ("code_ref", "ghp_" + "a" * 36, "cloud_credential"),
    ("run_id", "eps_" + "A" * 43, "api_key"),
]


@pytest.mark.parametrize(("field", "value", "kind"), FORBIDDEN)
async def test_forbidden_content_is_rejected_without_echo(
    client: Any, api_key: dict[str, Any], store: Store, field: str, value: str, kind: str
) -> None:
    before = await snapshot(store)
    response = await create(client, api_key, {"input_hash": H1, field: value})
    error = assert_error(response, 400, "forbidden_content")
    assert error["error"]["details"] == {"field": field, "kind": kind}
    assert value not in response.text
    assert await snapshot(store) == before


async def test_forbidden_content_in_tags(client: Any, api_key: dict[str, Any]) -> None:
    response = await create(client, api_key, {"input_hash": H1, "tags": {"owner": "bob@example.org"}})
    error = assert_error(response, 400, "forbidden_content")
    assert error["error"]["details"] == {"field": "tags.owner", "kind": "email"}
    response = await create(client, api_key, {"input_hash": H1, "tags": {"bob@example.org": "x"}})
    error = assert_error(response, 400, "forbidden_content")
    assert error["error"]["details"] == {"field": "tags", "kind": "email"}
    assert "bob@example.org" not in response.text


@pytest.mark.parametrize(
    "value",
    ["git:4f2a9c1e8b", "v1.2.3", "build 2026-11-21", "1234567890123", "ci/job/88123", "+15", "refs/heads/main"],
)
async def test_ordinary_values_pass_the_scan(client: Any, api_key: dict[str, Any], value: str) -> None:
    response = await create(client, api_key, {"input_hash": H1, "code_ref": value})
    assert response.status_code == 201, response.text


# --- authentication and scope -----------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer short",
        "Bearer " + "x" * 257,
        "Bearer eps_unknownunknownunknown",
    ],
)
async def test_bad_authorization_is_401(client: Any, header: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if header is not None:
        headers["Authorization"] = header
    _, response = await client.post("/v1/receipts", content=orjson.dumps({"input_hash": H1}), headers=headers)
    assert_error(response, 401, "unauthorized")
    _, response = await client.post(
        "/v1/verify", content=orjson.dumps({"receipt_id": "rcpt_x", "input_hash": H1}), headers=headers
    )
    assert_error(response, 401, "unauthorized")


async def test_revoked_key_is_401(client: Any, api_key: dict[str, Any], store: Store) -> None:
    assert (await create(client, api_key, {"input_hash": H1})).status_code == 201
    assert await store.keys.revoke_api_key(hash_api_key(api_key["api_key"]))
    assert_error(await create(client, api_key, {"input_hash": H2}), 401, "unauthorized")


async def test_raw_key_is_not_stored(client: Any, api_key: dict[str, Any], store: Store) -> None:
    await create(client, api_key, {"input_hash": H1})
    dump = orjson.dumps({k.decode(): repr(v) for k, v in (await snapshot(store)).items()})
    assert api_key["api_key"].encode() not in dump
    assert api_key["key_hash"].removeprefix("sha256:").encode() in dump


@pytest.mark.parametrize("field", ["project_id", "actor_id"])
async def test_mismatching_debug_ids_are_403(client: Any, api_key: dict[str, Any], store: Store, field: str) -> None:
    before = await snapshot(store)
    response = await create(client, api_key, {"input_hash": H1, field: "prj_01AAAAAAAAAAAAAAAAAAAAAAAA"})
    assert_error(response, 403, "forbidden")
    assert await snapshot(store) == before


async def test_project_that_no_longer_exists_is_404(client: Any, api_key: dict[str, Any], store: Store) -> None:
    from execution_proof.kv.keys import project_key

    await store.client.delete(project_key(api_key["project_id"]))
    assert_error(await create(client, api_key, {"input_hash": H1}), 404, "not_found")


async def test_wrong_content_type_is_415(client: Any, api_key: dict[str, Any]) -> None:
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/jsonx", None):
        headers = {"Authorization": f"Bearer {api_key['api_key']}"}
        if content_type:
            headers["Content-Type"] = content_type
        _, response = await client.post("/v1/receipts", content=orjson.dumps({"input_hash": H1}), headers=headers)
        assert_error(response, 415, "unsupported_media_type")
    headers = {**auth(api_key), "Content-Type": "Application/JSON; charset=utf-8"}
    _, response = await client.post("/v1/receipts", content=orjson.dumps({"input_hash": H1}), headers=headers)
    assert response.status_code == 201


async def test_body_over_8kb_on_verify_is_413(client: Any, api_key: dict[str, Any]) -> None:
    body = orjson.dumps({"receipt_id": "rcpt_x", "input_hash": H1, "pad": "x" * 9000})
    _, response = await client.post("/v1/verify", content=body, headers=auth(api_key))
    assert_error(response, 413, "payload_too_large")


# --- reading receipts -------------------------------------------------------------------


async def test_unknown_receipt_is_404(client: Any) -> None:
    for ref in (
        "rcpt_01AAAAAAAAAAAAAAAAAAAAAAAA",
        "nope",
        "rcpt_",
        "sha256:" + "0" * 64 + "?project_id=prj_01AAAAAAAAAAAAAAAAAAAAAAAA",
    ):
        _, response = await client.get(f"/v1/receipts/{ref}")
        assert_error(response, 404, "not_found")


async def test_read_by_hash_within_project(client: Any, api_key: dict[str, Any]) -> None:
    receipt = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_hash']}?project_id={receipt['project_id']}")
    assert response.status_code == 200 and response.json["receipt"] == receipt
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_hash']}")
    assert_error(response, 400, "bad_request")
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_hash']}?project_id=prj_01AAAAAAAAAAAAAAAAAAAAAAAA")
    assert_error(response, 404, "not_found")


async def test_unknown_path_and_wrong_method(client: Any) -> None:
    _, response = await client.get("/v2/anything")
    assert_error(response, 404, "not_found")
    _, response = await client.delete("/v1/receipts/rcpt_01AAAAAAAAAAAAAAAAAAAAAAAA")
    assert_error(response, 405, "method_not_allowed")
    _, response = await client.get("/v1/verify")
    assert_error(response, 405, "method_not_allowed")


# --- verify -----------------------------------------------------------------------------


async def verify(client: Any, key: Any, body: dict[str, Any]) -> Any:
    _, response = await client.post("/v1/verify", content=orjson.dumps(body), headers=auth(key))
    return response


async def test_verify_all_checks_pass(client: Any, api_key: dict[str, Any]) -> None:
    first = (await create(client, api_key, {"input_hash": H1, "output_hash": H2})).json["receipt"]
    second = (await create(client, api_key, {"input_hash": H3})).json["receipt"]
    response = await verify(client, api_key, {"receipt_id": first["receipt_id"], "input_hash": H1, "output_hash": H2})
    assert response.status_code == 200
    assert response.json == {
        "ok": True,
        "receipt_id": first["receipt_id"],
        "checks": {"signature": True, "hash_match": True, "receipt_hash_recompute": True, "chain_link": True},
        "sig_kid": first["sig_kid"],
        "receipt_hash": first["receipt_hash"],
        "recomputed_receipt_hash": first["receipt_hash"],
        "chain": {"prev_receipt_hash": None, "prev_found": False, "prev_receipt_hash_recompute": False},
    }
    response = await verify(client, api_key, {"receipt_id": second["receipt_id"], "input_hash": H3})
    assert response.json["ok"] is True
    assert response.json["chain"] == {
        "prev_receipt_hash": first["receipt_hash"],
        "prev_found": True,
        "prev_receipt_hash_recompute": True,
    }


async def test_verify_mismatching_hashes_is_ok_false(client: Any, api_key: dict[str, Any]) -> None:
    receipt = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    response = await verify(client, api_key, {"receipt_id": receipt["receipt_id"], "input_hash": H2})
    assert response.status_code == 200
    assert response.json["ok"] is False
    assert response.json["checks"] == {
        "signature": True,
        "hash_match": False,
        "receipt_hash_recompute": True,
        "chain_link": True,
    }
    response = await verify(client, api_key, {"receipt_id": receipt["receipt_id"], "input_hash": H1, "output_hash": H2})
    assert response.json["checks"]["hash_match"] is False, "output_hash given but the receipt has none"


async def test_verify_detects_a_tampered_record(client: Any, api_key: dict[str, Any], store: Store) -> None:
    from execution_proof.kv.keys import receipt_key

    first = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    second = (await create(client, api_key, {"input_hash": H2})).json["receipt"]
    tampered = {**first, "tags": {"changed": "yes"}}
    await store.client.set(receipt_key(first["receipt_id"]), orjson.dumps(tampered))
    response = await verify(client, api_key, {"receipt_id": first["receipt_id"], "input_hash": H1})
    assert response.json["ok"] is False
    assert response.json["checks"]["receipt_hash_recompute"] is False
    assert response.json["checks"]["signature"] is True, "the stored hash is still signed"
    assert response.json["recomputed_receipt_hash"] != first["receipt_hash"]
    response = await verify(client, api_key, {"receipt_id": second["receipt_id"], "input_hash": H2})
    assert response.json["checks"]["chain_link"] is False
    assert response.json["chain"]["prev_found"] is True
    assert response.json["chain"]["prev_receipt_hash_recompute"] is False
    forged = {**second, "signature": first["signature"]}
    await store.client.set(receipt_key(second["receipt_id"]), orjson.dumps(forged))
    response = await verify(client, api_key, {"receipt_id": second["receipt_id"], "input_hash": H2})
    assert response.json["checks"]["signature"] is False


async def test_verify_unknown_kid_fails_closed(client: Any, api_key: dict[str, Any], store: Store) -> None:
    from execution_proof.kv.keys import receipt_key

    receipt = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    await store.client.set(receipt_key(receipt["receipt_id"]), orjson.dumps({**receipt, "sig_kid": "nobody"}))
    response = await verify(client, api_key, {"receipt_id": receipt["receipt_id"], "input_hash": H1})
    assert response.json["checks"]["signature"] is False and response.json["ok"] is False


async def test_verify_branch_with_missing_prev(client: Any, api_key: dict[str, Any]) -> None:
    receipt = (await create(client, api_key, {"input_hash": H1, "prev_receipt_hash": hash_of("ghost")})).json["receipt"]
    response = await verify(client, api_key, {"receipt_id": receipt["receipt_id"], "input_hash": H1})
    assert response.json["checks"]["chain_link"] is False
    assert response.json["chain"] == {
        "prev_receipt_hash": hash_of("ghost"),
        "prev_found": False,
        "prev_receipt_hash_recompute": False,
    }


async def test_verify_errors(client: Any, api_key: dict[str, Any], store: Store) -> None:
    from execution_proof.kv.accounts import create_project_key

    receipt = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    other = await create_project_key(store.keys, project_name="other", plan="free")
    assert_error(await verify(client, other, {"receipt_id": receipt["receipt_id"], "input_hash": H1}), 403, "forbidden")
    assert_error(await verify(client, api_key, {"input_hash": H1}), 400, "bad_request")
    assert_error(await verify(client, api_key, {"receipt_id": receipt["receipt_id"]}), 400, "bad_request")
    assert_error(
        await verify(client, api_key, {"receipt_id": receipt["receipt_id"], "input_hash": H1, "output_hash": "x"}),
        400,
        "bad_request",
    )
    assert_error(
        await verify(client, api_key, {"receipt_id": "rcpt_01AAAAAAAAAAAAAAAAAAAAAAAA", "input_hash": H1}),
        404,
        "not_found",
    )
    _, response = await client.post(
        "/v1/verify",
        content=b"{}",
        headers={"Authorization": f"Bearer {api_key['api_key']}", "Content-Type": "text/plain"},
    )
    assert_error(response, 415, "unsupported_media_type")


async def test_verify_receipt_signed_by_a_stopped_process_under_another_root(
    client: Any, api_key: dict[str, Any], store: Store
) -> None:
    """Rotate: a receipt signed by a process that stopped, whose key another root (another
    machine's) certified, still verifies; new receipts are signed by this process's key and
    chain onto it."""
    old_root = SeedSigner.generate()
    old = create_app(Settings(redis_url="r", receipt_root="env:EPS_OLD_ROOT"), store=store)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EPS_OLD_ROOT", b64url_encode(old_root.seed))
        old_receipt = (await create(old.asgi_client, api_key, {"input_hash": H1})).json["receipt"]
    await old.ctx.services.close()  # that process stops
    response = await verify(client, api_key, {"receipt_id": old_receipt["receipt_id"], "input_hash": H1})
    assert response.json["ok"] is True and response.json["sig_kid"] == old_receipt["sig_kid"]
    new_receipt = (await create(client, api_key, {"input_hash": H2})).json["receipt"]
    assert new_receipt["sig_kid"] not in (old_receipt["sig_kid"], None)
    assert new_receipt["prev_receipt_hash"] == old_receipt["receipt_hash"]
    _, published = await client.get("/v1/public-key")
    assert {r["kid"] for r in published.json["roots"]} == {root_kid(old_root.public_key()), TEST_ROOT_KID}
    assert_signed_by_test_root(new_receipt, published.json)


# --- stored records: checked against the id asked for, and decoded safely ---------------------


def corrupt_records(caplog: pytest.LogCaptureFixture, receipt_id: str) -> list[Any]:
    """The error records of corrupt or misplaced stored receipts that name ``receipt_id``."""
    return [
        r
        for r in caplog.records
        if r.name == "eps.records" and r.levelno >= logging.ERROR and r.fields["receipt_id"] == receipt_id  # type: ignore[attr-defined]
    ]


def corrupt_count(route: str) -> float:
    return REGISTRY.get_sample_value("eps_corrupt_records_total", {"route": route}) or 0.0


async def test_a_record_stored_under_another_id_is_refused(
    client: Any, api_key: dict[str, Any], store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Receipt A's stored bytes under receipt B's key: read, verify and the by-hash read
    refuse it (an integrity fault of the server: 500, verify ok:false), logged and counted."""
    from execution_proof.kv.keys import receipt_key

    a = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    b = (await create(client, api_key, {"input_hash": H2})).json["receipt"]
    stored_a = await store.client.get(receipt_key(a["receipt_id"]))
    await store.client.set(receipt_key(b["receipt_id"]), stored_a)
    before = {route: corrupt_count(route) for route in ("receipts.get_receipt", "receipts.verify")}
    caplog.set_level(logging.INFO)

    _, response = await client.get(f"/v1/receipts/{b['receipt_id']}")
    assert_error(response, 500, "internal_error")
    assert a["receipt_id"] not in response.text
    _, response = await client.get(f"/v1/receipts/{b['receipt_hash']}?project_id={b['project_id']}")
    assert_error(response, 500, "internal_error")
    response = await verify(client, api_key, {"receipt_id": b["receipt_id"], "input_hash": H1})
    assert response.status_code == 200
    assert response.json["ok"] is False and response.json["receipt_id"] == b["receipt_id"]
    assert response.json["checks"] == {
        "signature": False,
        "hash_match": False,
        "receipt_hash_recompute": False,
        "chain_link": False,
    }
    assert len(corrupt_records(caplog, b["receipt_id"])) == 3, "one error record per event"
    assert corrupt_count("receipts.get_receipt") == before["receipts.get_receipt"] + 2
    assert corrupt_count("receipts.verify") == before["receipts.verify"] + 1
    # A itself is untouched, and verify names the id it checked.
    response = await verify(client, api_key, {"receipt_id": a["receipt_id"], "input_hash": H1})
    assert response.json["ok"] is True and response.json["receipt_id"] == a["receipt_id"]


async def test_a_record_of_another_project_is_refused_by_the_hash_read(
    client: Any, api_key: dict[str, Any], store: Store
) -> None:
    """The hash index of project P names receipt X, whose stored record says another project."""
    from execution_proof.kv.keys import receipt_key

    receipt = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    moved = {**receipt, "project_id": "prj_01AAAAAAAAAAAAAAAAAAAAAAAA"}
    await store.client.set(receipt_key(receipt["receipt_id"]), orjson.dumps(moved))
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_hash']}?project_id={receipt['project_id']}")
    assert_error(response, 500, "internal_error")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "trailing", "not_an_object"])
async def test_corrupt_records_give_valid_json_and_are_logged_once(
    client: Any, api_key: dict[str, Any], store: Store, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    from execution_proof.kv.keys import receipt_key

    receipt = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    later = (await create(client, api_key, {"input_hash": H2})).json["receipt"]
    name = receipt_key(receipt["receipt_id"])
    stored = await store.client.get(name)
    broken = {
        "garbage": b"{garbage",
        "truncated": stored[:-5],
        "trailing": stored + b"x",
        "not_an_object": b"[1, 2]",
    }[damage]
    await store.client.set(name, broken)
    caplog.set_level(logging.INFO)
    before = corrupt_count("receipts.get_receipt")

    _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}")
    assert_error(response, 500, "internal_error")  # parses the body as JSON
    assert corrupt_count("receipts.get_receipt") == before + 1
    response = await verify(client, api_key, {"receipt_id": receipt["receipt_id"], "input_hash": H1})
    assert response.status_code == 200, response.text
    assert response.json["ok"] is False and response.json["receipt_id"] == receipt["receipt_id"]
    assert response.json["checks"]["receipt_hash_recompute"] is False
    # The later receipt is fine, but its previous one cannot be read: its chain link fails.
    response = await verify(client, api_key, {"receipt_id": later["receipt_id"], "input_hash": H2})
    assert response.status_code == 200, response.text
    assert response.json["checks"]["chain_link"] is False and response.json["checks"]["signature"] is True
    assert len(corrupt_records(caplog, receipt["receipt_id"])) == 3, "one error record per event"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name != "eps.records"]


async def test_a_search_page_with_a_corrupt_or_misplaced_record_is_a_json_500(
    client: Any, api_key: dict[str, Any], store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The search reads stored records too: the same check as a read, logged and counted."""
    from execution_proof.kv.keys import receipt_key

    a = (await create(client, api_key, {"input_hash": H1})).json["receipt"]
    b = (await create(client, api_key, {"input_hash": H1, "run_id": "second"})).json["receipt"]
    caplog.set_level(logging.INFO)
    for broken in (b"{garbage", await store.client.get(receipt_key(a["receipt_id"]))):
        await store.client.set(receipt_key(b["receipt_id"]), broken)
        before = corrupt_count("search.search_receipts")
        _, response = await client.get(f"/v1/receipts?input_hash={H1}", headers=auth(api_key))
        assert_error(response, 500, "internal_error")
        assert corrupt_count("search.search_receipts") == before + 1
    assert len(corrupt_records(caplog, b["receipt_id"])) == 2, "one error record per event"


async def test_the_demo_banner_shows_the_address_and_a_key_that_creates_receipts(
    app: Any, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The embedded demo's start-up banner, in-process: a wildcard listen address is shown as
    loopback, and the printed key creates a receipt. ``serve`` printing it is proven by the
    process tests (tests/test_cli.py, tests/test_socket_limits.py)."""
    import re

    from execution_proof.web.demo import announce_demo_key

    await announce_demo_key(app, "http://0.0.0.0:8123")
    banner = capsys.readouterr().out
    assert "curl -s -X POST http://127.0.0.1:8123/v1/receipts " in banner
    assert "curl -s http://127.0.0.1:8123/v1/receipts/RECEIPT_ID" in banner
    assert re.search(r"API reference: +http://127\.0\.0\.1:8123/docs\n", banner), banner
    found = re.search(r"API key:\s+(eps_[A-Za-z0-9_-]{43})\b", banner)
    assert found is not None, banner
    response = await create(client, found.group(1), {"input_hash": H1})
    assert response.status == 201, response.text
