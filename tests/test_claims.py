"""Getting an API key (docs/claims.md): the payment webhook, paid claims and free
claims, on fakeredis and a real redis-server (the ``store`` fixture), with an injected clock,
a fake siteverify server on loopback and webhooks signed like the provider's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import fakeredis
import orjson
import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from execution_proof.jobs.claims import index_checkout_in, job_id_for
from execution_proof.jobs.context import use_embedded_server
from execution_proof.jobs.queue import QUEUE_NAME
from execution_proof.kv import keys
from execution_proof.kv.accounts import new_key_record
from execution_proof.kv.connect import open_store
from execution_proof.kv.records import ClaimOutcome
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import day_window, load_limits
from execution_proof.receipts.webhook_signature import (
    EventError,
    SignatureError,
    compute_signature,
    parse_payment_event,
    parse_signature_header,
    signature_header,
    verify_signature,
)
from execution_proof.runtime import human_check
from execution_proof.runtime.settings import ClientIpConfig, Settings
from execution_proof.web.app import create_app
from tests.clock import Clock, ms
from tests.conftest import auth, free_port, hash_of
from tests.fake_providers import (
    ERROR_500,
    FAIL,
    NO_SUCCESS,
    NOT_JSON,
    PASS,
    SLOW,
    FakeHumanCheck,
    checkout_event,
    event_bytes,
    signed_webhook,
)
from tests.receipt_keys import in_key_registry

SECRET = "whsec_current_0123456789"
OLD_SECRET = "whsec_previous_9876543210"
HUMAN_SECRET = "hc-secret-0x42"
CONTACT = "keys@example.test"
START = "2026-11-21T10:00:15.200Z"
ADDR = {"Fly-Client-IP": "203.0.113.7"}
OTHER_ADDR = {"Fly-Client-IP": "198.51.100.20"}
DAY_S = 86_400
JSON_HEADERS = {"Content-Type": "application/json"}
MANY_ATTEMPTS = {"ip_per_minute": {"unauthenticated": 1000}}


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def human() -> Iterator[FakeHumanCheck]:
    fake = FakeHumanCheck()
    yield fake
    fake.close()


@pytest.fixture
def jobs_share_store(store: Store, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inline jobs (no JOBS_REDIS_URL) open their store from the environment, as a worker
    does: point that at the test's store (its fakeredis server, or the real Redis)."""
    if isinstance(store.client, fakeredis.FakeAsyncRedis):
        monkeypatch.delenv("REDIS_URL", raising=False)
        use_embedded_server(store.client.connection_pool.connection_kwargs["server"])
    else:
        monkeypatch.setenv("REDIS_URL", request.getfixturevalue("redis_url"))
    yield
    use_embedded_server(None)


MakeClient = Callable[..., Any]


@pytest.fixture
def make_client(
    store: Store, receipt_root: str, clock: Clock, human: FakeHumanCheck, jobs_share_store: None
) -> MakeClient:
    def make(
        *,
        secrets: tuple[str, ...] = (SECRET,),
        human_secret: str | None = HUMAN_SECRET,
        verify_url: str | None = None,
        limits: dict[str, Any] | None = None,
        window_days: float = 7.0,
        jobs_redis_url: str | None = None,
    ) -> Any:
        settings = Settings(
            redis_url="redis://injected-by-tests",
            jobs_redis_url=jobs_redis_url,
            receipt_root=receipt_root,
            env="test",
            limits=load_limits(orjson.dumps(limits) if limits else None),
            client_ip=ClientIpConfig(real_ip_header="Fly-Client-IP"),
            payment_webhook_secrets=secrets,
            claim_window_days=window_days,
            human_check_secret=human_secret,
            human_check_verify_url=verify_url or human.url,
            human_check_site_key="site-key-test",
            operator_contact=CONTACT,
        )
        return create_app(settings, store=store, clock_ms=clock).asgi_client

    return make


async def send_webhook(
    client: Any,
    clock: Clock,
    event: dict[str, Any] | bytes,
    *,
    secrets: tuple[str, ...] = (SECRET,),
    t: int | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    body = event if isinstance(event, bytes) else event_bytes(event)
    sent = headers if headers is not None else signed_webhook(body, list(secrets), clock.unix if t is None else t)
    _, response = await client.post("/v1/webhooks/payment", content=body, headers=sent)
    return response


async def claim(client: Any, session_id: Any, addr: dict[str, str] = ADDR) -> Any:
    _, response = await client.post(
        "/v1/claim", content=orjson.dumps({"session_id": session_id}), headers={**JSON_HEADERS, **addr}
    )
    return response


async def claim_free(client: Any, token: Any, addr: dict[str, str] = ADDR) -> Any:
    _, response = await client.post(
        "/v1/claim/free", content=orjson.dumps({"turnstile_token": token}), headers={**JSON_HEADERS, **addr}
    )
    return response


async def create_receipt(client: Any, api_key: str, label: str) -> Any:
    _, response = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of(label)}), headers={**auth(api_key), **ADDR}
    )
    return response


