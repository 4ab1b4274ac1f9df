"""Opaque, URL-safe, unguessable, time-sortable ids.

``receipt_id`` is ``rcpt_`` + a 26-character ULID whose first four random characters are
the project's *slot tag*: the tag is derived from the project id, so the store can find a
receipt's project slot from its id alone (every key of one project shares a Redis Cluster
hash slot). The id keeps 48 bits of time and 60 random bits.
"""

from __future__ import annotations

import os
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


_last_time: tuple[int, str] = (-1, "")


def _encode_time(ms: int) -> str:
    global _last_time
    if ms == _last_time[0]:
        return _last_time[1]  # ids made in the same millisecond share their time characters
    out = []
    left = ms
    for _ in range(10):
        out.append(CROCKFORD[left & 31])
        left >>= 5
    text = "".join(reversed(out))
    _last_time = (ms, text)
    return text


RANDOM_CHAR_OF_BYTE = bytes.maketrans(bytes(range(256)), bytes(ord(CROCKFORD[b & 31]) for b in range(256)))
"""Maps a random byte to a Crockford character by its low 5 bits: each character has exactly
8 of the 256 byte values, so the characters stay uniform (5 random bits each)."""


_POOL_SIZE = 4096
_pool = b""
_pool_at = 0


def _random_chars(count: int) -> str:
    # The OS's randomness read 4 KiB at a time (one getrandom call per ~250 ids instead of
    # one per id; ids are made twice per create), and the pool is dropped in a forked child
    # so two processes never hand out the same bytes.
    global _pool, _pool_at
    at = _pool_at
    if at + count > len(_pool):
        _pool, at = secrets.token_bytes(_POOL_SIZE), 0
    _pool_at = at + count
    return _pool[at : at + count].translate(RANDOM_CHAR_OF_BYTE).decode("ascii")


def _drop_pool() -> None:
    global _pool, _pool_at
    _pool, _pool_at = b"", 0


os.register_at_fork(after_in_child=_drop_pool)


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
