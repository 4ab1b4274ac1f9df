"""Collecting witness cosignatures for each new checkpoint (docs/log.md, "Witnesses").

Every witness of ``LOG_WITNESS_POLICY`` that has a URL gets the checkpoint at once, in
parallel, with a consistency proof from the size it last cosigned (remembered in the log
store, so a restarted integrator starts right). A 409 names the size the witness holds: the
request is sent again once from that size. Whatever arrives within ``LOG_WITNESS_TIMEOUT_MS``
is published with the checkpoint; a witness that is down or slow never stops the log, and
verifiers apply the quorum.

Evidence of a fork: a witness that holds a larger tree than ours (409 naming a larger size)
or finds our checkpoint inconsistent with what it cosigned (422) has seen a history signed
with our key that is not ours. ``cosign`` reports it, and the integrator halts.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from kv.logstore import LogStore
from receipts import cosignature, note, tlog
from receipts.policy import Policy, Witness
from receipts.tiles import TileMissing, TileReader
from runtime import metrics

log = logging.getLogger("eps.log.witnesses")
SIZE_TYPE = "text/x.tlog.size"


@dataclass(frozen=True)
class Cosigned:
    text: str
    """The signed checkpoint with the cosignature lines that arrived in time."""
    evidence: dict[str, Any] | None = None
    """What a witness answered that shows a fork (its name, the status, what it holds)."""


class ForkEvidence(Exception):
    def __init__(self, witness: str, status: int, detail: str, size: int | None = None) -> None:
        super().__init__(f"witness {witness} answered {status}: {detail}")
        self.record: dict[str, Any] = {"witness": witness, "status": status, "detail": detail}
        if size is not None:
            self.record["size"] = size


class WitnessClient:
    def __init__(self, log: LogStore, policy: Policy, timeout_ms: int, reader: TileReader) -> None:
        self.log = log
        self.witnesses = [w for w in policy.witnesses.values() if w.url]
        self.timeout_s = timeout_ms / 1000
        self.reader = reader
        self.sizes: dict[str, int] | None = None

    async def cosign(self, signed: str, checkpoint: note.Checkpoint) -> Cosigned:
        """``signed`` with the cosignature lines that arrived in time, and any evidence of a
        fork a witness gave."""
        if not self.witnesses:
            return Cosigned(signed)
        if self.sizes is None:
            self.sizes = await self.log.witness_sizes()
        before = dict(self.sizes)
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            tasks = {asyncio.create_task(self._one(client, w, signed, checkpoint)): w for w in self.witnesses}
            done, pending = await asyncio.wait(tasks, timeout=self.timeout_s)
            for task in pending:
                task.cancel()
                metrics.LOG_WITNESS_FAILURES.labels(tasks[task].name, "timeout").inc()
        lines = ""
        evidence = None
        for task in tasks:  # in the policy's order: the same witnesses give the same bytes
            if task not in done or task.cancelled():
                continue
            exc = task.exception()
            if isinstance(exc, ForkEvidence):
                evidence = evidence or exc.record
            elif exc is None:
                lines += task.result()
        if self.sizes != before:
            await self.log.save_witness_sizes(self.sizes)
        return Cosigned(signed + lines, evidence)

    async def _one(self, client: httpx.AsyncClient, witness: Witness, signed: str, checkpoint: note.Checkpoint) -> str:
        """The witness's cosignature lines ("" when it gave none); ``ForkEvidence``."""
        assert self.sizes is not None
        old = self.sizes.get(witness.name, 0)
        for _ in range(2):
            try:
                proof = await self._proof(old, checkpoint.size)
            except TileMissing as exc:
                return self._failed(witness, "no_proof", str(exc))
            body = f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + signed
            sent = time.perf_counter()
            try:
                response = await client.post(f"{(witness.url or '').rstrip('/')}/add-checkpoint", content=body.encode())
            except httpx.HTTPError as exc:
                metrics.LOG_WITNESS_REQUEST_SECONDS.labels(witness.name).observe(time.perf_counter() - sent)
                return self._failed(witness, "unreachable", str(exc))
            metrics.LOG_WITNESS_REQUEST_SECONDS.labels(witness.name).observe(time.perf_counter() - sent)
            if response.status_code == 409 and response.headers.get("content-type", "").startswith(SIZE_TYPE):
                text = response.text.strip()
                if not text.isdigit():
                    return self._failed(witness, "409", "a 409 without a size")
                old = int(text)
                if old > checkpoint.size:
                    self._failed(witness, "409", f"it holds a tree of size {old}, larger than ours ({checkpoint.size})")
                    raise ForkEvidence(witness.name, 409, f"it holds size {old}, ours is {checkpoint.size}", old)
                continue
            if response.status_code == 422:
                self._failed(witness, "422", response.text[:200])
                raise ForkEvidence(witness.name, 422, response.text[:200] or "inconsistent with what it cosigned")
            if response.status_code != 200:
                return self._failed(witness, str(response.status_code), response.text[:200])
            lines = self._valid_lines(witness, checkpoint, response.text)
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

    def _failed(self, witness: Witness, kind: str, detail: str) -> str:
        metrics.LOG_WITNESS_FAILURES.labels(witness.name, kind).inc()
        log.warning("witness %s did not cosign (%s): %s", witness.name, kind, detail)
        return ""
