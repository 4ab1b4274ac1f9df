"""Client verbs that a user runs on a laptop or in CI: ``hash``, ``submit`` and ``verify``.

They need no server code: this module and the ones it imports load neither Sanic nor redis
(the layer contract in pyproject.toml checks it). ``hash`` and ``verify`` work offline;
``submit`` and ``verify --chain`` or ``--base-url`` talk to the service over HTTP.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys
from pathlib import Path

import orjson

from execution_proof.cli.submit import add_submit_arguments, submit_command
from execution_proof.cli.verify import DEFAULT_BASE_URL, VerifyOptions, render_report, run_verify

HASH_CHUNK = 1 << 20


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    digest = verbs.add_parser("hash", help="print sha256:<hex> of a file, computed locally")
    digest.add_argument("file")
    salt = digest.add_mutually_exclusive_group()
    salt.add_argument("--salt", action="store_true", help="hash a fresh random salt + the file; prints the salt")
    salt.add_argument("--salt-hex", help="reuse a kept salt (hex) to reproduce a salted hash")

    verify = verbs.add_parser("verify", help="verify a receipt without trusting the service")
    verify.add_argument("receipt", help="receipt JSON (a receipt, a create/read response body, or an offline bundle)")
    verify.add_argument("--input", help="local input file; its hash must equal input_hash")
    verify.add_argument(
        "--salt", metavar="HEX", help="the salt of a blinded input hash: input_hash = sha256(salt || input file)"
    )
    verify.add_argument("--output", help="local output file; its hash must equal output_hash")
    source = verify.add_mutually_exclusive_group()
    source.add_argument(
        "--base-url",
        help="service to fetch public keys (and the chain) from; default $SERVICE_BASE_URL, else "
        f"{DEFAULT_BASE_URL} for a receipt. For a bundle it pins the keys (the only request made); a "
        "bundle with neither --base-url, SERVICE_BASE_URL nor --keys is NOT VERIFIED (exit 1)",
    )
    source.add_argument("--keys", help="saved key set (GET /v1/public-key body) to pin: fully offline")
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
    submit.set_defaults(run=lambda args: submit_command(args, hash_file))


def hash_file(path: str | Path, salt: bytes = b"") -> str:
    """``sha256:<hex>`` of ``salt`` followed by the file's bytes, read in chunks."""
    digest = hashlib.sha256(salt)
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _hash(args: argparse.Namespace) -> int:
    if args.salt or args.salt_hex:
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


def _verify(args: argparse.Namespace) -> int:
    options = VerifyOptions(
        receipt_path=args.receipt,
        input_path=args.input,
        output_path=args.output,
        base_url=args.base_url or os.environ.get("SERVICE_BASE_URL") or None,
        keys_path=args.keys,
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
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_report(report))
    if report.get("error"):
        return 2
    return 0 if report["ok"] else 1
