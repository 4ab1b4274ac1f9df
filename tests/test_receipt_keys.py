"""Receipt keys certified per process (usecases/signing_keys.py): the root certifies, the
registry shares, keys renew from half their lifetime, revocations and expiry stop signing,
and the request path honours all of it (docs/keys.md)."""

from __future__ import annotations

import hashlib
from typing import Any

import fakeredis
import orjson
import pytest

from execution_proof.kv import keys as kv_keys
from execution_proof.kv.logstore.log import Identity
from execution_proof.kv.records import LogQueue
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import SigningKeyUnavailable
from execution_proof.receipts.key_certificates import (
    KeyCertificate,
    KeyRevocation,
    KeyVerdict,
    Root,
    time_ms,
    time_text,
)
from execution_proof.receipts.verifier import check_receipt
from execution_proof.runtime.settings import ConfigError, Settings, load_settings, require_receipt_root
from execution_proof.transparency import tlog
from execution_proof.transparency.signer import KeySigner, SeedSigner
from execution_proof.usecases.signing_keys import KeyState, ReceiptKeys, RootUnavailable, revoke_key
from execution_proof.web.app import create_app
from tests.cluster import redis_cluster  # noqa: F401  (the session fixture)
from tests.conftest import TEST_ROOT, auth, hash_of

T0 = time_ms("2026-11-29T00:00:00.000Z")
LIFETIME_S = 600
LOG = LogQueue(Identity("example.com/v1/log", "example.com/v1/log+00000000+AQ"), 1000)


def seeded(label: str) -> SeedSigner:
    return SeedSigner(hashlib.sha256(label.encode()).digest())


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class FlakyRoot:
    """A root whose signing fails while ``down`` (a token pulled out, a KMS refusing)."""

    def __init__(self, signer: KeySigner) -> None:
        self.signer = signer
        self.down = False

    def public_key(self) -> bytes:
        return self.signer.public_key()

    def sign(self, message: bytes) -> bytes:
        if self.down:
            raise OSError("the token is gone")
        return self.signer.sign(message)


def lifecycle(store: Store, clock: Clock, root: KeySigner = TEST_ROOT, **kwargs: Any) -> ReceiptKeys:
    return ReceiptKeys(
        store.signing_keys,
        lambda: root,
        "file:/etc/eps/root.key",
        lifetime_s=LIFETIME_S,
        retention_days=1,
        clock_ms=clock,
        **kwargs,
    )


@pytest.fixture
def fresh_store() -> Store:
    return Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))


async def test_start_certifies_a_key_by_the_root_and_publishes_it_before_signing(fresh_store: Store) -> None:
    clock = Clock()
    keys = lifecycle(fresh_store, clock, log_queue=fresh_store.log_queue, log_identity=LOG)
    with pytest.raises(SigningKeyUnavailable):
        keys.signing(clock.now)
    # No integrator has made the log's store yet: the certificate waits in the process (an
    # entry beside a store not yet made would have every worker refuse that store as lost).
    await keys.start()
    keys.signing(clock.now)
    own_queue = kv_keys.log_queue_key(LOG.identity, kv_keys.LOG_OWN_QUEUE)
    assert await fresh_store.client.llen(own_queue) == 0
    await fresh_store.log_queue.log_tell_size(LOG.identity, 0)  # what the integrator says once it made the store
    await keys.step()
    ring = keys.signing(clock.now)
    kid = keys.active_kid
    assert kid is not None and kid.startswith("key-") and ring.active_kid == kid
    read = await fresh_store.signing_keys.read()
    root = Root.of(TEST_ROOT.public_key())
    assert set(read.roots) == {root.kid}
    certificate = KeyCertificate.parse(orjson.loads(read.certificates[kid]))
    assert certificate.signed_by(TEST_ROOT.public_key()) and certificate.root_kid == root.kid
    assert (certificate.not_before_ms, certificate.not_after_ms) == (T0, T0 + LIFETIME_S * 1000)
    assert certificate.public_key == bytes(ring.active_signer.verify_key)  # type: ignore[union-attr]
    # The certificate waits in the log's own queue, exactly as section 10's entry kind reads.
    queued = await fresh_store.client.lrange(kv_keys.log_queue_key(LOG.identity, kv_keys.LOG_OWN_QUEUE), 0, -1)
    assert queued == [tlog.KEY_CERTIFICATE_HEADER + certificate.entry_body() + b"\n"]
    assert await fresh_store.log_queue.log_pending(LOG.identity) == 1
    key = tlog.entry_key(queued[0])
    assert key is not None and key.entry_id == kid and key.project_id is None


