"""Static pages: the public verification page and the API summary."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import file

bp = Blueprint("pages")


# The verification page runs only its own static scripts and reads only its own origin.
VERIFY_PAGE_HEADERS = {
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


@bp.get("/verify")
async def verify_page(request: Request) -> HTTPResponse:
    return await file(
        request.app.ctx.static_dir / "verify.html",
        mime_type="text/html; charset=utf-8",
        headers=VERIFY_PAGE_HEADERS,
    )


@bp.get("/docs")
async def docs_page(request: Request) -> HTTPResponse:
    return await file(request.app.ctx.static_dir / "docs.html", mime_type="text/html; charset=utf-8")
