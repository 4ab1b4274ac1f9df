"""Collecting witness cosignatures for each new checkpoint (docs/log.md, "Witnesses").

Every witness of ``LOG_WITNESS_POLICY`` that has a URL gets the checkpoint at once, in
parallel, with a consistency proof from the size it last cosigned (remembered in Redis, so a
restarted integrator starts right). A 409 names the size the witness holds: the request is
sent again once from that size. 403, 404 and 422 are logged and counted (alert on them: the
witness does not accept our log, or saw another history). Whatever arrives within
``LOG_WITNESS_TIMEOUT_MS`` is published with the checkpoint; a witness that is down or slow
never stops the log, and verifiers apply the quorum.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import Any

import httpx

from kv.log_reader import LogDataMissing, LogReader
from receipts import cosignature, note, tlog
from receipts.policy import Policy, Witness
from runtime import metrics

log = logging.getLogger("eps.log.witnesses")
SIZE_TYPE = "text/x.tlog.size"


class WitnessClient:
    def __init__(self, store: Any, origin: str, policy: Policy, timeout_ms: int, reader: LogReader) -> None:
        self.store = store
        self.origin = origin
        self.witnesses = [w for w in policy.witnesses.values() if w.url]
        self.timeout_s = timeout_ms / 1000
        self.reader = reader
        self.sizes: dict[str, int] | None = None

    async def cosign(self, signed: str, checkpoint: note.Checkpoint) -> str:
        """``signed`` with the cosignature lines that arrived in time."""
        if not self.witnesses:
            return signed
        if self.sizes is None:
            self.sizes = await self.store.log_witness_sizes(self.origin)
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            tasks = {asyncio.create_task(self._one(client, w, signed, checkpoint)): w for w in self.witnesses}
            done, pending = await asyncio.wait(tasks, timeout=self.timeout_s)
            for task in pending:
                task.cancel()
                metrics.LOG_WITNESS_FAILURES.labels(tasks[task].name, "timeout").inc()
        lines = "".join(task.result() for task in done if not task.cancelled() and task.exception() is None)
        return signed + lines

    async def _one(self, client: httpx.AsyncClient, witness: Witness, signed: str, checkpoint: note.Checkpoint) -> str:
        assert self.sizes is not None
        old = self.sizes.get(witness.name, 0)
        for _ in range(2):
            if old > checkpoint.size:
                return self._failed(witness, "ahead", f"holds size {old}, beyond ours ({checkpoint.size})")
            try:
                proof = await self._proof(old, checkpoint.size)
            except LogDataMissing as exc:
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
                continue
            if response.status_code != 200:
                return self._failed(witness, str(response.status_code), response.text[:200])
            lines = self._valid_lines(witness, checkpoint, response.text)
            if not lines:
                return self._failed(witness, "bad_cosignature", "no valid cosignature by its key")
            self.sizes[witness.name] = checkpoint.size
            await self.store.log_witness_size(self.origin, witness.name, checkpoint.size)
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
