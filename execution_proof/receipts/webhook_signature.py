"""The payment webhook (docs/claims.md), pure: its signature, and the event body.

Header ``Payment-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]``. Each ``v1`` is the
lowercase hex HMAC-SHA256, keyed with a webhook secret, of the bytes ``b"<t>." + raw body``.
A delivery passes when its timestamp is within the tolerance of now (either direction) and
any ``v1`` matches any configured secret (several secrets: rotation). Comparisons are
constant-time. Other schemes in the header (``v0=`` and the like) are ignored.

Nothing here does I/O or reads a clock: the caller passes the current time.

Event body: ``{"id": "evt_…", "type": "checkout.session.completed", "created": <unix>,
"data": {"object": {"id": "cs_…", "payment_status": "paid", "metadata": {"plan": "basic"}}}}``.
Only a completed, paid checkout with a paid plan is acted on; anything else is acknowledged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from execution_proof.errors import Error
from execution_proof.receipts.limits import PAID_PLANS

TOLERANCE_S = 300
MAX_HEADER_LEN = 4096
MAX_SIGNATURES = 16
_HEX64 = re.compile(r"[0-9a-f]{64}")
_UNIX = re.compile(r"[0-9]{1,12}")
_PROVIDER_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
COMPLETED = "checkout.session.completed"


class SignatureError(Error, ValueError):
    """The delivery is not authentic or not fresh; the message says why (never a secret)."""


@dataclass(frozen=True)
class ParsedSignature:
    timestamp: int
    signatures: tuple[str, ...]


def parse_signature_header(header: str | None) -> ParsedSignature:
    """``t`` and every well-formed ``v1`` of the header. Raises ``SignatureError``."""
    if header is None or not header.strip():
        raise SignatureError("missing Payment-Signature header")
    if len(header) > MAX_HEADER_LEN:
        raise SignatureError("Payment-Signature header is too long")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError("Payment-Signature must be comma-separated name=value pairs")
        name, value = name.strip(), value.strip()
        if name == "t":
            if timestamp is not None or not _UNIX.fullmatch(value):
                raise SignatureError("Payment-Signature needs exactly one t=<unix seconds>")
            timestamp = int(value)
        elif name == "v1":
            if not _HEX64.fullmatch(value.lower()):
                raise SignatureError("a v1 signature must be 64 hex characters")
            signatures.append(value.lower())
    if timestamp is None:
        raise SignatureError("Payment-Signature has no t=<unix seconds>")
    if not signatures:
        raise SignatureError("Payment-Signature has no v1 signature")
    if len(signatures) > MAX_SIGNATURES:
        raise SignatureError(f"Payment-Signature carries more than {MAX_SIGNATURES} v1 signatures")
    return ParsedSignature(timestamp, tuple(signatures))


def compute_signature(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``b"<timestamp>." + body`` keyed with ``secret``."""
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_header(secrets: Iterable[str], timestamp: int, body: bytes) -> str:
    """The header a sender builds: one ``v1`` per secret (as during a rotation)."""
    return ",".join([f"t={timestamp}", *(f"v1={compute_signature(s, timestamp, body)}" for s in secrets)])


def verify_signature(
    header: str | None, body: bytes, secrets: Iterable[str], now_s: int, tolerance_s: int = TOLERANCE_S
) -> int:
    """Check a delivery; returns its timestamp. Raises ``SignatureError``.

    The raw body bytes are checked, before any JSON parsing: a re-serialised body would not
    match. Every (signature, secret) pair is compared, so timing does not reveal which one
    matched.
    """
    parsed = parse_signature_header(header)
    if parsed.timestamp < now_s - tolerance_s:
        raise SignatureError(f"Payment-Signature timestamp is more than {tolerance_s} s old")
    if parsed.timestamp > now_s + tolerance_s:
        raise SignatureError(f"Payment-Signature timestamp is more than {tolerance_s} s in the future")
    expected = [compute_signature(secret, parsed.timestamp, body) for secret in secrets]
    if not expected:
        raise SignatureError("no webhook secret is configured")
    matched = False
    for candidate in parsed.signatures:
        for good in expected:
            matched |= hmac.compare_digest(candidate, good)
    if not matched:
        raise SignatureError("no v1 signature matches a configured webhook secret")
    return parsed.timestamp


class EventError(Error, ValueError):
    """The (authentic) event body is malformed; the message names the field."""


@dataclass(frozen=True)
class PaidCheckout:
    """A completed, paid checkout: what the indexing job needs."""

    session_id: str
    plan: str
    created_unix: int


@dataclass(frozen=True)
class PaymentEvent:
    event_id: str
    type: str
    checkout: PaidCheckout | None
    """Set only for a completed, paid checkout of a paid plan."""
    ignored: str | None
    """Why the event is acknowledged without action (None when ``checkout`` is set)."""


def is_provider_id(value: object) -> TypeGuard[str]:
    """Event and checkout-session ids: 1-255 of ``A-Z a-z 0-9 _ -`` (they become key names)."""
    return isinstance(value, str) and _PROVIDER_ID.fullmatch(value) is not None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_payment_event(body: bytes) -> PaymentEvent:
    """The event in a verified body. Raises ``EventError`` for a malformed one.

    The checkout's own ``created`` (when present) starts the claim window, else the
    event's ``created``.
    """
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise EventError("event body is not valid JSON") from exc
    if not isinstance(event, dict):
        raise EventError("event body must be a JSON object")
    event_id, event_type = event.get("id"), event.get("type")
    if not is_provider_id(event_id):
        raise EventError("event id must be 1-255 characters of A-Z, a-z, 0-9, _ and -")
    if not isinstance(event_type, str) or not event_type:
        raise EventError("event type must be a non-empty string")
    if event_type != COMPLETED:
        return PaymentEvent(event_id, event_type, None, f"event type {event_type!r} is not acted on")
    data = event.get("data")
    obj: Any = data.get("object") if isinstance(data, Mapping) else None
    if not isinstance(obj, Mapping):
        raise EventError("data.object must be an object")
    session_id = obj.get("id")
    if not is_provider_id(session_id):
        raise EventError("data.object.id must be 1-255 characters of A-Z, a-z, 0-9, _ and -")
    if obj.get("payment_status") != "paid":
        return PaymentEvent(event_id, event_type, None, "the checkout is not paid")
    metadata = obj.get("metadata")
    plan = metadata.get("plan") if isinstance(metadata, Mapping) else None
    if not isinstance(plan, str) or plan not in PAID_PLANS:
        return PaymentEvent(event_id, event_type, None, "the checkout names no paid plan (metadata.plan)")
    created = _whole(obj.get("created")) or _whole(event.get("created"))
    if created is None:
        raise EventError("the event needs a positive whole created time (Unix seconds)")
    return PaymentEvent(event_id, event_type, PaidCheckout(session_id, plan, created), None)
