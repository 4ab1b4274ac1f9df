"""Third-party verification for the ``verify`` command: the I/O around receipts.verifier.

Every check is decided by the pure verifier (receipts/verifier.py); this module reads saved
files, hashes local files, fetches public keys and chain links over HTTP, and renders the
report. Nothing here trusts the service's own verdict.

An offline bundle (``GET /v1/receipts/{id}/bundle``, docs/bundles.md) carries keys and a
chain segment itself, and its chain is checked with no network access at all. The keys it
carries prove nothing about who signed it (anyone can make a key and sign a bundle with it),
so a bundle verifies only against *pinned* keys: a saved key set (``--keys``) or the
service's published keys (``--base-url`` / ``SERVICE_BASE_URL``, the one request made), and
its carried keys must be those. Without pinned keys the report still says whether the
signatures match the carried keys, but ``ok`` is false and the verdict is NOT VERIFIED.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from execution_proof.cli import verify_log
from execution_proof.receipts.policy import PolicyError
from execution_proof.receipts.signing import KeyRing, KeySetError, load_key_ring
from execution_proof.receipts.verifier import (
    BundleError,
    BundleParts,
    bundle_parts,
    carried_key_ring,
    carried_keys_match,
    check_bundle_chain,
    check_receipt,
    is_bundle,
    walk_step,
)

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class VerifyOptions:
    receipt_path: str
    input_path: str | None = None
    output_path: str | None = None
    base_url: str | None = None
    """Service chosen by the user (``--base-url`` or ``SERVICE_BASE_URL``); None: not chosen
    (a receipt then uses ``DEFAULT_BASE_URL``; a bundle is checked against its own keys only)."""
    keys_path: str | None = None
    chain: bool = False
    max_links: int = 1000
    salt_hex: str | None = None
    """Salt (hex) of a blinded input hash: the input is hashed as sha256(salt || file)."""
    log_key: str | None = None
    """The transparency log's verifier key to pin: check the receipt's inclusion (docs/log.md)."""
    since_checkpoint: str | None = None
    """An older checkpoint (signed note) the log must be consistent with (needs ``log_key``)."""
    log_policy: str | None = None
    """A C2SP tlog-policy file: its log key, and the witness quorum the checkpoint must meet."""
    tsa_roots: str | None = None
    """A PEM file of trusted TSA roots: check the proof's checkpoint's RFC 3161 time-stamps."""


class VerifyInputError(Exception):
    """A file or the service could not be read; the report carries the message."""


def extract_receipt(document: Any) -> dict[str, Any]:
    """The receipt inside a saved document: a bare receipt or a create/read response body."""
    if isinstance(document, dict) and isinstance(document.get("receipt"), dict):
        document = document["receipt"]
    if not isinstance(document, dict) or "receipt_hash" not in document:
        raise VerifyInputError("the file holds no receipt (expected a receipt object or a response body)")
    return document


def _bundle_parts(document: dict[str, Any]) -> BundleParts:
    try:
        return bundle_parts(document)
    except BundleError as exc:
        raise VerifyInputError(str(exc)) from exc


def _load_json_file(path: str) -> Any:
    try:
        return orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise VerifyInputError(f"cannot read {path}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise VerifyInputError(f"{path} is not valid JSON") from exc


def _fetch_json(client: httpx.Client, url: str, params: dict[str, str] | None = None) -> Any | None:
    """GET a JSON document; None for 404; ``VerifyInputError`` for anything else."""
    try:
        response = client.get(url, params=params)
    except httpx.HTTPError as exc:
        raise VerifyInputError(f"cannot reach {url}: {exc}") from exc
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise VerifyInputError(f"{url} answered HTTP {response.status_code}")
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise VerifyInputError(f"{url} did not answer JSON") from exc


def _load_keys(options: VerifyOptions, client: httpx.Client | None) -> tuple[KeyRing, str]:
    if options.keys_path or client is None:
        source = options.keys_path or ""
        document = _load_json_file(source)
    else:
        source = (options.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/public-key"
        document = _fetch_json(client, source)
        if document is None:
            raise VerifyInputError(f"{source} not found")
    try:
        return load_key_ring(document), source
    except KeySetError as exc:
        raise VerifyInputError(f"key set from {source} is malformed: {exc}") from exc


def _walk_chain(
    receipt: dict[str, Any], keyring: KeyRing, client: httpx.Client, options: VerifyOptions
) -> tuple[list[dict[str, Any]], bool, bool]:
    """(links, all links good, stopped at max_links)."""
    links: list[dict[str, Any]] = []
    current = receipt
    base = (options.base_url or DEFAULT_BASE_URL).rstrip("/")
    while isinstance(current.get("prev_receipt_hash"), str):
        if len(links) >= options.max_links:
            return links, all(link["ok"] for link in links), True
        prev_hash = current["prev_receipt_hash"]
        document = _fetch_json(
            client, f"{base}/v1/receipts/{prev_hash}", params={"project_id": str(current.get("project_id"))}
        )
        if document is None:
            links.append(walk_step(receipt, prev_hash, None, keyring))
            break
        prev = extract_receipt(document)
        links.append(walk_step(receipt, prev_hash, prev, keyring))
        current = prev
    return links, all(link["ok"] for link in links), False


@contextlib.contextmanager
def _no_network() -> Iterator[httpx.Client]:
    """A client that refuses every request: a bundle is verified without the network."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise VerifyInputError(f"a bundle is verified offline; refusing to fetch {request.url}")

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client:
        yield client


