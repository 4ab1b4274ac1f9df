"""The compact stored form of a receipt: version-tagged binary that decodes to exactly the
JSON bytes the service returns (docs/redis.md, "Receipt records").

A receipt's JSON is about 900 bytes; most of it is hex, base64url, ULID text and field
names. The compact form keeps the values only: project and actor ids as their 16 ULID
bytes (converted once per process and id: they repeat), the receipt id as its 26 ULID
characters (unique, and turning 16 bytes back into text would cost 2 us per read), every
``sha256:`` value as its 32 bytes, the signature as its 64 bytes, ``created_at`` as nothing
when it is the receipt id's own time (always, for receipts this service builds), enums and
nulls as bits, and client text (``code_ref``, ``run_id``, tags in their order) as
length-prefixed UTF-8. About 275 bytes for a typical receipt
(926 as JSON).

``decode`` rebuilds the receipt object in the field order of docs/receipt-format.md and serialises it with orjson,
exactly as the issue path serialised it, so a read returns the same bytes. ``encode``
checks that by decoding what it made: a receipt it cannot reproduce byte for byte (a field
out of order, an upper-case hash, a non-canonical signature, ...) is stored as its JSON,
which ``decode`` passes through unchanged. Stored JSON always starts with ``{``; the compact
form starts with a version byte below it, so every stored value says what it is.

Pure: imports neither redis nor sanic.
"""

from __future__ import annotations

import base64
import binascii
import functools
import struct
from binascii import b2a_base64, hexlify
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from execution_proof.errors import Error
from execution_proof.receipts.ids import ulid_from_bytes, ulid_time_ms, ulid_to_bytes
from execution_proof.receipts.model import RECEIPT_FIELDS, RECEIPT_KINDS, format_created_at
from execution_proof.receipts.shapes import ReceiptObject

VERSION_1 = 0x01
"""First byte of a version-1 record. JSON records start with ``{`` (0x7B)."""
JSON_KEPT = 0x02
"""First byte of a JSON record with what is kept beside it: a flag byte (1: a log origin
follows), the attestation's signature, the origin (length-prefixed text), then the JSON."""

_KINDS = (None, *RECEIPT_KINDS)
_CHAINS = (None, "main", "branch")
_STATUSES = ("issued", "pending")

# Flag bits (a big-endian uint16 after the version byte).
_OUTPUT, _PARAMS, _ENV = 1 << 0, 1 << 1, 1 << 2
_CODE_REF, _RUN_ID, _TAGS = 1 << 3, 1 << 4, 1 << 5
_PREV, _EXPECTED, _EXPECTED_IS_PREV = 1 << 6, 1 << 7, 1 << 8
_KIND_SHIFT, _CHAIN_SHIFT = 9, 11  # two bits each: index into _KINDS / _CHAINS
_PENDING, _OWN_TIME, _LOG_ORIGIN = 1 << 13, 1 << 14, 1 << 15
_OPTIONAL_HASHES: tuple[tuple[Literal["output_hash", "params_hash", "env_hash"], int], ...] = (
    ("output_hash", _OUTPUT),
    ("params_hash", _PARAMS),
    ("env_hash", _ENV),
)
_HEAD = struct.Struct(">BH")
_FIXED = 3 + 26 + 16 + 16 + 32 + 32 + 64 + 1
"""Bytes every version-1 record has: head, ids, input hash, receipt hash, signature, kid length."""
ATTESTATION_SIGNATURE = 64


class NotCompactable(Error, ValueError):
    """The receipt has a value the compact form cannot hold exactly (it is stored as JSON)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """What a receipt's record keeps beside the receipt (receipts/attestation.py): its
    attestation's signature, and the origin of the log its Statement names (None: none)."""

    signature: bytes
    log_origin: str | None


