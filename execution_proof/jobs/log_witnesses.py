"""Collecting witness cosignatures for each new checkpoint (docs/log.md, "Witnesses").

Every witness of ``LOG_WITNESS_POLICY`` that has a URL gets the checkpoint at once, in
parallel, with a consistency proof from the size it last cosigned (remembered in the log
store, so a restarted integrator starts right), over one keep-alive HTTP client per witness
that lives as long as the integrator. A 409 names the size the witness holds: the request is
sent again once from that size.

The checkpoint is published as soon as the cosignatures in hand meet the policy's quorum, or
at ``LOG_WITNESS_TIMEOUT_MS`` with what has come: a witness that is down or slow never stops
the log, and verifiers apply the quorum. Requests still open then go on in the background
until that same deadline; a cosignature that arrives after publication is added by
publishing the same checkpoint again (body unchanged, one more signature line; the lines
always in the policy's order, so the same witnesses give the same bytes).

A witness that fails is not asked again until its backoff has passed (exponential from
``BACKOFF_BASE_S`` to ``BACKOFF_CAP_S``, full jitter), so a dead witness costs nothing per
checkpoint; a cosignature resets it. Its failures are logged once per kind when they start
and once when it cosigns again, never once per checkpoint (the counts are metrics). A reply
is read up to ``MAX_REPLY_BYTES``: a cosignature is a line.

Evidence of a fork: a witness that holds a larger tree than ours (409 naming a larger size)
or finds our checkpoint inconsistent with what it cosigned (422) has seen a history signed
with our key that is not ours. ``cosign`` reports it (an answer that comes after publication
is kept in ``evidence``), and the integrator halts.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

import httpx

from execution_proof.errors import Error
from execution_proof.kv.logstore import LogStore, LogStoreError
from execution_proof.runtime import metrics
from execution_proof.runtime.http import ReplyTooLarge, post_bounded
from execution_proof.transparency import cosignature, note, tlog
from execution_proof.transparency.policy import Policy, Witness
from execution_proof.transparency.tiles import TileMissing, TileReader

log = logging.getLogger("eps.log.witnesses")
SIZE_TYPE = "text/x.tlog.size"
MAX_REPLY_BYTES = 64 * 1024
"""A witness's reply is a size or a few cosignature lines: anything longer is a failure."""
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0


class Evidence(TypedDict):
    """What a witness answered that shows a fork: its name, the HTTP status, what it said and,
    for a 409, the size it holds. The log's halt record keeps it as it is."""

    witness: str
    status: int
    detail: str
    size: NotRequired[int]


@dataclass(frozen=True)
class Cosigned:
    text: str
    """The signed checkpoint with the cosignature lines that arrived in time."""
    evidence: Evidence | None = None
    """What a witness answered that shows a fork, if one did."""


class ForkEvidence(Error):
    def __init__(self, witness: str, status: int, detail: str, size: int | None = None) -> None:
        super().__init__(f"witness {witness} answered {status}: {detail}")
        self.record: Evidence = {"witness": witness, "status": status, "detail": detail}
        if size is not None:
            self.record["size"] = size


@dataclass
class _Health:
    """What the client knows of one witness between checkpoints."""

    failures: int = 0
    """Failed requests since its last cosignature."""
    retry_at: float = 0.0
    """Not asked before this (``clock``) time."""
    said: set[str] = field(default_factory=set)
    """The kinds of failure logged since its last cosignature."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a request to it is open: one at a time, so a witness never sees an older
    checkpoint after a newer one (its 409 would name a larger size than that older one's)."""


@dataclass
class _Round:
    """One checkpoint's collection."""

    signed: str
    checkpoint: note.Checkpoint
    deadline: float
    """The event loop's time when every request of this round is given up."""
    lines: dict[str, str] = field(default_factory=dict)

    def text(self, order: list[Witness]) -> str:
        return self.signed + "".join(self.lines.get(w.name, "") for w in order)


