"""The trust root: one JSON file holding everything a verifier pins about a service (docs/trust-root.md).

    {"version": 2, "service_url": "https://...",
     "receipt_roots": [{"kid": "root-...", "public_key_base64url": "..."}],
     "revocations": [{"type": "execution-proof-key-revocation/v1", ...}],
     "log": {"origin": "...", "vkey": "...", "policy": "..."} | null,
     "tsa_roots_pem": ["-----BEGIN CERTIFICATE-----\\n...", ...]}

Version 2 pins the **receipt roots**: a receipt key counts only through a certificate one of
them signed (receipts/key_certificates.py), and the keys themselves come from a bundle or the
service. Version 1 (``"receipt_keys"`` instead of the roots and revocations) pinned the receipt
keys themselves; it is still read, never written.

``parse_trust_root`` reads a file strictly (a pinned file must mean exactly what it says:
unknown members, a policy for another log, a key of the wrong length, a revocation no pinned
root signed are refused, and the message names the field); ``build_trust_root`` makes the
object from what the service publishes (``GET /v1/public-key``, ``GET /v1/log``) and a PEM
file of TSA roots; ``fingerprints`` gives the SHA-256 of each pinned key, to compare out of
band. Pure: no network, and no X.509 library until a TSA certificate is read
(transparency/timestamps.py is slow to import).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlsplit

import orjson

from execution_proof.receipts.encoding import b64url_decode
from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.key_certificates import KeyDocumentError, KeyRevocation, Root
from execution_proof.receipts.shapes import JSONObject, JSONValue
from execution_proof.receipts.signing import KID_RE, KeyRing, KeySetError, load_key_ring
from execution_proof.transparency import note
from execution_proof.transparency.policy import Policy, PolicyError, parse_policy

if TYPE_CHECKING:
    import cryptography.x509

VERSION = 2
"""The version ``trust-root`` writes."""
VERSIONS = (1, 2)
"""Every version a reader reads."""
MAX_TRUST_ROOT_BYTES = 1 << 20
"""A trust root is a few KB (roots, a policy, some certificates); more is not one."""
MAX_RECEIPT_KEYS = 256
MAX_RECEIPT_ROOTS = 64
MAX_REVOCATIONS = 1024
MAX_TSA_ROOTS = 64
TOP_LEVEL = ("version", "service_url", "receipt_roots", "revocations", "log", "tsa_roots_pem")
TOP_LEVEL_V1 = ("version", "service_url", "receipt_keys", "log", "tsa_roots_pem")
KEY_MEMBERS = ("kid", "public_key_base64url")
LOG_MEMBERS = ("origin", "vkey", "policy")
PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_END = "-----END CERTIFICATE-----"


class TrustRootKey(TypedDict):
    """A pinned key: a receipt root (version 2) or a receipt key (version 1)."""

    kid: str
    public_key_base64url: str


class TrustRootLog(TypedDict):
    origin: str
    vkey: str
    policy: str


class TrustRootDocument(TypedDict):
    """The file's object (version 2), members in the documented order."""

    version: int
    service_url: str
    receipt_roots: list[TrustRootKey]
    revocations: list[dict[str, str]]
    log: TrustRootLog | None
    tsa_roots_pem: list[str]


class TrustRootDocumentV1(TypedDict):
    """A version 1 file's object: the receipt keys pinned themselves."""

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
    """Version 1: every receipt key of the file (no private half; ``active_kid`` is the first
    one's). Version 2: no key at all, judged by ``roots`` (the keys come from a bundle or the
    service: ``certified``)."""
    log_origin: str | None
    log_vkey: str | None
    policy_text: str | None
    tsa_roots_pem: tuple[str, ...]
    roots: Mapping[str, bytes] | None = None
    """Version 2: the receipt roots, raw Ed25519 public key by kid (``root-…``), in the file's
    order; None for version 1."""
    revocations: tuple[KeyRevocation, ...] = ()
    """Version 2: the pinned revocations, each signed by a pinned root (checked when read)."""

    @property
    def version(self) -> int:
        return 1 if self.roots is None else 2

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

    def certified(self, ring: KeyRing, revocations: Any = ()) -> KeyRing:
        """``ring`` (keys from a bundle or the service, each with its certificate) judged by
        this file's roots: a key counts only through a certificate a pinned root signed, and
        the revocations are this file's, ``ring``'s and those of ``revocations`` (JSON objects,
        as a bundle carries or the service publishes them) that a pinned root signed.
        ``TrustRootError`` for a version 1 file, which pins the keys themselves (``keys``)."""
        if self.roots is None:
            raise TrustRootError("a version 1 trust root pins its receipt keys themselves, no roots")
        documents = [r.to_json() for r in self.revocations] + list(revocations or [])
        return ring.with_roots(self.roots, documents)

    def root_list(self) -> list[Root]:
        """The pinned receipt roots in the file's order (empty for version 1)."""
        return [Root(kid, public) for kid, public in (self.roots or {}).items()]

    def to_bytes(self) -> bytes:
        """The file ``trust-root`` writes (a version 1 file read stays version 1)."""
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

    def to_json(self) -> TrustRootDocument | TrustRootDocumentV1:
        """The file's object (members in the documented order, of the file's version)."""
        log: TrustRootLog | None = None
        if self.log_origin is not None and self.log_vkey is not None and self.policy_text is not None:
            log = {"origin": self.log_origin, "vkey": self.log_vkey, "policy": self.policy_text}
        if self.roots is None:
            return {
                "version": 1,
                "service_url": self.service_url,
                "receipt_keys": [
                    {"kid": key.kid, "public_key_base64url": key.public_key_base64url}
                    for key in self.keys.keys.values()
                ],
                "log": log,
                "tsa_roots_pem": list(self.tsa_roots_pem),
            }
        return {
            "version": VERSION,
            "service_url": self.service_url,
            "receipt_roots": [
                {"kid": root.kid, "public_key_base64url": root.to_json()["public_key_base64url"]}
                for root in self.root_list()
            ],
            "revocations": [revocation.to_json() for revocation in self.revocations],
            "log": log,
            "tsa_roots_pem": list(self.tsa_roots_pem),
        }