def encode(receipt: ReceiptObject, receipt_json: bytes, kept: Kept) -> bytes:
    """The value to store for ``receipt`` (whose serialisation is ``receipt_json``) and what
    is ``kept`` beside it: the compact form when that decodes to exactly ``receipt_json``,
    else the JSON form."""
    if len(kept.signature) != ATTESTATION_SIGNATURE:
        raise ValueError("an attestation signature is 64 bytes")
    tail = kept.signature + (b"" if kept.log_origin is None else _text(kept.log_origin))
    try:
        packed = _pack(receipt, kept.log_origin is not None) + tail
    except (NotCompactable, KeyError, TypeError, ValueError, OverflowError, UnicodeError, binascii.Error):
        packed = b""
    if packed and decode(packed) == receipt_json:
        return packed
    return bytes((JSON_KEPT, kept.log_origin is not None)) + tail + receipt_json


def decode(stored: bytes) -> bytes:
    """The receipt's JSON bytes from a stored value (compact, JSON with what is kept, or bare
    JSON, which a test or a preload may write).

    Raises ``ValueError`` for a value that is none of them (a truncated or foreign record).
    """
    if not stored or stored[0] > JSON_KEPT:
        return stored
    try:
        return _json(stored) if stored[0] == VERSION_1 else stored[_kept_end(stored) :]
    except (IndexError, KeyError, UnicodeError, ValueError, OverflowError, TypeError) as exc:
        raise ValueError("not a stored receipt") from exc


def kept(stored: bytes) -> Kept | None:
    """What a stored value keeps beside its receipt; None for bare JSON (nothing kept).
    Raises ``ValueError`` for a value that is no record."""
    try:
        if stored and stored[0] == VERSION_1:
            return _kept_at(stored, _json_end(stored), stored[1] << 8 & _LOG_ORIGIN)[0]
        if stored and stored[0] == JSON_KEPT:
            return _kept_at(stored, 2, stored[1])[0]
    except (IndexError, UnicodeError) as exc:
        raise ValueError("not a stored receipt") from exc
    return None


def _kept_at(data: bytes, at: int, logged: int) -> tuple[Kept, int]:
    """What is kept from ``at`` on, and where it ends."""
    end = at + ATTESTATION_SIGNATURE
    if end > len(data):
        raise IndexError("truncated")
    origin = None
    if logged:
        origin, end = _text_at(data, end)
    return Kept(data[at : at + ATTESTATION_SIGNATURE], origin), end


def _kept_end(data: bytes) -> int:
    """Where a JSON-form record's JSON starts."""
    return _kept_at(data, 2, data[1])[1]


def decode_as(stored: bytes, receipt_id: str, project_id: str | None = None) -> bytes:
    """``decode``, refusing a value that is not ``receipt_id``'s record (of ``project_id``,
    when given): every read hands out only the receipt it was asked for.

    A compact record is checked on its id fields before it is decoded (no JSON parse); a JSON
    record (rare: written before the compact form, or not compactable) is parsed, so what a
    read splices into its answer is always one JSON object. Raises ``ValueError`` naming
    what is wrong.
    """
    if stored and stored[0] == JSON_KEPT:
        stored = decode(stored)
    elif stored and stored[0] == VERSION_1:
        if stored[3:29] != receipt_id[5:].encode("ascii") or len(receipt_id) != 31:
            raise ValueError("a record of another receipt id")
        if project_id is not None and stored[29:45] != _id_bytes(project_id[4:]):
            raise ValueError("a record of another project")
        return decode(stored)
    try:
        receipt = orjson.loads(stored)
    except orjson.JSONDecodeError as exc:
        raise ValueError("not a stored receipt") from exc
    if type(receipt) is not dict:
        raise ValueError("not a stored receipt")
    if receipt.get("receipt_id") != receipt_id:
        raise ValueError("a record of another receipt id")
    if project_id is not None and receipt.get("project_id") != project_id:
        raise ValueError("a record of another project")
    return stored


def is_compact(stored: bytes) -> bool:
    """A version-1 (compact) record."""
    return bool(stored) and stored[0] == VERSION_1


# --------------------------------------------------------------------------- packing

_id_text = functools.lru_cache(maxsize=4096)(lambda raw: ulid_from_bytes(raw).encode("ascii"))
"""Project and actor ids repeat across a project's receipts: convert each once."""
_id_bytes = functools.lru_cache(maxsize=4096)(ulid_to_bytes)


