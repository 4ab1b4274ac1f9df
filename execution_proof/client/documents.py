"""What a document a user hands to ``verify`` is, read strictly: one reader per shape.

A document is a bundle exactly when it has a ``format`` member; then it must be a well-formed
bundle of a known format and version (1, or 2 whose every key carries its certificate), else it
is unreadable (``InvalidInput``: exit 2), never verified as something else. A one-byte change
to ``format`` therefore cannot turn a bundle, whose log proof a pinned log requires, into a
plain receipt whose proof is not looked for.

Without ``format`` a document is one of:

- a bare receipt object (docs/receipt-format.md, its 19 members);
- a response body that holds a receipt: ``GET /v1/receipts/{id}`` (``ok``, ``receipt``), or
  a create's reply as ``submit`` saves it (``ok``, ``receipt``, ``idempotency``, ``chain``,
  ``quota``, ``log``, with ``service_url`` and ``salts`` added by the client);
- a receipt's attestation (``GET /v1/receipts/{id}/attestation``): a DSSE envelope (exactly
  ``payloadType``, ``payload``, ``signatures``) or a Sigstore bundle v0.3 (exactly
  ``mediaType``, ``verificationMaterial``, ``dsseEnvelope``), whose Statement holds the receipt
  (receipts/attestation_checks.py reads them).

Each is read against its own member list: an unknown member is refused by name, and so are
members only a bundle has (``keys``, ``timestamps``, ``chain_complete``, ``version``) when
``format`` is missing: that is a bundle whose ``format`` was lost. A receipt that is not of
the receipt object's shape is unreadable too; one whose values were changed is read, and
``verify`` finds it INVALID.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from execution_proof.receipts.attestation import Attestation, AttestationError, parse_envelope
from execution_proof.receipts.attestation_checks import TlogEntry, is_attestation, is_sigstore, parse_sigstore_bundle
from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.verifier import BUNDLE_FORMAT, BUNDLE_VERSIONS, BundleError, BundleParts, carried_key_ring

if TYPE_CHECKING:
    from execution_proof.receipts import shapes
    from execution_proof.receipts.shapes import JSONObject, JSONValue

SALTED = ("input", "output", "params", "env")
"""The files a receipt hashes, as ``salts`` names them."""
TEXT = (
    "receipt_id",
    "project_id",
    "actor_id",
    "created_at",
    "input_hash",
    "status",
    "receipt_hash",
    "signature",
    "sig_kid",
)
NULLABLE = (
    "output_hash",
    "params_hash",
    "env_hash",
    "code_ref",
    "run_id",
    "receipt_kind",
    "prev_receipt_hash",
    "chain_status",
    "expected_prev_receipt_hash",
)
"""A receipt's members by JSON type (docs/receipt-format.md, "The receipt object"): strings,
and strings or null; ``tags`` is an object of strings, or null."""
RECEIPT_MEMBERS = frozenset((*TEXT, *NULLABLE, "tags"))

BUNDLE_REQUIRED = ("format", "version", "created_at", "service", "receipt", "keys", "chain", "chain_complete")
BUNDLE_OPTIONAL = {1: ("log", "timestamps"), 2: ("log", "timestamps", "attestation")}
"""The optional members of each bundle version (version 2: the receipt's attestation
envelope); any other member is refused."""
BUNDLE_ONLY = ("keys", "timestamps", "chain_complete", "version")
"""Members a bundle has and no other document: without ``format``, a bundle that lost it."""
LOG_MEMBERS = ("origin", "log_vkey", "proof")
RESPONSE_MEMBERS = ("ok", "receipt", "idempotency", "chain", "quota", "log", "service_url", "salts")
"""A read's body (``ok``, ``receipt``) and a create's reply as ``submit`` saves it."""

Shape = Literal["bundle", "receipt", "response", "envelope", "sigstore"]
Form = Literal["envelope", "sigstore", "bundle"]


@dataclass(frozen=True)
class Attested:
    """A receipt's attestation that came with a document: the envelope itself (``form``
    ``envelope``), a Sigstore bundle's (``sigstore``: its key ``hint`` and log ``entry``, None
    when it carries none) or a bundle's ``attestation`` member (``bundle``); the Statement's
    receipt and ``log_origin``."""

    form: Form
    attestation: Attestation
    receipt: shapes.ReceiptObject
    log_origin: str | None
    hint: str | None = None
    entry: TlogEntry | None = None


@dataclass(frozen=True)
class Document:
    """A document read strictly: its ``shape``, the receipt it holds, and what came with it
    (a bundle's parts; a saved reply's ``service_url`` and ``salts``, hex by file name; an
    attestation)."""

    shape: Shape
    receipt: shapes.ReceiptObject
    members: JSONObject
    """The document as read (a bare receipt: ``{"receipt": ...}``), minus the client's own
    ``service_url`` and ``salts``."""
    bundle: BundleParts | None = None
    service_url: str | None = None
    salts: Mapping[str, str] = field(default_factory=dict)
    attested: Attested | None = None


def read_document(value: JSONValue, where: str = "the document") -> Document:
    """``value`` as one of the documents above; ``InvalidInput`` naming what is wrong."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} holds no receipt (expected a receipt, a response body or a bundle)")
    if "format" in value:
        return read_bundle(value, where)
    stray = [name for name in BUNDLE_ONLY if name in value]
    if stray:
        raise InvalidInput(
            f"{where} is a malformed bundle: it has {', '.join(stray)} but no format member "
            f'(a bundle starts with "format": "{BUNDLE_FORMAT}")'
        )
    if is_attestation(value):
        attested = read_attestation(value, where)
        shape: Shape = "sigstore" if attested.form == "sigstore" else "envelope"
        return Document(shape, attested.receipt, value, attested=attested)
    if "receipt" in value:
        return _read_response(value, where)
    if not RECEIPT_MEMBERS.intersection(value):
        raise InvalidInput(f"{where} holds no receipt (expected a receipt, a response body or a bundle)")
    return Document("receipt", read_receipt(value, where), {"receipt": value})


