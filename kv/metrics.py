"""The store's instruments: how long each ``Store`` operation takes and how it fails.

Labels are the ``Store`` method names (a fixed set) and error class names, never a key or
a value. Exposed with the rest of the service's metrics (``web.metrics``,
docs/observability.md).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from kv import tally  # noqa: F401  (its flush-first collector registers before these metrics)

STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

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
