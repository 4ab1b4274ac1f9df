"""``python service.py VERB ...``: the command line (docs: README "Command line").

Each verb group lives in its own module and registers its parsers here; a verb imports what
it needs only when it runs, so the client verbs (``cli.client``) start without Sanic or redis.

Exit status: 0 success (for ``verify``: every requested check passed, against pinned keys for
a bundle), 1 a check failed, a bundle's keys were not pinned, or the thing asked for does
not exist, 2 usage, configuration or I/O error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cli import admin, client, log_ops, monitor, serve, witness, worker
from receipts.signing import KeySetError
from runtime.settings import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="service.py", description="Execution Proof Service")
    verbs = parser.add_subparsers(dest="verb")
    for group in (serve, admin, worker, client, witness, monitor, log_ops):
        group.add_parsers(verbs)
    return parser


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["serve", *argv]  # `python service.py --port 9000` serves, like `serve --port 9000`
    args = _parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except (ConfigError, KeySetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code
