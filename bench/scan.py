"""``python -m bench --scenarios scan``: the content scan's cost, typical and worst case.

No service and no Redis: the full request parse (``receipts.model.parse_create_request`` on
the decoded JSON) timed in-process with ``timeit`` (CPU time). Two tables:

- per create body: a typical body, and for every adversarial shape the largest legal body
  filled with it (``code_ref`` and ``run_id`` at 256 characters, tags up to the 2,048-byte
  limit). The 16 KB body cap cannot add scanned text beyond that: every other field is a hash
  or a fixed word, so these are the worst create bodies the scan ever sees.
- per 16 KiB string: ``find_forbidden`` on one 16,384-character string of each shape, as if
  the length limits were gone; linear time shows as a cost that grows with the length only.

The shapes are also those of the content scan's property test (keep both in step).
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable
from typing import Any

import orjson

from execution_proof.receipts.content_scan import find_forbidden
from execution_proof.receipts.errors import ServiceError
from execution_proof.receipts.model import MAX_TAG_KEY_LEN, MAX_TAG_VALUE_LEN, MAX_TAGS, MAX_TAGS_BYTES, MAX_TEXT_LEN
from execution_proof.receipts.model import parse_create_request as parse

STRING_LEN = 16_384
SHAPES: tuple[tuple[str, str], ...] = (
    ("a.", "a."),
    ("a@", "a@"),
    ("a@a.", "a@a."),
    ("a-", "a-"),
    ("digits", "1"),
    ("1 ", "1 "),
    ("1.", "1."),
    ("1_", "1_"),
    ("12  ", "12  "),
    ("+1", "+1"),
    ("+1 ", "+1 "),
    ("00 1", "00 1"),
    ("eyJ", "eyJ"),
    ("eyJa.", "eyJa."),
    ("-----BEGIN ", "-----BEGIN "),
    ("-----BEGIN A ", "-----BEGIN A "),
    ("bearer ", "bearer "),
    ("eps_", "eps_"),
    ("AKIA", "AKIA"),
    ("sk-", "sk-"),
    ("glpat-", "glpat-"),
    ("xoxb-", "xoxb-"),
    ("github_pat_", "github_pat_"),
    ("AccountKey=", "AccountKey="),
    ("SG.", "SG."),
    ("full-width digits", "\uff11"),
    ("zero-width", "a\u200b"),
    ("mix", "a.1 +1@eyJ-"),
)
"""Repeated units (the property test's shapes, filled to each field's limit)."""
HASH = "sha256:" + "ab" * 32
TYPICAL_BODY: dict[str, Any] = {
    "input_hash": HASH,
    "output_hash": HASH,
    "code_ref": "git:9fceb02d0ae598e95dc970b74767f19372d61af8",
    "run_id": "run-000123",
    "receipt_kind": "release",
    "tags": {
        "workflow_stage": "build",
        "pipeline": "build-20261123-1234",
        "version": "1.4.2",
        "image": "sha256:" + "0f" * 32,
    },
}


def fill(unit: str, length: int) -> str:
    return (unit * (length // len(unit) + 1))[:length]


def adversarial_body(unit: str) -> dict[str, Any]:
    """The largest legal create body whose scanned strings all repeat ``unit``."""
    tags: dict[str, str] = {}
    text = fill(unit, MAX_TAG_KEY_LEN + MAX_TAG_VALUE_LEN)
    for index in range(MAX_TAGS):
        prefix = chr(ord("a") + index) + "="  # distinct keys; no digits to join the shape's
        key = prefix + text[: MAX_TAG_KEY_LEN - len(prefix)]
        value_len = MAX_TAG_VALUE_LEN
        while value_len > 0 and len(orjson.dumps({**tags, key: text[:value_len]})) > MAX_TAGS_BYTES:
            value_len -= 1
        if value_len == 0:
            break
        tags[key] = text[:value_len]
    return {
        "input_hash": HASH,
        "code_ref": fill(unit, MAX_TEXT_LEN),
        "run_id": fill(unit, MAX_TEXT_LEN),
        "tags": tags,
    }


def scanned_chars(body: dict[str, Any]) -> int:
    return len(body["code_ref"]) + len(body["run_id"]) + sum(len(k) + len(v) for k, v in body["tags"].items())


def parse_or_refuse(body: dict[str, Any]) -> str:
    """The kind refused, or "passes"."""
    try:
        parse(body)
    except ServiceError as exc:
        details = getattr(exc, "details", None) or {}
        return str(details.get("kind") or details.get("reason") or type(exc).__name__)
    return "passes"


def best_us(call: Callable[[], object], budget_s: float = 0.2) -> float:
    """Best of 5 ``timeit`` runs, in CPU µs per call (process time: steadier than wall-clock time
    on a shared machine); each run sized to take about budget_s / 5."""
    timer = timeit.Timer(call, timer=time.process_time)
    once = max(timer.timeit(1), 1e-7)
    number = max(1, int(budget_s / 5 / once))
    return min(timer.repeat(5, number)) / number * 1e6


def report() -> list[str]:
    lines = [
        "## Content scan cost",
        "",
        f"Typical create body ({len(orjson.dumps(TYPICAL_BODY))} bytes, "
        f"{scanned_chars(TYPICAL_BODY)} scanned characters): "
        f"**{best_us(lambda: parse(TYPICAL_BODY)):.1f} µs** per full parse.",
        "",
        "| shape | body bytes | scanned chars | parse µs / body | result | scan µs / 16 KiB string |",
        "|---|---:|---:|---:|---|---:|",
    ]
    worst = (0.0, "")
    for name, unit in SHAPES:
        body = adversarial_body(unit)
        per_body = best_us(lambda body=body: parse_or_refuse(body))  # type: ignore[misc]
        text = fill(unit, STRING_LEN)
        per_string = best_us(lambda text=text: find_forbidden(text), budget_s=0.1)  # type: ignore[misc]
        worst = max(worst, (per_body, name))
        lines.append(
            f"| `{name!s}` | {len(orjson.dumps(body))} | {scanned_chars(body)} | {per_body:.1f} | "
            f"{parse_or_refuse(body)} | {per_string:.0f} |"
        )
    lines += ["", f"Worst create body: **{worst[0]:.1f} µs** (`{worst[1]}`)."]
    return lines


def main() -> int:
    print("\n".join(report()))
    return 0
