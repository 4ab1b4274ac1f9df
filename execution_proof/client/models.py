"""The documents a client keeps (docs/python-api.md): a ``Receipt`` as ``submit`` saves it and a
``Bundle`` as ``bundle`` saves it. Each wraps the JSON document the service sent, unchanged,
plus what only the client knows (the service's URL, the salts it never sent); ``load`` reads
what ``save`` wrote, and also the bare documents the service serves."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from execution_proof.receipts.errors import InvalidInput
from execution_proof.receipts.verifier import BUNDLE_FORMAT, is_bundle
from execution_proof.runtime.files import write_atomically

SALTED = ("input", "output", "params", "env")
"""The files a receipt hashes, as ``salts`` names them."""


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file; ``InvalidInput`` if it cannot be read or is not JSON."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc
    return parse_json(data, os.fspath(path))


def parse_json(data: bytes, where: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not valid JSON") from exc


class _Document:
    """What a receipt file and a bundle share: the signed receipt inside the document."""

    document: Mapping[str, Any]

    @property
    def receipt(self) -> dict[str, Any]:
        """The signed receipt object itself."""
        receipt: dict[str, Any] = self.document["receipt"]
        return receipt

    @property
    def receipt_id(self) -> str:
        return str(self.receipt["receipt_id"])


@dataclass(frozen=True)
class Receipt(_Document):
    """A receipt: the service's reply to a create or a read (``{"receipt": {...}, ...}``),
    the service's URL and the salts of the files hashed with one (hex, by ``input``,
    ``output``, ``params``, ``env``; never sent)."""

    document: Mapping[str, Any]
    """The service's reply, its members as sent (``receipt`` and whatever came with it)."""
    service_url: str | None = None
    salts: Mapping[str, str] = field(default_factory=dict)
    raw: bytes | None = field(default=None, repr=False, compare=False)
    """The reply's bytes, when this came from the service: ``save`` keeps them as they were."""
    replayed: bool = field(default=False, compare=False)
    """The service answered a create with the earlier receipt of the same request (200)."""

    @property
    def project_id(self) -> str:
        return str(self.receipt.get("project_id"))

    @property
    def receipt_hash(self) -> str:
        return str(self.receipt.get("receipt_hash"))

    @classmethod
    def from_dict(cls, document: Any, *, where: str = "the document") -> Receipt:
        """From a saved file's document, a service's reply, or a bare receipt object."""
        if not isinstance(document, dict):
            raise InvalidInput(f"{where} holds no receipt (expected a receipt object or a response body)")
        if is_bundle(document):
            raise InvalidInput(f"{where} is a bundle, not a receipt: Bundle.load reads it")
        body = document if isinstance(document.get("receipt"), dict) else {"receipt": document}
        if "receipt_hash" not in body["receipt"] or "receipt_id" not in body["receipt"]:
            raise InvalidInput(f"{where} holds no receipt (expected a receipt object or a response body)")
        members = {k: v for k, v in body.items() if k not in ("service_url", "salts")}
        url, salts = body.get("service_url"), body.get("salts") or {}
        if url is not None and not isinstance(url, str):
            raise InvalidInput(f"{where}: service_url is not a string")
        if not isinstance(salts, dict) or not all(k in SALTED and isinstance(v, str) for k, v in salts.items()):
            raise InvalidInput(f"{where}: salts must map input, output, params or env to hex")
        return cls(members, url, dict(salts))

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

    def to_dict(self) -> dict[str, Any]:
        """The saved document: the reply's members, then ``service_url`` and ``salts``."""
        extra: dict[str, Any] = {"service_url": self.service_url} if self.service_url else {}
        if self.salts:
            extra["salts"] = dict(self.salts)
        return {**self.document, **extra}

    def to_bytes(self) -> bytes:
        """The saved file: the reply's own bytes, when there are any, with ``service_url``
        (and ``salts``) added as its last members; else the document as JSON."""
        extra: dict[str, Any] = {"service_url": self.service_url} if self.service_url else {}
        if self.salts:
            extra["salts"] = dict(self.salts)
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

    document: Mapping[str, Any]

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
    def from_dict(cls, document: Any, *, where: str = "the document") -> Bundle:
        if not is_bundle(document) or not isinstance(document.get("receipt"), dict):
            raise InvalidInput(f"{where} is not a receipt bundle (format {BUNDLE_FORMAT!r})")
        if "receipt_id" not in document["receipt"]:
            raise InvalidInput(f"{where}: the bundle's receipt has no receipt_id")
        return cls(document)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Bundle:
        return cls.from_dict(read_json(path), where=os.fspath(path))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all (``OSError`` if it cannot be)."""
        write_atomically(path, orjson.dumps(self.to_dict()) + b"\n")
