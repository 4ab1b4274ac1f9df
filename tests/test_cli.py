"""The command line (README.md, "Command line"), run as ``python service.py ...`` subprocesses.

Operator verbs (``keys create``/``revoke``) are checked against a
running server on the session's real redis-server; ``hash`` against hashlib; ``verify``
fully offline (the server that issued the receipts is stopped first) and through a
running service (``--base-url``, ``--chain``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from execution_proof.kv.keys import receipt_key
from execution_proof.receipts.encoding import b64url_decode
from execution_proof.receipts.key_certificates import KeyVerdict, root_kid
from execution_proof.receipts.signing import load_key_ring, new_key_set
from tests.conftest import ASSETS, REPO, RedisServer, auth, free_port, hash_of
from tests.servers import (
    ServicePool,
    ServiceProcess,
    assert_error_body,
    clean_env,
    create_key_cli,
    redis_snapshot,
    run_cli,
    service_pool_fixture,
)

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

API_KEY_RE = re.compile(r"eps_[A-Za-z0-9_-]{43}")
HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")

module_services = service_pool_fixture("module")


@pytest.fixture(scope="module")
def cli_root(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A receipt root made by ``signing-key root new --signer file:…``: its printed JSON, used
    as the main server's ``RECEIPT_ROOT_KEY``."""
    path = tmp_path_factory.mktemp("root") / "receipt-root.key"
    done = run_cli("signing-key", "root", "new", "--signer", f"file:{path}")
    assert done.returncode == 0, done.stderr
    printed: dict[str, Any] = orjson.loads(done.stdout)
    return printed


@pytest.fixture(scope="module")
def service(module_services: ServicePool, redis_server: RedisServer, cli_root: dict[str, Any]) -> ServiceProcess:
    return module_services.start(
        workers=1, redis_url=redis_server.url, receipt_root={"RECEIPT_ROOT_KEY": cli_root["signer"]}
    )


@pytest.fixture
def http(service: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.base_url, timeout=10.0) as client:
        yield client


@pytest.fixture
def key(service: ServiceProcess, redis_server: RedisServer) -> dict[str, Any]:
    return create_key_cli(redis_server.url, project="cli", plan="pro")


def issue(http: httpx.Client, key: dict[str, Any], **fields: Any) -> httpx.Response:
    response = http.post("/v1/receipts", content=orjson.dumps(fields), headers=auth(key))
    assert response.status_code == 201, response.text
    return response


def dead_base_url() -> str:
    """A loopback URL where nothing listens: any attempt to go online fails loudly."""
    return f"http://127.0.0.1:{free_port()}"


def verify(*args: str | Path, base_url: str | None = None) -> Any:
    """``service.py verify ARGS``; SERVICE_BASE_URL points nowhere unless ``base_url`` is given."""
    return run_cli("verify", *map(str, args), env={"SERVICE_BASE_URL": base_url or dead_base_url()})


def failed_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "[FAIL]" in line]


# --- the server's receipt root ------------------------------------------------------------


def test_signing_key_root_new_makes_the_root_that_certifies_the_servers_key(
    cli_root: dict[str, Any], http: httpx.Client, key: dict[str, Any]
) -> None:
    assert set(cli_root) == {"kid", "public_key_base64url", "sha256_fingerprint", "signer"}
    public = b64url_decode(cli_root["public_key_base64url"])
    assert len(public) == 32 and cli_root["kid"] == root_kid(public)
    assert cli_root["sha256_fingerprint"] == "sha256:" + hashlib.sha256(public).hexdigest()
    path = Path(cli_root["signer"].removeprefix("file:"))
    assert path.stat().st_mode & 0o777 == 0o600, "the root's file is its owner's alone"

    published = http.get("/v1/public-key")
    assert published.status_code == 200
    body = published.json()
    # The session's Redis may hold other roots of earlier tests' services; this one is listed.
    root = {"kid": cli_root["kid"], "alg": "Ed25519", "public_key_base64url": cli_root["public_key_base64url"]}
    assert root in body["roots"]
    receipt = issue(http, key, input_hash=hash_of("signed-by-a-certified-key")).json()["receipt"]
    assert receipt["sig_kid"] == body["active_kid"] and receipt["sig_kid"].startswith("key-")
    ring = load_key_ring(body).with_roots({cli_root["kid"]: public})
    assert ring.judge(receipt["sig_kid"], receipt["created_at"]) is KeyVerdict.OK
    assert ring.verify(receipt["sig_kid"], receipt["receipt_hash"], receipt["signature"])
    assert "private" not in published.text


