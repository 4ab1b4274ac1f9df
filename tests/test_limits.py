"""Plans, per-minute limits and monthly quotas with an injected clock (fakeredis and real Redis)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import (
    DEFAULT_LIMITS,
    LimitsError,
    Usage,
    load_limits,
    minute_window,
    month_window,
    ratelimit_headers,
)
from execution_proof.runtime.settings import ClientIpConfig, ConfigError, Settings, load_settings
from execution_proof.usecases import creating
from execution_proof.web.app import create_app
from tests.clock import Clock, ms
from tests.conftest import auth, hash_of


@pytest.fixture
def clock() -> Clock:
    return Clock("2026-11-21T10:00:15.200Z")


@pytest.fixture
def make_client(store: Store, receipt_root: str, clock: Clock) -> Any:
    def make(limits: dict[str, Any] | None = None, ip: ClientIpConfig | None = None) -> Any:
        settings = Settings(
            redis_url="redis://injected",
            receipt_root=receipt_root,
            limits=load_limits(orjson.dumps(limits) if limits else None),
            client_ip=ip or ClientIpConfig(),
        )
        return create_app(settings, store=store, clock_ms=clock).asgi_client

    return make


async def post(client: Any, key: Any, body: dict[str, Any], path: str = "/v1/receipts", **headers: str) -> Any:
    _, response = await client.post(path, content=orjson.dumps(body), headers={**auth(key), **headers})
    return response


def assert_429(response: Any, code: str, retry_after: int) -> None:
    assert response.status_code == 429, response.text
    assert response.json["error"]["code"] == code
    assert response.headers["retry-after"] == str(retry_after)
    assert response.json["request_id"] == response.headers["x-request-id"]


# --- configuration and windows (pure) ----------------------------------------------------


def test_limits_merge_key_by_key() -> None:
    limits = load_limits('{"plans": {"free": {"monthly": 5}}, "ip_per_minute": {"unauthenticated": 3}}')
    assert limits.plan("free").monthly == 5
    assert limits.plan("free").per_minute == DEFAULT_LIMITS["plans"]["free"]["per_minute"]
    assert limits.plan("pro").monthly == 500000
    assert limits.ip_per_minute["unauthenticated"] == 3
    assert limits.ip_per_minute["authenticated"] == 180
    defaults = load_limits(None)
    assert (defaults.plan("basic").per_minute, defaults.plan("basic").monthly) == (300, 50000)
    assert defaults.plan("no-such-plan") == defaults.plan("free"), "unknown plans get the smallest limits"


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("{", "valid JSON"),
        ("[]", "object"),
        ('{"plans": {"gold": {"monthly": 1}}}', "plans.gold"),
        ('{"plans": {"free": {"monthly": -1}}}', "plans.free.monthly"),
        ('{"plans": {"free": {"monthly": 1.5}}}', "whole number"),
        ('{"plans": {"free": {"monthly": true}}}', "whole number"),
        ('{"ip_per_minute": 5}', "ip_per_minute must be an object"),
        ('{"per_minute": 5}', "unknown setting"),
    ],
)
def test_bad_limits_are_named(raw: str, fragment: str) -> None:
    with pytest.raises(LimitsError, match=fragment):
        load_limits(raw)
    with pytest.raises(ConfigError, match=fragment):
        load_settings({"LIMITS": raw})


def test_minute_window_and_retry_after() -> None:
    window = minute_window(ms("2026-11-21T10:00:15.200Z"))
    assert window.ends_at == "2026-11-21T10:01:00.000Z"
    assert window.retry_after_s == 45, "44.8 s rounds up to whole seconds"
    assert minute_window(ms("2026-11-21T10:00:59.999Z")).retry_after_s == 1
    assert minute_window(ms("2026-11-21T10:00:00.000Z")).retry_after_s == 60
    assert minute_window(ms("2026-11-21T10:00:59.999Z")).id != minute_window(ms("2026-11-21T10:01:00.000Z")).id


@pytest.mark.parametrize(
    ("now", "ends", "month_id"),
    [
        ("2026-12-31T23:59:59.500Z", "2027-01-01T00:00:00.000Z", "202612"),
        ("2027-01-01T00:00:00.000Z", "2027-02-01T00:00:00.000Z", "202701"),
        ("2028-02-29T12:00:00.000Z", "2028-03-01T00:00:00.000Z", "202802"),
        ("2026-11-30T23:59:59.999Z", "2026-12-01T00:00:00.000Z", "202611"),
    ],
)
def test_month_window(now: str, ends: str, month_id: str) -> None:
    window = month_window(ms(now))
    assert (window.ends_at, window.id) == (ends, month_id)
    assert window.retry_after_s == max(1, -(-(ms(ends) - ms(now)) // 1000))


def test_ratelimit_header_fields() -> None:
    window = minute_window(ms("2026-11-21T10:00:15.200Z"))
    headers = ratelimit_headers([Usage("key", 60, 12, window, 60), Usage("ip-authenticated", 180, 30, window, 60)])
    assert headers["RateLimit-Policy"] == '"key";q=60;w=60, "ip-authenticated";q=180;w=60'
    assert headers["RateLimit"] == '"key";r=48;t=45, "ip-authenticated";r=150;t=45'
    assert ratelimit_headers([]) == {}


# --- per-key minute limit ---------------------------------------------------------------


async def test_free_key_gets_exactly_60_creates_a_minute(make_client: Any, store: Store, clock: Clock) -> None:
    client = make_client()
    key = await create_project_key(store.keys, project_name="p", plan="free")
    for i in range(60):
        response = await post(client, key, {"input_hash": hash_of(f"n{i}")})
        assert response.status_code == 201, (i, response.text)
    assert response.headers["ratelimit"].startswith('"key";r=0;t=45')
    refused = await post(client, key, {"input_hash": hash_of("n60")})
    assert_429(refused, "rate_limited", 45)
    assert refused.json["error"]["details"] == {"policy": "key", "limit": 60, "reset_at": "2026-11-21T10:01:00.000Z"}
    assert refused.headers["x-service-monthly-used"] == "60", "quota headers come with the 429 too"
    clock.set("2026-11-21T10:00:59.400Z")
    assert_429(await post(client, key, {"input_hash": hash_of("n61")}), "rate_limited", 1)
    clock.set("2026-11-21T10:01:00.000Z")
    again = await post(client, key, {"input_hash": hash_of("n62")})
    assert again.status_code == 201
    assert again.json["quota"]["monthly_used"] == 61, "refused requests consumed no quota"


async def test_plans_have_their_own_minute_limits(make_client: Any, store: Store) -> None:
    client = make_client({"plans": {"basic": {"per_minute": 3}, "pro": {"per_minute": 4}}})
    for plan, limit in (("basic", 3), ("pro", 4)):
        key = await create_project_key(store.keys, project_name=plan, plan=plan)
        codes = [(await post(client, key, {"input_hash": hash_of(f"{plan}{i}")})).status_code for i in range(limit + 1)]
        assert codes == [201] * limit + [429]


async def test_replays_count_as_requests_not_as_receipts(make_client: Any, store: Store) -> None:
    client = make_client({"plans": {"free": {"per_minute": 3}}})
    key = await create_project_key(store.keys, project_name="p", plan="free")
    first = await post(client, key, {"input_hash": hash_of("a")})
    replay = await post(client, key, {"input_hash": hash_of("a")})
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json["quota"]["monthly_used"] == 1
    assert replay.headers["x-service-monthly-used"] == "1"
    assert replay.headers["ratelimit"].startswith('"key";r=1;')
    assert (await post(client, key, {"input_hash": hash_of("b")})).status_code == 201
    assert_429(await post(client, key, {"input_hash": hash_of("a")}), "rate_limited", 45)


async def test_rejected_requests_consume_nothing(make_client: Any, store: Store) -> None:
    client = make_client({"plans": {"free": {"per_minute": 2, "monthly": 2}}})
    key = await create_project_key(store.keys, project_name="p", plan="free")
    for bad in (
        {"input_hash": "nope"},
        {"input_hash": hash_of("x"), "tags": ["a"]},
        {"input_hash": hash_of("x"), "run_id": "a@b.example"},
    ):
        assert (await post(client, key, bad)).status_code == 400
    _, usage = await client.get("/v1/usage", headers=auth(key))
    assert usage.json["minute"]["used"] == 0
    assert usage.json["month"]["used"] == 0
    assert [(await post(client, key, {"input_hash": hash_of(f"ok{i}")})).status_code for i in range(2)] == [201, 201]


async def test_verify_counts_against_the_key_limit(make_client: Any, store: Store) -> None:
    client = make_client({"plans": {"free": {"per_minute": 3}}})
    key = await create_project_key(store.keys, project_name="p", plan="free")
    receipt = (await post(client, key, {"input_hash": hash_of("a")})).json["receipt"]
    body = {"receipt_id": receipt["receipt_id"], "input_hash": hash_of("a")}
    for _ in range(2):
        response = await post(client, key, body, path="/v1/verify")
        assert response.status_code == 200
        assert response.headers["ratelimit-policy"].startswith('"key";q=3;w=60')
    assert_429(await post(client, key, body, path="/v1/verify"), "rate_limited", 45)
    assert_429(await post(client, key, {"input_hash": hash_of("b")}), "rate_limited", 45)


# --- monthly quota ----------------------------------------------------------------------


async def test_small_quota_counts_down_then_refuses(make_client: Any, store: Store, clock: Clock) -> None:
    client = make_client({"plans": {"free": {"monthly": 3}}})
    key = await create_project_key(store.keys, project_name="p", plan="free")
    first = None
    for used in (1, 2, 3):
        response = await post(client, key, {"input_hash": hash_of(f"q{used}")})
        assert response.status_code == 201
        first = first or response
        assert response.json["quota"] == {
            "plan": "free",
            "monthly_limit": 3,
            "monthly_used": used,
            "monthly_remaining": 3 - used,
            "monthly_reset_at": "2026-12-01T00:00:00.000Z",
        }
        assert response.headers["x-service-plan"] == "free"
        assert response.headers["x-service-monthly-limit"] == "3"
        assert response.headers["x-service-monthly-used"] == str(used)
        assert response.headers["x-service-monthly-remaining"] == str(3 - used)
        assert response.headers["x-service-monthly-reset-at"] == "2026-12-01T00:00:00.000Z"
    before = sorted(await store.client.keys("*"))
    refused = await post(client, key, {"input_hash": hash_of("q4")})
    seconds_to_december = (ms("2026-12-01T00:00:00.000Z") - clock.now + 999) // 1000
    assert_429(refused, "quota_exceeded", seconds_to_december)
    assert refused.headers["x-service-monthly-remaining"] == "0"
    assert refused.json["error"]["details"]["monthly_reset_at"] == "2026-12-01T00:00:00.000Z"
    assert sorted(await store.client.keys("*")) == before, "a refused create writes no receipt"
    assert first is not None
    replay = await post(client, key, {"input_hash": hash_of("q1")})
    assert replay.status_code == 200
    assert replay.json["receipt"] == first.json["receipt"]
    assert replay.json["quota"]["monthly_used"] == 3
    receipt_id = first.json["receipt"]["receipt_id"]
    verify = await post(client, key, {"receipt_id": receipt_id, "input_hash": hash_of("q1")}, path="/v1/verify")
    assert verify.status_code == 200, "verify is not a receipt and is not held back by the quota"


async def test_quota_resets_from_december_to_january(make_client: Any, store: Store, clock: Clock) -> None:
    client = make_client({"plans": {"free": {"monthly": 2}}})
    key = await create_project_key(store.keys, project_name="p", plan="free")
    clock.set("2026-12-31T23:59:58.000Z")
    assert (await post(client, key, {"input_hash": hash_of("d1")})).status_code == 201
    assert (await post(client, key, {"input_hash": hash_of("d2")})).status_code == 201
    clock.set("2026-12-31T23:59:59.500Z")
    refused = await post(client, key, {"input_hash": hash_of("d3")})
    assert_429(refused, "quota_exceeded", 1)
    assert refused.headers["x-service-monthly-reset-at"] == "2027-01-01T00:00:00.000Z"
    clock.set("2027-01-01T00:00:00.000Z")
    january = await post(client, key, {"input_hash": hash_of("d3")})
    assert january.status_code == 201
    assert january.json["quota"]["monthly_used"] == 1
    assert january.json["quota"]["monthly_reset_at"] == "2027-02-01T00:00:00.000Z"


async def test_quota_belongs_to_the_project(make_client: Any, store: Store) -> None:
    client = make_client({"plans": {"free": {"monthly": 1}}})
    a = await create_project_key(store.keys, project_name="a", plan="free")
    b = await create_project_key(store.keys, project_name="b", plan="free")
    assert (await post(client, a, {"input_hash": hash_of("1")})).status_code == 201
    assert (await post(client, b, {"input_hash": hash_of("1")})).status_code == 201
    assert (await post(client, a, {"input_hash": hash_of("2")})).json["error"]["code"] == "quota_exceeded"


# --- per-IP limits ----------------------------------------------------------------------


async def test_bad_keys_are_throttled_at_the_11th_attempt(make_client: Any, store: Store, clock: Clock) -> None:
    client = make_client()
    valid = await create_project_key(store.keys, project_name="p", plan="free")
    for i in range(10):
        response = await post(client, f"eps_wrongwrongwrongwrong{i:02d}", {"input_hash": hash_of("x")})
        assert response.status_code == 401, i
    assert_429(await post(client, "eps_wrongwrongwrongwrong99", {"input_hash": hash_of("x")}), "rate_limited", 45)
    _, missing = await client.post("/v1/verify", content=b"{}", headers={"Content-Type": "application/json"})
    assert_429(missing, "rate_limited", 45)
    # Applied before authentication: a valid key from this address is held back too, or a
    # guesser would learn from the one 201 which key was real.
    assert_429(await post(client, valid, {"input_hash": hash_of("x")}), "rate_limited", 45)
    clock.set("2026-11-21T10:01:00.000Z")
    assert (await post(client, valid, {"input_hash": hash_of("x")})).status_code == 201


@pytest.mark.parametrize("one_call", [True, False], ids=["one-call", "two-steps"])
async def test_a_request_refused_for_its_key_or_address_never_reads_its_body(
    make_client: Any, store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch, one_call: bool
) -> None:
    """Authentication and the address's limits come before the body is parsed or scanned,
    so a bad key cannot make the server scan 2 KB of adversarial strings per request."""
    monkeypatch.setattr(store.keys, "_one_script", one_call)
    parsed: list[int] = []
    original = creating.parse_create_request

    def counted(body: Any) -> Any:
        parsed.append(1)
        return original(body)

    monkeypatch.setattr(creating, "parse_create_request", counted)
    client = make_client({"ip_per_minute": {"authenticated": 2, "unauthenticated": 2}})
    valid = await create_project_key(store.keys, project_name="p", plan="free")
    body = {"input_hash": hash_of("x"), "code_ref": "a." * 128, "tags": {f"t{i}": "a." * 128 for i in range(7)}}
    refused = [
        await post(client, "eps_wrongwrongwrongwrong00", body),  # unknown key: 401
        await post(client, "short", body),  # implausible key: 401
        await post(client, "eps_wrongwrongwrongwrong01", body),  # the address is now throttled: 429
        await post(client, valid, body),  # throttled whatever the key
    ]
    assert [r.status_code for r in refused] == [401, 401, 429, 429]
    assert parsed == []
    clock.set("2026-11-21T10:01:00.000Z")
    ok = [await post(client, valid, {"input_hash": hash_of(f"ok{i}")}) for i in range(2)]
    assert [r.status_code for r in ok] == [201, 201]
    assert len(parsed) == 2
    full = await post(client, valid, body)  # the address's authenticated allowance is used up
    assert_429(full, "rate_limited", 60)
    assert len(parsed) == 2


@pytest.mark.parametrize("one_call", [True, False], ids=["one-call", "two-steps"])
async def test_a_request_refused_for_its_body_is_refunded(
    make_client: Any, store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch, one_call: bool
) -> None:
    """The address's count is taken with the key lookup (one round trip), before the body is
    read; a body, claim or header then refused gives it back, so refusals use up nothing."""
    monkeypatch.setattr(store.keys, "_one_script", one_call)
    client = make_client({"ip_per_minute": {"authenticated": 3}})
    key = await create_project_key(store.keys, project_name="p", plan="pro")
    other = await create_project_key(store.keys, project_name="q", plan="pro")
    address = keys.ip_counter_key("unknown", "authenticated", minute_window(clock()).id)
    assert (await post(client, key, {"input_hash": hash_of("a")})).status_code == 201
    assert await store.client.get(address) == b"1"
    for body, headers, status in [
        ({"input_hash": "nope"}, {}, 400),
        ({"input_hash": hash_of("b"), "run_id": "a@b.example"}, {}, 400),
        ({"input_hash": hash_of("b"), "project_id": other["project_id"]}, {}, 403),
        ({"input_hash": hash_of("b")}, {"Idempotency-Key": "\t"}, 400),
    ]:
        response = await post(client, key, body, **headers)
        assert response.status_code == status, response.text
        assert await store.client.get(address) == b"1", body
    await store.client.delete(address)
    assert (await post(client, key, {"input_hash": "nope"})).status_code == 400
    assert await store.client.exists(address) == 0, "a refund leaves no counter behind"
    assert [(await post(client, key, {"input_hash": hash_of(f"c{i}")})).status_code for i in range(4)] == [
        201,
        201,
        201,
        429,
    ]


async def test_authenticated_requests_per_address(make_client: Any, store: Store) -> None:
    client = make_client({"ip_per_minute": {"authenticated": 4}})
    keys = [await create_project_key(store.keys, project_name=f"p{i}", plan="pro") for i in range(3)]
    codes = [(await post(client, keys[i % 3], {"input_hash": hash_of(f"a{i}")})).status_code for i in range(6)]
    assert codes == [201, 201, 201, 201, 429, 429]


@pytest.mark.parametrize(
    ("scope", "path"),
    [("public_key", "/v1/public-key"), ("get_receipt", "/v1/receipts/rcpt_01AAAAAAAAAAAAAAAAAAAAAAAA")],
)
async def test_public_reads_per_address(make_client: Any, scope: str, path: str) -> None:
    client = make_client({"ip_per_minute": {scope: 3}})
    statuses = []
    for _ in range(4):
        _, response = await client.get(path)
        statuses.append(response.status_code)
    assert statuses[:3] == [200 if scope == "public_key" else 404] * 3
    assert statuses[3] == 429
    _, response = await client.get(path)
    assert response.json["error"]["code"] == "rate_limited"
    assert response.headers["ratelimit"] == f'"ip-{scope}";r=0;t=45'


# --- client address ---------------------------------------------------------------------


async def test_unconfigured_forwarded_headers_are_ignored(make_client: Any) -> None:
    client = make_client({"ip_per_minute": {"public_key": 2}})
    codes = []
    for i in range(3):
        _, response = await client.get(
            "/v1/public-key", headers={"X-Forwarded-For": f"203.0.113.{i}", "Fly-Client-IP": f"198.51.100.{i}"}
        )
        codes.append(response.status_code)
    assert codes == [200, 200, 429], "spoofed headers must not open new buckets"


async def test_configured_real_ip_header(make_client: Any) -> None:
    client = make_client({"ip_per_minute": {"public_key": 1}}, ClientIpConfig(real_ip_header="Fly-Client-IP"))

    async def status(headers: dict[str, str]) -> int:
        _, response = await client.get("/v1/public-key", headers=headers)
        return int(response.status_code)

    assert await status({"Fly-Client-IP": "203.0.113.7"}) == 200
    assert await status({"Fly-Client-IP": "203.0.113.7"}) == 429
    assert await status({"Fly-Client-IP": "203.0.113.8"}) == 200, "another client has its own bucket"
    assert await status({}) == 200, "without the header: a bucket of its own, not the proxy's"
    assert await status({}) == 429
    assert await status({"Fly-Client-IP": "203.0.113.9"}) == 200


async def test_forwarded_for_with_proxy_count(make_client: Any) -> None:
    client = make_client({"ip_per_minute": {"public_key": 1}}, ClientIpConfig(proxies_count=1))

    async def status(xff: str | None) -> int:
        _, response = await client.get("/v1/public-key", headers={"X-Forwarded-For": xff} if xff else {})
        return int(response.status_code)

    assert await status("198.51.100.1, 203.0.113.7") == 200
    assert await status("10.9.9.9, 203.0.113.7") == 429, "only the hop our proxy saw counts; the rest is spoofable"
    assert await status("203.0.113.8") == 200


def test_client_address_buckets() -> None:
    from execution_proof.web.client_ip import ip_bucket

    assert ip_bucket("2001:db8:1:2:3:4:5:6") == ip_bucket("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    assert ip_bucket("::ffff:203.0.113.7") == "203.0.113.7"
    assert ip_bucket("[2001:db8::1]") == "2001:db8::/64"
    assert ip_bucket("not-an-ip") is None


def test_proxy_settings_from_environment() -> None:
    settings = load_settings({"REAL_IP_HEADER": "Fly-Client-IP"})
    assert settings.client_ip == ClientIpConfig(real_ip_header="Fly-Client-IP", proxies_count=0)
    assert load_settings({"PROXIES_COUNT": "2"}).client_ip.proxies_count == 2
    with pytest.raises(ConfigError, match="PROXIES_COUNT"):
        load_settings({"PROXIES_COUNT": "two"})


# --- usage ------------------------------------------------------------------------------


async def test_usage_endpoint(make_client: Any, store: Store) -> None:
    client = make_client({"plans": {"basic": {"per_minute": 10, "monthly": 100}}})
    key = await create_project_key(store.keys, project_name="p", plan="basic")
    for i in range(3):
        await post(client, key, {"input_hash": hash_of(f"u{i}")})
    await post(client, key, {"input_hash": hash_of("u0")})
    _, response = await client.get("/v1/usage", headers=auth(key))
    assert response.status_code == 200
    assert response.json == {
        "ok": True,
        "plan": "basic",
        "project_id": key["project_id"],
        "minute": {
            "limit": 10,
            "used": 4,
            "remaining": 6,
            "reset_at": "2026-11-21T10:01:00.000Z",
            "reset_in_seconds": 45,
        },
        "month": {
            "limit": 100,
            "used": 3,
            "remaining": 97,
            "reset_at": "2026-12-01T00:00:00.000Z",
            "reset_in_seconds": (ms("2026-12-01T00:00:00.000Z") - ms("2026-11-21T10:00:15.200Z") + 999) // 1000,
        },
    }
    _, again = await client.get("/v1/usage", headers=auth(key))
    assert again.json["minute"]["used"] == 4, "reading usage does not use up the key's requests"
    _, unauthorized = await client.get("/v1/usage")
    assert unauthorized.status_code == 401


async def test_a_valid_key_is_read_with_the_failed_auth_count_in_one_round_trip(
    client: Any, store: Store, api_key: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key record, the address's failed-auth count and its request counter come from
    one script call (kv/lua/authenticate.lua); the separate reads remain only for requests
    without a plausible key (and on a Cluster: tests/test_cluster.py)."""
    calls: dict[str, int] = {}
    names = ("find_api_key", "read_ip_counter", "find_api_key_and_read_ip_counter", "authenticate", "hit_ip_counter")
    for name in names:
        part = store.counters if hasattr(store.counters, name) else store.keys
        original = getattr(part, name)

        async def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return await _original(*args, **kwargs)

        monkeypatch.setattr(part, name, counted)
    _, created = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("one-trip")}), headers=auth(api_key)
    )
    assert created.status_code == 201
    assert calls == {"authenticate": 1}
    calls.clear()
    _, usage = await client.get("/v1/usage", headers=auth(api_key))
    assert usage.status_code == 200
    assert calls == {"authenticate": 1}
    calls.clear()
    _, missing = await client.post("/v1/receipts", content=b"{}", headers={"Content-Type": "application/json"})
    assert missing.status_code == 401
    assert calls == {"read_ip_counter": 1, "hit_ip_counter": 1}  # the throttle check, then the failure counted


