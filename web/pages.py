"""Static pages: the public verification page and the API summary."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import file

bp = Blueprint("pages")


@bp.get("/verify")
async def verify_page(request: Request) -> HTTPResponse:
    return await file(request.app.ctx.static_dir / "verify.html", mime_type="text/html; charset=utf-8")


@bp.get("/docs")
async def docs_page(request: Request) -> HTTPResponse:
    return await file(request.app.ctx.static_dir / "docs.html", mime_type="text/html; charset=utf-8")
