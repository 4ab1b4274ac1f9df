"""The witness client against witnesses it cannot trust to be quick, or alive, or brief: the
checkpoint is published as soon as the quorum is met (while a slow witness's request is still
open), or at the timeout with what came; a late cosignature is published again with the same
checkpoint; a failing witness is backed off and said once; one keep-alive connection per
witness. And every reply from outside (witness, TSA, human-check provider) is read with a
ceiling: a 100 MB answer costs a failure, not memory. The integrator's outages and a halt are
said once, not once per pass."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from execution_proof.jobs.log_config import LogConfig
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.jobs.log_timestamps import Stamper, TsaConfig
from execution_proof.jobs.log_witnesses import MAX_REPLY_BYTES, WitnessClient
from execution_proof.kv.keys import LogIdentity
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.runtime import metrics
from execution_proof.runtime.human_check import HumanCheckUnavailable, siteverify
from execution_proof.transparency import cosignature, note, timestamps
from execution_proof.transparency.policy import Policy, parse_policy
from execution_proof.transparency.tiles import TileReader

ORIGIN = "test.example/v1/log"
HUGE = 100 * 1024 * 1024


@dataclass
class FakeWitness:
    """A tlog-witness on loopback, in this event loop, whose behaviour a test sets:
    ``cosign`` (answers at once), ``hang`` (holds the request open until ``release`` is set,
    then cosigns), ``never`` (holds it open for good), ``fail`` (500), ``huge`` (a 100 MB
    body, generated as it is sent, without Content-Length) or ``declared`` (a Content-Length
    of 100 MB, then nothing)."""

    name: str
    mode: str = "cosign"
    cosigner: cosignature.Cosigner = field(init=False)
    requests: int = 0
    connections: int = 0
    open: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""
    server: asyncio.Server | None = None

    def __post_init__(self) -> None:
        self.cosigner = cosignature.Cosigner.generate(f"witness.example/{self.name}")

    async def start(self) -> FakeWitness:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        self.release.set()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = (await reader.readexactly(length)).decode("utf-8", "replace")
                self.requests += 1
                await self._answer(body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, body: str, writer: asyncio.StreamWriter) -> None:
        if self.mode in ("hang", "hang422", "never"):
            self.open += 1
            self.arrived.set()
            try:
                await (self.release.wait() if self.mode != "never" else asyncio.Event().wait())
            finally:
                self.open -= 1
        if self.mode == "hang422":
            writer.write(b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-length: 13\r\n\r\ninconsistent\n")
        elif self.mode == "fail":
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nnope")
        elif self.mode == "huge":
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
            chunk = b"x" * 65536
            for _ in range(HUGE // len(chunk)):
                writer.write(chunk)
                await writer.drain()
        elif self.mode == "declared":
            writer.write(f"HTTP/1.1 200 OK\r\ncontent-length: {HUGE}\r\n\r\n".encode())
            await writer.drain()
            await asyncio.Event().wait()
        else:
            signed = body.split("\n\n", 1)[1]
            line = self.cosigner.cosign(signed.split("\n\n", 1)[0] + "\n", 1_700_000_000).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(line), line))
        await writer.drain()

    def policy_line(self) -> str:
        return f"witness {self.name} {self.cosigner.key.encode()} {self.url}"


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    store = LogStore(FileObjects(tmp_path / "log"))
    yield store
    await store.close()


@pytest.fixture
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture
async def witnesses() -> AsyncIterator[Callable[..., Awaitable[FakeWitness]]]:
    started: list[FakeWitness] = []

    async def start(name: str, mode: str = "cosign") -> FakeWitness:
        witness = await FakeWitness(name, mode).start()
        started.append(witness)
        return witness

    yield start
    for witness in started:
        await witness.stop()


def make_policy(signer: note.Signer, members: list[FakeWitness], quorum: int) -> Policy:
    lines = [f"log {signer.verifier.encode()}", *(w.policy_line() for w in members)]
    lines += [f"group q {quorum} {' '.join(w.name for w in members)}", "quorum q"]
    return parse_policy("\n".join(lines) + "\n")


def checkpoint_of(signer: note.Signer, size: int = 5) -> tuple[str, note.Checkpoint]:
    checkpoint = note.Checkpoint(ORIGIN, size, bytes(range(32)))
    return note.sign_note(checkpoint.text(), signer), checkpoint


def cosigners(text: str, members: list[FakeWitness]) -> list[str]:
    """The witnesses whose cosignature lines ``text`` carries, in the order of the lines."""
    names = {f"witness.example/{w.name}": w.name for w in members}
    return [names[line.split()[1]] for line in text.splitlines() if line.split()[1:2] and line.split()[1] in names]


def failures(name: str, kind: str) -> float:
    return metrics.LOG_WITNESS_FAILURES.labels(name, kind)._value.get()


def client_for(log_store: LogStore, policy: Policy, timeout_ms: int, **options: Any) -> WitnessClient:
    return WitnessClient(log_store, policy, timeout_ms, TileReader(log_store.fetch), **options)


# -- quorum-early publication, the timeout, late cosignatures


async def test_a_one_of_two_quorum_publishes_while_the_slow_witness_is_still_open_then_adds_it(
    log_store: LogStore, signer: note.Signer, witnesses: Any
) -> None:
    slow = await witnesses("slow", "hang")
    fast = await witnesses("fast")
    client = client_for(log_store, make_policy(signer, [slow, fast], 1), timeout_ms=30_000)
    signed, checkpoint = checkpoint_of(signer)
    cosigned = await client.cosign(signed, checkpoint)
    # Returned with the quorum met, while the slow witness still holds its request open (the
    # timeout is 30 s away): publication did not wait for it.
    assert slow.arrived.is_set() and slow.open == 1
    assert cosigners(cosigned.text, [slow, fast]) == ["fast"]
    assert await log_store.publish(cosigned.text.encode())
    # Its cosignature comes late: the same checkpoint is published again with both lines,
    # in the policy's order (slow first), the body unchanged.
    republished = metrics.LOG_CHECKPOINT_REPUBLISHED._value.get()
    slow.release.set()
    await client.settled()
    raw = (await log_store.checkpoint() or b"").decode()
    assert cosigners(raw, [slow, fast]) == ["slow", "fast"]
    assert raw.startswith(cosigned.text.split("\n\n")[0] + "\n\n" + signed.split("\n\n")[1])
    assert metrics.LOG_CHECKPOINT_REPUBLISHED._value.get() == republished + 1
    await client.close()


async def test_a_witness_still_answering_an_older_checkpoint_gets_the_newer_one_after_it(
    log_store: LogStore, signer: note.Signer, witnesses: Any
) -> None:
    """One request at a time per witness: the newer checkpoint waits for the open request
    (never sent beside it: the witness could see the older one after the newer), is sent when
    that one ends, and its cosignature is published again with the newer checkpoint."""
    slow = await witnesses("busy", "hang")
    fast = await witnesses("swift")
    client = client_for(log_store, make_policy(signer, [slow, fast], 1), timeout_ms=30_000)
    sending, most = 0, 0
    one = client._one

    async def counted(witness: Any, *args: Any) -> str:
        nonlocal sending, most
        if witness.name != "busy":
            return await one(witness, *args)
        sending += 1
        most = max(most, sending)
        try:
            return await one(witness, *args)
        finally:
            sending -= 1

    client._one = counted  # type: ignore[method-assign]
    signed, checkpoint = checkpoint_of(signer)
    first = await client.cosign(signed, checkpoint)
    second = await client.cosign(signed, checkpoint)
    assert cosigners(first.text, [slow, fast]) == cosigners(second.text, [slow, fast]) == ["swift"]
    assert (sending, most, slow.open) == (1, 1, 1), "a second request while the first is open"
    assert await log_store.publish(second.text.encode())
    slow.release.set()
    await client.settled()
    assert (slow.requests, most) == (2, 1), "the newer checkpoint was sent once the older request ended"
    assert cosigners((await log_store.checkpoint() or b"").decode(), [slow, fast]) == ["busy", "swift"]
    await client.close()


async def test_a_two_of_two_quorum_with_one_witness_silent_publishes_at_the_timeout_with_one(
    log_store: LogStore, signer: note.Signer, witnesses: Any
) -> None:
    silent = await witnesses("silent", "never")
    fast = await witnesses("quick")
    # 1.5 s: the quick witness (a thread of this process) answers well within it even on a
    # loaded machine (300 ms was too short there for it to be among the cosigners).
    client = client_for(log_store, make_policy(signer, [silent, fast], 2), timeout_ms=1_500)
    timeouts = failures("silent", "timeout")
    loop = asyncio.get_running_loop()
    started = loop.time()
    cosigned = await client.cosign(*checkpoint_of(signer))
    assert loop.time() - started >= 1.5, "the quorum was not met: it waited for the timeout"
    assert cosigners(cosigned.text, [silent, fast]) == ["quick"]
    await client.settled()
    assert failures("silent", "timeout") == timeouts + 1
    await client.close()


async def test_a_late_cosignature_never_drops_one_already_published(log_store: LogStore, signer: note.Signer) -> None:
    """The store's side of a republish: same body with more lines replaces, fewer lines keep
    what is published, other lines are added to it, another body of the same size is refused."""
    signed, checkpoint = checkpoint_of(signer)
    one, two = cosignature.Cosigner.generate("w/one"), cosignature.Cosigner.generate("w/two")
    line_one, line_two = one.cosign(checkpoint.text(), 1), two.cosign(checkpoint.text(), 1)
    assert await log_store.publish((signed + line_one).encode())
    assert await log_store.publish((signed + line_one + line_two).encode())
    assert not await log_store.publish(signed.encode())  # fewer: nothing dropped
    assert (await log_store.checkpoint() or b"").decode() == signed + line_one + line_two
    assert not await log_store.publish((signed + line_two).encode())
    assert (await log_store.checkpoint() or b"").decode() == signed + line_one + line_two
    # Another integrator's republish with another cosignature keeps the one published.
    three = cosignature.Cosigner.generate("w/three").cosign(checkpoint.text(), 1)
    assert await log_store.publish((signed + three).encode())
    assert (await log_store.checkpoint() or b"").decode() == signed + three + line_one + line_two
    other = note.sign_note(note.Checkpoint(ORIGIN, checkpoint.size, bytes(32)).text(), signer)
    assert not await log_store.publish(other.encode())


async def test_fork_evidence_after_publication_halts_the_log_at_the_next_pass(
    log_store: LogStore, signer: note.Signer, witnesses: Any
) -> None:
    import fakeredis

    from execution_proof.kv.store import Store

    forked = await witnesses("forked", "hang422")
    fast = await witnesses("fine")
    store = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    config = LogConfig(ORIGIN, signer, policy=make_policy(signer, [forked, fast], 1), witness_timeout_ms=30_000)
    worker = Integrator(store.log_queue, log_store, config)
    await worker.prepare()
    assert worker.witnesses is not None
    cosigned = await worker.witnesses.cosign(*checkpoint_of(signer))
    assert cosigned.evidence is None and forked.open == 1  # published on the quorum, before its answer
    forked.release.set()
    await worker.witnesses.settled()
    assert await log_store.halted() is None
    await worker.step(force=True)
    halted = await log_store.halted()
    assert halted is not None and halted["evidence"]["witness"] == "forked" and halted["evidence"]["status"] == 422
    await worker.witnesses.close()
    await store.close()


# -- backoff, keep-alive, what is logged


async def test_a_failing_witness_is_not_asked_before_its_backoff_and_is_said_once(
    log_store: LogStore, signer: note.Signer, witnesses: Any, caplog: pytest.LogCaptureFixture
) -> None:
    failing = await witnesses("flaky", "fail")
    now = [1000.0]
    client = client_for(
        log_store, make_policy(signer, [failing], 1), timeout_ms=2000, clock=lambda: now[0], jitter=lambda: 1.0
    )
    signed, checkpoint = checkpoint_of(signer)
    caplog.set_level(logging.WARNING, "eps.log.witnesses")
    await client.cosign(signed, checkpoint)
    assert failing.requests == 1
    for step, expected in ((0.999, 1), (0.001, 2), (1.999, 2), (0.001, 3), (3.999, 3), (0.001, 4)):
        now[0] += step  # ceilings 1 s, 2 s, 4 s: a request only once each has passed
        await client.cosign(signed, checkpoint)
        assert failing.requests == expected, (now[0], step)
    failing.mode = "cosign"
    now[0] += 8.0
    await client.cosign(signed, checkpoint)
    assert failing.requests == 5
    await client.cosign(signed, checkpoint)  # a cosignature resets the backoff: asked at once
    assert failing.requests == 6
    said = [r.getMessage() for r in caplog.records if "flaky" in r.getMessage()]
    assert len([m for m in said if "did not cosign (500)" in m]) == 1, said
    assert len([m for m in said if "cosigns again" in m]) == 1, said
    assert len(said) == 2, said
    await client.close()


async def test_one_keep_alive_connection_per_witness_closed_on_close(
    log_store: LogStore, signer: note.Signer, witnesses: Any
) -> None:
    witness = await witnesses("steady")
    client = client_for(log_store, make_policy(signer, [witness], 1), timeout_ms=2000)
    signed, checkpoint = checkpoint_of(signer)
    for _ in range(3):
        assert cosigners((await client.cosign(signed, checkpoint)).text, [witness]) == ["steady"]
    assert (witness.requests, witness.connections) == (3, 1)
    kept = client._clients["steady"]
    await client.close()
    assert kept.is_closed


async def test_an_unexpected_error_is_said_once_with_the_witness_name(
    log_store: LogStore, signer: note.Signer, witnesses: Any, caplog: pytest.LogCaptureFixture
) -> None:
    witness = await witnesses("odd")
    client = client_for(log_store, make_policy(signer, [witness], 1), timeout_ms=2000, jitter=lambda: 0.0)

    def broken(*args: Any) -> str:
        raise RuntimeError("a bug in reading the answer")

    client._valid_lines = broken  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, "eps.log.witnesses")
    for _ in range(3):
        assert cosigners((await client.cosign(*checkpoint_of(signer))).text, [witness]) == []
    said = [r for r in caplog.records if "odd" in r.getMessage()]
    assert len(said) == 1 and "RuntimeError" in said[0].getMessage() and said[0].exc_info is not None
    assert witness.requests == 3
    await client.close()


# -- bounded replies


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


async def measured(call: Awaitable[Any]) -> tuple[Any, int]:
    """What ``call`` returned (or raised) and how much the process's peak RSS grew meanwhile (KiB)."""
    reset_peak_rss()
    before = peak_rss_kib()
    try:
        result: Any = await call
    except Exception as exc:
        result = exc
    return result, peak_rss_kib() - before


