"""One handler renders every error as the JSON error body of docs/api.md, "Errors"."""

from __future__ import annotations

import logging

import orjson
from sanic import HTTPResponse, Request
from sanic import exceptions as sanic_errors
from sanic.handlers import ErrorHandler

from execution_proof.receipts.errors import (
    BadRequest,
    CorruptRecord,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceError,
)
from execution_proof.receipts.shapes import JSONOut
from execution_proof.runtime.metrics import count_corrupt_record
from execution_proof.web.auth import name_accepted
from execution_proof.web.http_metrics import route_label
from execution_proof.web.request_ids import request_id_of
from execution_proof.web.responses import Answer

log = logging.getLogger("eps.errors")
records_log = logging.getLogger("eps.records")


def report_corrupt_record(request: Request, error: CorruptRecord) -> None:
    """One error record and one count (``eps_corrupt_records_total``) for a stored receipt
    record a request could not use: the receipt id and what is wrong, never its bytes."""
    route = route_label(request)
    count_corrupt_record(route)
    records_log.error(
        "stored receipt record %s is unusable: %s",
        error.receipt_id,
        error.reason,
        extra={
            "fields": {
                "event": "corrupt_record",
                "receipt_id": error.receipt_id,
                "reason": error.reason,
                "route": route,
                "request_id": request_id_of(request),
            }
        },
    )


def error_response(request: Request | None, error: ServiceError) -> HTTPResponse:
    """The JSON error body with ``request_id``; ``X-Request-Id`` is set on it too."""
    request_id = request_id_of(request)
    described: dict[str, JSONOut] = {"code": error.code, "message": error.message}
    if error.details:
        described["details"] = error.details
    body = {"error": described, "request_id": request_id}
    headers = {"X-Request-Id": request_id, **error.response_headers}
    return Answer(orjson.dumps(body), status=error.status, headers=headers, content_type="application/json")


def as_service_error(exception: Exception) -> ServiceError:
    """Map framework errors to stable codes; anything unknown is a bare 500."""
    if isinstance(exception, ServiceError):
        return exception
    if isinstance(exception, sanic_errors.NotFound):
        return NotFound("no such resource")
    if isinstance(exception, sanic_errors.MethodNotAllowed):
        error = MethodNotAllowed("method not allowed on this resource")
        allowed = getattr(exception, "allowed_methods", None)
        if allowed:
            error.details = {"allowed": sorted(allowed)}
        return error
    if isinstance(exception, sanic_errors.PayloadTooLarge):
        return PayloadTooLarge("request body too large")
    if isinstance(exception, sanic_errors.SanicException) and 400 <= exception.status_code < 500:
        return BadRequest("malformed HTTP request")
    return ServiceError("internal error")


CLIENT_CLOSED_REQUEST = 499
"""The status a request is recorded with (log line, metrics) when its client closed the
connection before the answer: nginx's "client closed request". No client ever receives it."""


class JsonErrorHandler(ErrorHandler):
    def default(self, request: Request, exception: Exception) -> HTTPResponse:
        if isinstance(exception, sanic_errors.RequestCancelled):
            # The client went away mid-request (Sanic cancels the handler): not a server
            # error, so no error record and no 500 in the metrics. A create's write goes on
            # regardless (usecases/issuing.py); this answer only names what happened.
            return Answer(b"", status=CLIENT_CLOSED_REQUEST, headers={"X-Request-Id": request_id_of(request)})
        error = as_service_error(exception)
        if error.accepted is not None:
            name_accepted(request, error.accepted)
        if isinstance(exception, CorruptRecord):
            report_corrupt_record(request, exception)
        if error.status >= 500 and not isinstance(exception, ServiceError):
            log.error(
                "unhandled %s on %s %s (request %s)",
                type(exception).__name__,
                getattr(request, "method", "?"),
                getattr(request, "path", "?"),
                request_id_of(request),
                exc_info=exception,
            )
        response = error_response(request, error)
        allowed = error.details.get("allowed") if error.details else None
        if isinstance(exception, sanic_errors.MethodNotAllowed) and isinstance(allowed, list):
            response.headers["Allow"] = ", ".join(str(method) for method in allowed)
        return response
