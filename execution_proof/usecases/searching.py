"""Search a project's own receipts by input or output hash, or both.

``GET /v1/receipts?input_hash=sha256:...`` (or ``?output_hash=``, or both: the receipts with
both hashes), Bearer API key, newest first, paginated with an opaque cursor. With both, the
input hash's index is paged and each page keeps the receipts whose output hash matches too,
so a page costs what a one-hash page costs (it may hold fewer receipts, even none, while
``next_cursor`` says more follow). Only the key's own project is ever searched: the
index keys carry the project id (``kv.keys.search_index_key``), so another project's
receipts with the same hash are never seen. Counts like ``POST /v1/verify``: the address's
authenticated-request limit and the key's per-minute limit; a refused query counts nothing.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from execution_proof.kv.records import KeyRecord
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.encoding import b64url_decode, b64url_encode, is_hash_str
from execution_proof.receipts.errors import BadRequest, ServiceError
from execution_proof.receipts.ids import is_receipt_id, receipt_slot_tag, slot_tag
from execution_proof.usecases.limiting import Admission, Caller, Limiter, naming

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
SEARCH_FIELDS = ("input_hash", "output_hash")
QUERY_PARAMS = frozenset((*SEARCH_FIELDS, "limit", "cursor"))


@dataclass(frozen=True, slots=True)
class Found:
    """A page: the receipts as stored, newest first, the cursor of the next page (None at the
    end) and the request's admission."""

    receipts: list[bytes]
    next_cursor: str | None
    admission: Admission[Any]


@dataclass(frozen=True, slots=True)
class _Query:
    field: str
    hash_str: str
    also: dict[str, str]
    limit: int
    cursor: str | None


def encode_cursor(receipt_id: str) -> str:
    """Opaque to clients: the last receipt id of the page, base64url-encoded."""
    return b64url_encode(receipt_id.encode("ascii"))


def decode_cursor(cursor: str, project_id: str) -> str:
    """The receipt id a cursor names; 400 unless it is one of this project's ids."""
    try:
        receipt_id = b64url_decode(cursor).decode("ascii")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        receipt_id = ""
    if not is_receipt_id(receipt_id) or receipt_slot_tag(receipt_id) != slot_tag(project_id):
        raise BadRequest("cursor is not valid; pass next_cursor from the previous page unchanged", {"field": "cursor"})
    return receipt_id


def parse_limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}", {"field": "limit", "max": MAX_LIMIT})
    return int(value)


def _one(query: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = query.get(name) or []
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"{name} may be given once", {"field": name})
    return str(values[0])


def _parse(query: Mapping[str, Sequence[str]]) -> _Query:
    unknown = sorted(set(query) - QUERY_PARAMS)
    if unknown:
        raise BadRequest("unknown query parameters", {"fields": unknown, "allowed": sorted(QUERY_PARAMS)})
    given = {name: value for name in SEARCH_FIELDS if (value := _one(query, name)) is not None}
    if not given:
        raise BadRequest("give input_hash or output_hash (sha256:<64 hex>), or both", {"fields": list(SEARCH_FIELDS)})
    for field, hash_str in given.items():
        if not is_hash_str(hash_str):
            raise BadRequest(f"{field} must be sha256: followed by 64 hex digits", {"field": field})
    # The first given field drives the index; any other must match too.
    field, hash_str = next(iter(given.items()))
    also = {name: value.lower() for name, value in given.items() if name != field}
    return _Query(field, hash_str.lower(), also, parse_limit(_one(query, "limit")), _one(query, "cursor"))


def _matches(receipt_json: bytes, wanted: dict[str, str]) -> bool:
    receipt = orjson.loads(receipt_json)
    return all(receipt.get(name) == value for name, value in wanted.items())


class Searcher:
    """Pages of a project's receipts by hash."""

    def __init__(self, limiter: Limiter, receipts: ReceiptStore) -> None:
        self.limiter = limiter
        self.receipts = receipts

    async def search(self, caller: Caller, query: Mapping[str, Sequence[str]]) -> Found:
        """One page for the query's parameters (each name with every value given, blank ones
        included). Raises ``Unauthorized``, ``RateLimited`` or ``Forbidden`` for the key and
        the address, then ``BadRequest`` for the query (nothing counted), then ``RateLimited``
        for the key."""
        parsed: _Query | None = None
        query_error: ServiceError | None = None
        try:
            parsed = _parse(query)
        except ServiceError as exc:
            query_error = exc

        async def checks(key: KeyRecord) -> str | None:
            assert parsed is not None
            return decode_cursor(parsed.cursor, key.project_id) if parsed.cursor is not None else None

        admission = await self.limiter.admit(
            caller, "authenticated", key=True, count=query_error is None, per_key=True, checks=checks
        )
        key = admission.key
        assert key is not None
        if query_error is not None:
            raise naming(query_error, key)
        assert parsed is not None
        found, last = await self.receipts.search_receipts(
            key.project_id, parsed.field, parsed.hash_str, parsed.limit, admission.checked
        )
        if parsed.also:
            found = [receipt for receipt in found if _matches(receipt, parsed.also)]
        return Found(found, encode_cursor(last) if last else None, admission)
