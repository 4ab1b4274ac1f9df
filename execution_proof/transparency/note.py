"""C2SP signed notes, checkpoints and tlog-proofs, Ed25519 only. Pure.

- signed-note: a text ending in a newline, a blank line, then ``— <name> <base64(key id ||
  signature)>`` lines. The key id of an Ed25519 key is SHA-256(name || 0x0A || 0x01 ||
  public key)[:4]. A verifier ignores signatures from unknown keys, rejects the note when a
  known key's signature fails, and rejects it when no known key signed.
- Keys are written as the Go module ``golang.org/x/mod/sumdb/note`` writes them, so tools in
  the ecosystem read ours: the verifier key ``<name>+<key id, 8 hex>+<base64(0x01 ||
  public key)>`` and the signer key ``PRIVATE+KEY+<name>+<key id>+<base64(0x01 || seed)>``.
- tlog-checkpoint: the note text ``<origin>\\n<size>\\n<base64 root>\\n`` (extension lines
  allowed and kept).
- tlog-proof: ``c2sp.org/tlog-proof@v1``, optional ``extra``, ``index N``, the inclusion path,
  a blank line, then the checkpoint note verbatim.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field

import nacl.exceptions
import nacl.signing

from execution_proof.transparency.errors import LogError
from execution_proof.transparency.signer import KeySigner, SeedSigner

ED25519 = 0x01
SIGNATURE_PREFIX = "\u2014 "
MAX_SIGNATURES = 64
MAX_NOTE_BYTES = 1 << 20
PROOF_HEADER = "c2sp.org/tlog-proof@v1"
_NAME_RE = re.compile(r"[^\s+]+")
_SIZE_RE = re.compile(r"0|[1-9][0-9]{0,19}")


class NoteError(LogError, ValueError):
    """A malformed note, key or proof, or a signature that does not verify."""


def key_id(name: str, signature_type: int, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([signature_type]) + public_key).digest()[:4]


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError(f"{what} is not base64") from exc


def check_name(name: str) -> str:
    """``name`` if it can name a key (non-empty, no spaces, no '+'), else NoteError."""
    if not _NAME_RE.fullmatch(name):
        raise NoteError("a key name is non-empty, without spaces or '+'")
    return name


# The text forms of keys, for any signature type over a 32-byte Ed25519 key (0x01 a log's
# note signature, 0x04 a witness's cosignature): the same parsing and checks for both.


KEY_TYPES = {0x01: "a log's note key", 0x04: "a witness's cosignature key"}
"""The key types a key's first byte names, for saying what a key of the wrong type is."""


def _key_bytes(data: str, signature_type: int, what: str) -> bytes:
    """The 32 key bytes of ``base64(type || key)``; a ``NoteError`` saying what is wrong with
    it (a one-character typo is not base64, or decodes to the wrong length or type)."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError(
            f"not a valid {what}: its key part is not base64 (a character missing, extra or mistyped?)"
        ) from exc
    if len(raw) != 33:
        raise NoteError(
            f"not a valid {what}: its key part is {len(raw)} bytes, not 33 (a type byte and an Ed25519 key)"
        )
    if raw[0] != signature_type:
        other = KEY_TYPES.get(raw[0])
        why = f"that is {other}, not a {what}" if other else "a character mistyped?"
        raise NoteError(
            f"not a valid {what}: its key part starts with type 0x{raw[0]:02x}, not 0x{signature_type:02x} ({why})"
        )
    return raw[1:]


def parse_vkey(vkey: str, signature_type: int, what: str) -> tuple[str, bytes, bytes]:
    """(name, key id, public key) of ``<name>+<key id>+<base64(type || key)>``. The key id is
    a checksum of the name and key: a typo anywhere in the line is caught."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3:
        raise NoteError(f"a {what} is <name>+<key id>+<base64 key>")
    name, hex_id, data = parts
    check_name(name)
    public_key = _key_bytes(data, signature_type, what)
    kid = key_id(name, signature_type, public_key)
    if not re.fullmatch(r"[0-9a-f]{8}", hex_id):
        raise NoteError(f"not a valid {what}: its key id {hex_id!r} is not 8 lower-case hex digits")
    if bytes.fromhex(hex_id) != kid:
        raise id_mismatch(what, hex_id)
    return name, kid, public_key


