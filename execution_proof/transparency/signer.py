"""The one signer protocol every private key here goes through, and its in-memory forms.

A private key is named by a signer URI (docs/keys.md):

- ``file:/ABSOLUTE/PATH``: the file holds the key's text form (refused when group- or
  world-readable);
- ``env:NAME``: the environment variable NAME holds the same text;
- ``pkcs11:…`` (RFC 7512) and ``plugin:NAME[?ARG]``: a key in a token, or behind an
  out-of-process signer. Those live one floor up (runtime/signers.py) and are handed down as
  a ``KeySigner``; this floor opens only the first two.

The text form depends on what the key signs: a receipt root is the base64url (no padding) of
its 32-byte Ed25519 seed; a log or witness key is its ``PRIVATE+KEY+…`` note form
(transparency/note.py), whose parser the caller hands in. Nothing here logs or prints a key.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import nacl.exceptions
import nacl.signing

from execution_proof.transparency.errors import LogError

T = TypeVar("T")
LOCAL_SCHEMES = ("file", "env")
TOKEN_SCHEMES = ("pkcs11", "plugin")
_PIN_RE = re.compile(r"([?&;])pin-value=[^&;]*")


@runtime_checkable
class KeySigner(Protocol):
    """An Ed25519 private key that signs and tells its public key, wherever it lives."""

    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        ...

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        ...


class SignerError(LogError, ValueError):
    """A signer URI that names no usable key; the message names the URI (PIN removed), never
    the key."""


class SeedSigner:
    """An Ed25519 key held in this process's memory (PyNaCl). Never printed: its repr names
    only the public key."""

    __slots__ = ("_key", "_public")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise SignerError("an Ed25519 seed is 32 bytes")
        self._key = nacl.signing.SigningKey(seed)
        self._public = bytes(self._key.verify_key)

    @classmethod
    def generate(cls) -> SeedSigner:
        return cls(bytes(nacl.signing.SigningKey.generate()))

    @property
    def seed(self) -> bytes:
        """The seed itself (for writing a new ``file:`` key once, at its creation)."""
        return bytes(self._key)

    def public_key(self) -> bytes:
        return self._public

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message).signature

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeedSigner) and other._public == self._public

    def __hash__(self) -> int:
        return hash(self._public)

    def __repr__(self) -> str:
        return f"SeedSigner(public={self._public.hex()[:16]}…)"


def verify_ed25519(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``message``; never raises."""
    try:
        nacl.signing.VerifyKey(public_key).verify(message, signature)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError, TypeError):
        return False
    return True


def redact(uri: str) -> str:
    """The URI fit for a log line or an error: any ``pin-value`` removed."""
    return _PIN_RE.sub(lambda m: m.group(1) + "pin-value=REDACTED", uri)


def scheme_of(uri: str) -> str:
    """The URI's scheme (``file``, ``env``, ``pkcs11``, ``plugin``), or "" for none of them."""
    head, sep, _rest = uri.partition(":")
    return head if sep and head in LOCAL_SCHEMES + TOKEN_SCHEMES else ""


def read_key_text(uri: str, environ: Mapping[str, str] | None = None) -> str:
    """The key text a ``file:`` or ``env:`` URI names (stripped). Raises ``SignerError``: a
    relative path, a file that cannot be read or that its group or others may read, an unset
    variable, or another scheme."""
    environ = os.environ if environ is None else environ
    scheme, _, rest = uri.partition(":")
    if scheme == "env":
        if not rest:
            raise SignerError(f"{uri}: env: needs a variable name")
        value = environ.get(rest, "").strip()
        if not value:
            raise SignerError(f"{uri}: the variable {rest} is not set")
        return value
    if scheme == "file":
        path = Path(rest[2:] if rest.startswith("//") else rest)
        if not path.is_absolute():
            raise SignerError(f"{uri}: file: needs an absolute path")
        try:
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise SignerError(f"{uri}: the key file is readable by its group or others (chmod 600 it)")
            return path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SignerError(f"{uri}: cannot read the key file ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise SignerError(f"{uri}: the key file is not text") from None
    raise SignerError(f"{redact(uri)}: not a file: or env: signer URI")


def open_local(uri: str, parse_text: Callable[[str], T], environ: Mapping[str, str] | None = None) -> T:
    """The key a ``file:`` or ``env:`` URI names, through ``parse_text`` (whose ``ValueError``
    becomes a ``SignerError`` naming the URI, without the key)."""
    text = read_key_text(uri, environ)
    try:
        return parse_text(text)
    except ValueError as exc:
        raise SignerError(f"{uri}: {exc}") from None


def write_key_file(path: Path, text: str) -> None:
    """Write a new key file readable by its owner only (0600 from the first byte); refuses to
    overwrite one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text + "\n")
