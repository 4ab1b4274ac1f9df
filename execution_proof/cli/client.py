"""Client verbs a user runs on a laptop or in CI: ``hash``, ``submit``, ``bundle``, ``attest``
and ``verify``, each a thin shell over the library (``execution_proof.client``, docs/python-api.md):
arguments in, the library's typed results rendered out, as text or ``--json``.

They need no server code (the layer contract in pyproject.toml checks it). The work is
imported by the run function of the verb asked for, so ``hash`` loads neither HTTP nor the
verifier, and an offline ``verify`` no HTTP code.

Exit status, everywhere: 0 ok or valid; 1 invalid, not verified, refused by the service, or
no such receipt; 2 could not check (a file, an option, the service unreachable); 130 on
Ctrl-C (cli/main.py). Several items: the worst of their codes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator

from execution_proof.cli import verify as verify_verb
from execution_proof.cli.output import (
    DEFAULT_BASE_URL,
    JSON_HELP,
    HelpFormatter,
    UsageError,
    epilog,
    fail,
    json_failure,
    json_ok,
    print_json,
)

HASH_EPILOG = epilog(
    "none (it works offline).",
    ok="hashed",
    one="(not used)",
    two="a file cannot be read (the others are still hashed), or bad usage",
)
SUBMIT_EPILOG = epilog(
    "SERVICE_API_KEY (your API key: required, never accepted on the command line), SERVICE_BASE_URL (the "
    f"service, when --base-url is not given; default {DEFAULT_BASE_URL}).",
    ok="issued (201) or the earlier receipt of the same request (200)",
    one="the service refused it (its error code and message are printed)",
    two="bad usage, no SERVICE_API_KEY, a file that cannot be read, the service unreachable, or the receipt "
    "could not be saved",
)
BUNDLE_EPILOG = epilog(
    "SERVICE_BASE_URL (the service, when neither --base-url nor a receipt file names one; default "
    f"{DEFAULT_BASE_URL}).",
    ok="the bundle with its log proof (or from a service without a log, whose bundles carry none)",
    one="still pending when --wait ends (nothing is saved), no such receipt, or refused by the service",
    two="could not ask (no such file and not a receipt id, the service unreachable, bad usage, the file "
    "cannot be written)",
)
ATTEST_EPILOG = epilog(
    "SERVICE_BASE_URL (the service, when neither --base-url nor a receipt file names one; default "
    f"{DEFAULT_BASE_URL}).",
    ok="saved (the envelope; with --sigstore the Sigstore bundle with its log proof, or from a service without a "
    "log, without one)",
    one="still pending when --wait ends (nothing is saved), no such receipt, or refused by the service",
    two="could not ask (no such file and not a receipt id, the service unreachable, bad usage, the file "
    "cannot be written)",
)


class _ReceiptKinds:
    """The ``--kind`` choices, read from the receipt model only when ``--kind`` is given or
    help is printed (``hash`` does not load the model)."""

    def _kinds(self) -> tuple[str, ...]:
        from execution_proof.receipts.model import RECEIPT_KINDS

        return RECEIPT_KINDS

    def __contains__(self, value: object) -> bool:
        return value in self._kinds()

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds())


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The client's verbs: hash, submit, bundle, attest, verify."""
    _add_hash(verbs)
    _add_submit(verbs)
    _add_bundle(verbs)
    _add_attest(verbs)
    verify_verb.add_parser(verbs)


