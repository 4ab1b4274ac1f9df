"""Security properties: project boundaries (OWASP API1), secret hygiene in responses, the
store and the logs, constant-time secret comparison, and receipt key rotation end to end.

- Another project's receipt through ``POST /v1/verify`` is 403; search by hash only ever
  returns the caller's own receipts; the public read and the bundle carry nothing beyond
  the public receipt and public keys.
- No response of a scripted session of every endpoint contains a key hash (``sha256:`` of an
  API key, or its bare hex) of either project, or the other project's ids.
- After a session on a real service (CLI ``keys create``, a free claim, creates, verifies,
  failed authentications with the key in wrong header forms) neither Redis (every key and
  value) nor the service's stdout/stderr (nor caplog in process) holds a raw API key or the
  receipt root's private key (base64url seed, raw bytes, hex).
- Secrets are compared in constant time: API keys are looked up by their SHA-256 (the
  lookup key is the hash, so no byte-by-byte comparison of the secret ever runs); webhook
  signatures go through ``hmac.compare_digest`` and no ``==`` touches a secret (AST check).
- Rotation: receipts signed by a process's key, certified by one machine's root, still verify
  after that process stopped and a new machine (a root of its own) took over (API, CLI,
  bundle: each key with its certificate); new receipts are signed by the new key and chain
  onto the old ones; an unknown ``sig_kid`` fails closed. Figures and summary:
  docs/operations.md.
"""

from __future__ import annotations

import ast
import base64
import logging
import re
import time
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import orjson
import pytest
import redis

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts import compact
from execution_proof.receipts.apikeys import hash_api_key
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import root_kid
from execution_proof.runtime.settings import Settings
from execution_proof.transparency.signer import SeedSigner
from execution_proof.web.app import create_app
from tests.conftest import REPO, TEST_ROOT, RedisServer, auth, hash_of
from tests.fake_providers import PASS, FakeHumanCheck, checkout_event, event_bytes, signed_webhook
from tests.receipt_keys import TEST_ROOT_KID, assert_signed_by_test_root
from tests.servers import ServicePool, create_key_cli, run_cli, service_pool_fixture

H = hash_of("shared-input")
WEBHOOK_SECRET = "whsec_hygiene_0123456789abcdef"
HUMAN_SECRET = "hc-secret-hygiene-xyz"

service_factory = service_pool_fixture()


def private_seeds(*seeds: bytes) -> list[bytes]:
    """Every private key (a 32-byte Ed25519 seed) as base64url text, raw bytes and hex (both cases)."""
    forms: list[bytes] = []
    for raw in seeds:
        forms += [b64url_encode(raw).encode(), raw, raw.hex().encode(), raw.hex().upper().encode()]
    return forms


def key_hash_forms(key: dict[str, Any]) -> list[bytes]:
    digest = hash_api_key(key["api_key"]).removeprefix("sha256:")
    return [b"sha256:" + digest.encode(), digest.encode(), digest[:32].encode()]


# --- project boundaries and what responses reveal (in process) -----------------------------


@pytest.fixture
async def two_projects(receipt_root: str) -> Any:
    store = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    client = create_app(
        Settings(redis_url="redis://injected", receipt_root=receipt_root, env="test"), store=store
    ).asgi_client
    a = await create_project_key(store.keys, project_name="alpha", plan="pro")
    b = await create_project_key(store.keys, project_name="beta", plan="pro")
    yield client, store, a, b
    await store.close()