# --- keys create / revoke ------------------------------------------------------------


@pytest.mark.parametrize("plan", ["free", "basic", "pro"])
def test_keys_create_prints_the_new_key(redis_server: RedisServer, plan: str) -> None:
    created = create_key_cli(redis_server.url, project=f"plan-{plan}", plan=plan)
    assert {"api_key", "project_id", "actor_id", "plan"} <= set(created)
    assert API_KEY_RE.fullmatch(created["api_key"]), created["api_key"]
    assert len(b64url_decode(created["api_key"].removeprefix("eps_"))) == 32
    assert created["project_id"].startswith("prj_")
    assert created["actor_id"].startswith("act_")
    assert created["plan"] == plan
    assert created["key_hash"] == "sha256:" + hashlib.sha256(created["api_key"].encode()).hexdigest()


def test_keys_create_makes_distinct_projects_and_keys(redis_server: RedisServer) -> None:
    one, two = (create_key_cli(redis_server.url, project="distinct", plan="free") for _ in range(2))
    assert one["api_key"] != two["api_key"]
    assert one["project_id"] != two["project_id"]
    assert one["actor_id"] != two["actor_id"]


def test_keys_create_refuses_a_name_another_project_has(redis_server: RedisServer) -> None:
    name = f"same-name-{free_port()}"
    env = {"REDIS_URL": redis_server.url}
    first = run_cli("keys", "create", "--project", name, "--plan", "free", env=env)
    assert first.returncode == 0, first.stderr
    project_id = orjson.loads(first.stdout)["project_id"]
    again = run_cli("keys", "create", "--project", name, "--plan", "pro", env=env)
    assert again.returncode == 1 and again.stdout == ""
    (line,) = again.stderr.strip().splitlines()
    assert f"a project named '{name}' already exists ({project_id})" in line and "keys reissue" in line
    listed = run_cli("keys", "list", "--project", name, env=env)
    assert listed.returncode == 0, listed.stderr
    assert orjson.loads(listed.stdout)["project_id"] == project_id
    assert len(orjson.loads(listed.stdout)["keys"]) == 1, "the refused create added no key"


def test_keys_create_without_redis_url_exits_2() -> None:
    done = run_cli("keys", "create", "--project", "nowhere", "--plan", "free")
    assert done.returncode == 2
    assert "REDIS_URL" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("redis_url", "message"),
    [
        ("redis://127.0.0.1:{port}/0", "unreachable"),
        ("http://operator:s3cret-password@127.0.0.1:{port}/0", "not a Redis URL"),
    ],
    ids=["unreachable", "not-a-redis-url"],
)
def test_keys_create_with_a_bad_store_exits_2_without_a_traceback(redis_url: str, message: str) -> None:
    url = redis_url.format(port=free_port())
    done = run_cli("keys", "create", "--project", "nowhere", "--plan", "free", env={"REDIS_URL": url})
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert "s3cret" not in done.stderr
    assert done.stdout == ""


