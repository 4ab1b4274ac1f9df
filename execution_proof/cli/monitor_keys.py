"""``monitor --trust-root FILE``: the receipt roots a trust root pins, against which the
monitor judges every key entry of the log (receipts/key_entries.py).

A version 2 file pins ``receipt_roots`` (``[{kid, public_key_base64url}]``); a version 1 file,
read as strictly as every reader reads it, pins receipt keys and no root, so every key
certificate the log holds is then ``unknown_root`` (``trust-root`` writes version 2).

``receipts/trust_root.py`` reads version 1 only on this branch: ``receipt_roots`` of a
version 2 file are read here, each root checked (``Root.parse``: its kid is its key's), the
file's other members left to that loader once it reads version 2.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from execution_proof.receipts.key_certificates import KeyDocumentError, Root
from execution_proof.receipts.trust_root import MAX_TRUST_ROOT_BYTES, TrustRootError, parse_trust_root


def load_receipt_roots(path: str | os.PathLike[str]) -> tuple[int, dict[str, bytes]]:
    """The trust root at ``path``: its version and the receipt roots it pins (``{root_kid:
    raw public key}``; empty for version 1). ``TrustRootError`` (exit 2) names what is
    wrong."""
    where = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TrustRootError(f"cannot read the trust root {where}: {exc.strerror or exc}") from exc
    try:
        return receipt_roots(data)
    except TrustRootError as exc:
        raise TrustRootError(f"the trust root {where} is malformed: {exc}") from exc


def receipt_roots(data: bytes) -> tuple[int, dict[str, bytes]]:
    """``load_receipt_roots`` of a file's bytes."""
    if len(data) > MAX_TRUST_ROOT_BYTES:
        raise TrustRootError(f"the trust root is larger than {MAX_TRUST_ROOT_BYTES} bytes")
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TrustRootError(f"the trust root is not JSON: {exc}") from exc
    version = document.get("version") if isinstance(document, dict) else None
    if version == 1 and type(version) is int:
        parse_trust_root(data)
        return 1, {}
    if version != 2 or type(version) is not int:
        raise TrustRootError(f"version: must be 1 or 2, not {version!r}")
    listed = document.get("receipt_roots")
    if not isinstance(listed, list) or not listed:
        raise TrustRootError("receipt_roots: must be a non-empty list")
    roots: dict[str, bytes] = {}
    for index, entry in enumerate(listed):
        where = f"receipt_roots[{index}]"
        if not isinstance(entry, dict) or sorted(entry) != ["kid", "public_key_base64url"]:
            raise TrustRootError(f"{where}: must be an object with kid and public_key_base64url, and nothing else")
        try:
            root = Root.parse(entry)
        except KeyDocumentError as exc:
            raise TrustRootError(f"{where}: {exc}") from exc
        if root.kid in roots:
            raise TrustRootError(f"{where}.kid: duplicate kid {root.kid!r}")
        roots[root.kid] = root.public_key
    return 2, roots
