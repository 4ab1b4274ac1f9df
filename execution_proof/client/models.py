"""The documents a client keeps (docs/python-api.md): a ``Receipt`` as ``submit`` saves it, a
``Bundle`` as ``bundle`` saves it and an ``Attestation`` as ``attest`` saves it. Each wraps the
JSON document the service sent, unchanged,
plus what only the client knows (the service's URL, the salts it never sent); ``load`` reads
what ``save`` wrote, and also the bare documents the service serves.

Documents are JSON values read strictly where they are read (client/documents.py: one reader
per shape, the receipt object's members exactly), so ``receipt`` is a
``receipts.shapes.ReceiptObject``. Whether its values are genuine
is what ``verify`` decides, on the document as read (client/verifying.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from execution_proof.client.documents import read_document, read_receipt
from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.verifier import BUNDLE_FORMAT
from execution_proof.runtime.files import write_atomically

if TYPE_CHECKING:
    from execution_proof.receipts import shapes
    from execution_proof.receipts.shapes import JSONObject, JSONValue


def read_json(path: str | os.PathLike[str]) -> JSONValue:
    """A JSON file; ``InvalidInput`` if it cannot be read or is not JSON."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc
    return parse_json(data, os.fspath(path))


def parse_json(data: bytes, where: str) -> JSONValue:
    try:
        document: JSONValue = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not valid JSON") from exc
    return document


def receipt_in(document: Mapping[str, JSONValue], where: str) -> shapes.ReceiptObject:
    """The ``receipt`` member of a document, narrowed; ``InvalidInput`` if it is not a receipt."""
    return read_receipt(document.get("receipt"), where)


class _Document:
    """What a receipt file and a bundle share: the signed receipt inside the document."""

    document: Mapping[str, JSONValue]

    @property
    def receipt(self) -> shapes.ReceiptObject:
        """The signed receipt object itself, narrowed (``from_dict`` has checked it in every
        document read; ``InvalidInput`` for a document built without it)."""
        return receipt_in(self.document, "the document")

    @property
    def receipt_id(self) -> str:
        return self.receipt["receipt_id"]


@dataclass(frozen=True)
class Receipt(_Document):
    """A receipt: the service's reply to a create or a read (``{"receipt": {...}, ...}``),
    the service's URL and the salts of the files hashed with one (hex, by ``input``,
    ``output``, ``params``, ``env``; never sent)."""

    document: Mapping[str, JSONValue]
    """The service's reply, its members as sent (``receipt`` and whatever came with it)."""
    service_url: str | None = None
    salts: Mapping[str, str] = field(default_factory=dict)
    raw: bytes | None = field(default=None, repr=False, compare=False)
    """The reply's bytes, when this came from the service: ``save`` keeps them as they were."""
    replayed: bool = field(default=False, compare=False)
    """The service answered a create with the earlier receipt of the same request (200)."""

    @property
    def project_id(self) -> str:
        return self.receipt["project_id"]

    @property
    def receipt_hash(self) -> str:
        return self.receipt["receipt_hash"]

    @classmethod
    def from_dict(cls, document: JSONValue, *, where: str = "the document") -> Receipt:
        """From a saved file's document, a service's reply, or a bare receipt object, each
        read strictly (client/documents.py); ``InvalidInput`` for anything else, a bundle
        included (``Bundle.load`` reads it)."""
        read = read_document(document, where)
        if read.bundle is not None:
            raise InvalidInput(f"{where} is a bundle, not a receipt: Bundle.load reads it")
        if read.attested is not None:
            raise InvalidInput(f"{where} is an attestation, not a receipt: Attestation.load reads it")
        return cls(read.members, read.service_url, dict(read.salts))

    @classmethod
    def from_reply(
        cls, body: bytes, service_url: str, salts: Mapping[str, str] | None = None, *, replayed: bool = False
    ) -> Receipt:
        made = cls.from_dict(parse_json(body, f"{service_url}'s reply"), where=f"{service_url}'s reply")
        return cls(made.document, service_url, dict(salts or {}), body, replayed)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Receipt:
        """What ``save`` wrote (or ``submit --save``), a service's reply or a bare receipt."""
        return cls.from_dict(read_json(path), where=os.fspath(path))

    def to_dict(self) -> JSONObject:
        """The saved document: the reply's members, then ``service_url`` and ``salts``."""
        return {**self.document, **self._extra()}

    def _extra(self) -> JSONObject:
        extra: JSONObject = {"service_url": self.service_url} if self.service_url else {}
        if self.salts:
            extra["salts"] = {**self.salts}
        return extra

    def to_bytes(self) -> bytes:
        """The saved file: the reply's own bytes, when there are any, with ``service_url``
        (and ``salts``) added as its last members; else the document as JSON."""
        extra = self._extra()
        body = self.raw.rstrip() if self.raw is not None else b""
        if not body.endswith(b"}") or not extra:
            return orjson.dumps(self.to_dict()) + b"\n"
        return body[:-1].rstrip() + b"," + orjson.dumps(extra)[1:] + b"\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all (``OSError`` if it cannot be)."""
        write_atomically(path, self.to_bytes())


