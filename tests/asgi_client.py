"""sanic-testing's ASGI client (``app.asgi_client``), less the cost it pays on every request.

sanic-testing resets the app's routers and runs its whole start-up before each request:
route and signal finalization, and Sanic's TouchUp, which recompiles Sanic's own request path
from its source (about 60 ms of CPU a request, the largest share of the inner loop's time
once summed over the suite). Nothing in a start-up changes between two requests to the same
app (the tests add no route, signal or middleware after the first request), so this client
runs it before the first request only. Every request still runs the app's server listeners
(``init`` before it, ``shutdown`` after it), as sanic-testing does, and still hands back
``(request, response)``.

The one start-up also leaves TouchUp out (``TOUCHUP = False``, unless a test set it): TouchUp
only drops the dispatch of signals no handler listens to (the app registers none), so the
request path it leaves does the same; it costs about 40 ms per app, and the suite builds
hundreds of apps. Servers the tests start as processes keep it.

Sanic also reads and parses each route handler's source when the route is added, to guess the
format of its errors (``RouteMixin._determine_error_format``): about 20 ms of every app the
tests build. The answer depends only on the handler's code, so ``install`` keeps it per code
object; every app still gets exactly the format Sanic would give it.
"""

from __future__ import annotations

from typing import Any

import httpx
import sanic_testing.testing
from sanic.config import Default
from sanic.mixins.routes import RouteMixin
from sanic_testing.testing import ASGI_HOST, ASGI_PORT, SanicASGITestClient, TestingResponse


class StartedOnceASGIClient(SanicASGITestClient):
    async def request(
        self, method: str, url: str, gather_request: bool = True, *args: Any, **kwargs: Any
    ) -> tuple[Any, Any]:
        app = self.sanic_app
        if not (app.state.is_started and app.router.finalized and app.signal_router.finalized):
            # The first request: sanic-testing's own path (start-up, its request collector).
            if isinstance(app.config.TOUCHUP, Default):
                app.config.TOUCHUP = False
            return await super().request(method, url, gather_request, *args, **kwargs)
        await app._server_event("init", "before")
        await app._server_event("init", "after")
        if not url.startswith(("http:", "https:", "ftp:", "ftps://", "//", "ws:", "wss:")):
            url = url if url.startswith("/") else f"/{url}"
            url = f"{'ws' if method == 'websocket' else 'http'}://{ASGI_HOST}:{ASGI_PORT}{url}"
        self.gather_request = gather_request
        response = await httpx.AsyncClient.request(self, method, url, *args, **kwargs)
        await app._server_event("shutdown", "before")
        await app._server_event("shutdown", "after")
        response.__class__ = TestingResponse
        return (self.last_request if gather_request else None), response


_ERROR_FORMATS: dict[object, str] = {}
_determine_error_format = RouteMixin._determine_error_format


def _error_format_once_per_handler(self: RouteMixin, handler: Any) -> str:
    code = getattr(handler, "__code__", None)
    if code is None:
        return str(_determine_error_format(self, handler))
    if code not in _ERROR_FORMATS:
        _ERROR_FORMATS[code] = _determine_error_format(self, handler)
    return _ERROR_FORMATS[code]


def install() -> None:
    """Make ``app.asgi_client`` this client (Sanic imports sanic-testing's name when asked), and
    keep Sanic's guess of each handler's error format."""
    sanic_testing.testing.SanicASGITestClient = StartedOnceASGIClient
    RouteMixin._determine_error_format = _error_format_once_per_handler  # type: ignore[method-assign]
