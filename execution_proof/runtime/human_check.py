"""The human-verification provider's siteverify call (free claims, docs/claims.md). Fails closed.

``POST HUMAN_CHECK_VERIFY_URL`` with the form fields ``secret``, ``response`` (the widget's
token) and ``remoteip``; the JSON answer's boolean ``success`` decides. A timeout, a
connection error, a non-2xx status, a body that is not JSON, or an answer without a boolean
``success`` raises ``HumanCheckUnavailable``: nothing is issued unless the provider said yes.
Neither the secret nor the token is ever logged or put in a message.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import httpx
import orjson

from execution_proof.errors import Error
from execution_proof.runtime.http import ReplyTooLarge, post_bounded

TIMEOUT_S = 5.0
"""Whole-call deadline (connect, send, answer). Tests lower it."""
MAX_REPLY_BYTES = 64 * 1024
"""A siteverify answer is a small JSON object: a longer one is refused unread (fails closed)."""
HEADERS = {"Accept": "application/json"}
_ERROR_CODE = re.compile(r"[a-z0-9-]{1,64}")


class HumanCheckUnavailable(Error):
    """The provider could not give a usable answer; the message is safe to log."""


@dataclass(frozen=True)
class HumanCheckAnswer:
    success: bool
    error_codes: tuple[str, ...] = ()
    """The provider's short reason codes (such as ``timeout-or-duplicate``), filtered."""


async def siteverify(url: str, secret: str, token: str, remote_ip: str | None) -> HumanCheckAnswer:
    """Ask the provider whether ``token`` is a passed challenge. Raises ``HumanCheckUnavailable``."""
    form = {"secret": secret, "response": token}
    if remote_ip:
        form["remoteip"] = remote_ip
    timeout = TIMEOUT_S
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(timeout=timeout, follow_redirects=False) as http:
            response, body = await post_bounded(http, url, MAX_REPLY_BYTES, data=form, headers=HEADERS)
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise HumanCheckUnavailable(f"no answer within {timeout:g} s") from exc
    except httpx.HTTPError as exc:
        raise HumanCheckUnavailable(f"request failed ({type(exc).__name__})") from exc
    except ReplyTooLarge as exc:
        raise HumanCheckUnavailable(f"answered more than {MAX_REPLY_BYTES} bytes") from exc
    if not 200 <= response.status_code < 300:
        raise HumanCheckUnavailable(f"answered HTTP {response.status_code}")
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HumanCheckUnavailable("answered something that is not JSON") from exc
    if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
        raise HumanCheckUnavailable("answered JSON without a boolean 'success'")
    raw_codes = answer.get("error-codes")
    codes = tuple(code for code in (raw_codes if isinstance(raw_codes, list) else []) if isinstance(code, str))
    return HumanCheckAnswer(answer["success"], tuple(c for c in codes if _ERROR_CODE.fullmatch(c))[:5])
