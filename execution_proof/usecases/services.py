"""The one typed root every process is built from: ``open_services(settings)``.

The HTTP server (web/app.py), the worker and the operator verbs (cli/) all start here, so a
sub-store, the limiter, a use case or the log's read side is made in one place, one way.
``Services`` is frozen: nothing is set on it after it is built, and what a route needs is a
field of it (``app.ctx.services`` is the only thing on the app's context). The job
functions (jobs/) never import this floor: ``open_services`` hands them their way to the
store through jobs/context.py.

A store handed in (by a test) is used as it is; its receipts issue with these settings'
``STORE_ACK`` and log queue. Otherwise the store is ``REDIS_URL`` (``open_store``; nothing
is connected until the first command, so a serving process opens its services after it
forks), and the log store ``LOG_STORE`` (in memory in embedded mode without it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from rq import Queue

from execution_proof.jobs.context import use_embedded_server
from execution_proof.jobs.log_config import LogRefused, log_config, prepare_log
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.jobs.queue import open_queue
from execution_proof.jobs.retention import sweep_periodically
from execution_proof.kv.connect import open_store
from execution_proof.kv.health import check_store_at_startup
from execution_proof.kv.logstore import LogStore, LogStoreError, open_log_store
from execution_proof.kv.logstore.log import Identity
from execution_proof.kv.records import LogQueue
from execution_proof.kv.store import Store
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.kv.store_retention import RetentionStore
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.runtime.settings import Settings, require_log_store, warn
from execution_proof.runtime.signers import open_root
from execution_proof.runtime.store_ack import StoreAckError
from execution_proof.transparency.signer import KeySigner, SeedSigner
from execution_proof.usecases.attesting import Attester
from execution_proof.usecases.bundling import Bundler
from execution_proof.usecases.claiming import Claimer
from execution_proof.usecases.creating import Creator
from execution_proof.usecases.demo import Demo
from execution_proof.usecases.informing import Informer
from execution_proof.usecases.issuing import ReceiptIssuer
from execution_proof.usecases.limiting import Limiter
from execution_proof.usecases.log_reading import LogService
from execution_proof.usecases.log_routes import LogRoutes
from execution_proof.usecases.reading import Reader
from execution_proof.usecases.searching import Searcher
from execution_proof.usecases.signing_keys import ReceiptKeys, RootUnavailable
from execution_proof.usecases.usage import UsageReader
from execution_proof.usecases.verifying import ReceiptVerifier

log = logging.getLogger("eps.log")
Spawn = Callable[[Coroutine[Any, Any, None], str], Any]
"""How a server starts a background task of its own: ``spawn(coroutine, name)``."""


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a process of this service works with, made once by ``open_services``."""

    settings: Settings
    clock_ms: Callable[[], int]
    """Unix milliseconds: the system clock, or a test's."""
    store: Store
    """The sub-stores (``store.keys``, ``store.counters``, ``store.checkouts``, ``store.retention``,
    ``store.log_queue``); receipts are ``receipts``."""
    receipts: ReceiptStore
    """The store's receipts, issuing with these settings' ``STORE_ACK`` and log queue."""
    limiter: Limiter
    issuer: ReceiptIssuer
    log: LogService | None
    """The log's read side; None without ``LOG_SIGNING_KEY``."""
    log_store: LogStore | None
    queue: Queue
    creator: Creator
    reader: Reader
    verifier: ReceiptVerifier
    searcher: Searcher
    bundler: Bundler
    attester: Attester
    usage: UsageReader
    claimer: Claimer
    informer: Informer
    receipt_keys: ReceiptKeys
    """This process's receipt keys and the shared key state (started by ``start``)."""
    log_routes: LogRoutes
    demo: Demo
    owns_store: bool
    """The store was opened here (and is closed by ``close``), not handed in."""

    async def start(self, spawn: Spawn) -> None:
        """What a serving process does before it serves: the embedded mode's own sweep and
        log integrator (``spawn``ed), the log store checked (and created if new), its receipt
        key certified (``RootUnavailable`` stops start-up) and kept (``spawn``ed), and the
        durability of the Redis behind us (``StoreAckError`` stops start-up)."""
        settings = self.settings
        if settings.embedded:
            warn(
                "no REDIS_URL: using the embedded in-process store. NOTHING SURVIVES A RESTART, "
                "and every worker would have its own store. Set REDIS_URL for real use."
            )
            # No worker serves the embedded store, so the server sweeps expired receipts
            # itself, and integrates the log.
            spawn(_sweep_until_stopped(self.store.retention, settings.retention_days), "retention-sweep")
        if settings.log_signer is not None:
            assert self.log_store is not None
            integrator = (
                Integrator(self.store.log_queue, self.log_store, log_config(settings)) if settings.embedded else None
            )
            if await self._prepare_log(integrator) and integrator is not None:
                spawn(_integrate_until_stopped(integrator), "log-integrator")
        # The key's certificate is queued for the log: only once the log store is checked (and
        # created if new), or a new log's store would be refused for the entry waiting in Redis.
        if settings.receipt_root is None and settings.embedded:
            warn("no RECEIPT_ROOT_KEY: an ephemeral receipt root in memory certifies this process's keys")
        try:
            await self.receipt_keys.start()
        except RootUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise
        spawn(_keep_keys(self.receipt_keys), "receipt-keys")
        if not settings.embedded:
            # Durability of the Redis behind us (docs/redis.md).
            try:
                warnings = await check_store_at_startup(self.store.client, settings.store_ack)
            except StoreAckError as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
                raise
            for message in warnings:
                warn(message)

    async def _prepare_log(self, integrator: Integrator | None) -> bool:
        """The log store checked (and created if new) at start-up, before the first create can
        queue an entry: a worker started later must not find entries beside an empty store.
        The embedded server checks it as its own integrator, else as the workers do
        (``prepare_log``). False when the store is refused: the server still serves
        (receipts, and the log as the store holds it), the log is left untouched. A store
        that cannot be reached is checked again by whoever integrates."""
        settings = self.settings
        assert settings.log_signer is not None
        assert self.log_store is not None
        try:
            if integrator is not None:
                await integrator.prepare()
            else:
                await prepare_log(
                    self.store.log_queue,
                    self.log_store,
                    settings.log_origin,
                    settings.log_signer,
                    settings.log_failpoints,
                )
        except LogRefused as exc:
            log.error("the log store is refused, the log is left untouched: %s", exc)
            return False
        except (StoreUnavailable, LogStoreError) as exc:
            again = "the integrator retries" if integrator is not None else "the worker checks it before integrating"
            warn(f"could not check the log store at start-up ({exc}); {again}")
            return True
        self.receipt_keys.log_store_checked = True
        return True

    async def close(self) -> None:
        """Close the store if it was opened here."""
        self.receipt_keys.close()
        if self.owns_store:
            await self.store.close()