def _text(value: Any) -> Any:
    # Receipt records and index entries are binary: shown escaped, still compared exactly.
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


async def snapshot(store: Store, *, counters: bool = True) -> dict[str, Any]:
    """Every key with its type and value (``counters=False`` leaves out per-address counters),
    the receipt keys' registry left out (an app writes it when it starts, at its first request)."""
    out: dict[str, Any] = {}
    for raw in await store.client.keys("*"):
        key = _text(raw)
        if (not counters and key.startswith("ip:")) or in_key_registry(key):
            continue
        kind = _text(await store.client.type(key))
        if kind == "string":
            value: Any = _text(await store.client.get(key))
        elif kind == "hash":
            value = sorted((_text(k), _text(v)) for k, v in (await store.client.hgetall(key)).items())
        elif kind == "set":
            value = sorted(_text(m) for m in await store.client.smembers(key))
        else:
            value = kind
        out[key] = (kind, value)
    return out


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json
    assert body["error"]["code"] == code, body
    assert body["request_id"] == response.headers["x-request-id"]
    assert "api_key" not in body
    return body


# --- pure: signature, event, day window -------------------------------------------------------


def test_signature_round_trip_and_tolerance() -> None:
    body = b'{"id":"evt_1"}'
    now = 1_795_000_000
    header = signature_header([SECRET], now, body)
    assert header == f"t={now},v1={compute_signature(SECRET, now, body)}"
    assert verify_signature(header, body, [SECRET], now) == now
    assert verify_signature(signature_header([SECRET], now - 300, body), body, [SECRET], now) == now - 300
    assert verify_signature(signature_header([SECRET], now + 300, body), body, [SECRET], now) == now + 300
    with pytest.raises(SignatureError, match="old"):
        verify_signature(signature_header([SECRET], now - 301, body), body, [SECRET], now)
    with pytest.raises(SignatureError, match="future"):
        verify_signature(signature_header([SECRET], now + 301, body), body, [SECRET], now)
    with pytest.raises(SignatureError, match="no v1 signature matches"):
        verify_signature(header, body + b" ", [SECRET], now)
    with pytest.raises(SignatureError, match="no v1 signature matches"):
        verify_signature(header, body, [OLD_SECRET], now)
    # Rotation: any v1 matching any configured secret passes; upper-case hex is the same value.
    both = signature_header(["some-other-secret", SECRET], now, body)
    assert verify_signature(both, body, [OLD_SECRET, SECRET], now) == now
    assert verify_signature(header.upper().replace("T=", "t=").replace("V1=", "v1="), body, [SECRET], now) == now
    # Other schemes are ignored, not rejected.
    assert verify_signature(header + ",v0=abc", body, [SECRET], now) == now


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        (None, "missing"),
        ("", "missing"),
        ("v1=" + "a" * 64, "no t="),
        ("t=1795000000", "no v1"),
        ("t=1795000000,v1=xyz", "64 hex"),
        ("t=17950000x0,v1=" + "a" * 64, "exactly one t="),
        ("t=1,t=2,v1=" + "a" * 64, "exactly one t="),
        ("t=-5,v1=" + "a" * 64, "exactly one t="),
        ("garbage", "name=value"),
        ("t=1795000000," + ",".join(["v1=" + "a" * 64] * 17), "more than 16"),
        ("t=1795000000,v1=" + "a" * 5000, "too long"),
    ],
)
def test_malformed_signature_headers(header: str | None, fragment: str) -> None:
    with pytest.raises(SignatureError, match=fragment):
        parse_signature_header(header)


def test_no_secret_never_verifies() -> None:
    body = b"{}"
    with pytest.raises(SignatureError, match="no webhook secret"):
        verify_signature(signature_header(["x"], 100, body), body, [], 100)


