"""Reading a receipt publicly: ``GET /v1/receipts/{id}`` (or a receipt hash within a project).

A read by id leaves together with the address's limit check (one round trip); a refused
request simply drops what was read.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson

from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.encoding import is_hash_str
from execution_proof.receipts.errors import BadRequest, NotFound
from execution_proof.receipts.ids import is_project_id, is_receipt_id
from execution_proof.usecases.limiting import Admission, Caller, Limiter

NOT_FOUND = "receipt not found (unknown id, or past its retention window)"


class Read(NamedTuple):
    """A receipt as stored (its bytes pass to the answer unchanged) and the read's admission."""

    stored: bytes
    admission: Admission[None]


class Reader:
    """Public reads of receipts, by id or by hash."""

    def __init__(self, limiter: Limiter, receipts: ReceiptStore) -> None:
        self.limiter = limiter
        self.receipts = receipts

    async def read(self, caller: Caller, ref: str, project_id: str | None) -> Read:
        """The receipt ``ref`` names: a receipt id, or a receipt hash within ``project_id``
        (``?project_id=``). ``RateLimited`` for the address, then ``BadRequest`` (a hash
        without a project) or ``NotFound``."""
        receipts = self.receipts
        prefetched = receipts.prefetch_receipt_json(ref) if is_receipt_id(ref) else None
        admission: Admission[None] = await self.limiter.admit(caller, "get_receipt")
        if prefetched is not None:
            stored = await receipts.prefetched_receipt_json(prefetched, ref)
            if stored is None:
                raise NotFound(NOT_FOUND)
        else:
            stored = await self.load(ref, project_id)
        return Read(stored, admission)

    async def load(self, ref: str, project_id: str | None) -> bytes:
        """Stored bytes for a receipt id, or for a receipt hash within ``project_id``."""
        receipts = self.receipts
        if is_receipt_id(ref):
            stored = await receipts.get_receipt_json(ref)
        elif is_hash_str(ref):
            if project_id is None or not is_project_id(project_id):
                raise BadRequest(
                    "looking a receipt up by its hash needs the project: add ?project_id=prj_...",
                    {"field": "project_id"},
                )
            # The record must be the id's, and of the project whose index named it (CorruptRecord).
            found = await receipts.find_receipt_by_hash(project_id, ref.lower())
            stored = found[1] if found is not None else None
            if stored is not None and orjson.loads(stored).get("receipt_hash") != ref.lower():
                stored = None  # the index keys a truncated hash: this is another receipt
        else:
            stored = None
        if stored is None:
            raise NotFound(NOT_FOUND)
        return stored
