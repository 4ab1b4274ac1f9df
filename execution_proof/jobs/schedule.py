"""The periodic schedule and its single owner (design and reasons in ``docs/jobs.md``).

Every worker runs a ``ScheduleThread``. On each tick it tries to become, or stay, the
**schedule owner**: a lock key on the jobs Redis, taken with ``SET NX PX`` under the
worker's name, extended only by its holder (compare-and-extend) and released on shutdown
(compare-and-delete). A worker that dies without releasing it loses it when it expires.
Only the owner schedules.

For each periodic job the owner looks at two interval slots, the current one and the next.
It claims a slot with ``SET NX`` on a slot marker that outlives the slot, and only after
winning that claim it enqueues the slot's run: now for the current slot (a fresh deployment
sweeps at once), with ``enqueue_at`` at the slot's start for the next one, which RQ's
scheduler (any worker's) moves into the queue when due. So one slot is enqueued once even
across an owner handover, and the next run is already in Redis if the owner dies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import redis
from rq import Queue

from execution_proof.jobs.queue import RETRY

OWNER_KEY = "eps:jobs:schedule-owner"
OWNER_TTL_MS = 60_000
TICK_S = 15.0
log = logging.getLogger("eps.jobs.schedule")

LUA_DIR = Path(__file__).parent / "lua"


@dataclass(frozen=True)
class Periodic:
    """A job run once per ``interval_s`` slot (slots are aligned to the Unix epoch)."""

    name: str
    func_path: str
    interval_s: int
    job_timeout_s: int

    def slot_key(self, slot: int) -> str:
        return f"eps:jobs:slot:{self.name}:{slot}"

    def job_id(self, slot: int) -> str:
        return f"eps-{self.name}-{slot}"


RETENTION_SWEEP = Periodic(
    "retention-sweep", "execution_proof.jobs.retention.sweep_expired", interval_s=3600, job_timeout_s=3000
)
SCHEDULE = (RETENTION_SWEEP,)


class ScheduleOwner:
    """One worker's side of the schedule: claim ownership, and schedule while owning it."""

    def __init__(
        self,
        queue: Queue,
        token: str,
        *,
        schedule: tuple[Periodic, ...] = SCHEDULE,
        owner_ttl_ms: int = OWNER_TTL_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue = queue
        self.token = token
        self.schedule = schedule
        self.owner_ttl_ms = owner_ttl_ms
        self.clock = clock
        self.owning = False
        connection: redis.Redis = queue.connection
        self.connection = connection
        self._claim = connection.register_script((LUA_DIR / "claim_schedule_owner.lua").read_text())
        self._release = connection.register_script((LUA_DIR / "release_schedule_owner.lua").read_text())

    def claim(self) -> bool:
        """Become or stay the owner; False while another worker holds the lock."""
        held = bool(self._claim(keys=[OWNER_KEY], args=[self.token, self.owner_ttl_ms]))
        if held != self.owning:
            log.info("schedule owner: %s", f"this worker ({self.token})" if held else "another worker")
        self.owning = held
        return held

    def release(self) -> bool:
        """Give ownership up (clean shutdown) so another worker takes over at its next tick."""
        self.owning = False
        return bool(self._release(keys=[OWNER_KEY], args=[self.token]))

    def tick(self) -> list[str]:
        """Claim ownership; as owner, make sure every periodic job's current and next slot
        are enqueued. Returns the job ids this call enqueued (usually none)."""
        if not self.claim():
            return []
        now = self.clock()
        enqueued: list[str] = []
        for periodic in self.schedule:
            current = int(now // periodic.interval_s)
            for slot in (current, current + 1):
                if self._schedule_slot(periodic, slot, now):
                    enqueued.append(periodic.job_id(slot))
        return enqueued

    def _schedule_slot(self, periodic: Periodic, slot: int, now: float) -> bool:
        marker_ttl_s = 3 * periodic.interval_s  # outlives the slot it was claimed ahead of
        if not self.connection.set(periodic.slot_key(slot), self.token, nx=True, ex=marker_ttl_s):
            return False
        start = slot * periodic.interval_s
        options = {"job_id": periodic.job_id(slot), "retry": RETRY, "job_timeout": periodic.job_timeout_s}
        if start <= now:
            self.queue.enqueue(periodic.func_path, **options)
        else:
            self.queue.enqueue_at(datetime.fromtimestamp(start, UTC), periodic.func_path, **options)
        log.info("scheduled %s for %s", periodic.job_id(slot), datetime.fromtimestamp(max(start, now), UTC))
        return True


class ScheduleThread(threading.Thread):
    """Ticks a ``ScheduleOwner`` every ``tick_s`` until stopped, independently of the jobs the
    worker runs (so a long job never lets the ownership lapse)."""

    def __init__(self, owner: ScheduleOwner, tick_s: float = TICK_S) -> None:
        super().__init__(name="eps-schedule", daemon=True)
        self.owner = owner
        self.tick_s = tick_s
        self._halt = threading.Event()

    def run(self) -> None:
        failing_since: float | None = None
        while not self._halt.is_set():
            try:
                self.owner.tick()
            except redis.RedisError as exc:
                if failing_since is None:  # once per outage, not once per tick
                    failing_since = time.monotonic()
                    log.warning(
                        "schedule tick failed (%s); retrying every %.0f s, said again when it passes",
                        type(exc).__name__,
                        self.tick_s,
                    )
            else:
                if failing_since is not None:
                    log.warning("schedule ticks again after %.0f s", time.monotonic() - failing_since)
                    failing_since = None
            self._halt.wait(self.tick_s)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop ticking and release ownership if held."""
        self._halt.set()
        self.join(timeout)
        try:
            self.owner.release()
        except redis.RedisError:
            log.warning("could not release the schedule lock; it expires by itself")
