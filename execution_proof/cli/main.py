"""``execution-proof VERB ...`` (or ``python service.py VERB ...`` in a clone): the command line
(docs: README "Command line").

Each verb group lives in its own module and registers its parsers there. Only the module that
owns the verb asked for is imported (every group for ``--help``), so a client verb starts
without the server's libraries, and ``hash`` without even the verifier's. The base install
is the client: a verb that runs a server or needs Redis, run without the ``server`` extra,
exits 2 naming the extra to install. A bare ``execution-proof`` prints the usage (exit 2);
``python service.py`` alone serves (``main(argv, default_verb="serve")``).

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

PROG = "execution-proof"
CLIENT_GROUPS = ("client", "trust_root", "monitor")
OPERATOR_GROUPS = ("serve", "admin", "worker", "witness", "log_ops")
GROUPS = CLIENT_GROUPS + OPERATOR_GROUPS
"""The modules of ``execution_proof.cli`` that register verbs, in ``--help`` order."""
VERB_GROUP = {
    "serve": "serve",
    "signing-key": "admin",
    "keys": "admin",
    "receipts": "admin",
    "log-key": "admin",
    "worker": "worker",
    "expire": "worker",
    "hash": "client",
    "verify": "client",
    "submit": "client",
    "bundle": "client",
    "trust-root": "trust_root",
    "witness": "witness",
    "monitor": "monitor",
    "log": "log_ops",
}
CLIENT_VERBS = ("hash", "submit", "bundle", "verify", "trust-root", "monitor")
SERVER_VERBS = frozenset({"serve", "worker", "expire", "keys", "signing-key", "receipts", "log"})
"""Verbs that run the service or use its store (and ``witness serve``): they need the extra."""
SERVER_MODULES = ("sanic", "redis", "rq", "jinja2", "prometheus_client", "httpx", "obstore", "fakeredis")
EPILOG = f"""client verbs (the light install, no extra):
  {", ".join(CLIENT_VERBS)}
operator verbs (the extra [server]; in a clone: pip install '.[server]'):
  serve, worker, expire, keys, signing-key, receipts, log-key, log, witness

`{PROG} VERB --help` names each verb's environment variables and exit codes.
Exit status: 0 ok or valid; 1 invalid, not verified, refused by the service or
no such receipt; 2 could not check or bad usage; 130 interrupted (Ctrl-C).
"""


ENVIRONMENT = {
    "serve": "REDIS_URL, SIGNING_KEYS, PORT, WEB_WORKERS, PUBLIC_BASE_URL, LOG_SIGNING_KEY, LOG_STORE and the rest "
    'of README "Configuration"',
    "worker": 'REDIS_URL, SIGNING_KEYS, LOG_SIGNING_KEY, LOG_STORE and the rest of README "Configuration"',
    "expire": "REDIS_URL",
    "keys": "REDIS_URL",
    "receipts": "REDIS_URL",
    "log": "LOG_STORE, LOG_SIGNING_KEY, LOG_ORIGIN (and the s3:// store's AWS_* variables: docs/s3.md)",
    "log-key": "LOG_ORIGIN, PUBLIC_BASE_URL (the default origin)",
    "signing-key": "none",
    "witness": "none (its options say everything)",
    "trust-root": "SERVICE_BASE_URL (the service, when --base-url is not given)",
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


def _parser(groups: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    if not argv:
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
            print(
                f"error: `{PROG} {argv[0]}` runs the service, which this install does not have "
                f"(missing: {', '.join(missing)}). Install the server extra: "
                "pip install 'execution-proof[server]'",
                file=sys.stderr,
            )
            return 2
    group = VERB_GROUP.get(argv[0])
    args = _parser([group] if group else GROUPS).parse_args(argv)
    if getattr(args, "run", None) is None:
        _parser(GROUPS).print_usage(sys.stderr)
        print(f"{PROG}: error: name a verb (`{PROG} --help` lists them)", file=sys.stderr)
        return 2
    try:
        code: int = args.run(args)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_known_error(exc):
            raise
        from execution_proof.cli.output import describe, exit_code

        print(f"error: {describe(exc)}", file=sys.stderr)
        return exit_code(exc)
    return code


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
