"""What every client verb prints: JSON documents, an error's one line, its exit code, and
the help text's shared parts (cli/client.py, cli/verify.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from execution_proof.errors import Error

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
EXIT_CODES = "exit status: 0 {ok}; 1 {one}; 2 {two}; 130 interrupted (Ctrl-C). No traceback in any of them."
SERVICE_ENV = (
    "environment: SERVICE_BASE_URL (the service, when --base-url is not given; default " + DEFAULT_BASE_URL + ")"
)


def count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def print_json(value: object) -> None:
    """``value`` as indented JSON: a document built here, or a typed one (a receipt, a report's)."""
    import orjson

    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def fail(error: Error) -> int:
    """Print an error the library raised; its exit code (1: the service refused, 2: could not)."""
    print(f"error: {describe(error)}", file=sys.stderr)
    return exit_code(error)


def describe(error: BaseException) -> str:
    """An error's one line: a refusal names the request, the status and the service's code."""
    from execution_proof.receipts.errors import ServiceError

    if isinstance(error, ServiceError) and error.code != "http_error":
        return f"{error.request or 'the service'} answered {error.status} {error.code}: {error.message}"
    return str(error)


def exit_code(error: BaseException) -> int:
    """1 for a refusal of the service (an error reply with its code), 2 for everything else
    (no reply, a reply without an error body, bad input)."""
    from execution_proof.receipts.errors import ServiceError

    return 1 if isinstance(error, ServiceError) and error.code != "http_error" else 2