async def test_every_process_knows_every_process_key_and_answers_with_its_own(fresh_store: Store) -> None:
    clock = Clock()
    first, second = lifecycle(fresh_store, clock), lifecycle(fresh_store, clock)
    await first.start()
    await second.start()
    assert first.active_kid != second.active_kid
    await first.refresh()
    for process in (first, second):
        view = process.view()
        assert set(view.keys) == {first.active_kid, second.active_kid}
        assert view.active_kid == process.active_kid
        assert view.roots == {Root.of(TEST_ROOT.public_key()).kid: TEST_ROOT.public_key()}
        assert all(view.judge(kid, time_text(clock.now)) is KeyVerdict.OK for kid in view.keys)


async def test_a_key_renews_from_half_its_lifetime_and_the_old_one_still_verifies(fresh_store: Store) -> None:
    clock = Clock()
    keys = lifecycle(fresh_store, clock)
    await keys.start()
    old = keys.active_kid
    clock.now += LIFETIME_S * 1000 // 2 - 1
    assert not keys.needs_renewal(clock.now)
    clock.now += 1
    assert keys.needs_renewal(clock.now)
    await keys.renew()
    assert keys.active_kid != old and not keys.needs_renewal(clock.now)
    view = keys.view()
    assert {old, keys.active_kid} <= set(view.keys)
    assert view.judge(old, time_text(T0 + 1000)) is KeyVerdict.OK
    assert view.judge(old, time_text(T0 + LIFETIME_S * 1000 + 1)) is KeyVerdict.OUTSIDE_CERTIFICATE


async def test_renewal_failing_into_the_last_tenth_is_expiring_then_unavailable(fresh_store: Store) -> None:
    clock = Clock()
    root = FlakyRoot(TEST_ROOT)
    keys = lifecycle(fresh_store, clock, root)
    await keys.start()
    root.down = True
    clock.now += LIFETIME_S * 1000 // 2
    with pytest.raises(RootUnavailable, match=r"file:/etc/eps/root.key: OSError: the token is gone"):
        await keys.renew()
    await keys.step()  # the loop's turn: the renewal fails, is recorded and backs off
    assert keys._renew_failed_since == clock.now
    assert keys.health(clock.now) == "ok"  # the current key still signs
    clock.now = T0 + LIFETIME_S * 1000 * 9 // 10
    await keys.refresh()
    assert keys.health(clock.now) == "expiring"
    keys.signing(clock.now)
    clock.now = T0 + LIFETIME_S * 1000 + 1
    await keys.refresh()
    assert keys.health(clock.now) == "unavailable"
    with pytest.raises(SigningKeyUnavailable) as refused:
        keys.signing(clock.now)
    assert refused.value.status == 500 and refused.value.code == "signing_key_unavailable"
    assert int(refused.value.response_headers["Retry-After"]) >= 1
    root.down = False
    await keys.renew()
    assert keys.health(clock.now) == "ok"


async def test_an_unreadable_key_state_for_a_tenth_of_the_lifetime_stops_signing(fresh_store: Store) -> None:
    clock = Clock()
    keys = lifecycle(fresh_store, clock)
    await keys.start()
    clock.now += LIFETIME_S * 1000 // 10
    keys.signing(clock.now)
    clock.now += 1
    with pytest.raises(SigningKeyUnavailable, match="shared key state"):
        keys.signing(clock.now)
    await keys.refresh()
    keys.signing(clock.now)


