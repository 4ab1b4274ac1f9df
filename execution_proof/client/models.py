"""The documents a client keeps (docs/python-api.md): a ``Receipt`` as ``submit`` saves it and a
``Bundle`` as ``bundle`` saves it. Each wraps the JSON document the service sent, unchanged,
plus what only the client knows (the service's URL, the salts it never sent); ``load`` reads
what ``save`` wrote, and also the bare documents the service serves.

Documents are JSON values narrowed where they are read: ``from_dict`` checks the receipt's
shape (``is_receipt``: every member of docs/receipt-format.md's receipt object, each of its
JSON type), so ``receipt`` is a ``receipts.shapes.Receipt``. Whether its values are genuine
is what ``verify`` decides, on the document as read (client/verifying.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import orjson

from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.verifier import BUNDLE_FORMAT, is_bundle
from execution_proof.runtime.files import write_atomically

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


def receipt_fault(value: JSONValue) -> str | None:
    """What keeps ``value`` from being a receipt object (a member missing or not of its JSON
    type), None when it is one."""
    if not isinstance(value, dict):
        return "the receipt is not an object"
    for name in TEXT:
        if not isinstance(value.get(name), str):
            return f"the receipt's {name} is not a string"
    for name in (*NULLABLE, "tags"):
        if name not in value:
            return f"the receipt has no {name}"
    if any(value[name] is not None and not isinstance(value[name], str) for name in NULLABLE):
        return "a member of the receipt is neither a string nor null"
    tags = value["tags"]
    if tags is not None and not (isinstance(tags, dict) and all(isinstance(tag, str) for tag in tags.values())):
        return "the receipt's tags are not an object of strings (nor null)"
    return None


def is_receipt(value: JSONValue) -> TypeGuard[shapes.Receipt]:
    """``value`` has the receipt object's shape (``receipt_fault``); its values are unchecked."""
    return receipt_fault(value) is None


def receipt_in(document: Mapping[str, JSONValue], where: str) -> shapes.Receipt:
    """The ``receipt`` member of a document, narrowed; ``InvalidInput`` if it is not a receipt."""
    receipt = document.get("receipt")
    if not is_receipt(receipt):
        raise InvalidInput(f"{where}: {receipt_fault(receipt)} (docs/receipt-format.md)")
    return receipt


class _Document:
    """What a receipt file and a bundle share: the signed receipt inside the document."""

    document: Mapping[str, JSONValue]

    @property
    def receipt(self) -> shapes.Receipt:
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
        """From a saved file's document, a service's reply, or a bare receipt object;
        ``InvalidInput`` if it holds none, or one not of the receipt object's shape."""
        if not isinstance(document, dict):
            raise InvalidInput(f"{where} holds no receipt (expected a receipt object or a response body)")
        if is_bundle(document):
            raise InvalidInput(f"{where} is a bundle, not a receipt: Bundle.load reads it")
        inner = document.get("receipt")
        receipt = inner if isinstance(inner, dict) else document
        if "receipt_hash" not in receipt or "receipt_id" not in receipt:
            raise InvalidInput(f"{where} holds no receipt (expected a receipt object or a response body)")
        body: JSONObject = document if isinstance(inner, dict) else {"receipt": document}
        receipt_in(body, where)
        members = {k: v for k, v in body.items() if k not in ("service_url", "salts")}
        url, salts = body.get("service_url"), body.get("salts") or {}
        if url is not None and not isinstance(url, str):
            raise InvalidInput(f"{where}: service_url is not a string")
        if not isinstance(salts, dict) or not all(k in SALTED and isinstance(v, str) for k, v in salts.items()):
            raise InvalidInput(f"{where}: salts must map input, output, params or env to hex")
        return cls(members, url, {k: v for k, v in salts.items() if isinstance(v, str)})

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
        """``InvalidInput`` if it is not a bundle, or its receipt not of the receipt object's shape."""
        receipt = document.get("receipt") if isinstance(document, dict) and is_bundle(document) else None
        if not isinstance(document, dict) or not isinstance(receipt, dict):
            raise InvalidInput(f"{where} is not a receipt bundle (format {BUNDLE_FORMAT!r})")
        if "receipt_id" not in receipt:
            raise InvalidInput(f"{where}: the bundle's receipt has no receipt_id")
        receipt_in(document, where)
        return cls(document)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Bundle:
        return cls.from_dict(read_json(path), where=os.fspath(path))

    def to_dict(self) -> JSONObject:
        return dict(self.document)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all (``OSError`` if it cannot be)."""
        write_atomically(path, orjson.dumps(self.to_dict()) + b"\n")
