"""C2SP tlog-cosignature, Ed25519 (``cosignature/v1``), pure.

A cosignature is a signed-note signature line on a checkpoint by a witness: key id =
SHA-256(name || 0x0A || 0x04 || public key)[:4]; the signature is an 8-byte big-endian
POSIX timestamp followed by the Ed25519 signature of

    cosignature/v1
    time <timestamp>
    <the checkpoint's note text>

Witness keys are written like log keys (receipts/note.py) with type byte 0x04:
``<name>+<key id>+<base64(0x04 || public key)>`` and ``PRIVATE+KEY+<name>+<key id>+<base64(0x04 || seed)>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field

import nacl.exceptions
import nacl.signing

from receipts.note import SIGNATURE_PREFIX, Note, NoteError

COSIGNATURE_V1 = 0x04
MAX_TIMESTAMP = (1 << 63) - 1


def _key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([COSIGNATURE_V1]) + public_key).digest()[:4]


def _decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError(f"{what} is not base64") from exc


def signed_message(checkpoint_text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + checkpoint_text.encode()


@dataclass(frozen=True)
class CosignerKey:
    """A witness's public key (what a log policy pins)."""

    name: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def parse(cls, vkey: str) -> CosignerKey:
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3 or not parts[0] or any(c.isspace() for c in parts[0]):
            raise NoteError("a witness key is <name>+<key id>+<base64 key>")
        raw = _decode(parts[2], "the witness key")
        if len(raw) != 33 or raw[0] != COSIGNATURE_V1:
            raise NoteError("only Ed25519 cosignature/v1 witness keys (type 0x04) are supported")
        kid = _key_id(parts[0], raw[1:])
        if parts[1] != kid.hex():
            raise NoteError("the witness key's id does not match its name and key")
        return cls(parts[0], kid, raw[1:])

    def encode(self) -> str:
        data = base64.b64encode(bytes([COSIGNATURE_V1]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{data}"

    def verify(self, checkpoint_text: str, line_signature: bytes) -> int | None:
        """The timestamp of a valid cosignature (the bytes after the key id), else None."""
        if len(line_signature) != 8 + 64:
            return None
        timestamp = int.from_bytes(line_signature[:8], "big")
        if timestamp > MAX_TIMESTAMP:
            return None
        try:
            nacl.signing.VerifyKey(self.public_key).verify(
                signed_message(checkpoint_text, timestamp), line_signature[8:]
            )
        except (nacl.exceptions.BadSignatureError, ValueError):
            return None
        return timestamp


@dataclass(frozen=True)
class Cosigner:
    """A witness's signing key (a secret)."""

    name: str
    seed: bytes = field(repr=False)

    @classmethod
    def generate(cls, name: str) -> Cosigner:
        if not name or any(c.isspace() or c == "+" for c in name):
            raise NoteError("a witness name is non-empty, without spaces or '+'")
        return cls(name, bytes(nacl.signing.SigningKey.generate()))

    @classmethod
    def parse(cls, skey: str) -> Cosigner:
        parts = skey.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a witness signer key is PRIVATE+KEY+<name>+<key id>+<base64 key>")
        raw = _decode(parts[4], "the witness signer key")
        if len(raw) != 33 or raw[0] != COSIGNATURE_V1:
            raise NoteError("only Ed25519 cosignature/v1 signer keys (type 0x04) are supported")
        cosigner = cls(parts[2], raw[1:])
        if parts[3] != cosigner.key.key_id.hex():
            raise NoteError("the witness signer key's id does not match its name and key")
        return cosigner

    @property
    def key(self) -> CosignerKey:
        public = bytes(nacl.signing.SigningKey(self.seed).verify_key)
        return CosignerKey(self.name, _key_id(self.name, public), public)

    def encode(self) -> str:
        data = base64.b64encode(bytes([COSIGNATURE_V1]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key.key_id.hex()}+{data}"

    def cosign(self, checkpoint_text: str, timestamp: int) -> str:
        """The signature line (with its newline) cosigning the checkpoint at ``timestamp``."""
        signature = nacl.signing.SigningKey(self.seed).sign(signed_message(checkpoint_text, timestamp)).signature
        blob = self.key.key_id + timestamp.to_bytes(8, "big") + signature
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"


def cosignatures(note: Note, keys: list[CosignerKey]) -> dict[str, int]:
    """Witness name -> timestamp of each valid cosignature by one of ``keys`` (others ignored;
    one whose signature fails is not counted)."""
    known = {(k.name, k.key_id): k for k in keys}
    found: dict[str, int] = {}
    for signature in note.signatures:
        key = known.get((signature.name, signature.key_id))
        if key is None:
            continue
        timestamp = key.verify(note.text, signature.signature)
        if timestamp is not None:
            found[key.name] = timestamp
    return found
