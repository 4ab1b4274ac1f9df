"""The witness (C2SP tlog-witness and tlog-cosignature): every status, durability across a
restart, and one cosignature among concurrent requests for the same old size."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.transparency import cosignature, note, tlog
from execution_proof.web.witness import WitnessState, WitnessStateError, witness_app
from tests.conftest import REPO, free_port
from tests.test_tlog import TileStore, leaves

ORIGIN = "log.example/w"


@pytest.fixture
def log_key() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture
def cosigner() -> cosignature.Cosigner:
    return cosignature.Cosigner.generate("witness.example/one")


def checkpoint(signer: note.Signer, store: TileStore) -> str:
    return note.sign_note(note.Checkpoint(ORIGIN, store.size, store.root).text(), signer)


def body(old: int, proof: list[bytes], signed: str) -> bytes:
    return (f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + signed).encode()


def grown(count: int, seed: int = 1) -> TileStore:
    store = TileStore()
    store.append(leaves(count, seed))
    return store


async def post(client: Any, data: bytes) -> Any:
    _, response = await client.post("/add-checkpoint", content=data)
    return response


def test_cosignature_keys_and_signatures_follow_tlog_cosignature(cosigner: cosignature.Cosigner) -> None:
    key = cosigner.key
    assert cosignature.Cosigner.parse(cosigner.encode()) == cosigner
    assert cosignature.CosignerKey.parse(key.encode()) == key
    assert key.key_id == hashlib.sha256(b"witness.example/one\n\x04" + key.public_key).digest()[:4]
    text = note.Checkpoint(ORIGIN, 3, b"\x07" * 32).text()
    line = cosigner.cosign(text, 1_700_000_000)
    parsed = note.parse_note(text + "\n" + line)
    assert cosignature.cosignatures(parsed, [key]) == {key: 1_700_000_000}
    other = note.parse_note(note.Checkpoint(ORIGIN, 4, b"\x07" * 32).text() + "\n" + line)
    assert cosignature.cosignatures(other, [key]) == {}, "a cosignature of another checkpoint does not count"
    stranger = cosignature.Cosigner.generate("witness.example/one").key
    assert cosignature.cosignatures(parsed, [stranger]) == {}


def state_dir(path: Path) -> list[str]:
    """The files of the state's directory: a state file and its lock at most, never a partial file."""
    return sorted(p.name for p in path.parent.iterdir())


async def test_every_status_of_add_checkpoint(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    state = tmp_path / "state.json"
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, state, "w1").asgi_client
    five, nine = grown(5), grown(9)
    first = await post(client, body(0, [], checkpoint(log_key, five)))
    assert (first.status, first.headers["content-type"]) == (200, "text/plain; charset=utf-8"), first.text
    assert first.text.startswith("\u2014 witness.example/one ") and first.text.count("\n") == 1
    cosigned = note.parse_note(checkpoint(log_key, five) + first.text)
    assert cosignature.cosignatures(cosigned, [cosigner.key]).keys() == {cosigner.key}
    again = await post(client, body(0, [], checkpoint(log_key, nine)))
    assert (again.status, again.text, again.headers["content-type"]) == (409, "5\n", "text/x.tlog.size")
    proof = nine.hashes().consistency_proof(5)
    grew = await post(client, body(5, proof, checkpoint(log_key, nine)))
    assert grew.status == 200, grew.text
    assert cosignature.cosignatures(note.parse_note(checkpoint(log_key, nine) + grew.text), [cosigner.key])
    # Unknown origin, no valid log signature, old larger than the checkpoint, malformed.
    other = note.Signer.generate("log.example/other")
    unknown = await post(
        client, body(0, [], note.sign_note(note.Checkpoint("log.example/other", 1, b"\1" * 32).text(), other))
    )
    assert (unknown.status, unknown.text) == (404, "unknown log origin\n")
    impostor = note.Signer.generate(ORIGIN)
    forged = await post(client, body(9, [], checkpoint(impostor, nine)))
    assert (forged.status, forged.text) == (403, "no valid signature by the log's key\n")
    ahead = await post(client, body(10, [], checkpoint(log_key, nine)))
    assert (ahead.status, ahead.text) == (400, "the old size is larger than the checkpoint's\n")
    for bad in (
        b"old 01\n\n" + checkpoint(log_key, nine).encode(),
        b"nonsense",
        body(9, [b"short"], checkpoint(log_key, nine)),
        body(9, [b"\0" * 32] * 64, checkpoint(log_key, nine)),  # 64 proof lines: tlog-witness allows 63
    ):
        refused = await post(client, bad)
        assert (refused.status, refused.text.startswith("malformed request: ")) == (400, True), bad[:20]
    too_big = await post(client, body(9, [], checkpoint(log_key, nine)) + b"x" * 16 * 1024)
    assert too_big.status == 413
    # A fork: size 12 from another history, with a proof from it.
    fork = grown(12, seed=2)
    forked = await post(client, body(9, fork.hashes().consistency_proof(9), checkpoint(log_key, fork)))
    assert (forked.status, forked.text.startswith("the consistency proof does not verify")) == (422, True)
    # Same size, another root: 422 (C2SP PR 280; a fork, not a stale old size).
    same_size_fork = await post(client, body(9, [], checkpoint(log_key, grown(9, seed=3))))
    assert (same_size_fork.status, same_size_fork.text) == (422, "the same size with another root\n")
    # Same size, same root: cosigned again.
    resent = await post(client, body(9, [], checkpoint(log_key, nine)))
    assert resent.status == 200, resent.text
    assert orjson.loads(state.read_bytes())[ORIGIN] == {"size": 9, "root": base64.b64encode(nine.root).decode()}
    assert state_dir(state) == ["state.json", "state.json.lock"]


