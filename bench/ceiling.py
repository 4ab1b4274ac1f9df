"""The ceiling: a bare Sanic app with the service's benchmarked routes and nothing else.

Same framework, same worker model (``Sanic.serve`` with one worker process, uvloop, no
access log), same routes and status codes as the service; each handler only parses the
JSON body and answers a JSON body of about the size the service answers (sizes measured
by the harness and passed in ``BENCH_CEILING_SIZES``). No Redis, no signing, no limits:
the service's throughput divided by this app's is the share of the framework's ceiling
that the service reaches.

``python -m bench.ceiling --port P`` (run from the repository root).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson
from sanic import HTTPResponse, Request, Sanic
from sanic.worker.loader import AppLoader

DEFAULT_SIZES = {"create": 1500, "read": 1000, "verify": 200}
JSON = "application/json"


def _sizes() -> dict[str, int]:
    raw = os.environ.get("BENCH_CEILING_SIZES")
    sizes = dict(DEFAULT_SIZES)
    if raw:
        sizes.update({k: int(v) for k, v in orjson.loads(raw).items()})
    return sizes


def _answer(payload: Any, size: int, status: int) -> HTTPResponse:
    """``{"ok": true, "echo": <the parsed body>, "pad": "..."}`` padded to about ``size`` bytes."""
    body = orjson.dumps({"ok": True, "echo": payload, "pad": ""})
    missing = size - len(body)
    if missing > 0:
        body = orjson.dumps({"ok": True, "echo": payload, "pad": "x" * missing})
    return HTTPResponse(body, status=status, content_type=JSON)


def _parse(request: Request) -> Any:
    try:
        value = orjson.loads(request.body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def create_app() -> Sanic[Any, Any]:
    sizes = _sizes()
    app: Sanic[Any, Any] = Sanic("bench_ceiling")
    app.config.ACCESS_LOG = False
    app.config.MOTD = False

    @app.post("/v1/receipts")
    async def create(request: Request) -> HTTPResponse:
        payload = _parse(request)
        if payload is None:
            return _answer({"error": "bad_request"}, 0, 400)
        return _answer(payload, sizes["create"], 201)

    @app.get("/v1/receipts/<receipt_ref:str>")
    async def read(request: Request, receipt_ref: str) -> HTTPResponse:
        return _answer({"receipt_id": receipt_ref}, sizes["read"], 200)

    @app.post("/v1/verify")
    async def verify(request: Request) -> HTTPResponse:
        payload = _parse(request)
        if payload is None:
            return _answer({"error": "bad_request"}, 0, 400)
        return _answer(payload, sizes["verify"], 200)

    @app.get("/health")
    async def health(request: Request) -> HTTPResponse:
        return HTTPResponse(b'{"ok":true}', content_type=JSON)

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    loader = AppLoader(factory=create_app)
    app = loader.load()
    app.prepare(host=args.host, port=args.port, workers=args.workers, access_log=False, motd=False)
    Sanic.serve(primary=app, app_loader=loader)
    return 0


if __name__ == "__main__":
    sys.exit(main())
