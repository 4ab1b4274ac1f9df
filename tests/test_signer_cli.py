"""The key makers with ``--signer`` and the processes that sign with a key in a real SoftHSM2
token: ``log-key new``, ``witness key new``, ``signing-key root new``; a service and a worker
whose ``LOG_SIGNING_KEY`` is a ``pkcs11:`` URI; ``witness serve --key``. All as subprocesses."""

from __future__ import annotations

import contextlib
import hashlib
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from execution_proof.receipts.encoding import b64url_decode
from execution_proof.receipts.key_certificates import root_kid
from execution_proof.runtime.pkcs11_signer import close_all
from execution_proof.runtime.settings import load_settings
from execution_proof.runtime.signers import open_root, parse_root_text
from execution_proof.transparency import cosignature, note
from tests.conftest import REPO, RedisServer, free_port, hash_of
from tests.servers import ServiceProcess, WorkerProcess, clean_env, create_key_cli, run_cli
from tests.softhsm import Token, softhsm_token
from tests.test_witness import ORIGIN as WITNESSED
from tests.test_witness import body, checkpoint, grown, stop_witness

pytestmark = pytest.mark.slow
ORIGIN = "tokens.example/v1/log"


@pytest.fixture
def token(tmp_path: Path) -> Iterator[Token]:
    made = softhsm_token(tmp_path)
    yield made
    close_all()