def test_event_parsing() -> None:
    event = parse_payment_event(event_bytes(checkout_event("cs_test_1", plan="pro", created=1_795_000_123)))
    assert event.checkout is not None
    assert (event.event_id, event.checkout.session_id, event.checkout.plan) == ("evt_cs_test_1", "cs_test_1", "pro")
    assert event.checkout.created_unix == 1_795_000_123
    ignored = [
        checkout_event("cs_1", event_type="checkout.session.expired"),
        checkout_event("cs_1", payment_status="unpaid"),
        checkout_event("cs_1", plan=None),
        checkout_event("cs_1", plan="free"),
        {"id": "evt_2", "type": "invoice.paid", "data": "anything"},
    ]
    for body in ignored:
        parsed = parse_payment_event(event_bytes(body))
        assert parsed.checkout is None
        assert parsed.ignored
    # The event's created stands in when the checkout has none.
    no_created = checkout_event("cs_2")
    del no_created["data"]["object"]["created"]
    parsed = parse_payment_event(event_bytes(no_created))
    assert parsed.checkout is not None
    assert parsed.checkout.created_unix == no_created["created"]
    malformed: list[bytes] = [
        b"not json",
        b"[]",
        event_bytes({"type": "x"}),
        event_bytes({"id": "evt bad id", "type": "x"}),
        event_bytes({"id": "evt_1", "type": ""}),
        event_bytes({"id": "evt_1", "type": "checkout.session.completed", "data": {}}),
        event_bytes(checkout_event("cs_{slot}")),
        event_bytes(
            {
                **checkout_event("cs_3"),
                "created": True,
                "data": {"object": {"id": "cs_3", "payment_status": "paid", "metadata": {"plan": "basic"}}},
            }
        ),
    ]
    for raw in malformed:
        with pytest.raises(EventError):
            parse_payment_event(raw)


def test_day_window() -> None:
    window = day_window(ms("2026-11-21T10:00:15.200Z"))
    assert window.id == "20261121"
    assert window.ends_at == "2026-11-22T00:00:00.000Z"
    assert window.retry_after_s == 13 * 3600 + 59 * 60 + 45, "53,984.8 s rounds up"
    assert day_window(ms("2026-11-21T23:59:59.999Z")).retry_after_s == 1
    assert day_window(ms("2026-11-22T00:00:00.000Z")).id == "20261122"
    assert day_window(ms("2026-12-31T12:00:00.000Z")).ends_at == "2027-01-01T00:00:00.000Z"


# --- paid claim: the whole flow ---------------------------------------------------------------