def _id(value: Any, prefix: str) -> bytes:
    if type(value) is not str or not value.startswith(prefix):
        raise NotCompactable(prefix)
    return _id_bytes(value[len(prefix) :])


def _hash(value: Any) -> bytes:
    # Upper-case or otherwise unusual hex survives this but not the round trip in encode.
    if type(value) is not str or not value.startswith("sha256:"):
        raise NotCompactable("hash")
    raw = bytes.fromhex(value[7:])
    if len(raw) != 32:
        raise NotCompactable("hash")
    return raw


def _text(value: Any) -> bytes:
    if type(value) is not str:
        raise NotCompactable("text")
    raw = value.encode("utf-8")
    size = len(raw)
    if size < 0x80:
        return bytes((size,)) + raw
    if size < 0x8000:
        return bytes((0x80 | size >> 8, size & 0xFF)) + raw
    raise NotCompactable("text too long")


def _pack(r: ReceiptObject, logged: bool) -> bytes:
    """The version-1 record of ``r`` up to what is kept beside it (``logged``: a log origin
    follows). Only checks what it needs to write something; whether that reads back exactly
    is ``encode``'s round trip."""
    if tuple(r) != RECEIPT_FIELDS:
        raise NotCompactable("fields")
    receipt_id = r["receipt_id"]
    if type(receipt_id) is not str or len(receipt_id) != 31 or not receipt_id.startswith("rcpt_"):
        raise NotCompactable("receipt_id")
    ulid = receipt_id[5:].encode("ascii")
    flags = _LOG_ORIGIN if logged else 0
    parts = [ulid, _id(r["project_id"], "prj_"), _id(r["actor_id"], "act_")]
    if r["created_at"] == format_created_at(ulid_time_ms(receipt_id[5:])):
        flags |= _OWN_TIME
    else:
        created = r["created_at"]
        if type(created) is not str or len(created) != 24:
            raise NotCompactable("created_at")
        ms = round(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() * 1000)
        if not 0 <= ms < 2**48:
            raise NotCompactable("created_at")
        parts.append(ms.to_bytes(6, "big"))
    parts.append(_hash(r["input_hash"]))
    for name, bit in _OPTIONAL_HASHES:
        if r[name] is not None:
            flags |= bit
            parts.append(_hash(r[name]))
    if r["code_ref"] is not None:
        flags |= _CODE_REF
        parts.append(_text(r["code_ref"]))
    if r["run_id"] is not None:
        flags |= _RUN_ID
        parts.append(_text(r["run_id"]))
    tags = r["tags"]
    if tags is not None:
        if type(tags) is not dict or not tags or len(tags) > 255:
            raise NotCompactable("tags")
        flags |= _TAGS
        parts.append(bytes((len(tags),)))
        for key, value in tags.items():
            parts.append(_text(key))
            parts.append(_text(value))
    prev, expected = r["prev_receipt_hash"], r["expected_prev_receipt_hash"]
    if prev is not None:
        flags |= _PREV
        parts.append(_hash(prev))
    if expected is not None:
        if expected == prev:
            flags |= _EXPECTED_IS_PREV
        else:
            flags |= _EXPECTED
            parts.append(_hash(expected))
    flags |= _KINDS.index(r["receipt_kind"]) << _KIND_SHIFT | _CHAINS.index(r["chain_status"]) << _CHAIN_SHIFT
    if _STATUSES.index(r["status"]):
        flags |= _PENDING
    parts.append(_hash(r["receipt_hash"]))
    signature = r["signature"]
    if type(signature) is not str or len(signature) != 86:
        raise NotCompactable("signature")
    parts.append(base64.urlsafe_b64decode(signature + "=="))
    parts.append(_text(r["sig_kid"]))
    return _HEAD.pack(VERSION_1, flags) + b"".join(parts)


# --------------------------------------------------------------------------- unpacking
# The JSON is written directly: orjson serialises a dict as "{", then for each item its key,
# ":" and value, joined by ",", then "}", with no spaces. Strings a client chose go through
# orjson itself, so they are escaped exactly as the issue path escaped them.

_B64URL = bytes.maketrans(b"+/", b"-_")
_HASH_OR_NULL = {True: b'"sha256:', False: b"null"}


