"""How an operator verb reaches the store at ``REDIS_URL`` (through ``open_services``, as every
process does), and the one wording of its errors.

Exit status 2, with a one-line error, when there is no ``REDIS_URL`` (the embedded store
lives inside the running server), when the URL is not a Redis URL (never echoed: it may hold
a password), or when the store is unreachable.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.runtime.settings import ConfigError, Settings

if TYPE_CHECKING:
    from execution_proof.kv.store import Store

NOT_A_REDIS_URL = "error: REDIS_URL is not a Redis URL (redis://, rediss:// or unix://)"
UNREACHABLE = "error: the store at REDIS_URL is unreachable (is Redis running?)"


def run_on_store(settings: Settings, embedded_error: str, action: Callable[[Store], Awaitable[int]]) -> int:
    """``action(store)`` on the configured store, closed after; its exit status, or 2 as above.

    ``embedded_error`` is the verb's own explanation of why it needs ``REDIS_URL``.
    """
    if settings.embedded:
        print(embedded_error, file=sys.stderr)
        return 2
    from execution_proof.usecases.services import open_services

    async def run() -> int:
        try:
            services = open_services(settings)
        except ConfigError as exc:  # a log key without LOG_STORE
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ValueError:
            print(NOT_A_REDIS_URL, file=sys.stderr)
            return 2
        try:
            return await action(services.store)
        finally:
            await services.close()

    try:
        return asyncio.run(run())
    except StoreUnavailable:
        print(UNREACHABLE, file=sys.stderr)
        return 2
