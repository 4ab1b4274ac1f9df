"""Prometheus metrics: what the service counts, and the two ways to read them.

Not public by default (docs/observability.md). ``METRICS_PORT`` opens a separate plain-HTTP
listener for ``GET /metrics`` on ``METRICS_HOST`` (default 127.0.0.1), run by one process:
the Sanic main process, the single embedded process, or the job worker. ``METRICS_TOKEN``
adds ``GET /metrics`` on the main port behind ``Authorization: Bearer <token>``
(``web.http_metrics``); without the token (or with a wrong one) it is the same 404 as any
unknown path.

With several Sanic workers, ``serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at a private
directory before any worker starts; each worker writes its values there and a scrape sums
them (``MultiProcessCollector``).

Labels are fixed sets: Sanic route names (``unmatched`` when no route matched), a closed
list of methods, status codes, plans, limit policies and job names. Never a raw path, an id
or a key. The request hook looks each label set up once and keeps the bound ``inc`` and
``observe`` methods, so a request allocates no metric objects.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER = "other"
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
JOB_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
SCRAPE_TIMEOUT_S = 10
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# A witness next door answers in milliseconds, one abroad in tens to hundreds; the ceiling is
# LOG_WITNESS_TIMEOUT_MS (at most 60 s).
WITNESS_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)

log = logging.getLogger("eps.metrics")
# The *_created series double every counter for nothing a dashboard here uses (and
# multiprocess mode has none): one shape whichever way the service runs.
disable_created_metrics()  # type: ignore[no-untyped-call]

HTTP_REQUESTS = Counter(
    "eps_http_requests",
    "HTTP requests answered, by Sanic route name (unmatched: no route), method and status",
    ["route", "method", "status"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "eps_http_request_duration_seconds",
    "Time from the request's arrival at the app to its response, by route name",
    ["route"],
    buckets=HTTP_BUCKETS,
)
RECEIPTS_ISSUED = Counter(
    "eps_receipts_issued",
    "Successful creates: a new receipt (outcome=new) or an idempotent replay (outcome=replay), by plan",
    ["outcome", "plan"],
)
LIMIT_REFUSALS = Counter(
    "eps_limit_refusals",
    "Requests refused by a limit or quota (429), by kind (key_per_minute, per_ip, failed_auth, quota) and policy",
    ["kind", "policy"],
)
JOBS = Counter(
    "eps_jobs",
    "Background job runs finished by this worker, by job and outcome (success, failure, retry)",
    ["job", "outcome"],
)
JOB_SECONDS = Histogram(
    "eps_job_duration_seconds", "Time of one background job run, by job", ["job"], buckets=JOB_BUCKETS
)
CORRUPT_RECORDS = Counter(
    "eps_corrupt_records",
    "Stored receipt records a read could not use (undecodable, or another receipt's), by route",
    ["route"],
)

LOG_ENTRIES = Counter("eps_log_entries", "Entries the integrator added to the transparency log")
LOG_CHECKPOINTS = Counter("eps_log_checkpoints", "Checkpoints the integrator signed and published")
LOG_BATCH_SECONDS = Histogram(
    "eps_log_batch_duration_seconds",
    "Time from reserving a log batch to finishing it (tiles, checkpoint, queues)",
    buckets=STORE_BUCKETS,
)
LOG_WITNESS_COSIGNED = Counter(
    "eps_log_witness_cosignatures", "Cosignatures a witness returned for our checkpoints, by witness", ["witness"]
)
LOG_WITNESS_SIZE = Gauge(
    "eps_log_witness_size",
    "The tree size each witness last cosigned, by witness",
    ["witness"],
    multiprocess_mode="max",
)
LOG_WITNESS_REQUEST_SECONDS = Histogram(
    "eps_log_witness_request_seconds",
    "Time of one POST /add-checkpoint to a witness, sent to answered (any status or HTTP error), by witness",
    ["witness"],
    buckets=WITNESS_BUCKETS,
)
LOG_WITNESS_FAILURES = Counter(
    "eps_log_witness_failures",
    "Checkpoints a witness did not cosign, by witness and kind (HTTP status, timeout, unreachable, ...)",
    ["witness", "kind"],
)
LOG_WITNESS_SKIPPED = Counter(
    "eps_log_witness_skipped",
    "Checkpoints not sent to a witness, by witness: it failed and its backoff has not passed, or a request "
    "to it from an earlier checkpoint is still open",
    ["witness"],
)
LOG_CHECKPOINT_REPUBLISHED = Counter(
    "eps_log_checkpoint_republished",
    "Checkpoints published again with a cosignature that arrived after their first publication",
)
LOG_TIMESTAMPS = Counter(
    "eps_log_timestamps", "RFC 3161 time-stamps obtained, checked and kept for a checkpoint, by TSA", ["tsa"]
)
LOG_TSA_FAILURES = Counter(
    "eps_log_tsa_failures",
    "Time-stamp requests whose answer was not kept, by TSA and kind (unreachable, http_<status>, refused)",
    ["tsa", "kind"],
)
LOG_STAMPED_SIZE = Gauge(
    "eps_log_stamped_size",
    "The size of the newest checkpoint that has a kept time-stamp",
    multiprocess_mode="max",
)
LOG_HALTED = Gauge(
    "eps_log_halted",
    "1 while the transparency log is halted (a witness showed a fork, or the store was refused; `log resume` "
    "lifts it), else 0",
    multiprocess_mode="livemax",
)
LOG_STALLED = Gauge(
    "eps_log_stalled",
    "1 while entries wait for the transparency log (or its tree is ahead of the published checkpoint) and "
    "nothing was published for LOG_STALL_S, else 0",
    multiprocess_mode="livemax",
)
LOG_FENCED = Counter(
    "eps_log_fenced",
    "Times an integrator found the tree state moved under it (it had paused, or lost its lease) and went back "
    "to standby without writing, by the step where it found out",
    ["step"],
)

STORE_OPERATION_SECONDS = Histogram(
    "eps_store_operation_duration_seconds",
    "Time of one Store operation (one script or a few commands), by Store method",
    ["operation"],
    buckets=STORE_BUCKETS,
)
STORE_ERRORS = Counter(
    "eps_store_errors",
    "Store operations that failed, by Store method and error kind (Redis error class or not_acknowledged)",
    ["operation", "kind"],
)


def count_store_error(operation: str, kind: str) -> None:
    """Count one failed operation (only on the failure path, so ``labels`` is fine here)."""
    STORE_ERRORS.labels(operation, kind).inc()


_request_counters: dict[tuple[str, str, int], Callable[[], None]] = {}
_request_timers: dict[str, Callable[[float], None]] = {}
_receipt_counters: dict[tuple[bool, str], Callable[[], None]] = {}


def observe_request(route: str, method: str, status: int, duration_s: float) -> None:
    """Count one answered request and its duration (label children are cached)."""
    if method not in METHODS:
        method = OTHER
    key = (route, method, status)
    count = _request_counters.get(key)
    if count is None:
        count = _request_counters[key] = HTTP_REQUESTS.labels(route, method, str(status)).inc
    count()
    time_it = _request_timers.get(route)
    if time_it is None:
        time_it = _request_timers[route] = HTTP_REQUEST_SECONDS.labels(route).observe
    time_it(duration_s)


def count_receipt(replayed: bool, plan: str) -> None:
    count = _receipt_counters.get((replayed, plan))
    if count is None:
        outcome = "replay" if replayed else "new"
        count = _receipt_counters[(replayed, plan)] = RECEIPTS_ISSUED.labels(outcome, plan).inc
    count()


def refusal_kind(policy: str) -> str:
    """The kind of limit behind a ``RateLimit-Policy`` name (``key``, ``month``, ``ip-<scope>``)."""
    if policy == "key":
        return "key_per_minute"
    if policy == "month":
        return "quota"
    if policy == "ip-unauthenticated":
        return "failed_auth"
    return "per_ip"


def count_refusal(policy: str) -> None:
    """Count one 429 (refusals are the rare path: ``labels`` is looked up here)."""
    LIMIT_REFUSALS.labels(refusal_kind(policy), policy).inc()


def count_corrupt_record(route: str) -> None:
    """Count one corrupt or misplaced stored record (a rare fault: ``labels`` is looked up here)."""
    CORRUPT_RECORDS.labels(route).inc()


PACKAGE_PREFIX = "execution_proof."


def job_label(job: str) -> str:
    """The ``job`` label of a function's dotted path: the path inside the package
    (``execution_proof.jobs.retention.sweep_expired`` is ``jobs.retention.sweep_expired``);
    anything outside ``execution_proof.jobs.`` is ``other`` (a bounded label set)."""
    inside = job.removeprefix(PACKAGE_PREFIX)
    return inside if job.startswith(PACKAGE_PREFIX) and inside.startswith("jobs.") else OTHER


def count_job(job: str, outcome: str, duration_s: float) -> None:
    name = job_label(job)
    JOBS.labels(name, outcome).inc()
    JOB_SECONDS.labels(name).observe(duration_s)


# --- exposition ---------------------------------------------------------------------------


def metrics_registry() -> CollectorRegistry:
    """The registry to expose: every process's files in multiprocess mode, else this process's."""
    path = os.environ.get(MULTIPROC_ENV)
    if not path:
        return REGISTRY
    registry = CollectorRegistry()
    prometheus_multiprocess.MultiProcessCollector(registry, path)  # type: ignore[no-untyped-call]
    return registry


def render_metrics() -> bytes:
    """The Prometheus text format of every metric (blocking file reads in multiprocess mode)."""
    return generate_latest(metrics_registry())


def release_worker_metrics() -> None:
    """At a worker's exit, in multiprocess mode: drop its live-gauge files (its counters stay
    summed)."""
    if os.environ.get(MULTIPROC_ENV):
        prometheus_multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


class _ScrapeHandler(BaseHTTPRequestHandler):
    timeout = SCRAPE_TIMEOUT_S

    def do_GET(self) -> None:
        if urlsplit(self.path).path != "/metrics":
            self._answer(404, b"not found\n", "text/plain; charset=utf-8")
            return
        try:
            body = render_metrics()
        except Exception:  # a failed scrape is logged and answered 500; the listener keeps serving
            log.exception("metrics scrape failed")
            self._answer(500, b"metrics unavailable\n", "text/plain; charset=utf-8")
            return
        self._answer(200, body, CONTENT_TYPE_LATEST)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not API requests: no log line for each."""


class _MetricsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS lookup); nothing here needs it.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class MetricsListener:
    """``GET /metrics`` on its own port, served from a daemon thread of this process."""

    def __init__(self, host: str, port: int) -> None:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("MetricsServer", (_MetricsHTTPServer,), {"address_family": family})
        self.server: ThreadingHTTPServer = server_class((host, port), _ScrapeHandler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics-listener", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> MetricsListener:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_metrics_listener(host: str, port: int) -> MetricsListener:
    """Bind now (``OSError`` if the port is taken) and serve in the background."""
    return MetricsListener(host, port).start()