async def test_a_witness_answering_100_mb_is_a_failure_and_costs_no_memory(
    log_store: LogStore, signer: note.Signer, witnesses: Any
) -> None:
    huge = await witnesses("huge", "huge")
    declared = await witnesses("declared", "declared")
    client = client_for(log_store, make_policy(signer, [huge, declared], 1), timeout_ms=20_000)
    counted = failures("huge", "too_large"), failures("declared", "too_large")
    cosigned, grown = await measured(client.cosign(*checkpoint_of(signer)))
    assert cosigners(cosigned.text, [huge, declared]) == []
    assert (failures("huge", "too_large"), failures("declared", "too_large")) == (counted[0] + 1, counted[1] + 1)
    assert grown < 8 * 1024, f"the process grew by {grown} KiB reading a {MAX_REPLY_BYTES}-byte-capped reply"
    await client.close()


async def test_a_tsa_answering_100_mb_is_a_failure_and_costs_no_memory(witnesses: Any) -> None:
    huge = await witnesses("tsa", "huge")
    stamper = Stamper(None, None, LogIdentity(ORIGIN, ""), TsaConfig((huge.url,)))  # type: ignore[arg-type]
    request = timestamps.new_request("a checkpoint\n")
    counted = metrics.LOG_TSA_FAILURES.labels(huge.url, "too_large")._value.get()
    import httpx

    async with httpx.AsyncClient(timeout=20) as http:
        answer, grown = await measured(stamper._ask(http, huge.url, request))
    assert answer is None
    assert metrics.LOG_TSA_FAILURES.labels(huge.url, "too_large")._value.get() == counted + 1
    assert grown < 8 * 1024, f"the process grew by {grown} KiB"


