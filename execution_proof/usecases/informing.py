"""What the service says about itself: its health (``GET /health``, ``GET /``) and the public
keys that sign receipts (``GET /v1/public-key``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from execution_proof.kv.health import store_reachable
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import NotFound, SigningKeyUnavailable
from execution_proof.receipts.signing import KeySet
from execution_proof.runtime.settings import Settings
from execution_proof.usecases.limiting import Admission, Caller, Limiter
from execution_proof.usecases.log_reading import LogService
from execution_proof.usecases.signing_keys import ReceiptKeys


@dataclass(frozen=True, slots=True)
class Health:
    """``store``: ``ok`` or ``unreachable`` (a PING within 1 s); ``log``: ``ok``, ``stalled``,
    ``halted`` or ``off``; ``env``: the deployment's name."""

    store: str
    log: str
    env: str
    keys: str
    """``ok``, ``expiring`` (renewal failed into the last tenth of the key's lifetime) or
    ``unavailable`` (no receipt can be signed)."""


@dataclass(frozen=True, slots=True)
class PublicKeys:
    keys: KeySet
    admission: Admission[None]


class Informer:
    """Health and public keys."""

    def __init__(
        self, settings: Settings, limiter: Limiter, store: Store, log: LogService | None, keys: ReceiptKeys
    ) -> None:
        self.settings = settings
        self.keys = keys
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
        keys = self.keys.health(self.limiter.clock_ms())
        return Health("ok" if reachable else "unreachable", log_state, self.settings.env, keys)

    async def public_keys(self, caller: Caller, kid: str | None = None) -> PublicKeys:
        """Every key the registry lists (or the one ``kid`` names), with its certificate, the
        roots and the revocations, counted against the address. ``NotFound`` for an unknown
        ``kid``; ``SigningKeyUnavailable`` while no key is known."""
        admission: Admission[None] = await self.limiter.admit(caller, "public_key")
        ring = await self.keys.knowing(kid) if kid is not None else self.keys.view()
        if kid is not None:
            key = ring.keys.get(kid)
            if key is None:
                raise NotFound(f"no key {kid[:80]!r} is known here")
            ring = replace(ring, keys={kid: key})
        if not ring.keys:
            raise SigningKeyUnavailable("no receipt key is certified yet", headers={"Retry-After": "1"})
        return PublicKeys(ring.public_keys_json(), admission)
