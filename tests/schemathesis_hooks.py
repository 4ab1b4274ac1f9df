"""Schemathesis hooks, loaded by ``schemathesis.toml`` (``hooks``) when ``schemathesis run`` is
started from the repository root: the README's command and tests/test_schemathesis.py.

A few request rules cross fields or parameters in ways OpenAPI 3.1 cannot state; the document
states them in prose. Without help, schemathesis would draw "schema-valid" requests that the
service rightly refuses with 400 and report them as positive data rejected. So:

- ``filter_case`` drops *positive* cases whose body breaks one of those rules (negative cases
  are kept: any rejection is right for them). Each rule below is written out here, not
  borrowed from the service's validators, so a validator bug still shows up.
- ``before_call`` completes positive cases whose query parameters depend on each other (the
  examples phase does not run ``filter_case``): a search gets at least one of ``input_hash``
  and ``output_hash`` and no ``cursor`` (only a previous page can make a valid one); a read
  by receipt hash gets the key's ``project_id`` (``EPS_TEST_PROJECT_ID``, else asked once of
  ``GET /v1/usage`` with the run's ``Authorization`` header).
- ``before_call`` signs webhook deliveries with ``PAYMENT_WEBHOOK_SECRET`` when it is set, as
  the payment provider does, so the webhook's body is actually examined instead of every
  request stopping at the signature check. A case whose ``Payment-Signature`` is itself the
  broken part (missing or malformed) is sent unsigned, and must be refused. Without the
  secret (a service without payments, such as the demo) nothing is signed: the service
  answers 503 ``claim_not_ready`` before it reads the signature.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from typing import Any

import requests
import schemathesis
from requests.compat import json as requests_json

from execution_proof.receipts.content_scan import find_forbidden

WEBHOOK_SECRET_ENV = "PAYMENT_WEBHOOK_SECRET"
PROJECT_ID_ENV = "EPS_TEST_PROJECT_ID"
HASH = re.compile(r"sha256:[0-9a-fA-F]{64}")
PROJECT_ID = re.compile(r"prj_[0-7][0-9A-HJKMNP-TV-Z]{25}")
SIGNATURE = re.compile(r"t=[0-9]{1,12}(,v1=[0-9a-fA-F]{64}){1,16}")
BODY_LIMITS = {
    "POST /v1/receipts": 16 * 1024,
    "POST /v1/verify": 8 * 1024,
    "POST /v1/claim": 1024,
    "POST /v1/claim/free": 8 * 1024,
    "POST /v1/webhooks/payment": 16 * 1024,
}
MAX_TAGS = 20
MAX_TAGS_BYTES = 2048
COMPLETED = "checkout.session.completed"


def _is_positive(case: schemathesis.Case) -> bool:
    meta = case.meta
    return meta is None or meta.generation.mode.is_positive


def _wire_json(body: Any) -> bytes:
    """The bytes ``requests`` sends for ``json=body`` (what the webhook signature covers)."""
    text = requests_json.dumps(body, allow_nan=False)
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _create_body_is_acceptable(body: dict[str, Any]) -> bool:
    """The create rules outside the schema: tag count and size after nulls are dropped, and the
    content scan (docs/api.md, "Forbidden content": no e-mail addresses, card numbers, keys... in any string)."""
    raw_tags = body.get("tags")
    tags = {k: v for k, v in raw_tags.items() if v is not None} if isinstance(raw_tags, dict) else {}
    if (
        len(tags) > MAX_TAGS
        or len(requests_json.dumps(tags, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_TAGS_BYTES
    ):
        return False
    texts = [body.get("code_ref"), body.get("run_id"), *tags, *tags.values()]
    return all(find_forbidden(text) is None for text in texts if isinstance(text, str))


def _webhook_event_is_acceptable(event: Any) -> bool:
    """A paid checkout of a paid plan needs a positive whole ``created`` (event or checkout)."""
    if not isinstance(event, dict) or event.get("type") != COMPLETED:
        return True
    checkout = event.get("data", {}).get("object", {})
    metadata = checkout.get("metadata")
    acted_on = (
        checkout.get("payment_status") == "paid"
        and isinstance(metadata, dict)
        and metadata.get("plan") in ("basic", "pro")
    )
    return not acted_on or _positive_int(checkout.get("created")) or _positive_int(event.get("created"))


@schemathesis.hook
def filter_case(context: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    if not _is_positive(case):
        return True
    label = f"{case.method.upper()} {case.path}"
    if label in BODY_LIMITS and case.body is not None and not isinstance(case.body, bytes):
        try:
            if len(_wire_json(case.body)) > BODY_LIMITS[label]:
                return False
        except (TypeError, ValueError):
            return True
    if label == "POST /v1/receipts" and isinstance(case.body, dict):
        return _create_body_is_acceptable(case.body)
    if label == "POST /v1/webhooks/payment":
        return _webhook_event_is_acceptable(case.body)
    return True


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    label = f"{case.method.upper()} {case.path}"
    if label == "POST /v1/webhooks/payment":
        _sign_webhook(case)
    elif _is_positive(case) and label in ("GET /v1/receipts", "GET /v1/receipts/{receipt_id}"):
        _complete_query(case, label, kwargs)


def _complete_query(case: schemathesis.Case, label: str, kwargs: dict[str, Any]) -> None:
    query = dict(case.query or {})
    if label == "GET /v1/receipts":
        if "input_hash" not in query and "output_hash" not in query:
            query["input_hash"] = "sha256:" + "0" * 64
        query.pop("cursor", None)
    else:
        ref = str((case.path_parameters or {}).get("receipt_id", ""))
        if not HASH.fullmatch(ref) or PROJECT_ID.fullmatch(str(query.get("project_id", ""))):
            return
        query["project_id"] = _project_id(str(kwargs.get("url", "")), kwargs.get("headers") or {})
    case.query = query


_PROJECT_IDS: dict[str, str] = {}


def _project_id(url: str, headers: dict[str, Any]) -> str:
    """The project of the run's key: ``EPS_TEST_PROJECT_ID``, else ``GET /v1/usage`` (asked once)."""
    if os.environ.get(PROJECT_ID_ENV):
        return os.environ[PROJECT_ID_ENV]
    authorization = next((str(v) for k, v in headers.items() if k.lower() == "authorization"), "")
    if authorization not in _PROJECT_IDS:
        base = url.split("/v1/receipts/", 1)[0]
        answer = requests.get(base + "/v1/usage", headers={"Authorization": authorization}, timeout=10)
        answer.raise_for_status()
        _PROJECT_IDS[authorization] = str(answer.json()["project_id"])
    return _PROJECT_IDS[authorization]


def _sign_webhook(case: schemathesis.Case) -> None:
    secret = os.environ.get(WEBHOOK_SECRET_ENV)
    headers = case.headers or {}
    given = next((value for name, value in headers.items() if name.lower() == "payment-signature"), None)
    if secret is None or not isinstance(given, str) or not SIGNATURE.fullmatch(given):
        return
    try:
        body = _wire_json(case.body)
    except (TypeError, ValueError):
        return
    timestamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    case.headers = {
        **{name: value for name, value in headers.items() if name.lower() != "payment-signature"},
        "Payment-Signature": f"t={timestamp},v1={digest}",
    }
