"""The store as a job sees it: the configured Redis, or the embedded server when inline.

Jobs never import the use cases: ``open_services`` (usecases/services.py), which builds every
process, hands this module the embedded service's in-process server (``use_embedded_server``);
the settings are the process's environment, as a worker's are."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import fakeredis

from execution_proof.kv.connect import open_store
from execution_proof.kv.store import Store
from execution_proof.runtime.settings import load_settings

T = TypeVar("T")
_embedded_server: fakeredis.FakeServer | None = None


def use_embedded_server(server: fakeredis.FakeServer | None) -> None:
    """Called by ``open_services`` in the embedded service, so inline jobs see its store."""
    global _embedded_server
    _embedded_server = server


def run_with_store(work: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``work(store)`` on a fresh event loop with a store of its own, then close it.

    Jobs are synchronous RQ functions; inline jobs run in a worker thread (see
    ``jobs.queue.enqueue``), where a new event loop is allowed.
    """
    settings = load_settings()

    async def run() -> T:
        store = open_store(settings.redis_url, embedded_server=_embedded_server, cluster=settings.redis_cluster)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())
