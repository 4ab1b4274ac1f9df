"""moto's S3 server on a loopback port, one request at a time: ``python tests/moto_server.py PORT``.

The same application ``python -m moto.server`` runs (moto's WSGI dispatcher under werkzeug,
threaded), with one lock around each request. moto checks a conditional PUT's precondition
and then stores the object as two steps with no lock between them (moto/s3/responses.py,
``put_object``): two racing writers can both pass the check (docs/s3.md shows it happen).
S3 decides a conditional write atomically; with the lock, so does this server, and the
tests that race conditional writes test our client against a store that keeps that promise
instead of counting on moto's timing. Everything else (status codes, ETags, listings) is
moto's own.

Stops on SIGTERM or SIGINT. Environment as for moto (``INITIAL_NO_AUTH_ACTION_COUNT=0``:
check every request's credentials).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple


def main(port: int) -> None:
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def one_at_a_time(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            return list(app(environ, start_response))  # the whole answer, inside the lock

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple("127.0.0.1", port, one_at_a_time, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(int(sys.argv[1]))
