"""A receipt as an in-toto attestation: ``GET /v1/receipts/{receipt_id}/attestation``, the
DSSE envelope, or with ``?format=sigstore`` the Sigstore bundle v0.3 that proves its log
leaf (docs/attestations.md). Public like a read (per-address ``get_receipt`` limit).

Both are rendered from the stored receipt and the signature kept with it at creation
(receipts/attestation.py, receipts/sigstore.py): every read answers the same envelope.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from execution_proof.kv.store_receipts import ReceiptStore
from execution_proof.receipts import sigstore
from execution_proof.receipts.attestation import Attestation
from execution_proof.receipts.errors import BadRequest, NotFound, ProofPending
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.shapes import ReceiptObject
from execution_proof.usecases.limiting import Admission, Caller, Limiter
from execution_proof.usecases.log_reading import LogService
from execution_proof.usecases.reading import NOT_FOUND
from execution_proof.usecases.signing_keys import ReceiptKeys

FORMATS = ("dsse", "sigstore")
"""``?format=``: the DSSE envelope (the default) or the Sigstore bundle v0.3."""
ENVELOPE_MEDIA_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class Attested:
    """The answer's body and media type, and the request's admission."""

    body: bytes
    media_type: str
    admission: Admission[None]


def parse_format(value: str | None) -> str:
    """``?format=``: ``dsse`` (absent) or ``sigstore``; ``BadRequest`` naming them otherwise."""
    if value is None or value == "dsse":
        return "dsse"
    if value == "sigstore":
        return value
    raise BadRequest("format must be dsse or sigstore", {"field": "format", "allowed": list(FORMATS)})


class Attester:
    """Renders receipts' attestations."""

    def __init__(self, limiter: Limiter, receipts: ReceiptStore, keys: ReceiptKeys, log: LogService | None) -> None:
        self.limiter = limiter
        self.receipts = receipts
        self.keys = keys
        self.log = log

    async def attest(self, caller: Caller, receipt_id: str, form: str | None) -> Attested:
        """The attestation of ``receipt_id`` in ``form`` (``?format=`` as given).
        ``RateLimited`` for the address, then ``BadRequest`` (the format), ``NotFound``,
        ``ProofPending`` (a Sigstore bundle before a checkpoint covers the leaf) or
        ``NotInLog``."""
        admission: Admission[None] = await self.limiter.admit(caller, "get_receipt")
        chosen = parse_format(form)
        found = await self.receipts.get_attested_receipt(receipt_id) if is_receipt_id(receipt_id) else None
        if found is None:
            raise NotFound(NOT_FOUND)
        receipt_json, kept = found
        if kept is None:
            raise NotFound("no attestation was kept for this receipt")
        receipt: ReceiptObject = orjson.loads(receipt_json)
        attestation = Attestation.of(receipt, kept.log_origin, kept.signature)
        if chosen == "dsse":
            return Attested(attestation.envelope_json(), ENVELOPE_MEDIA_TYPE, admission)
        entry = await self._log_entry(receipt, attestation) if kept.log_origin is not None else None
        body = orjson.dumps(sigstore.bundle(attestation, entry))
        return Attested(body, sigstore.BUNDLE_MEDIA_TYPE, admission)

    async def _log_entry(self, receipt: ReceiptObject, attestation: Attestation) -> dict[str, object] | None:
        """The bundle's log entry for the attestation's leaf; ``ProofPending`` before a
        checkpoint covers it. None when the service keeps no log now (the receipt was issued
        with one: its leaf is proven by the log's own tiles, not by this service)."""
        if self.log is None:
            return None
        ring = await self.keys.knowing(attestation.kid)
        key = ring.keys.get(attestation.kid)
        if key is None:
            raise NotFound("the key that signed this receipt is no longer published")
        leaf = attestation.log_body(key.verify_key.encode())
        proof = await self.log.attestation_proof(receipt, leaf)
        if proof is None:
            raise ProofPending("no published checkpoint covers this receipt's attestation yet; retry shortly")
        verifier = self.log.verifier
        return sigstore.tlog_entry(
            leaf,
            proof.index,
            proof.path,
            proof.checkpoint.size,
            proof.checkpoint.root,
            proof.text,
            sigstore.checkpoint_key_id(verifier.name, verifier.public_key),
        )
