"""``verify``'s text: a ``VerifyReport`` (client/reports.py; its ``to_dict()`` is the ``--json``
document) as a person reads it. Nothing is checked here."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import TYPE_CHECKING

from execution_proof.cli.output import (
    DEFAULT_BASE_URL,
    JSON_HELP,
    HelpFormatter,
    UsageError,
    count,
    describe,
    epilog,
    exit_code,
    fail,
    json_failure,
    print_json,
)
from execution_proof.client.reports import ERROR, NOT_VERIFIED, certificate_text

if TYPE_CHECKING:
    from execution_proof.client.attesting import AttestationCheck
    from execution_proof.client.log_checks import LogCheck
    from execution_proof.client.models import Bundle, Receipt
    from execution_proof.client.reports import ChainCheck, KeyCheck, VerifyReport
    from execution_proof.errors import Error
    from execution_proof.receipts.shapes import JSONObject, JSONValue


def _mark(ok: bool) -> str:
    return "[ok]  " if ok else "[FAIL]"


def render_report(report: VerifyReport) -> str:
    """A report a person can read."""
    if report.error:
        return f"error: {report.error}"
    key = report.key
    receipt = report.receipt or {}
    lines = [f"Receipt {receipt.get('receipt_id')} (project {receipt.get('project_id')}, {receipt.get('created_at')})"]
    if report.attestation is not None and report.attestation.form != "bundle":
        lines[0] = f"Attestation ({FORMS[report.attestation.form]}) of r" + lines[0][1:]
    if key is not None:
        lines.extend(_key_lines(key))
    if report.attestation is not None:
        lines.extend(_attestation_lines(report.attestation))
    for checked in report.files:
        lines.append(
            f"  {_mark(checked.ok)} local file hash {'(salted) ' if checked.salted else ''}"
            f"{checked.local} {'matches' if checked.ok else 'does NOT match'} {checked.field}"
        )
    online = report.online
    if online:
        held = (
            "answers it"
            if online.same
            else ("answers a DIFFERENT receipt under its id" if online.found else "does NOT have it (404)")
        )
        lines.append(f"  {_mark(online.same)} the service {online.url} {held}")
    if report.chain is not None:
        lines.extend(_chain_lines(report.chain))
    if report.log is not None:
        lines.extend(_log_lines(report.log))
    lines.extend(f"  note: {text}" for text in report.notes)
    verdict, reason = report.verdict, report.reason
    lines.append(f"Verdict: {verdict}" + (f" ({reason})" if reason else ""))
    lines.append(
        "(A valid receipt proves these hashes were signed by the service's key; it does not prove the raw data.)"
    )
    return "\n".join(lines)


def _key_lines(key: KeyCheck) -> list[str]:
    found = key.receipt
    lines = [
        f"  {_mark(found.receipt_hash_recompute)} self-consistency: receipt_hash recomputed from the "
        f"fields is {found.recomputed_receipt_hash}"
    ]
    if key.bundle_keys is not None:
        lines.append(
            f"  {_mark(key.bundle_keys)} the bundle's keys "
            + (
                f"are the pinned keys from {key.source}"
                if key.bundle_keys
                else f"are NOT the pinned keys from {key.source} "
                f"(differing kids: {', '.join(key.differing_kids or ['malformed key set'])})"
            )
        )
    if key.origin == "certified":
        lines.extend(_certified_lines(key))
        return lines
    if not found.key_known:
        key_text = f"key {found.kid!r} is not in the key set from {key.source}"
    elif not key.pinned:
        key_text = f"Ed25519 signature matches key {found.kid!r} carried by the bundle itself (NOT pinned)"
    else:
        state = "the active key" if found.key_active else "a retired key"
        whose = "pinned by you" if key.origin == "pinned" else "the service's word"
        key_text = f"Ed25519 signature by key {found.kid!r} ({state}, from {key.source}: {whose})"
    lines.append(f"  {_mark(found.signature)} {key_text}")
    return lines


FORMS = {"envelope": "in-toto DSSE envelope", "sigstore": "Sigstore bundle"}


def _attestation_lines(attestation: AttestationCheck) -> list[str]:
    """The envelope's signature (and a bundle's member's receipt), as the checks say them."""
    lines = []
    for name, ok in attestation.results().items():
        unchecked = name == "attestation_signature" and attestation.envelope.signature is None and not ok
        mark = "[--]  " if unchecked and attestation.envelope.kid_matches else _mark(ok)
        lines.append(f"  {mark} attestation: {attestation.detail(name)}")
    return lines


