"""The log with real processes: ``service.py serve`` and ``service.py worker`` (whose thread
integrates) on a real redis-server, a create that waits for its proof, and the ``verify``
command checking inclusion against a pinned log key and consistency with a kept checkpoint."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.transparency import note, timestamps
from tests.conftest import REPO, RedisServer, hash_of
from tests.local_tsa import LocalTsa
from tests.servers import ServicePool, WorkerProcess, create_key_cli, verify_cli, wait_until
from tests.test_verify_page import Page, browser  # noqa: F401  (the module fixture)

pytestmark = pytest.mark.slow
ORIGIN = "proc.example/log"


@pytest.fixture(scope="module")
def log_site(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("log-processes")
    signer = note.Signer.generate(ORIGIN)
    env = {"LOG_SIGNING_KEY": signer.encode(), "LOG_ORIGIN": ORIGIN, "LOG_STORE": f"file://{folder}/log"}
    import redis

    redis.Redis.from_url(redis_server.url).flushall()
    worker = WorkerProcess(folder, {"REDIS_URL": redis_server.url, **env})
    try:
        with ServicePool(folder) as pool:
            service = pool.start(redis_url=redis_server.url, env=env)
            key = create_key_cli(redis_server.url, project="log-processes", plan="pro")
            yield {"base": service.base_url, "key": key, "signer": signer, "folder": folder, "worker": worker}
    finally:
        worker.stop()


def create(site: dict[str, Any], label: str, wait: int | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {site['key']['api_key']}", "Content-Type": "application/json"}
    if wait is not None:
        headers["Prefer"] = f"wait={wait}"
    response = httpx.post(
        site["base"] + "/v1/receipts", headers=headers, json={"input_hash": hash_of(label)}, timeout=20
    )
    assert response.status_code == 201, response.text
    return response


def test_the_worker_integrates_and_a_waiting_create_gets_its_proof(log_site: dict[str, Any]) -> None:
    started = time.monotonic()
    body = create(log_site, "waited", wait=10).json()
    assert "index" in body["log"], f"no checkpoint within 10 s (worker log: {log_site['worker'].log()[-2000:]})"
    assert time.monotonic() - started < 10
    proof = note.parse_tlog_proof(body["log"]["proof"])
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, log_site["signer"].verifier)
    assert checkpoint.size > proof.index == body["log"]["index"]
    info = httpx.get(log_site["base"] + "/v1/log").json()
    assert info["log_vkey"] == log_site["signer"].verifier.encode()


def test_verify_checks_inclusion_and_consistency_with_a_kept_checkpoint(
    log_site: dict[str, Any], tmp_path: Path
) -> None:
    vkey = log_site["signer"].verifier.encode()
    first = create(log_site, "kept-1", wait=10).json()
    kept = tmp_path / "checkpoint.txt"
    kept.write_text(httpx.get(log_site["base"] + "/v1/log/checkpoint").text)
    for n in range(300):  # past a full tile, so the proof crosses tile levels
        create(log_site, f"later-{n}")
    newest = create(log_site, "kept-2", wait=10).json()
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_bytes(orjson.dumps(first))
    base = ["--base-url", log_site["base"], "--log-key", vkey]
    done = verify_cli(str(receipt_file), *base, "--since-checkpoint", str(kept))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "transparency log: in the log at index" in done.stdout
    assert "extends the older one" in done.stdout
    # A receipt the log does not hold (edited after the fact) is not shown to be in it.
    forged = dict(first["receipt"], chain_status="branch")
    receipt_file.write_bytes(orjson.dumps(forged))
    done = verify_cli(str(receipt_file), *base, "--json")
    report = orjson.loads(done.stdout)
    assert done.returncode == 1 and report["checks"]["log_inclusion"] is False
    # A "kept" checkpoint of a different history, signed with the log key: a fork, refused.
    old = note.parse_checkpoint(note.parse_note(kept.read_text()).text)
    fork = note.Checkpoint(ORIGIN, old.size, bytes(32))
    kept.write_text(note.sign_note(fork.text(), log_site["signer"]))
    receipt_file.write_bytes(orjson.dumps(newest))
    done = verify_cli(str(receipt_file), *base, "--since-checkpoint", str(kept), "--json")
    report = orjson.loads(done.stdout)
    assert done.returncode == 1, done.stdout
    assert report["checks"]["log_inclusion"] is True and report["checks"]["log_consistency"] is False
    # The wrong log key: not signed by the pinned key.
    other = note.Signer.generate(ORIGIN).verifier.encode()
    done = verify_cli(str(receipt_file), "--base-url", log_site["base"], "--log-key", other, "--json")
    assert done.returncode == 1 and "not signed by the pinned log key" in orjson.loads(done.stdout)["log"]["reason"]


def test_a_bundle_carries_its_proof_and_verifies_offline(log_site: dict[str, Any], tmp_path: Path) -> None:
    body = create(log_site, "bundled", wait=10).json()
    bundle = httpx.get(f"{log_site['base']}/v1/receipts/{body['receipt']['receipt_id']}/bundle").json()
    assert bundle["log"]["origin"] == ORIGIN and bundle["log"]["proof"] is not None
    assert bundle["timestamps"] == []
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(httpx.get(log_site["base"] + "/v1/public-key").text)
    bundle_file = tmp_path / "bundle.json"
    bundle_file.write_bytes(orjson.dumps(bundle))
    done = verify_cli(str(bundle_file), "--keys", str(keys_file), "--log-key", bundle["log"]["log_vkey"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "in the log at index" in done.stdout


def test_the_verify_page_shows_the_receipts_place_in_the_log(browser: Any, log_site: dict[str, Any]) -> None:  # noqa: F811
    """In real Chromium: the page checks the proof itself (WebCrypto) and says where the
    receipt is; a bundle whose proof was tampered with fails that check."""
    body = create(log_site, "page", wait=10).json()
    receipt_id = body["receipt"]["receipt_id"]
    tab = Page(browser, log_site["base"])
    try:
        tab.open(f"?receipt_id={receipt_id}")
        verdict, text = tab.verdict()
        assert verdict == "valid", text
        assert tab.checks()["log"] is True
        assert f"In the log at index {body['log']['index']}, checkpoint of size" in text
        assert f"signed by {ORIGIN}" in text
        assert ("GET", f"/v1/receipts/{receipt_id}/log-proof") in tab.api_requests()
        bundle = httpx.get(f"{log_site['base']}/v1/receipts/{receipt_id}/bundle").json()
        lines = bundle["log"]["proof"].split("\n")
        lines[1] = "index " + str(int(lines[1].split()[1]) + 1)  # the proof now names another place
        bundle["log"]["proof"] = "\n".join(lines)
        tab.open()
        verdict, text = tab.paste_and_verify(orjson.dumps(bundle).decode())
        assert verdict == "invalid", text
        assert tab.checks()["log"] is False
    finally:
        tab.close()


def test_the_embedded_server_runs_its_own_integrator(tmp_path: Path) -> None:
    """No REDIS_URL: the demo's server integrates the log itself, with an ephemeral key, and
    time-stamps its checkpoints when given a TSA."""
    tsa = LocalTsa(tmp_path / "tsa").start()
    env = {"LOG_TSA_URLS": tsa.url, "LOG_TSA_INTERVAL_S": "1"}
    with ServicePool(tmp_path) as pool:
        service = pool.start(redis_url=None, receipt_root=None, env=env)
        demo_key = re.search(r"eps_[A-Za-z0-9_-]{43}", service.stdout() + service.stderr())
        assert demo_key is not None, "the embedded server prints a demo key"
        headers = {"Authorization": f"Bearer {demo_key.group(0)}", "Prefer": "wait=10"}
        created = httpx.post(service.base_url + "/v1/receipts", headers=headers, json={"input_hash": hash_of("demo")})
        assert created.status_code == 201, created.text
        log = created.json()["log"]
        info = httpx.get(service.base_url + "/v1/log").json()
        proof = note.parse_tlog_proof(log["proof"])
        note.open_checkpoint(proof.checkpoint, note.Verifier.parse(info["log_vkey"]))
        assert info["origin"] == "localhost/v1/log" and log["index"] == proof.index
        receipt_id = created.json()["receipt"]["receipt_id"]
        bundle: dict[str, Any] = {}

        def stamped() -> bool:
            bundle.update(httpx.get(f"{service.base_url}/v1/receipts/{receipt_id}/bundle").json())
            return bool(bundle["timestamps"])

        wait_until(stamped, 20, "a time-stamp of the embedded log's checkpoint")
        text = note.parse_note(note.parse_tlog_proof(bundle["log"]["proof"]).checkpoint).text
        roots = timestamps.load_roots(tsa.roots_pem.read_bytes())
        timestamps.verify_token(base64.b64decode(bundle["timestamps"][0]["response_base64"]), text, roots)
    tsa.stop()


def test_the_monitor_passes_on_the_services_own_log(log_site: dict[str, Any], tmp_path: Path) -> None:
    def run() -> tuple[int, dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "service.py", "monitor", "--base-url", log_site["base"], "--log-key",
             log_site["signer"].verifier.encode(), "--state", str(tmp_path), "--once", "--json"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        return done.returncode, orjson.loads(done.stdout.splitlines()[-1])

    create(log_site, "monitored-1", wait=10)
    code, first = run()
    assert code == 0 and first["ok"] and first["new_entries"] == first["checkpoint"]["size"] > 0
    create(log_site, "monitored-2", wait=10)
    code, second = run()
    assert code == 0 and second["new_entries"] >= 2  # its receipt's entry and dsse leaf
