"""A bounded asyncio HTTP/1.1 load generator (used when ``wrk`` is not installed).

``N`` persistent keep-alive connections, each with one request in flight at a time (closed
loop, like wrk), hand-written HTTP/1.1 over ``asyncio.Protocol`` (no per-request coroutine
or client library: the generator has to stay far faster than the server it measures).
Every response's latency is recorded, so p50/p99 are exact percentiles of the samples.

With ``rate`` in the spec the generator runs an open loop instead: request ``i`` is due at
``t0 + i / rate`` whether or not earlier ones were answered, ``rate * seconds`` requests in
all, and each latency counts from the due time, so a stalled server shows in the percentiles
(no coordinated omission). The run stops by itself: after the last due time it waits at most
``READ_TIMEOUT_S`` for the answers still missing and counts them as timeouts.

Run as ``python -m bench.loadgen run SPEC.json`` (prints one JSON result line) or
``python -m bench.loadgen null-server --port P`` (a trivial HTTP responder that measures
the generator's own ceiling). The scenario request shapes live here and in
``bench/scenario.lua`` (the wrk version): keep both in step.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson
import uvloop  # a Sanic dependency

HEADER_END = b"\r\n\r\n"
CONTENT_LENGTH = b"\r\ncontent-length:"
READ_TIMEOUT_S = 10.0
DRAIN_S = 5.0
PACING_TICK_S = 0.001
ERROR_SAMPLES = 5
INPUT_PAD = "a" * 24
OUTPUT_PAD = "b" * 24


def create_body(nonce: str, source: int, counter: int) -> bytes:
    """A create body with an input and output hash no other request of any run repeats.

    64 hex = run nonce (16) + source id (8) + counter (16) + fixed pad (24); the same layout as
    ``bench/scenario.lua`` so both generators send the same bytes per request.
    """
    middle = f"{nonce}{source:08x}{counter:016x}"
    return (
        b'{"input_hash":"sha256:' + (middle + INPUT_PAD).encode() + b'","output_hash":"sha256:'
        b"" + (middle + OUTPUT_PAD).encode() + b'","receipt_kind":"release","tags":{"workflow_stage":"build"}}'
    )


class RequestSource:
    """Makes the next request's bytes for one scenario.

    ``spec``: ``{"mode": "create32"|"hot"|"read"|"verify", "items": [...], "nonce": hex16,
    "host": "127.0.0.1:PORT"}``. Items: API keys (create modes), receipt ids (read) or
    ``"KEY RECEIPT_ID INPUT_HASH"`` lines (verify).
    """

    def __init__(self, spec: dict[str, Any], source_id: int = 0) -> None:
        self.mode: str = spec["mode"]
        self.nonce: str = spec.get("nonce", "0" * 16)
        self.source_id = source_id
        self.counter = 0
        self.rng = random.Random(source_id * 7919 + time.monotonic_ns())
        host: bytes = spec["host"].encode()
        items: list[str] = spec["items"]
        if not items:
            raise ValueError("the scenario has no items")
        if self.mode in ("create32", "hot"):
            self.prefixes: list[bytes] = [
                b"POST /v1/receipts HTTP/1.1\r\nHost: " + host + b"\r\nAuthorization: Bearer " + key.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: "
                for key in (items if self.mode == "create32" else items[:1])
            ]
            self.make: Callable[[], bytes] = self._create
        elif self.mode == "read":
            self.fixed: list[bytes] = [
                b"GET /v1/receipts/" + rid.encode() + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n" for rid in items
            ]
            self.make = self._fixed
        elif self.mode == "verify":
            self.fixed = []
            for line in items:
                key, rid, input_hash = line.split()
                body = orjson.dumps({"receipt_id": rid, "input_hash": input_hash})
                self.fixed.append(
                    b"POST /v1/verify HTTP/1.1\r\nHost: "
                    + host
                    + b"\r\nAuthorization: Bearer "
                    + key.encode()
                    + b"\r\n"
                    b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + HEADER_END + body
                )
            self.make = self._fixed
        else:
            raise ValueError(f"unknown mode {self.mode}")

    def _create(self) -> bytes:
        self.counter += 1
        body = create_body(self.nonce, self.source_id, self.counter)
        prefix = self.prefixes[self.rng.randrange(len(self.prefixes))] if len(self.prefixes) > 1 else self.prefixes[0]
        return prefix + str(len(body)).encode() + HEADER_END + body

    def _fixed(self) -> bytes:
        return self.fixed[self.rng.randrange(len(self.fixed))]


class Run:
    """Shared state of one timed run: the deadline, the samples, the counts."""

    def __init__(self, source: RequestSource, max_requests: int, collect: bool = False) -> None:
        self.source = source
        self.max_requests = max_requests
        self.running = False
        self.latencies_us = array("q")
        self.statuses: dict[int, int] = {}
        self.conn_errors = 0
        self.started = 0
        self.collect = collect
        self.bodies: list[bytes] = []
        """With ``collect``: every 201 answer's body (the hot-project check reads their receipts)."""
        self.error_samples: list[str] = []
        """The first few error answers' bodies (what the errors were)."""
        self.done = asyncio.get_running_loop().create_future()

    def record(self, status: int, latency_ns: int) -> None:
        self.latencies_us.append(latency_ns // 1000)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if self.max_requests and len(self.latencies_us) >= self.max_requests and not self.done.done():
            self.done.set_result(None)


class HttpClient(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection with at most one request in flight; ``answered``
    gets each complete response."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.buf = bytearray()
        self.need = -1
        self.body_at = 0
        self.status = 0
        self.sent_at = 0
        self.in_flight = False
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def send(self) -> None:
        assert self.transport is not None
        request = self.run.source.make()
        self.in_flight = True
        self.sent_at = time.perf_counter_ns()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            if self.need < 0:
                end = buf.find(HEADER_END)
                if end < 0:
                    return
                head = bytes(buf[:end]).lower()
                self.status = int(head[9:12])
                at = head.find(CONTENT_LENGTH)
                if at < 0:  # no length: this generator cannot frame it; drop the connection
                    self.run.conn_errors += 1
                    self.in_flight = False
                    assert self.transport is not None
                    self.transport.close()
                    return
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + len(CONTENT_LENGTH) : stop if stop >= 0 else len(head)])
                self.body_at = end + 4
                self.need = end + 4 + length
            if len(buf) < self.need:
                return
            now = time.perf_counter_ns()
            if self.run.collect and self.status == 201:
                self.run.bodies.append(bytes(buf[self.body_at : self.need]))
            elif self.status >= 400 and len(self.run.error_samples) < ERROR_SAMPLES:
                self.run.error_samples.append(bytes(buf[self.body_at : self.need][:300]).decode(errors="replace"))
            del buf[: self.need]
            self.need = -1
            self.in_flight = False
            if not self.answered(now):
                return

    def answered(self, now: int) -> bool:
        """Record the response that just completed; False when the connection is closed."""
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        if self.in_flight and self.run.running:
            self.run.conn_errors += 1
        self.in_flight = False
        if not self.closed.done():
            self.closed.set_result(None)


