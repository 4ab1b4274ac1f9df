"""Trust that does not rest on the operator, end to end with real processes: ``service.py
serve`` and ``service.py worker`` on a real redis-server, two ``witness serve`` processes and
a local RFC 3161 TSA (``openssl ts -reply``). Published checkpoints carry both cosignatures
and get time-stamps; ``verify --log-policy`` (quorum 2) with ``--tsa-roots`` passes on a
receipt, online and from a bundle, and fails when a cosignature is removed or forged."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.transparency import cosignature, note, policy, timestamps
from tests.conftest import RedisServer
from tests.local_tsa import LocalTsa
from tests.servers import ServicePool, WorkerProcess, create_key_cli, verify_cli, wait_until
from tests.test_log_processes import create
from tests.test_witness import start_witness, stop_witness

pytestmark = pytest.mark.slow
ORIGIN = "evidence.example/log"


@pytest.fixture(scope="module")
def site(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("log-evidence")
    signer = note.Signer.generate(ORIGIN)
    import redis

    redis.Redis.from_url(redis_server.url).flushall()
    tsa = LocalTsa(folder / "tsa").start()
    witnesses = []
    lines = [f"log {signer.verifier.encode()}"]
    try:
        for name in ("w1", "w2"):
            cosigner = cosignature.Cosigner.generate(f"witness.example/{name}")
            (folder / f"{name}.key").write_text(cosigner.encode() + "\n")
            (folder / f"{name}.key").chmod(0o600)  # a key file others may read is refused
            process, base = start_witness(folder / f"{name}.key", folder / f"{name}.state", {ORIGIN: signer.verifier})
            witnesses.append(process)
            lines.append(f"witness {name} {cosigner.key.encode()} {base}")
        lines += ["group both 2 w1 w2", "quorum both"]
        (folder / "policy.txt").write_text("\n".join(lines) + "\n")
        env = {
            "LOG_SIGNING_KEY": signer.encode(),
            "LOG_ORIGIN": ORIGIN,
            "LOG_WITNESS_POLICY": str(folder / "policy.txt"),
            "LOG_WITNESS_TIMEOUT_MS": "3000",
            "LOG_TSA_URLS": tsa.url,
            "LOG_TSA_INTERVAL_S": "1",
            "LOG_TSA_ROOTS": str(tsa.roots_pem),
            "LOG_STORE": f"file://{folder}/log",
        }
        worker = WorkerProcess(folder, {"REDIS_URL": redis_server.url, **env})
        try:
            with ServicePool(folder) as pool:
                service = pool.start(redis_url=redis_server.url, env=env)
                key = create_key_cli(redis_server.url, project="evidence", plan="pro")
                yield {
                    "base": service.base_url,
                    "key": key,
                    "signer": signer,
                    "tsa": tsa,
                    "folder": folder,
                    "policy": folder / "policy.txt",
                    "worker": worker,
                }
        finally:
            worker.stop()
    finally:
        for process in witnesses:
            stop_witness(process)
        tsa.stop()


def stamped_bundle(site: dict[str, Any], receipt_id: str) -> dict[str, Any]:
    """The receipt's bundle once its proof's checkpoint has a time-stamp (one interval, 1 s)."""
    found: dict[str, Any] = {}

    def ready() -> bool:
        found.update(httpx.get(f"{site['base']}/v1/receipts/{receipt_id}/bundle").json())
        return bool(found.get("timestamps"))

    wait_until(ready, 30, f"a time-stamped checkpoint covering {receipt_id} (worker: {site['worker'].log()[-1500:]})")
    return found


def test_checkpoints_carry_both_cosignatures_and_time_stamps(site: dict[str, Any], tmp_path: Path) -> None:
    body = create(site, "evidence-1", wait=10).json()
    assert "index" in body["log"], site["worker"].log()[-2000:]
    bundle = stamped_bundle(site, body["receipt"]["receipt_id"])
    proof = note.parse_tlog_proof(bundle["log"]["proof"])
    trusted = policy.parse_policy(site["policy"].read_text())
    quorum = policy.check_quorum(proof.checkpoint, trusted, now=2**40)
    assert quorum.ok and set(quorum.cosigned) == {"w1", "w2"}, quorum.reason
    text = note.parse_note(proof.checkpoint).text
    size = note.parse_checkpoint(text).size
    roots = timestamps.load_roots(site["tsa"].roots_pem.read_bytes())
    stamp = timestamps.verify_token(base64.b64decode(bundle["timestamps"][0]["response_base64"]), text, roots)
    assert stamp.tsa_name == "CN=Local Test TSA"
    served = httpx.get(f"{site['base']}/v1/log/checkpoints/{size}/timestamps").json()
    assert served["tree_size"] == size and served["timestamps"] == bundle["timestamps"]
    assert note.parse_note(served["checkpoint"]).text == text
    # The log publishes its witnesses and policy.
    info = httpx.get(site["base"] + "/v1/log").json()
    assert {w["name"] for w in info["witnesses"]} == {"w1", "w2"} and "quorum both" in info["policy"]


def test_verify_with_the_policy_and_tsa_roots_passes_and_fails_on_a_missing_or_forged_cosignature(
    site: dict[str, Any], tmp_path: Path
) -> None:
    body = create(site, "evidence-2", wait=10).json()
    receipt_id = body["receipt"]["receipt_id"]
    bundle = stamped_bundle(site, receipt_id)
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(httpx.get(site["base"] + "/v1/public-key").text)
    evidence = ["--log-policy", str(site["policy"]), "--tsa-roots", str(site["tsa"].roots_pem)]
    # Online: the receipt alone, the service named.
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_bytes(orjson.dumps(body))
    done = verify_cli(str(receipt_file), "--base-url", site["base"], *evidence)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ok]   witnesses: the quorum is met (cosigned by w1, w2)" in done.stdout
    assert "[ok]   time: the receipt existed by 20" in done.stdout
    assert "time-stamped by CN=Local Test TSA" in done.stdout and "Verdict: VALID" in done.stdout
    # Offline: the bundle and saved keys.
    bundle_file = tmp_path / "bundle.json"
    bundle_file.write_bytes(orjson.dumps(bundle))
    done = verify_cli(str(bundle_file), "--keys", str(keys_file), *evidence, "--json")
    report = orjson.loads(done.stdout)
    assert done.returncode == 0, done.stdout
    assert report["checks"]["log_quorum"] and report["checks"]["log_time"]
    assert sorted(report["log"]["quorum"]["cosigned"]) == ["w1", "w2"]
    # One cosignature removed: the quorum of 2 is not met.
    proof_text = bundle["log"]["proof"]
    lines = proof_text.split("\n")
    cosignature_lines = [n for n, line in enumerate(lines) if line.startswith("\u2014 witness.example/")]
    assert len(cosignature_lines) == 2
    removed = "\n".join(line for n, line in enumerate(lines) if n != cosignature_lines[0])
    bundle_file.write_bytes(orjson.dumps(dict(bundle, log=dict(bundle["log"], proof=removed))))
    done = verify_cli(str(bundle_file), "--keys", str(keys_file), *evidence, "--json")
    report = orjson.loads(done.stdout)
    assert done.returncode == 1 and report["checks"]["log_quorum"] is False
    assert report["checks"]["log_inclusion"] and report["checks"]["log_time"], "only the quorum fails"
    # One cosignature forged (a byte of its signature flipped): not counted either.
    line = lines[cosignature_lines[1]]
    prefix, signature = line.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(signature))
    raw[-1] ^= 1
    forged_lines = list(lines)
    forged_lines[cosignature_lines[1]] = f"{prefix} {base64.b64encode(bytes(raw)).decode()}"
    bundle_file.write_bytes(orjson.dumps(dict(bundle, log=dict(bundle["log"], proof="\n".join(forged_lines)))))
    done = verify_cli(str(bundle_file), "--keys", str(keys_file), *evidence, "--json")
    report = orjson.loads(done.stdout)
    assert done.returncode == 1 and report["checks"]["log_quorum"] is False