def _certified_lines(key: KeyCheck) -> list[str]:
    """The key of a receipt checked under a version 2 trust root: the signature (when there is
    a key to check it with), then what the certificate rules found."""
    found, state = key.receipt, key.receipt.certificate_state
    if not found.key_known:
        signature = f"  [--]   no key {found.kid!r} at hand to check the signature with"
    else:
        signature = f"  {_mark(found.signature)} Ed25519 signature by key {found.kid!r} (from {key.source})"
    mark = "[--]  " if state == "no_key_certificate" else _mark(state == "ok")
    return [signature, f"  {mark} certificate: {certificate_text(found)}"]


def _chain_lines(chain: ChainCheck) -> list[str]:
    lines = [f"  {_mark(chain.ok)} chain: {len(chain.links)} earlier link(s) checked"]
    if chain.complete is not None:
        lines.append(
            "      complete: the segment reaches the start of the chain (prev_receipt_hash null)"
            if chain.complete
            else "      not complete: earlier receipts are not in the bundle"
        )
        if chain.claimed_complete and not chain.complete:
            lines.append("      [FAIL] the bundle claims chain_complete, but its last receipt has a previous one")
    for link in chain.links:
        if link.linked is False:
            lines.append(f"      [FAIL] {link.receipt_id} is not the receipt its successor names")
        elif not link.found:
            lines.append(f"      [FAIL] {link.receipt_hash} not found (deleted or past retention)")
        elif link.lacks_certificate:
            lines.append(f"      [--]   {link.receipt_id} {link.receipt_hash}: no certificate for its key at hand")
        elif link.key_certificate not in (None, "ok", "no_key_certificate"):
            lines.append(
                f"      [FAIL] {link.receipt_id} {link.receipt_hash}: its key's certificate: {link.key_certificate}"
            )
        else:
            lines.append(f"      {_mark(link.ok)} {link.receipt_id} {link.receipt_hash}")
    if chain.truncated:
        lines.append("      (stopped at --max-links; earlier links not checked)")
    return lines


def _log_lines(log: LogCheck) -> list[str]:
    lines = [f"  {_mark(log.ok)} transparency log: {log.reason}"]
    if log.quorum is not None:
        lines.append(f"  {_mark(log.quorum.ok)} witnesses: {log.quorum.reason}")
    if log.consistency is not None:
        lines.append(f"  {_mark(log.consistency.ok)} {log.consistency.reason}")
    if log.time is not None:
        lines.append(f"  {_mark(log.time.ok)} time: {log.time.reason}")
        for stamp in log.time.stamps or ():
            lines.append(f"      {_mark(stamp.ok)} {stamp.tsa}: {stamp.reason}")
    return lines


VERIFY_EPILOG = epilog(
    f"SERVICE_BASE_URL (the service, when neither --base-url, a trust root nor the file names one; default "
    f"{DEFAULT_BASE_URL}).",
    ok="VALID (every check asked for passed, against keys pinned with --keys or --trust-root, or fetched "
    "from the service; with a pinned log, its inclusion proof too)",
    one="INVALID (evidence: a bad signature, hash or proof; a key certified by no pinned root, a receipt "
    "outside its key's certificate, a revoked key) or NOT VERIFIED (something missing: pending, "
    "no_log_proof, no_quorum, no_keys, no_key_certificate, chain_unavailable, deleted), or no such receipt",
    two="ERROR: could not check (an unreadable or malformed file, trust root or key set, an argument that is "
    "neither a file nor a receipt id, or the service unreachable where it was needed)",
)