async def test_cross_project_access_and_no_leaks(two_projects: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client, _store, a, b = two_projects
    responses: list[tuple[str, Any, Any]] = []  # (caller, label, response)

    async def call(caller: str, method: str, url: str, key: dict[str, Any] | None = None, body: Any = None) -> Any:
        headers = auth(key) if key else {}
        content = orjson.dumps(body) if body is not None else None
        _, response = await client.request(method, url, content=content, headers=headers)
        responses.append((caller, f"{method} {url}", response))
        return response

    ra = (await call("a", "POST", "/v1/receipts", a, {"input_hash": H, "output_hash": hash_of("a-out")})).json
    rb = (await call("b", "POST", "/v1/receipts", b, {"input_hash": H})).json
    rid_a, rid_b = ra["receipt"]["receipt_id"], rb["receipt"]["receipt_id"]
    await call("a", "POST", "/v1/receipts", a, {"input_hash": hash_of("a-2"), "tags": {"team": "alpha"}})

    # OWASP API1: B cannot verify A's receipt (and the answer reveals nothing of it).
    denied = await call("b", "POST", "/v1/verify", b, {"receipt_id": rid_a, "input_hash": H})
    assert denied.status_code == 403
    assert denied.json["error"]["code"] == "forbidden"
    assert ra["receipt"]["receipt_hash"] not in denied.text
    assert (await call("a", "POST", "/v1/verify", a, {"receipt_id": rid_a, "input_hash": H})).json["ok"] is True

    # Search by a hash both projects used returns only the caller's own receipts.
    for caller, key, own in (("a", a, rid_a), ("b", b, rid_b)):
        found = await call(caller, "GET", f"/v1/receipts?input_hash={H}", key)
        assert found.status_code == 200
        assert [r["receipt_id"] for r in found.json["receipts"]] == [own]
    found = await call("b", "GET", f"/v1/receipts?output_hash={hash_of('a-out')}", b)
    assert found.json["receipts"] == []
    # A hash lookup scoped to another project's id finds nothing of A's through B's project.
    await call("b", "GET", f"/v1/receipts/{ra['receipt']['receipt_hash']}?project_id={b['project_id']}")

    # Public read and bundle: exactly the public receipt and public keys.
    read = await call("public", "GET", f"/v1/receipts/{rid_a}")
    assert set(read.json) == {"ok", "receipt"}
    assert read.json["receipt"] == ra["receipt"]
    bundle = await call("public", "GET", f"/v1/receipts/{rid_a}/bundle")
    assert set(bundle.json) == {
        "format",
        "version",
        "created_at",
        "service",
        "receipt",
        "keys",
        "chain",
        "chain_complete",
        "attestation",
    }
    assert bundle.json["receipt"] == ra["receipt"]
    # The attestation envelope holds the public receipt and nothing else of the project's.
    statement = orjson.loads(base64.b64decode(bundle.json["attestation"]["payload"]))
    assert statement["predicate"] == {"receipt": ra["receipt"], "log_origin": None}
    assert all(
        set(entry) == {"kid", "alg", "public_key_base64url", "certificate"} for entry in bundle.json["keys"]["keys"]
    )

    # The rest of the endpoints, authenticated and not, and failed auths in wrong header forms.
    for caller, key in (("a", a), ("b", b)):
        await call(caller, "GET", "/v1/usage", key)
    for path in ("/", "/health", "/v1/public-key", "/verify", f"/v1/receipts/{rid_b}/bundle?depth=0"):
        await call("public", "GET", path)
    for headers in (
        {"Authorization": a["api_key"]},
        {"Authorization": f"Token {a['api_key']}"},
        {"X-Api-Key": a["api_key"]},
    ):
        _, response = await client.post("/v1/receipts", content=orjson.dumps({"input_hash": H}), headers=headers)
        assert response.status_code == 401
        responses.append(("public", "wrong auth form", response))
    await call("public", "POST", "/v1/claim", None, {"session_id": "cs_unknown"})
    await call("public", "POST", "/v1/claim/free", None, {"turnstile_token": "x"})
    await call("a", "POST", "/v1/receipts", a, {"input_hash": H, "project_id": b["project_id"]})

    secrets = [*key_hash_forms(a), *key_hash_forms(b), a["api_key"].encode(), b["api_key"].encode()]
    secrets += private_seeds(TEST_ROOT.seed)
    others = {"a": [b["project_id"], rid_b, b["actor_id"]], "b": [a["project_id"], rid_a, a["actor_id"]]}
    for caller, label, response in responses:
        blob = response.content + b"\n" + "\n".join(f"{k}: {v}" for k, v in response.headers.items()).encode()
        for secret in secrets:
            assert secret not in blob, f"{label}: response contains a secret"
        for other in others.get(caller, []):
            assert other.encode() not in blob, f"{label} as {caller}: another project's data"
    assert len(responses) >= 20
    logged = caplog.text.encode()
    for secret in [a["api_key"].encode(), b["api_key"].encode(), *private_seeds(TEST_ROOT.seed)]:
        assert secret not in logged


# --- constant-time comparison (source checks) ------------------------------------------------

SECRET_WORDS = ("secret", "signature", "digest", "token", "api_key", "candidate", "good", "expected", "mac")


@pytest.mark.parametrize(
    "path",
    [
        "usecases/claiming.py",
        "receipts/webhook_signature.py",
        "web/auth.py",
        "usecases/limiting.py",
        "runtime/human_check.py",
    ],
)
def test_no_equality_comparison_on_secrets(path: str) -> None:
    """No ``==``/``!=`` whose operands name a secret (signatures, tokens, keys, digests)."""
    tree = ast.parse((REPO / "execution_proof" / path).read_text())
    offenders = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            text = ast.unparse(node).lower()
            if any(word in text for word in SECRET_WORDS):
                offenders.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []


def test_webhook_uses_compare_digest_and_keys_are_looked_up_by_hash() -> None:
    webhook = (REPO / "execution_proof/receipts/webhook_signature.py").read_text()
    assert "hmac.compare_digest(" in webhook
    auth_source = (REPO / "execution_proof/usecases/limiting.py").read_text()
    # The raw key is hashed at once; the store is asked for the hash (a Redis key lookup),
    # so no secret-dependent byte comparison runs in the service.
    assert re.search(r"self\.keys\.authenticate\(\s*hash_api_key\(token\),", auth_source)


# --- secret hygiene on a real service --------------------------------------------------------


def redis_contents(url: str) -> list[bytes]:
    """Every key name and every stored value, read by type (DUMP may compress)."""
    out: list[bytes] = []
    with redis.Redis.from_url(url) as conn:
        for name in conn.scan_iter(count=1000):
            out.append(name)
            kind = conn.type(name).decode()
            if kind == "string":
                out.append(conn.get(name) or b"")
            elif kind == "hash":
                out += [x for pair in conn.hgetall(name).items() for x in pair]
            elif kind == "set":
                out += list(conn.smembers(name))
            elif kind == "list":
                out += conn.lrange(name, 0, -1)
            elif kind == "zset":
                out += [member for member, _ in conn.zrange(name, 0, -1, withscores=True)]
            elif kind == "stream":
                out += [repr(entry).encode() for entry in conn.xrange(name)]
            else:
                out.append(conn.dump(name) or b"")
    return out


@pytest.mark.slow
@pytest.mark.real_redis
def test_no_raw_key_or_signing_key_in_redis_or_logs(service_factory: ServicePool, redis_url: str) -> None:
    human = FakeHumanCheck()
    try:
        service = service_factory.start(
            workers=1,
            redis_url=redis_url,
            env={
                "HUMAN_CHECK_SECRET": HUMAN_SECRET,
                "HUMAN_CHECK_VERIFY_URL": human.url,
                "PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET,
            },
        )
        keys = [create_key_cli(redis_url, project=f"hygiene-{n}", plan="pro")["api_key"] for n in range(2)]
        with httpx.Client(base_url=service.base_url, timeout=10) as http:
            claimed = http.post("/v1/claim/free", json={"turnstile_token": PASS})
            assert claimed.status_code == 200, claimed.text
            keys.append(claimed.json()["api_key"])
            # A paid claim: the signed webhook, the job run by a worker, then the claim.
            event = event_bytes(checkout_event("cs_hygiene_1", plan="basic", created=int(time.time())))
            hook = http.post(
                "/v1/webhooks/payment", content=event, headers=signed_webhook(event, [WEBHOOK_SECRET], int(time.time()))
            )
            assert hook.status_code == 200, hook.text
            worker = run_cli(
                "worker", "--burst", env={"REDIS_URL": redis_url, "PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET}
            )
            assert worker.returncode == 0, worker.stdout + worker.stderr
            paid = http.post("/v1/claim", json={"session_id": "cs_hygiene_1"})
            assert paid.status_code == 200, paid.text
            keys.append(paid.json()["api_key"])
            ids = []
            for n, key in enumerate(keys):
                headers = {"Authorization": f"Bearer {key}"}
                created = http.post("/v1/receipts", json={"input_hash": hash_of(f"h-{n}")}, headers=headers)
                assert created.status_code == 201, created.text
                ids.append(created.json()["receipt"]["receipt_id"])
                verified = http.post(
                    "/v1/verify", json={"receipt_id": ids[-1], "input_hash": hash_of(f"h-{n}")}, headers=headers
                )
                assert verified.json()["ok"] is True
                assert http.get("/v1/usage", headers=headers).status_code == 200
                for wrong in ({"Authorization": key}, {"Authorization": f"Token {key}"}, {"X-Api-Key": key},
                              {"Authorization": f"Bearer {key}x"}, {"Authorization": f"Bearer {key[:-1]}"}):  # fmt: skip
                    refused = http.post("/v1/receipts", json={"input_hash": hash_of("x")}, headers=wrong)
                    assert refused.status_code == 401
                # A key pasted into a field is refused without echoing it.
                echoed = http.post("/v1/receipts", json={"input_hash": H, "code_ref": key}, headers=headers)
                assert echoed.status_code == 400
                assert key not in echoed.text
            assert http.post("/v1/webhooks/payment", content=b"{}").status_code in (400, 503)
    finally:
        human.close()
    service.stop()
    secrets = (
        [k.encode() for k in keys] + private_seeds(TEST_ROOT.seed) + [WEBHOOK_SECRET.encode(), HUMAN_SECRET.encode()]
    )
    stored = redis_contents(redis_url)
    assert len(stored) > 10
    logs = (service.stdout() + service.stderr() + worker.stdout + worker.stderr).encode()
    for secret in secrets:
        assert not any(secret in item for item in stored), "a secret is in Redis"
        assert secret not in logs, "a secret is in the service's logs"
    for key in keys:  # the hash, the only stored form, is there
        assert any(hash_api_key(key).removeprefix("sha256:").encode() in item for item in stored)


# --- receipt key and root rotation end to end --------------------------------------------------


@pytest.mark.slow
@pytest.mark.real_redis
def test_receipt_key_and_root_rotation_end_to_end(
    service_factory: ServicePool, redis_url: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    # The first machine's root certifies its process's key, which signs the first receipts.
    old_root = SeedSigner.generate()
    old = service_factory.start(
        workers=1,
        redis_url=redis_url,
        receipt_root={"RECEIPT_ROOT_KEY": "env:EPS_OLD_ROOT", "EPS_OLD_ROOT": b64url_encode(old_root.seed)},
    )
    key = create_key_cli(redis_url, project="rotation", plan="pro")
    headers = {"Authorization": f"Bearer {key['api_key']}"}
    old_receipts = []
    with httpx.Client(base_url=old.base_url, timeout=10) as http:
        for n in range(2):
            created = http.post("/v1/receipts", json={"input_hash": hash_of(f"old-{n}")}, headers=headers)
            assert created.status_code == 201
            old_receipts.append(created.json()["receipt"])
    (old_kid,) = {r["sig_kid"] for r in old_receipts}
    assert old_kid.startswith("key-")
    old.stop()

    # A new machine with a root of its own (TEST_ROOT): a new key, certified by the new root;
    # the old root and its certificate stay in the shared registry.
    new = service_factory.start(workers=1, redis_url=redis_url)
    with httpx.Client(base_url=new.base_url, timeout=10) as http:
        for n, receipt in enumerate(old_receipts):
            answer = http.post(
                "/v1/verify",
                json={"receipt_id": receipt["receipt_id"], "input_hash": hash_of(f"old-{n}")},
                headers=headers,
            ).json()
            assert answer["ok"] is True, answer
            assert answer["sig_kid"] == old_kid
        created = http.post("/v1/receipts", json={"input_hash": hash_of("new-0")}, headers=headers)
        assert created.status_code == 201
        fresh = created.json()["receipt"]
        assert fresh["sig_kid"] not in (old_kid, None)
        published = http.get("/v1/public-key").json()
        assert {r["kid"] for r in published["roots"]} == {root_kid(old_root.public_key()), TEST_ROOT_KID}
        assert_signed_by_test_root(fresh, published)
        assert fresh["prev_receipt_hash"] == old_receipts[-1]["receipt_hash"]
        assert fresh["chain_status"] == "main"
        answer = http.post(
            "/v1/verify", json={"receipt_id": fresh["receipt_id"], "input_hash": hash_of("new-0")}, headers=headers
        ).json()
        assert answer["ok"] is True
        assert answer["checks"]["chain_link"] is True
        bundle = http.get(f"/v1/receipts/{fresh['receipt_id']}/bundle").json()
        certified = {k["kid"]: k["certificate"]["root_kid"] for k in bundle["keys"]["keys"]}
        assert certified == {old_kid: root_kid(old_root.public_key()), fresh["sig_kid"]: TEST_ROOT_KID}
        assert bundle["chain_complete"] is True
        assert [r["receipt_id"] for r in bundle["chain"]] == [r["receipt_id"] for r in reversed(old_receipts)]
        old_bundle = http.get(f"/v1/receipts/{old_receipts[0]['receipt_id']}/bundle").json()

    # The command-line verifier agrees: an old receipt against the service's keys, and both
    # bundles against the keys the service publishes (pinned).
    files = {
        "old.json": orjson.dumps(old_receipts[0]),
        "bundle.json": orjson.dumps(bundle),
        "old-bundle.json": orjson.dumps(old_bundle),
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    done = run_cli("verify", str(tmp_path / "old.json"), "--base-url", new.base_url)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("bundle.json", "old-bundle.json"):
        done = run_cli("verify", str(tmp_path / name), "--base-url", new.base_url)
        assert done.returncode == 0, done.stdout + done.stderr

    # An unknown sig_kid fails closed.
    with redis.Redis.from_url(redis_url) as conn:
        name = next(iter(conn.scan_iter(match=f"r:*:{old_receipts[1]['receipt_id']}")))
        record = orjson.loads(compact.decode(conn.get(name)))
        record["sig_kid"] = "nobody-2024"
        conn.set(name, orjson.dumps(record))
    with httpx.Client(base_url=new.base_url, timeout=10) as http:
        answer = http.post(
            "/v1/verify",
            json={"receipt_id": old_receipts[1]["receipt_id"], "input_hash": hash_of("old-1")},
            headers=headers,
        ).json()
    assert answer["checks"]["signature"] is False
    assert answer["ok"] is False