def encode_trust_root(document: TrustRootDocument | TrustRootDocumentV1) -> bytes:
    """The bytes ``trust-root`` writes: JSON indented by two spaces, then a newline."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


# -- reading


def parse_trust_root(data: bytes | str) -> TrustRoot:
    """A trust root file (version 1 or 2), checked member by member; ``TrustRootError`` names
    the first fault."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_TRUST_ROOT_BYTES:
        raise TrustRootError(f"the trust root is larger than {MAX_TRUST_ROOT_BYTES} bytes")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TrustRootError(f"the trust root is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise TrustRootError("the trust root must be a JSON object")
    if "version" not in document:
        raise TrustRootError("the trust root: version is missing")
    version = document["version"]
    if type(version) is not int or version not in VERSIONS:
        newer = " (made by a newer version of this software: upgrade)" if type(version) is int and version > 2 else ""
        raise TrustRootError(f"version: must be 1 or 2 (the versions this client reads), not {version!r}{newer}")
    members = TOP_LEVEL if version == 2 else TOP_LEVEL_V1
    _members(document, members, members, f"the trust root (version {version})")
    service_url = _service_url(document["service_url"])
    if version == 1:
        keys = _receipt_keys(document["receipt_keys"])
        origin, vkey, policy_text = _log(document["log"])
        return TrustRoot(service_url, keys, origin, vkey, policy_text, _tsa_roots(document["tsa_roots_pem"]))
    roots = _receipt_roots(document["receipt_roots"])
    revocations = _revocations(document["revocations"], roots)
    origin, vkey, policy_text = _log(document["log"])
    tsa_roots = _tsa_roots(document["tsa_roots_pem"])
    ring = KeyRing({}, None, None, roots=roots)
    return TrustRoot(service_url, ring, origin, vkey, policy_text, tsa_roots, roots, revocations)


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


def _receipt_roots(value: JSONValue) -> dict[str, bytes]:
    if not isinstance(value, list) or not value:
        raise TrustRootError("receipt_roots: must be a non-empty list")
    if len(value) > MAX_RECEIPT_ROOTS:
        raise TrustRootError(f"receipt_roots: more than {MAX_RECEIPT_ROOTS} roots")
    roots: dict[str, bytes] = {}
    for index, entry in enumerate(value):
        where = f"receipt_roots[{index}]"
        if not isinstance(entry, dict):
            raise TrustRootError(f"{where}: must be an object")
        _members(entry, KEY_MEMBERS, KEY_MEMBERS, where)
        text = entry["public_key_base64url"]
        try:
            public = b64url_decode(text) if isinstance(text, str) else b""
        except ValueError:
            public = b""
        if len(public) != 32:
            raise TrustRootError(
                f"{where}.public_key_base64url: must be a 32-byte Ed25519 key in base64url without padding"
            )
        root = Root.of(public)
        if entry["kid"] != root.kid:
            raise TrustRootError(
                f"{where}.kid: must be its key's ({root.kid}: root- and the first 16 hex of SHA-256 of the key), "
                f"not {entry['kid']!r}"
            )
        if root.kid in roots:
            raise TrustRootError(f"{where}.kid: duplicate root {root.kid!r}")
        roots[root.kid] = public
    return roots


def _revocations(value: JSONValue, roots: Mapping[str, bytes]) -> tuple[KeyRevocation, ...]:
    """Every revocation read strictly and checked against the pinned roots: a pinned file holds
    no statement it cannot check."""
    if not isinstance(value, list):
        raise TrustRootError("revocations: must be a list (empty: none pinned)")
    if len(value) > MAX_REVOCATIONS:
        raise TrustRootError(f"revocations: more than {MAX_REVOCATIONS} revocations")
    found: list[KeyRevocation] = []
    for index, entry in enumerate(value):
        where = f"revocations[{index}]"
        try:
            revocation = KeyRevocation.parse(entry)
        except KeyDocumentError as exc:
            raise TrustRootError(f"{where}: {exc}") from exc
        root = roots.get(revocation.root_kid)
        if root is None:
            raise TrustRootError(f"{where}: signed by {revocation.root_kid}, which is not in receipt_roots")
        if not revocation.signed_by(root):
            raise TrustRootError(f"{where}: its signature does not verify with {revocation.root_kid}")
        found.append(revocation)
    return tuple(found)


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
    """The trust root (version 2) of a service from its ``GET /v1/public-key`` body (its
    ``roots`` and ``revocations``), its ``GET /v1/log`` body (None: it runs no log) and a PEM
    file of TSA roots (None: none pinned).

    The roots come in the service's order. A service that publishes no ``roots`` (its keys
    certified by no root) is refused: there is nothing a version 2 file could pin. A log whose
    policy is empty (no witnesses) gets the policy ``log <vkey>`` / ``quorum none``; a policy
    that names no log gets the ``log <vkey>`` line in front. The object is checked by
    ``parse_trust_root`` before it is returned (every revocation against the roots)."""
    log = _published_log(log_document) if log_document is not None else None
    tsa_roots = pem_roots(tsa_pem) if tsa_pem is not None else []
    roots, revocations = _published_roots(public_key_document)
    document: TrustRootDocument = {
        "version": VERSION,
        "service_url": service_url.rstrip("/"),
        "receipt_roots": roots,
        "revocations": revocations,
        "log": log,
        "tsa_roots_pem": tsa_roots,
    }
    parse_trust_root(encode_trust_root(document))
    return document


def _published_roots(document: JSONValue) -> tuple[list[TrustRootKey], list[dict[str, str]]]:
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(listed, list) or not listed:
        raise TrustRootError('GET /v1/public-key: the answer is not {"keys": [...]} with at least one key')
    published = document.get("roots")
    if "roots" not in document:
        raise TrustRootError(
            "GET /v1/public-key: the service publishes no receipt roots (no roots member): its receipt keys are "
            "certified by no root, so there is nothing for a version 2 trust root to pin (the service is older "
            "than this client, or runs without RECEIPT_ROOT_KEY)"
        )
    if not isinstance(published, list) or not published:
        raise TrustRootError("GET /v1/public-key: roots is not a non-empty list")
    roots: list[TrustRootKey] = []
    for index, entry in enumerate(published):
        if not isinstance(entry, dict):
            raise TrustRootError(f"GET /v1/public-key: roots[{index}] is not an object")
        if entry.get("alg", "Ed25519") != "Ed25519":
            raise TrustRootError(f"GET /v1/public-key: roots[{index}] is not an Ed25519 key (alg {entry['alg']!r})")
        kid, public = entry.get("kid"), entry.get("public_key_base64url")
        if not isinstance(kid, str) or not isinstance(public, str):
            raise TrustRootError(f"GET /v1/public-key: roots[{index}] needs a kid and a public_key_base64url")
        roots.append({"kid": kid, "public_key_base64url": public})
    listed_revocations = document.get("revocations", [])
    if not isinstance(listed_revocations, list):
        raise TrustRootError("GET /v1/public-key: revocations is not a list")
    revocations: list[dict[str, str]] = []
    for index, entry in enumerate(listed_revocations):
        if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
            raise TrustRootError(f"GET /v1/public-key: revocations[{index}] is not an object of strings")
        revocations.append({name: value for name, value in entry.items() if isinstance(value, str)})
    return roots, revocations


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

    - ``receipt root <kid>`` (version 2): the raw 32-byte Ed25519 public key of each root;
    - ``receipt key <kid>`` (version 1): the raw 32-byte Ed25519 public key;
    - ``log key <origin>``: the raw 32-byte Ed25519 key inside ``log.vkey`` (the bytes after
      the signature type 0x01 of ``<name>+<key id>+<base64(0x01 || key)>``);
    - ``witness <name>`` (the policy's name of each witness): its raw 32-byte Ed25519 key;
    - ``policy``: the UTF-8 bytes of ``log.policy``;
    - ``tsa root <subject CN>``: the DER bytes of each certificate;
    - ``trust root``: the file's bytes, when given.

    Revocations have no line: each is signed by a pinned root, which the reader checked."""
    if root.roots is not None:
        found = [(f"receipt root {r.kid}", r.sha256_fingerprint) for r in root.root_list()]
    else:
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
