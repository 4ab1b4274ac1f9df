"""The receipt keys' lifecycle: certify, renew, read the shared state, revoke (docs/keys.md).

A receipt root (``RECEIPT_ROOT_KEY``, a signer URI; in embedded mode an ephemeral root in
memory) never signs a receipt. Each serving process, in its own start, makes an Ed25519 key
in memory, has the root sign a key certificate, queues the certificate for the transparency
log and publishes it in the registry in Redis (kv/store_signing_keys.py), and only then
signs receipts with the key. From half of ``RECEIPT_KEY_LIFETIME`` it makes the next key the
same way. Every ``KEY_STATE_S`` it reads the registry's version (and the registry when it
moved), so every process knows every process's keys, roots and revocations.

The root is opened, and every root signature made, in one thread of this process (a PKCS#11
session belongs to the process and thread that opened it): a create never waits on it. A
create asks ``signing(now)`` for the ring to sign with, which refuses (500
``signing_key_unavailable`` with ``Retry-After``) when the key expired, was revoked, or the
shared state could not be read for a tenth of the lifetime.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from nacl.signing import SigningKey

from execution_proof.errors import Error
from execution_proof.kv.records import LogQueue
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.kv.store_signing_keys import KeyRegistry, RegistryRead
from execution_proof.receipts.errors import SigningKeyUnavailable, StoreUnavailable
from execution_proof.receipts.key_certificates import (
    KeyCertificate,
    KeyDocumentError,
    KeyRevocation,
    Root,
    certify,
    checked_revocations,
    revoke,
    time_ms,
)
from execution_proof.receipts.signing import KeyRing, PublicKey
from execution_proof.transparency import tlog
from execution_proof.transparency.signer import KeySigner, redact

log = logging.getLogger("eps.keys")
KEY_STATE_S = 1.0
"""How often every process reads the shared key state (at least)."""
RENEW_BACKOFF_MAX_S = 30.0
STEP_TIMEOUT_S = 3.0
NO_KEY_RETRY_S = 0.05
DAY_MS = 86_400_000


class RootUnavailable(Error):
    """The receipt root could not be opened or did not sign (the message names the URI, PIN
    removed, never a key)."""


@dataclass(frozen=True, slots=True)
class KeyState:
    """The shared key state as one process last read it."""

    version: int
    roots: dict[str, bytes]
    certificates: dict[str, KeyCertificate]
    revocations: dict[str, KeyRevocation]

    @classmethod
    def parse(cls, read: RegistryRead) -> KeyState:
        roots: dict[str, bytes] = {}
        for kid, raw in read.roots.items():
            try:
                root = Root.parse(orjson.loads(raw))
            except (KeyDocumentError, orjson.JSONDecodeError):
                log.error("the key registry holds a malformed root %s: left out", kid)
                continue
            roots[root.kid] = root.public_key
        certificates: dict[str, KeyCertificate] = {}
        for kid, raw in read.certificates.items():
            try:
                certificate = KeyCertificate.parse(orjson.loads(raw))
            except (KeyDocumentError, orjson.JSONDecodeError):
                log.error("the key registry holds a malformed certificate %s: left out", kid)
                continue
            root_public = roots.get(certificate.root_kid)
            if root_public is None or not certificate.signed_by(root_public):
                log.error("the key registry holds a certificate %s no known root signed: left out", kid)
                continue
            certificates[certificate.kid] = certificate
        documents = []
        for raw in read.revocations.values():
            try:
                documents.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                continue
        return cls(read.version, roots, certificates, checked_revocations(documents, roots))

    def listing(self, now: int) -> dict[str, Any]:
        """``signing-key list``'s document: the roots, and every key with its state."""
        keys = []
        for kid, certificate in sorted(self.certificates.items(), key=_newest_first):
            revoked = kid in self.revocations
            state = "revoked" if revoked else "expired" if certificate.not_after_ms < now else "active"
            keys.append(
                {
                    "kid": kid,
                    "root_kid": certificate.root_kid,
                    "not_before": certificate.not_before,
                    "not_after": certificate.not_after,
                    "state": state,
                }
            )
        roots = [Root(kid, public).to_json() for kid, public in sorted(self.roots.items())]
        return {"roots": roots, "keys": keys}

    def ring(self, active_kid: str | None = None, signer: SigningKey | None = None) -> KeyRing:
        """Every certified key, judged by the registry's roots."""
        keys = {kid: PublicKey.certified(c) for kid, c in sorted(self.certificates.items(), key=_newest_first)}
        return KeyRing(keys, active_kid, signer, roots=self.roots, revocations=self.revocations)


