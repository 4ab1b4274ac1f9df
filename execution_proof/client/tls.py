"""The client's https connection (client/http.py loads it for the first https request only): the
standard library's, except that an ``https://`` URL naming a plain-HTTP port fails at once
with a message that says so.

Such a server does not answer the TLS handshake: it reads the client's hello as the start of
an HTTP request and waits for the rest of it (the service's server waits for the blank line
that ends a request's headers, up to its own timeout), while the client waits for the
server's hello: both are silent until the client's timeout. So when no answer to the hello
came within ``PROBE_AFTER_S`` (or the answer was not TLS), the same address is asked, on a
connection of its own, for a plain ``HEAD /``: an answer starting ``HTTP/`` is a plain-HTTP
service, ``NotTls``. Any other outcome lets the handshake go on within the timeout: a slow TLS
server is only slower.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time

from execution_proof.errors import Error

PROBE_AFTER_S = 2.0
"""How long the handshake waits for the server's first answer before the address is asked
whether it speaks plain HTTP (a TLS server answers the hello within one round trip)."""
PROBE_TIMEOUT_S = 2.0


class NotTls(Error, OSError):
    """The address answers plain HTTP to an https request (client/http.py: ``HttpUnreachable``)."""


class HTTPSConnection(http.client.HTTPSConnection):
    """``http.client.HTTPSConnection`` whose handshake tells a plain-HTTP port from a slow one."""

    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._timeout_s = timeout

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP (and a proxy tunnel, unused here)
        deadline = time.monotonic() + self._timeout_s
        tls = self._tls_context.wrap_socket(self.sock, server_hostname=self.host, do_handshake_on_connect=False)
        self.sock = tls
        tls.settimeout(min(self._timeout_s, PROBE_AFTER_S))
        try:
            tls.do_handshake()
        except ssl.SSLCertVerificationError:
            raise
        except (TimeoutError, ssl.SSLError, ConnectionError) as exc:
            if self._speaks_plain_http(deadline):
                raise NotTls(
                    f"TLS handshake failed: {self.host}:{self.port} answers plain HTTP: is the URL an http:// service?"
                ) from exc
            if not isinstance(exc, TimeoutError) or deadline - time.monotonic() <= 0:
                raise
            tls.settimeout(deadline - time.monotonic())
            tls.do_handshake()  # a slow TLS server: the handshake resumes where it waited
        tls.settimeout(self._timeout_s)

    def _speaks_plain_http(self, deadline: float) -> bool:
        wait = min(PROBE_TIMEOUT_S, max(deadline - time.monotonic(), 0.1))
        try:
            with socket.create_connection((self.host, self.port), timeout=wait) as probe:
                probe.sendall(f"HEAD / HTTP/1.0\r\nHost: {self.host}\r\n\r\n".encode("ascii", "replace"))
                answer = b""
                while len(answer) < 5:
                    chunk = probe.recv(5 - len(answer))
                    if not chunk:
                        break
                    answer += chunk
        except OSError:
            return False
        return answer == b"HTTP/"
