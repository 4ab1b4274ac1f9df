"""web/responses.py: ``Answer`` writes the same header bytes as Sanic's ``HTTPResponse``."""

from __future__ import annotations

import pytest
from sanic import HTTPResponse
from sanic.headers import format_http1_response

from execution_proof.web.responses import Answer

VALUES = [
    "public, max-age=60",
    '"ip-get_receipt";q=240;w=60',
    "req_01M8KHFJ5FFFGGZYYX0GB51ZEX",
    "",
    "évidemment ✓ 日本",  # printable beyond ASCII: kept as it is by both
    "a\r\nSet-Cookie: x=1",  # CR and LF are deleted by both
    "nul\x00byte",
    "tab\there",  # a control that is not deleted: not printable, so translated (unchanged)
    "\x7fdel and \x1bescape",
    "\udcff surrogate-escaped byte",
]


def _header_bytes(response: HTTPResponse) -> bytes:
    response.headers["content-length"] = 2
    response.headers["connection"] = "keep-alive"
    return format_http1_response(response.status, response.processed_headers)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("status", [200, 201, 204, 304, 404])
def test_answer_writes_what_sanic_writes(value: str, status: int) -> None:
    headers = {"X-Value": value, "X-Re\r\nName": "name with CR LF", "Location": "/v1/receipts/rcpt_1"}
    expected = _header_bytes(HTTPResponse(b"{}", status=status, headers=headers, content_type="application/json"))
    answered = _header_bytes(Answer(b"{}", status=status, headers=headers, content_type="application/json"))
    assert answered == expected
    assert b"\r\nSet-Cookie" not in answered and b"\x00" not in answered


def test_answer_keeps_a_content_type_set_by_the_handler_and_sets_the_default_otherwise() -> None:
    given = _header_bytes(Answer(b"{}", headers={"content-type": "text/plain"}, content_type="application/json"))
    assert b"content-type: text/plain\r\n" in given
    assert b"application/json" not in given
    default = _header_bytes(Answer(b"{}", content_type="application/json"))
    assert b"content-type: application/json\r\n" in default
