"""The transparency log's public routes below the web layer (docs/log.md): the log's
description, its checkpoint, tiles and entry bundles (C2SP tlog-tiles), a receipt's
tlog-proof, and the checkpoints' time-stamps. Public, no key; counted per address like
``GET /v1/public-key``, tiles and bundles by their own, generous, ``log_tiles`` limit.

What they answer is read by the log's read side (usecases/log_reading.py), from the log
store, where the integrator writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import orjson

from execution_proof.kv.logstore import LogStoreError
from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts.errors import LogUnavailable, NotFound, ProofPending, StoreUnavailable
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.shapes import JSONObject, JSONValue
from execution_proof.transparency import tlog
from execution_proof.transparency.tiles import tile_name
from execution_proof.usecases.limiting import Admission, Caller, Limiter
from execution_proof.usecases.log_reading import LogService
from execution_proof.usecases.reading import NOT_FOUND

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class LogAnswer(Generic[V]):
    """What a log route answers, the request's admission, and whether the answer never
    changes (a full tile, a kept time-stamp record) or is the latest (cached briefly)."""

    value: V
    admission: Admission[None]
    lasting: bool = False


class LogRoutes:
    """The log's public reads."""

    def __init__(self, limiter: Limiter, receipts: ReceiptStore, log: LogService | None) -> None:
        self.limiter = limiter
        self.receipts = receipts
        self.log = log

    async def _admit(self, caller: Caller, scope: str = "public_key") -> tuple[Admission[None], LogService]:
        admission: Admission[None] = await self.limiter.admit(caller, scope)
        if self.log is None:
            raise LogUnavailable("this service runs without a transparency log (no LOG_SIGNING_KEY is set)")
        return admission, self.log

    async def describe(self, caller: Caller, here: str) -> LogAnswer[JSONObject]:
        """``GET /v1/log``; ``here``: the tiles' URL on the address the request came to, used
        unless ``LOG_PUBLIC_URL`` is set."""
        admission, service = await self._admit(caller)
        policy = service.policy
        witnesses: list[JSONValue] = [
            {"name": w.name, "vkey": w.key.encode(), "url": w.url}
            for w in (policy.witnesses.values() if policy else [])
        ]
        body: JSONObject = {
            "origin": service.origin,
            "log_vkey": service.verifier.encode(),
            "checkpoint_url": "/v1/log/checkpoint",
            "tiles_url": service.public_url or here,
            "witnesses": witnesses,
            "policy": policy.text if policy else "",
        }
        return LogAnswer(body, admission)

    async def checkpoint(self, caller: Caller) -> LogAnswer[str]:
        """The published checkpoint's text; ``NotFound`` before the first, ``StoreUnavailable``
        when it cannot be read."""
        admission, service = await self._admit(caller)
        published = await service.published()
        if published is None:
            if service.unreadable:
                raise StoreUnavailable("the published checkpoint cannot be read; the log publishes it again shortly")
            raise NotFound("the log has published no checkpoint yet")
        return LogAnswer(published.text, admission)

    async def tile(self, caller: Caller, path: str) -> LogAnswer[bytes]:
        """The tile or entry bundle at ``path`` (``<L>/<N>[.p/<W>]``); lasting when full."""
        admission, service = await self._admit(caller, "log_tiles")
        level, index, width = _parse_tile_path(path)
        published = await service.published()
        size = published.checkpoint.size if published else 0
        have = tlog.tile_width(size, 0 if level == "entries" else int(level), index)
        if width > have:
            raise NotFound("no such tile in the published tree")
        data = await _resource(service, level, index, width, have)
        if data is None:
            raise NotFound("the tile is not in the log store")
        return LogAnswer(data, admission, lasting=width == tlog.TILE_WIDTH)

    async def proof(self, caller: Caller, receipt_id: str) -> LogAnswer[str]:
        """The receipt's tlog-proof; ``ProofPending`` until a published checkpoint covers it."""
        admission, service = await self._admit(caller)
        stored = await self.receipts.get_receipt_json(receipt_id) if is_receipt_id(receipt_id) else None
        if stored is None:
            raise NotFound(NOT_FOUND)
        found = await service.proof(orjson.loads(stored))
        if found is None:
            raise ProofPending("no published checkpoint covers this receipt yet; try again in a second")
        return LogAnswer(found[1], admission)

    async def timestamps(self, caller: Caller, size: str) -> LogAnswer[bytes]:
        """Every kept RFC 3161 time-stamp of the checkpoint of that size (and the checkpoint as
        published), lasting; the latest checkpoint answers with an empty list until it is
        stamped."""
        admission, service = await self._admit(caller)
        if not size.isdigit() or len(size) > 20 or (len(size) > 1 and size.startswith("0")):
            raise NotFound("no time-stamps for a checkpoint of that size")
        try:
            record = await service.log.stamp(int(size)) if int(size) < 2**63 else None
        except LogStoreError as exc:
            raise StoreUnavailable("the log store is unreachable; try again shortly") from exc
        if record is not None:
            return LogAnswer(orjson.dumps({"tree_size": int(size), **orjson.loads(record)}), admission, lasting=True)
        published = await service.published()
        if published is None or int(size) != published.checkpoint.size:
            raise NotFound("no time-stamps for a checkpoint of that size (none kept)")
        body = orjson.dumps({"tree_size": published.checkpoint.size, "checkpoint": published.text, "timestamps": []})
        return LogAnswer(body, admission)


async def _resource(service: LogService, level: str, index: int, width: int, have: int) -> bytes | None:
    """A tile or bundle of ``width``: as stored, else the prefix of the full one (partial
    tiles go once it exists), else of the published edge's (a width no checkpoint had)."""
    kind: int | str = level if level == "entries" else int(level)
    for stored_width in dict.fromkeys((width, tlog.TILE_WIDTH, have)):
        if stored_width < width:
            continue
        data = await service.fetch(tile_name(kind, index, stored_width))
        if data is None:
            continue
        if stored_width == width:
            return data
        if kind == "entries":
            entries = tlog.split_bundle(data)
            return b"".join(tlog.bundle_entry(e) for e in entries[:width]) if len(entries) >= width else None
        return data[: width * tlog.HASH_SIZE] if len(data) >= width * tlog.HASH_SIZE else None
    return None


def _parse_tile_path(path: str) -> tuple[str, int, int]:
    """(level or "entries", index, width) of ``<L>/<N>[.p/<W>]``; NotFound when malformed."""
    parts = path.split("/")
    width = tlog.TILE_WIDTH
    if len(parts) >= 3 and parts[-2].endswith(".p"):
        raw_width = parts[-1]
        if not raw_width.isdigit() or len(raw_width) > 3 or raw_width.startswith("0") or not 1 <= int(raw_width) <= 255:
            raise NotFound("no such tile (a partial width is 1-255)")
        width = int(raw_width)
        parts = [*parts[:-2], parts[-2][:-2]]
    level = parts[0] if parts else ""
    if level != "entries" and (
        not level.isdigit() or len(level) > 2 or (level != "0" and level.startswith("0")) or int(level) > 63
    ):
        raise NotFound("no such tile (the level is 0-63 or entries)")
    try:
        index = tlog.parse_tile_index(parts[1:])
    except ValueError:
        raise NotFound("no such tile (malformed index)") from None
    return level, index, width
