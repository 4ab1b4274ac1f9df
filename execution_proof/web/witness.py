"""A C2SP tlog-witness: ``POST /add-checkpoint`` cosigns a log's checkpoint only if it is
consistent with the last one this witness cosigned for that log (docs/witness.md).

It runs apart from the service (``python service.py witness serve``): its own key, its own
state file, no access to the service's Redis. The state is one JSON file, ``{origin: {"size",
"root"}}``. Reading it, checking the request against it, writing the new checkpoint and
signing the cosignature are one critical section under an exclusive ``flock`` on
``<state>.lock`` (a descriptor of its own per request, so it excludes other requests of this
process as well as other processes), and the new state is on disk (temporary file, fsync,
rename, fsync of the directory) before the cosignature exists. So it never cosigns two
inconsistent checkpoints, also across restarts, processes and concurrent requests.

The critical section runs in a thread of its own, never on the event loop: the loop only
parses and checks signatures. The thread is a daemon: one still waiting for the lock (held by
another process) when the witness stops is abandoned, and the request is answered 503; one
that holds the lock is waited for (``WitnessState.wait_idle``), so no write is ever cut short.

Statuses, as tlog-witness amended by C2SP pull request 280 says: 404 unknown origin, 403 no
valid log signature, 400 a malformed body, an old size larger than the checkpoint's, or a
size above 2^63 - 1; 409 ``<size>\\n`` with ``Content-Type: text/x.tlog.size`` when ``old``
is not the size it last cosigned; 422 a consistency proof that does not verify, the same size
with another root, or a size-0 checkpoint whose root is not the empty tree's; 200 the
cosignature line. Also 413 for a body over 16 KiB and 503 while it shuts down.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import fcntl
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from socket import socket
from typing import Any, TypeVar, cast

import orjson
from sanic import Sanic
from sanic.log import logger
from sanic.request import Request
from sanic.response import HTTPResponse

from execution_proof.errors import Error
from execution_proof.runtime.files import write_atomically
from execution_proof.transparency import note, tlog
from execution_proof.transparency.cosignature import Cosigner

MAX_BODY = 16 * 1024
"""The request body limit (omniwitness's, 16 KiB): 63 proof lines and a checkpoint with a few
signatures take under 4 KiB."""
MAX_PROOF_LINES = 63
MAX_SIZE = (1 << 63) - 1
SHUTDOWN_GRACE_S = 3.0
"""How long a stopping witness lets requests that hold the lock finish their answer."""
TEXT = "text/plain; charset=utf-8"
SIZE_TYPE = "text/x.tlog.size"
TOO_LARGE = "a tree size is at most 2^63 - 1"
_OLD = re.compile(r"old (0|[1-9][0-9]{0,19})")
T = TypeVar("T")


class WitnessStateError(Error):
    """The state file cannot be read as a witness's state."""


@dataclass(frozen=True)
class Outcome:
    status: int
    body: str
    content_type: str = TEXT


SHUTTING_DOWN = Outcome(503, "the witness is shutting down\n")


class _Ticket:
    """One request's claim on the critical section: the loop abandons it when the witness stops
    before its thread got the lock; a thread that got the lock first keeps it to the end."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._state = "waiting"

    def hold(self) -> bool:
        with self._guard:
            if self._state == "abandoned":
                return False
            self._state = "holding"
            return True

    def abandon(self) -> bool:
        with self._guard:
            if self._state == "holding":
                return False
            self._state = "abandoned"
            return True


class WitnessState:
    """The last cosigned (size, root) of each log, durable, changed only under the lock.

    ``stall`` (tests only) is called inside the critical section after the checks and before
    the write, so a test can hold one request there while others race it."""

    def __init__(self, path: Path, stall: Callable[[], None] | None = None) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._stall = stall
        self._holding = 0
        self._idle = threading.Condition()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The exclusive ``flock``, on a descriptor of its own (so two threads of one process
        exclude each other too). Blocking; a signal handler that raises interrupts it."""
        with open(self.lock_path, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def prepare(self) -> None:
        """At start-up, under the lock: remove the temporary files of a writer that was killed
        (only a lock holder writes one, so any found now is an orphan), then check the state
        file reads (``WitnessStateError`` if not)."""
        with self._locked():
            for orphan in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                orphan.unlink(missing_ok=True)
            self.read()

    def read(self) -> dict[str, tuple[int, bytes]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            data = orjson.loads(raw)
            state = {}
            for origin, held in data.items():
                size, root = held["size"], base64.b64decode(held["root"], validate=True)
                if type(size) is not int or not 0 <= size <= MAX_SIZE or (size and len(root) != 32):
                    raise ValueError(f"{origin}: not a size and a 32-byte root")
                state[origin] = (size, root if size else tlog.EMPTY_ROOT)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise WitnessStateError(f"{self.path}: not a witness state file: {exc}") from exc
        return state

    def write(self, state: dict[str, tuple[int, bytes]]) -> None:
        """Atomically (``runtime.files.write_atomically``: a temporary file, fsync, rename,
        fsync of the directory; the temporary file removed on every failure)."""
        payload = orjson.dumps(
            {origin: {"size": size, "root": base64.b64encode(root).decode()} for origin, (size, root) in state.items()},
            option=orjson.OPT_SORT_KEYS,
        )
        write_atomically(self.path, payload, mode=0o600)

    def commit(
        self, ticket: _Ticket, old: int, checkpoint: note.Checkpoint, proof: list[bytes], sign: Callable[[], str]
    ) -> Outcome:
        """The critical section (blocking: run it in a thread): check ``old`` and the proof
        against the state, write the checkpoint unless it is the one held, sign."""
        with self._locked():
            if not ticket.hold():
                return SHUTTING_DOWN
            with self._idle:
                self._holding += 1
            try:
                return self._check_and_write(old, checkpoint, proof, sign)
            finally:
                with self._idle:
                    self._holding -= 1
                    self._idle.notify_all()

    def _check_and_write(
        self, old: int, checkpoint: note.Checkpoint, proof: list[bytes], sign: Callable[[], str]
    ) -> Outcome:
        state = self.read()
        size, root = state.get(checkpoint.origin, (0, tlog.EMPTY_ROOT))
        if old != size:
            return Outcome(409, f"{size}\n", SIZE_TYPE)
        if checkpoint.size == size and checkpoint.root != root:
            return Outcome(422, "the same size with another root\n")
        try:
            tlog.verify_consistency(size, root, checkpoint.size, checkpoint.root, proof)
        except tlog.ProofError as exc:
            return Outcome(422, f"the consistency proof does not verify: {exc}\n")
        if self._stall is not None:
            self._stall()
        if (checkpoint.size, checkpoint.root) != (size, root):  # a resend of the held checkpoint writes nothing
            state[checkpoint.origin] = (checkpoint.size, checkpoint.root)
            self.write(state)
        return Outcome(200, sign())

    def wait_idle(self, timeout: float) -> bool:
        """Block until no thread holds the lock (so none is writing); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._holding == 0, timeout)


def _in_daemon_thread(function: Callable[[], T]) -> asyncio.Future[T]:
    """``function`` run in a daemon thread, as a future of the running loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = function(), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request, which re-raises it
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody awaits it
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="witness-commit", daemon=True).start()
    return future


def witness_app(
    cosigner: Cosigner,
    logs: dict[str, note.Verifier],
    state: Path | WitnessState,
    name: str = "witness",
) -> Sanic[Any, Any]:
    app: Sanic[Any, Any] = Sanic(name)
    app.config.REQUEST_MAX_SIZE = MAX_BODY
    app.config.MOTD = False
    app.config.ACCESS_LOG = False
    witness_state = state if isinstance(state, WitnessState) else WitnessState(state)
    app.ctx.state = witness_state
    app.ctx.stopping = asyncio.Event()

    def text(outcome: Outcome) -> HTTPResponse:
        return HTTPResponse(outcome.body, status=outcome.status, content_type=outcome.content_type)

    @app.post("/add-checkpoint")
    async def add_checkpoint(request: Request) -> HTTPResponse:
        if len(request.body) > MAX_BODY:  # Sanic's HTTP server refuses it before; its ASGI mode does not
            return text(Outcome(413, f"the body is larger than {MAX_BODY} bytes\n"))
        try:
            old, proof, checkpoint_note = _parse_body(request.body)
            parsed = note.parse_note(checkpoint_note)
            checkpoint = note.parse_checkpoint(parsed.text)
            if checkpoint.size > MAX_SIZE:
                raise ValueError(TOO_LARGE)
        except (note.NoteError, ValueError) as exc:
            return text(Outcome(400, f"malformed request: {exc}\n"))
        log_key = logs.get(checkpoint.origin)
        if log_key is None:
            return text(Outcome(404, "unknown log origin\n"))
        try:
            note.verify_note(parsed, [log_key])
        except note.NoteError:
            return text(Outcome(403, "no valid signature by the log's key\n"))
        if old > checkpoint.size:
            return text(Outcome(400, "the old size is larger than the checkpoint's\n"))
        if checkpoint.size == 0 and checkpoint.root != tlog.EMPTY_ROOT:
            return text(Outcome(422, "a checkpoint of size 0 has the empty tree's root\n"))
        ticket = _Ticket()

        def sign() -> str:
            return cosigner.cosign(parsed.text, int(time.time()))

        committing = _in_daemon_thread(lambda: witness_state.commit(ticket, old, checkpoint, proof, sign))
        stopping = asyncio.ensure_future(app.ctx.stopping.wait())
        try:
            await asyncio.wait({committing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not committing.done() and ticket.abandon():
                return text(SHUTTING_DOWN)  # still waiting for the lock: it will never take it
            return text(await committing)
        except (OSError, WitnessStateError):
            logger.exception("the witness's state could not be read or written")
            return text(Outcome(500, "the witness could not read or write its state\n"))
        except asyncio.CancelledError:
            ticket.abandon()  # the answer cannot be sent: better not to write (if not begun)
            raise
        finally:
            stopping.cancel()

    return app


def _parse_body(body: bytes) -> tuple[int, list[bytes], str]:
    text = body.decode("utf-8")
    head, sep, checkpoint = text.partition("\n\n")
    if not sep:
        raise ValueError("the body is old size, proof lines, a blank line, then the checkpoint")
    lines = head.split("\n")
    match = _OLD.fullmatch(lines[0])
    if match is None:
        raise ValueError("the first line is 'old <size>'")
    old = int(match.group(1))
    if old > MAX_SIZE:
        raise ValueError(TOO_LARGE)
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise ValueError("more than 63 consistency proof lines")
    proof = []
    for line in lines[1:]:
        try:
            value = base64.b64decode(line, validate=True)
        except ValueError as exc:
            raise ValueError("a proof line is not base64") from exc
        if len(value) != 32:
            raise ValueError("a proof line is not a 32-byte hash")
        proof.append(value)
    return old, proof, checkpoint


def serve(app: Sanic[Any, Any], sock: socket, announce: Callable[[], None]) -> None:
    """Serve ``app`` on the bound ``sock`` until SIGTERM or SIGINT, then stop cleanly: no new
    connections, requests still waiting for the lock answered 503, the others given
    ``SHUTDOWN_GRACE_S`` to answer, and no write cut short. ``announce`` runs once it listens.

    Sanic's own ``run`` is not used: it ignores the signals for a moment during start-up, and
    a stop that lands while its start-up events run is consumed by them and the server then
    serves forever. Here the loop owns the signals from its first step."""
    asyncio.run(_serve(app, sock, announce))


async def _serve(app: Sanic[Any, Any], sock: socket, announce: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await app.create_server(sock=sock, access_log=False, asyncio_server_kwargs={"start_serving": False})
    listener = cast("asyncio.AbstractServer | None", server.server if server is not None else None)
    if server is None or listener is None:  # pragma: no cover - Sanic always returns it
        raise RuntimeError("Sanic did not create the server")
    await server.startup()  # type: ignore[no-untyped-call]
    await server.before_start()  # type: ignore[no-untyped-call]
    await listener.start_serving()
    await server.after_start()  # type: ignore[no-untyped-call]
    announce()
    await stop.wait()
    for signum in (signal.SIGTERM, signal.SIGINT):  # the first signal stops it; more must not cut that short
        loop.remove_signal_handler(signum)
        signal.signal(signum, signal.SIG_IGN)
    app.ctx.stopping.set()
    listener.close()
    await server.before_stop()  # type: ignore[no-untyped-call]
    deadline = loop.time() + SHUTDOWN_GRACE_S
    while True:
        for connection in list(server.connections):
            connection.close_if_idle()
        if not server.connections or loop.time() >= deadline:
            break
        await asyncio.sleep(0.02)
    for connection in list(server.connections):
        connection.abort()
    await server.after_stop()  # type: ignore[no-untyped-call]
    await asyncio.to_thread(app.ctx.state.wait_idle, 60.0)
