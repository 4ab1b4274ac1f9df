"""docs/examples/witness-policy.txt works for real, as docs/examples/README.md says.

A service (embedded store) signs its log with the published test key of docs/log-vectors.md
and sends each checkpoint to three ``witness serve`` processes holding the example's witness
keys, made from the seeds docs/examples/README.md prints. A receipt's bundle, once its
checkpoint carries the cosignatures (read from the service, polled), passes
``service.py verify BUNDLE --keys KEYS --log-policy docs/examples/witness-policy.txt``; with
two witnesses stopped, the next receipt's checkpoint carries one cosignature, one fewer than
the quorum, and the same command exits 1.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.transparency import note, policy
from execution_proof.transparency.cosignature import Cosigner
from tests.conftest import REPO, hash_of
from tests.servers import ServicePool, verify_cli, wait_until
from tests.test_witness import start_witness, stop_witness

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "docs" / "examples" / "witness-policy.txt"
EXAMPLE_README = REPO / "docs" / "examples" / "README.md"
ORIGIN = "example.com/log"
LOG_SEED = hashlib.sha256(b"execution-proof-service log test vector key").digest()
WITNESSES = {f"w{i}": (f"witness{i}.example.net", f"execution-proof-service witness {i} test key") for i in (1, 2, 3)}
WAIT_S = 30.0


def log_signer() -> note.Signer:
    signer = note.Signer.parse("PRIVATE+KEY+example.com/log+b52d4e6b+AYRKr7pLKNyAjU6Zr6+T2lMKuusWKho9EdrXGLKlBMmh")
    assert signer.seed == LOG_SEED
    return signer


def witness_cosigners() -> dict[str, Cosigner]:
    return {local: Cosigner(name, hashlib.sha256(seed.encode()).digest()) for local, (name, seed) in WITNESSES.items()}


def example_policy() -> policy.Policy:
    return policy.parse_policy(EXAMPLE.read_bytes())


def test_the_example_names_the_documented_keys_and_a_quorum_of_two() -> None:
    parsed = example_policy()
    assert [key.encode() for key in parsed.log_keys()] == [log_signer().verifier.encode()]
    cosigners = witness_cosigners()
    assert {name: w.key for name, w in parsed.witnesses.items()} == {name: c.key for name, c in cosigners.items()}
    assert parsed.satisfied({"w1", "w3"}) and not parsed.satisfied({"w2"})
    # The README's table prints the same keys and seeds.
    readme = EXAMPLE_README.read_text()
    assert log_signer().verifier.encode() in readme
    for local, (_name, seed) in WITNESSES.items():
        assert cosigners[local].key.encode() in readme
        assert f"SHA-256(`{seed}`)" in readme


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The service and the three witnesses; the service's LOG_WITNESS_POLICY is the example
    itself, its witness URLs pointed at the local processes."""
    folder = tmp_path_factory.mktemp("policy-example")
    signer = log_signer()
    processes: dict[str, Any] = {}
    try:
        text = EXAMPLE.read_text()
        for local, cosigner in witness_cosigners().items():
            key_file = folder / f"{local}.key"
            key_file.write_text(cosigner.encode() + "\n")
            key_file.chmod(0o600)  # a key file others may read is refused
            process, base = start_witness(key_file, folder / f"{local}.state", {ORIGIN: signer.verifier})
            processes[local] = process
            public_url = f"https://{WITNESSES[local][0]}/"
            assert public_url in text
            text = text.replace(public_url, base)
        (folder / "service-policy.txt").write_text(text)
        env = {
            "LOG_SIGNING_KEY": signer.encode(),
            "LOG_ORIGIN": ORIGIN,
            "LOG_WITNESS_POLICY": str(folder / "service-policy.txt"),
            # Local witnesses answer in milliseconds; with two stopped, a checkpoint waits this long.
            "LOG_WITNESS_TIMEOUT_MS": "3000",
        }
        with ServicePool(folder) as pool:
            service = pool.start(redis_url=None, receipt_root=None, env=env)
            demo_key = re.search(r"eps_[A-Za-z0-9_-]{43}", service.stdout() + service.stderr())
            assert demo_key is not None, "the embedded server prints a demo key"
            keys = httpx.get(service.base_url + "/v1/public-key", timeout=10)
            assert keys.status_code == 200, keys.text
            (folder / "keys.json").write_bytes(keys.content)
            assert httpx.get(service.base_url + "/v1/log", timeout=10).json()["log_vkey"] == signer.verifier.encode()
            yield {
                "base": service.base_url,
                "api_key": demo_key.group(0),
                "folder": folder,
                "witnesses": processes,
            }
    finally:
        for process in processes.values():
            stop_witness(process)


def issue(site: dict[str, Any], label: str) -> str:
    created = httpx.post(
        site["base"] + "/v1/receipts",
        headers={"Authorization": f"Bearer {site['api_key']}"},
        json={"input_hash": hash_of(label)},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    receipt_id: str = created.json()["receipt"]["receipt_id"]
    return receipt_id


def bundle_once(site: dict[str, Any], receipt_id: str, ready: Any) -> Path:
    """Poll the bundle until ``ready(checked quorum)`` holds for its proof's checkpoint; save it."""
    saved: dict[str, bytes] = {}

    def has_it() -> bool:
        answer = httpx.get(f"{site['base']}/v1/receipts/{receipt_id}/bundle", timeout=10)
        assert answer.status_code == 200, answer.text
        proof = answer.json()["log"]["proof"]
        if proof is None:
            return False
        checked = policy.check_quorum(note.parse_tlog_proof(proof).checkpoint, example_policy(), 2**40)
        if not ready(checked):
            return False
        saved["bundle"] = answer.content
        return True

    wait_until(has_it, WAIT_S, f"the bundle of {receipt_id} with the expected cosignatures")
    path: Path = site["folder"] / f"{receipt_id}.bundle.json"
    path.write_bytes(saved["bundle"])
    return path


def verify_with_example(site: dict[str, Any], bundle: Path) -> tuple[int, str]:
    done = verify_cli(str(bundle), "--keys", str(site["folder"] / "keys.json"), "--log-policy", str(EXAMPLE))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout + done.stderr


def test_a_bundle_cosigned_by_the_witnesses_meets_the_example_policy(example_site: dict[str, Any]) -> None:
    receipt_id = issue(example_site, "policy-example-met")
    bundle = bundle_once(example_site, receipt_id, lambda checked: checked.ok)
    status, output = verify_with_example(example_site, bundle)
    assert status == 0, output
    line = next((line for line in output.splitlines() if "witnesses:" in line), None)
    assert line is not None, output
    assert "[ok]" in line and "the quorum is met (cosigned by " in line, line
    assert sum(name in line for name in WITNESSES) >= 2, line


def test_one_cosignature_fewer_than_the_quorum_is_not_met(example_site: dict[str, Any]) -> None:
    for local in ("w2", "w3"):
        stop_witness(example_site["witnesses"][local])
    receipt_id = issue(example_site, "policy-example-not-met")
    bundle = bundle_once(example_site, receipt_id, lambda checked: set(checked.cosigned) == {"w1"})
    proof = orjson.loads(bundle.read_bytes())["log"]["proof"]
    assert not policy.check_quorum(note.parse_tlog_proof(proof).checkpoint, example_policy(), 2**40).ok
    status, output = verify_with_example(example_site, bundle)
    assert status == 1, output
    line = next((line for line in output.splitlines() if "witnesses:" in line), None)
    assert line is not None, output
    assert "[FAIL]" in line and "the quorum 'two-of-three' is NOT met (valid cosignatures: w1)" in line, line
