"""The one log line per HTTP request: ids, route, status, timing, plan and project.

Never a header, a query string, a body, an API key or any other secret
(docs/observability.md); a path segment shaped like one of this service's API keys is
masked. ``runtime.logs`` writes the line.
"""

from __future__ import annotations

import re
from typing import Any

from execution_proof.runtime.logs import LOG_LEVEL, request_log, write_request_line
from execution_proof.runtime.settings import ClientIpConfig
from execution_proof.web.client_ip import client_ip
from execution_proof.web.request_ids import request_id_of

PATH_LIMIT = 512
API_KEY_SHAPE = re.compile(r"eps_[A-Za-z0-9_-]{16,}")


def mask_path(path: str) -> str:
    """The path as logged: cut to ``PATH_LIMIT`` characters, API-key-shaped segments masked."""
    if len(path) > PATH_LIMIT:
        path = path[:PATH_LIMIT] + "..."
    if "eps_" in path:
        path = API_KEY_SHAPE.sub("eps_[masked]", path)
    return path


def log_request(request: Any, route: str, status: int, duration_s: float, ip_config: ClientIpConfig) -> None:
    """The request's one log line (skipped cheaply when INFO is not enabled)."""
    if not request_log.isEnabledFor(LOG_LEVEL):
        return
    caller = getattr(request.ctx, "caller", None)  # set by web.auth.caller_of
    fields = {
        "event": "request",
        "request_id": request_id_of(request),
        "method": str(request.method)[:16],
        "route": route,
        "path": mask_path(request.path),
        "status": status,
        "duration_ms": round(duration_s * 1000, 3),
        "plan": caller.plan if caller is not None else None,
        "project_id": caller.project_id if caller is not None else None,
        "client_ip": caller.client if caller is not None else client_ip(request, ip_config),
    }
    write_request_line(fields)
