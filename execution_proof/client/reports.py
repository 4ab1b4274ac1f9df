"""``VerifyReport``: what ``execution_proof.verify`` and the ``verify`` command found, as typed
values (docs/python-api.md). The verifier (client/verifying.py) fills one check at a time:
the receipt against the keys (``KeyCheck``), an attestation (``AttestationCheck``, in
client/attesting.py), each local file (``FileCheck``), the service (``OnlineCheck``), the chain
(``ChainCheck`` of ``CheckedLink``), the log (``LogCheck``, in client/log_checks.py). Its
``to_dict()`` is the ``verify --json`` document; the command line's text (cli/verify.py) reads
the same values. Nothing is checked here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from execution_proof.client.attesting import AttestationCheck
    from execution_proof.client.log_checks import LogCheck
    from execution_proof.receipts.shapes import JSONObject, JSONValue
    from execution_proof.receipts.verifier import ReceiptCheck

VALID, INVALID, NOT_VERIFIED, ERROR = "VALID", "INVALID", "NOT VERIFIED", "ERROR"
"""The verdicts (docs/verdicts.md): ERROR only in the command line's report of an item it
could not check; the library raises instead."""

NOT_VERIFIED_REASONS = (
    "no_keys",
    "deleted",
    "pending",
    "no_log_proof",
    "no_quorum",
    "no_key_certificate",
    "chain_unavailable",
)
"""Why a report is NOT VERIFIED, first applicable first: nothing is wrong, something needed
to say VALID is missing."""
INVALID_REASONS = (
    "bad_signature",
    "hash_mismatch",
    "bad_chain",
    "receipt_changed",
    "bad_log_proof",
    "bad_checkpoint_signature",
    "bad_timestamp",
)
"""Why a report is INVALID: evidence, first found first."""
SIGNATURE_ONLY = "signature_only"
"""The reason of a VALID report for which the log was not asked (``require_log=False``)."""

WHAT_IS_MISSING = {
    "no_keys": "nothing pins the receipt keys, and the keys a bundle carries prove nothing: give --trust-root FILE "
    "(`execution-proof trust-root` writes it), or --keys KEYS.json, or --base-url URL of the service",
    "deleted": "the service no longer has the receipt (deleted, or past retention): verify a bundle you saved, "
    "with --trust-root FILE",
    "pending": "the log has not included the receipt yet: wait and retry (`execution-proof bundle RECEIPT_ID "
    "--wait 60` fetches it with its proof; or --trust-root FILE --online later)",
    "no_log_proof": "the pinned log requires the receipt's inclusion proof and none was checked: add --online to "
    "--trust-root FILE to fetch it, or verify the bundle (`execution-proof bundle RECEIPT_ID --wait 60`) or the "
    "Sigstore bundle (`execution-proof attest RECEIPT_ID --sigstore --wait 60`); --no-log checks the signature alone",
    "no_quorum": "the proof's checkpoint has fewer witness cosignatures than the policy of --trust-root FILE (or "
    "--log-policy) requires, as when a witness is down: fetch the bundle again later",
    "no_key_certificate": "--trust-root FILE pins receipt roots, not keys, and no certificate for the receipt's key "
    "is at hand: add --online to fetch it from the service (GET /v1/public-key), or verify the receipt's bundle "
    "(`execution-proof bundle RECEIPT_ID --out FILE`), which carries it, or pin the key with --keys DIR/keys.json "
    "(`execution-proof trust-root --sigstore DIR` writes it, each key checked against the roots)",
    "chain_unavailable": "an earlier receipt of the chain is no longer on the service (deleted, or past "
    "retention): verify a bundle that carries the chain, with --trust-root FILE",
}
"""The note of each NOT VERIFIED report: the option that supplies what is missing."""


@dataclass(frozen=True)
class Check:
    """One check of a report: its name (``signature``, ``input_hash``, ``log_inclusion``,
    ...), whether it held, and what was compared."""

    name: str
    ok: bool
    detail: str


CERTIFICATE_STATES = (
    "ok",
    "no_key_certificate",
    "unknown_root",
    "bad_certificate",
    "outside_certificate",
    "revoked",
)
"""What a report says of a key judged by the roots of a version 2 trust root (``KeyCheck``'s
``certificate.state``, a chain link's ``key_certificate``): the first two are OK and NOT
VERIFIED ``no_key_certificate``; the others are evidence, INVALID ``bad_signature``."""


def certificate_text(check: ReceiptCheck) -> str:
    """One line saying what the certificate rules found for the receipt's key."""
    kid, certificate, state = check.kid, check.certificate, check.certificate_state
    root = certificate.root_kid if certificate is not None else "?"
    window = f"{certificate.not_before}..{certificate.not_after}" if certificate is not None else "?"
    if state == "ok" and certificate is None:
        return (
            f"key {kid!r} is pinned with --keys (`trust-root --sigstore` checked its certificate against the pinned "
            "roots when it wrote that file)"
        )
    if state == "ok":
        return f"key {kid!r} is certified by the pinned root {root} for {window}, which covers the receipt"
    if state == "no_key_certificate":
        return f"no certificate for key {kid!r} is at hand (neither the document nor what was fetched holds one)"
    if state == "unknown_root":
        return f"key {kid!r} is certified by {root}, a root the trust root does NOT pin"
    if state == "bad_certificate":
        return f"the certificate of key {kid!r} does NOT verify with the root it names ({root})"
    if state == "outside_certificate":
        return f"the receipt was created outside the certificate of key {kid!r} ({window})"
    revocation = check.revocation
    after = f" from {revocation.revoked_after} ({revocation.reason or 'no reason given'})" if revocation else ""
    return f"key {kid!r} is REVOKED by {root}{after}, which covers the receipt"


@dataclass(frozen=True)
class KeyCheck:
    """The receipt against the keys: where the keys came from, whose word they are
    (``pinned``, ``service``, ``bundle``, or ``certified``: keys from a bundle or the service,
    each judged by the pinned roots of a version 2 trust root) and what the pure verifier found
    with them."""

    source: str
    origin: str
    receipt: ReceiptCheck
    bundle_keys: bool | None = None
    """A bundle checked against keys not its own: every key it carries is that key (None: no such check)."""
    differing_kids: tuple[str, ...] = ()

    @property
    def pinned(self) -> bool:
        """The keys are the user's or the service's word, not a bundle's own."""
        return self.origin != "bundle"

    def to_json(self) -> JSONObject:
        key: JSONObject = {
            "source": self.source,
            "origin": self.origin,
            "kid": self.receipt.kid,
            "known": self.receipt.key_known,
            "active": self.receipt.key_active,
        }
        if self.bundle_keys is not None:
            key["differing_kids"] = list(self.differing_kids)
        key["certificate"] = self.certificate_json()
        return key

    def certificate_json(self) -> JSONValue:
        """The key's certificate state (``CERTIFICATE_STATES``) and the certificate's root and
        window; None when no roots are pinned (the keys are trusted as they are)."""
        state = self.receipt.certificate_state
        if state is None:
            return None
        certificate = self.receipt.certificate
        document: JSONObject = {
            "state": state,
            "root_kid": certificate.root_kid if certificate is not None else None,
            "not_before": certificate.not_before if certificate is not None else None,
            "not_after": certificate.not_after if certificate is not None else None,
        }
        if self.receipt.revocation is not None:
            document["revoked_after"] = self.receipt.revocation.revoked_after
        return document


@dataclass(frozen=True)
class FileCheck:
    """A local file hashed (after its salt, if ``salted``) against the receipt's ``field``."""

    field: str
    local: str
    ok: bool
    salted: bool = False


@dataclass(frozen=True)
class OnlineCheck:
    """``--online``: whether the service still answers the receipt, and with the same hash."""

    url: str
    found: bool
    same: bool


@dataclass(frozen=True)
class CheckedLink:
    """One earlier receipt of the chain, as the verifier judged it. ``found`` False: the
    service has it no more (only ``receipt_hash`` is known). ``linked`` is None on a walk
    through the service (the receipt was fetched by the hash its successor names)."""

    receipt_hash: JSONValue
    found: bool
    ok: bool
    receipt_id: JSONValue = None
    linked: bool | None = None
    receipt_hash_recompute: bool | None = None
    signature: bool | None = None
    same_project: bool | None = None
    key_certificate: str | None = None
    """With pinned roots: the state of the link's key (``CERTIFICATE_STATES``)."""

    @property
    def lacks_certificate(self) -> bool:
        """The link fails only because no certificate for its key is at hand (NOT VERIFIED)."""
        return (
            self.found
            and self.key_certificate == "no_key_certificate"
            and self.linked is not False
            and self.receipt_hash_recompute is True
            and self.same_project is True
        )

    @classmethod
    def judged(cls, step: Mapping[str, object]) -> CheckedLink:
        """From the verifier's report of one link (receipts/verifier.py: ``walk_step``,
        ``check_bundle_chain``), whichever mapping type it answers with."""
        return cls(
            receipt_hash=_as_json(step.get("receipt_hash")),
            found=step.get("found") is True,
            ok=step.get("ok") is True,
            receipt_id=_as_json(step.get("receipt_id")),
            linked=_flag(step.get("linked")),
            receipt_hash_recompute=_flag(step.get("receipt_hash_recompute")),
            signature=_flag(step.get("signature")),
            same_project=_flag(step.get("same_project")),
            key_certificate=state if isinstance(state := step.get("key_certificate"), str) else None,
        )

    def to_json(self) -> JSONObject:
        if not self.found:
            return {"receipt_hash": self.receipt_hash, "found": False, "ok": self.ok}
        link: JSONObject = {"receipt_id": self.receipt_id, "receipt_hash": self.receipt_hash, "found": True}
        if self.linked is not None:
            link["linked"] = self.linked
        link.update(receipt_hash_recompute=self.receipt_hash_recompute, signature=self.signature)
        if self.key_certificate is not None:
            link["key_certificate"] = self.key_certificate
        link.update(same_project=self.same_project, ok=self.ok)
        return link


@dataclass(frozen=True)
class ChainCheck:
    """The earlier receipts, newest first: a bundle's segment (``complete``: it reaches the
    chain's start; ``claimed_complete``: the bundle says so), or a walk through the service
    (``truncated``: stopped at ``max_links``)."""

    links: tuple[CheckedLink, ...]
    ok: bool
    truncated: bool = False
    complete: bool | None = None
    claimed_complete: bool | None = None

    def to_json(self) -> JSONObject:
        chain: JSONObject = {"links": [link.to_json() for link in self.links], "truncated": self.truncated}
        if self.complete is not None:
            chain.update(complete=self.complete, claimed_complete=self.claimed_complete)
        return chain


@dataclass
class VerifyReport:
    """What ``verify`` found. ``verdict``: ``VALID``, ``INVALID`` (evidence: something checked
    is wrong) or ``NOT VERIFIED`` (something needed is missing: ``notes`` names the option that
    supplies it); ``reason``: why, from docs/verdicts.md's closed lists; ``ok``: the verdict is
    VALID; ``checks``: each check by name; ``to_dict()``: the ``verify --json`` document;
    ``raise_for_failure()``: ``VerificationFailed`` unless VALID.

    The verifier fills it as it checks: a part is None (or empty) until checked. ``error``
    is set by the command line only, when it could not check (``verify`` raises instead);
    what was checked before stays in the report."""

    error: str | None = None
    error_kind: str | None = None
    """The class name of the exception that stopped the check (with ``error``)."""
    remarks: list[str] = field(default_factory=list)
    """What the verifier noted while checking (``notes`` adds what a NOT VERIFIED lacks)."""
    missing: list[str] = field(default_factory=list)
    """NOT VERIFIED reasons the verifier found with no check to show them (``no_log_proof``)."""
    signature_only: bool = False
    """The log was not asked for (``require_log=False``, ``--no-log``)."""
    bundle: bool | None = None
    """The item was an offline bundle (None: not read)."""
    receipt: JSONObject | None = None
    """The receipt as read (unchecked: the checks below judge it)."""
    key: KeyCheck | None = None
    attestation: AttestationCheck | None = None
    """The attestation that carried the receipt, or came with it (an envelope, a Sigstore
    bundle, a bundle's ``attestation`` member)."""
    files: list[FileCheck] = field(default_factory=list)
    online: OnlineCheck | None = None
    chain: ChainCheck | None = None
    log: LogCheck | None = None
    item: str | None = None
    """What the command line was given (a file, ``-`` or a receipt id)."""

    @property
    def results(self) -> dict[str, bool]:
        """Each check's name and whether it held, in the order they were made."""
        results: dict[str, bool] = {}
        if self.key is not None:
            if self.key.bundle_keys is not None:
                results["bundle_keys"] = self.key.bundle_keys
            results["receipt_hash_recompute"] = self.key.receipt.receipt_hash_recompute
            results["signature"] = self.key.receipt.signature
            state = self.key.receipt.certificate_state
            if state is not None:
                results["key_certificate"] = state == "ok"
        if self.attestation is not None:
            results.update(self.attestation.results())
        results.update((checked.field, checked.ok) for checked in self.files)
        if self.online is not None:
            results["service_has_receipt"] = self.online.same
        if self.chain is not None:
            results["chain"] = self.chain.ok
        if self.log is not None:
            results.update(self.log.results())
        return results

    @property
    def keys_pinned(self) -> bool:
        return self.key is None or self.key.pinned

    def findings(self) -> tuple[list[str], list[str]]:
        """(INVALID reasons, NOT VERIFIED reasons) of what was checked, in the lists' orders."""
        invalid: set[str] = set()
        missing: set[str] = set(self.missing)
        key = self.key
        if key is None:
            missing.add("no_keys")
        else:
            if not key.pinned:
                missing.add("no_keys")
            state = key.receipt.certificate_state
            if key.bundle_keys is False or not key.receipt.receipt_hash_recompute:
                invalid.add("bad_signature")
            elif state == "no_key_certificate":
                missing.add("no_key_certificate")  # no key to check the signature with, or none trusted
            elif state not in (None, "ok") or not key.receipt.signature:
                invalid.add("bad_signature")
        if self.attestation is not None and self.attestation.evidence:
            invalid.add("bad_signature")
        if any(not checked.ok for checked in self.files):
            invalid.add("hash_mismatch")
        if self.online is not None and not self.online.same:
            (invalid.add("receipt_changed") if self.online.found else missing.add("deleted"))
        if self.chain is not None and not self.chain.ok:
            self._chain_findings(self.chain, invalid, missing)
        if self.log is not None:
            self._log_findings(self.log, invalid, missing)
        return (
            [reason for reason in INVALID_REASONS if reason in invalid],
            [reason for reason in NOT_VERIFIED_REASONS if reason in missing],
        )

    @staticmethod
    def _chain_findings(chain: ChainCheck, invalid: set[str], missing: set[str]) -> None:
        """A chain that is not ok: NOT VERIFIED when every failing link only lacks something
        (a predecessor the service no longer has, a certificate for its key), else INVALID."""
        failing = [link for link in chain.links if not link.ok]
        broken_claim = chain.claimed_complete is True and chain.complete is False
        if broken_claim or not failing or not all(not link.found or link.lacks_certificate for link in failing):
            invalid.add("bad_chain")
            return
        for link in failing:
            missing.add("chain_unavailable" if not link.found else "no_key_certificate")

    @staticmethod
    def _log_findings(log: LogCheck, invalid: set[str], missing: set[str]) -> None:
        inclusion = log.inclusion
        if inclusion is None:
            missing.add("pending")
        elif not inclusion.ok:
            unsigned = inclusion.checkpoint is None and bool(inclusion.checkpoint_note)
            invalid.add("bad_checkpoint_signature" if unsigned else "bad_log_proof")
        if log.consistency is not None and not log.consistency.ok:
            invalid.add("bad_log_proof")
        if log.quorum is not None and not log.quorum.ok:
            missing.add("no_quorum")
        if log.time is not None and not log.time.ok and inclusion is not None and inclusion.ok:
            # No time-stamp yet is a wait; a time-stamp that does not verify is evidence.
            (invalid.add("bad_timestamp") if log.time.stamps else missing.add("pending"))

    @property
    def verdict(self) -> str:
        if self.error:
            return ERROR
        invalid, missing = self.findings()
        if invalid:
            return INVALID
        if missing:
            return NOT_VERIFIED
        return VALID

    @property
    def reason(self) -> str | None:
        """Why the verdict (docs/verdicts.md): None for a VALID report of every check asked
        for, and for ERROR (``error`` says why)."""
        if self.error:
            return None
        invalid, missing = self.findings()
        if invalid:
            return invalid[0]
        if missing:
            return missing[0]
        return SIGNATURE_ONLY if self.signature_only else None

    @property
    def ok(self) -> bool:
        """The verdict is VALID."""
        return self.verdict == VALID

    @property
    def notes(self) -> list[str]:
        """What the verifier noted, then, for a NOT VERIFIED report, the option that supplies
        what is missing."""
        reason = self.reason
        if self.verdict == NOT_VERIFIED and reason in WHAT_IS_MISSING:
            return [*self.remarks, WHAT_IS_MISSING[reason]]
        return [*self.remarks]

    def raise_for_failure(self) -> None:
        """``VerificationFailed`` (carrying this report) unless the verdict is VALID."""
        if not self.ok:
            from execution_proof.receipts.errors import VerificationFailed

            raise VerificationFailed(self)

    @property
    def receipt_id(self) -> str | None:
        value = self.receipt.get("receipt_id") if self.receipt is not None else None
        return value if isinstance(value, str) else None

    @property
    def checks(self) -> list[Check]:
        return [Check(name, ok, self._detail(name)) for name, ok in self.results.items()]

    def to_dict(self) -> JSONObject:
        """The ``verify --json`` document (its members in the order the checks were made)."""
        notes: list[JSONValue] = [*self.notes]
        error: JSONValue = None if self.error is None else {"kind": self.error_kind, "message": self.error}
        document: JSONObject = {"ok": self.ok, "checks": {**self.results}, "error": error, "notes": notes}
        if self.bundle is not None:
            document["bundle"] = self.bundle
        if self.receipt is not None:
            for name in ("receipt_id", "project_id", "created_at", "receipt_hash", "sig_kid"):
                document[name] = self.receipt.get(name)
        if self.key is not None:
            document.update(
                keys_pinned=self.key.pinned,
                key=self.key.to_json(),
                recomputed_receipt_hash=self.key.receipt.recomputed_receipt_hash,
            )
        if self.attestation is not None:
            document["attestation"] = self.attestation.to_json()
        salted: list[JSONValue] = [checked.field for checked in self.files if checked.salted]
        for checked in self.files:
            document[f"local_{checked.field}"] = checked.local
            if checked.salted and "salted" not in document:
                document["salted"] = salted
        if self.online is not None:
            document["online"] = {"url": self.online.url, "found": self.online.found, "same": self.online.same}
        if self.chain is not None:
            document["chain"] = self.chain.to_json()
        if self.log is not None:
            document["log"] = self.log.to_json()
        if self.item is not None:
            document["item"] = self.item
        document["verdict"] = self.verdict
        document["reason"] = self.reason
        return document

    def _detail(self, name: str) -> str:
        key, files = self.key, {checked.field: checked for checked in self.files}
        if key is not None and name == "receipt_hash_recompute":
            return f"receipt_hash recomputed from the fields: {key.receipt.recomputed_receipt_hash}"
        if key is not None and name == "signature":
            return f"Ed25519 signature by key {key.receipt.kid!r} from {key.source} ({key.origin})"
        if key is not None and name == "key_certificate":
            return certificate_text(key.receipt)
        if key is not None and name == "bundle_keys":
            return f"the bundle's keys against {key.source}"
        if self.attestation is not None and name.startswith("attestation_"):
            return self.attestation.detail(name)
        if name in files:
            return f"local {files[name].local} against the receipt's {name}"
        if self.online is not None and name == "service_has_receipt":
            return f"{self.online.url}: found {self.online.found}, same {self.online.same}"
        if self.chain is not None and name == "chain":
            return f"{len(self.chain.links)} earlier link(s)" + (", complete" if self.chain.complete else "")
        log = self.log
        if log is not None and name == "log_inclusion":
            return log.reason
        if log is not None and log.quorum is not None and name == "log_quorum":
            return f"witnesses: {log.quorum.reason}"
        if log is not None and log.consistency is not None and name == "log_consistency":
            return log.consistency.reason
        if log is not None and log.time is not None and name == "log_time":
            return log.time.reason
        return name.replace("_", " ")


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _as_json(value: object) -> JSONValue:
    """A value the verifier copied from a receipt (read as JSON), as it was; anything else as text."""
    if value is None or isinstance(value, str | int | float | list | dict):
        return value
    return str(value)
