"""Docs and comments are self-contained: no pointers into documents outside the repository.

A reader of the repository has no specification, contract or issue tracker beside it, so a
file outside ``tests/`` that cites a numbered section of the specification or the contract,
an issue number, or either document's file name points at nothing (the forms are listed in
``test_the_pattern_catches_each_form``). Each rule is stated in the
repository instead (docs/api.md, docs/receipt-format.md, docs/limits.md, ...) and linked by
file and heading; history goes into CHANGELOG.md.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = {".py", ".md", ".html", ".js", ".mjs", ".toml", ".sh", ".lua", ".css"}
SKIPPED_DIRS = {".git", "tests", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
# Built from parts so that this file does not itself read as such a reference.
OUTSIDE_FILES = ("CONTRACT" + r"\.md", "service" + "-spec")
EXTERNAL_REFERENCE = re.compile(
    r"([Ss]pec|[Cc]ontract|CONTRACT|[Ii]ssue)( section)? ?[0-9§]|" + "|".join(OUTSIDE_FILES) + r"|section [0-9]"
)


def find_external_references(root: Path) -> list[str]:
    """Every ``path:line: text`` under ``root`` that cites a document outside the repository."""
    hits: list[str] = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in SKIPPED_DIRS or not path.is_file() or path.suffix not in EXTENSIONS:
            continue
        if any(part in SKIPPED_DIRS for part in relative.parts[:-1]):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if EXTERNAL_REFERENCE.search(line):
                hits.append(f"{relative}:{number}: {line.strip()}")
    return hits


def test_no_references_to_documents_outside_the_repository() -> None:
    hits = find_external_references(ROOT)
    assert not hits, "state the rule or link a file in the repository instead:\n" + "\n".join(hits)


def test_the_pattern_catches_each_form(tmp_path: Path) -> None:
    forms = ["{word} {n}.3", "{word} section {n}", "({word} {n}.5, 5.7)"]
    words = ("spec", "Spec", "contract", "Contract", "CONTRACT")
    samples = [form.format(word=word, n=4) for word in words for form in forms]
    samples += [f"{word} {8}" for word in ("issue", "Issue")] + [f"Issue {8}'s benchmark"]
    samples += ["see " + "CONTRACT" + ".md", "service" + "-spec.md", "section" + f" {8} steps 2-5"]
    for number, sample in enumerate(samples):
        (tmp_path / f"doc{number}.md").write_text(f"text\n{sample}\n", encoding="utf-8")
    (tmp_path / "clean.md").write_text('the issue script\'s KEYS; docs/api.md, "Errors"\n', encoding="utf-8")
    hits = find_external_references(tmp_path)
    assert len(hits) == len(samples), hits
    assert all(":2: " in hit for hit in hits)