def open_services(
    settings: Settings,
    *,
    store: Store | None = None,
    log_store: LogStore | None = None,
    clock_ms: Callable[[], int] | None = None,
) -> Services:
    """Build every part of the service for ``settings`` (see the module's text). Nothing is
    sent to Redis here. ``ConfigError`` when the log has no store (``REDIS_URL`` and a log
    key, no ``LOG_STORE``)."""
    clock = clock_ms or _system_clock_ms
    queue_config = _log_queue(settings)
    if settings.log_signer is not None and log_store is None:
        require_log_store(settings)
        log_store = open_log_store(settings.log_store or "memory:")
    owns_store = store is None
    if store is None:
        store = open_store(settings.redis_url, cluster=settings.redis_cluster, ack=settings.store_ack, log=queue_config)
        receipts = store.receipts
    else:
        receipts = store.receipts.configured(ack=settings.store_ack, log=queue_config)
    if store.embedded_server is not None:
        use_embedded_server(store.embedded_server)
    log_service = _log_service(settings, store, log_store)
    limiter = Limiter(store.counters, store.keys, settings.limits, clock, settings.operator_contact)
    receipt_keys = ReceiptKeys(
        store.signing_keys,
        _root_opener(settings),
        settings.receipt_root or "ephemeral",
        lifetime_s=settings.receipt_key_lifetime_s,
        retention_days=settings.retention_days,
        clock_ms=clock,
        log_queue=store.log_queue if queue_config is not None else None,
        log_identity=queue_config,
    )
    issuer = ReceiptIssuer(
        receipts, receipt_keys, clock, log_origin=settings.log_origin if log_service is not None else None
    )
    queue = open_queue(settings.jobs_redis_url, store.embedded_server)
    return Services(
        settings=settings,
        clock_ms=clock,
        store=store,
        receipts=receipts,
        limiter=limiter,
        issuer=issuer,
        log=log_service,
        log_store=log_store,
        queue=queue,
        creator=Creator(limiter, issuer, receipt_keys, log_service),
        reader=Reader(limiter, receipts),
        verifier=ReceiptVerifier(limiter, receipts, receipt_keys),
        searcher=Searcher(limiter, receipts),
        bundler=Bundler(limiter, receipts, receipt_keys, log_service, clock),
        attester=Attester(limiter, receipts, receipt_keys, log_service),
        usage=UsageReader(limiter, store.counters, settings.limits, clock),
        claimer=Claimer(settings, limiter, store, queue, clock),
        informer=Informer(settings, limiter, store, log_service, receipt_keys),
        receipt_keys=receipt_keys,
        log_routes=LogRoutes(limiter, receipts, log_service),
        demo=Demo(store.keys),
        owns_store=owns_store,
    )


