"""Signer URIs for every private key (placeholder until the token signers land)."""

from __future__ import annotations

from collections.abc import Mapping

from execution_proof.receipts.encoding import b64url_decode
from execution_proof.transparency.signer import KeySigner, SeedSigner, SignerError, open_local, redact


def parse_root_text(text: str) -> SeedSigner:
    try:
        seed = b64url_decode(text)
    except ValueError:
        raise ValueError("a receipt root is the base64url of a 32-byte Ed25519 seed") from None
    if len(seed) != 32:
        raise ValueError("a receipt root is the base64url of a 32-byte Ed25519 seed")
    return SeedSigner(seed)


def open_root(uri: str, environ: Mapping[str, str] | None = None) -> KeySigner:
    if uri.startswith(("file:", "env:")):
        return open_local(uri, parse_root_text, environ)
    raise SignerError(f"{redact(uri)}: not supported yet")