def wait_for_status(http: httpx.Client, key: dict[str, Any], status: int, timeout: float = 5.0) -> httpx.Response:
    """POST a fresh create until it answers ``status`` (bounded), returning the last answer."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        attempt += 1
        response = http.post(
            "/v1/receipts",
            content=orjson.dumps({"input_hash": hash_of(f"poll-{attempt}-{time.time()}")}),
            headers=auth(key),
        )
        if response.status_code == status or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


@pytest.mark.parametrize("by", ["--api-key", "--key-hash"])
def test_keys_revoke_makes_the_key_401(
    http: httpx.Client, key: dict[str, Any], redis_server: RedisServer, by: str
) -> None:
    issue(http, key, input_hash=hash_of("before-revoke"))
    value = key["api_key"] if by == "--api-key" else key["key_hash"]
    done = run_cli("keys", "revoke", by, value, env={"REDIS_URL": redis_server.url})
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout) == {"revoked": True, "key_hash": key["key_hash"]}
    assert_error_body(wait_for_status(http, key, 401), 401, "unauthorized")
    other = create_key_cli(redis_server.url, project="not-revoked", plan="free")
    issue(http, other, input_hash=hash_of("other key still works"))


@pytest.mark.parametrize(
    ("by", "value"),
    [("--api-key", "eps_" + "A" * 43), ("--key-hash", "sha256:" + "0" * 64)],
)
def test_keys_revoke_unknown_key_exits_1(redis_server: RedisServer, by: str, value: str) -> None:
    before = redis_snapshot(redis_server.url)
    done = run_cli("keys", "revoke", by, value, env={"REDIS_URL": redis_server.url})
    assert done.returncode == 1
    assert orjson.loads(done.stdout)["revoked"] is False
    assert redis_snapshot(redis_server.url) == before


def test_keys_revoke_malformed_key_hash_exits_2(redis_server: RedisServer) -> None:
    done = run_cli("keys", "revoke", "--key-hash", "sha256:nothex", env={"REDIS_URL": redis_server.url})
    assert done.returncode == 2
    assert "--key-hash" in done.stderr


# --- hash ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 11, 5 * 1024 * 1024 + 123], ids=["empty", "small", "multi-MB"])
def test_hash_equals_hashlib(tmp_path: Path, size: int) -> None:
    data = hashlib.shake_256(b"content").digest(size) if size else b""
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    done = run_cli("hash", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sha256:" + hashlib.sha256(data).hexdigest()


def test_hash_with_salt_is_reproducible(tmp_path: Path) -> None:
    data = b"the raw input never leaves this machine\n"
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    salted = run_cli("hash", str(path), "--salt")
    assert salted.returncode == 0, salted.stderr
    (first,) = salted.stdout.splitlines()  # stdout: the bare hash line alone; the salt to keep is on stderr
    found = re.search(r"^salt: ([0-9a-f]+)$", salted.stderr, re.MULTILINE)
    assert found, salted.stderr
    salt = found.group(1)
    assert len(bytes.fromhex(salt)) >= 16
    assert HASH_RE.fullmatch(first)
    assert first == "sha256:" + hashlib.sha256(bytes.fromhex(salt) + data).hexdigest()
    assert first != "sha256:" + hashlib.sha256(data).hexdigest()

    again = run_cli("hash", str(path), "--salt-hex", salt)
    assert again.returncode == 0
    assert again.stdout == first + "\n"
    other = run_cli("hash", str(path), "--salt")
    assert other.stdout.strip() != first, "--salt must draw a fresh salt each time"


def test_hash_errors_exit_2(tmp_path: Path) -> None:
    missing = run_cli("hash", str(tmp_path / "missing.bin"))
    assert missing.returncode == 2
    assert "missing.bin" in missing.stderr
    (tmp_path / "f").write_bytes(b"x")
    bad_salt = run_cli("hash", str(tmp_path / "f"), "--salt-hex", "not-hex")
    assert bad_salt.returncode == 2


# --- verify, fully offline -----------------------------------------------------------


@pytest.fixture(scope="module")
def saved(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Files a client keeps: input/output, the create body, the read body, the public keys.

    Issued by a server whose process's key (certified by ``TEST_ROOT``) signs nothing more
    once it is stopped, before any verification runs; ``keys.json`` is its public keys then.
    """
    folder = tmp_path_factory.mktemp("saved")
    paths = {name: folder / name for name in ("input.bin", "output.bin", "create.json", "read.json", "keys.json")}
    paths["input.bin"].write_bytes(b"input bytes\x00\x01" * 1000)
    paths["output.bin"].write_bytes(b"output bytes")
    with ServicePool(folder) as pool:
        server = pool.start(workers=1, redis_url=redis_server.url)
        key = create_key_cli(redis_server.url, project="offline", plan="free")
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            created = issue(
                http,
                key,
                input_hash="sha256:" + hashlib.sha256(paths["input.bin"].read_bytes()).hexdigest(),
                output_hash="sha256:" + hashlib.sha256(paths["output.bin"].read_bytes()).hexdigest(),
                tags={"workflow_stage": "release", "actor_role": "ci"},
                receipt_kind="release",
            )
            read = http.get(f"/v1/receipts/{created.json()['receipt']['receipt_id']}")
            assert read.status_code == 200
            keys = http.get("/v1/public-key")
            assert keys.status_code == 200
        paths["create.json"].write_bytes(created.content)
        paths["read.json"].write_bytes(read.content)
        paths["keys.json"].write_bytes(keys.content)
    assert server.process is not None
    assert server.process.poll() is not None, "the issuing server must be stopped"
    return paths