def _pinned_bundle_keys(options: VerifyOptions) -> tuple[KeyRing, str] | None:
    """The keys a bundle is verified against: ``--keys``, else fetched from the chosen service
    (the only request a bundle's verification makes); None when neither was given."""
    if options.keys_path:
        return _load_keys(options, None)
    if options.base_url:
        with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
            return _load_keys(options, client)
    return None


def _carried_bundle_keys(carried: Any) -> tuple[KeyRing, str]:
    """The keys the bundle carries, as a ring (for the unpinned report only)."""
    try:
        return carried_key_ring(carried), "the bundle"
    except BundleError as exc:
        raise VerifyInputError(str(exc)) from exc


def run_verify(options: VerifyOptions, hash_file: Callable[..., str]) -> dict[str, Any]:
    """Verify one receipt or bundle; the report says every check, ``ok`` and any ``error``."""
    report: dict[str, Any] = {"ok": False, "checks": {}, "error": None}
    try:
        document = _load_json_file(options.receipt_path)
        bundle = _bundle_parts(document) if is_bundle(document) else None
        receipt = bundle.receipt if bundle else extract_receipt(document)
        salt = b""
        if options.salt_hex is not None:
            try:
                salt = bytes.fromhex(options.salt_hex)
            except ValueError as exc:
                raise VerifyInputError("--salt must be hexadecimal (as `hash --salt` printed it)") from exc
        if salt and options.input_path is None:
            raise VerifyInputError("--salt applies to the input: give --input FILE too")
        report["bundle"] = bundle is not None
        report.update(
            receipt_id=receipt.get("receipt_id"),
            project_id=receipt.get("project_id"),
            created_at=receipt.get("created_at"),
            receipt_hash=receipt.get("receipt_hash"),
            sig_kid=receipt.get("sig_kid"),
        )
        pinned = _pinned_bundle_keys(options) if bundle else None
        with _no_network() if bundle else httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
            if bundle is None:
                keyring, source = _load_keys(options, client)
            elif pinned is None:
                keyring, source = _carried_bundle_keys(bundle.keys)
            else:
                keyring, source = pinned
            report["keys_pinned"] = bundle is None or pinned is not None
            check = check_receipt(receipt, keyring)
            report["key"] = {
                "source": source,
                "kid": check.kid,
                "known": check.key_known,
                "active": check.key_active,
            }
            checks = report["checks"]
            if bundle is not None and pinned is not None:
                checks["bundle_keys"], report["key"]["differing_kids"] = carried_keys_match(bundle.keys, keyring)
            report["recomputed_receipt_hash"] = check.recomputed_receipt_hash
            checks["receipt_hash_recompute"] = check.receipt_hash_recompute
            checks["signature"] = check.signature
            for name, path, field in (
                ("input_hash", options.input_path, "input_hash"),
                ("output_hash", options.output_path, "output_hash"),
            ):
                if path is not None:
                    try:
                        local = hash_file(path, salt) if salt and name == "input_hash" else hash_file(path)
                    except OSError as exc:
                        raise VerifyInputError(f"cannot read {path}: {exc.strerror}") from exc
                    report[f"local_{name}"] = local
                    checks[name] = local == receipt.get(field)
            if salt:
                report["salted_input"] = True
            if bundle:
                report["chain"], checks["chain"] = check_bundle_chain(
                    receipt, bundle.chain, keyring, bundle.claimed_complete
                )
            elif options.chain:
                links, chain_ok, truncated = _walk_chain(receipt, keyring, client, options)
                report["chain"] = {"links": links, "truncated": truncated}
                checks["chain"] = chain_ok
        log_options = (options.log_key, options.since_checkpoint, options.log_policy, options.tsa_roots)
        if any(option is not None for option in log_options):
            report["log"] = _check_log(receipt, bundle, options, checks)
        report["ok"] = all(checks.values()) and report["keys_pinned"]
    except VerifyInputError as exc:
        report["error"] = str(exc)
    return report


