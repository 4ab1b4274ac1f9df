"""The command line people script (README "Command line"): ``--version``, a bare call, ``bundle
--wait``, ``--json``, several files and ``-``, a receipt id for ``verify``, exit codes
0/1/2/130 with no traceback, each verb's help. Run as ``python -m execution_proof``
subprocesses (the console script's code path, which has no default verb)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import execution_proof
from tests.conftest import REPO
from tests.servers import clean_env, create_key_cli, run_cli, service_pool_fixture

pytestmark = pytest.mark.slow

MODULE = (sys.executable, "-m", "execution_proof")

service_factory = service_pool_fixture()


def cli(
    *args: str, env: dict[str, str | None] | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*MODULE, *args], cwd=REPO, env=clean_env(env), capture_output=True, timeout=120, check=False,
        input=stdin,
    )  # fmt: skip
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    )


def test_version_usage_and_typos() -> None:
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"execution-proof {execution_proof.__version__}"
    bare = cli()
    assert bare.returncode == 2 and "usage: execution-proof" in bare.stderr and "name a verb" in bare.stderr
    assert "listening" not in bare.stderr + bare.stdout, "a bare call never starts a server"
    typo = cli("verfy", "x.json")
    assert typo.returncode == 2 and "invalid choice: 'verfy'" in typo.stderr
    port_first = cli("--port", "9")
    assert port_first.returncode == 2 and "listening" not in port_first.stderr
    for done in (bare, typo, port_first):
        assert "Traceback" not in done.stderr


def test_top_level_help_lists_client_verbs_apart() -> None:
    """The help says which verbs the light install runs: the key makers too, though their verb
    groups hold a server (``witness serve``) or sit beside operator verbs."""
    done = cli("--help")
    assert done.returncode == 0
    assert "client verbs (the light install, without extras):\n  hash, submit, bundle, attest, verify" in done.stdout
    assert "key makers (the light install too):\n  log-key new, witness key new, signing-key root new\n" in done.stdout
    operator = done.stdout.split("operator verbs (the extra [server]; in a clone: pip install '.[server]'):\n")[1]
    needing = operator.splitlines()[0].strip().split(", ")
    assert needing == ["serve", "worker", "expire", "keys", "signing-key", "receipts", "log", "witness serve"]


@pytest.mark.parametrize(
    ("verb", "variables"),
    [
        ("hash", []),
        ("submit", ["SERVICE_API_KEY", "SERVICE_BASE_URL"]),
        ("bundle", ["SERVICE_BASE_URL"]),
        ("attest", ["SERVICE_BASE_URL"]),
        ("verify", ["SERVICE_BASE_URL"]),
    ],
)
def test_each_client_verbs_help_names_its_environment_and_exit_codes(verb: str, variables: list[str]) -> None:
    done = cli(verb, "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for variable in variables:
        assert variable in text, variable
    assert "exit status: 0" in text and "130 interrupted" in text


def test_hash_several_files_stdin_and_json(tmp_path: Path) -> None:
    one, two = tmp_path / "one.txt", tmp_path / "two words.bin"
    one.write_bytes(b"first\n")
    two.write_bytes(b"\x00second")
    digest = {p: "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest() for p in (one, two)}
    single = cli("hash", str(one))
    assert single.stdout == digest[one] + "\n"
    several = cli("hash", str(one), str(two))
    assert several.stdout.splitlines() == [f"{digest[one]}  {one}", f"{digest[two]}  {two}"]
    piped = cli("hash", "-", stdin=b"from a pipe")
    assert piped.stdout.strip() == "sha256:" + hashlib.sha256(b"from a pipe").hexdigest()
    as_json = cli("hash", str(one), "-", "--json", stdin=b"x")
    assert orjson.loads(as_json.stdout) == [
        {"ok": True, "path": str(one), "hash": digest[one]},
        {"ok": True, "path": "-", "hash": "sha256:" + hashlib.sha256(b"x").hexdigest()},
    ]
    salted = orjson.loads(cli("hash", str(one), "--salt", "--json").stdout)
    assert salted["ok"] is True
    assert salted["hash"] == "sha256:" + hashlib.sha256(bytes.fromhex(salted["salt"]) + b"first\n").hexdigest()
    # An unreadable file does not stop the others (sha256sum's way); the exit code says it.
    absent = str(tmp_path / "absent")
    missing = cli("hash", absent, str(one))
    assert missing.returncode == 2 and f"cannot read {absent}" in missing.stderr and "Traceback" not in missing.stderr
    assert missing.stdout == f"{digest[one]}  {one}\n"


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """SIGINT while ``hash`` reads a named pipe: opening its write end returns once the
    command has opened the read end, so the signal comes while it waits for data."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [*MODULE, "hash", str(fifo)], cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    writer = os.open(fifo, os.O_WRONLY)  # blocks until the command opened it to read
    try:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        os.close(writer)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err


