"""What the HTTP server adds to the metrics of ``runtime.metrics``: route labels, and
``GET /metrics`` on the main port behind ``METRICS_TOKEN`` (docs/observability.md)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from sanic import HTTPResponse, Request
from sanic import exceptions as sanic_errors

from execution_proof.runtime.metrics import LOG_HALTED, LOG_STALLED, METHODS, UNMATCHED, render_metrics
from execution_proof.web.auth import bearer_token
from execution_proof.web.responses import Answer

_route_labels: dict[str, str] = {}


def route_label(request: Any) -> str:
    """The route's name without the app's prefix (``receipts.create_receipt``), or ``unmatched``."""
    route = getattr(request, "route", None)
    if route is None:
        return UNMATCHED
    name: str = route.name
    label = _route_labels.get(name)
    if label is None:
        label = _route_labels[name] = name.partition(".")[2] or name
    return label


ALL_METHODS = sorted(METHODS)


async def refresh_gauges(app: Any) -> None:
    """Gauges the web process reads from elsewhere just before they are exposed: whether
    the log is halted (kept in the log store, set by whichever integrator saw the fork or
    refused the store) or stalled (judged from Redis and the store)."""
    service = app.ctx.services.log
    if service is not None:
        state = await service.state()
        LOG_HALTED.set(1 if state == "halted" else 0)
        LOG_STALLED.set(1 if state == "stalled" else 0)


def add_metrics_route(app: Any, token: str) -> None:
    """``GET /metrics`` for ``Authorization: Bearer <token>``; anything else is the plain 404
    of an unknown path (any method, so no 405 tells that the path exists)."""
    expected = hashlib.sha256(token.encode()).digest()

    async def metrics(request: Request) -> HTTPResponse:
        presented = bearer_token(request) if request.method == "GET" else None
        offered = hashlib.sha256((presented or "").encode()).digest()
        if not hmac.compare_digest(offered, expected):
            raise sanic_errors.NotFound()
        await refresh_gauges(request.app)
        body = await asyncio.to_thread(render_metrics)
        return Answer(body, content_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

    def unknown_method(request: Request, exception: Exception) -> HTTPResponse:
        # A method no route lists (BREW, TRACE) is a 405 on a known path but a 404 on an
        # unknown one: /metrics must answer like the unknown path.
        if request.path == "/metrics":
            exception = sanic_errors.NotFound()
        response: HTTPResponse = app.error_handler.default(request, exception)
        return response

    app.add_route(metrics, "/metrics", methods=ALL_METHODS, name="metrics")
    app.error_handler.add(sanic_errors.MethodNotAllowed, unknown_method)