@pytest.mark.parametrize("document", ["read.json", "create.json", "bare receipt"])
def test_verify_saved_receipt_offline(saved: dict[str, Path], tmp_path: Path, document: str) -> None:
    if document == "bare receipt":
        path = tmp_path / "bare.json"
        path.write_bytes(orjson.dumps(orjson.loads(saved["read.json"].read_bytes())["receipt"]))
    else:
        path = saved[document]
    done = verify(path, "--keys", saved["keys.json"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verdict: VALID" in done.stdout
    assert failed_lines(done.stdout) == []
    assert orjson.loads(saved["read.json"].read_bytes())["receipt"]["sig_kid"] in done.stdout


def test_verify_needs_the_signing_key(saved: dict[str, Path], tmp_path: Path) -> None:
    """A key set without the receipt's kid (or with another key under that kid) fails the signature."""
    impostor = tmp_path / "impostor.json"
    kid = orjson.loads(saved["read.json"].read_bytes())["receipt"]["sig_kid"]
    impostor.write_bytes(orjson.dumps(new_key_set(kid)))
    done = verify(saved["read.json"], "--keys", impostor)
    assert done.returncode == 1
    (failed,) = failed_lines(done.stdout)
    assert "signature" in failed
    assert "Verdict: INVALID" in done.stdout


def test_verify_input_and_output_files(saved: dict[str, Path], tmp_path: Path) -> None:
    keys = ("--keys", saved["keys.json"])
    assert verify(saved["read.json"], *keys, "--input", saved["input.bin"]).returncode == 0
    assert verify(saved["read.json"], *keys, "--output", saved["output.bin"]).returncode == 0
    both = verify(saved["read.json"], *keys, "--input", saved["input.bin"], "--output", saved["output.bin"])
    assert both.returncode == 0, both.stdout

    changed = tmp_path / "changed.bin"
    changed.write_bytes(saved["input.bin"].read_bytes() + b"!")
    bad_input = verify(saved["read.json"], *keys, "--input", changed)
    assert bad_input.returncode == 1
    (failed,) = failed_lines(bad_input.stdout)
    assert "does NOT match input_hash" in failed
    bad_output = verify(saved["read.json"], *keys, "--output", saved["input.bin"])
    assert bad_output.returncode == 1
    (failed,) = failed_lines(bad_output.stdout)
    assert "does NOT match output_hash" in failed


def test_verify_detects_a_tampered_tag(saved: dict[str, Path], tmp_path: Path) -> None:
    body = orjson.loads(saved["read.json"].read_bytes())
    body["receipt"]["tags"]["workflow_stage"] = "deploy"
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(orjson.dumps(body))

    done = verify(tampered, "--keys", saved["keys.json"])
    assert done.returncode == 1
    (failed,) = failed_lines(done.stdout)
    assert "self-consistency" in failed
    assert "Verdict: INVALID" in done.stdout

    report = orjson.loads(verify(tampered, "--keys", saved["keys.json"], "--json").stdout)
    assert report["ok"] is False
    assert report["checks"]["receipt_hash_recompute"] is False
    assert report["checks"]["signature"] is True  # the signature covers the stored hash, not the edited tag


def test_verify_detects_a_tampered_signature(saved: dict[str, Path], tmp_path: Path) -> None:
    body = orjson.loads(saved["read.json"].read_bytes())
    signature = body["receipt"]["signature"]
    body["receipt"]["signature"] = ("B" if signature[0] != "B" else "C") + signature[1:]
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(orjson.dumps(body))
    report = orjson.loads(verify(tampered, "--keys", saved["keys.json"], "--json").stdout)
    assert report["ok"] is False
    assert report["checks"] == {"receipt_hash_recompute": True, "signature": False}


def test_verify_json_output(saved: dict[str, Path]) -> None:
    done = verify(saved["create.json"], "--keys", saved["keys.json"], "--input", saved["input.bin"], "--json")
    assert done.returncode == 0, done.stdout
    report = orjson.loads(done.stdout)
    receipt = orjson.loads(saved["create.json"].read_bytes())["receipt"]
    assert report["ok"] is True
    assert report["checks"] == {"receipt_hash_recompute": True, "signature": True, "input_hash": True}
    assert report["receipt_id"] == receipt["receipt_id"]
    assert report["receipt_hash"] == report["recomputed_receipt_hash"] == receipt["receipt_hash"]


def test_verify_receipt_signed_by_a_retired_key(saved: dict[str, Path], http: httpx.Client, tmp_path: Path) -> None:
    """Signed by the key of a process that has stopped; verified with the key set another
    process of the deployment publishes later, where another key is active."""
    key_set = tmp_path / "later-keys.json"
    key_set.write_bytes(http.get("/v1/public-key").content)
    kid = orjson.loads(saved["read.json"].read_bytes())["receipt"]["sig_kid"]
    assert orjson.loads(key_set.read_bytes())["active_kid"] != kid
    done = verify(saved["read.json"], "--keys", key_set)
    assert done.returncode == 0, done.stdout
    assert "a retired key" in done.stdout
    report = orjson.loads(verify(saved["read.json"], "--keys", key_set, "--json").stdout)
    assert report["ok"] is True
    assert report["key"]["kid"] == kid
    assert report["key"]["active"] is False


def test_verify_unreadable_inputs_exit_2(saved: dict[str, Path], tmp_path: Path) -> None:
    missing = verify(tmp_path / "missing.json", "--keys", saved["keys.json"])
    assert missing.returncode == 2
    assert "missing.json" in missing.stdout + missing.stderr
    not_a_receipt = tmp_path / "other.json"
    not_a_receipt.write_bytes(b'{"hello": "world"}')
    assert verify(not_a_receipt, "--keys", saved["keys.json"]).returncode == 2
    # No --keys: the keys come from the service, which is not there.
    offline = verify(saved["read.json"])
    assert offline.returncode == 2
    assert "cannot reach" in offline.stdout


# --- verify against a running service -------------------------------------------------


def test_verify_fetches_keys_from_base_url(
    service: ServiceProcess, http: httpx.Client, key: dict[str, Any], tmp_path: Path
) -> None:
    receipt_id = issue(http, key, input_hash=hash_of("online")).json()["receipt"]["receipt_id"]
    saved = tmp_path / "receipt.json"
    saved.write_bytes(http.get(f"/v1/receipts/{receipt_id}").content)
    done = verify(saved, "--base-url", service.base_url)
    assert done.returncode == 0, done.stdout
    assert f"{service.base_url}/v1/public-key" in done.stdout
    assert orjson.loads(saved.read_bytes())["receipt"]["sig_kid"] in done.stdout
    # The same receipt against other keys (a fixed key set of the tests) fails.
    assert verify(saved, "--keys", ASSETS / "signing_keys.json").returncode == 1


def issue_chain(http: httpx.Client, key: dict[str, Any], length: int) -> list[dict[str, Any]]:
    receipts = []
    for i in range(length):
        receipts.append(issue(http, key, input_hash=hash_of(f"link-{key['project_id']}-{i}")).json()["receipt"])
    for earlier, later in itertools.pairwise(receipts):
        assert later["prev_receipt_hash"] == earlier["receipt_hash"]
    return receipts


def test_verify_chain_walks_every_link(
    service: ServiceProcess, http: httpx.Client, key: dict[str, Any], tmp_path: Path
) -> None:
    receipts = issue_chain(http, key, 4)
    saved = tmp_path / "last.json"
    saved.write_bytes(http.get(f"/v1/receipts/{receipts[-1]['receipt_id']}").content)

    done = verify(saved, "--base-url", service.base_url, "--chain")
    assert done.returncode == 0, done.stdout
    assert "3 earlier link(s)" in done.stdout
    for earlier in receipts[:-1]:
        (line,) = [line for line in done.stdout.splitlines() if earlier["receipt_id"] in line]
        assert "[ok]" in line
        assert earlier["receipt_hash"] in line
    assert failed_lines(done.stdout) == []

    report = orjson.loads(verify(saved, "--base-url", service.base_url, "--chain", "--json").stdout)
    assert report["checks"]["chain"] is True
    assert [link["receipt_id"] for link in report["chain"]["links"]] == [r["receipt_id"] for r in receipts[-2::-1]]


def test_verify_chain_fails_on_a_missing_link(
    service: ServiceProcess, http: httpx.Client, key: dict[str, Any], redis_server: RedisServer, tmp_path: Path
) -> None:
    made_up = hash_of("a receipt that was never issued")
    branch = issue(http, key, input_hash=hash_of("orphan"), prev_receipt_hash=made_up).json()["receipt"]
    assert branch["chain_status"] == "branch"
    orphan = tmp_path / "orphan.json"
    orphan.write_bytes(orjson.dumps(branch))
    plain = verify(orphan, "--base-url", service.base_url)
    assert plain.returncode == 0, "without --chain the receipt itself is valid"
    done = verify(orphan, "--base-url", service.base_url, "--chain")
    assert done.returncode == 1
    assert any(made_up in line and "not found" in line for line in failed_lines(done.stdout)), done.stdout

    # A real chain with its middle receipt gone from the store: the walk stops there and fails.
    receipts = issue_chain(http, key, 3)
    with redis.Redis.from_url(redis_server.url) as conn:
        assert conn.delete(receipt_key(receipts[1]["receipt_id"])) == 1
    last = tmp_path / "last.json"
    last.write_bytes(orjson.dumps(receipts[-1]))
    broken = verify(last, "--base-url", service.base_url, "--chain", "--json")
    assert broken.returncode == 1
    report = orjson.loads(broken.stdout)
    assert report["checks"]["chain"] is False
    assert report["chain"]["links"] == [{"receipt_hash": receipts[1]["receipt_hash"], "found": False, "ok": False}]


# --- serve: the address it listens on, a busy port, the demo banner, a clean stop ----------

LISTENING_RE = re.compile(r"listening on (http://127\.0\.0\.1:(\d+))\b")


class Served:
    """``service.py serve ARGS`` in its own session, its output in files a test can poll."""

    def __init__(self, folder: Path, *args: str, env: dict[str, str | None] | None = None) -> None:
        self.out, self.err = folder / "serve.stdout", folder / "serve.stderr"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "service.py", "serve", *args],
                cwd=REPO,
                env=clean_env(env),
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace") + "\n" + self.err.read_text(errors="replace")

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (found := pattern.search(self.output())) is None:
            assert self.process.poll() is None, f"serve exited with {self.process.returncode}:\n{self.output()}"
            assert time.monotonic() < deadline, f"{pattern.pattern!r} not printed:\n{self.output()}"
            time.sleep(0.05)
        return found

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(20)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


def wait_healthy(base_url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base_url + "/health", timeout=1.0).status_code == 200:
                return
        assert time.monotonic() < deadline, f"{base_url} never answered /health"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["embedded", "redis, 2 workers"])