def _add_hash(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    digest = verbs.add_parser(
        "hash",
        help="print sha256:<hex> of files (or - for standard input), computed locally",
        description="Hash files locally. One file: the bare sha256:<hex>; several: sha256:<hex>  <path> per line "
        "(sha256sum's layout). Standard output holds only those lines: a salt goes to standard error.",
        epilog=HASH_EPILOG,
        formatter_class=HelpFormatter,
    )
    digest.add_argument("files", nargs="+", metavar="FILE", help="a file, or - for standard input")
    salt = digest.add_mutually_exclusive_group()
    salt.add_argument(
        "--salt",
        action="store_true",
        help="hash a fresh random salt + each file; the salt goes to standard error as `salt: <hex>` (keep it)",
    )
    salt.add_argument(
        "--salt-hex", type=_hex_salt, metavar="HEX", help="reuse a kept salt (hex) to reproduce a salted hash"
    )
    digest.add_argument("--json", action="store_true", help=JSON_HELP + "; a list for several files")
    digest.set_defaults(run=_hash)


def _add_submit(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    submit = verbs.add_parser(
        "submit",
        help="hash files locally and ask the service for a receipt",
        description="Hash the files locally, send only their hashes, save the receipt.",
        epilog=SUBMIT_EPILOG,
        formatter_class=HelpFormatter,
    )
    add_submit_arguments(submit)
    submit.add_argument("--json", action="store_true", help=JSON_HELP + " (the saved receipt and where)")
    submit.set_defaults(run=_submit)


def _add_bundle(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bundle = verbs.add_parser(
        "bundle",
        help="fetch a receipt's offline bundle, waiting for its log proof",
        description="Fetch GET /v1/receipts/{id}/bundle: the receipt, its keys, its chain and, from a service with a "
        "transparency log, the log proof, which comes once a published checkpoint covers the receipt (seconds). "
        "With --wait it asks again every second until the proof comes; a bundle without its proof is never saved.",
        epilog=BUNDLE_EPILOG,
        formatter_class=HelpFormatter,
    )
    bundle.add_argument(
        "receipt",
        metavar="RECEIPT_ID|FILE",
        help="a receipt file `submit` saved (its service is used), a bundle, - for standard input, or a receipt "
        "id (rcpt_ and 26 characters); anything else is no such file, and nothing is asked",
    )
    bundle.add_argument(
        "--wait", type=_seconds, default=0.0, metavar="SECONDS", help="wait up to this long for the log proof"
    )
    bundle.add_argument("--out", metavar="FILE", help="write the bundle here (atomically); default: standard output")
    bundle.add_argument("--base-url", metavar="URL", help="the service (default: the file's, else $SERVICE_BASE_URL)")
    bundle.add_argument(
        "--json",
        action="store_true",
        help=JSON_HELP + ": what was saved (without --out, the bundle itself as member bundle)",
    )
    bundle.set_defaults(run=_bundle)


def _add_attest(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    attest = verbs.add_parser(
        "attest",
        help="save a receipt's in-toto attestation (a DSSE envelope, or a Sigstore bundle)",
        description="Fetch GET /v1/receipts/{id}/attestation: the receipt as an in-toto Statement in a DSSE envelope "
        "signed by the receipt's key, saved as <receipt_id>.intoto.jsonl (one line); with --sigstore the Sigstore "
        "bundle v0.3 that also proves the attestation's leaf in the service's transparency log, saved as "
        "<receipt_id>.sigstore.json. The Sigstore bundle comes once a published checkpoint covers the leaf "
        "(seconds): with --wait it asks again every second until then; nothing is saved without it. `verify` reads "
        "both forms; so do in-toto and sigstore tools (docs/attestations.md).",
        epilog=ATTEST_EPILOG,
        formatter_class=HelpFormatter,
    )
    attest.add_argument(
        "receipt",
        metavar="RECEIPT_ID|FILE",
        help="a receipt file `submit` saved (its service is used), a bundle or any receipt document, - for standard "
        "input, or a receipt id (rcpt_ and 26 characters); anything else is no such file, and nothing is asked",
    )
    attest.add_argument(
        "--sigstore", action="store_true", help="the Sigstore bundle v0.3 (with the log entry), not the bare envelope"
    )
    attest.add_argument(
        "--wait",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="with --sigstore: wait up to this long for the log proof (the envelope is answered at once)",
    )
    attest.add_argument(
        "--out",
        metavar="FILE",
        help="write it here (atomically); - for standard output; default: <receipt_id>.intoto.jsonl, with "
        "--sigstore <receipt_id>.sigstore.json, in the current directory",
    )
    attest.add_argument("--base-url", metavar="URL", help="the service (default: the file's, else $SERVICE_BASE_URL)")
    attest.add_argument(
        "--json",
        action="store_true",
        help=JSON_HELP + ": what was saved (with --out -, the attestation itself as member attestation)",
    )
    attest.set_defaults(run=_attest)


def add_submit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", metavar="FILE", required=True, help="input file (hashed locally; its bytes are never sent)"
    )
    parser.add_argument("--output", metavar="FILE", help="output file, hashed locally into output_hash")
    parser.add_argument("--params", metavar="FILE", help="parameters file, hashed locally into params_hash")
    parser.add_argument("--env", metavar="FILE", help="environment file, hashed locally into env_hash")
    parser.add_argument(
        "--salt",
        action="store_true",
        help="hash each file with a fresh random salt (sha256(salt || file)); the salts are saved in the "
        "receipt file, never sent",
    )
    parser.add_argument(
        "--kind",
        choices=_ReceiptKinds(),
        metavar="KIND",
        help="receipt_kind, one of %(choices)s (a template label, docs/templates.md)",
    )
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="a tag (repeatable)")
    parser.add_argument("--code-ref", help="code_ref, e.g. a commit id")
    parser.add_argument("--run-id", help="run_id of the job that produced the files")
    parser.add_argument(
        "--base-url", metavar="URL", help=f"the service; default $SERVICE_BASE_URL, else {DEFAULT_BASE_URL}"
    )
    parser.add_argument(
        "--save",
        metavar="FILE",
        help="where to save the response with the service's URL and any salts (default: <input>.receipt.json; "
        "if that holds another receipt, <input>.<receipt_id>.receipt.json)",
    )


def _hex_salt(text: str) -> bytes:
    try:
        salt = bytes.fromhex(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not hexadecimal") from None
    if not salt:
        raise argparse.ArgumentTypeError("give the salt's bytes in hex (it is empty)")
    return salt


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 to 86400 seconds")
    return value


# -- hash


def _hash(args: argparse.Namespace) -> int:
    """Every file is hashed (an unreadable one does not stop the others: sha256sum's way); stdout
    holds only hash lines, or the one JSON document."""
    from execution_proof.client.hashing import fresh_salt, hash_file, hash_stream
    from execution_proof.errors import Error

    if args.files.count("-") > 1:
        return fail(UsageError("standard input (-) can be read once"), as_json=args.json)
    results: list[dict[str, object]] = []
    for path in args.files:
        salt = fresh_salt() if args.salt else args.salt_hex
        try:
            digest = hash_stream(sys.stdin.buffer, salt=salt) if path == "-" else hash_file(path, salt=salt)
        except (OSError, Error) as exc:
            failure = _unreadable(path, exc)
            print(f"error: {failure}", file=sys.stderr)
            results.append(json_failure(failure, path=path))
            continue
        results.append(json_ok({"path": path, "hash": digest, **({"salt": salt.hex()} if salt else {})}))
    if args.json:
        print_json(results if len(results) > 1 else results[0])
    else:
        _print_hashes(results)
    return 0 if all(result["ok"] for result in results) else 2


def _print_hashes(results: list[dict[str, object]]) -> None:
    """The hash lines on stdout (one file: the bare hash); each salt on stderr, to keep."""
    several = len(results) > 1
    hashed = [result for result in results if result["ok"]]
    for result in hashed:
        print(f"{result['hash']}  {result['path']}" if several else result["hash"])
    salted = [result for result in hashed if "salt" in result]
    for result in salted:
        print(f"salt: {result['salt']}" + (f"  {result['path']}" if several else ""), file=sys.stderr)
    if salted:
        print("note: keep the salt: the hash is SHA-256 of its bytes followed by the file's", file=sys.stderr)


def _unreadable(path: str, exc: BaseException) -> BaseException:
    """A file that cannot be read, as the library says it (``InvalidInput`` naming the path)."""
    from execution_proof.receipts.errors import InvalidInput

    if isinstance(exc, OSError):
        return InvalidInput(f"cannot read {path}: {exc.strerror or exc}")
    return exc


# -- submit


def parse_tags(items: list[str]) -> dict[str, str] | None:
    """``KEY=VALUE`` items (split at the first ``=``); both parts non-empty, keys unique."""
    from execution_proof.receipts.errors import InvalidInput

    tags: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InvalidInput(f"--tag must be KEY=VALUE with both parts non-empty (got {item!r})")
        if key in tags:
            raise InvalidInput(f"--tag {key} is given twice")
        tags[key] = value
    return tags or None


def default_save_path(input_path: str, receipt_id: str) -> str:
    """``<input>.receipt.json``; if that already holds another receipt, it is kept and this
    one goes to ``<input>.<receipt_id>.receipt.json`` (a receipt file is never lost)."""
    from execution_proof.client.models import Receipt
    from execution_proof.errors import Error

    path = input_path + ".receipt.json"
    if os.path.exists(path):
        try:
            held: str | None = Receipt.load(path).receipt_id
        except Error:
            held = None
        if held != receipt_id:
            return f"{input_path}.{receipt_id}.receipt.json"
    return path


def _submit(args: argparse.Namespace) -> int:
    from execution_proof.client.service import Client
    from execution_proof.errors import Error
    from execution_proof.receipts.errors import InvalidInput

    try:
        if not os.environ.get("SERVICE_API_KEY", "").strip():
            raise UsageError("set SERVICE_API_KEY to your API key (it is never accepted on the command line)")
        if args.input == "-":
            raise UsageError("submit hashes files: save standard input to a file first")
        tags = parse_tags(args.tag)
        with Client(args.base_url) as client:
            receipt = client.submit(
                input=args.input,
                output=args.output,
                params=args.params,
                env=args.env,
                tags=tags,
                code_ref=args.code_ref,
                run_id=args.run_id,
                receipt_kind=args.kind,
                salt=args.salt,
            )
    except Error as exc:
        return fail(exc, as_json=args.json, saved=None)
    save = args.save or default_save_path(args.input, receipt.receipt_id)
    verify_url = f"{receipt.service_url}/verify?receipt_id={receipt.receipt_id}"
    members = {
        "receipt_id": receipt.receipt_id,
        "replayed": receipt.replayed,
        "saved": save,
        "service_url": receipt.service_url,
        "salted": sorted(receipt.salts),
        "verify_url": verify_url,
        "receipt": receipt.receipt,
    }
    try:
        receipt.save(save)
    except OSError as exc:
        unsaved = InvalidInput(
            f"receipt {receipt.receipt_id} was issued but cannot be saved to {save}: {exc.strerror or exc}"
            + ("; the JSON document's member unsaved holds it" if args.json else "; it follows on standard output")
        )
        if args.json:  # the document to keep (its salts too) travels in the one JSON document
            return fail(unsaved, as_json=True, **{**members, "saved": None, "unsaved": receipt.to_dict()})
        code = fail(unsaved)
        sys.stdout.write(receipt.to_bytes().decode("utf-8", "replace"))
        return code
    if args.json:
        print_json(json_ok(members))
        return 0
    replay = " (an earlier receipt for the same request)" if receipt.replayed else ""
    print(f"receipt: {receipt.receipt_id}{replay}")
    print(f"saved:   {save}")
    if receipt.salts:
        print(
            f"salts:   kept in {save} for {', '.join(receipt.salts)} (never sent; `verify` uses them). "
            "Keep that file: without a salt the receipt can no longer be tied to its file"
        )
    print(f"verify:  {verify_url}")
    return 0


# -- bundle


def _bundle(args: argparse.Namespace) -> int:
    from execution_proof.client.service import Client
    from execution_proof.errors import Error
    from execution_proof.receipts.errors import InvalidInput, ProofPending

    receipt_id: str | None = None
    try:
        receipt_id, service_url = _bundle_target(args.receipt)  # nothing is asked for no such file
        with Client(args.base_url or service_url) as client:
            bundle = client.bundle(receipt_id, wait=args.wait, on_wait=_progress() if sys.stderr.isatty() else None)
    except Error as exc:
        _end_progress()
        if isinstance(exc, ProofPending):
            exc = ProofPending(f"{exc.message}; nothing saved")
        return fail(exc, as_json=args.json, **({"receipt_id": receipt_id} if receipt_id else {}), saved=None)
    _end_progress()
    summary = {
        "receipt_id": bundle.receipt_id,
        "saved": args.out,
        "log": bundle.has_log,
        "proof": bundle.proof is not None,
    }
    if args.out is None:
        if args.json:
            print_json(json_ok({**summary, "bundle": bundle.to_dict()}))
        else:
            import orjson

            sys.stdout.write(orjson.dumps(bundle.to_dict()).decode() + "\n")
        return 0
    try:
        bundle.save(args.out)
    except OSError as exc:
        unwritten = InvalidInput(f"cannot write {args.out}: {exc.strerror or exc}")
        return fail(unwritten, as_json=args.json, **{**summary, "saved": None})
    if args.json:
        print_json(json_ok(summary))
    elif bundle.has_log:
        print(f"saved {args.out}: receipt {bundle.receipt_id} with its log proof")
    else:
        print(f"saved {args.out}: receipt {bundle.receipt_id} (the service keeps no transparency log: no log proof)")
    return 0


def _bundle_target(argument: str) -> tuple[str, str | None]:
    """(receipt id, the service a receipt file names) of ``bundle``'s and ``attest``'s argument:
    a receipt file ``submit`` saved, any other receipt document (a bundle, an attestation: its
    receipt's id), ``-`` (any of them, on standard input) or a receipt id; ``InvalidInput`` for
    anything else, before anything is sent (client/arguments.py)."""
    from execution_proof.client.arguments import classify
    from execution_proof.client.documents import read_document
    from execution_proof.client.models import parse_json, read_json

    kind = classify(argument)
    if kind == "receipt_id":
        return argument, None
    where = "standard input" if kind == "stdin" else argument
    document = parse_json(sys.stdin.buffer.read(), where) if kind == "stdin" else read_json(argument)
    saved = read_document(document, where)
    return saved.receipt["receipt_id"], saved.service_url


# -- attest


def _attest(args: argparse.Namespace) -> int:
    from execution_proof.client.service import Client
    from execution_proof.errors import Error
    from execution_proof.receipts.errors import InvalidInput, ProofPending

    receipt_id: str | None = None
    try:
        receipt_id, service_url = _bundle_target(args.receipt)  # nothing is asked for no such file
        with Client(args.base_url or service_url) as client:
            waiting = _progress() if sys.stderr.isatty() else None
            attestation = client.attestation(receipt_id, sigstore=args.sigstore, wait=args.wait, on_wait=waiting)
    except Error as exc:
        _end_progress()
        if isinstance(exc, ProofPending):
            exc = ProofPending(f"{exc.message}; nothing saved")
        return fail(exc, as_json=args.json, **({"receipt_id": receipt_id} if receipt_id else {}), saved=None)
    _end_progress()
    path = args.out or attestation.default_name
    summary = {
        "receipt_id": attestation.receipt_id,
        "form": "sigstore" if attestation.sigstore else "envelope",
        "saved": None if path == "-" else path,
        "log_origin": attestation.log_origin,
        "proof": attestation.tlog_entries > 0,
    }
    if path == "-":
        if args.json:
            print_json(json_ok({**summary, "attestation": attestation.to_dict()}))
        else:
            sys.stdout.write(attestation.to_bytes().decode())
        return 0
    try:
        attestation.save(path)
    except OSError as exc:
        unwritten = InvalidInput(f"cannot write {path}: {exc.strerror or exc}")
        return fail(unwritten, as_json=args.json, **{**summary, "saved": None})
    if args.json:
        print_json(json_ok(summary))
    elif not attestation.sigstore:
        print(f"saved {path}: the in-toto attestation of receipt {attestation.receipt_id} (DSSE envelope)")
    elif attestation.tlog_entries:
        print(f"saved {path}: the Sigstore bundle of receipt {attestation.receipt_id} with its log proof")
    else:
        print(
            f"saved {path}: the Sigstore bundle of receipt {attestation.receipt_id} (the service keeps no "
            "transparency log: no log proof)"
        )
    return 0


_progress_shown = False


def _progress() -> Callable[[float, float], None]:
    def show(waited: float, wait: float) -> None:
        global _progress_shown
        _progress_shown = True
        sys.stderr.write(f"\rwaiting for the log proof: {waited:.0f} s of {wait:.0f} s ")
        sys.stderr.flush()

    return show


def _end_progress() -> None:
    global _progress_shown
    if _progress_shown:
        sys.stderr.write("\n")
        _progress_shown = False
