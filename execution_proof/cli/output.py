"""What every client verb prints: JSON documents, an error's one line, its exit code, and
the help text's shared parts (cli/client.py, cli/verify.py, cli/trust_root.py, cli/main.py).

``--json`` prints exactly one JSON document on stdout whatever happens: a success has
``"ok": true`` beside the verb's own members (``json_ok``); a failure is
``{"ok": false, "error": {"kind", "message"}}`` beside the members known at that point
(``json_failure``), where ``kind`` is the library exception's public class name
(``error_member``) or ``UsageError`` for bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from execution_proof.errors import Error

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
EXIT_CODES = "exit status: 0 {ok}; 1 {one}; 2 {two}; 130 interrupted (Ctrl-C). No traceback in any of them."
SERVICE_ENV = (
    "environment: SERVICE_BASE_URL (the service, when --base-url is not given; default " + DEFAULT_BASE_URL + ")"
)
USAGE_ERROR = "UsageError"
JSON_HELP = "print one JSON document on stdout whatever happens (failures too: ok false, error kind and message)"
"""The ``--json`` option's help on every client verb (each adds what its document holds)."""
"""Where the library's own errors and the service's error classes are defined: each is a
``kind`` under its own name."""


class UsageError(Error):
    """Bad usage: an option argparse refused, or one whose value or combination the verb
    refuses before doing anything (exit 2; ``kind`` ``UsageError``)."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, keeping the line breaks of a description or epilog: each line is
    a paragraph of its own (``environment: ...`` and ``exit status: ...`` on lines of their
    own), wrapped to the terminal's width."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(super(HelpFormatter, self)._fill_text(line, width, indent) for line in text.split("\n"))


def epilog(environment: str, *, ok: str, one: str, two: str) -> str:
    """A verb's help epilog: its environment variables on one line, its exit codes on the next."""
    return f"environment: {environment}\n" + EXIT_CODES.format(ok=ok, one=one, two=two)


def count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def print_json(value: object) -> None:
    """``value`` as indented JSON: a document built here, or a typed one (a receipt, a report's)."""
    import orjson

    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def error_kind(exc: BaseException) -> str:
    """The library exception's public class name (``receipts.errors.error_kind``: an HTTP
    failure is ``Unreachable``, a refusal the subclass its code names: ``NotFound``,
    ``Unauthorized``, ``RateLimited``, ...); ``UsageError`` for bad usage; a file that cannot be
    read or written (``OSError``) is ``InvalidInput``."""
    from execution_proof.receipts.errors import error_kind as library_kind

    if isinstance(exc, UsageError):
        return USAGE_ERROR
    if isinstance(exc, OSError) and not isinstance(exc, Error):
        return "InvalidInput"
    return library_kind(exc)


def error_member(exc: BaseException) -> dict[str, str]:
    """``{"kind", "message"}``: the ``error`` member of a ``--json`` failure."""
    return {"kind": error_kind(exc), "message": describe(exc)}


def json_failure(exc: BaseException, **members: Any) -> dict[str, Any]:
    """The ``--json`` document of a failure: ``{"ok": false, "error": error_member(exc)}``
    beside ``members`` (the verb's own, as far as they are known: a receipt id, ``saved``)."""
    return {"ok": False, "error": error_member(exc), **_without_status(members)}


def json_ok(document: Mapping[str, Any]) -> dict[str, Any]:
    """A success document with ``"ok": true`` first (every member of ``document`` kept)."""
    return {"ok": True, **_without_status(document)}


def _without_status(members: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in members.items() if name not in ("ok", "error")}


def fail(error: BaseException, *, as_json: bool = False, **members: Any) -> int:
    """Report a failure: its one line on stderr and, with ``as_json``, its one JSON document on
    stdout (``json_failure(error, **members)``); its exit code (``exit_code``)."""
    print(f"error: {describe(error)}", file=sys.stderr)
    if as_json:
        print_json(json_failure(error, **members))
    return exit_code(error)


def describe(error: BaseException) -> str:
    """An error's one line: a refusal names the request, the status and the service's code (an
    error the client raised itself, such as ``ProofPending`` after a wait, is its message)."""
    from execution_proof.receipts.errors import ServiceError

    if isinstance(error, ServiceError) and error.code != "http_error" and error.request is not None:
        return f"{error.request} answered {error.status} {error.code}: {error.message}"
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    return str(error)


def exit_code(error: BaseException) -> int:
    """1 for a refusal of the service (an error reply with its code), 2 for everything else
    (no reply, a reply without an error body, bad input or usage)."""
    from execution_proof.receipts.errors import ServiceError

    return 1 if isinstance(error, ServiceError) and error.code != "http_error" else 2
