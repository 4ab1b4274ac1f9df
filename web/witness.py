"""A C2SP tlog-witness: ``POST /add-checkpoint`` cosigns a log's checkpoint only if it is
consistent with the last one this witness cosigned for that log (docs/witness.md).

It runs apart from the service (``python service.py witness serve``): its own key, its own
state file, no access to the service's Redis. The state is one JSON file, ``{origin: {"size",
"root"}}``; the check of the old size and the write of the new checkpoint happen under one
lock (an asyncio lock in the process and an exclusive ``flock`` on ``<state>.lock`` across
processes), and the new state is on disk (temporary file, fsync, rename, fsync of the
directory) before the cosignature leaves. So it never cosigns two inconsistent checkpoints,
also across restarts and concurrent requests.

Statuses, as tlog-witness says: 404 unknown origin, 403 no valid log signature, 400 a
malformed body or an old size larger than the checkpoint's, 409 ``<size>\\n`` with
``Content-Type: text/x.tlog.size`` when ``old`` is not the size it last cosigned, 422 a
consistency proof that does not verify or the same size with another root (the contract's
choice: C2SP says 409 there, but no size the log could resend from would help), 200 the
cosignature.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from sanic import Sanic
from sanic.request import Request
from sanic.response import HTTPResponse

from receipts import note, tlog
from receipts.cosignature import Cosigner

MAX_BODY = 64 * 1024
MAX_PROOF_LINES = 63
_OLD = re.compile(r"old (0|[1-9][0-9]{0,19})")


class WitnessState:
    """The last cosigned (size, root) of each log, durable, updated under an exclusive lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._lock = asyncio.Lock()

    def read(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        return data

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        with open(self.lock_path, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def write(self, data: dict[str, Any]) -> None:
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(temporary, "wb") as handle:
            handle.write(orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def witness_app(
    cosigner: Cosigner, logs: dict[str, note.Verifier], state_path: Path, name: str = "witness"
) -> Sanic[Any, Any]:
    app: Sanic[Any, Any] = Sanic(name)
    app.config.REQUEST_MAX_SIZE = MAX_BODY
    app.config.MOTD = False
    app.config.ACCESS_LOG = False
    state = WitnessState(state_path)

    def text(body: str, status: int, content_type: str = "text/plain; charset=utf-8") -> HTTPResponse:
        return HTTPResponse(body, status=status, content_type=content_type)

    @app.post("/add-checkpoint")
    async def add_checkpoint(request: Request) -> HTTPResponse:
        try:
            old, proof, checkpoint_note = _parse_body(request.body)
            parsed = note.parse_note(checkpoint_note)
            checkpoint = note.parse_checkpoint(parsed.text)
        except (note.NoteError, ValueError) as exc:
            return text(f"malformed request: {exc}\n", 400)
        log_key = logs.get(checkpoint.origin)
        if log_key is None:
            return text("unknown log origin\n", 404)
        try:
            note.verify_note(parsed, [log_key])
        except note.NoteError:
            return text("no valid signature by the log's key\n", 403)
        if old > checkpoint.size:
            return text("the old size is larger than the checkpoint's\n", 400)
        async with state._lock:
            with state._file_lock():
                data = state.read()
                known = data.get(checkpoint.origin, {"size": 0, "root": ""})
                if old != known["size"]:
                    return text(f"{known['size']}\n", 409, "text/x.tlog.size")
                if old == checkpoint.size:
                    if old and base64.b64decode(known["root"]) != checkpoint.root:
                        return text("the same size with another root\n", 422)
                elif old == 0:
                    if proof:
                        return text("a proof from size 0 is empty\n", 422)
                else:
                    try:
                        tlog.verify_consistency(
                            old, base64.b64decode(known["root"]), checkpoint.size, checkpoint.root, proof
                        )
                    except tlog.ProofError as exc:
                        return text(f"the consistency proof does not verify: {exc}\n", 422)
                data[checkpoint.origin] = {
                    "size": checkpoint.size,
                    "root": base64.b64encode(checkpoint.root).decode(),
                }
                state.write(data)
        return text(cosigner.cosign(parsed.text, int(time.time())), 200)

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
    return int(match.group(1)), proof, checkpoint
