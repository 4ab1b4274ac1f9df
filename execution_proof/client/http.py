"""The client library's HTTP (and the monitor's): the standard library's ``http.client``, kept alive per host.

The base install (the client) has no HTTP library of its own: httpx and what it brings would
double the install and add ~0.1 s to every command's start (README "Install"). What a
client needs is small: GET and POST, JSON bodies, keep-alive for the many small reads of
a chain walk or a monitor's tiles, a few redirects for a log served from a CDN, a timeout,
and a ceiling on what a reply may cost. TLS is verified against the system's certificate
store (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` point elsewhere, as for OpenSSL); ``ssl`` is
imported for the first https request only (client/tls.py, whose handshake says at once when an
``https://`` URL names a plain-HTTP port instead of waiting out the timeout).

An ``HttpClient`` is used by one thread at a time (the monitor gives each of its workers one).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin, urlsplit

import orjson

from execution_proof.receipts import errors

if TYPE_CHECKING:
    import http.client
    import ssl

    from execution_proof.receipts.shapes import JSONValue

DEFAULT_TIMEOUT_S = 10.0
MAX_REPLY_BYTES = 64 << 20
"""Ceiling of one reply's body (a bundle with a long chain is a few MB; a tile is 8 KiB)."""
MAX_REDIRECTS = 5
USER_AGENT = "execution-proof-client"


class HttpError(errors.Unreachable):
    """The request got no usable reply (``execution_proof.Unreachable``): the host is
    unreachable, it timed out, TLS failed, the URL is not http(s), or the reply was larger
    than the ceiling."""


class HttpUnreachable(HttpError):
    """No reply came: the connection was refused, reset or timed out, or TLS failed for a
    reason other than the server's certificate (an ``https://`` URL of a plain-HTTP port says
    so). Trying again later may succeed (an untrusted certificate, a redirect loop or a reply
    over the ceiling will not)."""


class OfflineRefused(HttpError):
    """An offline client was asked to make a request (the caller promised no network)."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    """Header names in lower case (a repeated header: its last value)."""
    body: bytes
    url: str
    """The URL that answered (after redirects)."""
    method: str = "GET"

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> JSONValue:
        """The body as JSON; ``orjson.JSONDecodeError`` (a ``ValueError``) if it is not."""
        document: JSONValue = orjson.loads(self.body)
        return document


class HttpClient:
    """GET/POST over kept-alive connections, one per (scheme, host, port)."""

    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_REPLY_BYTES, tls: ssl.SSLContext | None = None
    ) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self._tls = tls
        """The TLS context of https connections (shared by clients that pass one); made on the
        first https connection when none is given."""

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def get(self, url: str, params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> Reply:
        if params:
            url += ("&" if urlsplit(url).query else "?") + urlencode(params)
        for _ in range(MAX_REDIRECTS + 1):
            reply = self.request("GET", url, headers=headers)
            location = reply.headers.get("location")
            if reply.status not in (301, 302, 303, 307, 308) or not location:
                return reply
            url = urljoin(url, location)
        raise HttpError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def post(self, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> Reply:
        return self.request("POST", url, body=body, headers=headers)

    def request(
        self, method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> Reply:
        import http.client  # here: importing the library (HttpClient made, no request yet) does not load it

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"not an http(s) URL: {url!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise HttpError(f"{url}: {exc}") from exc
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **(headers or {})}
        key = (parts.scheme, parts.hostname, port)
        # A kept-alive connection the server has closed fails on first use: one fresh retry
        # (GET is idempotent; a POST of this client is a create with an idempotency key or a
        # request that is safe to repeat).
        for attempt in (0, 1):
            connection = self._connection(key)
            try:
                connection.request(method, target, body=body, headers=sent)
                response = connection.getresponse()
                data = self._read(response, url)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop(key)
                if attempt == 0:
                    continue
                raise HttpUnreachable(f"cannot reach {url}: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop(key)
                failure = HttpError if _certificate_refused(exc) else HttpUnreachable
                raise failure(f"cannot reach {url}: {_reason(exc)}") from exc
            if response.will_close:
                self._drop(key)
            names = {name.lower(): value for name, value in response.getheaders()}
            return Reply(response.status, names, data, url, method)
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, response: http.client.HTTPResponse, url: str) -> bytes:
        declared = response.getheader("content-length", "").strip()
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise HttpError(f"{url}: reply of {declared} bytes, more than {self.max_bytes}")
        data = response.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise HttpError(f"{url}: reply of more than {self.max_bytes} bytes")
        if not response.isclosed():
            response.read()  # the rest is empty; this lets the connection be reused
        return data

    def _connection(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        import http.client

        connection = self._connections.get(key)
        if connection is None:
            scheme, host, port = key
            if scheme == "https":
                import ssl  # here: a plain-http client never loads it

                from execution_proof.client import tls

                if self._tls is None:
                    self._tls = ssl.create_default_context()
                connection = tls.HTTPSConnection(host, port, timeout=self.timeout, context=self._tls)
            else:
                connection = http.client.HTTPConnection(host, port, timeout=self.timeout)
            self._connections[key] = connection
        return connection

    def _drop(self, key: tuple[str, str, int]) -> None:
        connection = self._connections.pop(key, None)
        if connection is not None:
            connection.close()


class OfflineClient(HttpClient):
    """A client that refuses every request: for checks that promised to need no network."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    def request(
        self, method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> Reply:
        raise OfflineRefused(f"{self.why}; refusing to fetch {url}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    tls: Any = sys.modules.get("ssl")  # an SSLError means ssl was loaded
    if tls is not None and isinstance(exc, tls.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, socket.gaierror):
        return f"name not resolved ({exc.strerror})"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _certificate_refused(exc: BaseException) -> bool:
    """The server's certificate is not trusted, or not for this host (``ssl`` is loaded:
    only an https connection raises this)."""
    ssl_module = sys.modules.get("ssl")
    return ssl_module is not None and isinstance(exc, ssl_module.SSLCertVerificationError)
