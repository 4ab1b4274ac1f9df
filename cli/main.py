"""``execution-proof VERB ...`` (or ``python service.py VERB ...`` in a clone): the command line
(docs: README "Command line").

Each verb group lives in its own module and registers its parsers there. Only the module that
owns the verb asked for is imported (every group for ``--help``), so a client verb starts
without the server's libraries, and ``hash`` without even the verifier's. The base install
is the client: a verb that runs a server or needs Redis, run without the ``server`` extra,
exits 2 naming the extra to install.

Exit status: 0 success (for ``verify``: every requested check passed, against pinned keys for
a bundle), 1 a check failed, a bundle's keys were not pinned, or the thing asked for does
not exist, 2 usage, configuration or I/O error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

PROG = "execution-proof"
GROUPS = ("serve", "admin", "worker", "client", "trust_root", "witness", "monitor", "log_ops")
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
    "trust-root": "trust_root",
    "witness": "witness",
    "monitor": "monitor",
    "log": "log_ops",
}
SERVER_VERBS = frozenset({"serve", "worker", "expire", "keys", "signing-key", "receipts", "log"})
"""Verbs that run the service or use its store (and ``witness serve``): they need the extra."""
SERVER_MODULES = ("sanic", "redis", "rq", "jinja2", "prometheus_client", "httpx", "obstore", "fakeredis")


def _group(name: str) -> ModuleType:
    return importlib.import_module(f"execution_proof.cli.{name}")


def _parser(groups: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Execution Proof Service: signed, chained receipts for hashes you compute yourself",
        epilog="verify exits 0 valid, 1 invalid or not verified, 2 could not check",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in groups:
        _group(name).add_parsers(verbs)
    return parser


def needs_server_extra(argv: Sequence[str]) -> bool:
    """Whether this command runs the service or needs Redis: ``serve``, ``worker``, ..., and
    ``witness serve``."""
    if not argv:
        return True
    return argv[0] in SERVER_VERBS or (argv[0] == "witness" and len(argv) > 1 and argv[1] == "serve")


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["serve", *argv]  # `execution-proof --port 9000` serves, like `serve --port 9000`
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
    try:
        code: int = args.run(args)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_config_error(exc):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


def _is_config_error(exc: Exception) -> bool:
    """A bad setting or key set: exit 2 with its message (imported only when one is raised)."""
    from execution_proof.receipts.signing import KeySetError
    from execution_proof.runtime.settings import ConfigError

    return isinstance(exc, ConfigError | KeySetError)


def run() -> None:
    """The console script ``execution-proof``."""
    sys.exit(main(sys.argv[1:]))