def add_parser(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    verify = verbs.add_parser(
        "verify",
        help="verify receipts, bundles or attestations without trusting the service",
        description="Verify receipt, bundle or attestation files (the in-toto envelope or the Sigstore bundle `attest` "
        "saves), receipt ids (fetched from the service) or - (standard input).",
        epilog=VERIFY_EPILOG,
        formatter_class=HelpFormatter,
    )
    verify.add_argument(
        "receipts",
        nargs="+",
        metavar="RECEIPT",
        help="a file (a receipt, a create/read response body, the file submit saved, an offline bundle, or an "
        "attestation: <id>.intoto.jsonl or <id>.sigstore.json), - for standard input, or a receipt id (rcpt_ and 26 "
        "characters) read from the service; anything else is no such file, and nothing is sent",
    )
    for name, field in (("input", "input_hash"), ("output", "output_hash"), ("params", "params_hash")):
        verify.add_argument(
            f"--{name}", metavar="FILE", help=f"local {name} file; its hash must equal {field} (one receipt only)"
        )
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
        help="the service to fetch public keys (unless pinned), the chain, the log proof and receipt ids from; "
        "without it, the service_url the file was saved with, else the default $SERVICE_BASE_URL, else "
        f"{DEFAULT_BASE_URL}. A bundle is checked offline against keys pinned with --keys or --trust-root, "
        "else against the keys of --base-url or SERVICE_BASE_URL (the only request made); a bundle with none "
        "of them is NOT VERIFIED (exit 1)",
    )
    verify.add_argument(
        "--keys",
        metavar="KEYS.json",
        help="keys to pin: a saved key set (GET /v1/public-key body), or the keys.json `trust-root --sigstore DIR` "
        "writes (kid to the base64 DER public key, each checked against the roots when written); beside a version 2 "
        "--trust-root its keys count as pinned (an attestation offline needs them); with --base-url the service "
        "is still used for the chain and the log proof",
    )
    verify.add_argument(
        "--trust-root",
        metavar="FILE",
        help="a trust root (`trust-root` writes it): verify against it alone, offline: the signature with the "
        "keys its receipt roots certify (version 2: the key's certificate from the bundle, or from the service "
        "with --online; version 1: its receipt keys) and, for a bundle, the log inclusion, witness quorum and "
        "time-stamps",
    )
    verify.add_argument(
        "--online",
        action="store_true",
        help="with --trust-root: also ask the service (its service_url, or --base-url) that the receipt still "
        "exists, walk --chain and check a plain receipt's log proof, and (version 2) fetch the keys' certificates "
        "and revocations, judged against the pinned roots; pinned keys and roots stay",
    )
    verify.add_argument("--chain", action="store_true", help="follow prev_receipt_hash links through the service")
    verify.add_argument(
        "--max-links", type=count, default=1000, help="stop the chain walk after this many links (default 1000)"
    )
    verify.add_argument(
        "--no-log",
        action="store_true",
        help="check the signature alone, although the trust root names a log (VALID with reason signature_only)",
    )
    verify.add_argument("--json", action="store_true", help=JSON_HELP + "; a list for several receipts")
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
    verify.set_defaults(run=_verify)


# -- verify


def _verify(args: argparse.Namespace) -> int:
    per_receipt = (args.input, args.output, args.params, args.env, args.salt)
    usage = None
    if len(args.receipts) > 1 and any(option is not None for option in per_receipt):
        usage = "--input, --output, --params, --env and --salt go with one receipt: verify it alone"
    elif args.receipts.count("-") > 1:
        usage = "standard input (-) can be read once"
    if usage is not None:
        return fail(UsageError(usage), as_json=args.json, verdict=ERROR, reason=None)
    codes, documents, texts = [], [], []
    for item in args.receipts:
        code, document, text = _verify_one(item, args)
        codes.append(code)
        documents.append(document)
        texts.append(text)
    if args.json:
        print_json(documents[0] if len(documents) == 1 else documents)
    else:
        print("\n\n".join(texts))
    return 2 if 2 in codes else max(codes)


def _verify_one(item: str, args: argparse.Namespace) -> tuple[int, JSONObject, str]:
    """(exit code, the ``--json`` document, the text) of one receipt, bundle or id."""
    from execution_proof.client.verifying import VerifyOptions, run_verify

    options = VerifyOptions(
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
        require_log=not args.no_log,
    )
    found, failure = _document_of(item, args)
    if failure is not None:
        return _failed(item, failure)
    report = run_verify(dataclasses.replace(options, receipt_path=item, document=found))
    report.item = item
    code = 2 if report.error else 0 if report.ok else 1
    return code, report.to_dict(), render_report(report)


def _failed(item: str, failure: Error) -> tuple[int, JSONObject, str]:
    """An item that could not be read: ERROR (exit 2), or, for a receipt id the service does
    not have, NOT VERIFIED ``deleted`` (exit 1: no such receipt)."""
    from execution_proof.receipts.errors import NotFound

    code, text = exit_code(failure), describe(failure)
    document: JSONObject = {"item": item, **json_failure(failure)}
    if isinstance(failure, NotFound):
        document.update(verdict=NOT_VERIFIED, reason="deleted")
    else:
        document.update(verdict=ERROR, reason=None)
    return code, document, f"error: {text}"


def _document_of(item: str, args: argparse.Namespace) -> tuple[JSONValue, Error | None]:
    """The document to verify for ``-`` (standard input) or a receipt id (read from the
    service); None for a file (the verifier reads it). An argument that is neither an existing
    file nor shaped like a receipt id is "no such file": nothing is sent."""
    from execution_proof.client.arguments import classify
    from execution_proof.client.models import parse_json
    from execution_proof.errors import Error
    from execution_proof.receipts.errors import NotFound

    try:
        kind = classify(item)
        if kind == "stdin":
            return parse_json(sys.stdin.buffer.read(), "standard input"), None
    except Error as exc:
        return None, exc
    if kind == "file":
        return None, None
    from execution_proof.client.service import Client

    try:
        with Client(args.base_url) as client:
            receipt: Receipt | Bundle = client.get(item)
    except NotFound as exc:
        missing = NotFound(f"the service has no receipt {item}: {exc.message}")
        missing.request = exc.request
        return None, missing
    except Error as exc:
        return None, exc
    return receipt.to_dict(), None
