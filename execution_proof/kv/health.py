"""How durable and how reachable the store is: the start-up check, ``STORE_ACK`` and /health.

``durability_warnings`` is a pure function of the server's settings (CONFIG GET), so the
judgement is tested without a server; ``check_store_at_startup`` reads them (tolerating a
managed Redis where CONFIG is disabled) and checks that the chosen acknowledgement can work.
See ``docs/redis.md`` for the settings and why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from redis import exceptions as redis_errors

from execution_proof.kv.errors import UNAVAILABLE_ERRORS
from execution_proof.runtime.store_ack import StoreAck, StoreAckError

DURABILITY_SETTINGS = ("appendonly", "appendfsync", "maxmemory-policy", "maxmemory")
HEALTH_PING_TIMEOUT_S = 1.0


def durability_warnings(config: Mapping[str, str]) -> list[str]:
    """What in the server's settings could lose acknowledged receipts (empty: nothing).

    ``config`` maps CONFIG GET names to values; a missing name is not judged.
    """
    warnings: list[str] = []
    policy = config.get("maxmemory-policy")
    maxmemory = config.get("maxmemory")
    if policy is not None and policy != "noeviction" and maxmemory not in (None, "0"):
        warnings.append(
            f"Redis maxmemory-policy is {policy} with maxmemory {maxmemory}: when memory fills, "
            "Redis may EVICT receipts, chain tips and API keys. Set maxmemory-policy noeviction "
            "(writes then fail with 503 instead of losing data)."
        )
    appendonly = config.get("appendonly")
    if appendonly == "no":
        warnings.append(
            "Redis appendonly is no: a Redis crash loses every receipt written since the last "
            "snapshot (or all of them), and chain tips roll back. Set appendonly yes and "
            "appendfsync always."
        )
    elif appendonly == "yes" and config.get("appendfsync") not in (None, "always"):
        warnings.append(
            f"Redis appendfsync is {config.get('appendfsync')}: a crash can lose the last second "
            "or more of acknowledged receipts and roll a chain tip back. Set appendfsync always "
            "(or STORE_ACK=replicas:N with replicas) for zero loss."
        )
    return warnings


async def read_durability_config(client: Any) -> dict[str, str] | None:
    """The durability settings by CONFIG GET, or None when CONFIG is disabled or forbidden."""
    found: dict[str, str] = {}
    try:
        for name in DURABILITY_SETTINGS:
            reply = await client.config_get(name)
            for key, value in reply.items():
                found[_text(key)] = _text(value)
    except redis_errors.ResponseError:
        return None
    return found


async def check_store_at_startup(client: Any, ack: StoreAck) -> list[str]:
    """Warnings about the store's durability; raises ``StoreAckError`` when ``ack`` cannot work.

    An unreachable store is a warning, not a failure: the service answers 503 until it
    returns. CONFIG being disabled (managed Redis) is a warning that nothing was checked.
    """
    try:
        config = await read_durability_config(client)
        if ack.mode == "aof":
            await _check_waitaof(client)
        replicas = await _connected_replicas(client) if ack.mode == "replicas" else None
    except UNAVAILABLE_ERRORS:
        return ["the store at REDIS_URL is unreachable at start-up; requests answer 503 until it is back"]
    if config is None:
        warnings = [
            "could not read the Redis durability settings (CONFIG is disabled here): make sure "
            "the provider runs appendonly yes, appendfsync always and maxmemory-policy noeviction"
        ]
    else:
        warnings = durability_warnings(config)
    if replicas is not None and replicas < ack.replicas:
        warnings.append(
            f"STORE_ACK asks for {ack.replicas} replica(s) but Redis has {replicas} connected: "
            "creates answer 503 store_unavailable until enough replicas acknowledge"
        )
    return warnings


async def _check_waitaof(client: Any) -> None:
    try:
        await client.execute_command("WAITAOF", 0, 0, 1)
    except redis_errors.ResponseError as exc:
        message = str(exc).lower()
        if "unknown command" in message:
            raise StoreAckError(
                "STORE_ACK=aof needs WAITAOF (Redis 7.2 or later); this Redis does not have it. "
                "Use STORE_ACK=none with appendfsync always, or replicas:N."
            ) from exc
        raise StoreAckError(f"STORE_ACK=aof cannot work on this Redis: {exc}") from exc
    config = await read_durability_config(client)
    if config is not None and config.get("appendonly") != "yes":
        raise StoreAckError("STORE_ACK=aof needs appendonly yes on the Redis server")


async def _connected_replicas(client: Any) -> int | None:
    try:
        info = await client.info("replication")
    except redis_errors.ResponseError:
        return None
    return int(info.get("connected_slaves", 0))


async def store_reachable(store: Any) -> bool:
    """True when the store answers PING within ``HEALTH_PING_TIMEOUT_S`` (never raises)."""
    try:
        async with asyncio.timeout(HEALTH_PING_TIMEOUT_S):
            return bool(await store.client.ping())
    except Exception:  # noqa: BLE001 - any failure means "unreachable" to /health
        return False


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
