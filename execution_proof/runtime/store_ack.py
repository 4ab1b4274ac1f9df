"""``STORE_ACK``: what a create waits for after its script wrote the receipt (docs/redis.md).

Parsed with the rest of the settings (``runtime.settings``); the store applies it
(``kv.store``) and checks at start-up that the server can give it (``kv.health``).
"""

from __future__ import annotations

from dataclasses import dataclass

from execution_proof.errors import Error

ACK_DEFAULT_TIMEOUT_MS = 1000
ACK_MAX_TIMEOUT_MS = 4000
"""Below the 5 s command timeout (kv/connect.py), so a WAIT never looks like a dead server."""


class StoreAckError(Error, ValueError):
    """``STORE_ACK`` is malformed, or the server cannot give the acknowledgement it asks for."""


@dataclass(frozen=True)
class StoreAck:
    """What a create waits for after its script wrote the receipt.

    ``none``: the write itself (Redis's own persistence settings decide what a crash loses).
    ``replicas``: ``WAIT replicas timeout_ms``, at least ``replicas`` replicas hold the write.
    ``aof``: ``WAITAOF 1 0 timeout_ms`` (Redis 7.2+), the write is fsynced to the local AOF.
    """

    mode: str = "none"
    replicas: int = 0
    timeout_ms: int = ACK_DEFAULT_TIMEOUT_MS

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    def describe(self) -> str:
        if self.mode == "replicas":
            return f"{self.replicas} replica(s) within {self.timeout_ms} ms"
        if self.mode == "aof":
            return f"the local AOF fsync within {self.timeout_ms} ms"
        return "none"


NO_ACK = StoreAck()


def parse_store_ack(raw: str | None) -> StoreAck:
    """``none`` (default) | ``replicas:N[:TIMEOUT_MS]`` | ``aof[:TIMEOUT_MS]``."""
    text = (raw or "").strip().lower()
    if text in ("", "none"):
        return NO_ACK
    parts = text.split(":")
    usage = "STORE_ACK must be none, replicas:N[:TIMEOUT_MS] or aof[:TIMEOUT_MS]"
    if parts[0] == "replicas" and len(parts) in (2, 3):
        if not parts[1].isdigit() or int(parts[1]) < 1:
            raise StoreAckError(usage + " (N is a whole number of replicas, at least 1)")
        return StoreAck("replicas", int(parts[1]), _timeout(parts[2] if len(parts) == 3 else None, usage))
    if parts[0] == "aof" and len(parts) in (1, 2):
        return StoreAck("aof", 0, _timeout(parts[1] if len(parts) == 2 else None, usage))
    raise StoreAckError(usage)


def _timeout(raw: str | None, usage: str) -> int:
    if raw is None:
        return ACK_DEFAULT_TIMEOUT_MS
    if not raw.isdigit() or not 1 <= int(raw) <= ACK_MAX_TIMEOUT_MS:
        raise StoreAckError(f"{usage} (TIMEOUT_MS is 1-{ACK_MAX_TIMEOUT_MS} milliseconds)")
    return int(raw)
