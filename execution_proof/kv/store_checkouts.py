"""The store's paid-claim records: webhook events and checkouts (usecases/claiming.py and
jobs/claims.py use them; the design is in docs/claims.md)."""

from __future__ import annotations

from typing import Any

from execution_proof.kv import keys
from execution_proof.kv.link import LuaScript
from execution_proof.kv.records import (
    CheckoutRecord,
    ClaimOutcome,
    KeyRecord,
    RedisClient,
    as_text,
    unavailable_as_503,
)
from execution_proof.kv.store_keys import KeyStore


class CheckoutStore:
    """Paid-claim records (``store.checkouts``): webhook events and checkouts. A claim writes
    its project's first key through ``key_store``, as ``create_project`` does."""

    def __init__(
        self,
        client: RedisClient,
        is_cluster: bool,
        key_store: KeyStore,
        *,
        index_checkout: LuaScript,
        claim_checkout: LuaScript,
    ) -> None:
        self.client = client
        self.is_cluster = is_cluster
        self._key_store = key_store
        self._index_checkout = index_checkout
        self._claim_checkout = claim_checkout

    @unavailable_as_503
    async def record_webhook_event(self, event_id: str, ttl_s: int) -> bool:
        """Mark a payment webhook event id as processed; False when it already was (a repeat)."""
        return bool(await self.client.set(keys.webhook_event_key(event_id), "1", nx=True, ex=ttl_s))

    @unavailable_as_503
    async def forget_webhook_event(self, event_id: str) -> None:
        """Undo ``record_webhook_event`` when the event could not be handed on, so a retry runs."""
        await self.client.delete(keys.webhook_event_key(event_id))

    @unavailable_as_503
    async def mark_checkout_seen(self, ref: str, seen_at_ms: int) -> None:
        """The webhook for a paid checkout arrived (claims answer 409 ``claim_pending`` until indexed).

        ``ref`` is the checkout's reference (``keys.checkout_ref``): no method here takes or
        stores a session id."""
        await self.client.hsetnx(keys.checkout_lookup_key(ref), "seen_at", str(seen_at_ms))

    @unavailable_as_503
    async def index_checkout(
        self, *, ref: str, candidate_project_id: str, plan: str, created_ms: int, indexed_at_ms: int
    ) -> str:
        """Make a paid checkout claimable. Returns the project id assigned to the checkout.

        The first run assigns ``candidate_project_id`` (HSETNX on the single-key lookup);
        every later run finds that one and writes nothing, so the job is idempotent.
        """
        lookup = keys.checkout_lookup_key(ref)
        await self.client.hsetnx(lookup, "project_id", candidate_project_id)
        project_id = as_text(await self.client.hget(lookup, "project_id")) or candidate_project_id
        await self._index_checkout.registered(
            keys=[keys.checkout_session_key(project_id, ref)],
            args=[plan, created_ms, indexed_at_ms],
        )
        return project_id

    @unavailable_as_503
    async def find_checkout(self, ref: str) -> CheckoutRecord | None:
        """What the store knows about a checkout, or None when no webhook was seen."""
        lookup = await self.client.hgetall(keys.checkout_lookup_key(ref))
        if not lookup:
            return None
        project_id = {as_text(k): as_text(v) for k, v in lookup.items()}.get("project_id")
        if not project_id:
            return CheckoutRecord(ref, None, "seen")
        raw = await self.client.hgetall(keys.checkout_session_key(project_id, ref))
        if not raw:
            return CheckoutRecord(ref, project_id, "seen")
        fields = {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}
        return CheckoutRecord(
            ref,
            project_id,
            fields.get("state") or "claimable",
            plan=fields.get("plan") or "",
            created_ms=int(fields.get("created_ms") or 0),
        )

    @unavailable_as_503
    async def claim_checkout(
        self, *, ref: str, project_name: str, key: KeyRecord, now_ms: int, window_ms: int
    ) -> ClaimOutcome:
        """Create the checkout's project with ``key`` and mark the checkout claimed, atomically.

        The key record lives in its own slot, so it is written first: until the script
        creates the project it points at nothing, and nobody has seen the key. If the script
        refuses (a concurrent claim won, the window passed), the record is deleted again.
        """
        await self._key_store.write_key_record(key)
        code: Any = await self._claim_checkout.registered(
            keys=[
                keys.checkout_session_key(key.project_id, ref),
                keys.project_key(key.project_id),
                keys.project_api_keys_key(key.project_id),
            ],
            args=[now_ms, window_ms, project_name, key.created_at, key.key_hash, key.actor_id, key.project_id],
        )
        outcome = ClaimOutcome(int(code))
        if outcome is not ClaimOutcome.CLAIMED:
            await self.client.delete(keys.api_key_key(key.key_hash))
        return outcome
