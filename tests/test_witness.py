"""The witness (C2SP tlog-witness and tlog-cosignature): every status, durability across a
restart, and one cosignature among concurrent requests for the same old size."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from receipts import cosignature, note, tlog
from tests.conftest import REPO, free_port
from tests.test_tlog import TileStore, leaves
from web.witness import witness_app

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


async def test_every_status_of_add_checkpoint(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, tmp_path / "state.json", "w1").asgi_client
    five, nine = grown(5), grown(9)
    first = await post(client, body(0, [], checkpoint(log_key, five)))
    assert first.status == 200, first.text
    cosigned = note.parse_note(checkpoint(log_key, five) + first.text)
    assert cosignature.cosignatures(cosigned, [cosigner.key]).keys() == {cosigner.key}
    again = await post(client, body(0, [], checkpoint(log_key, nine)))
    assert (again.status, again.text, again.headers["content-type"]) == (409, "5\n", "text/x.tlog.size")
    proof = nine.hashes().consistency_proof(5)
    assert (await post(client, body(5, proof, checkpoint(log_key, nine)))).status == 200
    # Unknown origin, no valid log signature, old larger than the checkpoint, malformed.
    other = note.Signer.generate("log.example/other")
    assert (
        await post(
            client, body(0, [], note.sign_note(note.Checkpoint("log.example/other", 1, b"\1" * 32).text(), other))
        )
    ).status == 404
    impostor = note.Signer.generate(ORIGIN)
    assert (await post(client, body(9, [], checkpoint(impostor, nine)))).status == 403
    assert (await post(client, body(10, [], checkpoint(log_key, nine)))).status == 400
    for bad in (
        b"old 01\n\n" + checkpoint(log_key, nine).encode(),
        b"nonsense",
        body(9, [b"short"], checkpoint(log_key, nine)),
    ):
        assert (await post(client, bad)).status == 400
    # A fork: size 12 from another history, with a proof from it.
    fork = grown(12, seed=2)
    forked = await post(client, body(9, fork.hashes().consistency_proof(9), checkpoint(log_key, fork)))
    assert forked.status == 422
    # Same size, another root: 422 (the contract's status; a fork, not a stale old size).
    same_size_fork = await post(client, body(9, [], checkpoint(log_key, grown(9, seed=3))))
    assert same_size_fork.status == 422
    # Same size, same root: cosigned again.
    assert (await post(client, body(9, [], checkpoint(log_key, nine)))).status == 200


async def test_concurrent_requests_for_one_old_size_get_one_cosignature(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """The check of the old size and the write are one step: of requests racing from size 5
    to different sizes, one wins and the rest are told the new size (no roll-back)."""
    client = witness_app(cosigner, {ORIGIN: log_key.verifier}, tmp_path / "state.json", "w2").asgi_client
    tree = grown(40)
    assert (await post(client, body(0, [], checkpoint(log_key, grown(5))))).status == 200
    requests = []
    for size in range(6, 30):
        view = tlog.TileHashes(size, tree.read)
        signed = note.sign_note(note.Checkpoint(ORIGIN, size, view.root()).text(), log_key)
        requests.append(post(client, body(5, view.consistency_proof(5), signed)))
    answers = await asyncio.gather(*requests)
    assert sorted(a.status for a in answers).count(200) == 1
    sizes = {a.text for a in answers if a.status == 409}
    assert len(sizes) == 1, "every loser is told the one size that won"


def test_a_restarted_witness_refuses_what_is_inconsistent_with_what_it_cosigned(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """A real ``witness serve`` process: cosign, stop, start again on the same state, and a
    fork of the cosigned tree is refused (422), as is an old size it no longer holds (409)."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    state = tmp_path / "state.json"

    def start() -> tuple[subprocess.Popen[bytes], str]:
        return start_witness(key_file, state, {ORIGIN: log_key.verifier})

    eight = grown(8)
    process, base = start()
    try:
        done = httpx.post(base + "/add-checkpoint", content=body(0, [], checkpoint(log_key, eight)))
        assert done.status_code == 200
    finally:
        process.terminate()
        process.wait(10)
    process, base = start()
    try:
        fork = grown(20, seed=4)
        forked = httpx.post(
            base + "/add-checkpoint", content=body(8, fork.hashes().consistency_proof(8), checkpoint(log_key, fork))
        )
        assert forked.status_code == 422
        stale = httpx.post(base + "/add-checkpoint", content=body(0, [], checkpoint(log_key, grown(3))))
        assert (stale.status_code, stale.text) == (409, "8\n")
        good = grown(20)
        proof = good.hashes().consistency_proof(8)
        assert (
            httpx.post(base + "/add-checkpoint", content=body(8, proof, checkpoint(log_key, good))).status_code == 200
        )
    finally:
        process.terminate()
        process.wait(10)


def test_two_witness_processes_on_one_state_file_cosign_one_of_racing_checkpoints(
    tmp_path: Path, log_key: note.Signer, cosigner: cosignature.Cosigner
) -> None:
    """The state file's ``flock`` serializes processes too: two ``witness serve`` processes
    sharing one state file, sent checkpoints of different sizes from the same old size at the
    same moment, cosign exactly one; every other request is told the size that won."""
    key_file = tmp_path / "witness.key"
    key_file.write_text(cosigner.encode() + "\n")
    state = tmp_path / "state.json"
    started = [start_witness(key_file, state, {ORIGIN: log_key.verifier}) for _ in range(2)]
    try:
        tree = grown(300)
        assert httpx.post(started[0][1] + "/add-checkpoint", content=body(0, [], checkpoint(log_key, grown(5))))
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
                return httpx.post(started[n % 2][1] + "/add-checkpoint", content=bodies[n], timeout=20)

            with ThreadPoolExecutor(len(bodies)) as pool:
                answers = list(pool.map(send, range(len(bodies))))
            winners = [n for n, a in enumerate(answers) if a.status_code == 200]
            assert len(winners) == 1, sorted(a.status_code for a in answers)
            won = old + 1 + winners[0]
            assert {a.text for a in answers if a.status_code == 409} == {f"{won}\n"}
            assert all(a.status_code in (200, 409) for a in answers)
            assert orjson.loads(state.read_bytes())[ORIGIN]["size"] == won
            old = won
    finally:
        for process, _ in started:
            process.terminate()
            process.wait(10)


def start_witness(key_file: Path, state: Path, logs: dict[str, note.Verifier]) -> tuple[subprocess.Popen[bytes], str]:
    """A ``witness serve`` process on a free port, answering; (process, base URL)."""
    port = free_port()
    log_args = [arg for origin, key in logs.items() for arg in ("--log", f"{origin}={key.encode()}")]
    process = subprocess.Popen(
        [sys.executable, "service.py", "witness", "serve", "--port", str(port), "--key-file", str(key_file),
         "--state", str(state), *log_args],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.post(base + "/add-checkpoint", content=b"", timeout=1)
            return process, base
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    pytest.fail("the witness did not start")


def test_witness_key_new_prints_the_private_key_then_the_verifier_key() -> None:
    done = subprocess.run(
        [sys.executable, "service.py", "witness", "key", "new", "--name", "witness.example/cli"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    private, public = done.stdout.splitlines()
    assert cosignature.Cosigner.parse(private).key == cosignature.CosignerKey.parse(public)
