"""``worker`` (background jobs and their schedule, on RQ) and ``expire`` (one retention sweep, now).

Both need ``REDIS_URL``: in embedded mode jobs run inline inside the server process. RQ,
redis and the store are imported only when a verb runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import orjson

from execution_proof.cli.stores import run_on_store
from execution_proof.runtime.logs import json_logging
from execution_proof.runtime.settings import load_settings, require_log_store

if TYPE_CHECKING:
    from execution_proof.jobs.log_config import LogConfig
    from execution_proof.kv.logstore import LogStore
    from execution_proof.kv.store import Store

STOP_INTEGRATOR_S = 10.0
"""How long a stopping worker waits for its log integrator (``IntegratorThread.stop``)."""
EMBEDDED_MESSAGE = (
    "error: the worker needs a real Redis: set REDIS_URL (the store its jobs work on; the queue "
    "is JOBS_REDIS_URL, which defaults to REDIS_URL). Without REDIS_URL the service runs in "
    "embedded mode, where jobs run inline inside the server process: there is no worker and no "
    "schedule to run"
)


QUEUE_ON_CLUSTER_MESSAGE = (
    "the job queue at JOBS_REDIS_URL (or REDIS_URL) is a Redis Cluster node; RQ cannot run on a "
    "cluster: point JOBS_REDIS_URL at a plain, non-cluster Redis (see docs/cluster.md)"
)

EXPIRE_NEEDS_REDIS = (
    "error: expire needs REDIS_URL. Without it the service uses the embedded store, which "
    "lives inside the running server process (and keeps nothing past a restart), so "
    "another process cannot sweep it"
)


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    worker = verbs.add_parser(
        "worker",
        help="run background jobs, their schedule and (with LOG_SIGNING_KEY) the log integrator (needs REDIS_URL)",
    )
    worker.add_argument("--burst", action="store_true", help="run the jobs queued now, then exit (no schedule)")
    worker.set_defaults(run=worker_command)
    expire = verbs.add_parser(
        "expire", help="run the retention sweep once, now; prints a JSON summary (needs REDIS_URL)"
    )
    expire.set_defaults(run=expire_command)


def worker_command(args: argparse.Namespace) -> int:
    """The ``worker`` verb. Exit status 0 after a clean stop, 2 configuration or connection error."""
    import redis

    from execution_proof.jobs.worker import run_worker
    from execution_proof.runtime.logs import configure_logging
    from execution_proof.runtime.metrics import start_metrics_listener

    settings = load_settings()
    if settings.embedded or not settings.jobs_redis_url:
        print(EMBEDDED_MESSAGE, file=sys.stderr)
        return 2
    require_log_store(settings)
    try:
        connection = redis.Redis.from_url(settings.jobs_redis_url)
    except ValueError:
        # The URL may hold a password: say what is wrong without echoing it.
        print("error: JOBS_REDIS_URL (or REDIS_URL) is not a Redis URL", file=sys.stderr)
        return 2
    try:
        connection.ping()
        on_cluster = str(connection.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.RedisError:
        print("error: the job queue at JOBS_REDIS_URL (or REDIS_URL) is unreachable", file=sys.stderr)
        return 2
    finally:
        connection.close()
    if on_cluster:
        print(f"error: {QUEUE_ON_CLUSTER_MESSAGE}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format)
    # Until RQ installs its own handlers (in ``work``), a SIGTERM - an operator's, or the
    # integrator's on a refused store - is remembered instead of killing the process: the work
    # loop then stops at its first turn, and the exit status says why (2 for a refusal).
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    main_thread = threading.get_ident()
    listener = (
        start_metrics_listener(settings.metrics_host, settings.metrics_port)
        if settings.metrics_port is not None
        else None
    )
    integrator = None
    if settings.log_signer is not None and not args.burst:
        from execution_proof.jobs.log_config import log_config
        from execution_proof.jobs.log_thread import IntegratorThread
        from execution_proof.usecases.services import open_services

        config = log_config(settings)

        def open_stores() -> tuple[Store, LogStore]:
            """The integrator's stores, opened on its own event loop, as every process opens them."""
            services = open_services(settings)
            assert services.log_store is not None
            return services.store, services.log_store

        refused = check_log_store(open_stores, config)
        if refused is not None:
            refuse(refused)
            if listener is not None:
                listener.stop()
            return 2
        # A store refused later (it changed under the running worker) stops the whole worker,
        # as a warm shutdown: its exit status says so. The signal goes to the main thread: sent
        # to the process, it may be taken by this thread, and the main thread, blocked in RQ's
        # wait for a job (up to 405 s), would only run the handler once that wait ends.
        integrator = IntegratorThread(
            open_stores, config, on_refused=lambda: signal.pthread_kill(main_thread, signal.SIGTERM)
        )
        integrator.start()
    code = 0
    try:
        run_worker(settings.jobs_redis_url, burst=args.burst, stop_requested=stop_requested)
    except redis.ConnectionError:
        # Lost between the ping above and RQ's first commands (RQ retries only inside its
        # loop): the same one line and exit status as when the ping fails, no traceback.
        print("error: the job queue at JOBS_REDIS_URL (or REDIS_URL) is unreachable", file=sys.stderr)
        code = 2
    finally:
        stopped = integrator.stop(STOP_INTEGRATOR_S) if integrator is not None else True
        if listener is not None:
            listener.stop()
    if integrator is not None and integrator.refused is not None:
        code = 2  # the integrator said why, once, at CRITICAL ("LOG REFUSED: ...")
    if not stopped:
        leave_paused_integrator(code)
    return code


