"""``witness key new`` and ``witness serve``: a C2SP tlog-witness of its own (docs/witness.md).

It shares nothing with the service but the code: its own key, its own state file, no Redis.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    witness = verbs.add_parser(
        "witness",
        help="a transparency-log witness (its own key and state): `witness key new` runs on the light install, "
        "`witness serve` needs the server extra",
    )
    actions = witness.add_subparsers(dest="action", required=True)
    key = actions.add_parser("key", help="witness keys (the light install)").add_subparsers(
        dest="key_action", required=True
    )
    new = key.add_parser(
        "new", help="print a private key line, then the witness's verifier key (runs on the light install)"
    )
    new.add_argument("--name", required=True, help="the witness's name, e.g. witness.example.org")
    new.set_defaults(run=_key_new)
    serve = actions.add_parser("serve", help="serve POST /add-checkpoint (needs the server extra)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8030)
    serve.add_argument("--key-file", required=True, help="file holding the private key line of `witness key new`")
    serve.add_argument("--state", required=True, help="the witness's state file (created if missing)")
    serve.add_argument(
        "--log", action="append", required=True, metavar="ORIGIN=VKEY", help="a log to witness (repeatable)"
    )
    serve.set_defaults(run=_serve)


def _key_new(args: argparse.Namespace) -> int:
    from execution_proof.transparency.cosignature import Cosigner
    from execution_proof.transparency.note import NoteError

    try:
        cosigner = Cosigner.generate(args.name)
    except NoteError as exc:
        print(f"error: --name: {exc}", file=sys.stderr)
        return 2
    print(cosigner.encode())
    print(cosigner.key.encode())
    return 0


class _Stopped(BaseException):
    """SIGTERM or SIGINT during start-up, before the server's loop handles them (a BaseException,
    like KeyboardInterrupt, so that asyncio lets it through)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def _serve(args: argparse.Namespace) -> int:
    """Until SIGTERM or SIGINT, at any moment: during start-up (even while waiting for the
    state's lock) the signal ends it at once with status 0; once serving, it stops cleanly
    (``web.witness.serve``), also with 0."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        return _start(args)
    except _Stopped:
        print("witness: stopped during start-up", file=sys.stderr, flush=True)
        return 0


def _start(args: argparse.Namespace) -> int:
    from execution_proof.cli.serve import listen, listen_url
    from execution_proof.transparency.cosignature import Cosigner
    from execution_proof.transparency.note import NoteError, Verifier
    from execution_proof.web.witness import WitnessState, WitnessStateError, serve, witness_app

    try:
        lines = Path(args.key_file).read_text(encoding="utf-8").splitlines()
        cosigner = Cosigner.parse(lines[0] if lines else "")
    except (OSError, UnicodeDecodeError, NoteError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"error: --key-file {args.key_file}: {reason}", file=sys.stderr)
        return 2
    logs = {}
    for item in args.log:
        origin, sep, vkey = item.partition("=")
        try:
            verifier = Verifier.parse(vkey)
        except NoteError as exc:
            print(f"error: --log {origin}: {exc}", file=sys.stderr)
            return 2
        if not sep or verifier.name != origin:
            print(f"error: --log {item!r}: give ORIGIN=VKEY, the key named by its origin", file=sys.stderr)
            return 2
        logs[origin] = verifier
    path = Path(args.state)
    if not path.parent.is_dir():
        print(f"error: --state: {path.parent} is not a directory", file=sys.stderr)
        return 2
    state = WitnessState(path)
    try:
        state.prepare()  # under the state's lock: waits while another witness process writes
    except (OSError, WitnessStateError) as exc:
        print(f"error: --state: {exc}", file=sys.stderr)
        return 2
    sock = listen(args.host, args.port)  # --port 0: a free port, named in the line below
    if sock is None:
        return 2
    url = listen_url(args.host, sock.getsockname()[1])
    app = witness_app(cosigner, logs, state)

    def announce() -> None:
        print(f"witness {cosigner.name} listening on {url} for {', '.join(logs)}", flush=True)

    serve(app, sock, announce)
    return 0
