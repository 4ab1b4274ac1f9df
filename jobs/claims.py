"""The paid claim's background job: index a completed checkout so that it can be claimed.

The webhook handler marks the session "seen" and enqueues ``index_checkout`` with the job id
``index_checkout-<session_id>``. The job pre-assigns the project id (so the claim can run in
one hash slot) and writes the session record with its plan and creation time. It is
idempotent: a second run finds the assigned project and the record, and writes nothing.
"""

from __future__ import annotations

import time

from jobs.context import run_with_store
from kv.store import Store
from receipts.ids import new_project_id
from receipts.webhook_signature import PAID_PLANS, is_provider_id

JOB_FUNC = "jobs.claims.index_checkout"


def job_id_for(session_id: str) -> str:
    """The deterministic RQ job id of a session's indexing (letters, digits, _ and - only)."""
    return f"index_checkout-{session_id}"


async def index_checkout_in(
    store: Store, session_id: str, plan: str, created_unix: int, now_ms: int | None = None
) -> str:
    """Index the session in ``store``; returns the project id the claim will create."""
    if not is_provider_id(session_id):
        raise ValueError("session_id must be 1-255 characters of A-Z, a-z, 0-9, _ and -")
    if plan not in PAID_PLANS:
        raise ValueError(f"plan must be one of {', '.join(PAID_PLANS)}")
    if isinstance(created_unix, bool) or not isinstance(created_unix, int) or created_unix <= 0:
        raise ValueError("created_unix must be a positive whole number of seconds")
    return await store.index_checkout(
        session_id=session_id,
        candidate_project_id=new_project_id(),
        plan=plan,
        created_ms=created_unix * 1000,
        indexed_at_ms=now_ms if now_ms is not None else int(time.time() * 1000),
    )


def index_checkout(session_id: str, plan: str, created_unix: int) -> str:
    """RQ entry point (JSON arguments): index the session in the configured store."""

    async def work(store: Store) -> str:
        return await index_checkout_in(store, session_id, plan, created_unix)

    return run_with_store(work)
