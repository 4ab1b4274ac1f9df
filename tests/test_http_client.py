"""The client's HTTP (cli/http_client.py) against a real loopback server: keep-alive, redirects,
the reply ceiling, and which failures say trying again may help (``Unreachable``)."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from execution_proof.client.http import Client, HttpError, OfflineClient, OfflineRefused, Unreachable
from tests.conftest import free_port
from tests.servers import serving


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ports: list[int] = []  # noqa: RUF012 - shared with the test: each request's client port

    def do_GET(self) -> None:
        _Handler.ports.append(self.client_address[1])
        if self.path == "/loop":
            self._answer(302, b"", {"Location": "/loop"})
        elif self.path == "/moved":
            self._answer(301, b"", {"Location": "/hello"})
        elif self.path == "/big":
            self._answer(200, b"x" * 2048)
        else:
            self._answer(200, b'{"path": "' + self.path.encode() + b'"}', {"Content-Type": "application/json"})

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    _Handler.ports.clear()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _Handler)) as url:
        yield url


def test_requests_to_one_host_share_one_kept_alive_connection(base: str) -> None:
    with Client() as client:
        replies = [client.get(f"{base}/n{n}", params={"a": "b c"}) for n in range(5)]
    assert [reply.json()["path"] for reply in replies] == [f"/n{n}?a=b+c" for n in range(5)]
    assert len(set(_Handler.ports)) == 1, _Handler.ports


def test_a_redirect_is_followed_and_a_loop_is_an_error_not_worth_retrying(base: str) -> None:
    with Client() as client:
        moved = client.get(f"{base}/moved")
        assert moved.status == 200 and moved.url == f"{base}/hello"
        with pytest.raises(HttpError, match="redirects") as loop:
            client.get(f"{base}/loop")
    assert not isinstance(loop.value, Unreachable)


def test_a_reply_over_the_ceiling_is_refused_and_not_worth_retrying(base: str) -> None:
    with Client(max_bytes=1024) as client, pytest.raises(HttpError, match="more than 1024") as big:
        client.get(f"{base}/big")
    assert not isinstance(big.value, Unreachable)


def test_a_refused_connection_is_unreachable() -> None:
    with Client(timeout=5) as client, pytest.raises(Unreachable, match="cannot reach"):
        client.get(f"http://127.0.0.1:{free_port()}/")


@pytest.mark.parametrize("url", ["ftp://example.org/x", "http:///nohost", "http://127.0.0.1:99999/"])
def test_a_url_that_is_not_http_is_an_error_before_any_connection(url: str) -> None:
    with Client() as client, pytest.raises(HttpError) as bad:
        client.get(url)
    assert not isinstance(bad.value, Unreachable)


def test_an_offline_client_refuses_every_request(base: str) -> None:
    with OfflineClient("a bundle is verified offline") as client, pytest.raises(OfflineRefused, match="offline"):
        client.get(f"{base}/x")
    assert _Handler.ports == []
