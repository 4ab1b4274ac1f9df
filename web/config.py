"""Settings from the environment (contract section 9), parsed once at start-up."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from receipts.limits import Limits, LimitsError, load_limits
from receipts.signing import KeyRing, KeySetError, load_key_ring, new_key_set
from web.client_ip import ClientIpConfig

EMPTY_KEY_RING = KeyRing(keys={}, active_kid=None, active_signer=None)


class ConfigError(ValueError):
    """A setting is malformed; the message names the variable (never a secret value)."""


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    keyring: KeyRing = field(default=EMPTY_KEY_RING)
    ephemeral_signing_key: bool = False
    public_base_url: str | None = None
    env: str = "development"
    limits: Limits = field(default_factory=lambda: load_limits(None))
    client_ip: ClientIpConfig = field(default_factory=ClientIpConfig)

    @property
    def embedded(self) -> bool:
        return not self.redis_url


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the environment. Raises ``ConfigError`` for malformed values.

    Without ``REDIS_URL`` and ``SIGNING_KEYS`` an ephemeral signing key is made (demo
    mode); with ``REDIS_URL`` and no key the service runs but cannot sign (500).
    """
    env = os.environ if environ is None else environ
    redis_url = env.get("REDIS_URL") or None
    keyring = EMPTY_KEY_RING
    ephemeral = False
    raw_keys = env.get("SIGNING_KEYS")
    if raw_keys:
        try:
            keyring = load_key_ring(raw_keys)
        except KeySetError as exc:
            raise ConfigError(f"SIGNING_KEYS: {exc}") from exc
        if keyring.active_kid is not None and not keyring.can_sign:
            raise ConfigError("SIGNING_KEYS: the active_kid entry needs its private_key_base64url")
    elif not redis_url:
        keyring = load_key_ring(new_key_set("ephemeral"))
        ephemeral = True
    try:
        limits = load_limits(env.get("LIMITS"))
    except LimitsError as exc:
        raise ConfigError(str(exc)) from exc
    proxies = env.get("PROXIES_COUNT") or "0"
    if not proxies.isdigit():
        raise ConfigError("PROXIES_COUNT must be a whole number (trusted proxies in front of the service)")
    client_ip = ClientIpConfig(real_ip_header=env.get("REAL_IP_HEADER") or None, proxies_count=int(proxies))
    base = (env.get("PUBLIC_BASE_URL") or "").rstrip("/") or None
    default_env = "embedded" if not redis_url else "production"
    return Settings(
        redis_url=redis_url,
        keyring=keyring,
        ephemeral_signing_key=ephemeral,
        public_base_url=base,
        env=env.get("SERVICE_ENV") or default_env,
        limits=limits,
        client_ip=client_ip,
    )


def warn(message: str) -> None:
    """Operator-facing warnings go to stderr, never with secret values."""
    print(f"WARNING: {message}", file=sys.stderr, flush=True)
