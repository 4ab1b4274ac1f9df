"""``witness key new`` and ``witness serve``: a C2SP tlog-witness of its own (docs/witness.md).

It shares nothing with the service but the code: its own key, its own state file, no Redis.
Its key is a ``PRIVATE+KEY+…`` line or a signer URI (docs/keys.md): a key in a token or
behind a plugin has no name of its own, so ``--name`` gives the witness's.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from execution_proof.transparency.cosignature import Cosigner


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
    new.add_argument(
        "--signer",
        metavar="URI",
        help="make the key there and print the URI to configure (witness serve --key, any pin-value removed), then "
        "the verifier key: pkcs11:... (in the token, never extractable), file:/ABSOLUTE/PATH (a new file, mode "
        "0600), plugin:NAME[?ARG] (the plugin's key); env: cannot be created",
    )
    new.set_defaults(run=_key_new)
    serve = actions.add_parser("serve", help="serve POST /add-checkpoint (needs the server extra)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8030)
    key_source = serve.add_mutually_exclusive_group(required=True)
    key_source.add_argument(
        "--key",
        metavar="KEY",
        help="the witness's key: a PRIVATE+KEY+... line, or a signer URI (file:/PATH, env:NAME, pkcs11:..., "
        "plugin:NAME[?ARG])",
    )
    key_source.add_argument(
        "--key-file", metavar="F", help="shorthand for --key file:F (the file of `witness key new`, mode 0600)"
    )
    serve.add_argument(
        "--name",
        help="the witness's name: needed for a key in a token or a plugin; for any other key, its own name, if given",
    )
    serve.add_argument("--state", required=True, help="the witness's state file (created if missing)")
    serve.add_argument(
        "--log", action="append", required=True, metavar="ORIGIN=VKEY", help="a log to witness (repeatable)"
    )
    serve.set_defaults(run=_serve)


def _key_new(args: argparse.Namespace) -> int:
    """Without ``--signer``: the private key line, then the verifier key. With it: the key made
    there, then the URI to configure and the verifier key. Exit 2, one line naming the URI, when
    it cannot be made (nothing is made then)."""
    from execution_proof.runtime.signers import make_key, without_pin
    from execution_proof.transparency.cosignature import Cosigner
    from execution_proof.transparency.note import NoteError, check_name
    from execution_proof.transparency.signer import SignerError

    try:
        check_name(args.name)
    except NoteError as exc:
        print(f"error: --name: {exc}", file=sys.stderr)
        return 2
    if args.signer is None:
        cosigner = Cosigner.generate(args.name)
        print(cosigner.encode())
        print(cosigner.key.encode())
        return 0
    try:
        key = make_key(args.signer, text_of=lambda made: Cosigner(args.name, made).encode())
    except SignerError as exc:
        print(f"error: --signer {exc}", file=sys.stderr)
        return 2
    print(without_pin(args.signer))
    print(Cosigner(args.name, key).key.encode())
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


def _cosigner(args: argparse.Namespace) -> Cosigner | None:
    """The witness's key (``--key``, or ``--key-file F`` as ``--key file:F``), named by
    ``--name`` when it has no name of its own; None after one line saying what is wrong."""
    from execution_proof.runtime.signers import open_named
    from execution_proof.transparency.cosignature import Cosigner
    from execution_proof.transparency.note import NoteError, check_name
    from execution_proof.transparency.signer import SignerError, redact, scheme_of

    if args.key_file is not None:
        option, value = f"--key-file {args.key_file}", f"file:{Path(args.key_file).absolute()}"
    else:
        option, value = "--key", args.key
    if args.name is not None:
        try:
            check_name(args.name)
        except NoteError as exc:
            print(f"error: --name: {exc}", file=sys.stderr)
            return None
    if args.name is None and scheme_of(value) in ("pkcs11", "plugin"):
        print(
            f"error: --key {redact(value)}: a key in a token or a plugin has no name of its own: give the witness's "
            "name with --name",
            file=sys.stderr,
        )
        return None
    try:
        cosigner = open_named(value, args.name, parse_key=Cosigner.parse, wrap=Cosigner)
    except (NoteError, SignerError) as exc:
        # A file's message starts with its URI: --key-file names the file as it was given.
        reason = str(exc).removeprefix(f"{value}: ") if args.key_file is not None else str(exc)
        print(f"error: {option}: {reason}", file=sys.stderr)
        return None
    if args.name is not None and cosigner.name != args.name:
        print(f"error: --name {args.name}: the key given is the key of {cosigner.name}", file=sys.stderr)
        return None
    return cosigner


def _start(args: argparse.Namespace) -> int:
    from execution_proof.cli.serve import listen, listen_url
    from execution_proof.transparency.note import NoteError, Verifier
    from execution_proof.web.witness import WitnessState, WitnessStateError, serve, witness_app

    cosigner = _cosigner(args)
    if cosigner is None:
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
