"""The Sanic application factory: config, store, signing keys, blueprints, listeners."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanic import Request, Sanic
from sanic.compat import Header
from sanic.response import BaseHTTPResponse

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
from execution_proof.runtime.logs import configure_logging, flush_request_lines, install_sanic_log_filters
from execution_proof.runtime.metrics import observe_request, release_worker_metrics
from execution_proof.runtime.settings import Settings, load_settings, require_log_store, warn
from execution_proof.runtime.store_ack import StoreAckError
from execution_proof.usecases.creating import Creator
from execution_proof.usecases.issuing import ReceiptIssuer
from execution_proof.usecases.limiting import Limiter
from execution_proof.usecases.log_reading import LogService
from execution_proof.web import bundles, claims, info, log_api, openapi, pages, receipts_api, search, usage
from execution_proof.web.access_log import log_request
from execution_proof.web.demo import announce_demo_key
from execution_proof.web.errors import JsonErrorHandler
from execution_proof.web.http_metrics import add_metrics_route, refresh_gauges, route_label
from execution_proof.web.request_ids import request_id_of

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
SOCKET_BODY_LIMIT = 16 * 1024
GAUGE_REFRESH_S = 5.0
log = logging.getLogger("eps.log")
_app_numbers = itertools.count(1)
App = Sanic[Any, Any]


def create_app(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    log_store: LogStore | None = None,
    name: str | None = None,
    clock_ms: Callable[[], int] | None = None,
) -> App:
    """Build the app. ``store``, ``log_store`` and ``clock_ms`` are injected by tests;
    otherwise the store is opened at server start, the log store is ``LOG_STORE`` (in memory
    in embedded mode without it) and time is the system clock (Unix milliseconds).
    ``ConfigError`` when the log has no store (``REDIS_URL`` and a log key, no ``LOG_STORE``).

    Every response carries ``X-Request-Id``; every error is the JSON error body of docs/api.md.
    """
    settings = settings or load_settings()
    app: App = Sanic(name or f"eps{next(_app_numbers)}", error_handler=JsonErrorHandler(), request_class=ServiceRequest)
    app.config.REQUEST_MAX_SIZE = SOCKET_BODY_LIMIT
    app.config.FALLBACK_ERROR_FORMAT = "json"
    app.config.ACCESS_LOG = False
    app.config.MOTD = False
    app.ctx.settings = settings
    app.ctx.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
    app.ctx.static_dir = STATIC_DIR
    if settings.log_signer is not None and log_store is None:
        require_log_store(settings)
        log_store = open_log_store(settings.log_store or "memory:")
    app.ctx.log_store = log_store
    if store is not None:
        # A store handed in (by a test) is used as it is; the issuer's receipts get these
        # settings' STORE_ACK and log queue.
        _attach_store(app, store, store.receipts.configured(ack=settings.store_ack, log=_log_queue(settings)))

    app.blueprint(info.bp)
    app.blueprint(receipts_api.bp)
    app.blueprint(bundles.bp)
    app.blueprint(search.bp)
    app.blueprint(usage.bp)
    app.blueprint(pages.bp)
    app.blueprint(claims.bp)
    app.blueprint(log_api.bp)
    app.blueprint(openapi.bp)
    app.static("/static", STATIC_DIR, name="static")
    install_sanic_log_filters()

    if settings.metrics_token:
        add_metrics_route(app, settings.metrics_token)

    app.register_listener(_open_resources, "before_server_start")
    app.register_listener(_close_resources, "after_server_stop")
    return app


async def _open_resources(app: App) -> None:
    """Before the server serves: the store (unless one was handed in), the embedded mode's own
    sweep and integrator, the log store's checks, and the durability of the Redis behind us."""
    settings: Settings = app.ctx.settings
    if getattr(app.ctx, "started", False):
        return
    app.ctx.started = True
    if getattr(app.ctx, "store", None) is None:
        opened = open_store(
            settings.redis_url, cluster=settings.redis_cluster, ack=settings.store_ack, log=_log_queue(settings)
        )
        _attach_store(app, opened, opened.receipts)
        app.ctx.owns_store = True
    if settings.embedded:
        warn(
            "no REDIS_URL: using the embedded in-process store. NOTHING SURVIVES A RESTART, "
            "and every worker would have its own store. Set REDIS_URL for real use."
        )
        if settings.ephemeral_signing_key:
            await announce_demo_key(app)
        # No worker serves the embedded store, so the server sweeps expired receipts itself,
        # and integrates the log.
        app.add_task(_sweep_until_stopped(app.ctx.store.retention, settings.retention_days), name="retention-sweep")
    elif not settings.keyring.can_sign:
        warn("no SIGNING_KEYS: GET /v1/public-key and POST /v1/receipts answer 500 until one is set")
    if settings.log_signer is not None:
        integrator = (
            Integrator(app.ctx.store.log_queue, app.ctx.log_store, log_config(settings)) if settings.embedded else None
        )
        if await _prepare_log(app, settings, integrator) and integrator is not None:
            app.add_task(_integrate_until_stopped(integrator), name="log-integrator")
    if not settings.embedded:
        # Durability of the Redis behind us (docs/redis.md); StoreAckError stops start-up.
        try:
            warnings = await check_store_at_startup(app.ctx.store.client, settings.store_ack)
        except StoreAckError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise
        for message in warnings:
            warn(message)

    if settings.log_signer is not None and settings.metrics_port is not None:
        app.add_task(_refresh_gauges_until_stopped(app), name="log-gauges")


