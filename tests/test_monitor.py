"""``python service.py monitor``: against the real service (in process, its routes and limits,
its integrator writing a real log store) and against static copies of a log served by
``python -m http.server``, healthy and tampered: a full tile rewritten with its bundle, a
level-1 tile rewritten, a checkpoint re-signed over another root, a tampered entry, a forked
and a split project chain, a missing tile; a run killed with SIGKILL resumes without
re-reading what it checked; a violation stays reported."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import re
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bench.monitor import chain_entries, dsse_leaf, write_static_log
from execution_proof.cli.main import SERVER_MODULES
from execution_proof.cli.monitor import Pass, Progress
from execution_proof.cli.monitor_fetch import Fetcher
from execution_proof.cli.monitor_state import SCHEMA, MonitorDb
from execution_proof.client.http import Reply
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import load_limits
from execution_proof.transparency import note, tlog
from execution_proof.transparency.cosignature import Cosigner
from tests.conftest import REPO, free_port
from tests.receipt_keys import TEST_ROOT_KID
from tests.servers import serving
from tests.test_log import ORIGIN, integrator, issue, log_app

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- helpers


def entry(n: int, project: str, prev: int | None, status: str = "main") -> bytes:
    def h(k: int) -> str:
        return "sha256:" + hashlib.sha256(f"{project}-{k}".encode()).hexdigest()

    return tlog.entry_bytes(
        {
            "receipt_id": f"rcpt_01JD{n:022d}",
            "receipt_hash": h(n),
            "project_id": project,
            "prev_receipt_hash": h(prev) if prev is not None else None,
            "chain_status": status,
        }
    )


def paired(*receipts: bytes) -> list[bytes]:
    """Receipt entries as a log holds them: each followed by the ``dsse`` leaf of its
    attestation (bench/monitor.py's, naming a hash of the entry)."""
    return [e for receipt in receipts for e in (receipt, dsse_leaf(hashlib.sha256(receipt).digest()))]


def chain(project: str, count: int, start: int = 0) -> list[bytes]:
    """``count`` receipts of one main chain, as the log holds them: ``2 * count`` entries."""
    return paired(*(entry(start + i, project, start + i - 1 if i or start else None) for i in range(count)))


@dataclass
class Served:
    """A directory served by ``python -m http.server`` (a real process); its request log."""

    root: Path
    url: str
    log: Path

    def requests(self) -> list[str]:
        return re.findall(r'"GET /(\S*) HTTP', self.log.read_text())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(root: Path) -> Served:
        port = free_port()
        log = tmp_path / f"http-{port}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"),
        )  # fmt: skip
        started.append(process)
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None and time.monotonic() < deadline, "http.server did not start"
            time.sleep(0.02)
        return Served(root, f"http://127.0.0.1:{port}/", log)

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


def monitor_args(url: str, signer: note.Signer, state: Path) -> list[str]:
    return [sys.executable, "service.py", "monitor", "--tiles-url", url, "--log-key", signer.verifier.encode(),
            "--state", str(state), "--once", "--json"]  # fmt: skip


