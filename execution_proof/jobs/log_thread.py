"""The log's integrator beside RQ's (blocking) worker (``python service.py worker``): its own
thread, event loop and stores."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from execution_proof.jobs.log_config import LogConfig, LogRefused
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store


class IntegratorThread:
    """The integrator beside RQ's (blocking) worker: its own thread, event loop and stores.
    ``refused`` holds the reason when the log store was refused (the worker then exits)."""

    def __init__(
        self, open_stores: Callable[[], tuple[Store, LogStore]], config: LogConfig, on_refused: Callable[[], None]
    ) -> None:
        self._open_stores = open_stores
        self.config = config
        self.refused: str | None = None
        self._on_refused = on_refused
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="log-integrator", daemon=True)

    def start(self) -> IntegratorThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        store, log_store = self._open_stores()
        self._ready.set()
        try:
            await Integrator(store.log_queue, log_store, self.config).run(self._stop)
        except LogRefused as exc:
            self.refused = str(exc)
            self._on_refused()
        finally:
            await store.close()
            await log_store.close()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the integrator and wait for its thread, at most ``timeout`` seconds: whether it
        ended. One paused in the middle of a batch (a fault point's sleep, a process stopped
        and continued) may not: its batch is then left as a crash would leave it, for the
        next integrator to finish. An integrator that ended by itself (a refused store) has
        closed its loop already: nothing to tell it."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the thread has ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        return not self._thread.is_alive()
