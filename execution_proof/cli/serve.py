"""``serve``: the HTTP service, on the address ``--host``/``--port`` names (``--port 0``: a free one).

The listening socket is bound here, before any Sanic worker starts, so the log line
``listening on http://HOST:PORT`` names the real address. Sanic is imported only when the
verb runs.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile

from execution_proof.runtime.settings import (
    ConfigError,
    Settings,
    load_settings,
    require_log_store,
    require_receipt_root,
)

LISTEN_BACKLOG = 100
"""Sanic's own default backlog for the socket it would have bound."""
serve_log = logging.getLogger("eps.serve")
"""The address ``serve`` listens on (a log line: with LOG_FORMAT=json it is JSON like the rest)."""


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve_parser = verbs.add_parser("serve", help="run the HTTP service (the default)")
    serve_parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve_parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve_parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_WORKERS", "1")))
    serve_parser.set_defaults(run=lambda args: serve(args))  # looked up when it runs (tests replace it)


def serve(args: argparse.Namespace) -> int:
    """The ``serve`` verb (the default): the HTTP service until SIGTERM or SIGINT."""
    settings = load_settings()
    require_log_store(settings)
    require_receipt_root(settings)
    if settings.receipt_root is not None:
        check_root(settings.receipt_root)
    own_metrics_dir = None
    if settings.metrics_exposed and not settings.embedded and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Sanic's workers each count in files here and a scrape sums them. Set before
        # prometheus_client is imported anywhere: it picks its value class at import, and the
        # spawned workers inherit this environment.
        own_metrics_dir = tempfile.mkdtemp(prefix="eps-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = own_metrics_dir
    listener = None
    try:
        if settings.metrics_port is not None:
            from execution_proof.runtime.metrics import start_metrics_listener

            # The one metrics listener of the service: this (main or only) process, never a worker.
            listener = start_metrics_listener(settings.metrics_host, settings.metrics_port)
        return _run_server(args, settings)
    finally:
        # The server has stopped; a repeated SIGTERM must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if listener is not None:
            listener.stop()
        if own_metrics_dir is not None:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)


def check_root(uri: str) -> None:
    """The receipt root answers before any worker starts: ``ConfigError`` (exit 2, one line
    naming the URI without its PIN) when it cannot be opened or read. Each serving process
    opens its own afterwards (a PKCS#11 session is never carried across a fork)."""
    from execution_proof.runtime.signers import open_root
    from execution_proof.transparency.signer import SignerError, redact

    try:
        root = open_root(uri)
        root.public_key()
    except SignerError as exc:
        raise ConfigError(f"RECEIPT_ROOT_KEY: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a token's or plugin's own failure, named in one line
        raise ConfigError(f"RECEIPT_ROOT_KEY {redact(uri)}: {type(exc).__name__}") from None
    close = getattr(root, "close", None)
    if close is not None:
        close()


def listen_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` of a listening address (IPv6 hosts in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def listen(host: str, port: int) -> socket.socket | None:
    """The server's listening socket, bound here so that port 0 means an ephemeral port.

    Sanic reads a port of 0 as "unset" and listens on 8000; handing it a bound socket
    avoids that, and tells us the real address before any worker starts. Returns None
    (after a one-line error) when the address cannot be bound.
    """
    from sanic.server.socket import bind_socket

    try:
        return bind_socket(host, port, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        address = listen_url(host, port).removeprefix("http://")
        if exc.errno == errno.EADDRINUSE:
            print(
                f"error: {address} is already in use; choose another port with --port N or PORT=N (0 picks a free one)",
                file=sys.stderr,
            )
        else:
            print(f"error: cannot listen on {address}: {exc.strerror or exc}", file=sys.stderr)
        return None


def _run_server(args: argparse.Namespace, settings: Settings) -> int:
    from sanic import Sanic
    from sanic.worker.loader import AppLoader

    from execution_proof.web.app import create_app_from_env

    sock = listen(args.host, args.port)
    if sock is None:
        return 2
    url = listen_url(args.host, sock.getsockname()[1])
    if settings.embedded:
        if args.workers != 1:
            print("note: the embedded store lives in one process; serving with 1 worker", file=sys.stderr)
        app = create_app_from_env(url)  # configures logging
        serve_log.info("listening on %s", url)
        app.run(sock=sock, single_process=True, access_log=False, motd=False)
        return 0
    from execution_proof.web import sanic_fixes

    sanic_fixes.install()  # a SIGTERM during start-up must not hang the manager
    loader = AppLoader(factory=create_app_from_env)
    app = loader.load()  # configures logging
    serve_log.info("listening on %s", url)
    app.prepare(sock=sock, workers=args.workers, access_log=False, motd=False)
    Sanic.serve(primary=app, app_loader=loader)
    return 0
