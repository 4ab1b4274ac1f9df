"""``trust-root``: write the file a verifier pins (docs/trust-root.md) and print its fingerprints.

It asks the service for its receipt keys (``GET /v1/public-key``: every key, active and
retired) and its log (``GET /v1/log``: origin, verifier key, witness policy; a service without
a log answers 404 or 503 ``log_unavailable`` and the file says ``"log": null``), adds the TSA
roots of ``--tsa-roots``, checks the whole by reading it back (receipts/trust_root.py), writes
it atomically (a temporary file in the same folder, then a rename; mode 0644; an existing file
is replaced, with a note) and prints one fingerprint a line, ``<label>  sha256:<hex>``, to
compare with the operator's over another channel.

A client verb: no server library (the base install has none). Exit 0 written, 2 not written
(usage, the service unreachable or its answers malformed, a PEM file unreadable).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from execution_proof.cli.http_client import Client, HttpError, Reply
from execution_proof.receipts.trust_root import (
    TrustRootError,
    build_trust_root,
    encode_trust_root,
    fingerprints,
    parse_trust_root,
    pem_roots,
)

FILE_MODE = 0o644


class CouldNotWrite(Exception):
    """The trust root cannot be made; the message says why (exit 2)."""


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = verbs.add_parser(
        "trust-root",
        help="write the service's keys, log key, witness policy and TSA roots to one file to pin; print fingerprints",
        description="Fetch GET /v1/public-key and GET /v1/log, write them (with --tsa-roots) to --out as a trust "
        "root for verify --trust-root, and print the SHA-256 fingerprint of each key to compare out of band. "
        "Exit 0 written, 2 not written.",
    )
    parser.add_argument("--base-url", help="the service (default $SERVICE_BASE_URL; one of the two is needed)")
    parser.add_argument(
        "--out", required=True, metavar="FILE", help="where to write the trust root (replaced if it exists)"
    )
    parser.add_argument(
        "--tsa-roots", metavar="PEM", help="root certificates of the time-stamp authorities to pin (one or several)"
    )
    parser.set_defaults(run=run_trust_root)


def run_trust_root(args: argparse.Namespace) -> int:
    base_url = (args.base_url or os.environ.get("SERVICE_BASE_URL") or "").strip()
    if not base_url:
        print("error: give the service's address: --base-url URL (or SERVICE_BASE_URL)", file=sys.stderr)
        return 2
    try:
        tsa_pem = _read_pem(args.tsa_roots) if args.tsa_roots else None
        if tsa_pem is not None:
            pem_roots(tsa_pem)  # refused before anything is asked of the service
        folder = Path(args.out).parent
        if not folder.is_dir():
            raise CouldNotWrite(f"cannot write {args.out}: the folder {folder} does not exist")
        with Client() as client:
            keys = _fetch_json(client, base_url.rstrip("/") + "/v1/public-key")
            log = _fetch_log(client, base_url.rstrip("/") + "/v1/log")
        document = build_trust_root(base_url, keys, log, tsa_pem)
        data = encode_trust_root(document)
        replaced = _write_atomically(Path(args.out), data)
    except (CouldNotWrite, TrustRootError) as exc:
        print(f"error: {exc}; no trust root written", file=sys.stderr)
        return 2
    root = parse_trust_root(data)
    if root.log_origin is None:
        print('note: the service runs no transparency log: the trust root pins no log ("log": null)', file=sys.stderr)
    elif isinstance(log, dict) and root.policy_text != log.get("policy"):
        print(
            "note: the service publishes no witness policy naming its log: the trust root's policy is "
            "its log key first (with quorum none when it names no witness)",
            file=sys.stderr,
        )
    if replaced is not None:
        print(f"note: replaced the existing {args.out} ({replaced})", file=sys.stderr)
    for label, value in fingerprints(root, data):
        print(f"{label}  {value}")
    print(f"wrote {args.out}: compare these fingerprints with the operator's over another channel", file=sys.stderr)
    return 0


def _read_pem(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CouldNotWrite(f"--tsa-roots: cannot read {path}: {exc.strerror or exc}") from exc


def _get(client: Client, url: str) -> Reply:
    try:
        return client.get(url, headers={"Accept": "application/json"})
    except HttpError as exc:
        raise CouldNotWrite(f"cannot reach the service: {exc}") from exc


def _json_body(reply: Reply, url: str) -> Any:
    if reply.status != 200:
        raise CouldNotWrite(f"GET {url} answered {reply.status}: {_error_message(reply.body)}")
    try:
        return reply.json()
    except ValueError as exc:
        raise CouldNotWrite(f"GET {url} did not answer JSON") from exc


def _fetch_json(client: Client, url: str) -> Any:
    return _json_body(_get(client, url), url)


def _fetch_log(client: Client, url: str) -> Any | None:
    """``GET /v1/log``'s body, or None when the service runs no log (404, or 503 ``log_unavailable``)."""
    reply = _get(client, url)
    if reply.status == 404 or (reply.status == 503 and _error_code(reply.body) == "log_unavailable"):
        return None
    return _json_body(reply, url)


def _error(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, dict) else {}


def _error_code(body: bytes) -> str:
    code = _error(body).get("code")
    return code if isinstance(code, str) else ""


def _error_message(body: bytes) -> str:
    error = _error(body)
    message = error.get("message")
    if isinstance(message, str):
        return f"{error.get('code', 'error')}: {message}"[:300]
    return body[:200].decode("utf-8", "replace") or "(no body)"


def _write_atomically(path: Path, data: bytes) -> str | None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename;
    returns a note on the file it replaced (None: there was none)."""
    try:
        previous = path.read_bytes() if path.is_file() else None
    except OSError:
        previous = None
    folder = path.parent if str(path.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CouldNotWrite(f"cannot write in {folder}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise CouldNotWrite(f"cannot write {path}: {exc.strerror or exc}") from exc
    if previous is None:
        return None
    return "it was identical" if previous == data else "it differed: compare the fingerprints again"
