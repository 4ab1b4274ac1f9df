"""The log's configuration and the checks before anything touches its store (docs/log.md):
``LogConfig`` from the service's settings, and ``prepare_log``, which the server runs at its
start and every worker before its first pass."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from execution_proof.jobs.log_timestamps import TsaConfig
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.log import Identity
from execution_proof.kv.store import Store
from execution_proof.receipts import note, tlog
from execution_proof.receipts.errors import LogError
from execution_proof.receipts.policy import Policy
from execution_proof.runtime.settings import Settings

log = logging.getLogger("eps.log")

INTERVAL_S = 0.2
"""Waiting entries are integrated this long after the last batch, however few. It bounds a
receipt's wait for a checkpoint: below ``TRIGGER`` entries per interval (2,560 a second) every
batch is due to it. Its price: while entries keep arriving, up to five batches a second (each
rewrites the partial tiles, publishes a checkpoint and asks every witness)."""
TRIGGER = 512
"""Or as soon as this many wait. Tessera batches at 256 or 250 ms; here, at 256 the integrator
made more, smaller batches at the service's capacity (about 2,000 creates a second on two
cores), and a batch costs about 3.4 ms of CPU besides 11 us per entry, taken from the web
workers beside it."""
MAX_BATCH = 4096
LEASE_MS = 5_000


class LogRefused(LogError):
    """The log store and the configuration (or Redis) disagree about which log this is, or
    the store's data does not hash to its own tree: the integrator does not touch the log."""


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
    crash_at: str | None = None
    """``LOG_TEST_CRASH_AT``, for fault-injection tests only: kill -9 this process at that point."""


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
        crash_at=settings.log_test_crash_at,
    )


async def prepare_log(store: Store, log_store: LogStore, origin: str, signer: note.Signer) -> Identity:
    """Check the log store before anything uses it (the server at its start, every worker
    before its first pass): the store's identity, the store created if it is new.
    ``LogRefused`` when the store holds another log, holds files but no identity, or is
    empty while Redis knows this log (a lost or mistyped ``LOG_STORE``)."""
    identity = await log_store.identity()
    mine = Identity(origin, signer.verifier.encode())
    if identity is None:
        if not await log_store.is_empty():
            raise LogRefused(
                f"the log store {log_store.url} holds log files but no identity (.state/identity): "
                "it is not a store this service created; point LOG_STORE at the log's own store"
            )
        if await store.log_has_trace(origin):
            raise LogRefused(
                f"the log store {log_store.url} is empty, but Redis holds entries of the log {origin}: "
                "LOG_STORE is lost or mistyped. Point it at the log's store (or restore the store, or copy it "
                "with `log export`); an empty store is never made the start of a new log over an old one's queue"
            )
        empty = note.sign_note(note.Checkpoint(origin, 0, tlog.EMPTY_ROOT).text(), signer)
        if await log_store.create_log(mine, empty.encode()):
            log.warning("created a new transparency log %s in %s (size 0)", origin, log_store.url)
        await store.log_mark_synced(origin, None, 0)  # this Redis's trace of the log
        identity = await log_store.identity()
    if identity != mine:
        found = identity or Identity("?", "?")
        raise LogRefused(
            f"the log store {log_store.url} holds the log {found.origin} with verifier key {found.vkey}; this "
            f"process is configured for {mine.origin} with verifier key {mine.vkey} (LOG_ORIGIN, LOG_SIGNING_KEY)"
        )
    return identity
