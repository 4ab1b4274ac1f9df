"""Receipt keys as operators run them: a root in a real SoftHSM2 token, several serving
processes each with its own certified key, renewal with a 30 s lifetime, revocation while
four processes create, and the start-up faults (docs/keys.md)."""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from execution_proof.runtime.pkcs11_signer import close_all
from tests.conftest import hash_of
from tests.servers import ServiceProcess, create_key_cli, run_cli, wait_until
from tests.softhsm import Token, softhsm_token

pytestmark = pytest.mark.slow


@pytest.fixture
def token(tmp_path: Path) -> Iterator[Token]:
    made = softhsm_token(tmp_path)
    yield made
    close_all()


def b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def independent_check(receipt: dict[str, Any], certificate: dict[str, Any], root_public: bytes) -> None:
    """The receipt checked with code nobody here wrote (cryptography, rfc8785), from its
    certificate and a pinned root only: raises on any failure."""
    unsigned = {k: v for k, v in certificate.items() if k != "signature"}
    Ed25519PublicKey.from_public_bytes(root_public).verify(b64url(certificate["signature"]), rfc8785.dumps(unsigned))
    assert certificate["kid"] == receipt["sig_kid"]
    assert certificate["not_before"] <= receipt["created_at"] <= certificate["not_after"]
    payload = {k: v for k, v in receipt.items() if k not in ("receipt_hash", "signature", "sig_kid", "receipt_kind")}
    assert receipt["receipt_hash"] == "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()
    key = Ed25519PublicKey.from_public_bytes(b64url(certificate["public_key_base64url"]))
    key.verify(b64url(receipt["signature"]), receipt["receipt_hash"].encode("ascii"))


def make_root(token: Token) -> dict[str, Any]:
    done = run_cli("signing-key", "root", "new", "--signer", token.uri("receipt-root"), env=token.env)
    assert done.returncode == 0, done.stderr
    made: dict[str, Any] = orjson.loads(done.stdout)
    return made


