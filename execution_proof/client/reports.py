"""``VerifyReport``: what ``execution_proof.verify`` and the ``verify`` command found, as typed
values (docs/python-api.md). The verifier (client/verifying.py) fills one check at a time:
the receipt against the keys (``KeyCheck``), each local file (``FileCheck``), the service
(``OnlineCheck``), the chain (``ChainCheck`` of ``CheckedLink``), the log (``LogCheck``, in
client/log_checks.py). Its ``to_dict()`` is the ``verify --json`` document; the command
line's text (cli/verify.py) reads the same values. Nothing is checked here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from execution_proof.client.log_checks import LogCheck
    from execution_proof.receipts.shapes import JSONObject, JSONValue
    from execution_proof.receipts.verifier import ReceiptCheck

VALID, INVALID, NOT_VERIFIED, ERROR = "VALID", "INVALID", "NOT VERIFIED", "ERROR"


@dataclass(frozen=True)
class Check:
    """One check of a report: its name (``signature``, ``input_hash``, ``log_inclusion``,
    ...), whether it held, and what was compared."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class KeyCheck:
    """The receipt against the keys: where the keys came from, whose word they are
    (``pinned``, ``service`` or ``bundle``) and what the pure verifier found with them."""

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
        return key


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
        )

    def to_json(self) -> JSONObject:
        if not self.found:
            return {"receipt_hash": self.receipt_hash, "found": False, "ok": self.ok}
        link: JSONObject = {"receipt_id": self.receipt_id, "receipt_hash": self.receipt_hash, "found": True}
        if self.linked is not None:
            link["linked"] = self.linked
        link.update(
            receipt_hash_recompute=self.receipt_hash_recompute,
            signature=self.signature,
            same_project=self.same_project,
            ok=self.ok,
        )
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
    """What ``verify`` found. ``ok``: every check held, against keys you pinned or the
    service's; ``verdict``: ``VALID``, ``INVALID`` or ``NOT VERIFIED`` (a bundle whose
    carried keys were not pinned; ``ERROR`` in the command line's report of an item it could
    not check); ``checks``: each check by name; ``to_dict()``: the ``verify --json`` document.

    The verifier fills it as it checks: a part is None (or empty) until checked. ``error``
    is set by the command line only, when it could not check (``verify`` raises instead);
    what was checked before stays in the report."""

    error: str | None = None
    notes: list[str] = field(default_factory=list)
    bundle: bool | None = None
    """The item was an offline bundle (None: not read)."""
    receipt: JSONObject | None = None
    """The receipt as read (unchecked: the checks below judge it)."""
    key: KeyCheck | None = None
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

    @property
    def ok(self) -> bool:
        return self.error is None and self.key is not None and self.key.pinned and all(self.results.values())

    @property
    def verdict(self) -> str:
        if self.error:
            return ERROR
        if self.ok:
            return VALID
        if not self.keys_pinned and all(self.results.values()):
            return NOT_VERIFIED
        return INVALID

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
        document: JSONObject = {"ok": self.ok, "checks": {**self.results}, "error": self.error, "notes": notes}
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
        return document

    def _detail(self, name: str) -> str:
        key, files = self.key, {checked.field: checked for checked in self.files}
        if key is not None and name == "receipt_hash_recompute":
            return f"receipt_hash recomputed from the fields: {key.receipt.recomputed_receipt_hash}"
        if key is not None and name == "signature":
            return f"Ed25519 signature by key {key.receipt.kid!r} from {key.source} ({key.origin})"
        if key is not None and name == "bundle_keys":
            return f"the bundle's keys against {key.source}"
        if name in files:
            return f"local {files[name].local} against the receipt's {name}"
        if self.online is not None and name == "service_has_receipt":
            return f"{self.online.url}: found {self.online.found}, same {self.online.same}"
        if self.chain is not None and name == "chain":
            return f"{len(self.chain.links)} earlier link(s)"
        return name.replace("_", " ")


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _as_json(value: object) -> JSONValue:
    """A value the verifier copied from a receipt (read as JSON), as it was; anything else as text."""
    if value is None or isinstance(value, str | int | float | list | dict):
        return value
    return str(value)
