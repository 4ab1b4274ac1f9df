"""``execution_proof.verify`` and its ``VerifyReport``: the library's form of the checks in
client/verifying.py (docs/python-api.md). ``verify`` takes typed arguments and raises when it
could not check; the report wraps the document ``verify --json`` prints."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from execution_proof.client.verifying import FILES, VerifyOptions, check
from execution_proof.receipts import errors

if TYPE_CHECKING:
    from execution_proof.client.models import Bundle, Receipt
    from execution_proof.receipts.trust_root import TrustRoot

VALID, INVALID, NOT_VERIFIED = "VALID", "INVALID", "NOT VERIFIED"


@dataclass(frozen=True)
class Check:
    """One check of a report: its name (``signature``, ``input_hash``, ``log_inclusion``,
    ...), whether it held, and what was compared."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found. ``ok``: every check held, against keys you pinned or the
    service's; ``verdict``: ``VALID``, ``INVALID`` or ``NOT VERIFIED`` (a bundle whose
    carried keys were not pinned); ``to_dict()``: the ``verify --json`` document."""

    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.report.get("ok"))

    @property
    def verdict(self) -> str:
        return verdict_of(self.report)

    @property
    def receipt_id(self) -> str | None:
        value = self.report.get("receipt_id")
        return value if isinstance(value, str) else None

    @property
    def checks(self) -> list[Check]:
        return [Check(name, bool(ok), _detail(name, self.report)) for name, ok in self.report["checks"].items()]

    @property
    def notes(self) -> list[str]:
        return list(self.report.get("notes", []))

    def to_dict(self) -> dict[str, Any]:
        return {**self.report, "verdict": self.verdict}


def verdict_of(report: dict[str, Any]) -> str:
    if report.get("ok"):
        return VALID
    if not report.get("keys_pinned", True) and all(report.get("checks", {}).values()):
        return NOT_VERIFIED
    return INVALID


def _detail(name: str, report: dict[str, Any]) -> str:
    key = report.get("key", {})
    field_names = {field for _, field in FILES}
    if name == "receipt_hash_recompute":
        return f"receipt_hash recomputed from the fields: {report.get('recomputed_receipt_hash')}"
    if name == "signature":
        return f"Ed25519 signature by key {key.get('kid')!r} from {key.get('source')} ({key.get('origin')})"
    if name == "bundle_keys":
        return f"the bundle's keys against {key.get('source')}"
    if name in field_names:
        return f"local {report.get(f'local_{name}')} against the receipt's {name}"
    if name == "service_has_receipt":
        online = report.get("online", {})
        return f"{online.get('url')}: found {online.get('found')}, same {online.get('same')}"
    if name == "chain":
        return f"{len(report.get('chain', {}).get('links', []))} earlier link(s)"
    return name.replace("_", " ")


def verify(
    item: Receipt | Bundle | str | os.PathLike[str],
    *,
    input: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    params: str | os.PathLike[str] | None = None,
    env: str | os.PathLike[str] | None = None,
    trust_root: TrustRoot | str | os.PathLike[str] | None = None,
    keys: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    online: bool = False,
    log_policy: str | os.PathLike[str] | None = None,
    log_key: str | None = None,
    since_checkpoint: str | os.PathLike[str] | None = None,
    tsa_roots: str | os.PathLike[str] | None = None,
    chain: bool = False,
    max_links: int = 1000,
    salt: str | None = None,
) -> VerifyReport:
    """Verify a ``Receipt``, a ``Bundle`` or a saved file (path) without trusting the
    service: ``input`` ... ``env`` are local files whose hashes must be the receipt's; the
    keys are the ``trust_root``'s (offline unless ``online``), else those of ``keys``, else
    the service's. A check that fails is a report with ``ok`` False; an ``execution_proof.Error``
    means it could not check (``InvalidInput``, ``Unreachable``, ``ServiceError``)."""
    from execution_proof.client import models

    document: dict[str, Any] | None = None
    path: str | None = None
    if isinstance(item, models.Receipt | models.Bundle):
        document = item.to_dict()
    elif isinstance(item, str | os.PathLike):
        path = os.fspath(item)
    else:  # an untyped caller's mistake
        raise errors.InvalidInput("verify takes a Receipt, a Bundle or the path of a saved file")
    root = trust_root if not isinstance(trust_root, str | os.PathLike) else None
    options = VerifyOptions(
        receipt_path=path,
        document=document,
        trust_root=root,
        trust_root_path=os.fspath(trust_root) if isinstance(trust_root, str | os.PathLike) else None,
        input_path=_path(input),
        output_path=_path(output),
        params_path=_path(params),
        env_path=_path(env),
        base_url=base_url,
        env_base_url=os.environ.get("SERVICE_BASE_URL") or None,
        keys_path=_path(keys),
        online=online,
        chain=chain,
        max_links=max_links,
        salt_hex=salt,
        log_key=log_key,
        since_checkpoint=_path(since_checkpoint),
        log_policy=_path(log_policy),
        tsa_roots=_path(tsa_roots),
    )
    report: dict[str, Any] = {"ok": False, "checks": {}, "error": None, "notes": []}
    check(options, report)
    return VerifyReport(report)


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)
