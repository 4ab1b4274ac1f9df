"""Execution Proof Service: signed, chained execution receipts for hashes clients compute.

The client library (docs/python-api.md)::

    from execution_proof import Client, hash_file, verify

    with Client("https://proofs.example.com") as client:  # api_key: SERVICE_API_KEY
        receipt = client.submit(input="data.csv", output="model.bin", tags={"stage": "train"})
        receipt.save("model.bin.receipt.json")
        bundle = client.bundle(receipt.receipt_id, wait=60)  # ProofPending if no proof by then
        client.attestation(receipt.receipt_id, sigstore=True, wait=60).save("model.bin.sigstore.json")
    report = verify(bundle, trust_root="trust-root.json")
    assert report.ok, report.verdict

Every name is loaded when it is first used, so that ``import execution_proof`` costs almost
nothing (bench/RESULTS.md, "The client"). Every exception the package raises on purpose is
an ``execution_proof.Error``; the service's refusals are its subclasses by their documented
names (``NotFound``, ``Unauthorized``, ``RateLimited``, ``ProofPending``, ...), and
``report.raise_for_failure()`` raises ``VerificationFailed`` for a verdict that is not VALID.

The one import name the installed distribution puts into site-packages. Its subpackages are
the layers, each a folder here (README "Layout").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:
    from execution_proof.client.hashing import hash_file
    from execution_proof.client.models import Attestation, Bundle, Receipt
    from execution_proof.client.reports import Check, VerifyReport
    from execution_proof.client.service import Client
    from execution_proof.client.verifying import verify
    from execution_proof.errors import Error
    from execution_proof.receipts.errors import (
        AlreadyClaimed,
        BadRequest,
        ChainContention,
        ClaimExpired,
        ClaimNotReady,
        ClaimPending,
        ClaimUnknown,
        Forbidden,
        ForbiddenContent,
        IdempotencyConflict,
        InternalError,
        InvalidInput,
        LogBacklog,
        LogUnavailable,
        MethodNotAllowed,
        NotConfigured,
        NotFound,
        NotInLog,
        PayloadTooLarge,
        ProofPending,
        QuotaExceeded,
        RateLimited,
        ServiceError,
        SigningKeyUnavailable,
        StoreUnavailable,
        Unauthorized,
        Unreachable,
        UnsupportedMediaType,
        VerificationFailed,
    )
    from execution_proof.receipts.trust_root import TrustRoot

_WHERE = {
    "hash_file": ("execution_proof.client.hashing", "hash_file"),
    "Client": ("execution_proof.client.service", "Client"),
    "Receipt": ("execution_proof.client.models", "Receipt"),
    "Bundle": ("execution_proof.client.models", "Bundle"),
    "Attestation": ("execution_proof.client.models", "Attestation"),
    "TrustRoot": ("execution_proof.receipts.trust_root", "TrustRoot"),
    "verify": ("execution_proof.client.verifying", "verify"),
    "VerifyReport": ("execution_proof.client.reports", "VerifyReport"),
    "Check": ("execution_proof.client.reports", "Check"),
    "Error": ("execution_proof.errors", "Error"),
    "ServiceError": ("execution_proof.receipts.errors", "ServiceError"),
    "Unreachable": ("execution_proof.receipts.errors", "Unreachable"),
    "ProofPending": ("execution_proof.receipts.errors", "ProofPending"),
    "InvalidInput": ("execution_proof.receipts.errors", "InvalidInput"),
    "BadRequest": ("execution_proof.receipts.errors", "BadRequest"),
    "ForbiddenContent": ("execution_proof.receipts.errors", "ForbiddenContent"),
    "Unauthorized": ("execution_proof.receipts.errors", "Unauthorized"),
    "Forbidden": ("execution_proof.receipts.errors", "Forbidden"),
    "NotFound": ("execution_proof.receipts.errors", "NotFound"),
    "MethodNotAllowed": ("execution_proof.receipts.errors", "MethodNotAllowed"),
    "IdempotencyConflict": ("execution_proof.receipts.errors", "IdempotencyConflict"),
    "PayloadTooLarge": ("execution_proof.receipts.errors", "PayloadTooLarge"),
    "UnsupportedMediaType": ("execution_proof.receipts.errors", "UnsupportedMediaType"),
    "RateLimited": ("execution_proof.receipts.errors", "RateLimited"),
    "QuotaExceeded": ("execution_proof.receipts.errors", "QuotaExceeded"),
    "InternalError": ("execution_proof.receipts.errors", "InternalError"),
    "SigningKeyUnavailable": ("execution_proof.receipts.errors", "SigningKeyUnavailable"),
    "StoreUnavailable": ("execution_proof.receipts.errors", "StoreUnavailable"),
    "ChainContention": ("execution_proof.receipts.errors", "ChainContention"),
    "LogUnavailable": ("execution_proof.receipts.errors", "LogUnavailable"),
    "NotInLog": ("execution_proof.receipts.errors", "NotInLog"),
    "LogBacklog": ("execution_proof.receipts.errors", "LogBacklog"),
    "ClaimUnknown": ("execution_proof.receipts.errors", "ClaimUnknown"),
    "ClaimPending": ("execution_proof.receipts.errors", "ClaimPending"),
    "AlreadyClaimed": ("execution_proof.receipts.errors", "AlreadyClaimed"),
    "ClaimExpired": ("execution_proof.receipts.errors", "ClaimExpired"),
    "ClaimNotReady": ("execution_proof.receipts.errors", "ClaimNotReady"),
    "NotConfigured": ("execution_proof.receipts.errors", "NotConfigured"),
    "VerificationFailed": ("execution_proof.receipts.errors", "VerificationFailed"),
}

__all__ = [
    "AlreadyClaimed",
    "Attestation",
    "BadRequest",
    "Bundle",
    "ChainContention",
    "Check",
    "ClaimExpired",
    "ClaimNotReady",
    "ClaimPending",
    "ClaimUnknown",
    "Client",
    "Error",
    "Forbidden",
    "ForbiddenContent",
    "IdempotencyConflict",
    "InternalError",
    "InvalidInput",
    "LogBacklog",
    "LogUnavailable",
    "MethodNotAllowed",
    "NotConfigured",
    "NotFound",
    "NotInLog",
    "PayloadTooLarge",
    "ProofPending",
    "QuotaExceeded",
    "RateLimited",
    "Receipt",
    "ServiceError",
    "SigningKeyUnavailable",
    "StoreUnavailable",
    "TrustRoot",
    "Unauthorized",
    "Unreachable",
    "UnsupportedMediaType",
    "VerificationFailed",
    "VerifyReport",
    "__version__",
    "hash_file",
    "verify",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'execution_proof' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