class Connection(HttpClient):
    """Closed loop: the next request leaves as soon as the previous answer is in."""

    def answered(self, now: int) -> bool:
        if self.run.running:
            self.run.record(self.status, now - self.sent_at)
            self.send()
            return True
        assert self.transport is not None
        self.transport.close()
        return False


def percentile(sorted_samples: array[int] | list[int], fraction: float) -> float:
    """Nearest-rank percentile of already sorted samples (0 when there are none)."""
    if not sorted_samples:
        return 0.0
    rank = max(1, min(len(sorted_samples), int(-(-fraction * len(sorted_samples) // 1))))
    return float(sorted_samples[rank - 1])


async def run_load(
    host: str,
    port: int,
    spec: dict[str, Any],
    *,
    connections: int,
    seconds: float,
    max_requests: int = 0,
    collect: bool = False,
) -> dict[str, Any]:
    """Drive ``connections`` closed-loop connections for ``seconds`` (or ``max_requests``)."""
    loop = asyncio.get_running_loop()
    run = Run(RequestSource(spec, source_id=int(spec.get("source_id", 0))), max_requests, collect)
    conns: list[Connection] = []
    for _ in range(connections):
        _, proto = await loop.create_connection(lambda: Connection(run), host, port)
        conns.append(proto)
    run.running = True
    started = time.perf_counter()
    for conn in conns:
        conn.send()

    async def keep_connected() -> None:
        # A connection the server closed (an error answer may close it) is replaced.
        while run.running:
            await asyncio.sleep(0.05)
            for index, conn in enumerate(conns):
                if conn.closed.done() and run.running:
                    try:
                        _, fresh = await loop.create_connection(lambda: Connection(run), host, port)
                    except OSError:
                        run.conn_errors += 1
                        continue
                    conns[index] = fresh
                    fresh.send()

    keeper = asyncio.ensure_future(keep_connected())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(run.done), seconds)
    elapsed = time.perf_counter() - started
    run.running = False
    keeper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await keeper
    now = time.perf_counter_ns()
    timeouts = sum(1 for c in conns if c.in_flight and now - c.sent_at > READ_TIMEOUT_S * 1e9)
    for conn in conns:
        if not conn.in_flight and conn.transport is not None:
            conn.transport.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(c.closed for c in conns)), DRAIN_S)
    for conn in conns:
        if conn.transport is not None:
            conn.transport.abort()
    result = summary(run, elapsed, timeouts)
    if collect:
        result["bodies"] = run.bodies
    return result


def summary(run: Run, elapsed: float, timeouts: int) -> dict[str, Any]:
    samples = sorted(run.latencies_us)
    non_2xx = sum(n for code, n in run.statuses.items() if not 200 <= code < 300)
    return {
        "generator": "python",
        "requests": len(samples),
        "duration_s": elapsed,
        "rps": len(samples) / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(samples, 0.50) / 1000,
        "p99_ms": percentile(samples, 0.99) / 1000,
        "max_ms": (samples[-1] if samples else 0) / 1000,
        "errors": non_2xx + run.conn_errors + timeouts,
        "conn_errors": run.conn_errors,
        "timeouts": timeouts,
        "statuses": {str(k): v for k, v in sorted(run.statuses.items())},
        "error_samples": run.error_samples,
    }


class OpenConnection(HttpClient):
    """Open loop: sends what the schedule hands it; latency counts from the scheduled time."""

    def __init__(self, run: Run, schedule: OpenSchedule) -> None:
        super().__init__(run)
        self.schedule = schedule
        self.scheduled_at = 0

    def send_scheduled(self, scheduled_at: int) -> None:
        self.scheduled_at = scheduled_at
        self.send()

    def answered(self, now: int) -> bool:
        self.run.record(self.status, now - self.scheduled_at)
        self.schedule.idle(self)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.in_flight:
            self.schedule.lost += 1
        super().connection_lost(exc)


class OpenSchedule:
    """Request ``i`` is due at ``t0 + i / rate``, whatever happened to the ones before it. A due
    request leaves on an idle connection; when every connection is busy it waits in a queue,
    and that wait counts in its latency (measured from the due time, not the send): no
    coordinated omission."""

    def __init__(self, rate: float, count: int) -> None:
        self.rate = rate
        self.count = count
        self.released = 0
        self.queue: deque[int] = deque()
        self.idle_conns: list[OpenConnection] = []
        self.t0 = 0
        self.lost = 0

    def idle(self, conn: OpenConnection) -> None:
        if self.queue:
            conn.send_scheduled(self.queue.popleft())
        else:
            self.idle_conns.append(conn)

    def release_due(self, now: int) -> None:
        due = min(self.count, int((now - self.t0) * self.rate / 1e9) + 1)
        while self.released < due:
            at = self.t0 + int(self.released * 1e9 / self.rate)
            self.released += 1
            if self.idle_conns:
                self.idle_conns.pop().send_scheduled(at)
            else:
                self.queue.append(at)


async def run_open(
    host: str, port: int, spec: dict[str, Any], *, connections: int, rate: float, seconds: float
) -> dict[str, Any]:
    """Open loop: ``rate`` requests per second for ``seconds`` (``rate * seconds`` requests in
    all) over up to ``connections`` connections, then at most READ_TIMEOUT_S more for the last
    answers. Requests not answered by then count as timeouts."""
    loop = asyncio.get_running_loop()
    count = max(1, int(rate * seconds))
    run = Run(RequestSource(spec, source_id=int(spec.get("source_id", 0))), count)
    schedule = OpenSchedule(rate, count)
    conns: list[OpenConnection] = []
    for _ in range(connections):
        _, proto = await loop.create_connection(lambda: OpenConnection(run, schedule), host, port)
        conns.append(proto)
        schedule.idle_conns.append(proto)
    run.running = True
    schedule.t0 = time.perf_counter_ns()
    started = time.perf_counter()
    while schedule.released < count:
        schedule.release_due(time.perf_counter_ns())
        # Whatever fell due since the last tick leaves now, and its wait counts in its latency.
        # uvloop's timers tick in whole milliseconds: a shorter sleep returns at once, and the
        # generator would spin a core away from the service it measures.
        await asyncio.sleep(PACING_TICK_S)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(run.done), READ_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    run.running = False
    unanswered = count - len(run.latencies_us) - schedule.lost
    for conn in conns:
        if conn.transport is not None:
            conn.transport.abort()
    result = summary(run, elapsed, max(0, unanswered))
    result.update({"mode": "open", "rate": rate, "scheduled": count, "connections": connections})
    return result


class NullServer(asyncio.Protocol):
    """Answers every request with a fixed small JSON 201: the generator's own ceiling."""

    BODY = b'{"ok":true,"receipt":{"receipt_id":"rcpt_null"}}'
    RESPONSE = (
        b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nconnection: keep-alive\r\ncontent-length: "
        + str(len(BODY)).encode()
        + HEADER_END
        + BODY
    )

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            end = buf.find(HEADER_END)
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            at = head.find(CONTENT_LENGTH)
            length = 0
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + len(CONTENT_LENGTH) : stop if stop >= 0 else len(head)])
            if len(buf) < end + 4 + length:
                return
            del buf[: end + 4 + length]
            assert self.transport is not None
            self.transport.write(self.RESPONSE)