def _text_at(data: bytes, at: int) -> tuple[str, int]:
    size = data[at]
    if size & 0x80:
        size = (size & 0x7F) << 8 | data[at + 1]
        at += 1
    end = at + 1 + size
    if end > len(data):
        raise IndexError("truncated")
    return data[at + 1 : end].decode("utf-8"), end


def _json(data: bytes) -> bytes:
    """The JSON of a version-1 record, whose kept tail must end it exactly."""
    out, at = _receipt_json(data)
    if _kept_at(data, at, data[1] << 8 & _LOG_ORIGIN)[1] != len(data):
        raise IndexError("trailing bytes")
    return out


def _json_end(data: bytes) -> int:
    """Where a version-1 record's receipt ends (what is kept follows)."""
    return _receipt_json(data)[1]


def _receipt_json(data: bytes) -> tuple[bytes, int]:
    if len(data) < _FIXED:
        raise IndexError("truncated")
    flags = data[1] << 8 | data[2]
    ulid = data[3:29]
    out = [
        b'{"receipt_id":"rcpt_', ulid,
        b'","project_id":"prj_', _id_text(data[29:45]),
        b'","actor_id":"act_', _id_text(data[45:61]),
        b'","created_at":"',
    ]  # fmt: skip
    at = 61
    if flags & _OWN_TIME:
        out.append(format_created_at(ulid_time_ms(ulid.decode("ascii"))).encode("ascii"))
    else:
        out.append(format_created_at(int.from_bytes(data[at : at + 6], "big")).encode("ascii"))
        at += 6
    out += b'","input_hash":"sha256:', hexlify(data[at : at + 32]), b'"'
    at += 32
    for key, bit in _OPTIONAL_HASH_JSON:
        out.append(key)
        if flags & bit:
            out += b'"sha256:', hexlify(data[at : at + 32]), b'"'
            at += 32
        else:
            out.append(b"null")
    for key, bit in ((b',"code_ref":', _CODE_REF), (b',"run_id":', _RUN_ID)):
        out.append(key)
        if flags & bit:
            text, at = _text_at(data, at)
            out.append(orjson.dumps(text))
        else:
            out.append(b"null")
    out.append(b',"tags":')
    if flags & _TAGS:
        tags = {}
        end = at + 1
        for _ in range(data[at]):
            tag, end = _text_at(data, end)
            tags[tag], end = _text_at(data, end)
        at = end
        out.append(orjson.dumps(tags))
    else:
        out.append(b"null")
    out += _KIND_JSON[flags >> _KIND_SHIFT & 3], _STATUS_JSON[1 if flags & _PENDING else 0]
    prev = expected = b"null"
    if flags & _PREV:
        prev = b'"sha256:' + hexlify(data[at : at + 32]) + b'"'
        at += 32
    if flags & _EXPECTED:
        expected = b'"sha256:' + hexlify(data[at : at + 32]) + b'"'
        at += 32
    elif flags & _EXPECTED_IS_PREV:
        expected = prev
    if at + 96 > len(data):
        raise IndexError("truncated")
    out += b',"prev_receipt_hash":', prev, b',"receipt_hash":"sha256:', hexlify(data[at : at + 32])
    out += b'","signature":"', b2a_base64(data[at + 32 : at + 96], newline=False)[:86].translate(_B64URL)
    kid, at = _text_at(data, at + 96)
    out += b'","sig_kid":', orjson.dumps(kid), _CHAIN_JSON[flags >> _CHAIN_SHIFT & 3]
    out += b',"expected_prev_receipt_hash":', expected, b"}"
    return b"".join(out), at


_OPTIONAL_HASH_JSON = tuple((b',"' + name.encode("ascii") + b'":', bit) for name, bit in _OPTIONAL_HASHES)
_KIND_JSON = tuple(b',"receipt_kind":' + orjson.dumps(kind) for kind in _KINDS)
_STATUS_JSON = tuple(b',"status":' + orjson.dumps(status) for status in _STATUSES)
_CHAIN_JSON = tuple(b',"chain_status":' + orjson.dumps(chain) for chain in _CHAINS)
