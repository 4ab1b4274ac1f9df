"""The log's configuration and the checks before anything touches its store (docs/log.md):
``LogConfig`` from the service's settings, and ``prepare_log``, which the server runs at its
start and every worker before its first pass."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from execution_proof.jobs.log_timestamps import TsaConfig
from execution_proof.kv.logstore import LogStore, LogStoreError
from execution_proof.kv.logstore.log import Identity, checkpoint_size
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.runtime.failpoints import Failpoints
from execution_proof.runtime.settings import DEFAULT_LOG_STALL_S, Settings
from execution_proof.transparency import note, tlog
from execution_proof.transparency.errors import LogError
from execution_proof.transparency.policy import Policy

log = logging.getLogger("eps.log")

INTERVAL_S = 0.2
"""Waiting entries are integrated this long after the last batch ended, however few. It
bounds a receipt's wait for a checkpoint: below ``TRIGGER`` entries per interval (2,560 a
second) every batch is due to it. Its price: while entries keep arriving, up to five batches a
second (each writes new partial tiles, publishes a checkpoint and asks every witness). Counted
from a batch's start instead, the integrator made more, smaller batches under load: p99 to a
published checkpoint 0.38 s instead of 0.48 s, but 34% more of its CPU per create (0.095 ms
instead of 0.071: log on / off 0.88 instead of 0.90, bench/RESULTS.md)."""
TRIGGER = 512
"""Or as soon as this many wait. Tessera batches at 256 or 250 ms; here, at 256 the integrator
made more, smaller batches at the service's capacity (about 2,000 creates a second on two
cores), and a batch costs about 3.4 ms of CPU besides 11 us per entry, taken from the web
workers beside it."""
MAX_BATCH = 4096
LEASE_MS = 5_000


class LogRefused(LogError):
    """The log store and the configuration (or Redis) disagree about which log this is, or
    the store's data does not hash to its own tree, is behind its own published checkpoint,
    or holds another history: the integrator does not touch the log. A refusal of this
    log's own store is recorded in ``.state/halt`` (``refuse``); one of a store that is not
    this log's (another identity, an empty store) is not written there."""


@dataclass(frozen=True)
class LogConfig:
    origin: str
    signer: note.Signer
    interval_s: float = INTERVAL_S
    trigger: int = TRIGGER
    max_batch: int = MAX_BATCH
    lease_ms: int = LEASE_MS
    policy: Policy | None = None
    """``LOG_WITNESS_POLICY``: the witnesses each checkpoint is sent to (jobs/log_witnesses.py)."""
    witness_timeout_ms: int = 1000
    tsa: TsaConfig | None = None
    """``LOG_TSA_URLS`` and friends: RFC 3161 time-stamps over checkpoints (jobs/log_timestamps.py)."""
    failpoints: Failpoints | None = None
    """``LOG_FAILPOINTS``: the integrator's fault points (runtime/failpoints.py), tests and drills only."""
    stall_s: float = DEFAULT_LOG_STALL_S
    """``LOG_STALL_S``: a standby whose Redis holds entries older than this while another
    deployment holds the lease says so (jobs/log_integrator.py)."""

    @property
    def identity(self) -> Identity:
        return Identity(self.origin, self.signer.verifier.encode())


def log_config(settings: Settings) -> LogConfig:
    """The integrator's configuration from the service's settings (``LOG_*``)."""
    assert settings.log_signer is not None
    tsa = None
    if settings.log_tsa_urls:
        tsa = TsaConfig(settings.log_tsa_urls, settings.log_tsa_interval_s, settings.log_tsa_roots)
    return LogConfig(
        settings.log_origin,
        settings.log_signer,
        policy=settings.log_policy,
        witness_timeout_ms=settings.log_witness_timeout_ms,
        tsa=tsa,
        failpoints=settings.log_failpoints,
        stall_s=settings.log_stall_s,
    )


async def refuse(log_store: LogStore, reason: str) -> LogRefused:
    """Record the refusal of this log's own store in ``.state/halt`` (web processes show it as
    ``halted``, other integrators wait; ``log resume`` lifts it) and return the error to
    raise. An unreachable store records nothing: the refusal is raised all the same."""
    try:
        await log_store.halt(f"the log store was refused: {reason}", {"kind": "refused", "detail": reason})
    except LogStoreError as exc:
        log.warning("could not record the refusal in %s: %s", log_store.url, exc)
    return LogRefused(reason)


async def prepare_log(
    store: LogQueueStore, log_store: LogStore, origin: str, signer: note.Signer, failpoints: Failpoints | None = None
) -> Identity:
    """Check the log store before anything uses it (the server at its start, every worker
    before its first pass): the store's identity checked, the store created if it is new, or
    its creation finished if a crash cut it short (an identity, nothing else); temporary
    files a crashed writer left in this log's store are removed. ``LogRefused`` when the store holds another log,
    holds files but no identity, is empty while Redis knows this log (a lost or mistyped
    ``LOG_STORE``), or holds this log's files but no tree state."""
    mine = Identity(origin, signer.verifier.encode())
    identity = await log_store.identity()
    created = False
    if identity is None:
        if not await log_store.is_empty():
            raise LogRefused(
                f"the log store {log_store.url} holds log files but no identity (.state/identity): "
                "it is not a store this service created; point LOG_STORE at the log's own store"
            )
        if await store.log_has_trace(mine):
            raise LogRefused(
                f"the log store {log_store.url} is empty, but Redis holds entries of the log {origin}: "
                "LOG_STORE is lost or mistyped. Point it at the log's store (or restore the store, or copy it "
                "with `log export`); an empty store is never made the start of a new log over an old one's queue"
            )
        created = await log_store.create_identity(mine)
        if created and failpoints is not None:
            failpoints.reach("created")
        identity = await log_store.identity()
    if identity != mine:
        found = identity or Identity("?", "?")
        raise LogRefused(
            f"the log store {log_store.url} holds the log {found.origin} with verifier key {found.vkey}; this "
            f"process is configured for {mine.origin} with verifier key {mine.vkey} (LOG_ORIGIN, LOG_SIGNING_KEY)"
        )
    removed = await log_store.tidy()
    if removed:
        log.warning("removed %d temporary files a stopped writer left in %s", removed, log_store.url)
    if await log_store.tree() is None:
        # Created up to its identity (a crash cut the creation short), or the tree state lost.
        published = await log_store.checkpoint()
        if await log_store.holds_tiles() or (published is not None and _size_or_none(published) not in (0, None)):
            raise await refuse(
                log_store,
                f"the log store {log_store.url} holds the log's files but no tree state (.state/tree): it lost "
                "data. Restore the store (or `log export` a copy into a new one)",
            )
        empty = note.sign_note(note.Checkpoint(origin, 0, tlog.EMPTY_ROOT).text(), signer)
        await log_store.start_tree(empty.encode())
        if created:
            log.warning("created a new transparency log %s in %s (size 0)", origin, log_store.url)
        else:
            log.warning(
                "finished creating the transparency log %s in %s (size 0): it was cut short", origin, log_store.url
            )
        await store.log_tell_size(mine, 0)  # this Redis's trace of the log
    return identity


def _size_or_none(checkpoint: bytes) -> int | None:
    try:
        return checkpoint_size(checkpoint)
    except note.NoteError:
        return None
