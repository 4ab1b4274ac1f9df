"""``verify``'s text: the report of ``client/verifying.py`` (the ``--json`` document) as a
person reads it. Nothing is checked here."""

from __future__ import annotations

from typing import Any

from execution_proof.client.verifying import FILES


def _mark(ok: bool) -> str:
    return "[ok]  " if ok else "[FAIL]"


def render_report(report: dict[str, Any]) -> str:
    """A report a person can read."""
    if report.get("error"):
        return f"error: {report['error']}"
    checks = report["checks"]
    key = report.get("key", {})
    lines = [f"Receipt {report.get('receipt_id')} (project {report.get('project_id')}, {report.get('created_at')})"]
    lines.append(
        f"  {_mark(checks['receipt_hash_recompute'])} self-consistency: receipt_hash recomputed from the "
        f"fields is {report.get('recomputed_receipt_hash')}"
    )
    pinned = report.get("keys_pinned", True)
    if "bundle_keys" in checks:
        lines.append(
            f"  {_mark(checks['bundle_keys'])} the bundle's keys "
            + (
                f"are the pinned keys from {key.get('source')}"
                if checks["bundle_keys"]
                else f"are NOT the pinned keys from {key.get('source')} "
                f"(differing kids: {', '.join(key.get('differing_kids') or ['malformed key set'])})"
            )
        )
    if not key.get("known"):
        key_text = f"key {key.get('kid')!r} is not in the key set from {key.get('source')}"
    elif not pinned:
        key_text = f"Ed25519 signature matches key {key.get('kid')!r} carried by the bundle itself (NOT pinned)"
    else:
        state = "the active key" if key.get("active") else "a retired key"
        whose = "pinned by you" if key.get("origin") == "pinned" else "the service's word"
        key_text = f"Ed25519 signature by key {key.get('kid')!r} ({state}, from {key.get('source')}: {whose})"
    lines.append(f"  {_mark(checks['signature'])} {key_text}")
    salted = report.get("salted", [])
    for _, name in FILES:
        if name in checks:
            lines.append(
                f"  {_mark(checks[name])} local file hash {'(salted) ' if name in salted else ''}"
                f"{report[f'local_{name}']} {'matches' if checks[name] else 'does NOT match'} {name}"
            )
    online = report.get("online")
    if online:
        held = (
            "answers it"
            if online["same"]
            else ("answers a DIFFERENT receipt under its id" if online["found"] else "does NOT have it (404)")
        )
        lines.append(f"  {_mark(online['same'])} the service {online['url']} {held}")
    if "chain" in checks:
        chain = report["chain"]
        lines.append(f"  {_mark(checks['chain'])} chain: {len(chain['links'])} earlier link(s) checked")
        if "complete" in chain:
            lines.append(
                "      complete: the segment reaches the start of the chain (prev_receipt_hash null)"
                if chain["complete"]
                else "      not complete: earlier receipts are not in the bundle"
            )
            if chain["claimed_complete"] and not chain["complete"]:
                lines.append("      [FAIL] the bundle claims chain_complete, but its last receipt has a previous one")
        for link in chain["links"]:
            if not link.get("linked", True):
                lines.append(f"      [FAIL] {link['receipt_id']} is not the receipt its successor names")
            elif not link["found"]:
                lines.append(f"      [FAIL] {link['receipt_hash']} not found (deleted or past retention)")
            else:
                lines.append(f"      {_mark(link['ok'])} {link['receipt_id']} {link['receipt_hash']}")
        if chain["truncated"]:
            lines.append("      (stopped at --max-links; earlier links not checked)")
    if report.get("log"):
        from execution_proof.client import log_checks

        lines.extend(log_checks.render(report["log"], _mark))
    lines.extend(f"  note: {text}" for text in report.get("notes", []))
    if report["ok"]:
        lines.append("Verdict: VALID")
    elif not pinned and all(checks.values()):
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
