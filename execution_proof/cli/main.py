"""``execution-proof VERB ...`` (or ``python service.py VERB ...`` in a clone): the command line
(docs: README "Command line").

Each verb group lives in its own module and registers its parsers there. Only the module that
owns the verb asked for is imported (every group for ``--help``), so a client verb starts
without the server's libraries, and ``hash`` without even the verifier's. The base install
is the client: a verb that runs a server or needs Redis, run without the ``server`` extra,
exits 2 naming the extra to install (``log-key new``, ``witness key new`` and ``signing-key root
new`` only make keys: they run on the base install). A bare ``execution-proof`` prints the
usage (exit 2); ``python service.py`` alone serves (``main(argv, default_verb="serve")``).

A client verb asked for ``--json`` prints exactly one JSON document on stdout whatever
happens (cli/output.py), a usage error included: ``{"ok": false, "error": {"kind":
"UsageError", ...}}`` beside the usual usage text on stderr.

Exit status: 0 success (for ``verify``: every requested check passed, against pinned keys for
a bundle), 1 a check failed, a bundle's keys were not pinned, the service refused, or the
thing asked for does not exist, 2 usage, configuration or I/O error, 130 interrupted
(Ctrl-C). None of them prints a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import signal
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from execution_proof.errors import Error

PROG = "execution-proof"
CLIENT_GROUPS = ("client", "trust_root", "monitor")
OPERATOR_GROUPS = ("serve", "admin", "signing_keys", "worker", "witness", "log_ops")
GROUPS = CLIENT_GROUPS + OPERATOR_GROUPS
"""The modules of ``execution_proof.cli`` that register verbs, in ``--help`` order."""
VERB_GROUP = {
    "serve": "serve",
    "signing-key": "signing_keys",
    "keys": "admin",
    "receipts": "admin",
    "log-key": "admin",
    "worker": "worker",
    "expire": "worker",
    "hash": "client",
    "verify": "client",
    "submit": "client",
    "bundle": "client",
    "attest": "client",
    "trust-root": "trust_root",
    "witness": "witness",
    "monitor": "monitor",
    "log": "log_ops",
}
CLIENT_VERBS = ("hash", "submit", "bundle", "attest", "verify", "trust-root", "monitor")
SERVER_VERBS = frozenset({"serve", "worker", "expire", "keys", "signing-key", "receipts", "log"})
"""Verbs that run the service or use its store (and ``witness serve``): they need the extra;
``KEY_MAKERS`` among them do not."""
KEY_MAKERS = (("signing-key", "root", "new"),)
"""Key makers inside an operator verb group (``log-key`` and ``witness key`` are not in one)."""
SERVER_MODULES = ("sanic", "redis", "rq", "jinja2", "prometheus_client", "httpx", "obstore", "fakeredis")
EPILOG = f"""client verbs (the light install, without extras):
  {", ".join(CLIENT_VERBS)}
key makers (the light install too):
  log-key new, witness key new, signing-key root new
operator verbs (the extra [server]; in a clone: pip install '.[server]'):
  serve, worker, expire, keys, signing-key, receipts, log, witness serve

`{PROG} VERB --help` names each verb's environment variables and exit codes.
Exit status: 0 ok or valid; 1 invalid, not verified, refused by the service or
no such receipt; 2 could not check or bad usage; 130 interrupted (Ctrl-C).
"""


ENVIRONMENT = {
    "serve": "REDIS_URL, RECEIPT_ROOT_KEY, PORT, WEB_WORKERS, PUBLIC_BASE_URL, LOG_SIGNING_KEY, LOG_STORE and the rest "
    'of README "Configuration"',
    "worker": 'REDIS_URL, LOG_SIGNING_KEY, LOG_STORE and the rest of README "Configuration"',
    "expire": "REDIS_URL",
    "keys": "REDIS_URL",
    "receipts": "REDIS_URL",
    "log": "LOG_STORE, LOG_SIGNING_KEY, LOG_ORIGIN (and the s3:// store's AWS_* variables: docs/s3.md)",
    "log-key": "LOG_ORIGIN, PUBLIC_BASE_URL (the default origin), PKCS11_MODULE (a pkcs11: URI's default module-path)",
    "signing-key": "PKCS11_MODULE (a pkcs11: URI's default module-path)",
    "witness": "PKCS11_MODULE (a pkcs11: URI's default module-path); the options say the rest",
}
"""What each verb reads from the environment, for the help of those that do not say it
themselves (the client verbs do)."""
DEFAULT_EXIT_CODES = (
    "exit status: 0 done; 1 refused, or no such thing; 2 usage, configuration or I/O error; 130 interrupted "
    "(Ctrl-C). No traceback in any of them."
)


def _group(name: str) -> ModuleType:
    return importlib.import_module(f"execution_proof.cli.{name}")


def _version() -> str:
    from execution_proof import __version__

    return f"{PROG} {__version__}"


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its verbs' too), whose refusal is a ``UsageError`` the caller prints
    (with ``--json``, as the one JSON document too) instead of an exit from inside argparse."""

    def error(self, message: str) -> NoReturn:
        from execution_proof.cli.output import UsageError

        raise _Refused(self, UsageError(message))