async def test_a_revoked_key_stops_signing_at_once_and_a_new_one_is_certified(fresh_store: Store) -> None:
    clock = Clock()
    keys = lifecycle(fresh_store, clock, log_queue=fresh_store.log_queue, log_identity=LOG)
    await fresh_store.log_queue.log_tell_size(LOG.identity, 0)
    await keys.start()
    kid = keys.active_kid
    assert kid is not None
    revocation = await revoke_key(
        fresh_store.signing_keys,
        TEST_ROOT,
        kid,
        after_ms=clock.now + 2000,
        reason="laptop lost",
        log_queue=fresh_store.log_queue,
        log_identity=LOG,
    )
    assert revocation.signed_by(TEST_ROOT.public_key()) and revocation.reason == "laptop lost"
    keys.signing(clock.now)  # not read yet
    await keys.refresh()
    with pytest.raises(SigningKeyUnavailable, match="revoked"):
        keys.signing(clock.now)
    assert keys.needs_renewal(clock.now)
    await keys.renew()
    assert keys.active_kid != kid
    keys.signing(clock.now)
    view = keys.view()
    assert view.judge(kid, time_text(clock.now + 1999)) is KeyVerdict.OK  # honest receipts before it
    assert view.judge(kid, time_text(clock.now + 2000)) is KeyVerdict.REVOKED
    queued = await fresh_store.client.lrange(kv_keys.log_queue_key(LOG.identity, kv_keys.LOG_OWN_QUEUE), 0, -1)
    assert queued[1] == tlog.KEY_REVOCATION_HEADER + revocation.entry_body() + b"\n"
    # A later revocation never pushes an earlier one back; only the certifying root revokes.
    again = await revoke_key(
        fresh_store.signing_keys,
        TEST_ROOT,
        kid,
        after_ms=clock.now + 9000,
        reason="",
        log_queue=None,
        log_identity=None,
    )
    assert again == revocation
    with pytest.raises(PermissionError, match="certified by root-"):
        await revoke_key(
            fresh_store.signing_keys,
            seeded("another root"),
            kid,
            after_ms=0,
            reason="",
            log_queue=None,
            log_identity=None,
        )
    with pytest.raises(LookupError):
        await revoke_key(
            fresh_store.signing_keys,
            TEST_ROOT,
            "key-0000000000000000",
            after_ms=0,
            reason="",
            log_queue=None,
            log_identity=None,
        )


async def test_several_roots_each_certify_their_own_machines_keys(fresh_store: Store) -> None:
    clock = Clock()
    one, two = (
        lifecycle(fresh_store, clock, seeded("machine one")),
        lifecycle(fresh_store, clock, seeded("machine two")),
    )
    await one.start()
    await two.start()
    await one.refresh()
    listing = KeyState.parse(await fresh_store.signing_keys.read()).listing(clock.now)
    assert {r["kid"] for r in listing["roots"]} == {
        Root.of(seeded("machine one").public_key()).kid,
        Root.of(seeded("machine two").public_key()).kid,
    }
    by_kid = {k["kid"]: k for k in listing["keys"]}
    assert by_kid[one.active_kid]["root_kid"] == Root.of(seeded("machine one").public_key()).kid
    assert by_kid[two.active_kid]["root_kid"] == Root.of(seeded("machine two").public_key()).kid
    assert {k["state"] for k in listing["keys"]} == {"active"}
    assert set(one.view().keys) == set(two.view().keys) == set(by_kid)


async def test_the_registry_drops_what_no_root_signed(fresh_store: Store) -> None:
    """A certificate written into Redis by someone without the root is never used or listed."""
    clock = Clock()
    keys = lifecycle(fresh_store, clock)
    await keys.start()
    forged = KeyCertificate.parse(orjson.loads((await fresh_store.signing_keys.read()).certificates[keys.active_kid]))
    other = seeded("forged key")
    fake = orjson.loads(orjson.dumps(forged.to_json()))
    fake.update(kid="key-" + hashlib.sha256(other.public_key()).hexdigest()[:16])
    from execution_proof.receipts.encoding import b64url_encode

    fake["public_key_base64url"] = b64url_encode(other.public_key())
    await fresh_store.signing_keys.add_certificate(fake["kid"], orjson.dumps(fake))
    await keys.refresh()
    assert fake["kid"] not in keys.view().keys and len(keys.view().keys) == 1


async def test_a_key_is_listed_until_not_after_plus_retention(fresh_store: Store) -> None:
    clock = Clock()
    keys = lifecycle(fresh_store, clock)
    await keys.start()
    old = keys.active_kid
    clock.now += LIFETIME_S * 1000
    await keys.renew()
    await keys.refresh(force=True)
    assert old in keys.view().keys
    clock.now += 86_400_000 + 1  # retention_days=1 past its not_after
    await keys.refresh(force=True)
    assert old not in keys.view().keys and keys.active_kid in keys.view().keys


