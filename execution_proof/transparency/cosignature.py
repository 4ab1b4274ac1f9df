"""C2SP tlog-cosignature, Ed25519 (``cosignature/v1``), pure.

A cosignature is a signed-note signature line on a checkpoint by a witness: key id =
SHA-256(name || 0x0A || 0x04 || public key)[:4]; the signature is an 8-byte big-endian
POSIX timestamp followed by the Ed25519 signature of

    cosignature/v1
    time <timestamp>
    <the checkpoint's note text>

Witness keys are written like log keys (transparency/note.py) with type byte 0x04:
``<name>+<key id>+<base64(0x04 || public key)>`` and ``PRIVATE+KEY+<name>+<key id>+<base64(0x04 || seed)>``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import nacl.exceptions
import nacl.signing

from execution_proof.transparency.note import (
    SIGNATURE_PREFIX,
    Note,
    check_name,
    encode_skey,
    encode_vkey,
    id_mismatch,
    key_id,
    parse_skey,
    parse_vkey,
)
from execution_proof.transparency.signer import KeySigner, SeedSigner

COSIGNATURE_V1 = 0x04
MAX_TIMESTAMP = (1 << 63) - 1


def _key_id(name: str, public_key: bytes) -> bytes:
    return key_id(name, COSIGNATURE_V1, public_key)


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
        return cls(*parse_vkey(vkey, COSIGNATURE_V1, "witness key"))

    def encode(self) -> str:
        return encode_vkey(self.name, self.key_id, COSIGNATURE_V1, self.public_key)

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
    """A witness's signing key (a secret), held in memory or in a token
    (transparency/signer.py). Built from a seed's bytes, it holds them in memory."""

    name: str
    signer: KeySigner = field(repr=False)
    key: CosignerKey = field(init=False, repr=False, compare=False)

    def __init__(self, name: str, signer: KeySigner | bytes) -> None:
        held = SeedSigner(signer) if isinstance(signer, bytes) else signer
        public = held.public_key()
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "signer", held)
        object.__setattr__(self, "key", CosignerKey(name, _key_id(name, public), public))

    @classmethod
    def generate(cls, name: str) -> Cosigner:
        return cls(check_name(name), SeedSigner.generate())

    @classmethod
    def parse(cls, skey: str) -> Cosigner:
        name, hex_id, seed = parse_skey(skey, COSIGNATURE_V1, "witness signer key")
        cosigner = cls(name, seed)
        if hex_id != cosigner.key.key_id.hex():
            raise id_mismatch("witness signer key", hex_id)
        return cosigner

    @property
    def seed(self) -> bytes:
        """The seed of a key held in memory (``ValueError`` for a key in a token)."""
        if not isinstance(self.signer, SeedSigner):
            raise ValueError("the witness key is in a token: it has no seed here")
        return self.signer.seed

    def encode(self) -> str:
        return encode_skey(self.name, self.key.key_id, COSIGNATURE_V1, self.seed)

    def cosign(self, checkpoint_text: str, timestamp: int) -> str:
        """The signature line (with its newline) cosigning the checkpoint at ``timestamp``."""
        signature = self.signer.sign(signed_message(checkpoint_text, timestamp))
        blob = self.key.key_id + timestamp.to_bytes(8, "big") + signature
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"


def cosignatures(note: Note, keys: list[CosignerKey]) -> dict[CosignerKey, int]:
    """Key -> timestamp of each valid cosignature by one of ``keys`` (others ignored; one
    whose signature fails is not counted). Keyed by the key, not its name: two witnesses may
    use keys of the same name."""
    known = {(k.name, k.key_id): k for k in keys}
    found: dict[CosignerKey, int] = {}
    for signature in note.signatures:
        key = known.get((signature.name, signature.key_id))
        if key is None:
            continue
        timestamp = key.verify(note.text, signature.signature)
        if timestamp is not None:
            found[key] = timestamp
    return found
