"""Offline bundles: one receipt, the earlier receipts of its chain and the keys that signed
them, in one public JSON document that verifies without the service (docs/bundles.md); from
version 2, the receipt's in-toto attestation envelope too (``attestation``, rendered as
usecases/attesting.py renders it, from the receipt and the signature its record keeps).

``GET /v1/receipts/{receipt_id}/bundle[?depth=N]`` is public like the read (per-IP
``get_receipt`` limit). Stored receipt bytes are passed on unchanged, so every receipt in the
bundle is byte-for-byte what a read returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.attestation import Attestation
from execution_proof.receipts.errors import BadRequest, CorruptRecord, NotFound
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.model import format_created_at
from execution_proof.receipts.shapes import ReceiptObject
from execution_proof.receipts.signing import KeyRing
from execution_proof.receipts.verifier import BUNDLE_FORMAT, BUNDLE_VERSION
from execution_proof.usecases.limiting import Admission, Caller, Limiter
from execution_proof.usecases.log_reading import LogService
from execution_proof.usecases.reading import NOT_FOUND
from execution_proof.usecases.signing_keys import ReceiptKeys

DEFAULT_DEPTH = 20
MAX_DEPTH = 100


class BundleKeys(TypedDict):
    """A bundle's ``keys`` member: ``GET /v1/public-key``'s shape."""

    keys: list[dict[str, Any]]
    active_kid: str | None


@dataclass(frozen=True, slots=True)
class Bundle:
    """The bundle's members in order, each already JSON (stored receipts unchanged), the
    request's admission and the stored records found unusable on the way."""

    members: list[tuple[str, bytes]]
    admission: Admission[None]
    corrupt: tuple[CorruptRecord, ...]


@dataclass(frozen=True, slots=True)
class Chain:
    """Earlier receipts of a project, newest first: stored bytes, parsed, whether the segment
    reaches the chain's start, and the unusable record that ended it, if any."""

    raw: list[bytes]
    parsed: list[ReceiptObject]
    complete: bool
    corrupt: CorruptRecord | None = None


def parse_depth(value: str | None) -> int:
    """``?depth=``: 0 to ``MAX_DEPTH`` earlier receipts; default ``DEFAULT_DEPTH``."""
    if value is None:
        return DEFAULT_DEPTH
    if not value.isascii() or not value.isdigit() or int(value) > MAX_DEPTH:
        raise BadRequest(f"depth must be a whole number from 0 to {MAX_DEPTH}", {"field": "depth", "max": MAX_DEPTH})
    return int(value)


async def collect_chain(receipts: ReceiptStore, receipt: ReceiptObject, depth: int) -> Chain:
    """Up to ``depth`` earlier receipts of ``receipt``'s project, newest first, following
    ``prev_receipt_hash`` through the project's hash index.

    The segment is complete when it ends at a receipt whose ``prev_receipt_hash`` is null
    (``receipt`` itself, when it starts its chain). A link that is not found (expired,
    deleted, or a branch naming a hash never issued) ends the segment incomplete, as does
    a stored record that cannot be used (``CorruptRecord``, returned to be reported).
    """
    raw: list[bytes] = []
    parsed: list[ReceiptObject] = []
    project_id = receipt["project_id"]
    current = receipt
    while isinstance(prev_hash := current.get("prev_receipt_hash"), str):
        if len(raw) >= depth:
            return Chain(raw, parsed, False)
        try:
            found = await receipts.find_receipt_by_hash(project_id, prev_hash)
        except CorruptRecord as exc:
            return Chain(raw, parsed, False, exc)
        stored = found[1] if found is not None else None
        if stored is None:
            return Chain(raw, parsed, False)
        current = orjson.loads(stored)
        if current.get("receipt_hash") != prev_hash:  # the index keys a truncated hash
            return Chain(raw, parsed, False)
        raw.append(stored)
        parsed.append(current)
    return Chain(raw, parsed, True)


def bundle_keys(keyring: KeyRing, receipts: list[ReceiptObject]) -> BundleKeys:
    """The public keys (``GET /v1/public-key`` entries) of every kid that signed one of
    ``receipts``, in first-use order. A kid the service does not know is left out, so a
    verifier fails closed on it."""
    entries: list[dict[str, Any]] = []
    for receipt in receipts:
        kid = receipt.get("sig_kid")
        key = keyring.keys.get(kid) if isinstance(kid, str) else None
        if key is not None and all(entry["kid"] != kid for entry in entries):
            entries.append(key.to_json())
    return {"keys": entries, "active_kid": keyring.active_kid}


class Bundler:
    """Makes bundles."""

    def __init__(
        self,
        limiter: Limiter,
        receipts: ReceiptStore,
        keys: ReceiptKeys,
        log: LogService | None,
        clock_ms: Callable[[], int],
    ) -> None:
        self.limiter = limiter
        self.receipts = receipts
        self.keys = keys
        self.log = log
        self.clock_ms = clock_ms

    async def bundle(self, caller: Caller, receipt_id: str, depth: str | None, service_url: str) -> Bundle:
        """The bundle of ``receipt_id`` with up to ``depth`` (``?depth=`` as given) earlier
        receipts; ``service_url`` is where it was asked for. ``RateLimited`` for the address,
        then ``BadRequest`` (the depth) or ``NotFound``."""
        admission: Admission[None] = await self.limiter.admit(caller, "get_receipt")
        chain_depth = parse_depth(depth)
        found = await self.receipts.get_attested_receipt(receipt_id) if is_receipt_id(receipt_id) else None
        if found is None:
            raise NotFound(NOT_FOUND)
        stored, kept = found
        receipt: ReceiptObject = orjson.loads(stored)
        chain = await collect_chain(self.receipts, receipt, chain_depth)
        ring = await self.keys.knowing(receipt.get("sig_kid"))
        members = [
            ("format", orjson.dumps(BUNDLE_FORMAT)),
            ("version", orjson.dumps(BUNDLE_VERSION)),
            ("created_at", orjson.dumps(format_created_at(self.clock_ms()))),
            ("service", orjson.dumps(service_url)),
            ("receipt", stored),
            ("keys", orjson.dumps(bundle_keys(ring, [receipt, *chain.parsed]))),
            ("chain", b"[" + b",".join(chain.raw) + b"]"),
            ("chain_complete", orjson.dumps(chain.complete)),
        ]
        if self.log is not None:
            proof, stamps = await self.log.bundle_log(receipt)
            log_member = {"origin": self.log.origin, "log_vkey": self.log.verifier.encode(), "proof": proof}
            members += [("log", orjson.dumps(log_member)), ("timestamps", stamps)]
        if kept is not None:  # the envelope: the same bytes GET /v1/receipts/{id}/attestation answers
            members.append(("attestation", Attestation.of(receipt, kept.log_origin, kept.signature).envelope_json()))
        return Bundle(members, admission, (chain.corrupt,) if chain.corrupt is not None else ())
