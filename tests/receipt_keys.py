"""Receipt keys in tests: the services' keys certified by ``TEST_ROOT`` (tests/conftest.py).

A service signs with per-process keys ``key-…`` that its receipt root certifies; the tests'
services have ``TEST_ROOT`` as their root (in process: the ``receipt_root`` fixture, a
``file:`` URI; as a subprocess: ``TEST_ROOT_ENV``). What a test checks of a service's receipt
is what a verifier pinning that root checks: the key is published (``GET /v1/public-key``)
with a certificate ``TEST_ROOT`` signed that covers the receipt's ``created_at``, and the
signature verifies under it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from execution_proof.kv.keys import signing_keys_key
from execution_proof.kv.store import Store
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import KeyVerdict, root_kid
from execution_proof.receipts.signing import KeyRing, load_key_ring
from execution_proof.transparency.signer import KeySigner
from execution_proof.usecases.signing_keys import ReceiptKeys
from tests.conftest import TEST_ROOT

TEST_ROOT_KID = root_kid(TEST_ROOT.public_key())
TEST_ROOT_VARIABLE = "EPS_TEST_ROOT"
TEST_ROOT_ENV = {"RECEIPT_ROOT_KEY": f"env:{TEST_ROOT_VARIABLE}", TEST_ROOT_VARIABLE: b64url_encode(TEST_ROOT.seed)}
"""The environment that gives a service process ``TEST_ROOT`` as its receipt root."""
KEY_ENTRIES = 1
"""The entries a serving process (an in-process app, or each Sanic worker of a served
process) queues for the transparency log of its own when it starts: its key's certificate."""
KEY_REGISTRY_PREFIX = signing_keys_key("")
"""Where the receipt keys' registry lives in Redis: written when a serving process starts
(its root and its key's certificate) and renews, never by a request."""


def in_key_registry(name: bytes | str) -> bool:
    """Whether a Redis key is the registry's (a snapshot that proves a request wrote nothing
    leaves it out: an in-process app starts, and certifies its key, at its first request)."""
    return (name.decode() if isinstance(name, bytes) else name).startswith(KEY_REGISTRY_PREFIX)


def ring_under_test_root(public_keys: Any) -> KeyRing:
    """A ``GET /v1/public-key`` body (text, bytes or parsed) as a verifier pinning only
    ``TEST_ROOT`` holds it: a key counts only through a certificate ``TEST_ROOT`` signed."""
    body = orjson.loads(public_keys) if isinstance(public_keys, (str, bytes)) else public_keys
    ring = load_key_ring(body)
    return ring.with_roots({TEST_ROOT_KID: TEST_ROOT.public_key()}, body.get("revocations"))


def assert_signed_by_test_root(receipt: Mapping[str, Any], public_keys: Any) -> None:
    """``receipt`` is signed by a per-process key the service publishes in ``public_keys``,
    certified by ``TEST_ROOT`` for the receipt's ``created_at``."""
    kid = receipt["sig_kid"]
    assert isinstance(kid, str) and kid.startswith("key-"), kid
    ring = ring_under_test_root(public_keys)
    assert ring.judge(kid, receipt["created_at"]) is KeyVerdict.OK, ring.judge(kid, receipt["created_at"])
    certificate = ring.keys[kid].certificate
    assert certificate is not None and certificate.root_kid == TEST_ROOT_KID
    assert ring.verify(kid, receipt["receipt_hash"], receipt["signature"])


def receipt_keys(
    store: Store,
    clock_ms: Callable[[], int],
    *,
    root: KeySigner = TEST_ROOT,
    lifetime_s: int = 86_400,
    retention_days: float = 180.0,
) -> ReceiptKeys:
    """A process's receipt keys on ``store``'s registry, certified by ``root`` (not started)."""
    return ReceiptKeys(
        store.signing_keys,
        lambda: root,
        "test root",
        lifetime_s=lifetime_s,
        retention_days=retention_days,
        clock_ms=clock_ms,
    )


async def started_receipt_keys(store: Store, clock_ms: Callable[[], int], **options: Any) -> ReceiptKeys:
    """``receipt_keys`` started: a key certified at ``clock_ms()``, ready to sign. Close it
    (``close()``) after."""
    keys = receipt_keys(store, clock_ms, **options)
    await keys.start()
    return keys


async def keys_at_the_clock(keys: ReceiptKeys) -> None:
    """What a running process has done by the time a test's clock jumped (days, or back):
    certified a key covering the clock's time and read the key state then."""
    await keys.renew()
    await keys.refresh(force=True)