# --- against a service with a log ---------------------------------------------------------------


def test_bundle_pending_saves_nothing_then_waits_for_the_proof(logged: Any, tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"bundled")
    env: dict[str, str | None] = {"SERVICE_API_KEY": logged.api_key, "SERVICE_BASE_URL": logged.base_url}
    submitted = cli("submit", "--input", str(data), "--json", env=env)
    assert submitted.returncode == 0, submitted.stderr
    made = orjson.loads(submitted.stdout)
    receipt_id, saved = made["receipt_id"], made["saved"]
    assert made["receipt"]["input_hash"] == "sha256:" + hashlib.sha256(b"bundled").hexdigest()
    assert Path(saved).is_file() and made["service_url"] == logged.base_url

    out = tmp_path / "bundle.json"
    started = time.monotonic()
    pending = cli("bundle", saved, "--wait", "2", "--out", str(out))  # no worker: nothing integrates it
    assert pending.returncode == 1, pending.stdout + pending.stderr
    assert time.monotonic() - started >= 1.5, "it waited"
    assert "no published checkpoint covers" in pending.stderr and "nothing saved" in pending.stderr
    assert not out.exists(), "a bundle without its proof is never saved"
    at_once = cli("bundle", receipt_id, "--out", str(out), env={"SERVICE_BASE_URL": logged.base_url})
    assert at_once.returncode == 1 and not out.exists()
    pending_json = cli("bundle", saved, "--out", str(out), "--json")
    assert pending_json.returncode == 1 and not out.exists()
    pending_document = orjson.loads(pending_json.stdout)
    message = pending_document["error"].pop("message")
    assert "no published checkpoint covers" in message and "nothing saved" in message
    assert pending_document == {
        "ok": False,
        "error": {"kind": "ProofPending"},
        "receipt_id": receipt_id,
        "saved": None,
    }
    unsaved = cli("submit", "--input", str(data), "--save", str(tmp_path / "no-dir" / "r.json"), "--json", env=env)
    assert unsaved.returncode == 2, unsaved.stdout + unsaved.stderr
    kept = orjson.loads(unsaved.stdout)
    assert kept["ok"] is False and kept["error"]["kind"] == "InvalidInput" and kept["saved"] is None
    assert kept["unsaved"]["receipt"]["receipt_id"] == kept["receipt_id"], "the receipt it could not save is kept"
    assert kept["unsaved"]["service_url"] == logged.base_url

    logged.worker()
    done = cli("bundle", saved, "--wait", "60", "--out", str(out), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = orjson.loads(done.stdout)
    assert summary == {"ok": True, "receipt_id": receipt_id, "saved": str(out), "log": True, "proof": True}
    assert orjson.loads(out.read_bytes())["log"]["proof"].startswith("c2sp.org/tlog-proof@v1\n")
    to_stdout = cli("bundle", receipt_id, env={"SERVICE_BASE_URL": logged.base_url})
    assert to_stdout.returncode == 0 and orjson.loads(to_stdout.stdout)["receipt"]["receipt_id"] == receipt_id

    unknown = cli("bundle", "rcpt_01M8D2AV7NHB8HP9811GDZDKQQ", env={"SERVICE_BASE_URL": logged.base_url})
    assert unknown.returncode == 1 and "not found" in unknown.stderr
    unknown_json = cli("bundle", "rcpt_01M8D2AV7NHB8HP9811GDZDKQQ", "--json", env={"SERVICE_BASE_URL": logged.base_url})
    assert unknown_json.returncode == 1 and unknown.stdout == "", "without --json, nothing on stdout"
    document = orjson.loads(unknown_json.stdout)
    assert document["ok"] is False and document["error"]["kind"] == "NotFound"
    assert document["receipt_id"] == "rcpt_01M8D2AV7NHB8HP9811GDZDKQQ"
    unreachable = cli("bundle", receipt_id, "--base-url", "http://127.0.0.1:9")
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr
    unreachable_json = cli("bundle", receipt_id, "--base-url", "http://127.0.0.1:9", "--json")
    assert unreachable_json.returncode == 2
    assert orjson.loads(unreachable_json.stdout)["error"]["kind"] == "Unreachable"
    bad_wait = cli("bundle", receipt_id, "--wait", "-1")
    assert bad_wait.returncode == 2 and "Traceback" not in bad_wait.stderr

    # verify: a file, a receipt id, standard input; several at once; --json; the worst code.
    root = tmp_path / "root.json"
    pinned = cli("trust-root", "--base-url", logged.base_url, "--out", str(root))
    assert pinned.returncode == 0, pinned.stderr
    pinned_json = cli("trust-root", "--base-url", logged.base_url, "--out", str(root), "--json")
    assert pinned_json.returncode == 0, pinned_json.stderr
    written = orjson.loads(pinned_json.stdout)
    assert written["ok"] is True and written["saved"] == str(root) and written["log"] is True
    assert [f"{item['label']}  {item['fingerprint']}" for item in written["fingerprints"]] == pinned.stdout.splitlines()
    assert written["notes"][-1] == f"replaced the existing {root} (it was identical)"
    assert all(f"note: {note}" in pinned_json.stderr for note in written["notes"]), "the same notes as the text"
    by_id = cli("verify", receipt_id, "--base-url", logged.base_url)
    assert by_id.returncode == 0 and "Verdict: VALID" in by_id.stdout, by_id.stdout + by_id.stderr
    piped = cli("verify", "-", "--trust-root", str(root), stdin=out.read_bytes())
    assert piped.returncode == 0, piped.stdout + piped.stderr
    tampered = tmp_path / "tampered.json"
    document = orjson.loads(out.read_bytes())
    document["receipt"]["input_hash"] = "sha256:" + "0" * 64
    tampered.write_bytes(orjson.dumps(document))
    several = cli("verify", str(out), saved, str(tampered), "--trust-root", str(root), "--json")
    assert several.returncode == 1, several.stdout + several.stderr
    reports = orjson.loads(several.stdout)
    # The trust root pins the log: the saved create response carries no proof (offline).
    assert [r["verdict"] for r in reports] == ["VALID", "NOT VERIFIED", "INVALID"]
    assert [r["reason"] for r in reports] == [None, "no_log_proof", "bad_signature"]
    assert [r["item"] for r in reports] == [str(out), saved, str(tampered)]
    # Not a file but shaped like a receipt id: the service has none by that name: 1, the worst code wins.
    absent = "rcpt_01M8D2AV7NHB8HP9811GDZDKQQ"
    with_missing = cli("verify", str(out), absent, "--trust-root", str(root), "--base-url", logged.base_url)
    assert with_missing.returncode == 1, with_missing.stdout + with_missing.stderr
    assert f"the service has no receipt {absent}" in with_missing.stdout
    unreachable_too = cli("verify", str(out), absent, "--trust-root", str(root), "--base-url", "http://127.0.0.1:9")
    assert unreachable_too.returncode == 2 and "cannot reach" in unreachable_too.stdout
    # Neither a file nor shaped like a receipt id: a mistyped file name, never sent: 2.
    typo = str(tmp_path / "absent.reciept.json")
    mistyped = cli("verify", typo, "--trust-root", str(root), "--base-url", "http://127.0.0.1:9", "--json")
    assert mistyped.returncode == 2, mistyped.stdout + mistyped.stderr
    failed = orjson.loads(mistyped.stdout)
    assert failed["verdict"] == "ERROR" and failed["error"]["kind"] == "InvalidInput"
    assert "no such file" in failed["error"]["message"] and "cannot reach" not in failed["error"]["message"]
    one_only = cli("verify", str(out), saved, "--input", str(data))
    assert one_only.returncode == 2 and "one receipt" in one_only.stderr

    # A deleted receipt under --trust-root --online: exit 1 (the service no longer has it).
    deleted = run_cli(
        "receipts", "delete", receipt_id, "--reason", "test", env={"REDIS_URL": logged.redis_url, **logged.env}
    )
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    online = cli("verify", saved, "--trust-root", str(root), "--online")
    assert online.returncode == 1, online.stdout + online.stderr
    assert "does NOT have it (404)" in online.stdout and "Traceback" not in online.stderr
    assert "Verdict: NOT VERIFIED (deleted)" in online.stdout
    gone = cli("verify", receipt_id, "--base-url", logged.base_url)
    assert gone.returncode == 1 and "not found" in gone.stdout


def test_verify_without_a_service_names_the_options_that_give_one(tmp_path: Path) -> None:
    receipt = {
        **dict.fromkeys(("output_hash", "params_hash", "env_hash", "code_ref", "run_id", "receipt_kind", "tags")),
        **dict.fromkeys(("prev_receipt_hash", "chain_status", "expected_prev_receipt_hash")),
        **{"receipt_id": "rcpt_x", "project_id": "p", "actor_id": "a", "created_at": "2026-01-15T10:00:00.000Z"},
        **{"input_hash": "sha256:" + "0" * 64, "status": "issued", "receipt_hash": "sha256:" + "1" * 64},
        **{"signature": "A" * 86, "sig_kid": "k"},
    }
    raw = tmp_path / "raw.json"
    raw.write_bytes(orjson.dumps({"receipt": receipt}))
    done = cli("verify", str(raw), env={"SERVICE_BASE_URL": None})  # the default URL: nothing listens here
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot reach http://127.0.0.1:8000/v1/public-key" in done.stdout
    assert "--base-url" in done.stdout and "--keys" in done.stdout and "--trust-root" in done.stdout


def test_log_key_new_help_names_the_origin_it_defaults_to() -> None:
    from execution_proof.runtime.settings import DEFAULT_LOG_ORIGIN, default_log_origin

    done = cli("log-key", "new", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and DEFAULT_LOG_ORIGIN in text and "+ /v1/log" in text
    assert default_log_origin({"PUBLIC_BASE_URL": "https://proofs.example/base"}) == "proofs.example/base/v1/log"
    made = cli("log-key", "new", env={"PUBLIC_BASE_URL": "https://proofs.example"})
    assert made.returncode == 0 and made.stdout.startswith("PRIVATE+KEY+proofs.example/v1/log+")


def test_every_verbs_help_names_its_environment_and_exit_codes() -> None:
    """Every verb and sub-verb, operator verbs included, read from the parser itself."""
    import argparse

    from execution_proof.cli.main import GROUPS, _parser

    def walk(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, str]]:
        yield name, parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for verb, nested in action.choices.items():
                    yield from walk(nested, f"{name} {verb}".strip())

    helps = dict(walk(_parser(GROUPS), ""))
    assert len(helps) > 20, sorted(helps)
    for name, text in helps.items():
        flat = " ".join(text.split()).lower()
        if not name:
            continue
        assert "environment" in flat, name
        assert "exit status" in flat or "exit codes" in flat or "exits 0" in flat, name


def test_bundle_from_a_service_without_a_log_is_saved_at_once(
    redis_url: str, service_factory: Any, tmp_path: Path
) -> None:
    """No log: the bundle carries no proof and none will come; `bundle --wait` does not wait
    for one (exit 0), and `verify` of it checks what it carries."""
    service = service_factory.start(redis_url=redis_url)
    key = create_key_cli(redis_url, project="cli-no-log")["api_key"]
    data = tmp_path / "data.bin"
    data.write_bytes(b"no log here")
    env: dict[str, str | None] = {"SERVICE_API_KEY": key, "SERVICE_BASE_URL": service.base_url}
    made = orjson.loads(cli("submit", "--input", str(data), "--json", env=env).stdout)
    out = tmp_path / "bundle.json"
    started = time.monotonic()
    done = cli("bundle", made["saved"], "--wait", "30", "--out", str(out), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 20, "it did not wait for a proof that never comes"
    assert orjson.loads(done.stdout) == {
        "ok": True,
        "receipt_id": made["receipt_id"],
        "saved": str(out),
        "log": False,
        "proof": False,
    }
    assert "log" not in orjson.loads(out.read_bytes())
    checked = cli("verify", str(out), "--input", str(data), "--base-url", service.base_url)
    assert checked.returncode == 0 and "Verdict: VALID" in checked.stdout, checked.stdout + checked.stderr
