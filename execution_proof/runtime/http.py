"""Reading replies from outside (witnesses, time-stamp authorities, the human-check provider)
with a ceiling: a peer that answers a huge body must cost a failure, not the process's memory.

Every call goes through ``client.stream(...)`` and ``read_bounded``: a ``Content-Length``
above the limit is refused before a byte is read, and the body is read chunk by chunk and
dropped as soon as it passes the limit (``ReplyTooLarge``). Chunks are counted after
content decoding, so a compressed reply is bounded by what it decompresses to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from execution_proof.errors import Error


class ReplyTooLarge(Error):
    """The reply's body is larger than the caller's limit (nothing more of it was read)."""

    def __init__(self, limit: int, seen: int | None = None) -> None:
        said = f"more than {limit} bytes" if seen is None else f"{seen} bytes declared, the limit is {limit}"
        super().__init__(f"reply too large ({said})")
        self.limit = limit


async def read_bounded(response: httpx.Response, limit: int) -> bytes:
    """The body of a streamed ``response``, at most ``limit`` bytes; ``ReplyTooLarge`` past it."""
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise ReplyTooLarge(limit, int(declared))
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > limit:
            raise ReplyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def post_bounded(
    client: httpx.AsyncClient, url: str, limit: int, *, headers: Mapping[str, str] | None = None, **send: Any
) -> tuple[httpx.Response, bytes]:
    """``POST url`` and its reply's body read with ``read_bounded``: (response, body). The
    connection of a reply that is too large is closed, not drained. Asks for an uncompressed
    reply (``Accept-Encoding: identity``, unless the caller says otherwise), so no small
    compressed chunk expands past the limit before it is counted."""
    headers = {"Accept-Encoding": "identity", **(headers or {})}
    async with client.stream("POST", url, headers=headers, **send) as response:
        return response, await read_bounded(response, limit)