def id_mismatch(what: str, hex_id: str) -> NoteError:
    """A key line whose key id is not the checksum of its name and key: a typo somewhere."""
    return NoteError(
        f"not a valid {what}: its key id {hex_id} does not match its name and key (the id is a checksum of both: "
        "a character mistyped?)"
    )


def parse_skey(skey: str, signature_type: int, what: str) -> tuple[str, str, bytes]:
    """(name, key id in hex, seed) of ``PRIVATE+KEY+<name>+<key id>+<base64(type || seed)>``;
    the caller checks the id against the key the seed makes."""
    parts = skey.strip().split("+", 4)
    if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
        raise NoteError(f"a {what} is PRIVATE+KEY+<name>+<key id>+<base64 key>")
    name, hex_id, data = parts[2], parts[3], parts[4]
    check_name(name)
    return name, hex_id, _key_bytes(data, signature_type, what)


def encode_vkey(name: str, kid: bytes, signature_type: int, public_key: bytes) -> str:
    return f"{name}+{kid.hex()}+{base64.b64encode(bytes([signature_type]) + public_key).decode()}"


def encode_skey(name: str, kid: bytes, signature_type: int, seed: bytes) -> str:
    return f"PRIVATE+KEY+{name}+{kid.hex()}+{base64.b64encode(bytes([signature_type]) + seed).decode()}"


@dataclass(frozen=True)
class Verifier:
    """An Ed25519 verifier key (what verifiers and witnesses pin)."""

    name: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def parse(cls, vkey: str) -> Verifier:
        return cls(*parse_vkey(vkey, ED25519, "verifier key"))

    def encode(self) -> str:
        return encode_vkey(self.name, self.key_id, ED25519, self.public_key)

    def verify(self, text: bytes, signature: bytes) -> bool:
        try:
            nacl.signing.VerifyKey(self.public_key).verify(text, signature)
        except (nacl.exceptions.BadSignatureError, ValueError):
            return False
        return True


@dataclass(frozen=True)
class Signer:
    """A log's Ed25519 signer: its name and the key (a secret: never logged), held in memory
    or in a token (transparency/signer.py). Built from a seed's bytes, it holds them in memory."""

    name: str
    key: KeySigner = field(repr=False)
    verifier: Verifier = field(init=False, repr=False, compare=False)

    def __init__(self, name: str, key: KeySigner | bytes) -> None:
        signer = SeedSigner(key) if isinstance(key, bytes) else key
        public = signer.public_key()
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "key", signer)
        object.__setattr__(self, "verifier", Verifier(name, key_id(name, ED25519, public), public))

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(check_name(name), SeedSigner.generate())

    @classmethod
    def parse(cls, skey: str) -> Signer:
        name, hex_id, seed = parse_skey(skey, ED25519, "signer key")
        signer = cls(name, seed)
        if hex_id != signer.verifier.key_id.hex():
            raise id_mismatch("signer key", hex_id)
        return signer

    @property
    def seed(self) -> bytes:
        """The seed of a key held in memory (``NoteError`` for a key in a token)."""
        if not isinstance(self.key, SeedSigner):
            raise NoteError("the key is in a token: it has no seed here")
        return self.key.seed

    def encode(self) -> str:
        return encode_skey(self.name, self.verifier.key_id, ED25519, self.seed)

    def signature_line(self, text: bytes) -> str:
        signature = self.key.sign(text)
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(self.verifier.key_id + signature).decode()}\n"


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: bytes
    signature: bytes
    line: str


@dataclass(frozen=True)
class Note:
    text: str
    signatures: tuple[Signature, ...]

    def encode(self) -> str:
        return self.text + "\n" + "".join(s.line for s in self.signatures)


def sign_note(text: str, signer: Signer) -> str:
    if not text.endswith("\n"):
        raise NoteError("a note's text ends in a newline")
    return text + "\n" + signer.signature_line(text.encode())