def test_signing_keys_is_refused_naming_the_receipt_root() -> None:
    with pytest.raises(ConfigError, match="SIGNING_KEYS is retired: set RECEIPT_ROOT_KEY"):
        load_settings({"SIGNING_KEYS": '{"keys": []}'})
    with pytest.raises(ConfigError, match="RECEIPT_ROOT_KEY is not set"):
        require_receipt_root(load_settings({"REDIS_URL": "redis://localhost:6379"}))
    require_receipt_root(load_settings({}))  # embedded: an ephemeral root
    with pytest.raises(ConfigError, match="not a signer URI"):
        load_settings({"RECEIPT_ROOT_KEY": "c2VjcmV0IGtleSBtYXRlcmlhbA"})
    for bad in ("29", "604801", "1d", "-5"):
        with pytest.raises(ConfigError, match="RECEIPT_KEY_LIFETIME"):
            load_settings({"RECEIPT_KEY_LIFETIME": bad})
    assert load_settings({"RECEIPT_KEY_LIFETIME": "30"}).receipt_key_lifetime_s == 30
    assert load_settings({}).receipt_key_lifetime_s == 86_400


def test_a_root_that_is_not_a_signer_uri_is_never_echoed() -> None:
    secret = "c2VjcmV0IGtleSBtYXRlcmlhbA"
    with pytest.raises(ConfigError) as refused:
        load_settings({"RECEIPT_ROOT_KEY": secret})
    assert secret not in str(refused.value)


# -- the request path


@pytest.fixture
def clock() -> Clock:
    return Clock(T0 + 60_000)


@pytest.fixture
def keyed_app(settings: Settings, store: Store, clock: Clock) -> Any:
    return create_app(settings, store=store, clock_ms=clock)


async def create(client: Any, api_key: dict[str, Any], label: str) -> Any:
    _, response = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of(label)}), headers=auth(api_key)
    )
    return response


async def test_receipts_are_signed_by_a_certified_key_the_service_publishes(
    keyed_app: Any, api_key: dict[str, Any]
) -> None:
    client = keyed_app.asgi_client
    created = await create(client, api_key, "one")
    assert created.status == 201, created.text
    receipt = created.json["receipt"]
    _, listed = await client.get("/v1/public-key")
    body = listed.json
    assert listed.status == 200 and body["active_kid"] == receipt["sig_kid"]
    assert body["roots"] == [Root.of(TEST_ROOT.public_key()).to_json()] and body["revocations"] == []
    [entry] = [k for k in body["keys"] if k["kid"] == receipt["sig_kid"]]
    assert KeyCertificate.parse(entry["certificate"]).signed_by(TEST_ROOT.public_key())
    _, one = await client.get(f"/v1/public-key?kid={receipt['sig_kid']}")
    assert one.status == 200 and [k["kid"] for k in one.json["keys"]] == [receipt["sig_kid"]]
    assert one.json["roots"] == body["roots"]
    _, unknown = await client.get("/v1/public-key?kid=key-0000000000000000")
    assert unknown.status == 404 and unknown.json["error"]["code"] == "not_found"
    # Judged by the pinned root alone (no trust in the service's list of keys).
    from execution_proof.receipts.signing import load_key_ring

    ring = load_key_ring(body).with_roots({Root.of(TEST_ROOT.public_key()).kid: TEST_ROOT.public_key()})
    assert check_receipt(receipt, ring).counts
    _, health = await client.get("/health")
    assert health.json["keys"] == "ok"


async def test_no_receipt_is_signed_by_an_expired_key_and_nothing_is_counted(
    keyed_app: Any, api_key: dict[str, Any], clock: Clock, store: Store
) -> None:
    client = keyed_app.asgi_client
    assert (await create(client, api_key, "before")).status == 201
    keys: ReceiptKeys = keyed_app.ctx.services.receipt_keys
    keys._open_root = lambda: FlakyRoot(TEST_ROOT)
    keys._root = FlakyRoot(TEST_ROOT)
    keys._root.down = True  # type: ignore[attr-defined]
    clock.now = T0 + 60_000 + 86_400_000 + 1  # past the key's not_after; renewal fails
    await keys.refresh()
    _, usage_before = await client.get("/v1/usage", headers=auth(api_key))
    refused = await create(client, api_key, "after")
    assert refused.status == 500 and refused.json["error"]["code"] == "signing_key_unavailable"
    assert int(refused.headers["retry-after"]) >= 1
    _, usage_after = await client.get("/v1/usage", headers=auth(api_key))
    assert usage_after.json == usage_before.json
    _, health = await client.get("/health")
    assert health.json["keys"] == "unavailable"


