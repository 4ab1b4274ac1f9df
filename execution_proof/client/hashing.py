"""Hashes computed where the data is (docs/python-api.md, ``hash_file``): ``sha256:<hex>`` of a
file, of standard input or of bytes, optionally after a salt (sha256(salt || data), as
``hash --salt``), and the one rule for what a hash argument of ``Client.submit`` means."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from typing import BinaryIO

from execution_proof.receipts.errors import InvalidInput

HASH_CHUNK = 1 << 20
SALT_BYTES = 16
HASH_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")

HashSource = str | os.PathLike[str] | bytes
"""What ``Client.submit`` takes for each hash: a path (hashed here), bytes (hashed here), or
a ``"sha256:<hex>"`` string used as it is."""


def hash_file(path: str | os.PathLike[str], *, salt: bytes | None = None) -> str:
    """``sha256:<hex>`` of ``salt`` (if any) followed by the file's bytes, read in chunks.
    ``InvalidInput`` (an ``execution_proof.Error``) if the file cannot be read."""
    try:
        with open(path, "rb") as handle:
            return hash_stream(handle, salt=salt)
    except OSError as exc:
        raise InvalidInput(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc


def hash_stream(stream: BinaryIO, *, salt: bytes | None = None) -> str:
    """``sha256:<hex>`` of ``salt`` followed by what ``stream`` holds (standard input: ``-``)."""
    digest = hashlib.sha256(salt or b"")
    while chunk := stream.read(HASH_CHUNK):
        digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def hash_bytes(data: bytes, *, salt: bytes | None = None) -> str:
    return "sha256:" + hashlib.sha256((salt or b"") + data).hexdigest()


def fresh_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def hash_source(source: HashSource, *, salt: bytes | None = None) -> str:
    """The hash a ``submit`` argument stands for: a ``sha256:`` string as it is (no salt can
    apply to it), bytes or a path hashed here. ``InvalidInput`` for a ``sha256:`` string that
    is not 64 hex digits, or a file that cannot be read. A string that starts with ``sha256:``
    in any case is a hash value, never a path; it is given lower-cased."""
    if isinstance(source, bytes):
        return hash_bytes(source, salt=salt)
    if is_given_hash(source):
        value = str(source).lower()
        if not HASH_PATTERN.fullmatch(value):
            raise InvalidInput(f"{source!r} is not sha256: followed by 64 hex digits")
        if salt is not None:
            raise InvalidInput("a salt applies to data hashed here, not to a hash given as sha256:<hex>")
        return value
    if not isinstance(source, str | os.PathLike):
        raise InvalidInput(f"a hash is a path, bytes or a sha256:<hex> string, not {type(source).__name__}")
    return hash_file(source, salt=salt)


def is_given_hash(source: object) -> bool:
    """``source`` is a hash value (``sha256:`` in any case), not data to hash."""
    return isinstance(source, str) and source[:7].lower() == "sha256:"
