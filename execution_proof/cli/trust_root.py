"""``trust-root``: write the file a verifier pins (docs/trust-root.md) and print its fingerprints.

It asks the service for its receipt roots (``GET /v1/public-key``: the ``roots`` that certify
every receipt key, and the ``revocations`` they signed; a service that publishes no ``roots`` is
refused, since a version 2 file pins nothing else of its keys) and its log (``GET /v1/log``:
origin, verifier key, witness policy; a service without a log answers 404 or 503
``log_unavailable`` and the file says ``"log": null``), adds the TSA roots of ``--tsa-roots``,
checks the whole by reading it back (receipts/trust_root.py), writes it atomically (a temporary
file in the same folder, then a rename; mode 0644; an existing file is replaced, with a note)
and prints one fingerprint a line, ``<label>  sha256:<hex>``, to compare with the operator's
over another channel (``receipt root <kid>`` for each root: the keys a root certifies change
with every rotation, the root does not).

A client verb: no server library (the base install has none). Exit 0 written, 2 not written
(usage, the service unreachable or its answers malformed, a PEM file unreadable). ``--json``:
one JSON document on stdout whatever happens (cli/output.py), the fingerprints as members.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from execution_proof.cli.output import (
    JSON_HELP,
    HelpFormatter,
    UsageError,
    describe,
    epilog,
    json_failure,
    json_ok,
    print_json,
)
from execution_proof.errors import Error
from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.trust_root import TrustRoot, fingerprints

TRUST_ROOT_EPILOG = epilog(
    "SERVICE_BASE_URL (the service, when --base-url is not given; one of the two is needed).",
    ok="written",
    one="(not used)",
    two="not written (bad usage, the service unreachable, refusing, publishing no receipt roots or answering "
    "malformed ones, a PEM file unreadable, the folder missing)",
)


class CouldNotWrite(InvalidInput):
    """The trust root cannot be made from what was given; the message says why (exit 2)."""


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = verbs.add_parser(
        "trust-root",
        help="write the service's receipt roots, log key, witness policy and TSA roots to one file to pin; print "
        "fingerprints",
        description="Fetch GET /v1/public-key (its receipt roots and revocations) and GET /v1/log, write them (with "
        "--tsa-roots) to --out as a trust root (version 2) for verify --trust-root, and print the SHA-256 "
        "fingerprint of each root and key to compare out of band.",
        epilog=TRUST_ROOT_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--base-url", help="the service (default $SERVICE_BASE_URL; one of the two is needed)")
    parser.add_argument(
        "--out", required=True, metavar="FILE", help="where to write the trust root (replaced if it exists)"
    )
    parser.add_argument(
        "--tsa-roots", metavar="PEM", help="root certificates of the time-stamp authorities to pin (one or several)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=JSON_HELP + ": where it was written, the fingerprints, the notes",
    )
    parser.set_defaults(run=run_trust_root)


def run_trust_root(args: argparse.Namespace) -> int:
    from execution_proof.client.service import Client
    from execution_proof.runtime.files import write_atomically

    base_url = (args.base_url or os.environ.get("SERVICE_BASE_URL") or "").strip()
    out = Path(args.out)
    try:
        if not base_url:
            raise UsageError("give the service's address: --base-url URL (or SERVICE_BASE_URL)")
        tsa_pem = _read_pem(args.tsa_roots) if args.tsa_roots else None
        if not out.parent.is_dir():
            raise CouldNotWrite(f"cannot write {args.out}: the folder {out.parent} does not exist")
        with Client(base_url) as client:
            root, log = client.trust_root_and_log(tsa_roots=tsa_pem)
        published_policy = log.get("policy") if isinstance(log, dict) else None
        data = root.to_bytes()
        previous = out.read_bytes() if out.is_file() else None
        write_atomically(out, data)
    except (Error, OSError) as exc:
        if isinstance(exc, OSError):
            exc = CouldNotWrite(f"cannot write {args.out}: {exc.strerror or exc}")
        print(f"error: {describe(exc)}; no trust root written", file=sys.stderr)
        if args.json:
            print_json(json_failure(exc, service_url=base_url or None, saved=None))
        return 2
    notes = _notes(root, published_policy)
    if previous is not None:
        what = "it was identical" if previous == data else "it differed: compare the fingerprints again"
        notes.append(f"replaced the existing {args.out} ({what})")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    found = fingerprints(root, data)
    if args.json:
        print_json(
            json_ok(
                {
                    "saved": args.out,
                    "service_url": root.service_url,
                    "log": root.log_origin is not None,
                    "fingerprints": [{"label": label, "fingerprint": value} for label, value in found],
                    "notes": notes,
                }
            )
        )
    else:
        for label, value in found:
            print(f"{label}  {value}")
    print(f"wrote {args.out}: compare these fingerprints with the operator's over another channel", file=sys.stderr)
    return 0


def _notes(root: TrustRoot, published_policy: object) -> list[str]:
    if root.log_origin is None:
        return ['the service runs no transparency log: the trust root pins no log ("log": null)']
    if root.policy_text != published_policy:
        return [
            "the service publishes no witness policy naming its log: the trust root's policy is its log key first "
            "(with quorum none when it names no witness)"
        ]
    return []


def _read_pem(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CouldNotWrite(f"--tsa-roots: cannot read {path}: {exc.strerror or exc}") from exc