async def test_a_size_0_checkpoint_is_cosigned_only_with_the_empty_trees_root(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """C2SP PR 280: the root of size 0 is SHA-256 of the empty string; any other is 422."""
    state = tmp_path / "state.json"
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, state, "w0").asgi_client
    empty_root = hashlib.sha256(b"").digest()

    def size_0(root: bytes) -> str:
        return note.sign_note(note.Checkpoint(ORIGIN, 0, root).text(), log_key)

    wrong = await post(client, body(0, [], size_0(b"\0" * 32)))
    assert (wrong.status, wrong.text) == (422, "a checkpoint of size 0 has the empty tree's root\n")
    empty = await post(client, body(0, [], size_0(empty_root)))
    assert empty.status == 200, empty.text
    assert cosignature.cosignatures(note.parse_note(size_0(empty_root) + empty.text), [cosigner.key])
    assert (await post(client, body(0, [], size_0(tlog.node_hash(b"a" * 32, b"b" * 32))))).status == 422
    five = grown(5)
    assert (await post(client, body(0, [], checkpoint(log_key, five)))).status == 200
    later = await post(client, body(0, [], size_0(empty_root)))
    assert (later.status, later.text) == (409, "5\n")
    assert state_dir(state) == ["state.json", "state.json.lock"]


async def test_sizes_above_2_63_minus_1_are_400_in_the_checkpoint_and_in_old(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """2^63 - 1 is a size like any other; 2^63 and 2^64 (which used to answer 500 and leave a
    temporary file behind) are 400, and nothing is written."""
    state = tmp_path / "state.json"
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, state, "w63").asgi_client
    root = hashlib.sha256(b"a big tree").digest()

    def sized(size: int) -> str:
        return note.sign_note(note.Checkpoint(ORIGIN, size, root).text(), log_key)

    largest = (1 << 63) - 1
    for old, size in ((0, 1 << 63), (0, 1 << 64), (1 << 63, largest), (1 << 64, largest), (1 << 64, 1 << 64)):
        refused = await post(client, body(old, [], sized(size)))
        expected = (400, "malformed request: a tree size is at most 2^63 - 1\n")
        assert (refused.status, refused.text) == expected, (old, size)
        assert state_dir(state) == [], (old, size)
    accepted = await post(client, body(0, [], sized(largest)))
    assert accepted.status == 200, accepted.text
    assert orjson.loads(state.read_bytes())[ORIGIN]["size"] == largest
    assert (await post(client, body(largest, [], sized(largest)))).status == 200
    assert state_dir(state) == ["state.json", "state.json.lock"]