class WitnessClient:
    def __init__(
        self,
        log: LogStore,
        policy: Policy,
        timeout_ms: int,
        reader: TileReader,
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.log = log
        self.policy = policy
        self.witnesses = [w for w in policy.witnesses.values() if w.url]
        self.timeout_s = timeout_ms / 1000
        self.reader = reader
        self.clock = clock
        """The backoff's clock (tests pass one they move)."""
        self.jitter = jitter
        """A number in [0, 1): the share of the backoff ceiling a failed witness waits."""
        self.sizes: dict[str, int] | None = None
        self.health = {w.name: _Health() for w in self.witnesses}
        self.evidence: Evidence | None = None
        """Evidence of a fork that arrived after its checkpoint was published (the integrator halts)."""
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._latest: _Round | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- one checkpoint

    async def cosign(self, signed: str, checkpoint: note.Checkpoint) -> Cosigned:
        """``signed`` with the cosignature lines in hand once the quorum is met or the timeout
        has passed, and any evidence of a fork a witness gave. Requests still open go on in
        the background; what they bring is published again with this checkpoint."""
        if not self.witnesses:
            return Cosigned(signed)
        if self.evidence is not None:
            return Cosigned(signed, self.evidence)
        if self.sizes is None:
            self.sizes = await self.log.witness_sizes()
        before = dict(self.sizes)
        loop = asyncio.get_running_loop()
        current = _Round(signed, checkpoint, loop.time() + self.timeout_s)
        self._latest = current
        now = self.clock()
        asked = []
        for witness in self.witnesses:
            health = self.health[witness.name]
            if now < health.retry_at:
                metrics.LOG_WITNESS_SKIPPED.labels(witness.name).inc()
                continue
            asked.append(witness)
        pending = {asyncio.create_task(self._ask(witness, current)) for witness in asked}
        evidence = None
        while pending and not self.policy.satisfied(set(current.lines)):
            remaining = current.deadline - loop.time()
            if remaining <= 0:
                break
            done, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if isinstance(exc, ForkEvidence):
                    evidence = evidence or exc.record
            if evidence is not None:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                pending = set()
        if pending:
            later = asyncio.create_task(self._late(current, pending))
            self._background.add(later)
            later.add_done_callback(self._background.discard)
        if self.sizes != before:
            await self.log.save_witness_sizes(self.sizes)
        return Cosigned(current.text(self.witnesses), evidence)

    async def _late(self, current: _Round, pending: set[asyncio.Task[str]]) -> None:
        """The requests still open after publication, until the round's deadline: each
        cosignature that comes is published with the checkpoint again."""
        assert self.sizes is not None
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            added = False
            for task in done:
                exc = task.exception()
                if isinstance(exc, ForkEvidence):
                    self.evidence = self.evidence or exc.record
                elif exc is None and task.result():
                    added = True
            if not added:
                continue
            try:
                latest = current is self._latest and self.evidence is None
                if latest and await self.log.publish(current.text(self.witnesses).encode()):
                    metrics.LOG_CHECKPOINT_REPUBLISHED.inc()
                await self.log.save_witness_sizes(self.sizes)
            except (LogStoreError, OSError) as exc:
                log.warning("could not publish the checkpoint again with a late cosignature: %s", exc)
            except Exception:  # a background task: said here, or nobody would see it
                log.exception("publishing the checkpoint again with a late cosignature failed")

    async def settled(self) -> None:
        """Wait for the requests still open in the background (tests, and a clean stop)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        """Give up the requests in the background and close the clients (at shutdown)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    # -- one witness

    def _client(self, witness: Witness) -> httpx.AsyncClient:
        client = self._clients.get(witness.name)
        if client is None:
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(max_connections=2, max_keepalive_connections=1, keepalive_expiry=60.0),
                headers={"Accept-Encoding": "identity"},
                follow_redirects=False,
            )
            self._clients[witness.name] = client
        return client

    async def _ask(self, witness: Witness, current: _Round) -> str:
        """The witness's cosignature lines for this round ("" when it gave none, counted and
        logged as a failure); ``ForkEvidence``. Never longer than the round's deadline. A
        request to the witness still open (an earlier checkpoint's) is waited for first; a
        round overtaken meanwhile by a newer checkpoint, or a witness backed off meanwhile,
        is not sent (the newer one is)."""
        health = self.health[witness.name]
        sent = False
        try:
            async with asyncio.timeout_at(current.deadline), health.lock:
                if current is not self._latest or self.clock() < health.retry_at:
                    metrics.LOG_WITNESS_SKIPPED.labels(witness.name).inc()
                    return ""
                sent = True
                lines = await self._one(witness, current.signed, current.checkpoint)
        except TimeoutError:
            if not sent:  # its earlier request held it past this round's deadline: counted there
                metrics.LOG_WITNESS_SKIPPED.labels(witness.name).inc()
                return ""
            return self._failed(witness, "timeout", f"no answer within {self.timeout_s * 1000:.0f} ms")
        except ForkEvidence:
            raise
        except Exception as exc:  # noqa: BLE001 - said once per kind with the witness's name, never swallowed
            return self._failed(witness, "error", f"{type(exc).__name__}: {exc}", exc)
        if lines:
            current.lines[witness.name] = lines
            self._cosigned(witness)
        return lines

    async def _one(self, witness: Witness, signed: str, checkpoint: note.Checkpoint) -> str:
        """The witness's cosignature lines ("" when it gave none); ``ForkEvidence``."""
        assert self.sizes is not None
        old = self.sizes.get(witness.name, 0)
        client = self._client(witness)
        for _ in range(2):
            try:
                proof = await self._proof(old, checkpoint.size)
            except TileMissing as exc:
                return self._failed(witness, "no_proof", str(exc), backoff=False)
            body = f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + signed
            url = f"{(witness.url or '').rstrip('/')}/add-checkpoint"
            sent = time.perf_counter()
            try:
                response, raw = await post_bounded(client, url, MAX_REPLY_BYTES, content=body.encode())
            except httpx.TimeoutException as exc:
                metrics.LOG_WITNESS_REQUEST_SECONDS.labels(witness.name).observe(time.perf_counter() - sent)
                return self._failed(witness, "timeout", str(exc) or type(exc).__name__)
            except httpx.HTTPError as exc:
                metrics.LOG_WITNESS_REQUEST_SECONDS.labels(witness.name).observe(time.perf_counter() - sent)
                return self._failed(witness, "unreachable", str(exc) or type(exc).__name__)
            except ReplyTooLarge as exc:
                metrics.LOG_WITNESS_REQUEST_SECONDS.labels(witness.name).observe(time.perf_counter() - sent)
                return self._failed(witness, "too_large", str(exc))
            metrics.LOG_WITNESS_REQUEST_SECONDS.labels(witness.name).observe(time.perf_counter() - sent)
            text = raw.decode("utf-8", "replace")
            if response.status_code == 409 and response.headers.get("content-type", "").startswith(SIZE_TYPE):
                if not text.strip().isdigit():
                    return self._failed(witness, "409", "a 409 without a size")
                old = int(text.strip())
                if old > checkpoint.size:
                    self._failed(witness, "409", f"it holds a tree of size {old}, larger than ours ({checkpoint.size})")
                    raise ForkEvidence(witness.name, 409, f"it holds size {old}, ours is {checkpoint.size}", old)
                continue
            if response.status_code == 422:
                self._failed(witness, "422", text[:200])
                raise ForkEvidence(witness.name, 422, text[:200] or "inconsistent with what it cosigned")
            if response.status_code != 200:
                return self._failed(witness, str(response.status_code), text[:200])
            lines = self._valid_lines(witness, checkpoint, text)
            if not lines:
                return self._failed(witness, "bad_cosignature", "no valid cosignature by its key")
            self.sizes[witness.name] = checkpoint.size
            metrics.LOG_WITNESS_COSIGNED.labels(witness.name).inc()
            metrics.LOG_WITNESS_SIZE.labels(witness.name).set(checkpoint.size)
            return lines
        return self._failed(witness, "409", "the old size moved twice")

    async def _proof(self, old: int, size: int) -> list[bytes]:
        if not 0 < old < size:
            return []

        def proof(view: tlog.TileHashes) -> list[bytes]:
            return view.consistency_proof(old)

        return await self.reader.compute(size, proof)

    def _valid_lines(self, witness: Witness, checkpoint: note.Checkpoint, text: str) -> str:
        keep = []
        for line in text.splitlines():
            try:
                parsed = note.parse_note(checkpoint.text() + "\n" + line + "\n")
            except note.NoteError:
                continue
            if cosignature.cosignatures(parsed, [witness.key]):
                keep.append(line + "\n")
        return "".join(keep)

    # -- failures, backoff and what is said about them

    def _failed(
        self, witness: Witness, kind: str, detail: str, exc: BaseException | None = None, backoff: bool = True
    ) -> str:
        """Count the failure; back the witness off; say it once per kind until it recovers."""
        metrics.LOG_WITNESS_FAILURES.labels(witness.name, kind).inc()
        health = self.health[witness.name]
        if backoff:
            health.failures += 1
            ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(health.failures - 1, 16))
            health.retry_at = self.clock() + self.jitter() * ceiling
        if kind not in health.said:
            health.said.add(kind)
            log.warning(
                "witness %s did not cosign (%s): %s; it is asked again after a backoff of up to %g s, and this is "
                "not logged again until it cosigns",
                witness.name,
                kind,
                detail,
                BACKOFF_CAP_S,
                exc_info=exc,
            )
        return ""

    def _cosigned(self, witness: Witness) -> None:
        health = self.health[witness.name]
        if health.said:
            log.warning(
                "witness %s cosigns again (after %d failed requests: %s)",
                witness.name,
                health.failures,
                ", ".join(sorted(health.said)),
            )
        health.failures, health.retry_at, health.said = 0, 0.0, set()
