"""``GET /v1/usage``: the caller's plan, minute and month usage with reset times."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from execution_proof.receipts.limits import minute_window, month_window, ratelimit_headers
from execution_proof.usecases.limiting import Limiter
from execution_proof.web.auth import caller_of

bp = Blueprint("usage")


@bp.get("/v1/usage")
async def usage(request: Request) -> HTTPResponse:
    """Reading usage counts against the address's authenticated limit, not the key's."""
    limiter: Limiter = request.app.ctx.limiter
    key, ip_usage = await limiter.authenticate_counted(caller_of(request))
    assert ip_usage is not None  # counted: nothing refused the request
    plan = request.app.ctx.settings.limits.plan(key.plan)
    now = request.app.ctx.clock_ms()
    minute, month = minute_window(now), month_window(now)
    minute_used, month_used = await request.app.ctx.store.counters.read_usage(
        key.project_id, key.key_hash, minute.id, month.id
    )
    return json_response(
        {
            "ok": True,
            "plan": key.plan,
            "project_id": key.project_id,
            "minute": {
                "limit": plan.per_minute,
                "used": minute_used,
                "remaining": max(0, plan.per_minute - minute_used),
                "reset_at": minute.ends_at,
                "reset_in_seconds": minute.retry_after_s,
            },
            "month": {
                "limit": plan.monthly,
                "used": month_used,
                "remaining": max(0, plan.monthly - month_used),
                "reset_at": month.ends_at,
                "reset_in_seconds": month.retry_after_s,
            },
        },
        headers=ratelimit_headers([ip_usage]),
    )
