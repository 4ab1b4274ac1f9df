"""``GET /v1/usage``: the caller's plan, minute and month usage with reset times (usecases/usage.py)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from execution_proof.web.auth import caller_of, services_of, with_caller

bp = Blueprint("usage")


@bp.get("/v1/usage")
async def usage(request: Request) -> HTTPResponse:
    report = await services_of(request).usage.usage(caller_of(request))
    with_caller(request, report.admission.caller)
    return json_response(report.body, headers=report.admission.headers())