async def test_webhook_job_claim_and_use(
    make_client: MakeClient, store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_client()
    event = checkout_event("cs_test_e2e", plan="pro", created=clock.unix - 60, event_id="evt_e2e")
    response = await send_webhook(client, clock, event)
    assert response.status_code == 200, response.text
    assert response.json == {"ok": True, "received": True}

    response = await claim(client, "cs_test_e2e")
    assert response.status_code == 200, response.text
    body = response.json
    assert set(body) == {"ok", "api_key", "project_id", "actor_id", "plan", "warning"}
    assert body["ok"] is True
    assert body["plan"] == "pro"
    assert body["warning"] == "store this key now: it is shown only once"
    assert body["api_key"].startswith("eps_")
    assert len(body["api_key"]) == 47
    assert body["project_id"].startswith("prj_")
    assert body["actor_id"].startswith("act_")
    assert response.headers["cache-control"] == "no-store"

    created = await create_receipt(client, body["api_key"], "after-claim")
    assert created.status_code == 201, created.text
    assert created.headers["x-service-plan"] == "pro"
    assert created.json["receipt"]["project_id"] == body["project_id"]
    assert created.json["receipt"]["actor_id"] == body["actor_id"]
    (record,) = await store.keys.list_project_keys(body["project_id"])
    assert (record.plan, record.actor_id, record.revoked) == ("pro", body["actor_id"], False)

    before = await snapshot(store, counters=False)
    again = await claim(client, "cs_test_e2e")
    refused = assert_error(again, 409, "already_claimed")
    assert refused["error"]["details"]["contact"] == CONTACT
    assert "reissue" in refused["error"]["message"]
    assert body["api_key"] not in again.text
    assert await snapshot(store, counters=False) == before, "a refused claim writes nothing"
    for secret in (body["api_key"], SECRET, "cs_test_e2e"):
        assert secret not in caplog.text
    # The session id reveals the key: the store (its records, the project's name, the job's
    # record on the shared embedded server) holds only the checkout's reference.
    ref = keys.checkout_ref("cs_test_e2e")
    assert (await store.keys.get_project(body["project_id"]) or {})["name"] == f"pro plan (checkout {ref})"
    assert await store.client.hget(keys.checkout_lookup_key(ref), "project_id") == body["project_id"].encode()
    stored = repr(await snapshot(store))
    assert ref in stored
    assert "cs_test_e2e" not in stored
    assert "test_e2e" not in stored


async def test_every_claim_status(make_client: MakeClient, store: Store, clock: Clock) -> None:
    client = make_client(limits=MANY_ATTEMPTS)
    before = await snapshot(store, counters=False)
    unknown = assert_error(await claim(client, "cs_never_paid"), 404, "claim_pending")
    assert unknown["error"]["message"].startswith("no completed payment")
    assert (await claim(client, "cs_never_paid")).headers["retry-after"] == "3"

    # Webhook seen, job not finished: only the marker exists.
    await store.checkouts.mark_checkout_seen(keys.checkout_ref("cs_seen"), clock.now)
    assert_error(await claim(client, "cs_seen"), 409, "claim_pending")
    # The job assigned the project but stopped before writing the session record.
    half = keys.checkout_lookup_key(keys.checkout_ref("cs_half"))
    await store.client.hset(half, mapping={"seen_at": "1", "project_id": "prj_X"})
    assert_error(await claim(client, "cs_half"), 409, "claim_pending")
    after = await snapshot(store, counters=False)
    assert set(after) - set(before) == {keys.checkout_lookup_key(keys.checkout_ref("cs_seen")), half}

    for bad in [None, 5, "", "cs with spaces", "cs_{slot}", "x" * 256, ["cs_1"]]:
        assert_error(await claim(client, bad), 400, "bad_request")
    _, response = await client.post("/v1/claim", content=b"{}", headers={**JSON_HEADERS, **ADDR})
    assert_error(response, 400, "bad_request")
    _, response = await client.post("/v1/claim", content=b"nope", headers={**JSON_HEADERS, **ADDR})
    assert_error(response, 400, "bad_request")
    _, response = await client.post(
        "/v1/claim", content=b'{"session_id": "cs_1", "plan": "pro"}', headers={**JSON_HEADERS, **ADDR}
    )
    assert_error(response, 400, "bad_request")
    _, response = await client.post("/v1/claim", content=b'{"session_id": "cs_1"}', headers=ADDR)
    assert_error(response, 415, "unsupported_media_type")
    assert await snapshot(store, counters=False) == after, "rejected claims write nothing"


async def test_claim_window(make_client: MakeClient, store: Store, clock: Clock) -> None:
    client = make_client()
    for session in ("cs_late", "cs_in_time"):
        assert (await send_webhook(client, clock, checkout_event(session, created=clock.unix))).status_code == 200
    clock.now += 7 * DAY_S * 1000 - 1000
    assert (await claim(client, "cs_in_time")).status_code == 200
    clock.now += 2000
    before = await snapshot(store, counters=False)
    expired = assert_error(await claim(client, "cs_late"), 410, "claim_expired")
    assert expired["error"]["details"] == {"claim_window_days": 7.0, "contact": CONTACT}
    assert await snapshot(store, counters=False) == before
    # An already-claimed session stays "already claimed" after the window.
    assert_error(await claim(client, "cs_in_time"), 409, "already_claimed")


async def test_claim_window_is_configuration(make_client: MakeClient, clock: Clock) -> None:
    client = make_client(window_days=0.5)
    assert (await send_webhook(client, clock, checkout_event("cs_half_day", created=clock.unix))).status_code == 200
    clock.now += DAY_S * 1000 // 2 + 1000
    assert_error(await claim(client, "cs_half_day"), 410, "claim_expired")


async def test_payments_not_configured(make_client: MakeClient, store: Store, clock: Clock) -> None:
    configured = make_client()
    assert (await send_webhook(configured, clock, checkout_event("cs_cfg"))).status_code == 200
    client = make_client(secrets=())
    before = await snapshot(store, counters=False)
    assert_error(await claim(client, "cs_cfg"), 503, "claim_not_ready")
    assert_error(await send_webhook(client, clock, checkout_event("cs_other")), 503, "claim_not_ready")
    assert await snapshot(store, counters=False) == before


# --- the webhook's authentication ----------------------------------------------------------


def _tampered(clock: Clock) -> tuple[bytes, dict[str, str]]:
    body = event_bytes(checkout_event("cs_tamper", plan="basic"))
    headers = signed_webhook(body, [SECRET], clock.unix)
    return body.replace(b'"basic"', b'"pro"'), headers


@pytest.mark.parametrize(
    "case",
    ["tampered", "wrong_secret", "stale", "future", "missing", "malformed", "not_hex", "reserialised"],
)
async def test_rejected_webhooks_change_nothing(make_client: MakeClient, store: Store, clock: Clock, case: str) -> None:
    client = make_client()
    event = checkout_event("cs_rejected", plan="pro")
    body = event_bytes(event)
    headers = signed_webhook(body, [SECRET], clock.unix)
    if case == "tampered":
        body, headers = _tampered(clock)
    elif case == "wrong_secret":
        headers = signed_webhook(body, ["whsec_guess"], clock.unix)
    elif case == "stale":
        headers = signed_webhook(body, [SECRET], clock.unix - 301)
    elif case == "future":
        headers = signed_webhook(body, [SECRET], clock.unix + 301)
    elif case == "missing":
        headers = dict(JSON_HEADERS)
    elif case == "malformed":
        headers = {**JSON_HEADERS, "Payment-Signature": "sha256=deadbeef"}
    elif case == "not_hex":
        headers = {**JSON_HEADERS, "Payment-Signature": f"t={clock.unix},v1={'z' * 64}"}
    elif case == "reserialised":
        body = orjson.dumps(event, option=orjson.OPT_INDENT_2)  # same JSON, other bytes
    before = await snapshot(store)
    response = await send_webhook(client, clock, body, headers=headers)
    rejected = assert_error(response, 400, "bad_request")
    assert "signature" in rejected["error"]["message"]
    assert SECRET not in response.text
    assert await snapshot(store) == before, "a rejected webhook writes nothing"
    assert_error(await claim(client, "cs_rejected"), 404, "claim_pending")


async def test_signed_but_malformed_events(make_client: MakeClient, store: Store, clock: Clock) -> None:
    client = make_client()
    before = await snapshot(store)
    assert_error(await send_webhook(client, clock, b"not json"), 400, "bad_request")
    assert_error(await send_webhook(client, clock, event_bytes({"id": "evt_x"})), 400, "bad_request")
    body = event_bytes(checkout_event("cs_media"))
    headers = {**signed_webhook(body, [SECRET], clock.unix), "Content-Type": "text/plain"}
    assert_error(await send_webhook(client, clock, body, headers=headers), 415, "unsupported_media_type")
    assert await snapshot(store) == before


async def test_rotated_secrets(make_client: MakeClient, clock: Clock) -> None:
    client = make_client(secrets=(OLD_SECRET, SECRET))
    assert (await send_webhook(client, clock, checkout_event("cs_new"), secrets=(SECRET,))).status_code == 200
    assert (await send_webhook(client, clock, checkout_event("cs_old"), secrets=(OLD_SECRET,))).status_code == 200
    # The provider signs with both during its own rotation; one v1 is for a secret we never had.
    two = await send_webhook(client, clock, checkout_event("cs_two"), secrets=("whsec_unknown", SECRET))
    assert two.status_code == 200
    assert_error(
        await send_webhook(client, clock, checkout_event("cs_bad"), secrets=("whsec_unknown",)), 400, "bad_request"
    )
    for session in ("cs_new", "cs_old", "cs_two"):
        assert (await claim(client, session)).status_code == 200
    assert_error(await claim(client, "cs_bad"), 404, "claim_pending")


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Record every job the webhook hands on (and still enqueue it)."""
    from execution_proof.usecases import claiming as web_claims

    calls: list[tuple[Any, ...]] = []
    real = web_claims.enqueue

    async def spy(queue: Any, func_path: str, *args: Any, job_id: str | None = None) -> None:
        calls.append((func_path, *args, job_id))
        await real(queue, func_path, *args, job_id=job_id)

    monkeypatch.setattr(web_claims, "enqueue", spy)
    return calls


async def test_duplicate_event_processed_once(
    make_client: MakeClient, store: Store, clock: Clock, enqueued: list[tuple[Any, ...]]
) -> None:
    client = make_client()
    event = checkout_event("cs_dup", plan="basic", created=clock.unix - 5)
    assert (await send_webhook(client, clock, event)).json == {"ok": True, "received": True}
    ref = keys.checkout_ref("cs_dup")
    assert enqueued == [
        ("execution_proof.jobs.claims.index_checkout", ref, "basic", clock.unix - 5, f"index_checkout-{ref}")
    ]
    before = await snapshot(store)
    clock.now += 60_000  # the provider's retry, re-signed later
    repeat = await send_webhook(client, clock, event)
    assert repeat.json == {"ok": True, "received": True, "duplicate": True}
    assert len(enqueued) == 1
    assert await snapshot(store) == before

    first = await claim(client, "cs_dup")
    assert first.status_code == 200
    # Another event about the same checkout re-runs the job, which changes nothing.
    other = checkout_event("cs_dup", plan="pro", event_id="evt_other", created=clock.unix)
    assert (await send_webhook(client, clock, other)).status_code == 200
    assert len(enqueued) == 2
    assert_error(await claim(client, "cs_dup"), 409, "already_claimed")
    used = await create_receipt(client, first.json["api_key"], "dup")
    assert used.status_code == 201
    assert used.headers["x-service-plan"] == "basic"


@pytest.mark.parametrize(
    "event",
    [
        checkout_event("cs_ignored", event_type="checkout.session.expired"),
        checkout_event("cs_ignored", event_type="payment_intent.succeeded"),
        checkout_event("cs_ignored", payment_status="unpaid"),
        checkout_event("cs_ignored", plan=None),
        checkout_event("cs_ignored", plan="free"),
    ],
    ids=["expired", "other-type", "unpaid", "no-plan", "free-plan"],
)
async def test_other_events_are_acknowledged_and_ignored(
    make_client: MakeClient, store: Store, clock: Clock, enqueued: list[tuple[Any, ...]], event: dict[str, Any]
) -> None:
    client = make_client()
    response = await send_webhook(client, clock, event)
    assert response.status_code == 200
    assert response.json == {"ok": True, "received": True, "ignored": True}
    assert enqueued == []
    assert [k for k in await snapshot(store) if k.startswith("cs:")] == []
    assert_error(await claim(client, "cs_ignored"), 404, "claim_pending")


async def test_concurrent_claims_exactly_one_wins(make_client: MakeClient, store: Store, clock: Clock) -> None:
    client = make_client(limits=MANY_ATTEMPTS)
    assert (await send_webhook(client, clock, checkout_event("cs_race", plan="pro"))).status_code == 200
    responses = await asyncio.gather(*(claim(client, "cs_race") for _ in range(16)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 15, statuses
    assert {r.json["error"]["code"] for r in responses if r.status_code == 409} == {"already_claimed"}
    (winner,) = [r.json for r in responses if r.status_code == 200]
    members = await store.client.smembers(keys.project_api_keys_key(winner["project_id"]))
    assert len(members) == 1
    key_records = [k for k in await snapshot(store) if k.startswith("k:")]
    assert len(key_records) == 1, "the losers' inert key records are deleted"
    assert (await create_receipt(client, winner["api_key"], "race")).status_code == 201


async def test_claim_script_race_exactly_one_wins(store: Store) -> None:
    """The store-level race: 16 claims that all passed the pre-checks reach the script at
    once, each with its own (already written) key record; one creates the project."""
    now_ms = ms(START)
    ref = keys.checkout_ref("cs_script_race")
    project_id = await index_checkout_in(store.checkouts, ref, "basic", now_ms // 1000 - 10)
    records = [new_key_record(project_id, "basic", now_ms=now_ms)[1] for _ in range(16)]
    outcomes = await asyncio.gather(
        *(
            store.checkouts.claim_checkout(
                ref=ref, project_name="race", key=record, now_ms=now_ms, window_ms=DAY_S * 1000
            )
            for record in records
        )
    )
    assert sorted(o.name for o in outcomes) == ["ALREADY_CLAIMED"] * 15 + ["CLAIMED"]
    winner = records[outcomes.index(ClaimOutcome.CLAIMED)]
    assert [k for k in await snapshot(store) if k.startswith("k:")] == [keys.api_key_key(winner.key_hash)]
    assert [r.key_hash for r in await store.keys.list_project_keys(project_id)] == [winner.key_hash]
    checkout = await store.checkouts.find_checkout(ref)
    assert checkout is not None
    assert checkout.state == "claimed"


async def test_claim_attempts_are_rate_limited(make_client: MakeClient) -> None:
    client = make_client(limits={"ip_per_minute": {"unauthenticated": 3}})
    for _ in range(3):
        assert_error(await claim(client, "cs_guess"), 404, "claim_pending")
    limited = assert_error(await claim(client, "cs_guess"), 429, "rate_limited")
    assert limited["error"]["details"]["policy"] == "ip-claim"
    assert (await claim(client, "cs_guess")).headers["retry-after"] == "45"
    assert_error(await claim(client, "cs_guess", OTHER_ADDR), 404, "claim_pending")


async def test_index_job_is_idempotent(store: Store) -> None:
    ref = keys.checkout_ref("cs_idem")
    project_id = await index_checkout_in(store.checkouts, ref, "basic", 1_795_000_000, now_ms=1)
    before = await snapshot(store)
    assert await index_checkout_in(store.checkouts, ref, "pro", 1_795_000_999, now_ms=2) == project_id
    assert await snapshot(store) == before
    record = await store.checkouts.find_checkout(ref)
    assert record is not None
    assert (record.project_id, record.plan, record.created_ms, record.state) == (
        project_id,
        "basic",
        1_795_000_000_000,
        "claimable",
    )
    # A raw session id is not a reference: the job refuses it (and its message does not echo it).
    for args in [
        ("cs_1", "basic", 1),
        (ref.upper(), "basic", 1),
        (ref, "free", 1),
        (ref, "pro", 0),
        (ref, "pro", True),
    ]:
        with pytest.raises(ValueError, match=r"ref|plan|created_unix") as refused:
            await index_checkout_in(store.checkouts, *args)  # type: ignore[arg-type]
        assert str(args[0]) not in str(refused.value)


async def test_unreachable_queue_is_503_and_the_event_can_be_delivered_again(
    make_client: MakeClient, store: Store, clock: Clock
) -> None:
    from tests.conftest import free_port

    down = make_client(jobs_redis_url=f"redis://127.0.0.1:{free_port()}/0")
    event = checkout_event("cs_down", plan="basic", created=clock.unix)
    response = await send_webhook(down, clock, event)
    assert_error(response, 503, "store_unavailable")
    assert response.headers["retry-after"] == "1"
    redelivered = await send_webhook(make_client(), clock, event)
    assert redelivered.json == {"ok": True, "received": True}, "the failed attempt must not mark the event as seen"
    assert (await claim(make_client(), "cs_down")).status_code == 200


@pytest.mark.real_redis
def test_real_rq_worker_indexes_the_checkout(
    redis_url: str, receipt_root: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not inline: the webhook enqueues on the real Redis; until a worker runs the job the
    claim is 409 claim_pending; after a burst worker ran it, the claim succeeds. The job's
    id, arguments and RQ's log lines about it hold the checkout's reference, not its id."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("REDIS_URL", redis_url)
    settings = Settings(
        redis_url=redis_url,
        jobs_redis_url=redis_url,
        receipt_root=receipt_root,
        env="test",
        payment_webhook_secrets=(SECRET,),
        operator_contact=CONTACT,
    )
    clock = Clock(START)
    clock.now = int(datetime.now().timestamp() * 1000)

    async def phase(step: Callable[[Any], Any]) -> Any:
        store = open_store(redis_url)
        try:
            return await step(create_app(settings, store=store, clock_ms=clock).asgi_client)
        finally:
            await store.close()

    async def before_worker(client: Any) -> None:
        response = await send_webhook(
            client, clock, checkout_event("cs_worker", plan="basic", created=clock.unix, event_id="evt_w")
        )
        assert response.json == {"ok": True, "received": True}
        assert_error(await claim(client, "cs_worker"), 409, "claim_pending")

    asyncio.run(phase(before_worker))
    with redis.Redis.from_url(redis_url) as connection:
        queue = Queue(QUEUE_NAME, connection=connection, serializer=JSONSerializer)
        ref = keys.checkout_ref("cs_worker")
        assert queue.job_ids == [job_id_for(ref)]
        job = Job.fetch(job_id_for(ref), connection=connection, serializer=JSONSerializer)
        assert job.func_name == "execution_proof.jobs.claims.index_checkout"
        assert job.args == [ref, "basic", clock.unix]
        assert "cs_worker" not in f"{job.id} {job.description}"
        worker = SimpleWorker([queue], connection=connection, serializer=JSONSerializer)
        assert worker.work(burst=True, logging_level="INFO")
        assert job.get_status(refresh=True) == "finished"
    assert f"Job OK ({job_id_for(ref)})" in caplog.text

    async def after_worker(client: Any) -> None:
        response = await claim(client, "cs_worker")
        assert response.status_code == 200, response.text
        assert (await create_receipt(client, response.json["api_key"], "worker")).status_code == 201
        assert_error(await claim(client, "cs_worker"), 409, "already_claimed")

    asyncio.run(phase(after_worker))
    assert "cs_worker" not in caplog.text


# --- free claim -------------------------------------------------------------------------------


async def test_free_claim_once_per_address_per_day(
    make_client: MakeClient, store: Store, clock: Clock, human: FakeHumanCheck, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_client()
    response = await claim_free(client, PASS + "-1")
    assert response.status_code == 200, response.text
    body = response.json
    assert set(body) == {"ok", "api_key", "project_id", "actor_id", "plan", "warning"}
    assert (body["ok"], body["plan"]) == (True, "free")
    assert body["warning"] == "store this key now: it is shown only once"
    assert response.headers["cache-control"] == "no-store"
    assert human.requests == [
        {
            "secret": HUMAN_SECRET,
            "response": PASS + "-1",
            "remoteip": "203.0.113.7",
            "_content_type": "application/x-www-form-urlencoded",
            "_accept_encoding": "identity",  # no compressed reply to expand past the read limit
        }
    ]
    created = await create_receipt(client, body["api_key"], "free")
    assert created.status_code == 201
    assert created.headers["x-service-plan"] == "free"

    limited = await claim_free(client, PASS + "-2")
    error = assert_error(limited, 429, "rate_limited")
    midnight = ms("2026-11-22T00:00:00.000Z")
    assert limited.headers["retry-after"] == str(-(-(midnight - clock.now) // 1000))
    assert error["error"]["details"]["reset_at"] == "2026-11-22T00:00:00.000Z"
    assert len(human.requests) == 1, "a used-up day is refused before asking the provider"

    assert (await claim_free(client, PASS + "-3", OTHER_ADDR)).status_code == 200, "another address"
    clock.set("2026-11-22T00:00:01.000Z")
    assert (await claim_free(client, PASS + "-4")).status_code == 200, "the next UTC day"
    assert_error(await claim_free(client, PASS + "-5"), 429, "rate_limited")
    for secret in (HUMAN_SECRET, PASS + "-1", body["api_key"]):
        assert secret not in caplog.text


async def test_failed_check_does_not_use_up_the_day(make_client: MakeClient, store: Store) -> None:
    client = make_client()
    before = await snapshot(store, counters=False)
    refused = assert_error(await claim_free(client, FAIL), 403, "forbidden")
    assert refused["error"]["details"] == {"reasons": ["invalid-input-response"]}, "odd codes are filtered"
    assert await snapshot(store, counters=False) == before
    assert (await claim_free(client, PASS)).status_code == 200


@pytest.mark.parametrize(
    "failure", [ERROR_500, NOT_JSON, NO_SUCCESS, pytest.param(SLOW, marks=pytest.mark.slow), "down"]
)  # SLOW waits for the provider's timeout
async def test_provider_failures_fail_closed(
    make_client: MakeClient, store: Store, human: FakeHumanCheck, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    usual_timeout = human_check.TIMEOUT_S
    monkeypatch.setattr(human_check, "TIMEOUT_S", 0.3)
    down = f"http://127.0.0.1:{free_port()}/siteverify"
    client = make_client(verify_url=down if failure == "down" else None)
    before = await snapshot(store, counters=False)
    response = await claim_free(client, failure)
    assert_error(response, 500, "internal_error")
    assert HUMAN_SECRET not in response.text
    assert failure not in response.text
    assert await snapshot(store, counters=False) == before, "no key, and the day is not used up"
    # The short timeout is for the failure above; a healthy provider on a busy machine gets the usual one.
    monkeypatch.setattr(human_check, "TIMEOUT_S", usual_timeout)
    healthy = make_client()
    assert (await claim_free(healthy, PASS)).status_code == 200


async def test_free_claim_not_configured(make_client: MakeClient, human: FakeHumanCheck) -> None:
    client = make_client(human_secret=None)
    assert_error(await claim_free(client, PASS), 503, "not_configured")
    assert human.requests == []


async def test_free_claim_bad_requests(make_client: MakeClient, store: Store, human: FakeHumanCheck) -> None:
    client = make_client(limits=MANY_ATTEMPTS)
    for token in [None, 5, "", "   ", "x" * 2049, ["token"]]:
        assert_error(await claim_free(client, token), 400, "bad_request")
    _, response = await client.post(
        "/v1/claim/free", content=b'{"turnstile_token": "t", "plan": "pro"}', headers={**JSON_HEADERS, **ADDR}
    )
    assert_error(response, 400, "bad_request")
    _, response = await client.post("/v1/claim/free", content=b'{"turnstile_token": "t"}', headers=ADDR)
    assert_error(response, 415, "unsupported_media_type")
    assert human.requests == []
    assert (await claim_free(client, PASS)).status_code == 200, "bad requests did not use up the day"


async def test_two_passed_checks_racing_get_one_key(make_client: MakeClient, store: Store) -> None:
    client = make_client()
    responses = await asyncio.gather(claim_free(client, PASS + "-a"), claim_free(client, PASS + "-b"))
    assert sorted(r.status_code for r in responses) == [200, 429]
    projects = [k for k in await snapshot(store) if k.startswith("p:")]
    assert len(projects) == 1, "the refused one created nothing"


async def test_free_claims_per_day_is_configuration(make_client: MakeClient) -> None:
    client = make_client(limits={"free_claims_per_ip_per_day": 2})
    codes = [(await claim_free(client, f"{PASS}-{i}")).status_code for i in range(3)]
    assert codes == [200, 200, 429]
    closed = make_client(limits={"free_claims_per_ip_per_day": 0})
    assert_error(await claim_free(closed, PASS, OTHER_ADDR), 429, "rate_limited")