def leave_paused_integrator(code: int) -> NoReturn:
    """The integrator did not stop in time: it is paused in the middle of a batch (a fault
    point's sleep, a process stopped and continued after the stop was asked). The worker
    exits without it, now, as a crash at that step would: the next integrator finishes the
    batch. Left to run into the interpreter's shutdown, its next store call failed with a
    traceback and the worker still exited 0 (bench/log_soak.py found it)."""
    logging.getLogger("eps.log").warning(
        "the log integrator did not stop within %.0f s: it is paused in the middle of a batch; the worker exits "
        "without it, and the next integrator finishes the batch",
        STOP_INTEGRATOR_S,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(code)


def refuse(reason: str) -> None:
    """The worker's refusal of the log store: an error log record (JSON under
    ``LOG_FORMAT=json``), and the same line on stderr otherwise."""
    if json_logging():
        logging.getLogger("eps.log").error("the worker does not integrate: %s", reason)
    else:
        print(f"error: the worker does not integrate: {reason}", file=sys.stderr, flush=True)


def check_log_store(open_stores: Callable[[], tuple[Store, LogStore]], config: LogConfig) -> str | None:
    """Before the worker starts: the log store is this log's (created if it is new and
    Redis knows no such log). The reason it is refused, or None. A store or Redis that cannot
    be reached now is not a refusal: the integrator checks again before its first pass."""
    from execution_proof.jobs.log_config import LogRefused, prepare_log
    from execution_proof.kv.logstore import LogStoreError
    from execution_proof.receipts.errors import StoreUnavailable

    async def check() -> str | None:
        store, log_store = open_stores()
        try:
            await prepare_log(store.log_queue, log_store, config.origin, config.signer, config.failpoints)
        except LogRefused as exc:
            return str(exc)
        except (LogStoreError, StoreUnavailable) as exc:
            print(f"warning: cannot check the log store yet ({exc}); the integrator will retry", file=sys.stderr)
        finally:
            await store.close()
            await log_store.close()
        return None

    return asyncio.run(check())


def expire_command(args: argparse.Namespace) -> int:
    """``python service.py expire``: the sweep, once, now; prints the JSON summary.

    Exit status 0 done, 2 no ``REDIS_URL`` or the store is unreachable.
    """
    from execution_proof.jobs.retention import sweep

    settings = load_settings()

    async def run(store: Store) -> int:
        summary = await sweep(store.retention, settings.retention_days)
        print(orjson.dumps(summary).decode())
        return 0

    return run_on_store(settings, EXPIRE_NEEDS_REDIS, run)
