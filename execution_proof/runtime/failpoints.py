"""Fault points of the log's integrator (docs/log.md, "Fault points"), after
etcd's gofail and TiKV's fail-rs: ``LOG_FAILPOINTS=STEP=ACTION[,STEP=ACTION...]`` in the
environment of ``python service.py worker`` (or of the embedded server) makes the
integrator act the first time it reaches STEP:

- ``stop``: the process sends itself SIGSTOP (a frozen VM, a GC pause: the test continues it
  with SIGCONT);
- ``kill``: SIGKILL to itself (a crash);
- ``sleep:MS``: it blocks for MS milliseconds (the integrator's thread does nothing
  meanwhile, its lease included: a pause it wakes up from by itself).

Each acts once per process, then never again. Unset, a step costs an attribute test: the
integrator holds no ``Failpoints`` at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from execution_proof.errors import Error

log = logging.getLogger("eps.log")

STEPS = (
    "created",
    "caught_half",
    "batch",
    "staged",
    "tiles_half",
    "tiles",
    "advanced",
    "unstaged",
    "acked_half",
    "synced",
    "signed",
    "published",
)
"""Every step, in the order a batch reaches them (``created``: once, when a store is created).

- ``created``: store creation, the identity written, no tree state yet;
- ``caught_half``: a catch-up (queues found behind the tree, before a batch is made): half of
  those queues in line with the tree again, their entries found in it off their queues;
- ``batch``: a batch's entries read from Redis (each queue with its synced size), nothing staged;
- ``staged``: the batch staged (the tree state names it), no tile written;
- ``tiles_half``: half its tiles and bundles written;
- ``tiles``: every tile and bundle durable, the tree not advanced;
- ``advanced``: the tree state advanced past the batch, its staged entries not yet removed;
- ``unstaged``: the staged entries removed, Redis not yet told;
- ``acked_half``: half the batch's queues' entries off them with their indices, each queue's
  synced size moved to the new tree;
- ``synced``: every queue of the batch so (and the log's size told to Redis before them);
- ``signed``: the checkpoint signed (and cosigned), not yet published;
- ``published``: the checkpoint published.
"""


LOCK_WAIT_S = 10.0
"""How long a ``stop`` waits for its process's store locks to be released before it stops
anyway (and says so)."""

_locks_held = 0
_locks_changed = threading.Condition()


@contextlib.contextmanager
def store_lock() -> Iterator[None]:
    """Around a store lock this process holds (``kv/logstore/files.py``): a ``stop`` waits
    until none is held, so that it models a pause between steps, not one inside the lock that
    blocks every other worker (docs/log.md, "Fencing")."""
    global _locks_held
    with _locks_changed:
        _locks_held += 1
    try:
        yield
    finally:
        with _locks_changed:
            _locks_held -= 1
            _locks_changed.notify_all()


def _reset_in_child() -> None:
    global _locks_held, _locks_changed
    _locks_held, _locks_changed = 0, threading.Condition()  # the parent's may be held by a thread that is not here


os.register_at_fork(after_in_child=_reset_in_child)


class FailpointsError(Error, ValueError):
    """``LOG_FAILPOINTS`` names a step or an action there is none of."""


@dataclass(frozen=True)
class Action:
    kind: str
    """``stop``, ``kill`` or ``sleep``."""
    ms: int = 0

    def __str__(self) -> str:
        return f"sleep:{self.ms}" if self.kind == "sleep" else self.kind


@dataclass
class Failpoints:
    actions: dict[str, Action]
    _done: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def parse(cls, text: str) -> Failpoints | None:
        """``STEP=ACTION[,...]``; None for an empty text. ``FailpointsError`` names what is
        wrong."""
        actions: dict[str, Action] = {}
        for part in (piece.strip() for piece in text.split(",")):
            if not part:
                continue
            step, equals, action = part.partition("=")
            step, action = step.strip(), action.strip()
            if not equals or step not in STEPS:
                raise FailpointsError(f"{part!r}: a fault point is STEP=ACTION, STEP one of {', '.join(STEPS)}")
            if step in actions:
                raise FailpointsError(f"{step} is named twice")
            actions[step] = _action(part, action)
        return cls(actions) if actions else None

    def __str__(self) -> str:
        return ",".join(f"{step}={action}" for step, action in self.actions.items())

    def reach(self, step: str) -> None:
        """Act as configured for ``step``, the first time it is reached."""
        action = self.actions.get(step)
        if action is None:
            return
        with self._lock:
            if step in self._done:
                return
            self._done.add(step)
        log.warning("LOG_FAILPOINTS %s=%s: reached (pid %d)", step, action, os.getpid())
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        if action.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action.kind == "stop":
            # To this thread, not the process: a process-directed SIGSTOP is taken by another
            # thread (the main one, say), and this one ran on until that one stopped the rest,
            # past the step and as far as into the store's lock (held, it blocks every other
            # worker for as long as this one sleeps). Sent to this thread, the stop is taken
            # before the call returns. (SIGKILL needs nothing: the kernel ends every thread as
            # it is sent.)
            # Not inside a store lock another of its tasks holds (a publication running
            # beside the sync): the condition's lock is kept while stopped, so no task of this
            # process takes a store lock between the wait and the stop.
            with _locks_changed:
                if not _locks_changed.wait_for(lambda: _locks_held == 0, LOCK_WAIT_S):
                    log.warning("LOG_FAILPOINTS %s=stop: a store lock still held after %.0f s", step, LOCK_WAIT_S)
                signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        else:
            time.sleep(action.ms / 1000)


def _action(part: str, action: str) -> Action:
    if action in ("stop", "kill"):
        return Action(action)
    kind, _, ms = action.partition(":")
    if kind == "sleep" and ms.isdigit() and len(ms) <= 9:
        return Action("sleep", int(ms))
    raise FailpointsError(f"{part!r}: the action is stop, kill or sleep:MS")
