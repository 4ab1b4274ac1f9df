"""The log with witnesses: two real witness processes (and one that is down) cosign each
checkpoint; ``verify --log-policy`` with a quorum of 2 passes, and fails when a cosignature
is removed or forged; a witness the log lost track of answers 409 and is caught up."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof.jobs.log_config import LogConfig
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.transparency import cosignature, note, policy
from tests.conftest import free_port
from tests.servers import verify_cli
from tests.test_log import ORIGIN, issue, log_app, published
from tests.test_witness import start_witness, stop_witness

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture
def witnesses(signer: note.Signer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two witness processes with fresh state, and a policy that also names one that is down."""
    folder = tmp_path_factory.mktemp("witnesses")
    started = []
    cosigners = {}
    try:
        for name in ("w1", "w2"):
            cosigner = cosignature.Cosigner.generate(f"witness.example/{name}")
            key_file = folder / f"{name}.key"
            key_file.write_text(cosigner.encode() + "\n")
            key_file.chmod(0o600)  # a key file others may read is refused
            process, base = start_witness(key_file, folder / f"{name}.state", {ORIGIN: signer.verifier})
            started.append(process)
            cosigners[name] = (cosigner, base)
        down = cosignature.Cosigner.generate("witness.example/down")
        lines = [f"log {signer.verifier.encode()}"]
        lines += [f"witness {name} {c.key.encode()} {base}" for name, (c, base) in cosigners.items()]
        lines += [f"witness w3 {down.key.encode()} http://127.0.0.1:{free_port()}", "group both 2 w1 w2", "quorum both"]
        text = "\n".join(lines) + "\n"
        (folder / "policy.txt").write_text(text)
        yield {"policy": policy.parse_policy(text), "policy_path": folder / "policy.txt", "cosigners": cosigners}
    finally:
        for process in started:
            stop_witness(process)  # SIGTERM, then kill: none is left behind


async def test_checkpoints_carry_both_cosignatures_and_verify_applies_the_quorum(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, witnesses: dict[str, Any], tmp_path: Path
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="witnessed", plan="pro")
    config = LogConfig(ORIGIN, signer, policy=witnesses["policy"], witness_timeout_ms=3000)
    worker = Integrator(store.log_queue, log_store, config)
    await worker.prepare()
    receipts = await issue(app, key, [f"w{n}" for n in range(5)])
    await worker.step(force=True)
    _, response = await client.get("/v1/log/checkpoint")
    checked = policy.check_quorum(response.text, witnesses["policy"], now=2**40)
    assert checked.ok, checked.reason
    assert set(checked.cosigned) == {"w1", "w2"}, "the witness that is down did not stop the log"
    # Offline: a bundle, the saved keys, the policy.
    _, bundle_response = await client.get(f"/v1/receipts/{receipts[0]['receipt_id']}/bundle")
    bundle = bundle_response.json
    keys_file = tmp_path / "keys.json"
    _, published = await client.get("/v1/public-key")  # the service's keys, saved
    keys_file.write_bytes(published.body)
    bundle_file = tmp_path / "bundle.json"

    def run(document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        bundle_file.write_bytes(orjson.dumps(document))
        return verify_cli(str(bundle_file), "--keys", str(keys_file), "--log-policy", str(witnesses["policy_path"]))

    done = run(bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the quorum is met (cosigned by w1, w2)" in done.stdout
    proof = bundle["log"]["proof"]
    w2_line = next(line for line in proof.split("\n") if line.startswith("\u2014 witness.example/w2 "))
    removed = dict(bundle, log=dict(bundle["log"], proof=proof.replace(w2_line + "\n", "")))
    done = run(removed)
    assert done.returncode == 1 and "NOT met" in done.stdout, done.stdout
    name, blob = w2_line.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    forged_line = name + " " + base64.b64encode(bytes(raw)).decode()
    forged = dict(bundle, log=dict(bundle["log"], proof=proof.replace(w2_line, forged_line)))
    done = run(forged)
    assert done.returncode == 1 and "NOT met" in done.stdout, done.stdout


async def test_a_witness_the_log_lost_track_of_answers_409_and_is_caught_up(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, witnesses: dict[str, Any]
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="caught-up", plan="pro")
    config = LogConfig(ORIGIN, signer, policy=witnesses["policy"], witness_timeout_ms=3000)
    worker = Integrator(store.log_queue, log_store, config)
    await worker.prepare()
    await issue(app, key, ["c0"])  # its entry and dsse leaf, and the app's key certificate: 3
    await worker.step(force=True)
    first = policy.check_quorum((await client.get("/v1/log/checkpoint"))[1].text, witnesses["policy"], now=2**40)
    assert set(first.cosigned) == {"w1", "w2"}
    # A new integrator that lost what each witness last cosigned starts from size 0: the
    # witnesses answer 409 with their size, and it resends with the proof from there.
    await log_store.objects.delete(".state/witnesses")
    await issue(app, key, ["c-next"])
    successor = Integrator(store.log_queue, log_store, config)
    await successor.prepare()
    await successor.step(force=True)
    again = policy.check_quorum((await client.get("/v1/log/checkpoint"))[1].text, witnesses["policy"], now=2**40)
    assert (await published(log_store, signer)).size == 5
    assert set(again.cosigned) == {"w1", "w2"}, "after a 409 the log resent from the witness's size"
    assert await log_store.witness_sizes() == {"w1": 5, "w2": 5}
