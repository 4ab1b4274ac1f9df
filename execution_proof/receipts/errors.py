"""The errors the service reports, each with a stable code and status, and the client
library's own two (``InvalidInput``, ``Unreachable``); all derive from ``execution_proof.Error``
(execution_proof/errors.py).

The web layer renders any ``ServiceError`` as the JSON error body of docs/api.md; anything
else becomes a 500 ``internal_error`` without details. The client library (``client/``)
raises the same classes for the service's replies (``from_reply``): a 409 ``log_pending`` is
``ProofPending`` (``execution_proof.ProofPending``) on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from execution_proof.errors import Error
from execution_proof.receipts.shapes import JSONOut


class InvalidInput(Error, ValueError):
    """An argument or a file given to the library is not what it must be (a hash that is not
    ``sha256:<hex>``, a file that holds no receipt, an unreadable path); nothing was sent."""


class Unreachable(Error):
    """The service gave no usable reply: refused, reset or timed out, TLS failed, not an
    http(s) URL, or a reply over the client's ceiling (client/http.py says which)."""


class VerificationFailed(Error):
    """A verification whose verdict is not VALID, raised by ``VerifyReport.raise_for_failure()``;
    ``report`` is the report (its ``verdict``, ``reason`` and ``checks``)."""

    def __init__(self, report: object) -> None:
        verdict, reason = getattr(report, "verdict", "?"), getattr(report, "reason", None)
        super().__init__(f"verification failed: {verdict}" + (f" ({reason})" if reason else ""))
        self.report = report
        self.verdict: str = verdict
        self.reason: str | None = reason


