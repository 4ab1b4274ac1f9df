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

``--sigstore DIR`` also writes what a Sigstore verifier pins (receipts/sigstore.py,
docs/attestations.md): ``DIR/trusted_root.json`` (the log), ``DIR/keys.json`` and
``DIR/keys/<kid>.pem`` (the receipt keys the trust root's roots certify, each certificate checked
first). With ``--trust-root PINNED.json`` instead of ``--out`` it refreshes those files after a
key rotation: the keys the service publishes now, judged by the roots PINNED.json pins, and its
log; no new trust root, so no fingerprint to compare. Each file is written atomically; a
``keys/<kid>.pem`` of a key no longer in keys.json is removed.

A client verb: no server library (the base install has none). Exit 0 written, 2 not written
(usage, the service unreachable or its answers malformed, a PEM file unreadable, no key the roots
certify). ``--json``: one JSON document on stdout whatever happens (cli/output.py), the
fingerprints as members.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from execution_proof.receipts.sigstore import TrustMaterial

TRUST_ROOT_EPILOG = epilog(
    "SERVICE_BASE_URL (the service, when --base-url is not given; one of the two is needed).",
    ok="written",
    one="(not used)",
    two="not written (bad usage, the service unreachable, refusing, publishing no receipt roots or answering "
    "malformed ones, a PEM file unreadable, the folder missing, with --sigstore no receipt key the roots certify)",
)
PEM_NAME = re.compile(r"key-[0-9a-f]{16}\.pem")
"""The ``DIR/keys/`` files ``--sigstore`` writes (a certified key's kid), the only ones it removes."""


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
    written = parser.add_mutually_exclusive_group(required=True)
    written.add_argument("--out", metavar="FILE", help="where to write the trust root (replaced if it exists)")
    written.add_argument(
        "--trust-root",
        metavar="PINNED",
        help="instead of --out, with --sigstore: refresh the --sigstore files against the roots and log this "
        "trust root file pins (after a key rotation), writing no trust root (the service: --base-url, else "
        "SERVICE_BASE_URL, else the file's service_url)",
    )
    parser.add_argument(
        "--tsa-roots", metavar="PEM", help="root certificates of the time-stamp authorities to pin (one or several)"
    )
    parser.add_argument(
        "--sigstore",
        metavar="DIR",
        help="also write DIR/trusted_root.json, DIR/keys.json and DIR/keys/<kid>.pem for Sigstore verifiers "
        "(DIR is made if missing)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=JSON_HELP + ": where it was written, the fingerprints, the notes, the --sigstore files",
    )
    parser.set_defaults(run=run_trust_root)


