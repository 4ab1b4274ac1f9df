"""Creating and revoking API keys: shared by the command line and the demo start-up."""

from __future__ import annotations

import time
from typing import Any

from kv.store import KeyRecord, Store
from receipts.apikeys import hash_api_key, new_api_key
from receipts.ids import new_actor_id, new_project_id
from receipts.model import format_created_at

PLANS = ("free", "basic", "pro")


async def create_project_key(
    store: Store, *, project_name: str, plan: str, now_ms: int | None = None
) -> dict[str, Any]:
    """A new project, actor and API key. The raw key is returned once and never stored."""
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}")
    created_at = format_created_at(now_ms if now_ms is not None else int(time.time() * 1000))
    api_key = new_api_key()
    project_id = new_project_id()
    record = KeyRecord(
        key_hash=hash_api_key(api_key),
        project_id=project_id,
        actor_id=new_actor_id(),
        plan=plan,
        revoked=False,
        created_at=created_at,
    )
    await store.create_project(project_id=project_id, name=project_name, created_at=created_at, key=record)
    return {
        "api_key": api_key,
        "project_id": record.project_id,
        "actor_id": record.actor_id,
        "plan": plan,
        "project_name": project_name,
        "key_hash": record.key_hash,
    }
