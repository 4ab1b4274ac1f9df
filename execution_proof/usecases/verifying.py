"""Verifying a stored receipt for its project: ``POST /v1/verify`` below the web layer.

Two round trips: the receipt is read in the same one as the key lookup and the address's
limit check (a refused request drops it); the key's limit and the previous receipt (found by
its hash and read in one script: kv/lua/find_receipt.lua) share the next.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, NamedTuple

import orjson

from execution_proof.kv.records import IndexLookup, KeyRecord
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.errors import CorruptRecord, Forbidden, NotFound, ServiceError
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.model import VerifyRequest, parse_verify_request
from execution_proof.receipts.shapes import JSONObject
from execution_proof.receipts.verifier import VerifyResult, unreadable_receipt_result, verify_receipt
from execution_proof.usecases.bodies import json_object
from execution_proof.usecases.limiting import Admission, Caller, Limiter, naming
from execution_proof.usecases.reading import NOT_FOUND
from execution_proof.usecases.signing_keys import ReceiptKeys


class Verified(NamedTuple):
    """The verification result (docs/api.md), the request's admission, and the stored records
    found unusable on the way (for the operator: reported, never shown)."""

    result: VerifyResult
    admission: Admission[Any]
    corrupt: tuple[CorruptRecord, ...] = ()


class _Found(NamedTuple):
    receipt: JSONObject | None
    unreadable: CorruptRecord | None
    prev_sent: IndexLookup | None


class ReceiptVerifier:
    """Checks a project's stored receipt against the hashes its caller gives."""

    def __init__(self, limiter: Limiter, receipts: ReceiptStore, keys: ReceiptKeys) -> None:
        self.limiter = limiter
        self.receipts = receipts
        self.keys = keys

    async def verify(self, caller: Caller, content_type: str | None, body: bytes) -> Verified:
        """Verify the receipt the body names. Raises, in this order: ``Unauthorized``,
        ``RateLimited`` or ``Forbidden`` for the key and the address; ``UnsupportedMediaType``
        or ``BadRequest`` for the body (not counted); ``RateLimited`` for the key; then
        ``NotFound``, or ``Forbidden`` for another project's receipt. A stored record that
        cannot be used verifies as failed (``corrupt`` names it)."""
        receipts = self.receipts
        req: VerifyRequest | None = None
        body_error: ServiceError | None = None
        try:
            req = parse_verify_request(json_object(content_type, body))
        except ServiceError as exc:
            body_error = exc
        prefetched: Awaitable[Any] | None = None
        if req is not None and is_receipt_id(req.receipt_id):
            prefetched = receipts.prefetch_receipt_json(req.receipt_id)

        async def checks(key: KeyRecord) -> _Found:
            assert req is not None
            unreadable: CorruptRecord | None = None
            try:
                stored = (
                    await receipts.prefetched_receipt_json(prefetched, req.receipt_id)
                    if prefetched is not None
                    else None
                )
            except CorruptRecord as exc:  # answered after the key's limit, as a failed verification
                stored, unreadable = None, exc
            receipt: JSONObject | None = orjson.loads(stored) if stored is not None else None
            prev_hash = receipt.get("prev_receipt_hash") if receipt is not None else None
            prev_sent = (
                receipts.prefetch_receipt_by_hash(key.project_id, prev_hash)
                if isinstance(prev_hash, str) and receipt is not None and receipt.get("project_id") == key.project_id
                else None
            )
            return _Found(receipt, unreadable, prev_sent)

        admission = await self.limiter.admit(
            caller, "authenticated", key=True, count=body_error is None, per_key=True, checks=checks
        )
        key = admission.key
        assert key is not None
        if body_error is not None:
            raise naming(body_error, key)
        found = admission.checked
        assert req is not None
        assert found is not None
        if found.unreadable is not None:
            return Verified(unreadable_receipt_result(req.receipt_id), admission, (found.unreadable,))
        receipt = found.receipt
        if receipt is None:
            raise naming(NotFound(NOT_FOUND), key)
        if receipt.get("project_id") != key.project_id:
            raise naming(Forbidden("this receipt belongs to another project"), key)
        prev, corrupt = await self._find_prev(receipt, found.prev_sent)
        result = verify_receipt(
            receipt,
            await self.keys.knowing(receipt.get("sig_kid")),
            input_hash=req.input_hash,
            output_hash=req.output_hash,
            prev_receipt=prev,
        )
        return Verified(result, admission, corrupt)

    async def _find_prev(
        self, receipt: JSONObject, prev_sent: IndexLookup | None
    ) -> tuple[JSONObject | None, tuple[CorruptRecord, ...]]:
        """The previous receipt the stored one links to, as stored (the verifier checks both),
        and the unusable record found instead, if any (then the previous one is not found:
        the chain link fails)."""
        receipts = self.receipts
        prev_hash = receipt.get("prev_receipt_hash")
        project_id = receipt.get("project_id")
        if not isinstance(prev_hash, str) or not isinstance(project_id, str):
            return None, ()
        try:
            found = (
                await receipts.prefetched_receipt_by_hash(prev_sent, project_id)
                if prev_sent is not None
                else await receipts.find_receipt_by_hash(project_id, prev_hash)
            )
        except CorruptRecord as exc:
            return None, (exc,)
        prev_json = found[1] if found is not None else None
        prev: JSONObject | None = orjson.loads(prev_json) if prev_json is not None else None
        # The index keys a truncated hash: a receipt with another hash is not the previous one.
        return (prev if prev is not None and prev.get("receipt_hash") == prev_hash else None), ()
