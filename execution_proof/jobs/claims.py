"""The paid claim's background job: index a completed checkout so that it can be claimed.

The webhook handler marks the checkout "seen" and enqueues ``index_checkout`` with the job
id ``index_checkout-<ref>``, where ``ref`` is the checkout's opaque reference
(``kv.keys.checkout_ref``: SHA-256 of the session id, 32 hex digits). The session id itself
reveals the paid key, so it is never a job's id or argument: RQ logs and stores both. The
job pre-assigns the project id (so the claim can run in one hash slot) and writes the
checkout record with its plan and creation time. It is idempotent: a second run finds the
assigned project and the record, and writes nothing.
"""

from __future__ import annotations

import time

from execution_proof.jobs.context import run_with_store
from execution_proof.kv.keys import is_checkout_ref
from execution_proof.kv.store import Store
from execution_proof.kv.store_checkouts import CheckoutStore
from execution_proof.receipts.ids import new_project_id
from execution_proof.receipts.limits import PAID_PLANS

JOB_FUNC = "execution_proof.jobs.claims.index_checkout"


def job_id_for(ref: str) -> str:
    """The deterministic RQ job id of a checkout's indexing (letters, digits, _ and - only)."""
    return f"index_checkout-{ref}"


async def index_checkout_in(
    store: CheckoutStore, ref: str, plan: str, created_unix: int, now_ms: int | None = None
) -> str:
    """Index the checkout ``ref`` in ``store``; returns the project id the claim will create."""
    if not is_checkout_ref(ref):
        raise ValueError("ref must be a checkout reference: 32 lowercase hex digits")
    if plan not in PAID_PLANS:
        raise ValueError(f"plan must be one of {', '.join(PAID_PLANS)}")
    if isinstance(created_unix, bool) or not isinstance(created_unix, int) or created_unix <= 0:
        raise ValueError("created_unix must be a positive whole number of seconds")
    return await store.index_checkout(
        ref=ref,
        candidate_project_id=new_project_id(),
        plan=plan,
        created_ms=created_unix * 1000,
        indexed_at_ms=now_ms if now_ms is not None else int(time.time() * 1000),
    )


def index_checkout(ref: str, plan: str, created_unix: int) -> str:
    """RQ entry point (JSON arguments): index the checkout in the configured store."""

    async def work(store: Store) -> str:
        return await index_checkout_in(store.checkouts, ref, plan, created_unix)

    return run_with_store(work)
