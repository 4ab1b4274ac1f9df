"""API keys: ``eps_`` + 43 base64url characters; only their SHA-256 is stored."""

from __future__ import annotations

import secrets

from execution_proof.receipts.encoding import HashStr, b64url_encode, sha256_tag

API_KEY_PREFIX = "eps_"
MIN_KEY_LEN = 16
MAX_KEY_LEN = 256


def new_api_key() -> str:
    """256 random bits; shown to the client once and never stored."""
    return API_KEY_PREFIX + b64url_encode(secrets.token_bytes(32))


def hash_api_key(api_key: str) -> HashStr:
    """``sha256:<hex>`` of the key's UTF-8 bytes: the only form the server keeps."""
    return sha256_tag(api_key.encode("utf-8", "surrogatepass"))


def is_plausible_key(api_key: str) -> bool:
    """16 to 256 characters, checked before any store lookup."""
    return MIN_KEY_LEN <= len(api_key) <= MAX_KEY_LEN
