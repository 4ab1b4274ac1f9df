"""The integrator's lease (docs/log.md, "Sequencing and the integrator"; "Two deployments, one
store"): one integrator is active at a time, behind ``.state/lease`` in the log store, which
it renews a third of the way through and a standby looks for four times a lease. The lease
saves work; correctness rests on the tree state's compare-and-swap (jobs/log_integrator.py).

The lease names the deployment its holder works for: the id its Redis keeps
(``log:<tag>:deployment``, read at every look, so a flushed Redis's new id and the lease
agree). A standby that finds another deployment holding it while entries of its own Redis
have waited longer than ``LOG_STALL_S`` says so, once per holder: that deployment's
integrator never reads this Redis, so these entries never enter the log while it holds it.
"""

from __future__ import annotations

import logging
import secrets
import time

from execution_proof.jobs.log_config import LogConfig
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store_log import LogQueueStore

log = logging.getLogger("eps.log")


class LeaseKeeper:
    def __init__(self, store: LogQueueStore, log_store: LogStore, config: LogConfig) -> None:
        self.store = store
        self.log = log_store
        self.config = config
        self.token = secrets.token_hex(16)
        self.holding = False
        self.deployment: str | None = None
        """The id of the deployment this integrator's Redis serves, written into the lease."""
        self._checked = 0.0
        self._warned: set[str] = set()
        """The other deployments this standby has said hold the lease while its entries wait."""

    async def hold(self) -> bool:
        """Whether this integrator holds the lease (taken, or renewed when due; between looks,
        what the last look found)."""
        now = time.monotonic()
        if self.holding and now - self._checked < self.config.lease_ms / 3000:
            return True
        if not self.holding and now - self._checked < self.config.lease_ms / 4000:
            return False
        self._checked = now
        self.deployment = await self.store.log_deployment(self.config.identity, self.deployment or secrets.token_hex(8))
        action = "keep" if self.holding else "take"
        lease = await self.log.lease(self.token, self.config.lease_ms, action, self.deployment)
        self.holding = lease.held
        if not lease.held and lease.holder and lease.holder != self.deployment:
            await self._behind_another_deployment(lease.holder)
        return lease.held

    async def drop(self) -> None:
        """Give the lease up (a stopping integrator: the next takes over at once)."""
        if self.holding:
            await self.log.lease(self.token, 0, "drop")
            self.holding = False

    async def _behind_another_deployment(self, holder: str) -> None:
        """Another deployment holds the lease: one with this log's key, origin and store but
        another Redis. Once entries have waited here longer than ``LOG_STALL_S``, said once per
        holder at WARNING."""
        if holder in self._warned:
            return
        oldest = await self.store.log_oldest_waiting_ms(self.config.identity)
        waited_s = time.time() - oldest / 1000 if oldest is not None else 0.0
        if oldest is None or waited_s < self.config.stall_s:
            return
        self._warned.add(holder)
        log.warning(
            "the lease of the log %s in %s is held by another deployment (%s); this one is %s, and entries have "
            "waited %.0f s in its Redis. Another deployment with this log's key, origin and store (LOG_SIGNING_KEY, "
            "LOG_ORIGIN, LOG_STORE) but another Redis holds the lease: this Redis's entries never enter the log while "
            "it does, and their receipts wait for a proof. Give each deployment a log of its own (its own LOG_ORIGIN, "
            "LOG_SIGNING_KEY and LOG_STORE), or point both at one Redis",
            self.config.origin,
            self.log.url,
            holder,
            self.deployment,
            waited_s,
        )
