"""What ``monitor`` prints (cli/monitor.py): each pass's report as text, or with ``--json``
as one JSON document on one line; a failure as ``error: ...`` on stderr, or with ``--json``
as one document on stdout, ``{"ok": false, "error": {"kind", "message"}}`` beside the members
of a report known when it failed. Under ``--json`` nothing else goes to stdout, whatever
happens: a usage error that argparse finds (``MonitorParser``) is a document too.

``kind`` is the library exception's class name the failure is (``error_kind``):
``UsageError`` (the command line), ``Unreachable`` (the log gave no usable reply),
``ServiceError`` (the log answered, not with what a log serves), ``InvalidInput`` (a key, a
policy, an environment variable, the state directory, another log's URL or key, the state
directory's lock held by another monitor), and ``KeyboardInterrupt`` for Ctrl-C (exit 130).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, NoReturn

import orjson

from execution_proof.cli.monitor_fetch import LogReplyError
from execution_proof.cli.monitor_state import PassReport
from execution_proof.cli.output import UsageError
from execution_proof.receipts import errors


def error_kind(exc: BaseException) -> str:
    """The ``kind`` of a failure's ``--json`` document (the module docstring): the library's
    own class (``errors.error_kind``) for an error that is one, else the class it stands for."""
    if isinstance(exc, UsageError):
        return "UsageError"
    if isinstance(exc, LogReplyError):
        return "ServiceError"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt"
    if any(cls.__module__ == errors.__name__ for cls in type(exc).__mro__):
        return errors.error_kind(exc)  # Unreachable (LogUnreachable, HttpError), InvalidInput, ...
    return "InvalidInput"  # a key, a policy, the state, another log: what the monitor was given


class Output:
    """Where a run's reports and failures go: each pass's JSON document on stdout, always (a
    violation is exit 1 with a JSON report naming it, as it always was); without ``--json``
    (``json`` False) the same report as text for people on stderr too."""

    def __init__(self, *, json: bool, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.json = json
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr

    def report(self, report: PassReport, *, require_quorum: bool) -> None:
        if not self.json:
            self.err.write("".join(line + "\n" for line in text(report, require_quorum=require_quorum)))
            self.err.flush()
        self._document(report)

    def failure(self, exc: BaseException, message: str, known: Mapping[str, object] | None = None) -> None:
        """A failure: ``message`` on stderr, and with ``--json`` its document on stdout with
        the report's members ``known`` when it happened (its message: the exception's, else
        ``message``)."""
        print(message, file=self.err, flush=True)
        reason = str(exc) or message
        members = {name: value for name, value in (known or {}).items() if name not in ("ok", "error")}
        self._document({"ok": False, **members, "error": {"kind": error_kind(exc), "message": reason}})

    def _document(self, document: Mapping[str, Any]) -> None:
        self.out.write(orjson.dumps(document).decode() + "\n")
        self.out.flush()


def text(report: PassReport, *, require_quorum: bool) -> list[str]:
    """A pass's report as lines for people."""
    checkpoint = report.get("checkpoint")
    at = f"{checkpoint['origin']} at size {checkpoint['size']}" if checkpoint else "the log"
    lines: list[str] = []
    violations = report["violations"]
    if not violations:
        new = report.get("new_entries")
        checked = f" ({new:,} new entries checked)" if new is not None else ""
        lines.append(f"monitor: {at}: the log holds together{checked}")
    lines += new_key_lines(report)
    unwitnessed = report["unwitnessed_since"]
    quorum = report.get("quorum")
    if unwitnessed is not None:
        why = f": {quorum['reason']}" if quorum and not quorum["ok"] else ""
        lines.append(
            f"monitor: UNWITNESSED since size {unwitnessed['size']} (first seen {unwitnessed['seen_at']}): "
            f"the checkpoint is below the witness policy's quorum{why}"
        )
        lines.append(
            "monitor: "
            + (
                "--require-quorum: exit 1 while the newest checkpoint misses the quorum"
                if require_quorum and quorum and not quorum["ok"]
                else "not a violation: a log publishes while a witness is down (--require-quorum makes it exit 1)"
            )
        )
    if violations:
        lines.append(f"monitor: {at}: {len(violations)} VIOLATION(S), kept in the state directory:")
        for violation in violations:
            where = f" at entry {violation['index']}" if "index" in violation else ""
            project = f" (project {violation['project_id']})" if "project_id" in violation else ""
            lines.append(f"  {violation['kind']}{where}{project}: {violation['detail']}")
    return lines


PINNED = {True: "pinned", False: "NOT PINNED by --trust-root", None: "not judged: no --trust-root"}


def new_key_lines(report: PassReport) -> list[str]:
    """A line per key whose certificate this pass read (the report's ``keys`` at or past the
    first entry it read)."""
    checkpoint, new = report.get("checkpoint"), report.get("new_entries")
    size = checkpoint.get("size") if checkpoint else None
    if not isinstance(size, int) or new is None:
        return []
    return [
        f"monitor: key {key['kid']} (entry {key['index']}), certified by {key['root_kid']} "
        f"({PINNED[key['root_pinned']]}) for {key['not_before']} to {key['not_after']}"
        + (f", revoked after {key['revoked_after']}" if key["revoked_after"] is not None else "")
        for key in report["keys"]
        if key["index"] >= size - new
    ]


class MonitorParser(argparse.ArgumentParser):
    """The ``monitor`` verb's parser: with ``--json`` among its arguments, a usage error (an
    option missing, a value refused, an option it does not know) is a ``UsageError``
    document on stdout (and the usage on stderr), exit 2, as argparse's own."""

    json_asked = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        self.json_asked = any(a.startswith("--j") and "--json".startswith(a) for a in given)
        parsed, extra = super().parse_known_args(given, namespace)
        if extra and self.json_asked:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra

    def error(self, message: str) -> NoReturn:
        if not self.json_asked:
            super().error(message)
        self.print_usage(sys.stderr)
        Output(json=True).failure(UsageError(message), f"{self.prog}: error: {message}")
        self.exit(2)
