"""Outside time evidence for the log: RFC 3161 time-stamps over checkpoints (docs/log.md,
"Time evidence").

At most every ``LOG_TSA_INTERVAL_S``, when the newest published checkpoint is larger than
the last one stamped, every TSA of ``LOG_TSA_URLS`` is asked (in parallel) for a time-stamp
over the checkpoint's text. Each answer is checked before it is kept (transparency/timestamps.py:
granted, over that text, with the request's nonce, DER or BER, signed under a certificate for
time-stamping; with ``LOG_TSA_ROOTS`` also the chain). What passes is kept with
the signed checkpoint in the log store (``.state/timestamps/``, for as long as the log), and
served at
``/v1/log/checkpoints/{size}/timestamps`` and in bundles. A TSA that is down or answers
badly is logged and counted (``eps_log_tsa_failures``) and never holds up the log.

Which process stamps: any integrator's (every worker runs one; the embedded server too),
whoever first claims the interval (``SET NX PX`` in Redis), so several workers make one
request per interval, not one each.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from dataclasses import dataclass

import cryptography.x509
import httpx
import orjson

from execution_proof.kv.keys import LogIdentity
from execution_proof.kv.logstore import LogStore, LogStoreError
from execution_proof.kv.store_log import LogQueueStore
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.runtime import metrics
from execution_proof.runtime.http import ReplyTooLarge, post_bounded
from execution_proof.runtime.outage import Outage
from execution_proof.transparency import note, timestamps

log = logging.getLogger("eps.log.timestamps")

POLL_S = 1.0
TSA_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TsaConfig:
    urls: tuple[str, ...]
    interval_s: float = 60.0
    roots: tuple[cryptography.x509.Certificate, ...] = ()
    """``LOG_TSA_ROOTS``: when set, a response must also verify against these."""
    timeout_s: float = TSA_TIMEOUT_S


class Stamper:
    def __init__(self, store: LogQueueStore, log_store: LogStore, identity: LogIdentity, config: TsaConfig) -> None:
        self.store = store
        self.log = log_store
        self.identity = identity
        self.config = config
        self.token = secrets.token_hex(16)
        self.stamped = -1
        """The newest size known to be stamped (-1: not read yet)."""
        self._outage = Outage(log, "time-stamper")

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.step()
                self._outage.passed()
            except (StoreUnavailable, LogStoreError, OSError) as exc:
                self._outage.failed(exc)
            except Exception as exc:  # noqa: BLE001 - a long-running loop: say it once, retry next pass
                self._outage.failed(exc, trace=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(POLL_S, self.config.interval_s))

    async def step(self) -> int | None:
        """Stamp the newest checkpoint if it is due; the size stamped, else None."""
        raw = await self.log.checkpoint()
        if not raw:
            return None
        try:
            signed = raw.decode()
            parsed = note.parse_note(signed)
            checkpoint = note.parse_checkpoint(parsed.text)
        except (UnicodeDecodeError, note.NoteError):
            return None  # unreadable: the integrator publishes it again from the tree state
        if checkpoint.size <= self.stamped:
            return None
        self.stamped = await self.log.last_stamped()
        if checkpoint.size <= self.stamped:
            return None
        if not await self.store.log_stamp_claim(self.identity, self.token, int(self.config.interval_s * 1000)):
            return None  # stamped less than an interval ago (here or by another worker)
        request = timestamps.new_request(parsed.text)
        async with httpx.AsyncClient(
            timeout=self.config.timeout_s, headers={"Accept-Encoding": "identity"}, follow_redirects=False
        ) as client:
            answers = await asyncio.gather(*(self._ask(client, url, request) for url in self.config.urls))
        kept = [
            {"tsa": url, "response_base64": base64.b64encode(der).decode()}
            for url, der in zip(self.config.urls, answers, strict=True)
            if der is not None
        ]
        if not kept:
            return None
        record = orjson.dumps({"checkpoint": signed, "timestamps": kept})
        await self.log.save_stamp(checkpoint.size, record)
        self.stamped = checkpoint.size
        metrics.LOG_STAMPED_SIZE.set(checkpoint.size)
        return checkpoint.size

    async def _ask(self, client: httpx.AsyncClient, url: str, request: timestamps.StampRequest) -> bytes | None:
        """The TSA's DER response if it passes the checks, else None (logged and counted)."""
        try:
            response, der = await post_bounded(
                client,
                url,
                timestamps.MAX_RESPONSE_BYTES,
                content=request.der,
                headers={"Content-Type": timestamps.QUERY_TYPE},
            )
        except httpx.HTTPError as exc:
            self._failed(url, "unreachable", str(exc) or type(exc).__name__)
            return None
        except ReplyTooLarge as exc:
            self._failed(url, "too_large", str(exc))
            return None
        if response.status_code != 200:
            self._failed(url, f"http_{response.status_code}", der[:200].decode("utf-8", "replace"))
            return None
        try:
            stamp = timestamps.check_response(der, request, list(self.config.roots) or None)
        except timestamps.StampError as exc:
            self._failed(url, "refused", str(exc))
            return None
        metrics.LOG_TIMESTAMPS.labels(url).inc()
        log.info("time-stamp by %s (%s) at %s", url, stamp.tsa_name, stamp.gen_time.isoformat())
        return der

    def _failed(self, url: str, kind: str, detail: str) -> None:
        metrics.LOG_TSA_FAILURES.labels(url, kind).inc()
        log.warning("time-stamp authority %s gave no usable time-stamp (%s): %s", url, kind, detail)