def _check_log(
    receipt: dict[str, Any], bundle: BundleParts | None, options: VerifyOptions, checks: dict[str, bool]
) -> Any:
    """The log checks: the bundle's proof offline (the tiles of ``--since-checkpoint`` are
    the one thing fetched), else the service's proof (with ``--tsa-roots``, the service's
    bundle: its proof is against a time-stamped checkpoint, and comes with the stamps)."""
    base = (options.base_url or (None if bundle else DEFAULT_BASE_URL) or "").rstrip("/") or None
    online = bundle is None or options.since_checkpoint is not None
    try:
        policy = verify_log.load_policy(options.log_policy) if options.log_policy else None
        roots = verify_log.load_tsa_roots(options.tsa_roots) if options.tsa_roots else None
        if options.log_key is not None:
            log_key = verify_log.parse_log_key(options.log_key)
        elif policy is not None:
            try:
                log_key = policy.log_key()
            except PolicyError as exc:
                raise VerifyInputError(f"--log-policy: {exc}") from exc
        else:
            raise VerifyInputError(
                "--since-checkpoint and --tsa-roots need --log-key or --log-policy (the log's key to pin)"
            )
        with httpx.Client(timeout=HTTP_TIMEOUT_S) if online else _no_network() as client:
            bundle_log: Any = (bundle.log or {"proof": None}) if bundle else None
            stamps: Any = bundle.timestamps if bundle else None
            if bundle is None and roots is not None:
                bundle_log, stamps = verify_log.service_bundle_log(receipt, base, client)
            report, more = verify_log.check(
                receipt,
                bundle_log,
                log_key,
                options.since_checkpoint,
                base,
                client,
                policy,
                verify_log.Stamps(stamps or [], roots) if roots is not None else None,
            )
    except verify_log.LogInputError as exc:
        raise VerifyInputError(str(exc)) from exc
    checks.update(more)
    return report


def _mark(ok: bool) -> str:
    return "[ok]  " if ok else "[FAIL]"


def render_report(report: dict[str, Any]) -> str:
    """A report a person can read."""
    if report.get("error"):
        return f"error: {report['error']}"
    checks = report["checks"]
    key = report.get("key", {})
    lines = [f"Receipt {report.get('receipt_id')} (project {report.get('project_id')}, {report.get('created_at')})"]
    lines.append(
        f"  {_mark(checks['receipt_hash_recompute'])} self-consistency: receipt_hash recomputed from the "
        f"fields is {report.get('recomputed_receipt_hash')}"
    )
    pinned = report.get("keys_pinned", True)
    if "bundle_keys" in checks:
        lines.append(
            f"  {_mark(checks['bundle_keys'])} the bundle's keys "
            + (
                f"are the pinned keys from {key.get('source')}"
                if checks["bundle_keys"]
                else f"are NOT the pinned keys from {key.get('source')} "
                f"(differing kids: {', '.join(key.get('differing_kids') or ['malformed key set'])})"
            )
        )
    if not key.get("known"):
        key_text = f"key {key.get('kid')!r} is not in the key set from {key.get('source')}"
    elif not pinned:
        key_text = f"Ed25519 signature matches key {key.get('kid')!r} carried by the bundle itself (NOT pinned)"
    else:
        state = "the active key" if key.get("active") else "a retired key"
        key_text = f"Ed25519 signature by key {key.get('kid')!r} ({state}, from {key.get('source')})"
    lines.append(f"  {_mark(checks['signature'])} {key_text}")
    for name in ("input_hash", "output_hash"):
        if name in checks:
            lines.append(
                f"  {_mark(checks[name])} local file hash "
                f"{'(salted) ' if name == 'input_hash' and report.get('salted_input') else ''}"
                f"{report[f'local_{name}']} "
                f"{'matches' if checks[name] else 'does NOT match'} {name}"
            )
    if "chain" in checks:
        chain = report["chain"]
        lines.append(f"  {_mark(checks['chain'])} chain: {len(chain['links'])} earlier link(s) checked")
        if "complete" in chain:
            lines.append(
                "      complete: the segment reaches the start of the chain (prev_receipt_hash null)"
                if chain["complete"]
                else "      not complete: earlier receipts are not in the bundle"
            )
            if chain["claimed_complete"] and not chain["complete"]:
                lines.append("      [FAIL] the bundle claims chain_complete, but its last receipt has a previous one")
        for link in chain["links"]:
            if not link.get("linked", True):
                lines.append(f"      [FAIL] {link['receipt_id']} is not the receipt its successor names")
            elif not link["found"]:
                lines.append(f"      [FAIL] {link['receipt_hash']} not found (deleted or past retention)")
            else:
                lines.append(f"      {_mark(link['ok'])} {link['receipt_id']} {link['receipt_hash']}")
        if chain["truncated"]:
            lines.append("      (stopped at --max-links; earlier links not checked)")
    if report.get("log"):
        lines.extend(verify_log.render(report["log"], _mark))
    if report["ok"]:
        lines.append("Verdict: VALID")
    elif not pinned and all(checks.values()):
        lines.append(
            "Verdict: NOT VERIFIED. The bundle is consistent with the keys it carries, but nothing "
            "shows those keys are the service's: anyone can make a key and sign a bundle with it. "
            "Pin the keys: --keys KEYS.json (a GET /v1/public-key body you saved) or --base-url URL "
            "(or SERVICE_BASE_URL) of the service."
        )
    else:
        lines.append("Verdict: INVALID")
    lines.append(
        "(A valid receipt proves these hashes were signed by the service's key; it does not prove the raw data.)"
    )
    return "\n".join(lines)
