"""The service's HTTP response: Sanic's ``HTTPResponse`` with a cheaper header encoding.

Sanic 25.12 encodes each response header through ``BaseHTTPResponse.processed_headers``:
an f-string and a ``str.translate`` deleting CR, LF and NUL, on the name and on the value,
through a generator. For the 9 to 15 headers this service sends that is 12 to 20 µs per
response, the largest single item of a public read's CPU (bench/PROFILE.md). ``Answer``
overrides that public property with the same result: a header whose name and value are
printable (``str.isprintable`` is false for CR, LF and NUL, so nothing would be deleted)
is encoded as it is, any other is sanitised exactly as Sanic does. docs/upstream-reports.md
has the measurement and the change proposed to Sanic.
"""

from __future__ import annotations

from collections.abc import Iterator

from sanic import HTTPResponse
from sanic.helpers import has_message_body
from sanic.response.types import HEADER_TRANSLATION_TABLE


class Answer(HTTPResponse):
    """``HTTPResponse`` whose headers are encoded without sanitising what needs none."""

    __slots__ = ()

    @property
    def processed_headers(self) -> Iterator[tuple[bytes, bytes]]:
        headers = self.headers
        if has_message_body(self.status):  # type: ignore[no-untyped-call]
            headers.setdefault("content-type", self.content_type)
        encoded = []
        for name, value in headers.items():
            if type(value) is not str:
                value = f"{value}"
            if not (name.isprintable() and value.isprintable()):
                name = name.translate(HEADER_TRANSLATION_TABLE)
                value = value.translate(HEADER_TRANSLATION_TABLE)
            encoded.append((name.encode("ascii"), value.encode(errors="surrogateescape")))
        return iter(encoded)