@dataclass(frozen=True)
class Bundle(_Document):
    """An offline bundle (docs/bundles.md): the receipt, the keys, a chain segment and, from a
    service with a log, the log member whose ``proof`` is null until a checkpoint covers it."""

    document: Mapping[str, JSONValue]

    @property
    def has_log(self) -> bool:
        """Whether the service that made it keeps a log (else the bundle carries no proof)."""
        return isinstance(self.document.get("log"), dict)

    @property
    def proof(self) -> str | None:
        """The log proof (C2SP tlog-proof), None while pending or without a log."""
        log = self.document.get("log")
        proof = log.get("proof") if isinstance(log, dict) else None
        return proof if isinstance(proof, str) else None

    @property
    def pending(self) -> bool:
        """A log keeps it, but no published checkpoint covers it yet."""
        return self.has_log and self.proof is None

    @classmethod
    def from_dict(cls, document: JSONValue, *, where: str = "the document") -> Bundle:
        """``InvalidInput`` if it is not a well-formed bundle (client/documents.py)."""
        if not isinstance(document, dict) or "format" not in document:
            raise InvalidInput(f"{where} is not a receipt bundle (format {BUNDLE_FORMAT!r})")
        return cls(read_document(document, where).members)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Bundle:
        return cls.from_dict(read_json(path), where=os.fspath(path))

    def to_dict(self) -> JSONObject:
        return dict(self.document)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all (``OSError`` if it cannot be)."""
        write_atomically(path, orjson.dumps(self.to_dict()) + b"\n")


@dataclass(frozen=True)
class Attestation:
    """A receipt's in-toto attestation (docs/attestations.md) as the service answers it: a DSSE
    envelope, or with ``sigstore`` a Sigstore bundle v0.3 that also proves the attestation's log
    leaf (``tlog_entries``: none from a service without a log). Its Statement holds the receipt."""

    document: Mapping[str, JSONValue]
    """The envelope or the Sigstore bundle, as the service sent it."""

    @classmethod
    def from_dict(cls, document: JSONValue, *, where: str = "the document") -> Attestation:
        """``InvalidInput`` unless ``document`` is a well-formed envelope or Sigstore bundle whose
        Statement holds a receipt (client/documents.py)."""
        if not isinstance(document, dict) or read_document(document, where).attested is None:
            raise InvalidInput(f"{where} is not a receipt's attestation (a DSSE envelope or a Sigstore bundle)")
        return cls(document)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Attestation:
        """What ``save`` wrote: ``<receipt_id>.intoto.jsonl`` (the envelope on one line) or
        ``<receipt_id>.sigstore.json``."""
        return cls.from_dict(read_json(path), where=os.fspath(path))

    @property
    def sigstore(self) -> bool:
        """A Sigstore bundle (else the DSSE envelope)."""
        return "dsseEnvelope" in self.document

    @property
    def envelope(self) -> JSONObject:
        """The DSSE envelope (the Sigstore bundle's ``dsseEnvelope``)."""
        envelope = self.document.get("dsseEnvelope") if self.sigstore else self.document
        return dict(envelope) if isinstance(envelope, Mapping) else {}

    @property
    def statement(self) -> JSONObject:
        """The in-toto Statement the envelope's payload holds."""
        from execution_proof.receipts.attestation import parse_envelope

        return parse_envelope(self.envelope).statement()

    @property
    def receipt(self) -> shapes.ReceiptObject:
        """The receipt the Statement's predicate holds (read strictly)."""
        return read_document(dict(self.document)).receipt

    @property
    def receipt_id(self) -> str:
        return self.receipt["receipt_id"]

    @property
    def log_origin(self) -> str | None:
        """The origin of the log the receipt entered (None: the service keeps no log)."""
        predicate = self.statement["predicate"]
        origin = predicate.get("log_origin") if isinstance(predicate, dict) else None
        return origin if isinstance(origin, str) else None

    @property
    def tlog_entries(self) -> int:
        """How many log entries a Sigstore bundle carries (1 with its proof, 0 from a service
        without a log; 0 for an envelope, which never carries one)."""
        material = self.document.get("verificationMaterial") if self.sigstore else None
        entries = material.get("tlogEntries") if isinstance(material, dict) else None
        return len(entries) if isinstance(entries, list) else 0

    @property
    def default_name(self) -> str:
        """``<receipt_id>.sigstore.json`` for a Sigstore bundle, ``<receipt_id>.intoto.jsonl`` for
        the envelope (the names ``attest`` saves them under)."""
        return f"{self.receipt_id}.{'sigstore.json' if self.sigstore else 'intoto.jsonl'}"

    def to_dict(self) -> JSONObject:
        return dict(self.document)

    def to_bytes(self) -> bytes:
        """The saved file: the document's JSON on one line, then a newline (an envelope saved so
        is an in-toto JSON Lines file of one attestation)."""
        return orjson.dumps(self.to_dict()) + b"\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all (``OSError`` if it cannot be)."""
        write_atomically(path, self.to_bytes())
