"""The body-size rule as the routes apply it before their use case (usecases/bodies.py)."""

from __future__ import annotations

from sanic import Request

from execution_proof.usecases.bodies import check_size


def check_body_size(request: Request, limit: int) -> None:
    """413 when the body exceeds ``limit`` bytes (the socket already caps it at 16 KB)."""
    check_size(request.body, limit)