async def _close_resources(app: App) -> None:
    if getattr(app.ctx, "owns_store", False):
        await app.ctx.store.close()
    release_worker_metrics()
    flush_request_lines()


async def _prepare_log(app: App, settings: Settings, integrator: Integrator | None) -> bool:
    """The log store checked (and created if new) at start-up, before the first create can
    queue an entry: a worker started later must not find entries beside an empty store. The
    embedded server checks it as its own integrator (``integrator``), else as the workers do
    (``prepare_log``). False when the store is refused: the server still serves (receipts, and
    the log as the store holds it), the log is left untouched. A store that cannot be reached
    is checked again by whoever integrates."""
    assert settings.log_signer is not None
    try:
        if integrator is not None:
            await integrator.prepare()
        else:
            await prepare_log(
                app.ctx.store.log_queue,
                app.ctx.log_store,
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


async def _sweep_until_stopped(store: RetentionStore, retention_days: float) -> None:
    """The embedded server's sweep, as a server task. Sanic cancels every task at each stop;
    for this task that is its normal end (a sweep is idempotent, one cut short is simply
    redone next start), so it returns instead of Sanic logging "Task ... was cancelled"."""
    with contextlib.suppress(asyncio.CancelledError):
        await sweep_periodically(store, retention_days)


async def _integrate_until_stopped(integrator: Integrator) -> None:
    """The embedded server's log integrator, as a server task (cancelled at each stop). A
    store refused while running leaves the log untouched; the server goes on serving."""
    with contextlib.suppress(asyncio.CancelledError, LogRefused):
        await integrator.run(asyncio.Event())


async def _refresh_gauges_until_stopped(app: App) -> None:
    """``METRICS_PORT`` exposes this process's gauges without a request passing through the
    app: read what lives elsewhere (the log's halt) every few seconds."""
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            with contextlib.suppress(StoreUnavailable):
                await refresh_gauges(app)
            await asyncio.sleep(GAUGE_REFRESH_S)


def _log_queue(settings: Settings) -> LogQueue | None:
    """Where this service's creates queue their log entries (``LOG_SIGNING_KEY`` set), else None."""
    if settings.log_signer is None:
        return None
    return LogQueue(Identity(settings.log_origin, settings.log_signer.verifier.encode()), settings.log_max_pending)


def _attach_store(app: App, store: Store, receipts: ReceiptStore) -> None:
    """Put ``store`` on the app, and what is built on it; the issuer writes through ``receipts``
    (the store's own, or a handed-in store's given this app's settings)."""
    settings: Settings = app.ctx.settings
    app.ctx.store = store
    app.ctx.issuer = ReceiptIssuer(receipts, settings.keyring, app.ctx.clock_ms, log=settings.log_signer is not None)
    if settings.log_signer is not None:
        identity = Identity(settings.log_origin, settings.log_signer.verifier.encode())
        app.ctx.log = LogService(
            store.log_queue,
            app.ctx.log_store,
            identity,
            settings.log_signer.verifier,
            settings.log_policy,
            settings.log_public_url,
            settings.log_cosignature_skew_s,
            settings.log_stall_s,
        )
    app.ctx.queue = open_queue(settings.jobs_redis_url, store.embedded_server)
    if store.embedded_server is not None:
        use_embedded_server(store.embedded_server)
    app.ctx.limiter = Limiter(store.counters, store.keys, settings.limits, app.ctx.clock_ms, settings.operator_contact)
    app.ctx.creator = Creator(app.ctx.limiter, app.ctx.issuer, getattr(app.ctx, "log", None))


class ServiceRequest(Request):
    """Sanic's request with the service's envelope folded into ``respond``, which every
    response passes through (a handler's, an error's, a static file's, a 404/405/413 before
    routing): it gets ``X-Request-Id`` and is recorded once (metrics and the log line).

    This replaces an ``on_request``/``on_response`` middleware pair: Sanic's middleware
    machinery (signal dispatch around each one, two more coroutines) cost about 30 µs per
    request, a quarter of a public read's CPU (bench/PROFILE.md).
    """

    __slots__ = ("recorded", "started")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = time.perf_counter()
        self.recorded = False

    async def respond(
        self,
        response: BaseHTTPResponse | None = None,
        *,
        status: int = 200,
        headers: Header | dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> Any:
        response = await super().respond(response, status=status, headers=headers, content_type=content_type)
        if isinstance(response, BaseHTTPResponse):
            response.headers["X-Request-Id"] = request_id_of(self)
            record_request(self, response.status)
        return response


def record_request(request: Request, status: int) -> None:
    """Once per request, errors before routing included: its metrics and its log line."""
    if getattr(request, "recorded", True):
        return
    request.recorded = True  # type: ignore[attr-defined]
    duration = time.perf_counter() - request.started  # type: ignore[attr-defined]
    route = route_label(request)
    observe_request(route, request.method, status, duration)
    log_request(request, route, status, duration, request.app.ctx.settings.client_ip)


def create_app_from_env() -> App:
    """Factory for the serving processes (importable by dotted path); sets up their logging."""
    settings = load_settings()
    app = create_app(settings, name="eps")
    configure_logging(settings.log_format)
    return app
