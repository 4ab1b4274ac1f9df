"""A plain static file server faster than ``python -m http.server`` (which closes the
connection after every response and parses in pure Python): HTTP/1.1 keep-alive, GET only,
200 with the file or 404, on uvloop when it is installed. One line per request on stdout
(``GET /path status``), so a run can count what was read. For bench.monitor only.

    python -m bench.static_server PORT DIRECTORY
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


class FileProtocol(asyncio.Protocol):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.buffer = b""
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (uvloop's is not an asyncio.Transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            self.answer(head.split(b"\r\n", 1)[0].decode("latin-1"))

    def answer(self, request_line: str) -> None:
        assert self.transport is not None
        method, target, _ = [*request_line.split(" "), "", ""][:3]
        path = (self.root / target.split("?", 1)[0].lstrip("/")).resolve()
        body = None
        if method == "GET" and path.is_relative_to(self.root) and path.is_file():
            body = path.read_bytes()
        status = "200 OK" if body is not None else "404 Not Found"
        payload = body or b""
        self.transport.write(
            f"HTTP/1.1 {status}\r\nContent-Length: {len(payload)}\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n".encode()
            + payload
        )
        sys.stdout.write(f"{method} {target} {status[:3]}\n")


async def serve(port: int, root: Path) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FileProtocol(root), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, root = int(sys.argv[1]), Path(sys.argv[2]).resolve()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(port, root))


if __name__ == "__main__":
    main()