def public_keys(base_url: str) -> dict[str, Any]:
    response = httpx.get(f"{base_url}/v1/public-key", timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_three_workers_certify_three_keys_under_a_token_root_each_listed_by_every_worker(
    token: Token, tmp_path: Path, redis_url: str
) -> None:
    root = make_root(token)
    assert root["signer"] == token.uri("receipt-root")
    env = {**token.env, "RECEIPT_ROOT_KEY": root["signer"], "REDIS_URL": redis_url}
    key = create_key_cli(redis_url)
    with ServiceProcess(tmp_path, workers=3, redis_url=redis_url, env=env) as service:
        # Every worker reads the shared key state at least once a second: within that, each lists all three.
        wait_until(
            lambda: all(len(public_keys(service.base_url)["keys"]) == 3 for _ in range(12)), 20, "three keys everywhere"
        )
        seen_active: set[str] = set()
        receipts = []
        for n in range(30):  # a new connection each: the kernel spreads them over the workers
            listed = public_keys(service.base_url)
            assert {k["kid"] for k in listed["keys"]} == {k["kid"] for k in public_keys(service.base_url)["keys"]}
            assert len(listed["keys"]) == 3 and listed["roots"] == [
                {"kid": root["kid"], "alg": "Ed25519", "public_key_base64url": root["public_key_base64url"]}
            ]
            seen_active.add(listed["active_kid"])
            created = httpx.post(
                f"{service.base_url}/v1/receipts",
                json={"input_hash": hash_of(f"three workers {n}")},
                headers={"Authorization": f"Bearer {key['api_key']}"},
                timeout=10,
            )
            assert created.status_code == 201, created.text
            receipts.append(created.json()["receipt"])
        certificates = {k["kid"]: k["certificate"] for k in listed["keys"]}
        assert seen_active <= set(certificates)
        for receipt in receipts:
            independent_check(receipt, certificates[receipt["sig_kid"]], b64url(root["public_key_base64url"]))
        listing = run_cli("signing-key", "list", env=env)
        assert listing.returncode == 0, listing.stderr
        document = orjson.loads(listing.stdout)
        assert {k["kid"] for k in document["keys"]} == set(certificates)
        assert {(k["root_kid"], k["state"]) for k in document["keys"]} == {(root["kid"], "active")}


def test_serve_refuses_to_start_without_a_root_it_can_reach(token: Token, redis_url: str) -> None:
    for env, says in (
        ({"REDIS_URL": redis_url}, "RECEIPT_ROOT_KEY is not set"),
        ({"SIGNING_KEYS": '{"keys": []}'}, "SIGNING_KEYS is retired: set RECEIPT_ROOT_KEY"),
        ({"RECEIPT_ROOT_KEY": token.uri("no-such-root")}, "RECEIPT_ROOT_KEY: pkcs11:token="),
        (
            {"RECEIPT_ROOT_KEY": token.uri("receipt-root", pin_value=True).replace(token.pin, "9999")},
            "RECEIPT_ROOT_KEY: pkcs11:token=",
        ),
    ):
        done = run_cli("serve", "--port", "0", env={**token.env, **env}, timeout=30)
        assert done.returncode == 2, (env, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and says in lines[0], done.stderr
        assert "9999" not in done.stderr and token.pin not in done.stderr
        assert "Traceback" not in done.stderr


def test_keys_renew_from_half_a_30_second_lifetime(tmp_path: Path, receipt_root: str) -> None:
    env = {"RECEIPT_ROOT_KEY": receipt_root, "RECEIPT_KEY_LIFETIME": "30"}
    with ServiceProcess(tmp_path, redis_url=None, env=env) as service:
        first = public_keys(service.base_url)["active_kid"]
        started = time.monotonic()
        wait_until(lambda: public_keys(service.base_url)["active_kid"] != first, 30, "a renewed key")
        assert time.monotonic() - started >= 10  # not before half the lifetime (less start-up)
        listed = public_keys(service.base_url)
        by_kid = {k["kid"]: k["certificate"] for k in listed["keys"]}
        assert first in by_kid and listed["active_kid"] in by_kid
        old, new = by_kid[first], by_kid[listed["active_kid"]]
        assert old["not_before"] < new["not_before"] < old["not_after"]  # renewed before it expired


def test_revocation_while_four_processes_create(tmp_path: Path, redis_url: str, receipt_root: str) -> None:
    env = {"RECEIPT_ROOT_KEY": receipt_root, "REDIS_URL": redis_url}
    key = create_key_cli(redis_url)
    with ServiceProcess(tmp_path, workers=4, redis_url=redis_url, env=env) as service:
        wait_until(
            lambda: all(len(public_keys(service.base_url)["keys"]) == 4 for _ in range(12)), 20, "four keys everywhere"
        )
        victim = public_keys(service.base_url)["keys"][0]["kid"]
        stop = threading.Event()
        made: list[dict[str, Any]] = []
        refused: list[httpx.Response] = []

        def create(worker: int) -> None:
            with httpx.Client(timeout=10) as client:
                n = 0
                while not stop.is_set():
                    n += 1
                    response = client.post(
                        f"{service.base_url}/v1/receipts",
                        json={"input_hash": hash_of(f"revocation {worker} {n}")},
                        headers={"Authorization": f"Bearer {key['api_key']}", "Connection": "close"},
                    )
                    if response.status_code == 201:
                        made.append(response.json()["receipt"])
                    else:
                        refused.append(response)

        threads = [threading.Thread(target=create, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)  # creates are in flight on every worker before the revocation
            before = time.monotonic()
            done = run_cli("signing-key", "revoke", victim, "--reason", "drill", env=env)
            assert done.returncode == 0, done.stderr
            revocation = orjson.loads(done.stdout)
            assert time.monotonic() - before >= 2  # returns after revoked_after (now + 2 x KEY_STATE_S)
            time.sleep(1.0)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert revocation["kid"] == victim and revocation["reason"] == "drill"
        late = [r for r in made if r["sig_kid"] == victim and r["created_at"] >= revocation["revoked_after"]]
        assert late == []
        assert any(r["sig_kid"] == victim for r in made), "the victim key signed nothing before its revocation"
        assert any(r["created_at"] >= revocation["revoked_after"] for r in made)
        for response in refused:  # only while a process certifies its next key
            assert response.status_code == 500 and response.json()["error"]["code"] == "signing_key_unavailable"
            assert int(response.headers["retry-after"]) >= 1
        listed = public_keys(service.base_url)
        assert [r["kid"] for r in listed["revocations"]] == [victim]
        assert victim in {k["kid"] for k in listed["keys"]}  # still listed: its honest receipts verify
        states = {k["kid"]: k["state"] for k in orjson.loads(run_cli("signing-key", "list", env=env).stdout)["keys"]}
        assert states[victim] == "revoked" and list(states.values()).count("active") >= 4


def test_the_independent_check_fails_on_a_changed_certificate() -> None:
    """The check above can fail: a certificate whose window is moved no longer verifies."""
    from execution_proof.receipts.key_certificates import certify, time_ms
    from execution_proof.transparency.signer import SeedSigner

    root, online = SeedSigner.generate(), SeedSigner.generate()
    t = time_ms("2026-11-29T00:00:00.000Z")
    certificate = certify(root, online.public_key(), t, t + 60_000).to_json()
    receipt = {"sig_kid": certificate["kid"], "created_at": "2026-11-29T00:00:01.000Z"}
    moved = {**certificate, "not_after": "2027-11-29T00:00:00.000Z"}
    with pytest.raises(InvalidSignature):
        independent_check(receipt, moved, root.public_key())