def run_trust_root(args: argparse.Namespace) -> int:
    from execution_proof.client.service import Client
    from execution_proof.runtime.files import write_atomically

    base_url = (args.base_url or os.environ.get("SERVICE_BASE_URL") or "").strip()
    out = Path(args.out) if args.out else None
    sigstore_dir = Path(args.sigstore) if args.sigstore else None
    material: TrustMaterial | None = None
    written: list[str] = []
    try:
        _check_usage(args)
        pinned = TrustRoot.load(args.trust_root) if args.trust_root else None
        if pinned is not None and not base_url:
            base_url = pinned.service_url
        if not base_url:
            raise UsageError("give the service's address: --base-url URL (or SERVICE_BASE_URL)")
        tsa_pem = _read_pem(args.tsa_roots) if args.tsa_roots else None
        if out is not None and not out.parent.is_dir():
            raise CouldNotWrite(f"cannot write {args.out}: the folder {out.parent} does not exist")
        if sigstore_dir is not None and not sigstore_dir.is_dir() and not sigstore_dir.parent.is_dir():
            raise CouldNotWrite(f"cannot write {args.sigstore}: the folder {sigstore_dir.parent} does not exist")
        with Client(base_url) as client:
            root, log = client.trust_root_and_log(tsa_roots=tsa_pem) if pinned is None else (pinned, None)
            if sigstore_dir is not None:
                material = _material(root, client.public_keys())
        published_policy = log.get("policy") if isinstance(log, dict) else None
        data = root.to_bytes()
        previous = out.read_bytes() if out is not None and out.is_file() else None
        if out is not None:
            write_atomically(out, data)
            written.append(args.out)
        notes = _notes(root, published_policy) if pinned is None else []
        if previous is not None:
            what = "it was identical" if previous == data else "it differed: compare the fingerprints again"
            notes.append(f"replaced the existing {args.out} ({what})")
        if material is not None and sigstore_dir is not None:
            notes += _write_sigstore(sigstore_dir, material, written)
    except (Error, OSError) as exc:
        if isinstance(exc, OSError):
            exc = CouldNotWrite(f"cannot write {exc.filename or args.out or args.sigstore}: {exc.strerror or exc}")
        if written:
            done = f"wrote only {', '.join(written)}"
        else:
            done = "nothing written" if args.trust_root else "no trust root written"
        print(f"error: {describe(exc)}; {done}", file=sys.stderr)
        if args.json:
            print_json(json_failure(exc, service_url=base_url or None, saved=args.out if written else None))
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    found = fingerprints(root, data) if pinned is None else []
    if args.json:
        document: dict[str, Any] = {
            "saved": args.out,
            "service_url": root.service_url,
            "log": root.log_origin is not None,
            "fingerprints": [{"label": label, "fingerprint": value} for label, value in found],
            "notes": notes,
        }
        if material is not None:
            document["sigstore"] = _sigstore_member(args.sigstore, material)
        print_json(json_ok(document))
    else:
        for label, value in found:
            print(f"{label}  {value}")
    if out is not None:
        print(f"wrote {args.out}: compare these fingerprints with the operator's over another channel", file=sys.stderr)
    if material is not None:
        kids = ", ".join(material.certified.keys)
        print(f"wrote {args.sigstore}: trusted_root.json, keys.json, keys/ ({kids})", file=sys.stderr)
    return 0


def _check_usage(args: argparse.Namespace) -> None:
    """What argparse cannot say (--out and --trust-root, one of them, it says itself)."""
    if args.trust_root is not None:
        if args.sigstore is None:
            raise UsageError("--trust-root refreshes the --sigstore files: give --sigstore DIR")
        if args.tsa_roots is not None:
            raise UsageError("--trust-root writes no trust root: leave out --tsa-roots")


def _material(root: TrustRoot, public_keys: Any) -> TrustMaterial:
    from execution_proof.receipts.sigstore import trust_material

    return trust_material(root, public_keys)


def _write_sigstore(folder: Path, material: TrustMaterial, written: list[str]) -> list[str]:
    """Write the --sigstore files, each atomically (the PEM files first, trusted_root.json
    last: ``written`` grows as they land), then remove the PEM files of keys no longer in
    keys.json. The notes: each key left out, a trusted root without a log, what changed."""
    import orjson

    from execution_proof.receipts.sigstore import KEYS_FILE
    from execution_proof.runtime.files import write_atomically

    notes = [f"{gone.kid} is not in {KEYS_FILE}: {gone.why}" for gone in material.certified.left_out]
    if not material.log:
        notes.append(
            "trusted_root.json names no transparency log (no tlogs): the trust root pins none, so a Sigstore "
            "verifier asking for a log entry refuses every bundle"
        )
    try:
        before: set[str] | None = set(orjson.loads((folder / KEYS_FILE).read_bytes()))
    except (OSError, ValueError, TypeError):
        before = None
    (folder / "keys").mkdir(parents=True, exist_ok=True)
    for name, data in material.files().items():
        write_atomically(folder / name, data)
        written.append(str(folder / name))
    for stale in sorted((folder / "keys").iterdir()):
        if PEM_NAME.fullmatch(stale.name) and stale.name.removesuffix(".pem") not in material.certified.keys:
            stale.unlink()
    after = set(material.certified.keys)
    if before is not None and before != after:
        added, removed = sorted(after - before), sorted(before - after)
        notes.append(f"{KEYS_FILE} changed: added {', '.join(added) or 'none'}; removed {', '.join(removed) or 'none'}")
    return notes


def _sigstore_member(folder: str, material: TrustMaterial) -> dict[str, Any]:
    return {
        "dir": folder,
        "files": sorted(material.files()),
        "keys": list(material.certified.keys),
        "left_out": [{"kid": gone.kid, "why": gone.why} for gone in material.certified.left_out],
        "log": material.log,
    }


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
