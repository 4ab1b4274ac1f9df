"""``monitor`` with a witness policy, its state directory's lock, and its ``--json`` failures.

A checkpoint below the policy's quorum (a witness down) is not a violation: the run exits 0
(1 with ``--require-quorum``) and says since when the log is unwitnessed, the state keeps
that across runs and forgets it once a checkpoint meets the quorum; older states' ``quorum``
violations are cleared. Two monitors on one state: the second exits 2 at once. Under
``--json`` every failure is exactly one JSON document on stdout with its ``error.kind``.

The fast tests run the verb in process (``main``) against a static log served from a thread;
the slow ones run it as processes: beside a monitor that holds the lock, and against the
service's own log, integrated with two real ``witness serve`` processes, one of them stopped
for a checkpoint and started again."""

from __future__ import annotations

import datetime
import functools
import http.server
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.monitor import write_static_log
from execution_proof.cli import monitor_fetch
from execution_proof.cli.main import main
from execution_proof.cli.monitor_state import SCHEMA, MonitorDb, StateLock
from execution_proof.jobs.log_config import LogConfig
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.transparency import note, policy
from execution_proof.transparency.cosignature import Cosigner
from tests.conftest import REPO, free_port
from tests.servers import serving
from tests.test_log import ORIGIN, issue, log_app
from tests.test_monitor import chain
from tests.test_witness import spawn_witness, stop_witness


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture(scope="module")
def w1() -> Cosigner:
    return Cosigner.generate("witness.example/w1")


@pytest.fixture(scope="module")
def w2() -> Cosigner:
    return Cosigner.generate("witness.example/w2")


def policy_text(signer: note.Signer, w1: Cosigner, w2: Cosigner, urls: tuple[str, str] | None = None) -> str:
    """Both witnesses must cosign (a group of 2 of 2)."""
    at = urls or ("", "")
    lines = [
        f"log {signer.verifier.encode()}",
        f"witness w1 {w1.key.encode()} {at[0]}".rstrip(),
        f"witness w2 {w2.key.encode()} {at[1]}".rstrip(),
        "group both 2 w1 w2",
        "quorum both",
    ]
    return "\n".join(lines) + "\n"