def cli(token: Token, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(*args, env=token.env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


# --- log-key new ------------------------------------------------------------------------------------


def test_log_key_new_in_a_token_and_the_embedded_service_signs_its_checkpoints_there(
    token: Token, tmp_path: Path
) -> None:
    done = cli(token, "log-key", "new", "--signer", token.uri("log", pin_value=True), "--origin", ORIGIN)
    assert done.returncode == 0, done.stderr
    uri, vkey = done.stdout.splitlines()
    assert uri == token.uri("log", pin_value=True).removesuffix(f"&pin-value={token.pin}")  # PIN removed
    assert f"pin-value={token.pin}" not in done.stdout + done.stderr
    verifier = note.Verifier.parse(vkey)
    assert verifier.name == ORIGIN
    configured = token.uri("log")  # the URI printed, with the PIN's file added
    env = {**token.env, "LOG_SIGNING_KEY": configured, "LOG_ORIGIN": ORIGIN}
    with ServiceProcess(tmp_path, redis_url=None, receipt_root=None, env=env) as service:
        info = httpx.get(service.base_url + "/v1/log").json()
        assert info["log_vkey"] == vkey
        signed = httpx.get(service.base_url + "/v1/log/checkpoint").text
        checkpoint_, _ = note.open_checkpoint(signed, verifier)
        assert checkpoint_.origin == ORIGIN


def test_a_worker_integrates_with_its_log_key_in_a_token(
    token: Token, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Sanic's manager and its two spawned workers load the settings (each reads the public
    key, none keeps a session); the worker's integrator thread signs every checkpoint in the
    token; a receipt's log proof verifies with the key ``log-key new`` printed."""
    done = cli(token, "log-key", "new", "--signer", token.uri("log"), "--origin", ORIGIN)
    assert done.returncode == 0, done.stderr
    uri, vkey = done.stdout.splitlines()
    assert uri == token.uri("log")
    redis.Redis.from_url(redis_server.url).flushall()
    env = {**token.env, "LOG_SIGNING_KEY": uri, "LOG_ORIGIN": ORIGIN, "LOG_STORE": f"file://{tmp_path}/log"}
    worker = WorkerProcess(tmp_path, {"REDIS_URL": redis_server.url, **env})
    try:
        with ServiceProcess(tmp_path, workers=2, redis_url=redis_server.url, env=env) as service:
            key = create_key_cli(redis_server.url, project="tokens", plan="pro")
            created = httpx.post(
                service.base_url + "/v1/receipts",
                headers={"Authorization": f"Bearer {key['api_key']}", "Prefer": "wait=20"},
                json={"input_hash": hash_of("signed in a token")},
                timeout=30,
            )
            assert created.status_code == 201, created.text + worker.log()[-3000:]
            proof = note.parse_tlog_proof(created.json()["log"]["proof"])
            checkpoint_, _ = note.open_checkpoint(proof.checkpoint, note.Verifier.parse(vkey))
            assert checkpoint_.size >= 1
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


def test_a_worker_whose_token_lacks_the_key_exits_2_naming_the_uri(token: Token) -> None:
    absent = token.uri("absent", pin_value=True)
    done = run_cli(
        "worker",
        env={**token.env, "REDIS_URL": "redis://127.0.0.1:1", "LOG_SIGNING_KEY": absent, "LOG_ORIGIN": ORIGIN},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "LOG_SIGNING_KEY: pkcs11:token=eps;object=absent?" in line and "pin-value=REDACTED" in line
    assert "no Ed25519 private key labelled 'absent'" in line
    assert f"pin-value={token.pin}" not in done.stdout + done.stderr


def test_log_key_new_in_a_file_or_env(tmp_path: Path) -> None:
    path = tmp_path / "log.key"
    done = run_cli("log-key", "new", "--signer", f"file:{path}", "--origin", ORIGIN)
    assert done.returncode == 0, done.stderr
    uri, vkey = done.stdout.splitlines()
    assert uri == f"file:{path}" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith(f"PRIVATE+KEY+{ORIGIN}+") and "PRIVATE" not in done.stdout
    settings = load_settings({"LOG_SIGNING_KEY": uri, "LOG_ORIGIN": ORIGIN})
    assert settings.log_signer is not None and settings.log_signer.verifier.encode() == vkey
    again = run_cli("log-key", "new", "--signer", f"file:{path}", "--origin", ORIGIN)
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr and again.stdout == ""
    env = run_cli("log-key", "new", "--signer", "env:LOG_SIGNING_KEY")
    assert env.returncode == 2 and "an env: key cannot be created" in env.stderr and env.stdout == ""


# --- signing-key root new -----------------------------------------------------------------------------


def test_signing_key_root_new_in_a_token_prints_its_json_without_the_pin(token: Token) -> None:
    uri = token.uri("root", pin_value=True)
    done = cli(token, "signing-key", "root", "new", "--signer", uri)
    assert done.returncode == 0, done.stderr
    made = orjson.loads(done.stdout)
    public = b64url_decode(made["public_key_base64url"])
    assert made == {
        "kid": root_kid(public),
        "public_key_base64url": made["public_key_base64url"],
        "sha256_fingerprint": "sha256:" + hashlib.sha256(public).hexdigest(),
        "signer": uri.removesuffix(f"&pin-value={token.pin}"),
    }
    assert len(done.stdout.splitlines()) == 1 and f"pin-value={token.pin}" not in done.stdout + done.stderr
    assert open_root(token.uri("root")).public_key() == public
    again = cli(token, "signing-key", "root", "new", "--signer", uri)
    assert again.returncode == 2 and again.stdout == ""
    (line,) = again.stderr.strip().splitlines()
    assert line.startswith("error: --signer pkcs11:token=eps;object=root?") and "pin-value=REDACTED" in line
    assert "already holds an object labelled 'root'" in line and f"pin-value={token.pin}" not in line


def test_signing_key_root_new_in_a_file_is_0600_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "root.key"
    done = run_cli("signing-key", "root", "new", "--signer", f"file:{path}")
    assert done.returncode == 0, done.stderr
    made = orjson.loads(done.stdout)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    public = parse_root_text(path.read_text()).public_key()
    assert (made["kid"], made["signer"]) == (root_kid(public), f"file:{path}")
    before = path.read_bytes()
    again = run_cli("signing-key", "root", "new", "--signer", f"file:{path}")
    assert again.returncode == 2 and again.stdout == ""
    assert (
        again.stderr.strip()
        == f"error: --signer file:{path}: the file exists: refusing to overwrite it (nothing was made)"
    )
    assert path.read_bytes() == before
    env = run_cli("signing-key", "root", "new", "--signer", "env:RECEIPT_ROOT_KEY")
    assert env.returncode == 2 and "an env: key cannot be created" in env.stderr
    gone = run_cli("signing-key", "new", "--kid", "old")
    assert gone.returncode == 2 and "invalid choice: 'new'" in gone.stderr


# --- witness key new and witness serve --key ----------------------------------------------------------


@contextlib.contextmanager
def witness(token: Token, tmp_path: Path, log_vkey: str, *key_args: str) -> Iterator[str]:
    """A ``witness serve`` with ``key_args`` and a fresh state, answering; its base URL. Stopped after."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "service.py", "witness", "serve", "--port", str(port), *key_args,
         "--state", str(tmp_path / f"state-{port}.json"), "--log", f"{WITNESSED}={log_vkey}"],
        cwd=REPO, env=clean_env(token.env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            try:
                httpx.post(base + "/add-checkpoint", content=b"", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the witness did not start"
                time.sleep(0.05)
        yield base
    finally:
        stop_witness(process)


def cosigned_by(base: str, log_key: note.Signer, key: cosignature.CosignerKey) -> None:
    signed = checkpoint(log_key, grown(5))
    answer = httpx.post(base + "/add-checkpoint", content=body(0, [], signed))
    assert answer.status_code == 200, answer.text
    cosigned = note.parse_note(signed + answer.text)
    assert cosignature.cosignatures(cosigned, [key]) != {}


def test_witness_key_new_in_a_token_and_witness_serve_key_cosigns_there(token: Token, tmp_path: Path) -> None:
    done = cli(token, "witness", "key", "new", "--name", "w.example", "--signer", token.uri("witness"))
    assert done.returncode == 0, done.stderr
    uri, vkey = done.stdout.splitlines()
    assert uri == token.uri("witness")
    key = cosignature.CosignerKey.parse(vkey)
    log_key = note.Signer.generate(WITNESSED)
    with witness(token, tmp_path, log_key.verifier.encode(), "--key", uri, "--name", "w.example") as base:
        cosigned_by(base, log_key, key)
    unnamed = cli(token, "witness", "serve", "--key", uri, "--state", str(tmp_path / "s"), "--log", "a=b")
    assert unnamed.returncode == 2 and "give the witness's name with --name" in unnamed.stderr


def test_witness_serve_takes_a_key_a_key_file_but_not_both(token: Token, tmp_path: Path) -> None:
    path = tmp_path / "witness.key"
    made = cli(token, "witness", "key", "new", "--name", "w.example", "--signer", f"file:{path}")
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = cosignature.CosignerKey.parse(made.stdout.splitlines()[1])
    log_key = note.Signer.generate(WITNESSED)
    with witness(token, tmp_path, log_key.verifier.encode(), "--key-file", str(path)) as base:
        cosigned_by(base, log_key, key)
    line = path.read_text().strip()
    with witness(token, tmp_path, log_key.verifier.encode(), "--key", line, "--name", "w.example") as base:
        cosigned_by(base, log_key, key)
    both = cli(token, "witness", "serve", "--key", line, "--key-file", str(path), "--state", "s", "--log", "a=b")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    renamed = cli(token, "witness", "serve", "--key", line, "--name", "other", "--state", "s", "--log", "a=b")
    assert renamed.returncode == 2 and "the key given is the key of w.example" in renamed.stderr
    path.chmod(0o644)
    shared = cli(token, "witness", "serve", "--key-file", str(path), "--state", "s", "--log", "a=b")
    assert shared.returncode == 2
    assert shared.stderr.strip() == (
        f"error: --key-file {path}: the key file is readable by its group or others (chmod 600 it)"
    )
