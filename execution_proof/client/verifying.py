"""Third-party verification (``execution_proof.verify``, and the ``verify`` command on it):
the I/O around receipts.verifier.

Every check is decided by the pure verifier (receipts/verifier.py); this module reads saved
files, hashes local files, fetches public keys and chain links over HTTP, and fills the typed
report (``VerifyReport``, client/reports.py) one check at a time. Nothing here trusts the
service's own verdict.

Where the keys come from decides what a VALID verdict means. Keys pinned by the user, a
saved key set (``--keys``) or a trust root (``--trust-root``), are the user's word; keys
fetched from a service (``--base-url``, the ``service_url`` that ``submit`` saved,
``SERVICE_BASE_URL``, the default) are the service's word, which is what a receipt checked
online has always relied on. An offline bundle (docs/bundles.md) carries keys and a chain
segment itself; the keys it carries prove nothing (anyone can make a key and sign a bundle
with it), so a bundle verifies only against keys pinned or fetched as above, and its carried
keys must be those; otherwise ``ok`` is false and the verdict is NOT VERIFIED.

``--trust-root FILE`` verifies against that file alone with no network at all (an
``OfflineClient`` makes any request fail loudly): the signature with the keys the file's
receipt roots certify (version 2: each key of the bundle counts only through its certificate,
client/key_sources.py; version 1: the receipt keys the file pins), and for a bundle the log
inclusion against its log key, the witness quorum against its policy and the time-stamps
against its TSA roots. ``--online`` adds what only the service can say (the receipt still
exists, the chain, the log proof of a plain receipt, and under version 2 the keys'
certificates and revocations, still judged by the pinned roots); what is pinned stays.

The HTTP client (and ``http.client``, ``ssl``) is loaded on the first request, and the log
code (verify_log, x509, asn1crypto) only for a log or time-stamp check: an offline
``verify --keys`` starts as fast as ``hash``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from execution_proof.client.documents import Document, read_document
from execution_proof.client.hashing import HashSource, hash_source, is_given_hash
from execution_proof.client.key_sources import beside_roots, certified_keys, key_ring, pinned_key_file
from execution_proof.client.models import read_json
from execution_proof.client.reports import ChainCheck, CheckedLink, FileCheck, KeyCheck, OnlineCheck, VerifyReport
from execution_proof.errors import Error
from execution_proof.receipts import errors
from execution_proof.receipts.signing import KeyRing
from execution_proof.receipts.verifier import (
    BundleError,
    BundleParts,
    carried_key_ring,
    carried_keys_match,
    check_bundle_chain,
    check_receipt,
    walk_step,
)

if TYPE_CHECKING:
    from execution_proof.client.documents import Attested
    from execution_proof.client.http import HttpClient
    from execution_proof.client.log_checks import LogCheck
    from execution_proof.client.models import Attestation, Bundle, Receipt
    from execution_proof.receipts.shapes import JSONObject, JSONValue
    from execution_proof.receipts.trust_root import TrustRoot

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
HTTP_TIMEOUT_S = 10.0
FILES = (("input", "input_hash"), ("output", "output_hash"), ("params", "params_hash"), ("env", "env_hash"))
"""The local files ``verify`` hashes: (name, as in ``--NAME`` and ``salts``; receipt field)."""


@dataclass(frozen=True)
class VerifyOptions:
    receipt_path: str | None = None
    """The file to verify, unless ``document`` is given (``-``: what was read from stdin)."""
    document: JSONValue = None
    """The document itself (a ``Receipt``'s, ``Bundle``'s or ``Attestation``'s ``to_dict()``)."""
    trust_root: TrustRoot | None = None
    """A trust root already loaded (else ``trust_root_path`` is read)."""
    input_path: HashSource | None = None
    """The input to check: a path, bytes (hashed here) or a ``sha256:`` value (as it is)."""
    output_path: HashSource | None = None
    params_path: HashSource | None = None
    env_path: HashSource | None = None
    base_url: str | None = None
    """``--base-url``: the service for every network check, and for keys when none are pinned."""
    env_base_url: str | None = None
    """``SERVICE_BASE_URL``: after ``--base-url`` and the file's ``service_url``; it also
    names the service whose keys a bundle is checked against when no keys are pinned."""
    keys_path: str | None = None
    """``--keys``: a key set or ``keys.json`` to pin (beside a version 2 trust root: those keys
    count as pinned, the others through their certificates)."""
    trust_root_path: str | None = None
    online: bool = False
    """With ``trust_root_path``: add the network checks (existence, chain, a receipt's log proof)."""
    chain: bool = False
    max_links: int = 1000
    salt_hex: str | None = None
    """Salt (hex) of a blinded input hash: the input is hashed as sha256(salt || file); it
    overrides the input's salt saved in the file's ``salts``."""
    log_key: str | None = None
    """The transparency log's verifier key to pin: check the receipt's inclusion (docs/log.md)."""
    since_checkpoint: str | None = None
    """An older checkpoint (signed note) the log must be consistent with (needs ``log_key``)."""
    log_policy: str | None = None
    """A C2SP tlog-policy file: its log key, and the witness quorum the checkpoint must meet."""
    tsa_roots: str | None = None
    """A PEM file of trusted TSA roots: check the proof's checkpoint's RFC 3161 time-stamps."""
    require_log: bool = True
    """False (``--no-log``): the signature alone, even when the pinned material names a log."""

    def path_of(self, name: str) -> HashSource | None:
        source: HashSource | None = getattr(self, f"{name}_path")
        return source


class _Network:
    """The HTTP client, made (and its module loaded) on the first request; with ``offline``
    set, an ``OfflineClient`` that refuses every request with that reason."""

    def __init__(self, offline: str | None = None) -> None:
        self.offline = offline
        self._client: HttpClient | None = None

    def client(self) -> HttpClient:
        if self._client is None:
            from execution_proof.client.http import HttpClient, OfflineClient

            self._client = OfflineClient(self.offline) if self.offline else HttpClient(timeout=HTTP_TIMEOUT_S)
        return self._client

    def get_json(self, url: str, params: dict[str, str] | None = None) -> JSONValue:
        """GET a JSON document; None for 404; ``errors.InvalidInput`` for anything else."""
        response = self.client().get(url, params=params)  # no reply: an ``errors.Unreachable``
        if response.status == 404:
            return None
        if response.status != 200:
            raise errors.ServiceError(
                f"{url} answered HTTP {response.status}", code="http_error", status=response.status
            )
        try:
            return response.json()
        except orjson.JSONDecodeError as exc:
            raise errors.ServiceError(f"{url} did not answer JSON", code="http_error", status=200) from exc

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def served_receipt(document: JSONValue, url: str) -> JSONObject:
    """The receipt in the service's reply to a read (``{"ok", "receipt"}``): the checks judge
    it (a receipt the service changed is INVALID, not unreadable)."""
    inner = document.get("receipt") if isinstance(document, dict) else None
    if not isinstance(inner, dict) or "receipt_hash" not in inner:
        raise errors.ServiceError(f"{url} answered no receipt", code="http_error", status=200)
    return inner


def read_item(document: JSONValue, where: str) -> Document:
    """The document to verify, read strictly (client/documents.py); ``errors.InvalidInput``."""
    try:
        return read_document(document, where)
    except errors.InvalidInput as exc:
        raise errors.InvalidInput(str(exc)) from exc


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise errors.InvalidInput(f"cannot read {path}: {exc.strerror}") from exc


def _fetch_key_set(net: _Network, base: str, hint: str | None = None) -> tuple[JSONValue, str]:
    """The service's ``GET /v1/public-key`` body and its URL; ``hint``: what to say when it
    cannot be reached (it was no URL the user gave)."""
    source = base + "/v1/public-key"
    try:
        document = net.get_json(source)
    except errors.Unreachable as exc:
        if hint is None:
            raise
        raise type(exc)(f"{exc}. {hint}") from exc
    if document is None:
        raise errors.InvalidInput(f"{source} not found")
    return document, source


def _fetch_keys(net: _Network, base: str, hint: str | None = None) -> tuple[KeyRing, str]:
    """The service's keys (``_fetch_key_set``) as a ring."""
    document, source = _fetch_key_set(net, base, hint)
    return key_ring(document, source), source


def load_trust_root(path: str) -> TrustRoot:
    from execution_proof.receipts.trust_root import TrustRootError, parse_trust_root

    data = _read(path)
    try:
        return parse_trust_root(data)
    except TrustRootError as exc:
        raise errors.InvalidInput(f"trust root {path} is malformed: {exc}") from exc


def service_url(options: VerifyOptions, saved: str | None, trust: TrustRoot | None) -> str:
    """The service of the network checks: ``--base-url``, else the trust root's, else the
    ``service_url`` that ``submit`` saved in the file, else ``SERVICE_BASE_URL``, else the default."""
    for url in (options.base_url, trust.service_url if trust else None, saved, options.env_base_url):
        if isinstance(url, str) and url.strip():
            return url.strip().rstrip("/")
    return DEFAULT_BASE_URL


def _salts(document: Document, options: VerifyOptions) -> dict[str, bytes]:
    """The salt of each salted file: the file's ``salts`` (saved by ``submit --salt``), and
    ``--salt`` for the input."""
    found: dict[str, bytes] = {}
    for name, value in document.salts.items():
        try:
            found[name] = bytes.fromhex(value)
        except ValueError as exc:
            raise errors.InvalidInput(f"the file's salt for {name} is not hexadecimal") from exc
    if options.salt_hex is not None:
        if options.input_path is None:
            raise errors.InvalidInput("--salt applies to the input: give --input FILE too")
        try:
            found["input"] = bytes.fromhex(options.salt_hex)
        except ValueError as exc:
            raise errors.InvalidInput("--salt must be hexadecimal (as `hash --salt` printed it)") from exc
    return found


def _walk_chain(receipt: JSONObject, keyring: KeyRing, net: _Network, base: str, max_links: int) -> ChainCheck:
    """The chain walked back through the service, at most ``max_links`` links."""
    links: list[CheckedLink] = []
    current = receipt
    while isinstance(prev_hash := current.get("prev_receipt_hash"), str):
        if len(links) >= max_links:
            return ChainCheck(tuple(links), all(link.ok for link in links), truncated=True)
        url = f"{base}/v1/receipts/{prev_hash}"
        document = net.get_json(url, params={"project_id": str(current.get("project_id"))})
        if document is None:
            links.append(CheckedLink.judged(walk_step(receipt, prev_hash, None, keyring)))
            break
        prev = served_receipt(document, url)
        links.append(CheckedLink.judged(walk_step(receipt, prev_hash, prev, keyring)))
        current = prev
    return ChainCheck(tuple(links), all(link.ok for link in links))


def _keys(
    options: VerifyOptions,
    bundle: BundleParts | None,
    trust: TrustRoot | None,
    net: _Network,
    base: str,
    hint: str | None = None,
) -> tuple[KeyRing, str, str]:
    """(key ring, where it came from, whose word it is: ``pinned``, ``service``, ``bundle`` or
    ``certified``)."""
    if trust is not None and trust.roots is not None:
        fetched = _fetch_key_set(net, base) if options.online else None
        ring, source, origin = certified_keys(trust, options.trust_root_path, bundle.keys if bundle else None, fetched)
        if options.keys_path:
            pinned = pinned_key_file(read_json(options.keys_path), options.keys_path)
            return beside_roots(ring, pinned), f"{options.keys_path} (pinned), and {source}", origin
        return ring, source, origin
    if trust is not None:
        return trust.keys, f"the trust root {options.trust_root_path or trust.service_url}", "pinned"
    if options.keys_path:
        return pinned_key_file(read_json(options.keys_path), options.keys_path), options.keys_path, "pinned"
    if bundle is None:
        return (*_fetch_keys(net, base, hint), "service")
    chosen = options.base_url or options.env_base_url  # never a URL the bundle names itself
    if chosen:
        return (*_fetch_keys(net, chosen.strip().rstrip("/")), "service")
    try:
        return carried_key_ring(bundle.keys), "the bundle", "bundle"
    except BundleError as exc:
        raise errors.InvalidInput(str(exc)) from exc


NO_SERVICE_HINT = (
    "No service URL was given: give --base-url URL (or set SERVICE_BASE_URL, or verify a file `submit` saved, "
    "which names its service), or pin the keys offline with --keys KEYS.json or --trust-root FILE"
)


def verify(
    item: Receipt | Bundle | Attestation | str | os.PathLike[str],
    *,
    input: HashSource | None = None,
    output: HashSource | None = None,
    params: HashSource | None = None,
    env: HashSource | None = None,
    trust_root: TrustRoot | str | os.PathLike[str] | None = None,
    keys: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    online: bool = False,
    log_policy: str | os.PathLike[str] | None = None,
    log_key: str | None = None,
    since_checkpoint: str | os.PathLike[str] | None = None,
    tsa_roots: str | os.PathLike[str] | None = None,
    chain: bool = False,
    max_links: int = 1000,
    salt: str | None = None,
    require_log: bool = True,
) -> VerifyReport:
    """Verify a ``Receipt``, a ``Bundle``, an ``Attestation`` or a saved file (path) without
    trusting the service: ``input`` ... ``env`` must hash to the receipt's values (each a path
    or bytes, hashed here, or a ``sha256:`` value); the keys are the ``trust_root``'s (offline
    unless ``online``; beside a version 2 one, ``keys`` pins keys too), else those of ``keys``
    (a key set or ``keys.json``), else the service's. When the pinned material names a
    log, the receipt's inclusion is required (``require_log=False``: the signature alone).
    The report's ``verdict`` and ``reason`` say what was found (``raise_for_failure()``
    raises unless VALID); an ``execution_proof.Error`` means it could not check
    (``InvalidInput``, ``Unreachable``, ``ServiceError``)."""
    from execution_proof.client import models

    document: JSONObject | None = None
    path: str | None = None
    if isinstance(item, models.Receipt | models.Bundle | models.Attestation):
        document = item.to_dict()
    elif isinstance(item, str | os.PathLike):
        path = os.fspath(item)
    else:  # an untyped caller's mistake
        raise errors.InvalidInput("verify takes a Receipt, a Bundle, an Attestation or the path of a saved file")
    root = trust_root if not isinstance(trust_root, str | os.PathLike) else None
    options = VerifyOptions(
        receipt_path=path,
        document=document,
        trust_root=root,
        trust_root_path=os.fspath(trust_root) if isinstance(trust_root, str | os.PathLike) else None,
        input_path=input,
        output_path=output,
        params_path=params,
        env_path=env,
        base_url=base_url,
        env_base_url=os.environ.get("SERVICE_BASE_URL") or None,
        keys_path=_path(keys),
        online=online,
        chain=chain,
        max_links=max_links,
        salt_hex=salt,
        log_key=log_key,
        since_checkpoint=_path(since_checkpoint),
        log_policy=_path(log_policy),
        tsa_roots=_path(tsa_roots),
        require_log=require_log,
    )
    report = VerifyReport()
    check(options, report)
    return report


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def run_verify(options: VerifyOptions) -> VerifyReport:
    """Verify one receipt or bundle; the report says every check, ``ok`` and, when it could
    not check, ``error`` (the command line's form)."""
    report = VerifyReport()
    try:
        check(options, report)
    except Error as exc:
        report.error, report.error_kind = str(exc), errors.error_kind(exc)
    return report


def check(options: VerifyOptions, report: VerifyReport) -> None:
    """Fill ``report`` with every check of one receipt or bundle; an ``Error`` when it
    could not check (a file, an option, the service)."""
    net = _Network()
    try:
        if options.online and options.trust_root_path is None and options.trust_root is None:
            raise errors.InvalidInput("--online adds network checks to --trust-root: give --trust-root FILE")
        given: JSONValue
        if options.document is not None:
            given = options.document
        elif options.receipt_path is not None:
            given = read_json(options.receipt_path)
        else:
            raise errors.InvalidInput("nothing to verify: give a receipt or bundle")
        where = {None: "the document", "-": "standard input"}.get(options.receipt_path, options.receipt_path)
        document = read_item(given, where or "the document")
        bundle = document.bundle
        receipt: JSONObject = bundle.receipt if bundle else document.members.get("receipt")  # type: ignore[assignment]
        if document.attested is not None and bundle is None:
            receipt = document.attested.receipt  # type: ignore[assignment]  # a receipt object, read strictly
        salts = _salts(document, options)
        if not options.require_log and _log_options(options):
            raise errors.InvalidInput(
                "--no-log checks the signature alone: drop --log-key, --log-policy, --since-checkpoint and --tsa-roots"
            )
        trust = options.trust_root or (load_trust_root(options.trust_root_path) if options.trust_root_path else None)
        if trust is not None and trust.roots is None and options.keys_path:
            raise errors.InvalidInput(
                "--trust-root (version 1) and --keys both pin keys: give one of them (--keys goes with a version 2 "
                "trust root, which pins roots, not keys)"
            )
        if trust is not None and not options.online:
            net = _Network("--trust-root without --online verifies offline")
        base = service_url(options, document.service_url, trust)
        report.bundle, report.receipt = bundle is not None, receipt
        named = base != DEFAULT_BASE_URL or options.base_url or options.env_base_url
        keyring, source, origin = _keys(options, bundle, trust, net, base, None if named else NO_SERVICE_HINT)
        found = check_receipt(receipt, keyring)
        if bundle is not None and origin not in ("bundle", "certified"):
            same, differing = carried_keys_match(bundle.keys, keyring)
            report.key = KeyCheck(source, origin, found, same, tuple(differing))
        else:
            report.key = KeyCheck(source, origin, found)
        if document.attested is not None:
            from execution_proof.client import attesting

            report.attestation = attesting.check(document.attested, receipt, keyring, bundle)
            report.remarks += report.attestation.remarks()
        _check_files(receipt, options, salts, report)
        if trust is not None and options.online:
            report.online = _check_exists(receipt, net, base)
        if bundle:
            part, chain_ok = check_bundle_chain(receipt, bundle.chain, keyring, bundle.claimed_complete)
            links = tuple(CheckedLink.judged(link) for link in part["links"])
            report.chain = ChainCheck(
                links, chain_ok, complete=part["complete"], claimed_complete=bundle.claimed_complete
            )
        elif options.chain:
            if net.offline:
                raise errors.InvalidInput(
                    "--chain walks the chain on the service: add --online (a bundle carries its chain)"
                )
            report.chain = _walk_chain(receipt, keyring, net, base, options.max_links)
        sigstore = document.attested if document.shape == "sigstore" else None
        _log_checks(_Case(receipt, bundle, options, trust, net, base, sigstore, keyring), report)
    finally:
        net.close()


def _check_files(receipt: JSONObject, options: VerifyOptions, salts: dict[str, bytes], report: VerifyReport) -> None:
    """Each local file (or bytes) hashed, after its salt, against the receipt; a ``sha256:``
    value is compared as it is (a salted one is already salted)."""
    for name, field in FILES:
        source = options.path_of(name)
        if source is None:
            continue
        salt = b"" if is_given_hash(source) else salts.get(name, b"")
        try:
            local = hash_source(source, salt=salt or None)
        except errors.InvalidInput as exc:
            raise errors.InvalidInput(str(exc)) from exc
        report.files.append(FileCheck(field, local, local == receipt.get(field), bool(salt)))


def _log_options(options: VerifyOptions) -> bool:
    """A log option was given (``--log-key``, ``--log-policy``, ``--since-checkpoint``, ``--tsa-roots``)."""
    return any(
        option is not None
        for option in (options.log_key, options.since_checkpoint, options.log_policy, options.tsa_roots)
    )


def _check_exists(receipt: JSONObject, net: _Network, base: str) -> OnlineCheck:
    """``--online``: the service still answers the receipt, and with the same receipt_hash."""
    url = f"{base}/v1/receipts/{receipt.get('receipt_id')}"
    document = net.get_json(url)
    held = served_receipt(document, url) if document is not None else None
    same = held is not None and held.get("receipt_hash") == receipt.get("receipt_hash")
    return OnlineCheck(url, held is not None, same)


@dataclass(frozen=True)
class _Case:
    """One receipt (or bundle) being verified, and what it is verified with: the options,
    the trust root, the network and the service's URL (``service_url``)."""

    receipt: JSONObject
    bundle: BundleParts | None
    options: VerifyOptions
    trust: TrustRoot | None
    net: _Network
    base: str
    sigstore: Attested | None = None
    """A Sigstore bundle's attestation: its log entry, when it has one, is the log proof."""
    keyring: KeyRing | None = None
    """The keys the receipt was checked with (the Sigstore entry's leaf names the receipt's)."""


def _log_checks(case: _Case, report: VerifyReport) -> None:
    """The log checks asked for by the log options, or required by a trust root that pins a
    log: a pinned log makes the receipt's inclusion required (docs/verdicts.md). Offline, a
    document without its proof is NOT VERIFIED ``no_log_proof``; online the service's proof
    is fetched and checked; ``require_log=False`` asks for the signature alone."""
    bundle, options, trust = case.bundle, case.options, case.trust
    pins_log = _log_options(options) or (trust is not None and trust.log_vkey is not None)
    if not options.require_log:
        report.signature_only = True
        if pins_log:
            report.remarks.append("--no-log: the signature alone was checked, not the receipt's log inclusion")
        return
    if not pins_log:
        if trust is not None:
            report.remarks.append("the trust root pins no transparency log: no log check")
        return
    proofless = bundle is None or bundle.log is None or bundle.log.get("proof") is None
    if proofless and report.online is not None and not report.online.found:
        return  # deleted or past retention: NOT VERIFIED ``deleted``, no proof to ask for
    if case.sigstore is not None and case.sigstore.entry is not None:
        pass  # the Sigstore bundle's own entry is checked, offline as a bundle's proof
    elif bundle is None and case.net.offline:
        report.missing.append("no_log_proof")
        report.remarks.append("the document carries no log proof, and the check is offline")
        return
    if bundle is not None and proofless and options.online:
        # --online: the service's proof now, as for a plain receipt (the bundle's keys and
        # chain were checked from the bundle).
        report.remarks.append("the bundle carries no log proof: the service's proof was fetched (--online)")
        case = dataclasses.replace(case, bundle=None)
    elif bundle is not None and bundle.log is None:
        report.missing.append("no_log_proof")
        report.remarks.append("the bundle carries no log member (as from a service that keeps no transparency log)")
        return
    from execution_proof.client import log_checks as verify_log

    try:
        report.log = _check_log(case, report)
    except verify_log.LogInputError as exc:
        raise errors.InvalidInput(str(exc)) from exc


def _check_log(case: _Case, report: VerifyReport) -> LogCheck:
    """The log checks: the bundle's proof offline (the tiles of ``--since-checkpoint`` are
    the one thing fetched), a Sigstore bundle's entry likewise, else the service's proof (with
    TSA roots, the service's bundle: its proof is against a time-stamped checkpoint, and comes
    with the stamps)."""
    from execution_proof.client import log_checks as verify_log
    from execution_proof.client.http import OfflineClient

    bundle, options, sigstore = case.bundle, case.options, case.sigstore
    log_key, policy, roots = verify_log.pinned_log(
        options.log_key, options.log_policy, options.tsa_roots, case.trust, options.trust_root_path
    )
    entry = sigstore.entry if sigstore is not None else None
    carried = bundle is not None or entry is not None  # else the service's proof is fetched
    log_base: str | None = case.base
    if carried and case.trust is None:
        chosen = options.base_url or options.env_base_url
        log_base = chosen.strip().rstrip("/") if chosen else None
    online = not carried or options.since_checkpoint is not None
    client = case.net.client() if online else OfflineClient("a bundle's log proof is checked offline")
    bundle_log: JSONObject | None = bundle.log if bundle else None
    stamps = bundle.timestamps if bundle else None
    inclusion = None
    if sigstore is not None and entry is not None:
        from execution_proof.receipts.attestation_checks import check_tlog_entry

        kid = case.receipt.get("sig_kid")
        key = case.keyring.keys.get(kid) if case.keyring is not None and isinstance(kid, str) else None
        public = bytes(key.verify_key) if key is not None else None
        inclusion = check_tlog_entry(entry, sigstore.attestation, public, log_key)
        if roots is not None:
            report.remarks.append(
                "a Sigstore bundle carries no time-stamps: its time was not checked (the receipt's offline bundle, "
                "`execution-proof bundle`, carries them)"
            )
            roots = None
    elif bundle is None and roots is not None:
        bundle_log, stamps = verify_log.service_bundle_log(case.receipt, log_base, client)
    return verify_log.check(
        case.receipt,
        bundle_log,
        log_key,
        options.since_checkpoint,
        log_base,
        client,
        policy,
        verify_log.Stamps(stamps or [], roots) if roots is not None else None,
        inclusion=inclusion,
    )