async def serve_null(host: str, port: int) -> None:
    server = await asyncio.get_running_loop().create_server(NullServer, host, port)
    async with server:
        await server.serve_forever()


def _new_loop_runner(coro: Any) -> Any:
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="one timed run; prints a JSON result line")
    run.add_argument("spec", help="JSON file: host, port, connections, seconds, max_requests, mode, items, nonce")
    null = verbs.add_parser("null-server", help="a trivial HTTP server (the generator's own ceiling)")
    null.add_argument("--host", default="127.0.0.1")
    null.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.verb == "null-server":
        with contextlib.suppress(KeyboardInterrupt):
            _new_loop_runner(serve_null(args.host, args.port))
        return 0
    spec = orjson.loads(Path(args.spec).read_bytes())
    if spec.get("rate"):
        coro = run_open(
            spec["target_host"],
            int(spec["target_port"]),
            spec,
            connections=int(spec["connections"]),
            rate=float(spec["rate"]),
            seconds=float(spec["seconds"]),
        )
    else:
        coro = run_load(
            spec["target_host"],
            int(spec["target_port"]),
            spec,
            connections=int(spec["connections"]),
            seconds=float(spec["seconds"]),
            max_requests=int(spec.get("max_requests", 0)),
            collect=bool(spec.get("collect")),  # a file name: every 201 body goes there
        )
    result = _new_loop_runner(coro)
    bodies: list[bytes] = result.pop("bodies", [])
    if spec.get("collect"):  # one 201 body a line (the service's JSON bodies are one line each)
        Path(spec["collect"]).write_bytes(b"".join(body.replace(b"\n", b" ") + b"\n" for body in bodies))
    sys.stdout.write("BENCHJSON " + orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