def _newest_first(item: tuple[str, KeyCertificate]) -> tuple[int, str]:
    return (-item[1].not_before_ms, item[0])


EMPTY_STATE = KeyState(0, {}, {}, {})


@dataclass
class _Own:
    """This process's current key."""

    signer: SigningKey
    certificate: KeyCertificate
    not_before_ms: int
    not_after_ms: int
    ring: KeyRing = field(init=False)

    def __post_init__(self) -> None:
        public = PublicKey.certified(self.certificate)
        self.ring = KeyRing({public.kid: public}, public.kid, self.signer)


class ReceiptKeys:
    """One serving process's receipt keys (see the module's description)."""

    def __init__(
        self,
        registry: KeyRegistry,
        open_root: Callable[[], KeySigner],
        root_name: str,
        *,
        lifetime_s: int,
        retention_days: float,
        clock_ms: Callable[[], int],
        log_queue: LogQueueStore | None = None,
        log_identity: LogQueue | None = None,
        key_state_s: float = KEY_STATE_S,
    ) -> None:
        self.registry = registry
        self._open_root = open_root
        self.root_name = redact(root_name)
        self.lifetime_ms = lifetime_s * 1000
        self.retention_ms = int(retention_days * DAY_MS)
        self.clock_ms = clock_ms
        self.log_queue = log_queue
        self.log_identity = log_identity
        self.key_state_s = key_state_s
        self._root: KeySigner | None = None
        self._root_kid: str | None = None
        self._token: ThreadPoolExecutor | None = None
        self._own: _Own | None = None
        self._state = EMPTY_STATE
        self._state_read_ms = 0
        self._view: KeyRing | None = None
        self._renew_failed_since: int | None = None
        self._forced_ms = 0
        self._backoff = 0.0
        self._next_renewal = 0.0
        self._closed = False
        self._root_document: Root | None = None
        self._root_published = False
        self._unlogged: list[bytes] = []
        self.log_store_checked = False
        """This process checked the log's store at its start (it exists): entries may queue.
        Otherwise they wait until an integrator tells this Redis the log's size."""
        self._store_down = False
        self._task: asyncio.Task[Any] | None = None

    # -- the root, in its own thread

    async def _in_token(self, fn: Callable[[], Any]) -> Any:
        if self._token is None:
            self._token = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eps-root")
        return await asyncio.get_running_loop().run_in_executor(self._token, fn)

    def _root_now(self) -> KeySigner:
        if self._root is None:
            self._root = self._open_root()
        return self._root

    async def open_root(self) -> Root:
        """Open the root (in its thread) and read its public key; ``RootUnavailable``."""
        try:
            public = await self._in_token(lambda: self._root_now().public_key())
        except Exception as exc:  # noqa: BLE001 - any failure of a token or plugin is the same fault
            raise RootUnavailable(f"RECEIPT_ROOT_KEY {self.root_name}: {_reason(exc)}") from None
        root = Root.of(bytes(public))
        self._root_kid = root.kid
        return root

    # -- start, renew, refresh

    async def start(self) -> None:
        """Open the root, publish it, certify this process's first key and read the shared
        state. ``RootUnavailable`` when the root cannot sign; ``StoreUnavailable`` when the
        registry cannot be written."""
        self._root_document = await self.open_root()
        try:
            await self._publish_root()
            await self.renew()
            await self.refresh()
        except StoreUnavailable as exc:
            # The server starts while Redis is away (creates answer 503 until it is back, as
            # every other request does): the loop certifies the key once the store answers.
            self._store_down = True
            log.error("the receipt key could not be published (the store is unreachable); retrying: %s", exc)

    async def _publish_root(self) -> None:
        if not self._root_published and self._root_document is not None:
            root = self._root_document
            await self.registry.add_root(root.kid, orjson.dumps(root.to_json()))
            self._root_published = True

    async def renew(self) -> KeyCertificate:
        """Make a key, have the root certify it, queue and publish the certificate, then sign
        with it. ``RootUnavailable`` or ``StoreUnavailable``; the current key stays."""
        signer = SigningKey.generate()
        public = bytes(signer.verify_key)
        now = self.clock_ms()
        not_after = now + self.lifetime_ms
        try:
            certificate: KeyCertificate = await self._in_token(
                lambda: certify(self._root_now(), public, now, not_after)
            )
        except Exception as exc:  # noqa: BLE001 - any failure of a token or plugin is the same fault
            raise RootUnavailable(f"RECEIPT_ROOT_KEY {self.root_name}: {_reason(exc)}") from None
        if not certificate.signed_by(self._root_now().public_key()):
            raise RootUnavailable(f"RECEIPT_ROOT_KEY {self.root_name}: the root's signature does not verify")
        body = certificate.entry_body()
        await self._log(tlog.KEY_CERTIFICATE_HEADER + body + b"\n")
        await self.registry.add_certificate(certificate.kid, body)
        self._own = _Own(signer, certificate, now, not_after)
        self._renew_failed_since = None
        self._state = KeyState(
            self._state.version,
            self._state.roots,
            {**self._state.certificates, certificate.kid: certificate},
            self._state.revocations,
        )
        self._view = None
        log.info(
            "receipt key %s certified by %s until %s", certificate.kid, certificate.root_kid, certificate.not_after
        )
        return certificate

    async def _log(self, entry: bytes) -> None:
        """Queue ``entry`` for the log once the log's store exists (this process checked it at
        start, or an integrator told this Redis its size): an entry waiting beside a store not
        yet created would make every worker refuse that store as lost. Until then it waits
        here, and each turn tries again."""
        if self.log_queue is None or self.log_identity is None:
            return
        self._unlogged.append(entry)
        await self._flush_log()

    async def _flush_log(self) -> None:
        if not self._unlogged or self.log_queue is None or self.log_identity is None:
            return
        identity = self.log_identity.identity
        if not self.log_store_checked and await self.log_queue.log_size(identity) is None:
            return
        while self._unlogged:
            await self.log_queue.queue_own_entry(identity, self._unlogged[0])
            self._unlogged.pop(0)

    async def refresh(self, *, force: bool = False) -> bool:
        """Read the shared state if its version moved; True when it was read or unchanged."""
        version = await self.registry.version()
        if force or version != self._state.version:
            state = KeyState.parse(await self.registry.read())
            own = self._own
            if own is not None and own.certificate.kid not in state.certificates:
                # Our own certificate is always in our view (it was published before use).
                state.certificates[own.certificate.kid] = own.certificate
            self._state = state
            self._view = None
        self._state_read_ms = self.clock_ms()
        return True

    def needs_renewal(self, now: int) -> bool:
        own = self._own
        if own is None:
            return True
        if self.revoked(own.certificate.kid):
            return True
        return now >= own.not_before_ms + self.lifetime_ms // 2

    def revoked(self, kid: str) -> bool:
        return kid in self._state.revocations

    async def run(self, stopping: asyncio.Event | None = None) -> None:
        """Until ``stopping``: read the state every ``KEY_STATE_S``, renew from half the
        lifetime (at once when our key is revoked), retrying with back-off; ERROR on each
        failure."""
        self._task = asyncio.current_task()
        while not self._closed and (stopping is None or not stopping.is_set()):
            await self.step()
            # Without a key (the store was away at start) the next turn comes at once: creates
            # answer 503 until the store is back, and sign again as soon as it is.
            pause = self.key_state_s if self._own is not None else NO_KEY_RETRY_S
            try:
                if stopping is None:
                    await asyncio.sleep(pause)
                else:
                    await asyncio.wait_for(stopping.wait(), pause)
            except TimeoutError:
                pass

    async def step(self) -> None:
        """One turn of ``run``: read the state, renew when due and not backing off. A store
        call that hangs (a connection made while Redis was away) is given up after
        ``STEP_TIMEOUT_S`` and tried again next turn."""
        try:
            await asyncio.wait_for(self._step(), STEP_TIMEOUT_S)
        except TimeoutError:
            log.error(
                "the receipt keys' turn took over %.0f s (the store does not answer); trying again", STEP_TIMEOUT_S
            )

    async def _step(self) -> None:
        try:
            await self._publish_root()
            await self._flush_log()
            await self.refresh()
        except StoreUnavailable:
            log.error("the key state could not be read from the store")
        except Exception:
            log.exception("reading the key state failed")
        now = self.clock_ms()
        loop = asyncio.get_running_loop()
        if not self.needs_renewal(now) or loop.time() < self._next_renewal:
            return
        try:
            await self.renew()
            self._backoff = 0.0
            self._store_down = False
        except Exception as exc:  # noqa: BLE001 - every failure backs off; the current key signs meanwhile
            self._renew_failed_since = self._renew_failed_since or now
            self._backoff = min(RENEW_BACKOFF_MAX_S, max(1.0, self._backoff * 2))
            # Without any key (the store was away at start) every turn tries again: nothing
            # signs until one is certified.
            wait = 0.0 if self._own is None else self._backoff * (0.5 + random.random() / 2)
            self._next_renewal = loop.time() + wait
            log.error("receipt key renewal failed (retrying in %.0f s): %s", self._backoff, _reason(exc))

    def close(self) -> None:
        """Stop the loop (``run`` returns at its next step) and the root's thread."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        if self._token is not None:
            self._token.shutdown(wait=False, cancel_futures=True)
            self._token = None
            self._root = None  # opened again, in the new thread, if this process goes on

    # -- what the request path asks

    def _unavailable(self, message: str, now: int) -> SigningKeyUnavailable:
        retry = max(1, math.ceil(self.key_state_s * 2))
        return SigningKeyUnavailable(message, headers={"Retry-After": str(retry)})

    def signing(self, now: int) -> KeyRing:
        """The ring to sign a receipt created at ``now`` with: this process's key, usable
        then. ``SigningKeyUnavailable`` (500, ``Retry-After``) when there is none: expired,
        revoked, or the shared state unread for a tenth of the lifetime."""
        own = self._own
        if own is None:
            if self._store_down:
                raise StoreUnavailable("the store is unreachable: no receipt key could be certified yet")
            raise self._unavailable("no receipt key is certified yet", now)
        if now > own.not_after_ms or now < own.not_before_ms:
            raise self._unavailable("the receipt key expired and no new one could be certified", now)
        if own.certificate.kid in self._state.revocations:
            raise self._unavailable("the receipt key was revoked and no new one is certified yet", now)
        if now - self._state_read_ms > self.lifetime_ms // 10:
            raise self._unavailable("the shared key state could not be read: not signing", now)
        return own.ring

    def health(self, now: int) -> str:
        """``ok``; ``expiring`` when renewal failed into the last tenth of the key's lifetime;
        ``unavailable`` when no receipt can be signed."""
        try:
            self.signing(now)
        except (SigningKeyUnavailable, StoreUnavailable):
            return "unavailable"
        own = self._own
        assert own is not None
        if self._renew_failed_since is not None and now >= own.not_after_ms - self.lifetime_ms // 10:
            return "expiring"
        return "ok"

    @property
    def active_kid(self) -> str | None:
        return self._own.certificate.kid if self._own is not None else None

    async def knowing(self, kid: object) -> KeyRing:
        """``view()``, read again first when it does not know ``kid`` (a key another process
        certified within the last ``KEY_STATE_S``); at most one such read per 100 ms."""
        ring = self.view()
        now = self.clock_ms()
        if isinstance(kid, str) and kid not in ring.keys and now - self._forced_ms >= 100:
            self._forced_ms = now
            try:
                await self.refresh(force=True)
            except StoreUnavailable:
                return ring
            ring = self.view()
        return ring

    def view(self) -> KeyRing:
        """Every key the registry lists (to ``not_after`` + retention), judged by its roots;
        ``active_kid`` is this process's key. For ``GET /v1/public-key``, verify and bundles."""
        if self._view is None:
            horizon = self.clock_ms() - self.retention_ms
            state = self._state
            kept = {k: c for k, c in state.certificates.items() if c.not_after_ms >= horizon}
            self._view = KeyState(state.version, state.roots, kept, state.revocations).ring(self.active_kid)
        return self._view


