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
