"""What every route reads first: the services it calls, and who is asking (the request's
bearer API key and client address, read once per request for usecases/limiting.py; docs/api.md,
"Authentication")."""

from __future__ import annotations

from sanic import Request

from execution_proof.usecases.limiting import Caller
from execution_proof.usecases.services import Services
from execution_proof.web.client_ip import client_ip


def services_of(request: Request) -> Services:
    """The process's services (``app.ctx.services``, opened before the server serves)."""
    services: Services = request.app.ctx.services
    return services


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
    request: the request's log line reuses it."""
    caller: Caller | None = getattr(request.ctx, "caller", None)
    if caller is None:
        settings = services_of(request).settings
        caller = request.ctx.caller = Caller(bearer_token(request), client_ip(request, settings.client_ip))
    return caller


def with_caller(request: Request, caller: Caller) -> None:
    """The caller as a use case returned it (naming the accepted key's plan and project), for
    the request's log line."""
    request.ctx.caller = caller


def name_accepted(request: Request, accepted: tuple[str, str]) -> None:
    """A request refused after its key was accepted: its log line names the key's plan and project."""
    plan, project_id = accepted
    with_caller(request, caller_of(request)._replace(plan=plan, project_id=project_id))
