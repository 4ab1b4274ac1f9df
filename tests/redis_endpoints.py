"""Real redis-servers reached over TCP, TLS or a Unix socket, for the link's tests.

``make_certificates`` makes, with the ``openssl`` command, a test CA, a server certificate
for ``localhost`` and ``127.0.0.1``, a client certificate signed by the same CA, and a second
CA that signed neither. ``Endpoint`` is one redis-server and how to reach it: its URL (a
``rediss://`` URL carries the CA and client certificate as redis-py's ``ssl_*`` query
options), a synchronous admin client, and ``restart``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

import pytest
import redis

from tests.conftest import RedisServer, missing_binary

Kind = Literal["tcp", "tls", "unix"]
KINDS: tuple[Kind, ...] = ("tcp", "tls", "unix")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing the server shows: a client trusting only it must refuse."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _new_key_and_request(name: str, subject: str, cwd: Path) -> None:
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd,
    )  # fmt: skip


def _self_signed_ca(name: str, cwd: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=cwd,
    )  # fmt: skip


def _sign(name: str, extensions: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=cwd,
    )  # fmt: skip


def make_certificates(directory: Path) -> Certificates:
    if shutil.which("openssl") is None:
        missing_binary("openssl", "the TLS tests make their own CA and certificates")
    directory.mkdir(parents=True, exist_ok=True)
    _self_signed_ca("ca", directory)
    _self_signed_ca("other-ca", directory)
    _new_key_and_request("server", "/CN=localhost", directory)
    _sign(
        "server",
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        directory,
    )
    _new_key_and_request("client", "/CN=eps-test-client", directory)
    _sign("client", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n", directory)
    return Certificates(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )


class Endpoint:
    """One redis-server of ``kind``: TLS-only (client certificates required) on its port,
    or Unix-socket only, or plain TCP."""

    def __init__(self, kind: Kind, certificates: Certificates | None = None, server: RedisServer | None = None) -> None:
        self.kind = kind
        self.certificates = certificates
        if server is None:
            binary = shutil.which("redis-server")
            if binary is None:
                missing_binary("redis-server", "the link is proven on a real Redis")
            assert binary is not None
            server = RedisServer(binary)
        self.server = server
        self.unix_path = f"{self.server.dir}/redis.sock"
        if kind == "tls":
            assert certificates is not None
            self.server.extra = [
                "--port", "0", "--tls-port", str(self.server.port),
                "--tls-cert-file", str(certificates.server_cert),
                "--tls-key-file", str(certificates.server_key),
                "--tls-ca-cert-file", str(certificates.ca),
                "--tls-auth-clients", "yes",
            ]  # fmt: skip
        elif kind == "unix":
            self.server.extra = ["--port", "0", "--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        self.server.ready_kwargs = self.client_kwargs()

    def client_kwargs(self, db: int = 0) -> dict[str, Any]:
        """``redis.Redis`` keyword arguments that reach this server."""
        if self.kind == "unix":
            return {"unix_socket_path": self.unix_path, "db": db}
        kwargs: dict[str, Any] = {"host": "127.0.0.1", "port": self.server.port, "db": db}
        if self.kind == "tls":
            assert self.certificates is not None
            kwargs |= {
                "ssl": True,
                "ssl_ca_certs": str(self.certificates.ca),
                "ssl_certfile": str(self.certificates.client_cert),
                "ssl_keyfile": str(self.certificates.client_key),
            }
        return kwargs

    def url(self, *, db: int = 0, userinfo: str = "", **query: str) -> str:
        """A URL for ``redis.asyncio.from_url``; ``query`` adds or replaces options
        (an empty value leaves that option out)."""
        at = f"{userinfo}@" if userinfo else ""
        options: dict[str, str] = {}
        if self.kind == "unix":
            options["db"] = str(db)
            base = f"unix://{at}{self.unix_path}"
        else:
            base = f"{'rediss' if self.kind == 'tls' else 'redis'}://{at}127.0.0.1:{self.server.port}/{db}"
        if self.kind == "tls":
            assert self.certificates is not None
            options |= {
                "ssl_ca_certs": str(self.certificates.ca),
                "ssl_certfile": str(self.certificates.client_cert),
                "ssl_keyfile": str(self.certificates.client_key),
            }
        options = {name: value for name, value in (options | query).items() if value}
        return f"{base}?{urlencode(options)}" if options else base

    def admin(self, db: int = 0) -> redis.Redis:
        return redis.Redis(**self.client_kwargs(db))

    def start(self) -> Endpoint:
        self.server.start()
        return self

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def cleanup(self) -> None:
        self.server.cleanup()


def endpoint_for(request: pytest.FixtureRequest, kind: Kind) -> Endpoint:
    """The session's endpoint of ``kind`` (``tcp`` is the session's ``redis_server``)."""
    if kind == "tcp":
        return Endpoint("tcp", server=request.getfixturevalue("redis_server"))
    fixture: Endpoint = request.getfixturevalue(f"{kind}_endpoint")
    return fixture