class ServiceError(Error):
    """Base of all errors with a public code. ``details`` must never hold secrets.

    ``code`` and ``status`` are the class's; an instance the client makes from a reply whose
    code no class here has carries the reply's own (``from_reply``)."""

    code: str = "internal_error"
    status: int = 500
    headers: ClassVar[dict[str, str]] = {}
    request: str | None = None
    """On the client's side: the request the service refused (``GET URL``)."""
    accepted: tuple[str, str] | None = None
    """On the service's side: the plan and project of the API key a request was accepted with
    before it was refused (its log line names them), else None."""

    def __init__(
        self,
        message: str,
        details: Mapping[str, JSONOut] | None = None,
        headers: dict[str, str] | None = None,
        *,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.response_headers = {**type(self).headers, **(headers or {})}
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


class BadRequest(ServiceError):
    code = "bad_request"
    status = 400


class ForbiddenContent(BadRequest):
    code = "forbidden_content"


class Unauthorized(ServiceError):
    code = "unauthorized"
    status = 401


class Forbidden(ServiceError):
    code = "forbidden"
    status = 403


class NotFound(ServiceError):
    code = "not_found"
    status = 404


class MethodNotAllowed(ServiceError):
    code = "method_not_allowed"
    status = 405


class IdempotencyConflict(ServiceError):
    code = "idempotency_conflict"
    status = 409


class PayloadTooLarge(ServiceError):
    code = "payload_too_large"
    status = 413


class UnsupportedMediaType(ServiceError):
    code = "unsupported_media_type"
    status = 415


class RateLimited(ServiceError):
    """A per-minute (or per-day) limit is used up; ``Retry-After`` says when it resets."""

    code = "rate_limited"
    status = 429


class QuotaExceeded(ServiceError):
    """The monthly receipt quota is used up; ``Retry-After`` points at the next month."""

    code = "quota_exceeded"
    status = 429


class InternalError(ServiceError):
    code = "internal_error"
    status = 500


class CorruptRecord(InternalError):
    """A stored receipt record that cannot be decoded, or that is not the receipt it was read
    by (another id, or another project than the hash index's): a fault of the server's data,
    answered 500 ``internal_error``. ``receipt_id`` and ``reason`` are for the log only."""

    def __init__(self, receipt_id: str, reason: str) -> None:
        super().__init__("internal error")
        self.receipt_id = receipt_id
        self.reason = reason


class SigningKeyUnavailable(ServiceError):
    code = "signing_key_unavailable"
    status = 500


class StoreUnavailable(ServiceError):
    """The store did not answer; fail closed rather than issue unrecorded receipts."""

    code = "store_unavailable"
    status = 503
    headers: ClassVar[dict[str, str]] = {"Retry-After": "1"}


class ChainContention(ServiceError):
    """The project's tip kept moving under us for every allowed retry."""

    code = "chain_contention"
    status = 503
    headers: ClassVar[dict[str, str]] = {"Retry-After": "1"}


class LogUnavailable(ServiceError):
    """The service runs without a transparency log (no ``LOG_SIGNING_KEY``)."""

    code = "log_unavailable"
    status = 503


class ProofPending(ServiceError):
    """No published checkpoint covers the receipt yet (the integrator adds it within seconds)."""

    code = "log_pending"
    status = 409
    headers: ClassVar[dict[str, str]] = {"Retry-After": "1"}


class NotInLog(NotFound):
    """The receipt exists but is not in this service's log: it was issued without a log, or
    for another log (another origin or key on the same Redis), and is never queued again
    (docs/log.md, "What is in Redis")."""

    code = "not_in_log"


class LogBacklog(ServiceError):
    """More entries wait for the transparency log than ``LOG_MAX_PENDING``: a create is
    refused before it changes anything (no quota used) until the integrator catches up."""

    code = "log_backlog"
    status = 503
    headers: ClassVar[dict[str, str]] = {"Retry-After": "5"}


class ClaimUnknown(ServiceError):
    """No payment webhook has been seen for this checkout session (yet)."""

    code = "claim_pending"
    status = 404


class ClaimPending(ServiceError):
    """The webhook arrived but the background job has not indexed the session yet."""

    code = "claim_pending"
    status = 409


class AlreadyClaimed(ServiceError):
    code = "already_claimed"
    status = 409


class ClaimExpired(ServiceError):
    code = "claim_expired"
    status = 410


class ClaimNotReady(ServiceError):
    """Paid claims cannot work here: no payment webhook secret is configured."""

    code = "claim_not_ready"
    status = 503


class NotConfigured(ServiceError):
    """A feature's provider settings are missing (free claims without a human-check secret)."""

    code = "not_configured"
    status = 503


def _codes(error: type[ServiceError]) -> list[str]:
    return [error.code, *(code for sub in error.__subclasses__() for code in _codes(sub))]


ERROR_CODES: tuple[str, ...] = tuple(
    dict.fromkeys(code for sub in ServiceError.__subclasses__() for code in _codes(sub))
)
"""Every public error code, in the order of the classes above: the one list the API document
(``web.openapi``), the error schema and the docs' table are made from."""


def _classes(error: type[ServiceError]) -> list[type[ServiceError]]:
    return [error, *(cls for sub in error.__subclasses__() for cls in _classes(sub))]


def from_reply(status: int, code: str, message: str, details: Mapping[str, JSONOut] | None = None) -> ServiceError:
    """The error a reply of the service stands for: the class with its code and status
    (``claim_pending`` is 404 ``ClaimUnknown`` or 409 ``ClaimPending``), else the first with
    its code, carrying the reply's status, else a ``ServiceError`` with both of the reply's."""
    classes = [cls for cls in _classes(ServiceError) if cls.code == code]
    exact = [cls for cls in classes if cls.status == status]
    if exact:
        return exact[0](message, details)
    if classes:
        return classes[0](message, details, status=status)
    return ServiceError(message, details, code=code, status=status)


def error_kind(error: BaseException) -> str:
    """The public class name of an error, as ``--json`` reports it (``error.kind``): the
    nearest class of this module or ``execution_proof.Error`` that it is (an HTTP failure of
    the client is ``Unreachable``); else its own class name."""
    for cls in type(error).__mro__:
        if cls.__module__ in (__name__, Error.__module__):
            return cls.__name__
    return type(error).__name__