class _Refused(Error):
    def __init__(self, parser: argparse.ArgumentParser, error: Exception) -> None:
        super().__init__(str(error))
        self.parser = parser
        self.error = error


def _parser(groups: Sequence[str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Execution Proof Service: signed, chained receipts for hashes you compute yourself",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in groups:
        _group(name).add_parsers(verbs)
    for verb, sub in verbs.choices.items():
        _name_environment_and_exit_codes(sub, ENVIRONMENT.get(verb))
    return parser


def _name_environment_and_exit_codes(parser: argparse.ArgumentParser, environment: str | None) -> None:
    """Give every verb's help (nested actions too) its environment variables and exit codes,
    where its module did not write them."""
    if parser.epilog is None:
        parser.epilog = (f"environment: {environment}. " if environment else "") + DEFAULT_EXIT_CODES
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for nested in action.choices.values():
                _name_environment_and_exit_codes(nested, environment)


def needs_server_extra(argv: Sequence[str]) -> bool:
    """Whether this command runs the service or needs Redis: ``serve``, ``worker``, ..., and
    ``witness serve``."""
    if not argv or any(tuple(argv[: len(maker)]) == maker for maker in KEY_MAKERS):
        return False
    return argv[0] in SERVER_VERBS or (argv[0] == "witness" and len(argv) > 1 and argv[1] == "serve")


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def main(argv: Sequence[str], default_verb: str | None = None) -> int:
    """Run one command; its exit status. ``default_verb``: the verb of a command line that
    names none (``python service.py`` serves); without one, such a line prints the usage."""
    argv = list(argv)
    if argv in (["--version"], ["-V"]):
        print(_version())
        return 0
    if default_verb is not None and (not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help"))):
        argv = [default_verb, *argv]  # `python service.py --port 9000` serves, like `serve --port 9000`
    if not argv:
        _parser(GROUPS).print_usage(sys.stderr)
        print(f"{PROG}: error: name a verb (`{PROG} --help` lists them)", file=sys.stderr)
        return 2
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return 0  # the reader went away (`| head`): nothing more to say


def _run(argv: list[str]) -> int:
    if needs_server_extra(argv) and "-h" not in argv and "--help" not in argv:
        missing = missing_server_modules()
        if missing:
            verb = " ".join(argv[:2]) if argv[0] == "witness" else argv[0]
            print(
                f"error: `{PROG} {verb}` runs a server or uses the service's store, which this install does not "
                f"have (missing: {', '.join(missing)}). Install the server extra: execution-proof[server] (from a "
                "clone: pip install '.[server]')",
                file=sys.stderr,
            )
            return 2
    group = VERB_GROUP.get(argv[0])
    as_json = wants_json(argv)
    try:
        args = _parser([group] if group else GROUPS).parse_args(argv)
    except _Refused as refused:
        refused.parser.print_usage(sys.stderr)
        print(f"{refused.parser.prog}: error: {refused.error}", file=sys.stderr)
        if as_json:
            from execution_proof.cli.output import json_failure, print_json

            print_json(json_failure(refused.error))
        sys.exit(2)  # as argparse ends a refused command line (and --help): callers of main() see SystemExit
    if getattr(args, "run", None) is None:
        _parser(GROUPS).print_usage(sys.stderr)
        print(f"{PROG}: error: name a verb (`{PROG} --help` lists them)", file=sys.stderr)
        return 2
    try:
        code: int = args.run(args)
    except Exception as exc:
        if not isinstance(exc, OSError) and not _is_known_error(exc):
            raise
        # A verb prints its own failures (with the members it knows); this is the net under it.
        from execution_proof.cli.output import fail

        return fail(exc, as_json=as_json)
    return code


def wants_json(argv: Sequence[str]) -> bool:
    """Whether this command line asks a client verb (or a verb that does not exist) for
    ``--json``: then even a usage error is one JSON document on stdout."""
    options = list(argv[: argv.index("--")] if "--" in argv else argv)
    return "--json" in options and (argv[0] in CLIENT_VERBS or argv[0] not in VERB_GROUP)


def _is_known_error(exc: Exception) -> bool:
    """An error the package raises on purpose (a bad setting or key set, a refusal, no
    reply): its message, no traceback (imported only when one is raised)."""
    from execution_proof.errors import Error
    from execution_proof.receipts.signing import KeySetError
    from execution_proof.runtime.settings import ConfigError

    return isinstance(exc, Error | ConfigError | KeySetError)


def run() -> None:
    """The console script ``execution-proof`` (and ``python -m execution_proof``)."""
    sys.exit(main(sys.argv[1:]))