async def test_a_resend_of_the_held_checkpoint_is_cosigned_without_rewriting_the_state(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    state = tmp_path / "state.json"
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, state, "wr").asgi_client
    seven = grown(7)
    assert (await post(client, body(0, [], checkpoint(log_key, seven)))).status == 200
    before = state.stat()
    for _ in range(3):
        resent = await post(client, body(7, [], checkpoint(log_key, seven)))
        assert resent.status == 200, resent.text
        assert cosignature.cosignatures(note.parse_note(checkpoint(log_key, seven) + resent.text), [cosigner.key])
    after = state.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    eight = grown(8)
    assert (await post(client, body(7, eight.hashes().consistency_proof(7), checkpoint(log_key, eight)))).status == 200
    assert state.stat().st_ino != before.st_ino, "a new checkpoint is written (a new file renamed over the old)"


async def test_a_failing_write_leaves_no_partial_file_and_cosigns_nothing(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state.json"
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, state, "wf").asgi_client
    assert (await post(client, body(0, [], checkpoint(log_key, grown(3))))).status == 200
    held = state.read_bytes()

    def disk_full(source: Any, target: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("execution_proof.runtime.files.os.replace", disk_full)
    four = grown(4)
    failed = await post(client, body(3, four.hashes().consistency_proof(3), checkpoint(log_key, four)))
    assert (failed.status, failed.text) == (500, "the witness could not read or write its state\n")
    assert state_dir(state) == ["state.json", "state.json.lock"]
    assert state.read_bytes() == held


def test_start_up_removes_the_temporaries_of_a_killed_writer_and_checks_the_state(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    (tmp_path / ".state.json.123.tmp").write_bytes(b'{"log.example/w": {"si')
    (tmp_path / ".state.json.abc_9.tmp").write_bytes(b"")
    (tmp_path / "other.tmp").write_bytes(b"not ours")
    WitnessState(state).prepare()
    assert state_dir(state) == ["other.tmp", "state.json.lock"]
    state.write_bytes(b'{"log.example/w": {"size": 3}}')
    with pytest.raises(WitnessStateError):
        WitnessState(state).prepare()


def lock_waiters(lock_path: Path, pid: int) -> int:
    """How many requests of process ``pid`` wait for the ``flock`` on ``lock_path`` (Linux's
    /proc/locks lists each blocked request with ``->``)."""
    info = lock_path.stat()
    file_id = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5:7] == [str(pid), file_id]:
            count += 1
    return count


def wait_until(condition: Any, what: str, timeout: float = 20) -> None:
    """Poll ``condition`` (a state the test waits for, not a delay) until true or fail."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.005)


@contextlib.contextmanager
def hold_lock(lock_path: Path) -> Iterator[None]:
    """The witness's state lock, held by the test (as another witness process would)."""
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


async def test_racing_requests_for_one_old_size_get_one_cosignature(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """The check of the old size and the write are one critical section: one request is held
    inside it (after its checks, before its write) until every other is seen waiting for the
    lock, or inside the section too (which a missing lock allows); then they all go on. One
    cosignature; every other request is told the size that won."""
    state_path = tmp_path / "state.json"
    guard = threading.Lock()
    inside = {"now": 0, "most": 0}
    armed, entered, release = threading.Event(), threading.Event(), threading.Event()

    def stall() -> None:
        if not armed.is_set():
            return
        with guard:
            inside["now"] += 1
            inside["most"] = max(inside["most"], inside["now"])
        entered.set()
        release.wait(30)
        with guard:
            inside["now"] -= 1

    state = WitnessState(state_path, stall=stall)
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, state, "w2").asgi_client
    tree = grown(40)
    assert (await post(client, body(0, [], checkpoint(log_key, grown(5))))).status == 200
    armed.set()
    racers = []
    for size in range(6, 14):
        view = tlog.TileHashes(size, tree.read)
        signed = note.sign_note(note.Checkpoint(ORIGIN, size, view.root()).text(), log_key)
        racers.append(asyncio.ensure_future(post(client, body(5, view.consistency_proof(5), signed))))
    others = len(racers) - 1

    def all_in_place() -> bool:
        return inside["most"] > 1 or (entered.is_set() and lock_waiters(state.lock_path, os.getpid()) == others)

    try:
        await asyncio.to_thread(wait_until, all_in_place, "one request is inside and the others wait")
    finally:
        release.set()
    answers = await asyncio.gather(*racers)
    assert inside["most"] == 1, "two requests were inside the critical section at once"
    assert sorted(a.status for a in answers) == [200] + [409] * others
    won = 6 + [a.status for a in answers].index(200)
    assert {a.text for a in answers if a.status == 409} == {f"{won}\n"}
    assert orjson.loads(state_path.read_bytes())[ORIGIN]["size"] == won


def spawn_witness(key_file: Path, state: Path, logs: dict[str, note.Verifier], port: int) -> subprocess.Popen[bytes]:
    """A ``witness serve`` process (its stderr in ``<state>.err``); the caller stops it."""
    log_args = [arg for origin, key in logs.items() for arg in ("--log", f"{origin}={key.encode()}")]
    with open(state.with_name(state.name + ".err"), "ab") as errors:
        return subprocess.Popen(
            [sys.executable, "service.py", "witness", "serve", "--port", str(port), "--key-file", str(key_file),
             "--state", str(state), *log_args],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=errors,
        )  # fmt: skip


def stop_witness(process: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then its exit status; one still running 15 s later is killed (None). Always
    leaves no process behind."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(15)
        return None


@contextlib.contextmanager
def running_witness(
    key_file: Path, state: Path, logs: dict[str, note.Verifier]
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``start_witness`` that always stops (or kills) its process, however the test ends."""
    process, base = start_witness(key_file, state, logs)
    try:
        yield process, base
    finally:
        stop_witness(process)


@pytest.mark.slow
def test_a_restarted_witness_refuses_what_is_inconsistent_with_what_it_cosigned(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """A real ``witness serve`` process: cosign, stop, start again on the same state, and a
    fork of the cosigned tree is refused (422), as is an old size it no longer holds (409)."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    state = tmp_path / "state.json"
    logs = {ORIGIN: log_key.verifier}
    eight = grown(8)
    with running_witness(key_file, state, logs) as (process, base):
        done = httpx.post(base + "/add-checkpoint", content=body(0, [], checkpoint(log_key, eight)))
        assert done.status_code == 200, done.text
        assert stop_witness(process) == 0
    with running_witness(key_file, state, logs) as (process, base):
        fork = grown(20, seed=4)
        forked = httpx.post(
            base + "/add-checkpoint", content=body(8, fork.hashes().consistency_proof(8), checkpoint(log_key, fork))
        )
        assert forked.status_code == 422, forked.text
        stale = httpx.post(base + "/add-checkpoint", content=body(0, [], checkpoint(log_key, grown(3))))
        assert (stale.status_code, stale.text) == (409, "8\n")
        good = grown(20)
        proof = good.hashes().consistency_proof(8)
        grew = httpx.post(base + "/add-checkpoint", content=body(8, proof, checkpoint(log_key, good)))
        assert grew.status_code == 200, grew.text
        assert stop_witness(process) == 0
    assert orjson.loads(state.read_bytes())[ORIGIN]["size"] == 20


@pytest.mark.slow
def test_two_witness_processes_on_one_state_file_cosign_one_of_racing_checkpoints(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """The state file's ``flock`` serializes processes too: two ``witness serve`` processes
    sharing one state file, sent checkpoints of different sizes from the same old size at the
    same moment, cosign exactly one; every other request is told the size that won."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    state = tmp_path / "state.json"
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(running_witness(key_file, state, {ORIGIN: log_key.verifier})) for _ in range(2)]
        http = stack.enter_context(httpx.Client(timeout=20))  # one client: no TLS set-up per request
        tree = grown(300)
        first = http.post(started[0][1] + "/add-checkpoint", content=body(0, [], checkpoint(log_key, grown(5))))
        assert first.status_code == 200, first.text
        old = 5
        for _ in range(6):  # rounds: one race can miss a missing lock, six rarely do
            bodies = []
            for size in range(old + 1, old + 41):
                view = tlog.TileHashes(size, tree.read)
                signed = note.sign_note(note.Checkpoint(ORIGIN, size, view.root()).text(), log_key)
                bodies.append(body(old, view.consistency_proof(old), signed))
            gate = threading.Barrier(len(bodies))

            def send(n: int, bodies: list[bytes] = bodies, gate: threading.Barrier = gate) -> httpx.Response:
                gate.wait(10)
                return http.post(started[n % 2][1] + "/add-checkpoint", content=bodies[n])

            with ThreadPoolExecutor(len(bodies)) as pool:
                answers = list(pool.map(send, range(len(bodies))))
            winners = [n for n, a in enumerate(answers) if a.status_code == 200]
            assert len(winners) == 1, sorted(a.status_code for a in answers)
            won = old + 1 + winners[0]
            assert {a.text for a in answers if a.status_code == 409} == {f"{won}\n"}
            assert all(a.status_code in (200, 409) for a in answers)
            assert orjson.loads(state.read_bytes())[ORIGIN]["size"] == won
            old = won
        assert [stop_witness(process) for process, _ in started] == [0, 0]
    assert state_dir(state) == ["state.json", "state.json.err", "state.json.lock", "witness.key"]


@pytest.mark.slow
def test_sigterm_right_after_start_ends_the_witness(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """A stop that arrives at once, before anything listens: the process ends promptly, with 0
    (or, while Python itself is still starting, by the signal's default action)."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    process = spawn_witness(key_file, tmp_path / "state.json", {ORIGIN: log_key.verifier}, free_port())
    try:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) in (0, -signal.SIGTERM)
    finally:
        stop_witness(process)


@pytest.mark.slow
def test_sigterm_during_start_up_while_the_state_is_locked_exits_0(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """Start-up waits for the state's lock (another witness process may be writing). Held by
    the test, the witness is caught there, before it listens; SIGTERM ends it with 0."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    state = tmp_path / "state.json"
    lock = tmp_path / "state.json.lock"
    port = free_port()
    with hold_lock(lock):
        process = spawn_witness(key_file, state, {ORIGIN: log_key.verifier}, port)
        try:
            wait_until(lambda: process.poll() is not None or lock_waiters(lock, process.pid) == 1, "it waits")
            assert process.poll() is None
            with pytest.raises(httpx.ConnectError):
                httpx.post(f"http://127.0.0.1:{port}/add-checkpoint", content=b"", timeout=5)
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0
        finally:
            stop_witness(process)
    assert "stopped during start-up" in (tmp_path / "state.json.err").read_text()


@pytest.mark.slow
def test_sigterm_during_a_request_answers_it_and_exits_0(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """A request waits for the state's lock (held by the test, as by another process) when
    SIGTERM comes: it is answered 503 at once, nothing is written, and the process exits 0."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused
    state = tmp_path / "state.json"
    lock = tmp_path / "state.json.lock"
    with running_witness(key_file, state, {ORIGIN: log_key.verifier}) as (process, base):
        with hold_lock(lock), ThreadPoolExecutor(1) as pool:
            sent = body(0, [], checkpoint(log_key, grown(4)))
            answer = pool.submit(httpx.post, base + "/add-checkpoint", content=sent, timeout=30)
            wait_until(lambda: answer.done() or lock_waiters(lock, process.pid) == 1, "the request waits")
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0
            response = answer.result()
        assert (response.status_code, response.text) == (503, "the witness is shutting down\n")
    assert state_dir(state) == ["state.json.err", "state.json.lock", "witness.key"]


def start_witness(key_file: Path, state: Path, logs: dict[str, note.Verifier]) -> tuple[subprocess.Popen[bytes], str]:
    """A ``witness serve`` process on a free port, answering; (process, base URL). The caller
    stops it (``running_witness`` does); one that does not start is killed here."""
    port = free_port()
    process = spawn_witness(key_file, state, logs, port)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                httpx.post(base + "/add-checkpoint", content=b"", timeout=1)
                return process, base
            except httpx.HTTPError:
                time.sleep(0.05)
    except BaseException:
        stop_witness(process)
        raise
    stop_witness(process)
    pytest.fail(f"the witness did not start (exit status {process.returncode})")


def test_witness_key_new_prints_the_private_key_then_the_verifier_key() -> None:
    done = subprocess.run(
        [sys.executable, "service.py", "witness", "key", "new", "--name", "witness.example/cli"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    private, public = done.stdout.splitlines()
    assert cosignature.Cosigner.parse(private).key == cosignature.CosignerKey.parse(public)