def test_serve_port_0_listens_on_an_ephemeral_port_and_prints_it(
    mode: str, redis_server: RedisServer, tmp_path: Path, cli_root: dict[str, Any]
) -> None:
    """Port 0 is an ephemeral port (Sanic alone reads 0 as unset and takes 8000), and the
    line that names it is the address that answers."""
    env: dict[str, str | None] = {}
    args = ["--host", "127.0.0.1", "--port", "0"]
    if mode != "embedded":
        env = {"REDIS_URL": redis_server.url, "RECEIPT_ROOT_KEY": cli_root["signer"]}
        args += ["--workers", "2"]
    served = Served(tmp_path, *args, env=env)
    try:
        url, port = served.wait_for(LISTENING_RE).groups()
        assert int(port) not in (0, 8000)
        wait_healthy(url)
        assert httpx.get(url + "/v1/public-key", timeout=5).status_code == 200
    finally:
        assert served.stop() == 0, served.output()
    assert len(LISTENING_RE.findall(served.output())) == 1, "one address line, from the main process"


@pytest.mark.parametrize("how", ["--port", "PORT"])
def test_serve_on_a_busy_port_is_a_one_line_error(how: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if how == "--port":
            done = run_cli("serve", "--host", "127.0.0.1", "--port", str(port))
        else:
            done = run_cli("serve", "--host", "127.0.0.1", env={"PORT": str(port)})
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"127.0.0.1:{port}" in line and "in use" in line
    assert "--port" in line and "PORT" in line
    assert "Traceback" not in done.stdout + done.stderr


def test_demo_banner_shows_create_read_verify_page_and_docs(tmp_path: Path) -> None:
    """Every line of the banner names the real address, and the commands it shows work."""
    served = Served(tmp_path, "--host", "127.0.0.1", "--port", "0")
    try:
        base, _ = served.wait_for(LISTENING_RE).groups()
        served.wait_for(re.compile(r"API reference: +\S+"))
        text = served.out.read_text()
        banner = text[text.index("Demo project ready") :]
        key = API_KEY_RE.search(banner)
        assert key is not None
        assert f"curl -s -X POST {base}/v1/receipts " in banner
        assert f"curl -s {base}/v1/receipts/RECEIPT_ID" in banner
        assert f"curl -s -X POST {base}/v1/verify " in banner
        assert re.search(rf"Verify in a browser: +{re.escape(base)}/verify\n", banner)
        assert re.search(rf"API reference: +{re.escape(base)}/docs\n", banner)
        wait_healthy(base)
        headers = auth(key.group(0))
        digest = "sha256:" + "0" * 63 + "1"
        created = httpx.post(f"{base}/v1/receipts", json={"input_hash": digest}, headers=headers, timeout=5)
        assert created.status_code == 201, created.text
        receipt_id = created.json()["receipt"]["receipt_id"]
        assert httpx.get(f"{base}/v1/receipts/{receipt_id}", timeout=5).status_code == 200
        checked = httpx.post(
            f"{base}/v1/verify", json={"receipt_id": receipt_id, "input_hash": digest}, headers=headers, timeout=5
        )
        assert checked.status_code == 200 and checked.json()["ok"] is True
        for page in ("/verify", "/docs"):
            assert httpx.get(base + page, timeout=5).status_code == 200, page
    finally:
        assert served.stop() == 0, served.output()


def test_embedded_server_stops_without_cancelled_task_noise(tmp_path: Path) -> None:
    """The embedded server sweeps retention itself; its stop ends that task quietly."""
    served = Served(tmp_path, "--host", "127.0.0.1", "--port", "0")
    try:
        base, _ = served.wait_for(LISTENING_RE).groups()
        wait_healthy(base)
    finally:
        status = served.stop()
    output = served.output()
    assert status == 0, output
    assert "Server Stopped" in output
    assert "was cancelled" not in output and "Traceback" not in output, output