def read_receipt(value: JSONValue, where: str) -> shapes.ReceiptObject:
    """A receipt object: exactly its members, each of its JSON type."""
    fault = receipt_fault(value)
    if fault is not None:
        raise InvalidInput(f"{where}: {fault} (docs/receipt-format.md)")
    return value  # type: ignore[return-value]  # receipt_fault checked every member


def receipt_fault(value: JSONValue) -> str | None:
    """What keeps ``value`` from being a receipt object (a member unknown, missing or not of
    its JSON type), None when it is one."""
    if not isinstance(value, dict):
        return "the receipt is not an object"
    unknown = sorted(set(value) - RECEIPT_MEMBERS)
    if unknown:
        return f"the receipt has unknown members: {', '.join(unknown)}"
    for name in TEXT:
        if not isinstance(value.get(name), str):
            return f"the receipt's {name} is not a string" if name in value else f"the receipt has no {name}"
    for name in (*NULLABLE, "tags"):
        if name not in value:
            return f"the receipt has no {name}"
    if any(value[name] is not None and not isinstance(value[name], str) for name in NULLABLE):
        return "a member of the receipt is neither a string nor null"
    tags = value["tags"]
    if tags is not None and not (isinstance(tags, dict) and all(isinstance(tag, str) for tag in tags.values())):
        return "the receipt's tags are not an object of strings (nor null)"
    return None


def read_bundle(value: JSONObject, where: str) -> Document:
    """A bundle (docs/bundles.md): a known format and version, every required member of its
    type, nothing unknown."""
    name = value.get("format")
    if name != BUNDLE_FORMAT:
        raise InvalidInput(f"{where}: unknown document format {name!r} (this verifier reads {BUNDLE_FORMAT!r})")
    version = value.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > max(BUNDLE_VERSIONS):
        raise InvalidInput(
            f"{where}: bundle version {version} was made by a newer version of this software: upgrade the client"
        )
    if version not in BUNDLE_VERSIONS or isinstance(version, bool):
        raise InvalidInput(f"{where}: unsupported bundle version {version!r}")
    missing = [member for member in BUNDLE_REQUIRED if member not in value]
    if missing:
        raise InvalidInput(f"{where}: the bundle has no {', '.join(missing)}")
    unknown = sorted(set(value) - {*BUNDLE_REQUIRED, *BUNDLE_OPTIONAL[2 if version == 2 else 1]})
    if unknown:
        raise InvalidInput(f"{where}: the bundle has unknown members: {', '.join(unknown)}")
    for member in ("created_at", "service"):
        if not isinstance(value[member], str):
            raise InvalidInput(f"{where}: the bundle's {member} is not a string")
    if not isinstance(value["keys"], dict):
        raise InvalidInput(f"{where}: the bundle's keys is not an object")
    if version == 2:
        _read_certified_keys(value["keys"], where)
    if not isinstance(value["chain_complete"], bool):
        raise InvalidInput(f"{where}: the bundle's chain_complete is not true or false")
    attested = _envelope(value["attestation"], "bundle", f"{where} (attestation)") if "attestation" in value else None
    receipt = read_receipt(value["receipt"], f"{where} (receipt)")
    listed = value["chain"]
    if not isinstance(listed, list):
        raise InvalidInput(f"{where}: the bundle's chain is not a list")
    chain: list[JSONObject] = []
    for position, entry in enumerate(listed):
        read_receipt(entry, f"{where} (chain[{position}])")
        if isinstance(entry, dict):
            chain.append(entry)
    log = value.get("log")
    stamps = value.get("timestamps")
    if "log" in value:
        log = _read_log(log, where)
    if "timestamps" in value:
        if "log" not in value:
            raise InvalidInput(f"{where}: the bundle has timestamps but no log")
        if not isinstance(stamps, list) or not all(isinstance(stamp, dict) for stamp in stamps):
            raise InvalidInput(f"{where}: the bundle's timestamps is not a list of objects")
    parts = BundleParts(
        value["receipt"] if isinstance(value["receipt"], dict) else {},
        value["keys"],
        chain,
        value["chain_complete"],
        log if isinstance(log, dict) else None,
        stamps if isinstance(stamps, list) else None,
    )
    return Document("bundle", receipt, value, parts, attested=attested)