async def revoke_key(
    registry: KeyRegistry,
    root: KeySigner,
    kid: str,
    *,
    after_ms: int,
    reason: str,
    log_queue: LogQueueStore | None,
    log_identity: LogQueue | None,
) -> KeyRevocation:
    """Revoke ``kid`` from ``after_ms`` on, signed by ``root`` (which must be the root that
    certified it): queued for the log, then published. ``LookupError`` for an unknown kid,
    ``PermissionError`` when another root certified it; an existing earlier revocation is
    kept (returned)."""
    state = KeyState.parse(await registry.read())
    certificate = state.certificates.get(kid)
    if certificate is None:
        raise LookupError(f"no key {kid} in the registry")
    root_public = root.public_key()
    if Root.of(root_public).kid != certificate.root_kid:
        raise PermissionError(f"{kid} was certified by {certificate.root_kid}, not by this root")
    earlier = state.revocations.get(kid)
    if earlier is not None and time_ms(earlier.revoked_after) <= after_ms:
        return earlier
    revocation = revoke(root, kid, after_ms, reason)
    body = revocation.entry_body()
    if log_queue is not None and log_identity is not None:
        await log_queue.queue_own_entry(log_identity.identity, tlog.KEY_REVOCATION_HEADER + body + b"\n")
    await registry.put_revocation(kid, body)
    return revocation


def _reason(exc: BaseException) -> str:
    """An exception's message fit for a log line: its class and text, never longer than a
    line (a token's or plugin's error text names no key)."""
    text = redact(str(exc).splitlines()[0]) if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