async def test_verify_refuses_a_receipt_created_after_its_key_was_revoked(
    keyed_app: Any, api_key: dict[str, Any], clock: Clock, store: Store
) -> None:
    client = keyed_app.asgi_client
    honest = (await create(client, api_key, "honest")).json["receipt"]
    kid = honest["sig_kid"]
    keys: ReceiptKeys = keyed_app.ctx.services.receipt_keys
    stolen = keys.signing(clock.now)  # the key as a thief who copied it would hold it
    await revoke_key(
        store.signing_keys, TEST_ROOT, kid, after_ms=clock.now + 2000, reason="", log_queue=None, log_identity=None
    )
    clock.now += 2000
    await keys.step()  # one turn of the keys' loop: the revocation read, a new key certified
    replaced = (await create(client, api_key, "after revocation")).json["receipt"]
    assert replaced["sig_kid"] != kid and replaced["created_at"] >= time_text(clock.now)
    for receipt, label in ((honest, "honest"), (replaced, "after revocation")):
        _, verified = await client.post(
            "/v1/verify",
            content=orjson.dumps({"receipt_id": receipt["receipt_id"], "input_hash": hash_of(label)}),
            headers=auth(api_key),
        )
        assert verified.json["ok"] is True and verified.json["checks"]["signature"] is True, verified.json
    # What the thief signs after revoked_after does not count, though its signature verifies.
    from execution_proof.receipts.canonical import compute_receipt_hash

    forged = {**honest, "created_at": time_text(clock.now), "receipt_id": replaced["receipt_id"]}
    forged["receipt_hash"] = compute_receipt_hash(forged)
    forged["signature"] = stolen.sign(forged["receipt_hash"])
    check = check_receipt(forged, keys.view())
    assert check.signature and check.key_verdict is KeyVerdict.REVOKED and not check.counts
    _, listed = await client.get("/v1/public-key")
    assert [KeyRevocation.parse(r).kid for r in listed.json["revocations"]] == [kid]


@pytest.mark.slow
async def test_the_lifecycle_on_a_redis_cluster(redis_cluster: Any) -> None:  # noqa: F811
    """The registry lives in one slot; the log's own queue, its dirty set and its count in
    others: certify, share, revoke and queue for the log on a real 3-node cluster."""
    from execution_proof.kv.connect import open_store

    redis_cluster.flushall()
    store = open_store(redis_cluster.url, cluster=True)
    try:
        clock = Clock()
        await store.log_queue.log_tell_size(LOG.identity, 0)
        first = lifecycle(store, clock, log_queue=store.log_queue, log_identity=LOG)
        second = lifecycle(store, clock, seeded("another machine"), log_queue=store.log_queue, log_identity=LOG)
        await first.start()
        await second.start()
        await first.refresh()
        assert set(first.view().keys) == set(second.view().keys) == {first.active_kid, second.active_kid}
        kid = first.active_kid
        assert kid is not None
        await revoke_key(
            store.signing_keys,
            TEST_ROOT,
            kid,
            after_ms=clock.now,
            reason="",
            log_queue=store.log_queue,
            log_identity=LOG,
        )
        await first.step()
        assert first.active_kid != kid
        queued = await store.client.lrange(kv_keys.log_queue_key(LOG.identity, kv_keys.LOG_OWN_QUEUE), 0, -1)
        kinds = [entry.split(b"\n", 1)[0] + b"\n" for entry in queued]
        assert kinds == [tlog.KEY_CERTIFICATE_HEADER] * 2 + [tlog.KEY_REVOCATION_HEADER, tlog.KEY_CERTIFICATE_HEADER]
        assert await store.log_queue.log_pending(LOG.identity) == 4
        assert kv_keys.LOG_OWN_QUEUE.encode() in await store.client.smembers(kv_keys.log_dirty_key(LOG.identity))
    finally:
        await store.close()


async def test_a_store_away_at_start_delays_the_key_and_creates_answer_503(
    fresh_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server starts while Redis is away (as it always has): its key is certified once the
    store answers; meanwhile creates answer 503 store_unavailable, not a crash at start."""
    from execution_proof.receipts.errors import StoreUnavailable

    clock = Clock()
    keys = lifecycle(fresh_store, clock)
    real = fresh_store.signing_keys.add_root

    async def away(*args: Any) -> bool:
        raise StoreUnavailable("the store is unreachable")

    monkeypatch.setattr(fresh_store.signing_keys, "add_root", away)
    await keys.start()
    with pytest.raises(StoreUnavailable):
        keys.signing(clock.now)
    assert keys.health(clock.now) == "unavailable"
    monkeypatch.setattr(fresh_store.signing_keys, "add_root", real)
    await keys.step()
    keys.signing(clock.now)
    assert set((await fresh_store.signing_keys.read()).roots) == {Root.of(TEST_ROOT.public_key()).kid}