def publish(root: Path, size: int, signer: note.Signer, *cosigners: Cosigner) -> None:
    """A static log of ``size`` entries (an even number: receipts, each its entry and its
    dsse leaf) whose checkpoint carries the ``cosigners``' lines, as a log publishes it with
    the cosignatures its witnesses returned."""
    assert size % 2 == 0, "a log's receipts enter it two entries each"
    checkpoint = write_static_log(root, chain("prj_A", size // 2), signer)
    text = checkpoint.text()
    lines = "".join(c.cosign(text, int(time.time())) for c in cosigners)
    (root / "checkpoint").write_text(note.sign_note(text, signer) + lines)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP from a thread: (the directory, its URL)."""
    root = tmp_path / "log"
    root.mkdir()
    handler = functools.partial(Quiet, directory=str(root))
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        yield root, url + "/"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``execution-proof monitor ARGS`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main(["monitor", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def document(out: str) -> dict[str, Any]:
    """Exactly one JSON document, on one line, is all of stdout."""
    assert out.endswith("\n") and out.count("\n") == 1, out
    parsed: dict[str, Any] = orjson.loads(out)
    return parsed


def seen_at(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


def state_rows(state: Path) -> tuple[list[Any], dict[str, bytes]]:
    """(the violations the state keeps, its ``meta``)."""
    with sqlite3.connect(f"file:{state / 'monitor.sqlite3'}?mode=ro", uri=True) as db:
        violations = db.execute("SELECT record FROM violations").fetchall()
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    return violations, meta


# --------------------------------------------------------------------------- the quorum


def test_a_checkpoint_below_the_quorum_is_reported_since_when_and_never_recorded(
    signer: note.Signer, w1: Cosigner, w2: Cosigner, site: tuple[Path, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    root, url = site
    policy_file = tmp_path / "policy.txt"
    policy_file.write_text(policy_text(signer, w1, w2))
    state = tmp_path / "state"
    args = ("--tiles-url", url, "--log-policy", str(policy_file), "--state", str(state), "--once")

    publish(root, 6, signer, w1, w2)
    code, out, _ = run(capsys, *args, "--json")
    report = document(out)
    assert (code, report["ok"], report["unwitnessed_since"], report["violations"]) == (0, True, None, []), report
    assert report["quorum"] == {"ok": True, "reason": "the quorum is met (cosigned by w1, w2)"}

    # w2 is down: the log publishes size 8 with w1's cosignature alone.
    publish(root, 8, signer, w1)
    before = int(time.time())
    code, out, _ = run(capsys, *args, "--json")
    report = document(out)
    assert (code, report["ok"], report["violations"]) == (0, True, []), report
    assert report["quorum"]["ok"] is False and "valid cosignatures: w1" in report["quorum"]["reason"]
    since = report["unwitnessed_since"]
    assert since["size"] == 8 and before <= seen_at(since["seen_at"]) <= time.time(), since
    assert report["checkpoint"] == {"origin": ORIGIN, "size": 8} and report["new_entries"] == 2

    code, out, _ = run(capsys, *args, "--json", "--require-quorum")
    report = document(out)
    assert (code, report["ok"], report["violations"], report["unwitnessed_since"]) == (1, False, [], since)
    code, out, err = run(capsys, *args)  # without --json: the same document, and text on stderr
    assert code == 0 and document(out)["unwitnessed_since"] == since
    assert f"UNWITNESSED since size 8 (first seen {since['seen_at']})" in err and "NOT met" in err, err
    assert "not a violation" in err and "VIOLATION" not in err

    # Still down at size 10: the run of misses began at 8.
    publish(root, 10, signer, w1)
    code, out, _ = run(capsys, *args, "--json")
    report = document(out)
    assert (code, report["unwitnessed_since"], report["checkpoint"]["size"]) == (0, since, 10), report
    violations, meta = state_rows(state)
    assert violations == [] and meta["unwitnessed_size"] == b"8"

    # w2 is back: size 12 meets the quorum, and the run of misses is over.
    publish(root, 12, signer, w1, w2)
    code, out, _ = run(capsys, *args, "--json", "--require-quorum")
    report = document(out)
    assert (code, report["ok"], report["unwitnessed_since"], report["violations"]) == (0, True, None, []), report
    code, out, err = run(capsys, *args)
    assert code == 0 and "UNWITNESSED" not in err and "holds together" in err, err
    violations, meta = state_rows(state)
    assert violations == [] and not {"unwitnessed_size", "unwitnessed_at"} & set(meta)


def test_without_a_policy_there_is_no_quorum_to_miss(
    signer: note.Signer, site: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, url = site
    publish(root, 4, signer)
    args = ("--tiles-url", url, "--log-key", signer.verifier.encode(), "--state", str(tmp_path / "s"), "--once")
    code, out, _ = run(capsys, *args, "--json")
    report = document(out)
    assert (code, report["unwitnessed_since"], "quorum" in report) == (0, None, False), report
    code, out, err = run(capsys, *args, "--json", "--require-quorum")
    assert (code, document(out)["error"]["kind"]) == (2, "UsageError")
    assert "--require-quorum needs --log-policy" in err


def old_state(state: Path, log_key: note.Verifier, violations: list[dict[str, Any]]) -> None:
    """A state as the monitor wrote it when a checkpoint below the quorum was a violation:
    its log recorded, and the violations' records (``Violation.json()``)."""
    state.mkdir()
    with sqlite3.connect(state / "monitor.sqlite3") as db:
        db.executescript(SCHEMA)
        meta = {"log_origin": log_key.name.encode(), "log_vkey": log_key.encode().encode()}
        db.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta.items())
        db.executemany("INSERT INTO violations(record) VALUES (?)", [(orjson.dumps(v),) for v in violations])


def test_quorum_violations_an_older_monitor_recorded_are_cleared(
    signer: note.Signer, w1: Cosigner, w2: Cosigner, site: tuple[Path, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Cleared when the state is opened (and said on stderr); a violation of another kind
    stays."""
    root, url = site
    publish(root, 6, signer, w1)
    policy_file = tmp_path / "policy.txt"
    policy_file.write_text(policy_text(signer, w1, w2))
    quorum = {"kind": "quorum", "detail": "the quorum 'both' is NOT met (valid cosignatures: w1)"}
    old_state(tmp_path / "old", signer.verifier, [quorum])
    args = ("--tiles-url", url, "--log-policy", str(policy_file), "--once", "--json")
    code, out, err = run(capsys, *args, "--state", str(tmp_path / "old"))
    report = document(out)
    assert (code, report["ok"], report["violations"]) == (0, True, []), report
    assert report["unwitnessed_since"]["size"] == 6  # reported as what it is
    assert "cleared 1 quorum violation(s) an older monitor recorded" in err
    assert state_rows(tmp_path / "old")[0] == []
    fork = {"kind": "chain_fork", "detail": "a second main receipt", "index": 5, "project_id": "prj_A"}
    old_state(tmp_path / "fork", signer.verifier, [quorum, fork, quorum | {"detail": "another"}])
    db = MonitorDb(tmp_path / "fork" / "monitor.sqlite3")
    assert [v.kind for v in db.cleared_quorum] == ["quorum", "quorum"]
    assert [v.json() for v in db.violations()] == [fork]
    db.close()
    code, out, _ = run(capsys, *args, "--state", str(tmp_path / "fork"))
    assert (code, document(out)["violations"]) == (1, [fork])


# --------------------------------------------------------------------------- --json failures


def test_every_failure_under_json_is_one_document_with_its_kind(
    signer: note.Signer, site: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    root, url = site
    vkey = signer.verifier.encode()
    state = str(tmp_path / "state")

    def failed(kind: str, *args: str, said: str) -> dict[str, Any]:
        code, out, err = run(capsys, *args, "--json")
        found = document(out)
        assert (code, found["ok"], found["error"]["kind"]) == (2, False, kind), (args, found, err)
        assert said in found["error"]["message"] and said in err, (found, err)
        return found

    # Usage: argparse's own, and the options' after parsing.
    failed("UsageError", "--tiles-url", url, "--log-key", vkey, said="the following arguments are required: --state")
    failed("UsageError", "--tiles-url", url, "--state", state, said="one of the arguments --log-key --log-policy")
    failed("UsageError", "--tiles-url", url, "--log-key", vkey, "--state", state, "--interval", "-1",
           said="argument --interval: must be from 1 to 86400 seconds, not -1")  # fmt: skip
    failed("UsageError", "--tiles-url", url, "--log-key", vkey, "--state", state, "--bogus",
           said="unrecognized arguments: --bogus")  # fmt: skip
    failed("UsageError", "--log-key", vkey, "--state", state, said="give --base-url (the service) or --tiles-url")
    failed("UsageError", "--tiles-url", "ftp://x/", "--log-key", vkey, "--state", state, said="not an http(s) URL")
    # Configuration.
    failed("InvalidInput", "--tiles-url", url, "--log-key", "not a key", "--state", state, said="verifier key")
    failed("InvalidInput", "--tiles-url", url, "--log-policy", str(tmp_path / "none.txt"), "--state", state,
           said="none.txt")  # fmt: skip
    (tmp_path / "a-file").write_text("")
    failed("InvalidInput", "--tiles-url", url, "--log-key", vkey, "--state", str(tmp_path / "a-file"), said="a-file")
    with monkeypatch.context() as env:
        env.setenv("LOG_COSIGNATURE_SKEW_S", "soon")
        failed("InvalidInput", "--tiles-url", url, "--log-key", vkey, "--state", state, said="LOG_COSIGNATURE_SKEW_S")
    assert not (tmp_path / "state").exists(), "a usage or configuration error touched the state"
    # The log: not there, not a log, another log's, a resource missing.
    monkeypatch.setattr(monitor_fetch, "BACKOFF_S", 0.0)  # six refused connections, without pauses
    closed = f"http://127.0.0.1:{free_port()}/"
    found = failed("Unreachable", "--tiles-url", closed, "--log-key", vkey, "--state", state, "--once",
                   said="(6 attempts)")  # fmt: skip
    assert (found["violations"], found["unwitnessed_since"], "checkpoint" in found) == ([], None, False)
    failed("ServiceError", "--tiles-url", url, "--log-key", vkey, "--state", state, "--once",
           said="checkpoint answered HTTP 404")  # fmt: skip
    (root / "checkpoint").write_text("<html>a CDN's error page</html>\n")
    failed("ServiceError", "--tiles-url", url, "--log-key", vkey, "--state", state, "--once",
           said="is not a signed checkpoint")  # fmt: skip
    publish(root, 300, note.Signer.generate("other.example/log"))
    failed("InvalidInput", "--tiles-url", url, "--log-key", vkey, "--state", state, "--once",
           said=f"is of the log 'other.example/log'; the key given is of the log {ORIGIN!r}")  # fmt: skip
    publish(root, 300, signer)
    (root / "tile" / "0" / "000").unlink()
    found = failed("ServiceError", "--tiles-url", url, "--log-key", vkey, "--state", state, "--once",
                   said="tile/0/000 is missing")  # fmt: skip
    assert found["checkpoint"] == {"origin": ORIGIN, "size": 300} and found["violations"] == []
    # Another monitor holds the state.
    held = StateLock(tmp_path / "state")
    try:
        failed("InvalidInput", "--tiles-url", url, "--log-key", vkey, "--state", state, "--once",
               said=f"another monitor (process {os.getpid()}) is running on the state directory")  # fmt: skip
    finally:
        held.release()


def test_without_json_a_failure_is_a_line_on_stderr_and_its_document_on_stdout(
    signer: note.Signer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--log-key", signer.verifier.encode(), "--state", str(tmp_path / "s"))
    assert code == 2 and document(out)["error"]["kind"] == "UsageError"
    assert err == "error: give --base-url (the service) or --tiles-url (a static copy of the log)\n"


# --------------------------------------------------------------------------- processes


def monitor_process(*args: str) -> list[str]:
    return [sys.executable, "service.py", "monitor", *args]


@pytest.mark.slow
def test_a_second_monitor_on_one_state_exits_2_at_once(
    signer: note.Signer, site: tuple[Path, str], tmp_path: Path
) -> None:
    """A following monitor holds the state's lock between its passes: a second process on the
    same state exits 2 at once, naming the first, and leaves the state alone; once the first
    is stopped (Ctrl-C), the next run takes the lock."""
    root, url = site
    publish(root, 300, signer)
    state = tmp_path / "state"
    base = ["--tiles-url", url, "--log-key", signer.verifier.encode(), "--state", str(state), "--json"]
    first = subprocess.Popen(
        monitor_process(*base, "--interval", "600"), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout is not None
        assert orjson.loads(first.stdout.readline())["new_entries"] == 300  # a pass done: it waits, locked
        kept = {p.name: p.read_bytes() for p in state.iterdir() if p.name != "monitor.sqlite3-shm"}
        started = time.monotonic()
        second = subprocess.run(
            monitor_process(*base, "--once"), cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        took = time.monotonic() - started
        assert second.returncode == 2, second.stdout + second.stderr
        found = document(second.stdout)
        assert found["error"]["kind"] == "InvalidInput", found
        assert f"another monitor (process {first.pid}) is running on the state directory" in found["error"]["message"]
        assert "one monitor per --state directory" in second.stderr and "Traceback" not in second.stderr
        assert took < 10, took  # at once: a process's start-up, no waiting for the lock
        assert {p.name: p.read_bytes() for p in state.iterdir() if p.name in kept} == kept
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=30)
        assert first.returncode == 130 and out == "", (out, err)  # its one pass already reported
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    third = subprocess.run(
        monitor_process(*base, "--once"), cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert third.returncode == 0 and document(third.stdout)["new_entries"] == 0, third.stdout + third.stderr


def start_witness_on(key_file: Path, state: Path, logs: dict[str, note.Verifier], port: int) -> Any:
    """``witness serve`` on ``port`` (the one the policy names), answering."""
    import httpx

    process = spawn_witness(key_file, state, logs, port)
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.post(f"http://127.0.0.1:{port}/add-checkpoint", content=b"", timeout=1)
            return process
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_witness(process)
                pytest.fail(f"the witness on port {port} did not start")
            time.sleep(0.05)


@pytest.mark.slow
async def test_a_witness_down_for_a_checkpoint_is_reported_then_forgotten(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    """The service's log, integrated with two real witness processes and a policy needing
    both: w2 is stopped for one checkpoint, which the log publishes with w1's cosignature
    alone; the monitor run then exits 0 saying since when the log is unwitnessed (1 with
    ``--require-quorum``); w2 started again cosigns the next checkpoint, and the next run
    exits 0 with ``unwitnessed_since`` null and no violation in the state."""
    cosigners = {name: Cosigner.generate(f"witness.example/{name}") for name in ("w1", "w2")}
    ports = {name: free_port() for name in cosigners}
    logs = {ORIGIN: signer.verifier}
    witnesses: dict[str, Any] = {}

    def start(name: str) -> None:
        key_file = tmp_path / f"{name}.key"
        key_file.write_text(cosigners[name].encode() + "\n")
        key_file.chmod(0o600)  # a key file others may read is refused
        witnesses[name] = start_witness_on(key_file, tmp_path / f"{name}.state", logs, ports[name])

    text = policy_text(
        signer, cosigners["w1"], cosigners["w2"], (f"http://127.0.0.1:{ports['w1']}", f"http://127.0.0.1:{ports['w2']}")
    )
    (tmp_path / "policy.txt").write_text(text)
    handler = functools.partial(Quiet, directory=str(tmp_path / "log"))
    try:
        start("w1")
        start("w2")
        app = log_app(store, log_store, receipt_root, signer)
        key = await create_project_key(store.keys, project_name="witnessed", plan="pro")
        config = LogConfig(ORIGIN, signer, policy=policy.parse_policy(text), witness_timeout_ms=3000)
        worker = Integrator(store.log_queue, log_store, config)
        assert worker.witnesses is not None
        worker.witnesses.jitter = lambda: 0.0  # a witness back up is asked at the next step, not after a backoff
        await worker.prepare()
        with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
            args = ["--tiles-url", url + "/", "--log-policy", str(tmp_path / "policy.txt"), "--state",
                    str(tmp_path / "state"), "--once", "--json"]  # fmt: skip

            def monitor(*more: str) -> tuple[int, dict[str, Any]]:
                done = subprocess.run(
                    monitor_process(*args, *more), cwd=REPO, capture_output=True, text=True, timeout=120, check=False
                )
                return done.returncode, document(done.stdout)

            await issue(app, key, ["a0", "a1"])  # each its entry and leaf, and the app's key certificate: 5
            await worker.step(force=True)
            code, report = monitor()
            assert (code, report["unwitnessed_since"], report["quorum"]["ok"]) == (0, None, True), report

            assert stop_witness(witnesses.pop("w2")) == 0
            await issue(app, key, [f"b{n}" for n in range(3)])
            await worker.step(force=True)
            before = int(time.time())
            code, report = monitor()
            assert (code, report["ok"], report["violations"]) == (0, True, []), report
            assert "valid cosignatures: w1)" in report["quorum"]["reason"]
            since = report["unwitnessed_since"]
            assert since["size"] == report["checkpoint"]["size"] == 11 and seen_at(since["seen_at"]) >= before
            code, report = monitor("--require-quorum")
            assert (code, report["ok"], report["violations"], report["unwitnessed_since"]) == (1, False, [], since)

            start("w2")
            await issue(app, key, ["c0"])
            await worker.step(force=True)
            code, report = monitor("--require-quorum")
            assert (code, report["ok"], report["unwitnessed_since"]) == (0, True, None), report
            assert report["quorum"]["reason"] == "the quorum is met (cosigned by w1, w2)"
            assert report["checkpoint"]["size"] == 13 and report["violations"] == []
        violations, meta = state_rows(tmp_path / "state")
        assert violations == [] and "unwitnessed_size" not in meta
    finally:
        for process in witnesses.values():
            stop_witness(process)
