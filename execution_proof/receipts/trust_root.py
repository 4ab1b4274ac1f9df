"""The trust root: one JSON file holding everything a verifier pins about a service (docs/trust-root.md).

    {"version": 1, "service_url": "https://...",
     "receipt_keys": [{"kid": "...", "public_key_base64url": "..."}],
     "log": {"origin": "...", "vkey": "...", "policy": "..."} | null,
     "tsa_roots_pem": ["-----BEGIN CERTIFICATE-----\\n...", ...]}

``parse_trust_root`` reads a file strictly (a pinned file must mean exactly what it says:
unknown members, a policy for another log, a key of the wrong length are refused, and the
message names the field); ``build_trust_root`` makes the object from what the service
publishes (``GET /v1/public-key``, ``GET /v1/log``) and a PEM file of TSA roots;
``fingerprints`` gives the SHA-256 of each pinned key, to compare out of band. Pure: no
network, and no X.509 library until a TSA certificate is read (transparency/timestamps.py is slow
to import).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict
from urllib.parse import urlsplit

import orjson

from execution_proof.receipts.encoding import b64url_decode
from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.shapes import JSONObject, JSONValue
from execution_proof.receipts.signing import KID_RE, KeyRing, KeySetError, load_key_ring
from execution_proof.transparency import note
from execution_proof.transparency.policy import Policy, PolicyError, parse_policy

if TYPE_CHECKING:
    import cryptography.x509

VERSION = 1
MAX_TRUST_ROOT_BYTES = 1 << 20
"""A trust root is a few KB (a key set, a policy, some certificates); more is not one."""
MAX_RECEIPT_KEYS = 256
MAX_TSA_ROOTS = 64
TOP_LEVEL = ("version", "service_url", "receipt_keys", "log", "tsa_roots_pem")
KEY_MEMBERS = ("kid", "public_key_base64url")
LOG_MEMBERS = ("origin", "vkey", "policy")
PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_END = "-----END CERTIFICATE-----"


class TrustRootKey(TypedDict):
    kid: str
    public_key_base64url: str


class TrustRootLog(TypedDict):
    origin: str
    vkey: str
    policy: str


class TrustRootDocument(TypedDict):
    """The file's object, members in the documented order."""

    version: int
    service_url: str
    receipt_keys: list[TrustRootKey]
    log: TrustRootLog | None
    tsa_roots_pem: list[str]


class TrustRootError(InvalidInput):
    """A trust root (or what the service published for one) that is malformed; the message
    names the field."""


@dataclass(frozen=True)
class TrustRoot:
    service_url: str
    keys: KeyRing
    """Every receipt key of the file (no private half); ``active_kid`` is the first one's."""
    log_origin: str | None
    log_vkey: str | None
    policy_text: str | None
    tsa_roots_pem: tuple[str, ...]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrustRoot:
        """The trust root file at ``path`` (``trust-root --out`` wrote it); ``TrustRootError``
        (an ``execution_proof.InvalidInput``) names what is wrong, or why it cannot be read."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise TrustRootError(f"cannot read the trust root {os.fspath(path)}: {exc.strerror or exc}") from exc
        try:
            return parse_trust_root(data)
        except TrustRootError as exc:
            raise TrustRootError(f"the trust root {os.fspath(path)} is malformed: {exc}") from exc

    def to_bytes(self) -> bytes:
        """The file ``trust-root`` writes."""
        return encode_trust_root(self.to_json())

    def log_verifier(self) -> note.Verifier | None:
        """The log's key (None: the file pins no log)."""
        return note.Verifier.parse(self.log_vkey) if self.log_vkey is not None else None

    def policy(self) -> Policy | None:
        """The witness policy (its one log is ``log_verifier()``); None: the file pins no log."""
        return parse_policy(self.policy_text) if self.policy_text is not None else None

    def tsa_roots(self) -> list[cryptography.x509.Certificate]:
        """The TSA root certificates, in the file's order (empty: none pinned)."""
        if not self.tsa_roots_pem:
            return []
        from execution_proof.transparency import timestamps

        return [timestamps.load_roots(pem.encode("ascii"))[0] for pem in self.tsa_roots_pem]

    def to_json(self) -> TrustRootDocument:
        """The file's object (members in the documented order)."""
        log: TrustRootLog | None = None
        if self.log_origin is not None and self.log_vkey is not None and self.policy_text is not None:
            log = {"origin": self.log_origin, "vkey": self.log_vkey, "policy": self.policy_text}
        return {
            "version": VERSION,
            "service_url": self.service_url,
            "receipt_keys": [
                {"kid": key.kid, "public_key_base64url": key.public_key_base64url} for key in self.keys.keys.values()
            ],
            "log": log,
            "tsa_roots_pem": list(self.tsa_roots_pem),
        }


