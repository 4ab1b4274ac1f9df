"""Pages: the public verification page (static files) and the API reference, rendered from
the OpenAPI document (``web.openapi``) so the page and ``/openapi.json`` always agree."""

from __future__ import annotations

import functools

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import file, html

from web.openapi import reference_view
from web.templating import TEMPLATES

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


# The reference page has no script at all, and loads only its own stylesheet.
DOCS_PAGE_HEADERS = {
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'none'",
            "style-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    ),
    "Cache-Control": "public, max-age=300",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


@functools.cache
def render_reference() -> str:
    """The reference page; the document is fixed at import, so it is rendered once."""
    return TEMPLATES.get_template("api_reference.html").render(**reference_view())


@bp.get("/docs")
async def docs_page(request: Request) -> HTTPResponse:
    return html(render_reference(), headers=DOCS_PAGE_HEADERS)