def parse_note(note: str | bytes) -> Note:
    raw = note.encode() if isinstance(note, str) else note
    if len(raw) > MAX_NOTE_BYTES:
        raise NoteError("the note is too large")
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise NoteError("a note is UTF-8") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note holds no control characters but newlines")
    split = text.rfind("\n\n")
    if split < 0 or not text.endswith("\n"):
        raise NoteError("a note is text, a blank line and signature lines")
    body, lines = text[: split + 1], text[split + 2 :].split("\n")[:-1]
    if not lines:
        raise NoteError("the note has no signatures")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError("the note has too many signatures")
    signatures = []
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError("a signature line starts with an em dash and a space")
        name, _, data = line[len(SIGNATURE_PREFIX) :].partition(" ")
        check_name(name)
        raw_sig = _b64decode(data, "a signature")
        if len(raw_sig) < 5:
            raise NoteError("a signature is a key id and at least one byte")
        signatures.append(Signature(name, raw_sig[:4], raw_sig[4:], line + "\n"))
    return Note(body, tuple(signatures))


def verify_note(note: str | bytes | Note, verifiers: list[Verifier]) -> tuple[Note, list[Verifier]]:
    """The note and the known keys that signed it. Unknown signatures are ignored; a known
    key whose signature fails, or no known signature at all, raises ``NoteError``."""
    parsed = note if isinstance(note, Note) else parse_note(note)
    known = {(v.name, v.key_id): v for v in verifiers}
    signed: list[Verifier] = []
    for signature in parsed.signatures:
        verifier = known.get((signature.name, signature.key_id))
        if verifier is None:
            continue
        if not verifier.verify(parsed.text.encode(), signature.signature):
            raise NoteError(f"the signature of {signature.name} does not verify")
        if verifier not in signed:
            signed.append(verifier)
    if not signed:
        raise NoteError("no known key signed the note")
    return parsed, signed


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "\n".join(lines) + "\n"


def parse_checkpoint(text: str) -> Checkpoint:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
        raise NoteError("a checkpoint is at least three non-empty lines")
    origin, size, root = lines[0], lines[1], lines[2]
    if not _SIZE_RE.fullmatch(size):
        raise NoteError("a checkpoint's size is a decimal without leading zeroes")
    raw_root = _b64decode(root, "the checkpoint's root")
    if len(raw_root) != 32:
        raise NoteError("a checkpoint's root is 32 bytes")
    return Checkpoint(origin, int(size), raw_root, tuple(lines[3:-1]))


def open_checkpoint(note: str | bytes, log_key: Verifier) -> tuple[Checkpoint, Note]:
    """A checkpoint signed by ``log_key`` whose origin is the key's name."""
    parsed, _ = verify_note(note, [log_key])
    checkpoint = parse_checkpoint(parsed.text)
    if checkpoint.origin != log_key.name:
        raise NoteError(f"the checkpoint's origin {checkpoint.origin!r} is not the log key's name")
    return checkpoint, parsed


# --------------------------------------------------------------------------- tlog-proof


@dataclass(frozen=True)
class TlogProof:
    index: int
    path: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None

    def encode(self) -> str:
        lines = [PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode() for h in self.path)
        return "\n".join(lines) + "\n\n" + self.checkpoint


def parse_tlog_proof(text: str) -> TlogProof:
    head, sep, checkpoint = text.partition("\n\n")
    if not sep:
        raise NoteError("a tlog-proof has a blank line before its checkpoint")
    lines = head.split("\n")
    if lines[0] != PROOF_HEADER:
        raise NoteError(f"a tlog-proof starts with {PROOF_HEADER}")
    at = 1
    extra = None
    if len(lines) > at and lines[at].startswith("extra "):
        extra = _b64decode(lines[at][6:], "the proof's extra data")
        at += 1
    if len(lines) <= at or not lines[at].startswith("index ") or not _SIZE_RE.fullmatch(lines[at][6:]):
        raise NoteError("a tlog-proof names its index (a decimal without leading zeroes)")
    index = int(lines[at][6:])
    path = []
    for line in lines[at + 1 :]:
        value = _b64decode(line, "an inclusion proof hash")
        if len(value) != 32:
            raise NoteError("an inclusion proof hash is 32 bytes")
        path.append(value)
    return TlogProof(index, tuple(path), checkpoint, extra)