@pytest.mark.parametrize("mode", ["huge", "declared"])
async def test_a_human_check_provider_answering_100_mb_fails_closed_and_costs_no_memory(
    witnesses: Any, mode: str
) -> None:
    provider = await witnesses("provider", mode)
    raised, grown = await measured(siteverify(provider.url, "secret", "token", None))
    assert isinstance(raised, HumanCheckUnavailable) and "more than" in str(raised), raised
    assert grown < 8 * 1024, f"the process grew by {grown} KiB"


# -- the integrator: an outage and a halt are said once


async def test_a_redis_outage_is_one_line_down_and_one_line_back(
    log_store: LogStore, signer: note.Signer, caplog: pytest.LogCaptureFixture
) -> None:
    import fakeredis

    from execution_proof.kv.store import Store

    server = fakeredis.FakeServer()
    store = Store(fakeredis.FakeAsyncRedis(server=server))
    worker = Integrator(store.log_queue, log_store, LogConfig(ORIGIN, signer))
    await worker.prepare()
    stop = asyncio.Event()
    passes = 0
    step = worker.step

    async def counted_step(force: bool = False) -> int:
        nonlocal passes
        passes += 1
        if passes == 2:
            server.connected = False  # Redis refuses from the 2nd pass to the 11th
        elif passes == 12:
            server.connected = True
        elif passes == 15:
            stop.set()
        return await step(force)

    worker.step = counted_step  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, "eps.log")
    await worker.run(stop)
    said = [r.getMessage() for r in caplog.records if r.name == "eps.log"]
    down = [m for m in said if "pass failed" in m]
    back = [m for m in said if "passes again" in m]
    assert len(down) == 1 and "StoreUnavailable" in down[0], said
    assert len(back) == 1 and "StoreUnavailable 10" in back[0], said
    await store.close()


async def test_a_halted_log_says_so_once_per_process(
    log_store: LogStore, signer: note.Signer, caplog: pytest.LogCaptureFixture
) -> None:
    import fakeredis

    from execution_proof.kv.store import Store

    store = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    first = Integrator(store.log_queue, log_store, LogConfig(ORIGIN, signer))
    await first.prepare()
    await log_store.halt("a test halt", {"witness": "w", "status": 422, "detail": "test"})
    caplog.set_level(logging.WARNING, "eps.log")
    second = Integrator(store.log_queue, log_store, LogConfig(ORIGIN, signer))
    for worker in (first, second) * 10:
        worker.tree = None  # the lease lost and taken back: the store is read again
        assert await worker.step(force=True) == 0
    said = [r for r in caplog.records if r.levelno == logging.CRITICAL and "LOG HALTED" in r.getMessage()]
    assert len(said) == 1
    await store.close()
