"""``verify``'s text: a ``VerifyReport`` (client/reports.py; its ``to_dict()`` is the ``--json``
document) as a person reads it. Nothing is checked here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from execution_proof.client.log_checks import LogCheck
    from execution_proof.client.reports import ChainCheck, KeyCheck, VerifyReport


def _mark(ok: bool) -> str:
    return "[ok]  " if ok else "[FAIL]"


def render_report(report: VerifyReport) -> str:
    """A report a person can read."""
    if report.error:
        return f"error: {report.error}"
    checks, key = report.results, report.key
    receipt = report.receipt or {}
    lines = [f"Receipt {receipt.get('receipt_id')} (project {receipt.get('project_id')}, {receipt.get('created_at')})"]
    if key is not None:
        lines.extend(_key_lines(key))
    for checked in report.files:
        lines.append(
            f"  {_mark(checked.ok)} local file hash {'(salted) ' if checked.salted else ''}"
            f"{checked.local} {'matches' if checked.ok else 'does NOT match'} {checked.field}"
        )
    online = report.online
    if online:
        held = (
            "answers it"
            if online.same
            else ("answers a DIFFERENT receipt under its id" if online.found else "does NOT have it (404)")
        )
        lines.append(f"  {_mark(online.same)} the service {online.url} {held}")
    if report.chain is not None:
        lines.extend(_chain_lines(report.chain))
    if report.log is not None:
        lines.extend(_log_lines(report.log))
    lines.extend(f"  note: {text}" for text in report.notes)
    if report.ok:
        lines.append("Verdict: VALID")
    elif not report.keys_pinned and all(checks.values()):
        lines.append(
            "Verdict: NOT VERIFIED. The bundle is consistent with the keys it carries, but nothing "
            "shows those keys are the service's: anyone can make a key and sign a bundle with it. "
            "Pin the keys: --keys KEYS.json (a GET /v1/public-key body you saved) or --base-url URL "
            "(or SERVICE_BASE_URL) of the service."
        )
    else:
        lines.append("Verdict: INVALID")
    lines.append(
        "(A valid receipt proves these hashes were signed by the service's key; it does not prove the raw data.)"
    )
    return "\n".join(lines)


def _key_lines(key: KeyCheck) -> list[str]:
    found = key.receipt
    lines = [
        f"  {_mark(found.receipt_hash_recompute)} self-consistency: receipt_hash recomputed from the "
        f"fields is {found.recomputed_receipt_hash}"
    ]
    if key.bundle_keys is not None:
        lines.append(
            f"  {_mark(key.bundle_keys)} the bundle's keys "
            + (
                f"are the pinned keys from {key.source}"
                if key.bundle_keys
                else f"are NOT the pinned keys from {key.source} "
                f"(differing kids: {', '.join(key.differing_kids or ['malformed key set'])})"
            )
        )
    if not found.key_known:
        key_text = f"key {found.kid!r} is not in the key set from {key.source}"
    elif not key.pinned:
        key_text = f"Ed25519 signature matches key {found.kid!r} carried by the bundle itself (NOT pinned)"
    else:
        state = "the active key" if found.key_active else "a retired key"
        whose = "pinned by you" if key.origin == "pinned" else "the service's word"
        key_text = f"Ed25519 signature by key {found.kid!r} ({state}, from {key.source}: {whose})"
    lines.append(f"  {_mark(found.signature)} {key_text}")
    return lines


def _chain_lines(chain: ChainCheck) -> list[str]:
    lines = [f"  {_mark(chain.ok)} chain: {len(chain.links)} earlier link(s) checked"]
    if chain.complete is not None:
        lines.append(
            "      complete: the segment reaches the start of the chain (prev_receipt_hash null)"
            if chain.complete
            else "      not complete: earlier receipts are not in the bundle"
        )
        if chain.claimed_complete and not chain.complete:
            lines.append("      [FAIL] the bundle claims chain_complete, but its last receipt has a previous one")
    for link in chain.links:
        if link.linked is False:
            lines.append(f"      [FAIL] {link.receipt_id} is not the receipt its successor names")
        elif not link.found:
            lines.append(f"      [FAIL] {link.receipt_hash} not found (deleted or past retention)")
        else:
            lines.append(f"      {_mark(link.ok)} {link.receipt_id} {link.receipt_hash}")
    if chain.truncated:
        lines.append("      (stopped at --max-links; earlier links not checked)")
    return lines


def _log_lines(log: LogCheck) -> list[str]:
    lines = [f"  {_mark(log.ok)} transparency log: {log.reason}"]
    if log.quorum is not None:
        lines.append(f"  {_mark(log.quorum.ok)} witnesses: {log.quorum.reason}")
    if log.consistency is not None:
        lines.append(f"  {_mark(log.consistency.ok)} {log.consistency.reason}")
    if log.time is not None:
        lines.append(f"  {_mark(log.time.ok)} time: {log.time.reason}")
        for stamp in log.time.stamps or ():
            lines.append(f"      {_mark(stamp.ok)} {stamp.tsa}: {stamp.reason}")
    return lines
