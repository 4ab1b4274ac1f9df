"""A receipt's attestation as a Sigstore bundle v0.3 (docs/attestations.md): the DSSE
envelope, the receipt key named by its kid, and, when the service keeps a log, one
transparency-log entry proving the attestation's ``dsse`` 0.0.2 leaf (the entry after the
receipt's own) under a C2SP checkpoint of this log. The JSON is the protobuf-specs JSON
mapping (camelCase members, 64-bit integers as strings, bytes as standard base64).

Pure: no I/O, no server library.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from execution_proof.receipts.attestation import DSSE_API_VERSION, DSSE_KIND, Attestation, b64

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def checkpoint_key_id(origin: str, public_key: bytes) -> bytes:
    """The C2SP key hash of the log's Ed25519 key (signed-note: SHA-256 of the key name, a
    newline, the signature type 0x01 and the key): sigstore's ``checkpointKeyId`` and
    ``logId``; its first four bytes are the checkpoint signature's key hint."""
    return hashlib.sha256(origin.encode() + b"\n\x01" + public_key).digest()


def tlog_entry(
    leaf: bytes, index: int, path: Sequence[bytes], tree_size: int, root: bytes, checkpoint: str, log_key_id: bytes
) -> dict[str, Any]:
    """The bundle's ``TransparencyLogEntry`` for the ``dsse`` leaf ``leaf`` at ``index``, with
    its inclusion ``path`` under the signed ``checkpoint`` note of ``tree_size`` and ``root``."""
    return {
        "logIndex": str(index),
        "logId": {"keyId": b64(log_key_id)},
        "kindVersion": {"kind": DSSE_KIND, "version": DSSE_API_VERSION},
        "integratedTime": "0",
        "inclusionProof": {
            "logIndex": str(index),
            "rootHash": b64(root),
            "treeSize": str(tree_size),
            "hashes": [b64(node) for node in path],
            "checkpoint": {"envelope": checkpoint},
        },
        "canonicalizedBody": b64(leaf),
    }


def bundle(attestation: Attestation, entry: dict[str, Any] | None) -> dict[str, Any]:
    """The Sigstore bundle v0.3 of ``attestation``: ``entry`` (``tlog_entry``) is its log
    proof; None, a service without a log, gives none."""
    material: dict[str, Any] = {"publicKey": {"hint": attestation.kid}}
    if entry is not None:
        material["tlogEntries"] = [entry]
    return {"mediaType": BUNDLE_MEDIA_TYPE, "verificationMaterial": material, "dsseEnvelope": attestation.envelope()}