async def _refusal_outcomes(make_client: Any, store: Store, clock: Clock) -> list[tuple[str, int, str | None, str]]:
    """Every way an authenticated request can be refused or pass, each followed by a read
    of what it counted: (case, status, error code, the address's authenticated counter and
    the key's usage after it)."""
    client = make_client({"ip_per_minute": {"authenticated": 12, "unauthenticated": 3}})
    key = await create_project_key(store.keys, project_name="p", plan="pro")
    other = await create_project_key(store.keys, project_name="q", plan="pro")
    revoked = await create_project_key(store.keys, project_name="r", plan="pro")
    await store.keys.revoke_api_key(revoked["key_hash"])
    lapsed = await create_project_key(store.keys, project_name="s", plan="pro")  # a suspension that has ended
    await store.keys.set_project_suspension(lapsed["project_id"], str(ms("2026-11-01T00:00:00.000Z")))
    suspended = await create_project_key(store.keys, project_name="t", plan="pro")
    await store.keys.set_project_suspension(suspended["project_id"], "forever")
    window = minute_window(ms("2026-11-21T10:00:15.200Z")).id
    address = keys.ip_counter_key("unknown", "authenticated", window)  # the ASGI client's address bucket
    ok = {"input_hash": hash_of("ok")}
    cases: list[tuple[str, Any, dict[str, Any], str, dict[str, str]]] = [
        ("create", key, ok, "/v1/receipts", {}),
        ("bad body", key, {"input_hash": "nope"}, "/v1/receipts", {}),
        ("bad header", key, ok, "/v1/receipts", {"Idempotency-Key": "\t"}),
        ("bad body and header", key, {"input_hash": "nope"}, "/v1/receipts", {"Idempotency-Key": "\t"}),
        ("other project", key, {**ok, "project_id": other["project_id"]}, "/v1/receipts", {}),
        ("other actor", key, {**ok, "actor_id": other["actor_id"]}, "/v1/receipts", {}),
        (
            "claims and header",
            key,
            {**ok, "project_id": other["project_id"]},
            "/v1/receipts",
            {"Idempotency-Key": "\t"},
        ),
        ("lapsed suspension", lapsed, {"input_hash": hash_of("lapsed")}, "/v1/receipts", {}),
        ("suspended", suspended, ok, "/v1/receipts", {}),
        ("verify, bad body", key, {"receipt_id": 5}, "/v1/verify", {}),
        ("revoked", revoked, ok, "/v1/receipts", {}),
        ("unknown", "eps_unknownunknownunknown00", ok, "/v1/receipts", {}),
        ("unknown again", "eps_unknownunknownunknown01", ok, "/v1/receipts", {}),
        ("throttled", key, ok, "/v1/receipts", {}),
    ]
    outcomes = []
    for name, who, body, path, headers in cases:
        response = await post(client, who, body, path=path, **headers)
        error = response.json.get("error", {}).get("code") if response.status_code >= 400 else None
        counted = int(await store.client.get(address) or 0)
        failed = int(await store.client.get(keys.ip_counter_key("unknown", "unauthenticated", window)) or 0)
        minute, month = await store.counters.read_usage(key["project_id"], key["key_hash"], window, "202611")
        outcomes.append((name, response.status_code, error, f"ip={counted} failed={failed} key={minute} month={month}"))
    clock.set("2026-11-21T10:01:00.000Z")
    window = minute_window(ms("2026-11-21T10:01:00.000Z")).id
    for i in range(3):
        response = await post(client, key, {"input_hash": hash_of(f"fill{i}")})
        outcomes.append((f"fill {i}", response.status_code, None, ""))
    await store.client.set(keys.ip_counter_key("unknown", "authenticated", window), 12)
    full = await post(client, key, {"input_hash": hash_of("full")})
    outcomes.append(("address full", full.status_code, full.json["error"]["code"], full.headers.get("ratelimit", "")))
    return outcomes


async def test_one_call_authentication_refuses_and_counts_like_the_two_steps(
    make_client: Any, store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kv/lua/authenticate.lua folds the key lookup, the failed-auth throttle and the
    address's counter into one call: every refusal, its order and what it counts must be
    exactly those of the two-step path that a Cluster keeps."""
    one_call = await _refusal_outcomes(make_client, store, clock)
    await store.client.flushdb()
    clock.set("2026-11-21T10:00:15.200Z")
    monkeypatch.setattr(store.keys, "_one_script", False)
    two_steps = await _refusal_outcomes(make_client, store, clock)
    assert one_call == two_steps
    statuses = {name: (status, error) for name, status, error, _ in one_call}
    assert statuses["create"] == (201, None)
    assert statuses["bad header"] == (400, "bad_request")
    assert statuses["claims and header"][0] == 403  # the claim is checked before the header
    assert statuses["lapsed suspension"] == (201, None)
    assert statuses["suspended"] == (403, "forbidden")
    assert statuses["revoked"] == (401, "unauthorized")
    assert statuses["throttled"] == (429, "rate_limited")
    assert statuses["address full"][:2] == (429, "rate_limited")
    assert one_call[-1][3].startswith('"ip-authenticated";r=0;')
