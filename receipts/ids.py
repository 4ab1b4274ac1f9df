"""Opaque, URL-safe, unguessable, time-sortable ids (contract 1).

``receipt_id`` is ``rcpt_`` + a 26-character ULID whose first four random characters are
the project's *slot tag*: the tag is derived from the project id, so the store can find a
receipt's project slot from its id alone (every key of one project shares a Redis Cluster
hash slot). The id keeps 48 bits of time and 60 random bits.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import NewType

ProjectId = NewType("ProjectId", str)
ActorId = NewType("ActorId", str)
ReceiptId = NewType("ReceiptId", str)

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_RE = r"[0-7][0-9A-HJKMNP-TV-Z]{25}"
ULID_TEXT_RE = re.compile(ULID_RE)
RECEIPT_ID_RE = re.compile(r"rcpt_" + ULID_RE)
PROJECT_ID_RE = re.compile(r"prj_" + ULID_RE)
ACTOR_ID_RE = re.compile(r"act_" + ULID_RE)
TAG_LEN = 4


def _encode_time(ms: int) -> str:
    out = []
    for _ in range(10):
        out.append(CROCKFORD[ms & 31])
        ms >>= 5
    return "".join(reversed(out))


RANDOM_CHAR_OF_BYTE = bytes.maketrans(bytes(range(256)), bytes(ord(CROCKFORD[b & 31]) for b in range(256)))
"""Maps a random byte to a Crockford character by its low 5 bits: each character has exactly
8 of the 256 byte values, so the characters stay uniform (5 random bits each)."""


def _random_chars(count: int) -> str:
    # One read of the OS's randomness for the whole id (0.6 us, was 28 us with a
    # secrets.randbelow call per character; ids are made twice per create).
    return secrets.token_bytes(count).translate(RANDOM_CHAR_OF_BYTE).decode("ascii")


def new_ulid(now_ms: int | None = None, tag: str = "") -> str:
    """A ULID (10 time chars + 16 random chars), optionally starting its random part with ``tag``."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _encode_time(ms) + tag + _random_chars(16 - len(tag))


def new_project_id() -> ProjectId:
    return ProjectId("prj_" + new_ulid())


def new_actor_id() -> ActorId:
    return ActorId("act_" + new_ulid())


def slot_tag(project_id: str) -> str:
    """The project's four-character slot tag: the first random characters of its ULID."""
    return project_id[4 + 10 : 4 + 10 + TAG_LEN]


def new_receipt_id(project_id: str, now_ms: int | None = None) -> ReceiptId:
    return ReceiptId("rcpt_" + new_ulid(now_ms, slot_tag(project_id)))


def receipt_slot_tag(receipt_id: str) -> str:
    """The slot tag carried inside a receipt id (see module docstring)."""
    return receipt_id[5 + 10 : 5 + 10 + TAG_LEN]


def is_receipt_id(value: str) -> bool:
    return RECEIPT_ID_RE.fullmatch(value) is not None


def is_project_id(value: str) -> bool:
    return PROJECT_ID_RE.fullmatch(value) is not None


_PAIR_TEXT = [CROCKFORD[i >> 5] + CROCKFORD[i & 31] for i in range(1024)]
_PAIR_VALUE = {text: value for value, text in enumerate(_PAIR_TEXT)}


def ulid_to_bytes(ulid: str) -> bytes:
    """The 16 bytes (128-bit big-endian number) of a valid 26-character ULID (its 26 base32
    digits hold 130 bits, the top two zero). Raises ``KeyError`` or ``OverflowError`` for
    text that is not one."""
    value = 0
    for at in range(0, 26, 2):
        value = value << 10 | _PAIR_VALUE[ulid[at : at + 2]]
    return value.to_bytes(16, "big")


def ulid_from_bytes(raw: bytes) -> str:
    """The ULID text of 16 bytes (the inverse of ``ulid_to_bytes``), two digits per lookup."""
    if len(raw) != 16:
        raise ValueError("a ULID is 16 bytes")
    v = int.from_bytes(raw, "big")
    t = _PAIR_TEXT
    return (
        t[v >> 120] + t[v >> 110 & 1023] + t[v >> 100 & 1023] + t[v >> 90 & 1023] + t[v >> 80 & 1023]
        + t[v >> 70 & 1023] + t[v >> 60 & 1023] + t[v >> 50 & 1023] + t[v >> 40 & 1023] + t[v >> 30 & 1023]
        + t[v >> 20 & 1023] + t[v >> 10 & 1023] + t[v & 1023]
    )  # fmt: skip


def ulid_time_ms(ulid: str) -> int:
    """The creation time (Unix ms) a valid ULID's first ten characters hold."""
    v = _PAIR_VALUE
    return ((((v[ulid[0:2]] << 10 | v[ulid[2:4]]) << 10 | v[ulid[4:6]]) << 10 | v[ulid[6:8]]) << 10) | v[ulid[8:10]]