def read_attestation(value: JSONObject, where: str) -> Attested:
    """A DSSE envelope or a Sigstore bundle v0.3 (receipts/attestation_checks.py), whose
    Statement holds a receipt object; ``InvalidInput`` naming what is wrong."""
    if not is_sigstore(value):
        return _envelope(value, "envelope", where)
    try:
        bundle = parse_sigstore_bundle(value)
    except AttestationError as exc:
        raise InvalidInput(f"{where}: {exc}") from exc
    envelope = _statement(bundle.attestation, "sigstore", where)
    return Attested("sigstore", bundle.attestation, envelope.receipt, envelope.log_origin, bundle.hint, bundle.entry)


def _envelope(value: JSONValue, form: Form, where: str) -> Attested:
    try:
        attestation = parse_envelope(value)
    except AttestationError as exc:
        raise InvalidInput(f"{where}: {exc}") from exc
    return _statement(attestation, form, where)


def _statement(attestation: Attestation, form: Form, where: str) -> Attested:
    """The envelope's Statement, read strictly, and the receipt in its predicate."""
    try:
        statement = attestation.statement()
    except AttestationError as exc:
        raise InvalidInput(f"{where}: {exc}") from exc
    predicate = statement["predicate"]
    receipt = read_receipt(predicate["receipt"], f"{where} (the Statement's receipt)")
    return Attested(form, attestation, receipt, predicate["log_origin"])


def _read_certified_keys(keys: JSONObject, where: str) -> None:
    """A version 2 bundle's ``keys``: every entry carries its key ``certificate`` (for this key),
    and ``revocations``, when present, is a list of objects (each checked when the keys are
    judged against pinned roots)."""
    entries = keys.get("keys")
    if not isinstance(entries, list):
        raise InvalidInput(f"{where}: the bundle's keys has no list of key objects")
    objects = [entry for entry in entries if isinstance(entry, dict)]
    if len(objects) != len(entries):
        raise InvalidInput(f"{where}: the bundle's keys has no list of key objects")
    lacking = [str(entry.get("kid")) for entry in objects if not isinstance(entry.get("certificate"), dict)]
    if lacking:
        raise InvalidInput(
            f"{where}: a version 2 bundle carries each key's certificate, and {', '.join(lacking)} has none"
        )
    revocations = keys.get("revocations", [])
    if not isinstance(revocations, list) or not all(isinstance(entry, dict) for entry in revocations):
        raise InvalidInput(f"{where}: the bundle's keys.revocations is not a list of objects")
    try:
        carried_key_ring(keys)
    except BundleError as exc:
        raise InvalidInput(f"{where}: {exc}") from exc


def _read_log(log: JSONValue, where: str) -> JSONObject:
    if not isinstance(log, dict):
        raise InvalidInput(f"{where}: the bundle's log is not an object")
    unknown = sorted(set(log) - set(LOG_MEMBERS))
    missing = [member for member in LOG_MEMBERS if member not in log]
    if unknown or missing:
        said = [f"unknown members {', '.join(unknown)}"] if unknown else []
        said += [f"no {', '.join(missing)}"] if missing else []
        raise InvalidInput(f"{where}: the bundle's log has {' and '.join(said)}")
    if not isinstance(log["origin"], str) or not isinstance(log["log_vkey"], str):
        raise InvalidInput(f"{where}: the bundle's log origin and log_vkey must be strings")
    if log["proof"] is not None and not isinstance(log["proof"], str):
        raise InvalidInput(f"{where}: the bundle's log proof is neither a string nor null")
    return log


def _read_response(value: JSONObject, where: str) -> Document:
    unknown = sorted(set(value) - set(RESPONSE_MEMBERS))
    if unknown:
        raise InvalidInput(f"{where}: unknown members beside the receipt: {', '.join(unknown)}")
    if "ok" in value and value["ok"] is not True:
        raise InvalidInput(f"{where}: ok is not true (a saved error reply holds no receipt)")
    for member in ("idempotency", "chain", "quota", "log"):
        if member in value and not isinstance(value[member], dict):
            raise InvalidInput(f"{where}: {member} is not an object")
    receipt = read_receipt(value["receipt"], f"{where} (receipt)")
    url, salts = value.get("service_url"), value.get("salts")
    if url is not None and not isinstance(url, str):
        raise InvalidInput(f"{where}: service_url is not a string")
    if salts is None:
        salts = {}
    if not isinstance(salts, dict) or not all(k in SALTED and isinstance(v, str) for k, v in salts.items()):
        raise InvalidInput(f"{where}: salts must map input, output, params or env to hex")
    members = {name: member for name, member in value.items() if name not in ("service_url", "salts")}
    return Document(
        "response", receipt, members, None, url, {name: hex for name, hex in salts.items() if isinstance(hex, str)}
    )