def monitor(url: str, signer: note.Signer, state: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        monitor_args(url, signer, state), cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    return done.returncode, orjson.loads(done.stdout.splitlines()[-1]) if done.stdout else {}


def kinds(report: dict[str, Any]) -> list[str]:
    return [v["kind"] for v in report["violations"]]


def sign_checkpoint(root: Path, signer: note.Signer, size: int, tree_root: bytes) -> None:
    (root / "checkpoint").write_text(note.sign_note(note.Checkpoint(signer.name, size, tree_root).text(), signer))


def write_tile(root: Path, level: int | str, index: int, data: bytes, width: int = 256) -> None:
    (root / "tile" / tlog.tile_path(level, index, width)).write_bytes(data)


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


# --------------------------------------------------------------------------- the real service


async def test_the_service_log_is_followed_through_its_routes_riding_out_429(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path
) -> None:
    """Through the service's own routes, with a ``log_tiles`` limit far below what catching up
    needs, and a ``public_key`` limit of 1: every tile request past the limit is answered
    429 with Retry-After, the monitor waits exactly that long (the test's sleep moves the
    service's clock) and finishes; the checkpoint, one request a pass, never meets the key
    limit."""
    now = [1_790_000_000_000 // 60_000 * 60_000]
    limits = load_limits(orjson.dumps({"ip_per_minute": {"public_key": 1, "log_tiles": 4}}))
    app = log_app(store, log_store, receipt_root, signer, clock_ms=lambda: now[0], limits=limits)
    key = await create_project_key(store.keys, project_name="monitored", plan="pro")
    worker = await integrator(store, log_store, signer)
    issued = await issue(app, key, [f"r{i}" for i in range(149)])  # their leaves, the app's key certificate: 299
    await worker.step(force=True)
    told: list[float] = []

    async def get(url: str) -> Reply:
        _, response = await app.asgi_client.get(url.removeprefix("http://service"))
        if response.status_code == 429:
            told.append(float(response.headers["retry-after"]))
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Reply(response.status_code, headers, response.content, url)

    async def sleep(seconds: float) -> None:
        now[0] += int(seconds * 1000)

    db = MonitorDb(tmp_path / "state.sqlite3")
    fetcher = Fetcher(get, "http://service/v1/log/", sleep=sleep, concurrency=1)
    report = await Pass(fetcher, signer.verifier, None, db, Progress(False)).run()
    assert [k["kid"] for k in report.pop("keys")] == [app.ctx.services.receipt_keys.active_kid]
    assert report == {
        "ok": True,
        "violations": [],
        "checkpoint": {"origin": ORIGIN, "size": 299},
        "new_entries": 299,
        "unwitnessed_since": None,
    }
    assert told and fetcher.waits == told  # each 429's Retry-After, waited out as given
    assert db.projects[key["project_id"]].tip == issued[-1]["receipt_hash"]
    db.close()


async def test_the_service_store_as_a_static_copy_grows_and_stays_consistent(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """The directory the integrator writes (a ``file://`` log store) behind http.server."""
    app = log_app(store, log_store, receipt_root, signer)
    worker = await integrator(store, log_store, signer)
    keys = [await create_project_key(store.keys, project_name=f"p{i}", plan="pro") for i in range(2)]
    for n, k in enumerate(keys):  # 149 receipts, each its entry and leaf, and the app's key certificate: 299
        await issue(app, k, [f"{k['project_id']}-{i}" for i in range(75 - n)])
    await worker.step(force=True)
    served = serve(tmp_path / "log")
    state = tmp_path / "state"
    code, report = monitor(served.url, signer, state)
    listed = report.pop("keys")
    assert [(k["kid"], k["root_kid"]) for k in listed] == [(app.ctx.services.receipt_keys.active_kid, TEST_ROOT_KID)]
    assert (code, report) == (
        0,
        {
            "ok": True,
            "violations": [],
            "checkpoint": {"origin": ORIGIN, "size": 299},
            "new_entries": 299,
            "unwitnessed_since": None,
        },
    )
    await issue(app, keys[0], [f"more-{i}" for i in range(100)])
    await worker.step(force=True)
    code, report = monitor(served.url, signer, state)
    assert (code, report["new_entries"], report["checkpoint"]["size"]) == (0, 200, 499)
    # The store's first full tile rewritten together with its bundle (a receipt id from entry
    # 9 on changed): the entries still hash to their tile, the tile not to level 1.
    store_dir = tmp_path / "log"
    entries = tlog.split_bundle((store_dir / "tile/entries/000").read_bytes())
    at = next(i for i in range(9, 256) if entries[i].startswith(tlog.ENTRY_HEADER.encode()))
    entries[at] = entries[at].replace(b"rcpt_", b"rcpt_X", 1)
    write_tile(store_dir, "entries", 0, b"".join(tlog.bundle_entry(e) for e in entries))
    write_tile(store_dir, 0, 0, b"".join(tlog.leaf_hashes(entries)))
    code, report = monitor(served.url, signer, tmp_path / "fresh-state")
    assert code == 1 and kinds(report) == ["tile"], report
    assert "hash 0 of tile/1/000.p/1" in report["violations"][0]["detail"]


# --------------------------------------------------------------------------- tampered static copies


@pytest.fixture
def small_log(tmp_path: Path, signer: note.Signer) -> Path:
    """600 entries (300 receipts and their leaves): level-0 tiles 0 and 1 full, 2 partial (88);
    level 1 partial (2)."""
    root = tmp_path / "small"
    write_static_log(root, chain("prj_A", 200) + chain("prj_B", 100), signer)
    return root


def test_a_full_tile_rewritten_with_its_bundle_is_found(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """Entry 4 (receipt 2's) replaced, tile/0/000 rewritten to match it: every entry hashes to
    its leaf, but the tile no longer hashes to hash 0 of level 1."""
    entries = tlog.split_bundle((small_log / "tile/entries/000").read_bytes())
    assert entries[4] == entry(2, "prj_A", 1)
    entries[4] = entry(2, "prj_A", 1).replace(b"rcpt_01JD", b"rcpt_01JX")
    write_tile(small_log, "entries", 0, b"".join(tlog.bundle_entry(e) for e in entries))
    write_tile(small_log, 0, 0, b"".join(tlog.leaf_hashes(entries)))
    code, report = monitor(serve(small_log).url, signer, tmp_path / "state")
    assert code == 1, report
    assert kinds(report) == ["tile"]
    assert "hash 0 of tile/1/000.p/2" in report["violations"][0]["detail"]
    assert report["violations"][0]["index"] == 0


def test_a_tampered_entry_is_named_by_its_index(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    bundle = (small_log / "tile/entries/001").read_bytes()
    write_tile(small_log, "entries", 1, bundle.replace(b"prj_A", b"prj_X", 1))
    code, report = monitor(serve(small_log).url, signer, tmp_path / "state")
    assert code == 1
    assert [(v["kind"], v["index"]) for v in report["violations"]] == [("entry", 256)]
    assert "tile/0/001" in report["violations"][0]["detail"]


def test_a_checkpoint_resigned_over_another_history_is_inconsistent(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    served = serve(small_log)
    state = tmp_path / "state"
    assert monitor(served.url, signer, state)[0] == 0
    good_checkpoint = (small_log / "checkpoint").read_bytes()
    # The same size as the tree seen, another root, signed by the log's key.
    sign_checkpoint(small_log, signer, 600, bytes(32))
    code, report = monitor(served.url, signer, state)
    assert code == 1 and kinds(report) == ["inconsistent"]
    assert "a second root for size 600" in report["violations"][0]["detail"]
    # A larger log that rewrote entry 6 (receipt 3's; tiles and bundles all consistent with
    # each other), signed by the log's key: the monitor reads only entries 600 on, and its own
    # hashes of 0..599 do not match the new tree's.
    other = tmp_path / "other"
    rewritten = [*chain("prj_A", 3), *paired(entry(3, "prj_A", 1)), *chain("prj_A", 196, 4), *chain("prj_B", 150)]
    write_static_log(other, rewritten, signer)
    shutil.rmtree(small_log / "tile")
    shutil.copytree(other / "tile", small_log / "tile")
    shutil.copy(other / "checkpoint", small_log / "checkpoint")
    code, report = monitor(served.url, signer, state)
    assert code == 1 and kinds(report) == ["inconsistent", "inconsistent"], report
    # Hash 0 of level 1 covers entries 0..255, which the checkpoint of 600 confirmed.
    assert report["violations"][1]["index"] == 0
    assert "hash 0 of tile/1/000.p/2" in report["violations"][1]["detail"]
    assert good_checkpoint != (small_log / "checkpoint").read_bytes()


def test_a_rewritten_root_with_matching_tiles_is_inconsistent(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """Tiles untouched, the checkpoint of a larger size signed over a root they do not give."""
    served = serve(small_log)
    assert monitor(served.url, signer, tmp_path / "state")[0] == 0
    write_static_log(small_log, chain("prj_A", 200) + chain("prj_B", 150), signer)
    sign_checkpoint(small_log, signer, 700, bytes(32))
    code, report = monitor(served.url, signer, tmp_path / "state")
    assert code == 1 and kinds(report) == ["inconsistent"]
    assert f"has root {bytes(32).hex()}" in report["violations"][0]["detail"]


def test_a_smaller_checkpoint_is_inconsistent(small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any) -> None:
    served = serve(small_log)
    assert monitor(served.url, signer, tmp_path / "state")[0] == 0
    write_static_log(small_log, chain("prj_A", 150), signer)
    code, report = monitor(served.url, signer, tmp_path / "state")
    assert code == 1 and kinds(report) == ["inconsistent"]
    assert "300 entries; a checkpoint of 600 was seen before" in report["violations"][0]["detail"]


def test_forked_and_split_chains_are_named(signer: note.Signer, tmp_path: Path, serve: Any) -> None:
    good = chain("prj_A", 5)
    root = tmp_path / "log"
    write_static_log(root, good, signer)
    served = serve(root)
    state = tmp_path / "state"
    assert monitor(served.url, signer, state)[0] == 0
    # Entry 10: follows 3, as 4 did: a fork. 12: follows 40, never on main: a split. 14:
    # follows 1, as 2 did (read by the first run): a fork. (Each receipt's leaf follows it.)
    more = paired(entry(50, "prj_A", 3), entry(51, "prj_A", 40), entry(52, "prj_A", 1))
    write_static_log(root, [*good, *more], signer)
    code, report = monitor(served.url, signer, state)
    assert code == 1
    assert [(v["kind"], v["index"], v["project_id"]) for v in report["violations"]] == [
        ("chain_fork", 10, "prj_A"),
        ("chain_split", 12, "prj_A"),
        ("chain_fork", 14, "prj_A"),
    ]


def test_branches_and_fresh_starts_are_not_violations(signer: note.Signer, tmp_path: Path, serve: Any) -> None:
    root = tmp_path / "log"
    more = paired(entry(60, "prj_A", 1, "branch"), entry(61, "prj_A", None), entry(62, "prj_A", 61))
    write_static_log(root, [*chain("prj_A", 5), *more], signer)
    code, report = monitor(serve(root).url, signer, tmp_path / "state")
    assert (code, report["violations"], report["new_entries"]) == (0, [], 16)


def test_a_missing_tile_means_the_log_cannot_be_read(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """Exit 2, not a violation: with the tile back, the next run passes."""
    served = serve(small_log)
    kept = (small_log / "tile/0/001").read_bytes()
    (small_log / "tile/0/001").unlink()
    code, report = monitor(served.url, signer, tmp_path / "state")
    assert code == 2 and "tile/0/001 is missing" in report["error"]["message"], report
    assert report["error"]["kind"] == "ServiceError" and report["violations"] == []
    assert report["checkpoint"] == {"origin": ORIGIN, "size": 600}
    write_tile(small_log, 0, 1, kept)
    assert monitor(served.url, signer, tmp_path / "state")[0] == 0


def test_a_short_tile_is_a_violation_not_a_read_error(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    write_tile(small_log, 0, 1, (small_log / "tile/0/001").read_bytes()[:-32])
    code, report = monitor(serve(small_log).url, signer, tmp_path / "state")
    assert code == 1 and kinds(report) == ["tile"]
    assert "tile/0/001 holds 8160 bytes, not 8192" in report["violations"][0]["detail"]


def test_a_violation_is_reported_on_every_later_run(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    served = serve(small_log)
    good = (small_log / "tile/entries/001").read_bytes()
    write_tile(small_log, "entries", 1, good.replace(b"prj_A", b"prj_X", 1))
    first = monitor(served.url, signer, tmp_path / "state")
    assert first[0] == 1 and kinds(first[1]) == ["entry"]
    write_tile(small_log, "entries", 1, good)  # the log looks fine again
    code, report = monitor(served.url, signer, tmp_path / "state")
    assert code == 1 and report["violations"] == first[1]["violations"]
    assert report["checkpoint"]["size"] == 600 and report["new_entries"] == 600 - 256


def test_a_policy_pins_the_key_and_its_quorum_is_checked(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """With ``--log-policy``: a checkpoint no witness cosigned misses a quorum of one, which
    is reported (``unwitnessed_since``, ``quorum``), not a violation (tests/test_monitor_quorum.py
    follows a log through a witness's outage); a malformed LOG_COSIGNATURE_SKEW_S means it
    cannot check (exit 2)."""
    witness = Cosigner.generate("witness.example/w1")
    policy = tmp_path / "policy.txt"
    policy.write_text(f"log {signer.verifier.encode()}\nwitness w1 {witness.key.encode()}\nquorum w1\n")
    args = [sys.executable, "service.py", "monitor", "--tiles-url", serve(small_log).url, "--log-policy", str(policy),
            "--state", str(tmp_path / "state"), "--once", "--json"]  # fmt: skip
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    report = orjson.loads(done.stdout)
    assert done.returncode == 0 and report["violations"] == [], report
    assert report["unwitnessed_since"]["size"] == 600 and report["quorum"]["ok"] is False
    assert "the quorum 'w1' is NOT met (valid cosignatures: none)" in report["quorum"]["reason"]
    env = {**os.environ, "LOG_COSIGNATURE_SKEW_S": "soon"}
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 2 and "LOG_COSIGNATURE_SKEW_S" in done.stderr
    assert orjson.loads(done.stdout)["error"]["kind"] == "InvalidInput"


# --------------------------------------------------------------------------- a big log


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory, signer: note.Signer) -> Path:
    """66,000 entries over 50 projects: level-1 tile 0 is full (65,536 entries)."""
    root = tmp_path_factory.mktemp("big") / "log"
    write_static_log(root, chain_entries(66_000, 50), signer)
    return root


def test_a_rewritten_full_level1_tile_is_found(big_log: Path, signer: note.Signer, tmp_path: Path, serve: Any) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(big_log, copy)
    tile = bytearray((copy / "tile/1/000").read_bytes())
    tile[7 * 32] ^= 1
    write_tile(copy, 1, 0, bytes(tile))
    code, report = monitor(serve(copy).url, signer, tmp_path / "state")
    assert code == 1 and kinds(report) == ["tile"], report
    assert report["violations"][0]["index"] == 7 * 256
    assert "hash 7 of tile/1/000 is" in report["violations"][0]["detail"]


def test_a_killed_run_resumes_without_rereading(big_log: Path, signer: note.Signer, tmp_path: Path, serve: Any) -> None:
    state = tmp_path / "state"
    first = serve(big_log)
    running = subprocess.Popen(monitor_args(first.url, signer, state), cwd=REPO, stdout=subprocess.DEVNULL)
    checked = 0
    deadline = time.monotonic() + 120
    while checked == 0:  # wait for the first saved progress, then kill at once
        assert running.poll() is None and time.monotonic() < deadline, "the monitor ended before it was killed"
        time.sleep(0.005)  # a poll interval, not a wait for the race: the loop reads the state
        if (state / "monitor.sqlite3").exists():
            try:
                with sqlite3.connect(f"file:{state / 'monitor.sqlite3'}?mode=ro", uri=True) as db:
                    row = db.execute("SELECT value FROM meta WHERE key = 'size'").fetchone()
            except sqlite3.OperationalError:  # the schema is not there yet
                row = None
            checked = int(row[0]) if row else 0
    os.kill(running.pid, signal.SIGKILL)
    running.wait(10)
    with sqlite3.connect(state / "monitor.sqlite3") as db:
        checked = int(db.execute("SELECT value FROM meta WHERE key = 'size'").fetchone()[0])
    assert 0 < checked < 66_000
    second = serve(big_log)
    code, report = monitor(second.url, signer, state)
    assert (code, report["violations"], report["new_entries"]) == (0, [], 66_000 - checked)
    bundles = [int(m[1]) for p in second.requests() if (m := re.fullmatch(r"tile/entries/(\d{3})(\.p/\d+)?", p))]
    # Nothing before the saved progress read again; everything after it read once.
    assert sorted(bundles) == list(range(checked // 256, -(-66_000 // 256)))


# --------------------------------------------------------------------------- the log the state follows


def run_monitor(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "service.py", "monitor", *args, "--json"], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def last_line(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return orjson.loads(done.stdout.splitlines()[-1]) if done.stdout else {}


def error_of(done: subprocess.CompletedProcess[str], kind: str = "InvalidInput") -> str:
    """The message of the one ``--json`` failure document on stdout, of ``kind``."""
    document = orjson.loads(done.stdout)
    assert document["ok"] is False and document["error"]["kind"] == kind, document
    return str(document["error"]["message"])


def followed(state: Path) -> dict[str, str]:
    """The log the state records (empty when none)."""
    with sqlite3.connect(f"file:{state / 'monitor.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT key, value FROM meta WHERE key IN ('log_origin', 'log_vkey')").fetchall()
    return {key: bytes(value).decode() for key, value in rows}


def test_a_wrong_key_records_nothing_and_the_right_key_then_passes(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """Another log's key, then a key of the same name that did not sign: each exits 2 (not the
    1 that pages someone), records nothing, and the next run with the right key passes."""
    url, state = serve(small_log).url, tmp_path / "state"
    another_log = note.Signer.generate("other.example/log")
    done = run_monitor("--tiles-url", url, "--log-key", another_log.verifier.encode(), "--state", str(state), "--once")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"is of the log {ORIGIN!r}; the key given is of the log 'other.example/log'" in error_of(done)
    impostor = note.Signer.generate(ORIGIN)
    done = run_monitor("--tiles-url", url, "--log-key", impostor.verifier.encode(), "--state", str(state), "--once")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not signed by the key given" in error_of(done) and "nothing was recorded" in done.stdout
    assert followed(state) == {}
    assert "Traceback" not in done.stderr
    assert monitor(url, signer, state) == (
        0,
        {
            "ok": True,
            "violations": [],
            "checkpoint": {"origin": ORIGIN, "size": 600},
            "new_entries": 600,
            "unwitnessed_since": None,
            "keys": [],
        },
    )
    assert followed(state) == {"log_origin": ORIGIN, "log_vkey": signer.verifier.encode()}


def test_a_state_that_follows_one_log_refuses_another_naming_both(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """A state recorded for log A, run against log B (B's key and URL, or A's key at B's URL):
    exit 2 naming both origins, no violation; A's next run passes."""
    state = tmp_path / "state"
    a_url = serve(small_log).url
    assert monitor(a_url, signer, state)[0] == 0
    b_signer = note.Signer.generate("b.example/log")
    write_static_log(tmp_path / "b", chain("prj_B", 150), b_signer)
    b_url = serve(tmp_path / "b").url
    done = run_monitor("--tiles-url", b_url, "--log-key", b_signer.verifier.encode(), "--state", str(state), "--once")
    assert done.returncode == 2, done.stdout + done.stderr
    error = error_of(done)
    assert f"follows the log {ORIGIN!r}; the key given is of the log 'b.example/log'" in error, error
    done = run_monitor("--tiles-url", b_url, "--log-key", signer.verifier.encode(), "--state", str(state), "--once")
    assert done.returncode == 2, done.stdout + done.stderr
    error = error_of(done)
    assert f"is of the log 'b.example/log'; this state directory follows the log {ORIGIN!r}" in error, error
    assert monitor(a_url, signer, state) == (
        0,
        {
            "ok": True,
            "violations": [],
            "checkpoint": {"origin": ORIGIN, "size": 600},
            "new_entries": 0,
            "unwitnessed_since": None,
            "keys": [],
        },
    )


def test_a_recorded_log_signed_by_another_key_is_a_violation(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """Once the log is recorded, a checkpoint of its origin signed by another key is a
    ``signature`` violation (exit 1), kept after the right checkpoint is back; the other key
    given for that origin is refused (exit 2), not taken."""
    served, state = serve(small_log), tmp_path / "state"
    assert monitor(served.url, signer, state)[0] == 0
    good = (small_log / "checkpoint").read_bytes()
    impostor = note.Signer.generate(ORIGIN)
    checkpoint = note.parse_checkpoint(note.parse_note(good).text)
    sign_checkpoint(small_log, impostor, checkpoint.size, checkpoint.root)
    code, report = monitor(served.url, signer, state)
    assert code == 1 and kinds(report) == ["signature"], report
    assert "no known key signed the note" in report["violations"][0]["detail"]
    (small_log / "checkpoint").write_bytes(good)
    code, again = monitor(served.url, signer, state)
    assert code == 1 and again["violations"] == report["violations"]
    done = run_monitor("--tiles-url", served.url, "--log-key", impostor.verifier.encode(), "--state", str(state),
                       "--once")  # fmt: skip
    assert done.returncode == 2 and f"with the key {signer.verifier.encode()}" in error_of(done)


def legacy_state(state: Path, origin: str, violations: list[dict[str, Any]]) -> None:
    """A state as an older monitor left it: the origin alone in ``meta``, and violations."""
    state.mkdir()
    with sqlite3.connect(state / "monitor.sqlite3") as db:
        db.executescript(SCHEMA)
        db.execute("INSERT INTO meta(key, value) VALUES ('origin', ?)", (origin.encode(),))
        db.executemany("INSERT INTO violations(record) VALUES (?)", [(orjson.dumps(v),) for v in violations])


def test_signature_violations_an_older_monitor_recorded_before_it_knew_its_log_are_cleared(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """Before the state recorded its log, an older monitor run with a wrong key recorded a
    ``signature`` violation: the first checkpoint that verifies clears it (and says so); a
    violation of another kind stays. An older state with progress on another origin is
    refused, naming both."""
    url = serve(small_log).url
    wrong_key = {"kind": "signature", "detail": "no known key signed the note"}
    legacy_state(tmp_path / "wrong-key", "", [wrong_key])
    done = subprocess.run(monitor_args(url, signer, tmp_path / "wrong-key"), cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert (done.returncode, last_line(done)["violations"]) == (0, []), done.stdout + done.stderr
    assert "cleared 1 signature violation" in done.stderr
    fork = {"kind": "chain_fork", "detail": "a second main receipt", "index": 5, "project_id": "prj_A"}
    legacy_state(tmp_path / "fork", ORIGIN, [wrong_key, fork])
    code, report = monitor(url, signer, tmp_path / "fork")
    assert code == 1 and report["violations"] == [fork]
    legacy_state(tmp_path / "other", "other.example/log", [])
    code, report = monitor(url, signer, tmp_path / "other")
    assert code == 2, report
    said = report["error"]["message"]
    assert f"progress on the log 'other.example/log'; the key given is of the log {ORIGIN!r}" in said, report


# --------------------------------------------------------------------------- time and Ctrl-C


@pytest.fixture
def silent_log() -> Iterator[tuple[str, list[socket.socket]]]:
    """A loopback socket that accepts every connection and never answers: its URL, and the
    connections it accepted."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed at the end of the test
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/", accepted
    listener.close()
    for connection in accepted:
        connection.close()


def test_once_against_a_log_that_does_not_answer_ends_within_a_minute(
    silent_log: tuple[str, list[socket.socket]], signer: note.Signer, tmp_path: Path
) -> None:
    url, accepted = silent_log
    started = time.monotonic()
    done = subprocess.run(monitor_args(url, signer, tmp_path / "state"), cwd=REPO, capture_output=True, text=True,
                          timeout=75, check=False)  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and elapsed < 60, (elapsed, done.stdout, done.stderr)
    assert "the log has not answered for 30 s" in error_of(done, "Unreachable")
    assert accepted and "Traceback" not in done.stderr


@pytest.mark.parametrize("interval", ["-1", "0", "nan", "inf", "soon"])
def test_an_interval_below_a_second_or_not_a_number_is_a_usage_error(
    interval: str, signer: note.Signer, tmp_path: Path
) -> None:
    done = run_monitor("--tiles-url", "http://127.0.0.1:9/", "--log-key", signer.verifier.encode(), "--state",
                       str(tmp_path / "state"), "--interval", interval, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "argument --interval:" in done.stderr and done.stderr.startswith("usage:")
    assert not (tmp_path / "state").exists()


def interrupted(running: subprocess.Popen[str]) -> tuple[int, str, str]:
    running.send_signal(signal.SIGINT)
    stdout, stderr = running.communicate(timeout=30)
    return running.returncode, stderr, stdout


def test_ctrl_c_while_waiting_for_the_log_exits_130_in_one_line(
    silent_log: tuple[str, list[socket.socket]], signer: note.Signer, tmp_path: Path
) -> None:
    url, accepted = silent_log
    args = [a for a in monitor_args(url, signer, tmp_path / "state") if a != "--once"]  # following
    running = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not accepted:  # the monitor is in its pass, waiting for an answer
        assert running.poll() is None and time.monotonic() < deadline, "the monitor never asked"
        time.sleep(0.02)
    code, stderr, stdout = interrupted(running)
    assert code == 130 and stderr.splitlines() == ["monitor: interrupted (what was checked is saved)"], stderr
    # --json: the interrupted pass's one document, with what the state knew.
    assert orjson.loads(stdout) == {
        "ok": False, "violations": [], "unwitnessed_since": None, "keys": [],
        "error": {"kind": "KeyboardInterrupt", "message": "monitor: interrupted (what was checked is saved)"},
    }  # fmt: skip


def test_ctrl_c_between_passes_exits_130_in_one_line(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    args = [a for a in monitor_args(serve(small_log).url, signer, tmp_path / "state") if a != "--once"]
    args += ["--interval", "60"]
    running = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert running.stdout is not None
    assert orjson.loads(running.stdout.readline())["ok"] is True  # a pass done: now it sleeps
    code, stderr, stdout = interrupted(running)
    assert code == 130 and stderr.splitlines() == ["monitor: interrupted (what was checked is saved)"], stderr
    assert stdout == ""  # each pass has its document; none was under way


# --------------------------------------------------------------------------- command line


def test_help_names_the_exit_codes_and_the_environment() -> None:
    done = run_monitor("--help", timeout=60)
    assert done.returncode == 0
    for said in ("exit status:", "130", "interrupted", "LOG_COSIGNATURE_SKEW_S", "SSL_CERT_FILE", "--interval"):
        assert said in done.stdout, said


def test_tiles_url_or_base_url_is_needed(signer: note.Signer, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "service.py", "monitor", "--log-key", signer.verifier.encode(), "--state", str(tmp_path),
         "--once"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--tiles-url" in done.stderr


# --------------------------------------------------------------------------- the client install's HTTP


def test_the_monitor_imports_nothing_of_the_server_extra(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """``monitor`` runs on the client-only install, which has no httpx: the import set of a
    whole pass (as ``-X importtime`` lists it) holds the standard library's HTTP client (loaded
    at the first request, so ``--help`` would not show it), none of the extra's."""
    args = monitor_args(serve(small_log).url, signer, tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "execution_proof", *args[2:]],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and orjson.loads(done.stdout)["new_entries"] == 600, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    # (The verb's own module is imported by importlib.import_module, which -X importtime does
    # not list; what it imports is listed.)
    assert {"execution_proof.cli.monitor_state", "execution_proof.client.http", "http.client"} <= imported
    extra = {*SERVER_MODULES, "httpcore", "anyio", "h11", "sniffio"}
    assert sorted(name for name in imported if name.split(".")[0] in extra) == []


def test_a_pass_runs_with_the_server_extra_unimportable(
    small_log: Path, signer: note.Signer, tmp_path: Path, serve: Any
) -> None:
    """A whole pass, every module of the server extra made unimportable (as on an install
    without it): the same report as with them."""
    blocked = {*SERVER_MODULES, "httpcore"}
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({sorted(blocked)!r})); "
        "from execution_proof.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    args = monitor_args(serve(small_log).url, signer, tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-c", code, *args[2:]], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert orjson.loads(done.stdout.splitlines()[-1]) == {
        "ok": True, "violations": [], "checkpoint": {"origin": ORIGIN, "size": 600}, "new_entries": 600,
        "unwitnessed_since": None, "keys": [],
    }  # fmt: skip


@dataclass
class Asked:
    at: float
    path: str
    port: int
    status: int


def log_server(root: Path, *, redirect: str = "", limited: frozenset[str] = frozenset()) -> tuple[Any, list[Asked]]:
    """``root`` served over HTTP/1.1 keep-alive from a thread; ``redirect``: a path prefix
    answered 301 to the same path without it; ``limited``: paths whose first request is
    answered 429 with ``Retry-After: 1``. Every request is recorded (time, path, the
    client's port, the status)."""
    asked: list[Asked] = []
    once = set(limited)

    class Handler(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            entry = Asked(time.monotonic(), self.path, self.client_address[1], 200)
            asked.append(entry)
            if redirect and self.path.startswith(redirect):
                entry.status = 301
                self.send_response(301)
                self.send_header("Location", "/" + self.path.removeprefix(redirect))
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path in once:
                once.discard(self.path)
                entry.status = 429
                self.send_response(429)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Handler, directory=str(root))
    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler), asked


def test_a_redirected_log_is_followed_over_kept_alive_connections(
    small_log: Path, signer: note.Signer, tmp_path: Path
) -> None:
    """``--tiles-url`` at a path that answers every resource with a redirect (as a CDN
    moving a log does): each is followed to where it is, and the connections are reused."""
    server, asked = log_server(small_log, redirect="/moved/")
    with serving(server) as url:
        code, report = monitor(f"{url}/moved/", signer, tmp_path / "state")
    assert (code, report["new_entries"], report["violations"]) == (0, 600, []), report
    redirected = [a.path.removeprefix("/moved") for a in asked if a.status == 301]
    served = [a.path for a in asked if a.status == 200]
    assert "/checkpoint" in redirected and "/tile/entries/002.p/88" in redirected
    assert sorted(redirected) == sorted(served)  # each redirect followed, to its own path
    assert len({a.port for a in asked}) <= 16 < len(asked)  # keep-alive: at most a connection per fetch thread


def test_a_429_retry_after_is_waited_out_as_given(small_log: Path, signer: note.Signer, tmp_path: Path) -> None:
    """A real server's 429 with ``Retry-After: 1`` (read from the reply's headers): the
    resource is asked for again no sooner than 1 s later (a retry without it would come
    within 0.5 s), and the pass completes."""
    server, asked = log_server(small_log, limited=frozenset({"/tile/0/001", "/tile/entries/002.p/88"}))
    with serving(server) as url:
        code, report = monitor(f"{url}/", signer, tmp_path / "state")
    assert (code, report["new_entries"], report["violations"]) == (0, 600, []), report
    for path in ("/tile/0/001", "/tile/entries/002.p/88"):
        tries = [a for a in asked if a.path == path]
        assert [a.status for a in tries] == [429, 200]
        assert tries[1].at - tries[0].at >= 1.0


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by its own key: (certificate, key) PEM files."""
    import datetime
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "monitor test log")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / "log.crt", directory / "log.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_tls_is_verified_against_the_trust_store(small_log: Path, signer: note.Signer, tmp_path: Path) -> None:
    """Over https: a certificate the system does not trust is refused at once (exit 2, no
    retries); trusted through ``SSL_CERT_FILE``, the same server is read."""
    cert, key = self_signed(tmp_path)
    server, asked = log_server(small_log)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server) as url:
        https = url.replace("http://", "https://") + "/"
        args = monitor_args(https, signer, tmp_path / "state")
        env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        refused = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False, env=env)
        trusted = subprocess.run(
            args,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**env, "SSL_CERT_FILE": str(cert)},
        )
    report = orjson.loads(refused.stdout.splitlines()[-1])
    assert refused.returncode == 2 and "TLS: CERTIFICATE_VERIFY_FAILED" in report["error"]["message"], report
    # Not retried: no retry mends a certificate.
    assert report["error"]["kind"] == "Unreachable" and "attempts" not in report["error"]["message"], report
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr[-2000:]
    assert orjson.loads(trusted.stdout.splitlines()[-1])["new_entries"] == 600
    assert asked and all(a.status == 200 for a in asked)
