"""The client's HTTP (client/http.py, client/tls.py) against real loopback servers: keep-alive,
redirects, the reply ceiling, which failures say trying again may help (``HttpUnreachable``), and
an ``https://`` URL of a plain-HTTP port, which fails at once saying so."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from execution_proof.client import tls
from execution_proof.client.http import HttpClient, HttpError, HttpUnreachable, OfflineClient, OfflineRefused
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
    with HttpClient() as client:
        replies = [client.get(f"{base}/n{n}", params={"a": "b c"}) for n in range(5)]
    assert [reply.json()["path"] for reply in replies] == [f"/n{n}?a=b+c" for n in range(5)]
    assert len(set(_Handler.ports)) == 1, _Handler.ports


def test_a_redirect_is_followed_and_a_loop_is_an_error_not_worth_retrying(base: str) -> None:
    with HttpClient() as client:
        moved = client.get(f"{base}/moved")
        assert moved.status == 200 and moved.url == f"{base}/hello"
        with pytest.raises(HttpError, match="redirects") as loop:
            client.get(f"{base}/loop")
    assert not isinstance(loop.value, HttpUnreachable)


def test_a_reply_over_the_ceiling_is_refused_and_not_worth_retrying(base: str) -> None:
    with HttpClient(max_bytes=1024) as client, pytest.raises(HttpError, match="more than 1024") as big:
        client.get(f"{base}/big")
    assert not isinstance(big.value, HttpUnreachable)


def test_a_refused_connection_is_unreachable() -> None:
    with HttpClient(timeout=5) as client, pytest.raises(HttpUnreachable, match="cannot reach"):
        client.get(f"http://127.0.0.1:{free_port()}/")


@pytest.mark.parametrize("url", ["ftp://example.org/x", "http:///nohost", "http://127.0.0.1:99999/"])
def test_a_url_that_is_not_http_is_an_error_before_any_connection(url: str) -> None:
    with HttpClient() as client, pytest.raises(HttpError) as bad:
        client.get(url)
    assert not isinstance(bad.value, HttpUnreachable)


def test_an_offline_client_refuses_every_request(base: str) -> None:
    with OfflineClient("a bundle is verified offline") as client, pytest.raises(OfflineRefused, match="offline"):
        client.get(f"{base}/x")
    assert _Handler.ports == []


# --- https to a port that speaks plain HTTP, and a slow TLS server ----------------------------------


class _RawServer:
    """A loopback listener that hands each connection to ``handle`` on a thread of its own."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handle = handle
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            self.handle(conn)

    def close(self) -> None:
        self.sock.close()


def _answer_after_the_headers(conn: socket.socket) -> None:
    """A plain-HTTP server as the service's is: it reads until the blank line that ends a
    request's headers (a TLS hello has none: it waits, silent), then answers."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = conn.recv(4096)
        if not chunk:
            return
        received += chunk
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def test_https_to_a_plain_http_port_fails_at_once_saying_so() -> None:
    """Without the probe both sides wait, silent, until the client's timeout (30 s here)."""
    server = _RawServer(_answer_after_the_headers)
    started = time.monotonic()
    try:
        with HttpClient(timeout=30) as client, pytest.raises(HttpUnreachable) as failed:
            client.get(f"https://127.0.0.1:{server.port}/v1/log")
    finally:
        server.close()
    elapsed = time.monotonic() - started
    assert "TLS handshake failed" in str(failed.value) and "answers plain HTTP" in str(failed.value)
    assert "http://" in str(failed.value)
    assert elapsed < tls.PROBE_AFTER_S + tls.PROBE_TIMEOUT_S + 2, f"{elapsed:.1f} s"


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_a_slow_tls_server_is_only_slower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handshake waits past PROBE_AFTER_S; the probe finds no plain HTTP (a TLS server
    closes on it); the handshake resumes and the request is answered."""
    monkeypatch.setattr(tls, "PROBE_AFTER_S", 0.2)
    cert_path, key_path = _certificate(tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert_path, key_path)
    probed = threading.Event()
    first = threading.Lock()

    def handle(conn: socket.socket) -> None:
        if not first.acquire(blocking=False):  # the probe: a TLS server reads plain text and hangs up
            conn.recv(4096)
            probed.set()
            return
        if not probed.wait(10):  # the handshake answers only once the client has probed
            return
        with server_tls.wrap_socket(conn, server_side=True) as wrapped:
            received = b""
            while b"\r\n\r\n" not in received:
                received += wrapped.recv(4096)
            wrapped.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    server = _RawServer(handle)
    trusted = ssl.create_default_context(cafile=str(cert_path))
    try:
        with HttpClient(timeout=10, tls=trusted) as client:
            reply = client.get(f"https://127.0.0.1:{server.port}/")
    finally:
        server.close()
    assert probed.is_set() and server.connections == 2
    assert reply.status == 200 and reply.body == b"ok"


def test_an_untrusted_certificate_is_refused_not_worth_retrying(tmp_path: Path) -> None:
    cert_path, key_path = _certificate(tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert_path, key_path)

    def handle(conn: socket.socket) -> None:
        with contextlib.suppress(ssl.SSLError), server_tls.wrap_socket(conn, server_side=True):
            pass

    server = _RawServer(handle)
    try:
        with HttpClient(timeout=10) as client, pytest.raises(HttpError, match="CERTIFICATE_VERIFY_FAILED") as refused:
            client.get(f"https://127.0.0.1:{server.port}/")
    finally:
        server.close()
    assert not isinstance(refused.value, HttpUnreachable)
    assert server.connections == 1, "no probe: the server answered TLS"