def _root_opener(settings: Settings) -> Callable[[], KeySigner]:
    """How this process opens its receipt root (in the root's own thread, at start):
    ``RECEIPT_ROOT_KEY``, else (embedded mode) an ephemeral root made in memory."""
    uri = settings.receipt_root
    if uri is None:
        return SeedSigner.generate
    return lambda: open_root(uri)


async def _keep_keys(keys: ReceiptKeys) -> None:
    """The receipt keys' loop, as a server task (cancelled at each stop)."""
    with contextlib.suppress(asyncio.CancelledError):
        await keys.run()


def _system_clock_ms() -> int:
    return int(time.time() * 1000)


def _log_queue(settings: Settings) -> LogQueue | None:
    """Where this service's creates queue their log entries (``LOG_SIGNING_KEY`` set), else None."""
    if settings.log_signer is None:
        return None
    return LogQueue(Identity(settings.log_origin, settings.log_signer.verifier.encode()), settings.log_max_pending)


def _log_service(settings: Settings, store: Store, log_store: LogStore | None) -> LogService | None:
    if settings.log_signer is None:
        return None
    assert log_store is not None
    return LogService(
        store.log_queue,
        log_store,
        Identity(settings.log_origin, settings.log_signer.verifier.encode()),
        settings.log_signer.verifier,
        settings.log_policy,
        settings.log_public_url,
        settings.log_cosignature_skew_s,
        settings.log_stall_s,
    )


async def _sweep_until_stopped(store: RetentionStore, retention_days: float) -> None:
    """The embedded server's sweep, as a server task. A server cancels every task at each
    stop; for this task that is its normal end (a sweep is idempotent, one cut short is simply
    redone next start), so it returns instead of being reported as cancelled."""
    with contextlib.suppress(asyncio.CancelledError):
        await sweep_periodically(store, retention_days)


async def _integrate_until_stopped(integrator: Integrator) -> None:
    """The embedded server's log integrator, as a server task (cancelled at each stop). A
    store refused while running leaves the log untouched; the server goes on serving."""
    with contextlib.suppress(asyncio.CancelledError, LogRefused):
        await integrator.run(asyncio.Event())
