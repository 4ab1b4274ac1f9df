"""The Sanic application factory: config, store, signing keys, blueprints, listeners."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from sanic import Request, Sanic
from sanic.compat import Header
from sanic.response import BaseHTTPResponse

from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.runtime.logs import configure_logging, flush_request_lines, install_sanic_log_filters
from execution_proof.runtime.metrics import observe_request, release_worker_metrics
from execution_proof.runtime.settings import Settings, load_settings, require_log_store
from execution_proof.usecases.services import Services, open_services
from execution_proof.web import bundles, claims, info, log_api, openapi, pages, receipts_api, search, usage
from execution_proof.web.access_log import log_request
from execution_proof.web.auth import services_of
from execution_proof.web.demo import announce_demo_key
from execution_proof.web.errors import JsonErrorHandler
from execution_proof.web.http_metrics import add_metrics_route, refresh_gauges, route_label
from execution_proof.web.pages import STATIC_DIR
from execution_proof.web.request_ids import request_id_of

SOCKET_BODY_LIMIT = 16 * 1024
GAUGE_REFRESH_S = 5.0
log = logging.getLogger("eps.log")
_app_numbers = itertools.count(1)
App = Sanic[Any, Any]


def create_app(
    settings: Settings | None = None,
    *,
    store: Any = None,
    log_store: Any = None,
    name: str | None = None,
    clock_ms: Callable[[], int] | None = None,
    listen_url: str | None = None,
) -> App:
    """Build the app. ``store`` (a ``kv.store.Store``), ``log_store`` and ``clock_ms`` are
    injected by tests; otherwise the services are opened at server start, in the serving
    process (``open_services``: the store at ``REDIS_URL``, the log store ``LOG_STORE``, in
    memory in embedded mode without it, and the system clock in Unix milliseconds).
    ``ConfigError`` when the log has no store (``REDIS_URL`` and a log key, no ``LOG_STORE``).
    ``listen_url``: where ``service.py serve`` bound the server (the demo banner shows it).

    ``app.ctx.services`` is the only thing on the app's context. Every response carries
    ``X-Request-Id``; every error is the JSON error body of docs/api.md.
    """
    settings = settings or load_settings()
    app: App = Sanic(name or f"eps{next(_app_numbers)}", error_handler=JsonErrorHandler(), request_class=ServiceRequest)
    app.config.REQUEST_MAX_SIZE = SOCKET_BODY_LIMIT
    app.config.FALLBACK_ERROR_FORMAT = "json"
    app.config.ACCESS_LOG = False
    app.config.MOTD = False

    def services() -> Services:
        return open_services(settings, store=store, log_store=log_store, clock_ms=clock_ms)

    if settings.log_signer is not None and log_store is None:
        require_log_store(settings)  # ConfigError here, not in every serving process
    if store is not None:
        app.ctx.services = services()  # a store handed in (by a test) is used at once
    started = False

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

    async def open_resources(app: App) -> None:
        """Before the server serves: its services (unless made above), their start (the
        embedded mode's own sweep and integrator, the log store's checks, the durability of
        the Redis behind us), the demo key, and the gauges' refresh."""
        nonlocal started
        if started:
            return
        started = True
        opened: Services = getattr(app.ctx, "services", None) or services()
        app.ctx.services = opened
        await opened.start(lambda task, task_name: app.add_task(task, name=task_name))
        if settings.embedded and settings.receipt_root is None:
            await announce_demo_key(app, listen_url)
        if settings.log_signer is not None and settings.metrics_port is not None:
            app.add_task(_refresh_gauges_until_stopped(app), name="log-gauges")

    app.register_listener(open_resources, "before_server_start")
    app.register_listener(_close_resources, "after_server_stop")
    return app


async def _close_resources(app: App) -> None:
    services: Services | None = getattr(app.ctx, "services", None)
    if services is not None:
        await services.close()
    release_worker_metrics()
    flush_request_lines()


async def _refresh_gauges_until_stopped(app: App) -> None:
    """``METRICS_PORT`` exposes this process's gauges without a request passing through the
    app: read what lives elsewhere (the log's halt) every few seconds."""
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            with contextlib.suppress(StoreUnavailable):
                await refresh_gauges(app)
            await asyncio.sleep(GAUGE_REFRESH_S)


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
    log_request(request, route, status, duration, services_of(request).settings.client_ip)


def create_app_from_env(listen_url: str | None = None) -> App:
    """Factory for the serving processes (importable by dotted path); sets up their logging."""
    settings = load_settings()
    app = create_app(settings, name="eps", listen_url=listen_url)
    configure_logging(settings.log_format)
    return app
