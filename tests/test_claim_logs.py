"""The paid flow leaves no credential in any log line or in Redis.

A checkout's session id is the only thing needed to reveal its key, so it is a secret as
much as the key itself. This test runs the whole paid flow on real processes: a
redis-server, ``python service.py serve`` and a (non-burst) ``python service.py worker``
whose RQ logs are on (job start, ``Job OK``, completion lines). A signed
``checkout.session.completed`` webhook with a fresh ``cs_live_…`` id is sent, the claim
endpoint is polled until the worker has indexed the checkout, the key is claimed, the
success page is opened with the session id in its query string, and failed claims are made
with it. Both processes are then stopped, and everything they printed (stdout and stderr),
and every key and value in Redis, is searched for the session id, the revealed key, the
key's hash and the webhook secret. Once with ``LOG_FORMAT=json``, once with ``text``.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import time
import zlib
from collections.abc import Callable

import httpx
import pytest

from execution_proof.receipts.apikeys import hash_api_key
from tests.conftest import hash_of
from tests.fake_providers import checkout_event, event_bytes, signed_webhook
from tests.servers import ServicePool, WorkerProcess, service_pool_fixture
from tests.test_security import redis_contents

WEBHOOK_SECRET = "whsec_logscan_" + "5f3a9c0e1d7b2468"
READY_TIMEOUT_S = 60.0

service_factory = service_pool_fixture()


def checkout_reference(session_id: str) -> str:
    """The opaque reference docs/claims.md tells operators to compute: the first 32 hex
    digits of SHA-256 of the session id."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:32]


def stored_items(redis_url: str) -> list[bytes]:
    """Every key and value in Redis, plus the decompressed form of compressed values (RQ
    stores a job's data zlib-compressed)."""
    items = redis_contents(redis_url)
    for item in list(items):
        with contextlib.suppress(zlib.error):
            items.append(zlib.decompress(item))
    return items


def claim_when_indexed(http: httpx.Client, session_id: str) -> httpx.Response:
    """POST /v1/claim until it is no longer ``claim_pending`` (the worker indexed the
    checkout), within a bounded time."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        response = http.post("/v1/claim", json={"session_id": session_id})
        pending = response.status_code in (404, 409) and response.json()["error"]["code"] == "claim_pending"
        if not pending:
            return response
        if time.monotonic() > deadline:
            pytest.fail(f"the checkout was not indexed within {READY_TIMEOUT_S:.0f} s: {response.text}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.real_redis
@pytest.mark.parametrize("log_format", ["json", "text"])
def test_paid_flow_logs_no_session_id_key_or_secret(
    service_factory: ServicePool, workers: Callable[..., WorkerProcess], redis_url: str, log_format: str
) -> None:
    session_id = "cs_live_" + secrets.token_urlsafe(40).replace("-", "x").replace("_", "y")
    env = {"PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET, "LOG_FORMAT": log_format}
    service = service_factory.start(workers=1, redis_url=redis_url, env=env)
    worker = workers({"REDIS_URL": redis_url, **env})
    with httpx.Client(base_url=service.base_url, timeout=10) as http:
        # A claim before the payment is known, and the success page, both with the session id.
        early = http.post("/v1/claim", json={"session_id": session_id})
        assert early.status_code == 404, early.text
        assert http.get("/claim/success", params={"session_id": session_id}).status_code == 200

        now = int(time.time())
        # The provider's event ids are its own (the fake's default would contain the session id).
        event = event_bytes(checkout_event(session_id, plan="pro", created=now, event_id="evt_first_delivery"))
        hook = http.post("/v1/webhooks/payment", content=event, headers=signed_webhook(event, [WEBHOOK_SECRET], now))
        assert hook.json() == {"ok": True, "received": True}, hook.text
        # The same event again (a duplicate), and another event about the same checkout.
        assert http.post(
            "/v1/webhooks/payment", content=event, headers=signed_webhook(event, [WEBHOOK_SECRET], now)
        ).json()["duplicate"]
        other = event_bytes(checkout_event(session_id, plan="pro", created=now, event_id="evt_second_delivery"))
        assert http.post(
            "/v1/webhooks/payment", content=other, headers=signed_webhook(other, [WEBHOOK_SECRET], now)
        ).status_code == 200  # fmt: skip

        claimed = claim_when_indexed(http, session_id)
        assert claimed.status_code == 200, claimed.text
        api_key = claimed.json()["api_key"]
        project_id = claimed.json()["project_id"]
        headers = {"Authorization": f"Bearer {api_key}"}
        assert http.post("/v1/receipts", json={"input_hash": hash_of("paid")}, headers=headers).status_code == 201
        again = http.post("/v1/claim", json={"session_id": session_id})
        assert again.json()["error"]["code"] == "already_claimed", again.text
        assert http.get("/claim/success", params={"session_id": session_id}).status_code == 200
        assert http.get(f"/claim/success?session_id={session_id}&x={api_key}").status_code == 200

    # The worker ran the job (and said so in its log), until it is stopped.
    worker_returncode = worker.stop()
    service.stop()
    assert worker_returncode == 0, worker.log()[-3000:]
    worker_log = worker.log()
    service_log = service.stdout() + service.stderr()
    assert "Job OK" in worker_log, worker_log[-3000:]
    assert "/claim/success" in service_log, "the request lines are in the scanned output"
    assert project_id in service_log

    digest = hash_api_key(api_key).removeprefix("sha256:")
    leaks = {
        "session id": session_id.encode(),
        "session id (its random part)": session_id.removeprefix("cs_live_").encode(),
        "API key": api_key.encode(),
        "API key's random part": api_key[-24:].encode(),
        "key hash": digest.encode(),
        "key hash (truncated)": digest[:32].encode(),
        "webhook secret": WEBHOOK_SECRET.encode(),
    }
    logs = {"worker": worker_log.encode(), "service": service_log.encode()}
    for process, output in logs.items():
        for what, value in leaks.items():
            assert value not in output, f"the {what} is in the {process}'s output"
    stored = stored_items(redis_url)
    assert any(b"rq:job:" in item for item in stored), "the job's record is among the scanned values"
    for what in ("session id", "session id (its random part)", "API key", "webhook secret"):
        assert not any(leaks[what] in item for item in stored), f"the {what} is stored in Redis"
    # What the logs name instead: the checkout's reference (the job's id, the operator's handle).
    assert f"index_checkout-{checkout_reference(session_id)}" in worker_log
