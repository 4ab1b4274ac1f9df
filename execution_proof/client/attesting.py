"""The attestation part of ``verify`` (docs/verdicts.md, "Attestations"): a DSSE envelope, a
Sigstore bundle, or a bundle's ``attestation`` member, checked against the receipt and the key
the rest of the verification judged (receipts/attestation_checks.py decides). What it finds is
an ``AttestationCheck``: the report's ``attestation`` member and its ``attestation_*`` checks.

The receipt inside an attestation is verified exactly as a bare receipt is; this adds that the
envelope is signed by that receipt's key under its ``sig_kid``, and, for a bundle's member, that
it carries the bundle's own receipt and log origin. Anything wrong here is evidence: INVALID
``bad_signature``. No key at hand is what the key check says (``no_key_certificate`` or
``no_keys``), not evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from execution_proof.receipts.attestation_checks import EnvelopeCheck, check_envelope

if TYPE_CHECKING:
    from execution_proof.client.documents import Attested
    from execution_proof.receipts.shapes import JSONObject
    from execution_proof.receipts.signing import KeyRing
    from execution_proof.receipts.verifier import BundleParts


@dataclass(frozen=True)
class AttestationCheck:
    """The attestation against the receipt: its ``form`` (``envelope``, ``sigstore``, or
    ``bundle`` for a bundle's member), the envelope's key and signature, and for a bundle's
    member whether it carries the bundle's receipt and log origin (None for the other forms;
    ``origin_same`` None too for a bundle without ``log``, which is read as a bundle of a
    service without a log: the pinned log's rule decides, ``no_log_proof``)."""

    form: str
    envelope: EnvelopeCheck
    log_origin: str | None
    receipt_same: bool | None = None
    origin_same: bool | None = None

    @property
    def evidence(self) -> bool:
        """Something checked is wrong: a keyid or hint that is not the receipt's kid, a
        signature that does not verify, a bundle's member of another receipt or log."""
        return (
            not self.envelope.kid_matches
            or self.envelope.signature is False
            or self.receipt_same is False
            or self.origin_same is False
        )

    def results(self) -> dict[str, bool]:
        """The report's ``attestation_*`` checks: the signature (False too with no key to check
        it with, as the receipt's own ``signature`` check), and a bundle's member's receipt."""
        results = {"attestation_signature": self.envelope.ok}
        if self.receipt_same is not None:
            results["attestation_receipt"] = self.receipt_same and self.origin_same is not False
        return results

    def remarks(self) -> list[str]:
        """What the report notes beside the checks: a bundle whose log member was left out."""
        if self.form != "bundle" or self.origin_same is not None:
            return []
        return [
            f"the bundle has no log member, though its attestation says the receipt entered the log "
            f"{self.log_origin!r}: it is read as a bundle of a service without a log"
        ]

    def detail(self, name: str) -> str:
        envelope = self.envelope
        if name == "attestation_receipt":
            if not self.receipt_same:
                return "the bundle's attestation carries ANOTHER receipt than the bundle's"
            if self.origin_same is False:
                return f"the bundle's attestation names ANOTHER log ({self.log_origin!r}) than the bundle's"
            if self.origin_same is None:
                return f"the bundle's attestation carries its receipt (and names the log {self.log_origin!r})"
            return "the bundle's attestation carries the bundle's receipt and log origin"
        named = f"keyid {envelope.keyid!r}" + (f", key hint {envelope.hint!r}" if envelope.hint is not None else "")
        if not envelope.kid_matches:
            return f"the envelope's {named} is NOT the receipt's sig_kid"
        if envelope.signature is None:
            return f"no key {envelope.keyid!r} at hand to check the envelope's signature with"
        said = "is" if envelope.signature else "is NOT"
        return f"the {self.form} envelope's signature over its PAE {said} by the receipt's key ({named})"

    def to_json(self) -> JSONObject:
        envelope = self.envelope
        document: JSONObject = {
            "form": self.form,
            "keyid": envelope.keyid,
            "keyid_matches": envelope.kid_matches,
            "signature": envelope.signature,
            "log_origin": self.log_origin,
        }
        if envelope.hint is not None:
            document["hint"] = envelope.hint
        if self.receipt_same is not None:
            document.update(receipt_same=self.receipt_same, origin_same=self.origin_same)
        return document


def check(attested: Attested, receipt: JSONObject, keyring: KeyRing, bundle: BundleParts | None) -> AttestationCheck:
    """``attested`` against ``receipt`` (the document's: for a bundle, its own) and the key
    ``keyring`` holds for its ``sig_kid`` (the key the receipt's signature was checked with)."""
    kid = receipt.get("sig_kid")
    key = keyring.keys.get(kid) if isinstance(kid, str) else None
    public = bytes(key.verify_key) if key is not None else None
    envelope = check_envelope(attested.attestation, receipt, public, attested.hint)
    if attested.form != "bundle" or bundle is None:
        return AttestationCheck(attested.form, envelope, attested.log_origin)
    if bundle.log is not None:
        origin_same: bool | None = attested.log_origin == bundle.log.get("origin")
    else:  # a service without a log writes null; a log member taken out is the log rule's to judge
        origin_same = None if attested.log_origin is not None else True
    return AttestationCheck(
        attested.form,
        envelope,
        attested.log_origin,
        receipt_same=dict(attested.receipt) == dict(bundle.receipt),
        origin_same=origin_same,
    )
