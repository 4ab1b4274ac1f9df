"""Pages: the public verification page (static files) and the API reference, rendered from
the OpenAPI document (``web.openapi``) so the page and ``/openapi.json`` always agree."""

from __future__ import annotations

import functools
from pathlib import Path

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import html

from execution_proof.web.auth import services_of
from execution_proof.web.openapi import reference_view
from execution_proof.web.responses import Answer
from execution_proof.web.templating import TEMPLATES

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
"""The verify page, its scripts and the stylesheets (served under ``/static``)."""

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
    """The page; ``<body data-log="on">`` when the service runs a transparency log, so the
    page asks for the log (and a receipt's proof) only then."""
    page = _verify_page(STATIC_DIR / "verify.html")
    if services_of(request).log is not None:
        page = page.replace("<body", '<body data-log="on"', 1)
    return Answer(page, headers=VERIFY_PAGE_HEADERS, content_type="text/html; charset=utf-8")


@functools.cache
def _verify_page(path: Path) -> str:
    return path.read_text(encoding="utf-8")


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
