"""``monitor --trust-root FILE``: the receipt roots a trust root pins, against which the
monitor judges every key entry of the log (receipts/key_entries.py).

A version 2 file pins ``receipt_roots`` (``[{kid, public_key_base64url}]``); a version 1 file
pins receipt keys and no root, so every key certificate the log holds is then
``unknown_root`` (``trust-root`` writes version 2). Both are read by the one reader every
verifier uses (receipts/trust_root.py), as strictly.
"""

from __future__ import annotations

import os
from pathlib import Path

from execution_proof.receipts.trust_root import TrustRootError, parse_trust_root


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
    """``load_receipt_roots`` of a file's bytes: the one reader of trust roots decides."""
    trust = parse_trust_root(data)
    return trust.version, dict(trust.roots or {})
