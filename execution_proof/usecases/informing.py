"""What the service says about itself: its health (``GET /health``, ``GET /``) and the public
keys that sign receipts (``GET /v1/public-key``)."""

from __future__ import annotations

from dataclasses import dataclass

from execution_proof.kv.health import store_reachable
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import SigningKeyUnavailable
from execution_proof.receipts.signing import KeySet
from execution_proof.runtime.settings import Settings
from execution_proof.usecases.limiting import Admission, Caller, Limiter
from execution_proof.usecases.log_reading import LogService


@dataclass(frozen=True, slots=True)
class Health:
    """``store``: ``ok`` or ``unreachable`` (a PING within 1 s); ``log``: ``ok``, ``stalled``,
    ``halted`` or ``off``; ``env``: the deployment's name."""

    store: str
    log: str
    env: str


@dataclass(frozen=True, slots=True)
class PublicKeys:
    keys: KeySet
    admission: Admission[None]


class Informer:
    """Health and public keys."""

    def __init__(self, settings: Settings, limiter: Limiter, store: Store, log: LogService | None) -> None:
        self.settings = settings
        self.limiter = limiter
        self.store = store
        self.log = log

    async def health(self) -> Health:
        """Never raises: a load balancer must not cycle the service while Redis is away (it
        comes back by itself). The log is ``stalled`` when entries wait and nothing was
        published for ``LOG_STALL_S``, ``halted`` when a witness showed a fork or the log store
        was refused (an operator must look)."""
        reachable = await store_reachable(self.store)
        log_state = "off" if self.log is None else await self.log.state()
        return Health("ok" if reachable else "unreachable", log_state, self.settings.env)

    async def public_keys(self, caller: Caller) -> PublicKeys:
        """The keys, counted against the address; ``SigningKeyUnavailable`` without one."""
        admission: Admission[None] = await self.limiter.admit(caller, "public_key")
        keyring = self.settings.keyring
        if not keyring.keys or keyring.active_kid is None:
            raise SigningKeyUnavailable("no signing key is configured")
        return PublicKeys(keyring.public_keys_json(), admission)
