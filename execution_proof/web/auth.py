"""Who is asking: the request's bearer API key and client address, read once per request for
the verdicts of usecases/limiting.py (docs/api.md, "Authentication")."""

from __future__ import annotations

from sanic import Request

from execution_proof.usecases.limiting import Caller
from execution_proof.web.client_ip import client_ip


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def caller_of(request: Request) -> Caller:
    """The request's caller (its bearer key, its client address's bucket), worked out once per
    request: the request's log line reuses it, with the plan and project once a key is accepted."""
    caller: Caller | None = getattr(request.ctx, "caller", None)
    if caller is None:
        caller = request.ctx.caller = Caller(
            bearer_token(request), client_ip(request, request.app.ctx.settings.client_ip)
        )
    return caller
