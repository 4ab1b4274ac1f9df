"""Creating and revoking API keys: shared by the command line, the demo start-up and the
claims (``new_key_record`` is the one place a fresh key and its record are made)."""

from __future__ import annotations

import contextlib
import time
from typing import TypedDict

from execution_proof.errors import Error
from execution_proof.kv.records import KeyRecord
from execution_proof.kv.store_keys import KeyStore
from execution_proof.receipts.apikeys import hash_api_key, new_api_key
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.receipts.ids import is_project_id, new_actor_id, new_project_id
from execution_proof.receipts.limits import PLANS
from execution_proof.receipts.model import format_created_at


class ProjectNameTaken(Error):
    """``keys create`` was asked for a name another project already has."""

    def __init__(self, name: str, project_id: str) -> None:
        super().__init__(f"a project named {name!r} already exists ({project_id})")
        self.name = name
        self.project_id = project_id


class UnknownProject(Error):
    """A ``--project`` that names no project (by id or by name); the message says which."""


class ReissuedKey(TypedDict):
    """What ``keys reissue`` prints: the new key (shown once) and the hashes it replaced."""

    api_key: str
    project_id: str
    actor_id: str
    plan: str
    key_hash: str
    revoked_key_hashes: list[str]


class KeyState(TypedDict):
    """What ``keys list`` shows of one key."""

    key_hash: str
    actor_id: str
    plan: str
    created_at: str
    state: str
    suspended_until: str | None


def new_key_record(
    project_id: str,
    plan: str,
    *,
    actor_id: str | None = None,
    now_ms: int | None = None,
    suspended_until: str = "",
) -> tuple[str, KeyRecord]:
    """A fresh API key and its record: (raw key, record). The raw key is for showing once;
    the record holds only its hash. A new actor id unless ``actor_id`` is given; created
    now unless ``now_ms`` (Unix ms) is given. Nothing is written."""
    api_key = new_api_key()
    record = KeyRecord(
        key_hash=hash_api_key(api_key),
        project_id=project_id,
        actor_id=actor_id if actor_id is not None else new_actor_id(),
        plan=plan,
        revoked=False,
        created_at=format_created_at(now_ms if now_ms is not None else int(time.time() * 1000)),
        suspended_until=suspended_until,
    )
    return api_key, record


async def create_project_key(
    keys: KeyStore, *, project_name: str, plan: str, now_ms: int | None = None, unique_name: bool = False
) -> dict[str, str]:
    """A new project, actor and API key (api_key, project_id, actor_id, plan, project_name,
    key_hash). The raw key is returned once and never stored.

    With ``unique_name`` (the operator's ``keys create``) the name is reserved first and
    ``ProjectNameTaken`` is raised, with nothing written, when another project has it; the
    reservation is what ``resolve_project`` finds a project by. Names given by the service
    itself (the demo, free claims) are not reserved.
    """
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}")
    project_id = new_project_id()
    api_key, record = new_key_record(project_id, plan, now_ms=now_ms)
    if unique_name:
        holder = await keys.claim_project_name(project_name, project_id)
        if holder is not None:
            raise ProjectNameTaken(project_name, holder)
    try:
        await keys.create_project(project_id=project_id, name=project_name, created_at=record.created_at, key=record)
    except BaseException:
        if unique_name:
            with contextlib.suppress(StoreUnavailable):
                await keys.release_project_name(project_name, project_id)
        raise
    return {
        "api_key": api_key,
        "project_id": record.project_id,
        "actor_id": record.actor_id,
        "plan": plan,
        "project_name": project_name,
        "key_hash": record.key_hash,
    }


async def resolve_project(keys: KeyStore, ref: str) -> str:
    """The id of the project ``ref`` names: a project id (``prj_…``) or the name it was
    created with by ``keys create``. Names are unique, so a name is never ambiguous.

    Raises ``UnknownProject`` (its message fit for the operator) when no project matches.
    """
    if is_project_id(ref):
        project_id = ref
    elif (found := await keys.find_project_by_name(ref)) is not None:
        project_id = found
    else:
        raise UnknownProject(
            f"no project {ref}"
            if ref.startswith("prj_")
            else f"no project named {ref!r} (a project made before names were recorded is named by its id, prj_…)"
        )
    if await keys.get_project(project_id) is None:
        named = "" if project_id == ref else f" named {ref!r}"
        raise UnknownProject(f"no project {project_id}{named}")
    return project_id


async def reissue_project_key(keys: KeyStore, project_id: str, *, now_ms: int | None = None) -> ReissuedKey | None:
    """Revoke every key of the project and make one new key with the same plan.

    The new key inherits the project's suspension, if any. Returns the new key's JSON
    (shown once), or None when the project does not exist.
    """
    project = await keys.get_project(project_id)
    if project is None:
        return None
    existing = await keys.list_project_keys(project_id)
    plan = existing[-1].plan if existing else "free"
    actor_id = existing[-1].actor_id if existing else new_actor_id()
    for record in existing:
        if not record.revoked:
            await keys.revoke_api_key(record.key_hash)
    api_key, record = new_key_record(
        project_id, plan, actor_id=actor_id, now_ms=now_ms, suspended_until=project.get("suspended_until", "")
    )
    await keys.add_project_key(record)
    return {
        "api_key": api_key,
        "project_id": project_id,
        "actor_id": actor_id,
        "plan": plan,
        "key_hash": record.key_hash,
        "revoked_key_hashes": [r.key_hash for r in existing if not r.revoked],
    }


def key_state(record: KeyRecord, now_ms: int) -> KeyState:
    """What ``keys list`` shows of a key: its hash and states, never the key."""
    return {
        "key_hash": record.key_hash,
        "actor_id": record.actor_id,
        "plan": record.plan,
        "created_at": record.created_at,
        "state": "revoked" if record.revoked else ("suspended" if record.suspended_at(now_ms) else "active"),
        "suspended_until": (
            None
            if not record.suspended_until
            else record.suspended_until
            if record.suspended_until == "forever"
            else format_created_at(int(record.suspended_until))
        ),
    }
