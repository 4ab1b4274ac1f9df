"""Every signer URI opened, and new keys made, for the processes and the key makers
(docs/keys.md, "Signer URIs").

- ``file:/ABSOLUTE/PATH`` and ``env:NAME`` hold the key's text (transparency/signer.py opens
  them, through the text parser of what the key signs);
- ``pkcs11:…`` is a key in a token (runtime/pkcs11_signer.py);
- ``plugin:NAME[?ARG]`` is a key behind an executable (runtime/plugin_signer.py).

A receipt root's text is the base64url (without padding) of its 32-byte Ed25519 seed; a log's
or a witness's is its ``PRIVATE+KEY+…`` line. Every failure is a ``SignerError`` whose message
names the URI with any ``pin-value`` redacted, never a key or a PIN.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from execution_proof.receipts.encoding import b64url_decode, b64url_encode
from execution_proof.runtime.pkcs11_signer import Pkcs11Signer, generate_in_token
from execution_proof.runtime.plugin_signer import PluginSigner
from execution_proof.transparency.signer import (
    KeySigner,
    SeedSigner,
    SignerError,
    open_local,
    redact,
    scheme_of,
    write_key_file,
)

N = TypeVar("N")
SCHEMES = "file:, env:, pkcs11: or plugin:"
NOTE_KEY_PREFIX = "PRIVATE+KEY+"


def open_signer(
    uri: str, *, environ: Mapping[str, str] | None = None, parse_text: Callable[[str], KeySigner]
) -> KeySigner:
    """The key ``uri`` names: ``file:``/``env:`` text through ``parse_text``, a token's key or a
    plugin's. Nothing is asked of a token or plugin yet (the first ``public_key()`` or ``sign``
    does)."""
    scheme = scheme_of(uri)
    if scheme in ("file", "env"):
        return open_local(uri, parse_text, environ)
    if scheme in ("pkcs11", "plugin"):
        return _outside(uri, environ)
    raise SignerError(f"{_named(uri)}: not a signer URI ({SCHEMES})")


def _outside(uri: str, environ: Mapping[str, str] | None) -> KeySigner:
    """A key outside this process's memory: in a token, or behind a plugin."""
    return Pkcs11Signer(uri, environ) if scheme_of(uri) == "pkcs11" else PluginSigner(uri, environ)


def _named(uri: str) -> str:
    """The URI for a message; a value without a scheme is not shown (it may be a key itself)."""
    head, sep, _ = uri.partition(":")
    return redact(uri) if sep and head.isalnum() else "the value (not shown: it may be a key)"


def parse_root_text(text: str) -> SeedSigner:
    """A receipt root from its text: base64url without padding of its 32-byte seed."""
    try:
        seed = b64url_decode(text.strip())
    except ValueError:
        seed = b""
    if len(seed) != 32:
        raise SignerError("a receipt root's text is the base64url (no padding) of its 32-byte Ed25519 seed")
    return SeedSigner(seed)


def root_text(root: SeedSigner) -> str:
    """The text form of a receipt root held in memory (what a ``file:`` root holds)."""
    return b64url_encode(root.seed)


def open_root(uri: str, environ: Mapping[str, str] | None = None) -> KeySigner:
    """The receipt root ``uri`` names (``RECEIPT_ROOT_KEY``)."""
    return open_signer(uri, environ=environ, parse_text=parse_root_text)


def open_named(
    value: str,
    name: str | None,
    *,
    parse_key: Callable[[str], N],
    wrap: Callable[[str, KeySigner], N],
    environ: Mapping[str, str] | None = None,
) -> N:
    """A log's or a witness's key (``note.Signer``, ``Cosigner``) from a setting or option:
    ``PRIVATE+KEY+…`` is the key itself (``parse_key``); a ``file:``/``env:`` URI holds that
    line (the first line of its text: a key file may keep the verifier key after it); a
    ``pkcs11:`` or ``plugin:`` key has no name of its own and is ``wrap(name, key)``, so
    ``name`` is needed then. ``SignerError`` (or the parser's ``ValueError``) otherwise."""
    if value.startswith(NOTE_KEY_PREFIX):
        return parse_key(value)
    scheme = scheme_of(value)
    if scheme in ("file", "env"):
        return open_local(value, lambda text: parse_key(text.splitlines()[0] if text else ""), environ)
    if scheme in ("pkcs11", "plugin"):
        if name is None:
            raise SignerError(f"{redact(value)}: a key in a token or a plugin has no name of its own: give its name")
        return wrap(name, _outside(value, environ))
    raise SignerError(f"{_named(value)}: neither a {NOTE_KEY_PREFIX}… key nor a signer URI ({SCHEMES})")


def without_pin(uri: str) -> str:
    """The URI to configure or print: a ``pkcs11:`` URI's ``pin-value`` removed (its
    ``pin-source`` kept)."""
    if scheme_of(uri) != "pkcs11" or "?" not in uri:
        return uri
    path, _, query = uri.partition("?")
    kept = [part for part in query.split("&") if not part.startswith("pin-value=")]
    return f"{path}?{'&'.join(kept)}" if kept else path


def make_key(uri: str, *, text_of: Callable[[SeedSigner], str], environ: Mapping[str, str] | None = None) -> KeySigner:
    """A new key where ``uri`` says: made in the token (``pkcs11:``, never extractable); made
    here and written as ``text_of(key)`` to a new file readable by its owner only (``file:``,
    never over an existing file); asked of the plugin (``plugin:``, which made it itself).
    ``SignerError`` for ``env:`` (a variable cannot be written) and for whatever fails."""
    scheme = scheme_of(uri)
    if scheme == "pkcs11":
        return generate_in_token(uri, environ)
    if scheme == "plugin":
        plugin = PluginSigner(uri, environ)
        plugin.public_key()
        return plugin
    if scheme == "file":
        path = _file_path(uri)
        key = SeedSigner.generate()
        try:
            write_key_file(path, text_of(key))
        except FileExistsError:
            raise SignerError(f"{uri}: the file exists: refusing to overwrite it (nothing was made)") from None
        except OSError as exc:
            raise SignerError(f"{uri}: cannot write the key file ({exc.strerror})") from None
        return key
    if scheme == "env":
        raise SignerError(
            f"{uri}: an env: key cannot be created (this command cannot set a variable): make a file: key, "
            "then put its text in the variable"
        )
    raise SignerError(f"{_named(uri)}: not a signer URI ({SCHEMES})")


def _file_path(uri: str) -> Path:
    rest = uri.removeprefix("file:")
    path = Path(rest[2:] if rest.startswith("//") else rest)
    if not path.is_absolute():
        raise SignerError(f"{uri}: file: needs an absolute path")
    return path