def encode_trust_root(document: TrustRootDocument) -> bytes:
    """The bytes ``trust-root`` writes: JSON indented by two spaces, then a newline."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


# -- reading


def parse_trust_root(data: bytes | str) -> TrustRoot:
    """A trust root file, checked member by member; ``TrustRootError`` names the first fault."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_TRUST_ROOT_BYTES:
        raise TrustRootError(f"the trust root is larger than {MAX_TRUST_ROOT_BYTES} bytes")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TrustRootError(f"the trust root is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise TrustRootError("the trust root must be a JSON object")
    _members(document, TOP_LEVEL, TOP_LEVEL, "the trust root")
    version = document["version"]
    if type(version) is not int or version != VERSION:
        raise TrustRootError(f"version: must be {VERSION} (this client reads version {VERSION} only), not {version!r}")
    service_url = _service_url(document["service_url"])
    keys = _receipt_keys(document["receipt_keys"])
    origin, vkey, policy_text = _log(document["log"])
    roots = _tsa_roots(document["tsa_roots_pem"])
    return TrustRoot(service_url, keys, origin, vkey, policy_text, roots)


def _members(value: JSONObject, required: tuple[str, ...], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise TrustRootError(f"{where}: unknown member {unknown[0]!r} (a pinned file must mean exactly what it says)")
    for name in required:
        if name not in value:
            raise TrustRootError(f"{where}: {name} is missing")


def _service_url(value: JSONValue) -> str:
    if not isinstance(value, str):
        raise TrustRootError("service_url: must be a string")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
        raise TrustRootError(f"service_url: must be an http(s) URL, not {value!r}")
    return value


def _receipt_keys(value: JSONValue) -> KeyRing:
    if not isinstance(value, list) or not value:
        raise TrustRootError("receipt_keys: must be a non-empty list")
    if len(value) > MAX_RECEIPT_KEYS:
        raise TrustRootError(f"receipt_keys: more than {MAX_RECEIPT_KEYS} keys")
    seen: list[str] = []
    for index, entry in enumerate(value):
        where = f"receipt_keys[{index}]"
        if not isinstance(entry, dict):
            raise TrustRootError(f"{where}: must be an object")
        _members(entry, KEY_MEMBERS, KEY_MEMBERS, where)
        kid, public = entry["kid"], entry["public_key_base64url"]
        if not isinstance(kid, str) or not KID_RE.fullmatch(kid):
            raise TrustRootError(f"{where}.kid: must be 1-64 characters of A-Z a-z 0-9 . _ -")
        if kid in seen:
            raise TrustRootError(f"{where}.kid: duplicate kid {kid!r}")
        seen.append(kid)
        try:
            if not isinstance(public, str) or len(b64url_decode(public)) != 32:
                raise ValueError("not 32 bytes")
        except ValueError as exc:
            raise TrustRootError(
                f"{where}.public_key_base64url: must be a 32-byte Ed25519 key in base64url without padding"
            ) from exc
    try:
        return load_key_ring({"keys": value, "active_kid": seen[0]})
    except KeySetError as exc:  # not reached: every entry was checked above
        raise TrustRootError(f"receipt_keys: {exc}") from exc


def _log(value: JSONValue) -> tuple[str | None, str | None, str | None]:
    if value is None:
        return None, None, None
    if not isinstance(value, dict):
        raise TrustRootError("log: must be an object or null")
    _members(value, LOG_MEMBERS, LOG_MEMBERS, "log")
    origin, vkey, text = (_string(value[name], f"log.{name}") for name in LOG_MEMBERS)
    try:
        verifier = note.Verifier.parse(vkey)
    except note.NoteError as exc:
        raise TrustRootError(f"log.vkey: {exc}") from exc
    if verifier.name != origin:
        raise TrustRootError(f"log.vkey: its name {verifier.name!r} is not log.origin {origin!r}")
    try:
        text.encode("utf-8")
        policy = parse_policy(text)
    except (PolicyError, UnicodeEncodeError) as exc:
        raise TrustRootError(f"log.policy: {exc}") from exc
    logs = policy.log_keys()
    if len(logs) != 1:
        raise TrustRootError(f"log.policy: names {len(logs)} logs; a trust root's policy names its log only")
    if logs[0] != verifier:
        raise TrustRootError(f"log.policy: is the policy of another log ({logs[0].encode()}), not of log.vkey")
    return origin, vkey, text


def _string(value: JSONValue, where: str) -> str:
    if not isinstance(value, str):
        raise TrustRootError(f"{where}: must be a string")
    return value


def _tsa_roots(value: JSONValue) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TrustRootError("tsa_roots_pem: must be a list (empty: no TSA pinned)")
    if len(value) > MAX_TSA_ROOTS:
        raise TrustRootError(f"tsa_roots_pem: more than {MAX_TSA_ROOTS} certificates")
    seen: dict[bytes, int] = {}
    pems: list[str] = []
    for index, pem in enumerate(value):
        where = f"tsa_roots_pem[{index}]"
        if not isinstance(pem, str) or not pem.isascii():
            raise TrustRootError(f"{where}: must be an ASCII string (one PEM certificate)")
        text = pem.strip()
        if not text.startswith(PEM_BEGIN) or not text.endswith(PEM_END) or text.count(PEM_BEGIN) != 1:
            raise TrustRootError(f"{where}: must be exactly one PEM certificate ({PEM_BEGIN} ... {PEM_END})")
        der = _certificate_der(pem, where)
        if der in seen:
            raise TrustRootError(f"{where}: the same certificate as tsa_roots_pem[{seen[der]}]")
        seen[der] = index
        pems.append(pem)
    return tuple(pems)


def _certificate_der(pem: str, where: str) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    from execution_proof.transparency import timestamps

    try:
        certificates = timestamps.load_roots(pem.encode("ascii"))
    except timestamps.StampError as exc:
        raise TrustRootError(f"{where}: {exc}") from exc
    if len(certificates) != 1:
        raise TrustRootError(f"{where}: must hold exactly one certificate, not {len(certificates)}")
    return certificates[0].public_bytes(Encoding.DER)


# -- building


def build_trust_root(
    service_url: str,
    public_key_document: JSONValue,
    log_document: JSONValue,
    tsa_pem: bytes | None,
) -> TrustRootDocument:
    """The trust root of a service from its ``GET /v1/public-key`` body, its ``GET /v1/log``
    body (None: it runs no log) and a PEM file of TSA roots (None: none pinned).

    The receipt keys come in the service's order with its ``active_kid`` first. A log whose
    policy is empty (no witnesses) gets the policy ``log <vkey>`` / ``quorum none``; a policy
    that names no log gets the ``log <vkey>`` line in front. The object is checked by
    ``parse_trust_root`` before it is returned."""
    document: TrustRootDocument = {
        "version": VERSION,
        "service_url": service_url.rstrip("/"),
        "receipt_keys": _published_keys(public_key_document),
        "log": _published_log(log_document) if log_document is not None else None,
        "tsa_roots_pem": pem_roots(tsa_pem) if tsa_pem is not None else [],
    }
    parse_trust_root(encode_trust_root(document))
    return document


def _published_keys(document: JSONValue) -> list[TrustRootKey]:
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(listed, list) or not listed:
        raise TrustRootError('GET /v1/public-key: the answer is not {"keys": [...]} with at least one key')
    entries: list[TrustRootKey] = []
    for index, entry in enumerate(listed):
        if not isinstance(entry, dict):
            raise TrustRootError(f"GET /v1/public-key: keys[{index}] is not an object")
        if entry.get("alg", "Ed25519") != "Ed25519":
            raise TrustRootError(f"GET /v1/public-key: keys[{index}] is not an Ed25519 key (alg {entry['alg']!r})")
        kid, public = entry.get("kid"), entry.get("public_key_base64url")
        if not isinstance(kid, str) or not isinstance(public, str):
            raise TrustRootError(f"GET /v1/public-key: keys[{index}] needs a kid and a public_key_base64url")
        entries.append({"kid": kid, "public_key_base64url": public})
    active = document.get("active_kid")
    entries.sort(key=lambda entry: entry["kid"] != active)  # stable: the active key first
    return entries


def _published_log(document: JSONValue) -> TrustRootLog:
    if not isinstance(document, dict):
        raise TrustRootError("GET /v1/log: the answer is not a JSON object")
    origin, vkey, text = document.get("origin"), document.get("log_vkey"), document.get("policy", "")
    if not isinstance(origin, str) or not isinstance(vkey, str) or not isinstance(text, str):
        raise TrustRootError("GET /v1/log: the answer needs string origin, log_vkey and policy")
    if not text.strip():
        text = f"log {vkey}\nquorum none\n"
    else:
        try:
            named = parse_policy(text).log_keys()
        except PolicyError as exc:
            raise TrustRootError(f"GET /v1/log: its policy: {exc}") from exc
        if not named:
            text = f"log {vkey}\n{text}"
    return {"origin": origin, "vkey": vkey, "policy": text}


def pem_roots(pem: bytes) -> list[str]:
    """The certificates of a PEM file (``--tsa-roots``), one PEM string each, duplicates once."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from execution_proof.transparency import timestamps

    try:
        certificates = timestamps.load_roots(pem)
    except timestamps.StampError as exc:
        raise TrustRootError(f"--tsa-roots: {exc}") from exc
    kept: dict[bytes, str] = {}
    for certificate in certificates:
        kept.setdefault(certificate.public_bytes(Encoding.DER), certificate.public_bytes(Encoding.PEM).decode("ascii"))
    return list(kept.values())


# -- fingerprints


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fingerprints(root: TrustRoot, file_bytes: bytes | None = None) -> list[tuple[str, str]]:
    """(label, ``sha256:<hex>``) of each thing pinned, in the order ``trust-root`` prints them:

    - ``receipt key <kid>``: the raw 32-byte Ed25519 public key;
    - ``log key <origin>``: the raw 32-byte Ed25519 key inside ``log.vkey`` (the bytes after
      the signature type 0x01 of ``<name>+<key id>+<base64(0x01 || key)>``);
    - ``witness <name>`` (the policy's name of each witness): its raw 32-byte Ed25519 key;
    - ``policy``: the UTF-8 bytes of ``log.policy``;
    - ``tsa root <subject CN>``: the DER bytes of each certificate;
    - ``trust root``: the file's bytes, when given."""
    found = [(f"receipt key {key.kid}", sha256_hex(bytes(key.verify_key))) for key in root.keys.keys.values()]
    verifier, policy = root.log_verifier(), root.policy()
    if verifier is not None and policy is not None and root.policy_text is not None:
        found.append((f"log key {verifier.name}", sha256_hex(verifier.public_key)))
        found += [(f"witness {name}", sha256_hex(w.key.public_key)) for name, w in policy.witnesses.items()]
        found.append(("policy", sha256_hex(root.policy_text.encode("utf-8"))))
    if root.tsa_roots_pem:
        from cryptography.hazmat.primitives.serialization import Encoding

        for certificate in root.tsa_roots():
            found.append((f"tsa root {_subject(certificate)}", sha256_hex(certificate.public_bytes(Encoding.DER))))
    if file_bytes is not None:
        found.append(("trust root", sha256_hex(file_bytes)))
    return found


def _subject(certificate: cryptography.x509.Certificate) -> str:
    """The certificate's subject CN (else its whole subject), printable on one line."""
    from cryptography.x509.oid import NameOID

    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else certificate.subject.rfc4514_string()
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return "".join(c if c.isprintable() else "?" for c in text) or "(no subject)"
