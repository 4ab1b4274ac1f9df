"""What a log monitor checks, pure (the I/O is cli/monitor.py).

State (kept between runs): the last checkpoint seen (size, root) and, per project, the main
chain's tip and every ``prev_receipt_hash`` a main entry used. For each new entry, in log
order, a ``main`` entry must not reuse a previous hash another main entry of its project used
(a fork of the chain), and its previous hash must be the project's tip so far (else the chain
split); the first main entry of a project, or one whose previous hash is null (history that
expired, or a new start), may start anywhere.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from receipts import tlog


@dataclass
class Violation:
    kind: str
    """``signature``, ``quorum``, ``inconsistent``, ``chain_fork``, ``chain_split`` or ``entry``."""
    detail: str
    index: int | None = None
    project_id: str | None = None

    def json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class MonitorState:
    size: int = 0
    root: bytes = tlog.EMPTY_ROOT
    tips: dict[str, str] = field(default_factory=dict)
    prevs: dict[str, list[str]] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "tips": self.tips,
            "prevs": self.prevs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MonitorState:
        return cls(int(data["size"]), base64.b64decode(data["root"]), dict(data["tips"]), dict(data["prevs"]))


def check_entries(state: MonitorState, first_index: int, entries: list[bytes]) -> list[Violation]:
    """Apply new entries (indices ``first_index``...) to the per-project chain state."""
    violations = []
    for offset, entry in enumerate(entries):
        index = first_index + offset
        try:
            fields = tlog.parse_entry(entry)
        except (ValueError, UnicodeDecodeError) as exc:
            violations.append(Violation("entry", f"not a log entry: {exc}", index))
            continue
        if fields["chain_status"] != "main":
            continue
        project = str(fields["project_id"])
        prev = fields["prev_receipt_hash"]
        used = state.prevs.setdefault(project, [])
        if prev is not None and prev in used:
            violations.append(
                Violation(
                    "chain_fork", f"a second main receipt ({fields['receipt_id']}) follows {prev}", index, project
                )
            )
        elif prev is not None and project in state.tips and state.tips[project] != prev:
            violations.append(
                Violation(
                    "chain_split",
                    f"main receipt {fields['receipt_id']} follows {prev}, not the project's tip {state.tips[project]}",
                    index,
                    project,
                )
            )
        if prev is not None:
            used.append(prev)
        state.tips[project] = str(fields["receipt_hash"])
    return violations
