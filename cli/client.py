"""Client verbs that a user runs on a laptop or in CI: ``hash``, ``submit`` and ``verify``.

They need no server code: this module and the ones it imports load neither Sanic nor redis
(the layer contract in pyproject.toml checks it). The parsers are defined here and the work
is imported by the run function of the verb asked for, so ``hash`` loads neither submit nor
the verifier, and an offline ``verify`` no HTTP code. ``hash`` and ``verify --keys`` or
``--trust-root`` work offline; ``submit`` and the other checks of ``verify`` talk to the
service over HTTP (``SERVICE_BASE_URL``, default ``http://127.0.0.1:8000``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

HASH_CHUNK = 1 << 20
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
VERIFY_EPILOG = (
    "exit status: 0 valid (every check asked for passed, against keys pinned with --keys or "
    "--trust-root, or fetched from the service); 1 invalid or not verified (a check failed, or a "
    "bundle's keys were not pinned); 2 could not check (an unreadable or malformed file, trust root "
    "or key set, or the service unreachable where it was needed)"
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
    digest = verbs.add_parser("hash", help="print sha256:<hex> of a file, computed locally")
    digest.add_argument("file")
    salt = digest.add_mutually_exclusive_group()
    salt.add_argument("--salt", action="store_true", help="hash a fresh random salt + the file; prints the salt")
    salt.add_argument("--salt-hex", help="reuse a kept salt (hex) to reproduce a salted hash")

    verify = verbs.add_parser(
        "verify",
        help="verify a receipt without trusting the service",
        epilog=VERIFY_EPILOG,
    )
    verify.add_argument(
        "receipt",
        metavar="RECEIPT_OR_BUNDLE.json",
        help="receipt JSON (a receipt, a create/read response body or the file submit saved, or an offline bundle)",
    )
    for name, field in (("input", "input_hash"), ("output", "output_hash"), ("params", "params_hash")):
        verify.add_argument(f"--{name}", metavar="FILE", help=f"local {name} file; its hash must equal {field}")
    verify.add_argument("--env", metavar="FILE", help="local environment file; its hash must equal env_hash")
    verify.add_argument(
        "--salt",
        metavar="HEX",
        help="the salt of a blinded input hash: input_hash = sha256(salt || input file); overrides the "
        "input's salt that `submit --salt` saved in the file (the saved salts are used automatically)",
    )
    verify.add_argument(
        "--base-url",
        metavar="URL",
        help="the service to fetch public keys (unless pinned), the chain and the log proof from; without it, "
        "the service_url the file was saved with, else the default $SERVICE_BASE_URL, else "
        f"{DEFAULT_BASE_URL}. A bundle is checked offline against keys pinned with --keys or --trust-root, "
        "else against the keys of --base-url or SERVICE_BASE_URL (the only request made); a bundle with none "
        "of them is NOT VERIFIED (exit 1)",
    )
    pin = verify.add_mutually_exclusive_group()
    pin.add_argument(
        "--keys",
        metavar="KEYS.json",
        help="saved key set (GET /v1/public-key body) to pin; with --base-url the service is still used "
        "for the chain and the log proof",
    )
    pin.add_argument(
        "--trust-root",
        metavar="FILE",
        help="a trust root (`trust-root` writes it): verify against it alone, offline: the signature with its "
        "receipt keys and, for a bundle, the log inclusion, witness quorum and time-stamps",
    )
    verify.add_argument(
        "--online",
        action="store_true",
        help="with --trust-root: also ask the service (its service_url, or --base-url) that the receipt still "
        "exists, walk --chain and check a plain receipt's log proof; the pinned keys stay",
    )
    verify.add_argument("--chain", action="store_true", help="follow prev_receipt_hash links through the service")
    verify.add_argument("--max-links", type=int, default=1000, help="stop the chain walk after this many links")
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.add_argument(
        "--log-key", help="the transparency log's verifier key (GET /v1/log's log_vkey) to pin: check inclusion"
    )
    verify.add_argument(
        "--since-checkpoint", metavar="FILE", help="an older checkpoint you kept: check the log still extends it"
    )
    verify.add_argument(
        "--log-policy", metavar="FILE", help="a C2SP tlog-policy: its log key, and the witness quorum to meet"
    )
    verify.add_argument(
        "--tsa-roots",
        metavar="PEM",
        help="root certificates of the time-stamp authorities you trust: check the RFC 3161 time-stamps of the "
        "proof's checkpoint and report the latest time the receipt provably existed (needs --log-key or --log-policy)",
    )

    submit = verbs.add_parser("submit", help="hash files locally and ask the service for a receipt")
    add_submit_arguments(submit)
    digest.set_defaults(run=_hash)
    verify.set_defaults(run=_verify)
    submit.set_defaults(run=_submit)


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


def hash_file(path: str | Path, salt: bytes = b"") -> str:
    """``sha256:<hex>`` of ``salt`` followed by the file's bytes, read in chunks."""
    digest = hashlib.sha256(salt)
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _hash(args: argparse.Namespace) -> int:
    if args.salt or args.salt_hex:
        import secrets

        try:
            salt = bytes.fromhex(args.salt_hex) if args.salt_hex else secrets.token_bytes(16)
        except ValueError:
            print("error: --salt-hex must be hexadecimal", file=sys.stderr)
            return 2
        print(hash_file(args.file, salt))
        print(f"salt: {salt.hex()}  (keep it: the hash is SHA-256 of these salt bytes followed by the file)")
        return 0
    print(hash_file(args.file))
    return 0


def _submit(args: argparse.Namespace) -> int:
    from execution_proof.cli.submit import submit_command

    return submit_command(args, hash_file, DEFAULT_BASE_URL)


def _verify(args: argparse.Namespace) -> int:
    from execution_proof.cli.verify import VerifyOptions, render_report, run_verify

    options = VerifyOptions(
        receipt_path=args.receipt,
        input_path=args.input,
        output_path=args.output,
        params_path=args.params,
        env_path=args.env,
        base_url=args.base_url or None,
        env_base_url=os.environ.get("SERVICE_BASE_URL") or None,
        keys_path=args.keys,
        trust_root_path=args.trust_root,
        online=args.online,
        chain=args.chain,
        max_links=args.max_links,
        salt_hex=args.salt,
        log_key=args.log_key,
        since_checkpoint=args.since_checkpoint,
        log_policy=args.log_policy,
        tsa_roots=args.tsa_roots,
    )
    report = run_verify(options, hash_file)
    if args.json:
        import orjson

        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_report(report))
    if report.get("error"):
        return 2
    return 0 if report["ok"] else 1
