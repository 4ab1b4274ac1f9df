"""The monitor reads the log's key entries: key certificates and revocations, each an entry of
its own kind among the receipt entries. Read strictly (a malformed or non-canonical one is an
``entry`` violation), listed in every report (``keys``, kept across runs in the state), and,
with ``--trust-root``, judged against the receipt roots it pins (``unknown_root``,
``bad_certificate``, ``bad_revocation``). Logs are static copies (bench/monitor.py's writer)
read in process; the command line's exit code and text through ``python -m http.server``."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.monitor import dsse_leaf, write_static_log
from execution_proof.cli.monitor import Pass, Progress
from execution_proof.cli.monitor_fetch import Fetcher
from execution_proof.cli.monitor_keys import receipt_roots
from execution_proof.cli.monitor_report import text
from execution_proof.cli.monitor_state import MonitorDb, PassReport
from execution_proof.client.http import Reply
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import KeyCertificate, KeyRevocation, certify, revoke
from execution_proof.receipts.key_entries import read_key_entry
from execution_proof.receipts.trust_root import TrustRootError
from execution_proof.transparency import note, tlog
from execution_proof.transparency.monitor import KEY_CERTIFICATE_ENTRY, MemoryPrevs, Violation, check_chains
from execution_proof.transparency.signer import SeedSigner
from tests.conftest import REPO, free_port

PREFIX = "http://log.example/"
ORIGIN = "monitor.example/log"
PINNED = SeedSigner(bytes([1]) * 32)
OTHER = SeedSigner(bytes([2]) * 32)
"""A root no trust root here pins."""
START_MS = 1_790_000_000_000
DAY_MS = 86_400_000


def online(n: int) -> bytes:
    """The public key of online key ``n`` (fixed seeds)."""
    return SeedSigner(bytes([100 + n]) * 32).public_key()


def certificate(n: int, root: SeedSigner = PINNED) -> KeyCertificate:
    return certify(root, online(n), START_MS + n * DAY_MS, START_MS + (n + 1) * DAY_MS)


def certificate_entry(found: KeyCertificate) -> bytes:
    return b"execution-proof-key-certificate/v1\n" + found.entry_body() + b"\n"


def revocation_entry(found: KeyRevocation) -> bytes:
    return b"execution-proof-key-revocation/v1\n" + found.entry_body() + b"\n"


def receipt(n: int, prev: int | None, project: str = "prj_A") -> bytes:
    def h(k: int) -> str:
        return "sha256:" + hashlib.sha256(f"{project}-{k}".encode()).hexdigest()

    return tlog.entry_bytes(
        {"receipt_id": f"rcpt_01JD{n:022d}", "receipt_hash": h(n), "project_id": project,
         "prev_receipt_hash": h(prev) if prev is not None else None, "chain_status": "main"}
    )  # fmt: skip


def leaf(n: int) -> bytes:
    """The ``dsse`` leaf after receipt ``n``'s entry."""
    return dsse_leaf(hashlib.sha256(f"leaf-{n}".encode()).digest())


def receipts(start: int, count: int) -> list[bytes]:
    """``count`` receipts as the log holds them: each one's entry, then its ``dsse`` leaf."""
    return [e for n in range(start, start + count) for e in (receipt(n, n - 1 if n else None), leaf(n))]


def trust_root(path: Path, *roots: SeedSigner) -> dict[str, bytes]:
    """A version 2 trust root pinning ``roots`` at ``path``; the roots it pins, as the monitor reads them."""
    document = {
        "version": 2,
        "service_url": "https://receipts.example",
        "receipt_roots": [
            {"kid": "root-" + hashlib.sha256(r.public_key()).hexdigest()[:16],
             "public_key_base64url": b64url_encode(r.public_key())}
            for r in roots
        ],
        "revocations": [],
        "log": None,
        "tsa_roots_pem": [],
    }  # fmt: skip
    path.write_bytes(orjson.dumps(document))
    version, pinned = receipt_roots(path.read_bytes())
    assert version == 2
    return pinned


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture
def serve() -> Iterator[Callable[[Path], str]]:
    """A directory served by ``python -m http.server`` (a real process): its URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(root: Path) -> str:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        started.append(process)
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return f"http://127.0.0.1:{port}/"
            assert process.poll() is None and time.monotonic() < deadline, "http.server did not start"
            time.sleep(0.02)

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


def run_pass(log: Path, state: Path, signer: note.Signer, roots: dict[str, bytes] | None = None) -> PassReport:
    """One pass over the static copy in ``log`` with the state in ``state``, as the command runs it."""

    async def get(url: str) -> Reply:
        path = log / url.removeprefix(PREFIX)
        return Reply(200, {}, path.read_bytes(), url) if path.is_file() else Reply(404, {}, b"", url)

    state.mkdir(exist_ok=True)
    db = MonitorDb(state / "monitor.sqlite3")
    try:
        return asyncio.run(Pass(Fetcher(get, PREFIX), signer.verifier, None, db, Progress(False), roots=roots).run())
    finally:
        db.close()


def listed(found: KeyCertificate, index: int, revoked_after: str | None, pinned: bool | None) -> dict[str, Any]:
    return {"kid": found.kid, "root_kid": found.root_kid, "not_before": found.not_before,
            "not_after": found.not_after, "index": index, "revoked_after": revoked_after, "root_pinned": pinned}  # fmt: skip


# --------------------------------------------------------------------------- a log with keys


def test_a_log_of_receipts_and_keys_passes_with_its_roots_and_lists_every_key(
    signer: note.Signer, tmp_path: Path
) -> None:
    """Receipts, two certificates and a revocation of the first key, interleaved: no violation
    with the right trust root, every key listed, and the receipts judged exactly as in a log
    holding them alone (the chain's tip, no chain violation)."""
    first, second = certificate(1), certificate(2)
    revoked = revoke(PINNED, first.kid, START_MS + DAY_MS + 3_600_000, "the host was lost")
    entries = [*receipts(0, 3), certificate_entry(first), *receipts(3, 2), certificate_entry(second),
               revocation_entry(revoked), *receipts(5, 300)]  # fmt: skip
    write_static_log(tmp_path / "log", entries, signer)
    roots = trust_root(tmp_path / "trust-root.json", PINNED)
    report = run_pass(tmp_path / "log", tmp_path / "state", signer, roots)
    assert report["ok"] and report["violations"] == [], report
    assert report["new_entries"] == len(entries) == 2 * 305 + 3
    assert report["keys"] == [
        listed(first, 6, revoked.revoked_after, True),
        listed(second, 11, None, True),
    ]
    alone = tmp_path / "receipts-alone"
    write_static_log(alone, receipts(0, 305), signer)
    assert (run_pass(alone, tmp_path / "state-alone", signer, roots))["violations"] == []
    with_keys, without = (
        MonitorDb(tmp_path / "state/monitor.sqlite3"),
        MonitorDb(tmp_path / "state-alone/monitor.sqlite3"),
    )
    assert with_keys.projects == without.projects and with_keys.prevs.length == without.prevs.length
    with_keys.close()
    without.close()


def test_without_a_trust_root_keys_are_listed_and_no_root_is_judged(signer: note.Signer, tmp_path: Path) -> None:
    other = certificate(1, OTHER)
    write_static_log(tmp_path / "log", [*receipts(0, 2), certificate_entry(other)], signer)
    report = run_pass(tmp_path / "log", tmp_path / "state", signer)
    assert report["ok"] and report["keys"] == [listed(other, 4, None, None)]


def test_a_key_certified_by_a_root_not_pinned_is_unknown_root(signer: note.Signer, tmp_path: Path) -> None:
    pinned, other = certificate(1), certificate(2, OTHER)
    other_revoked = revoke(OTHER, other.kid, START_MS, "")
    write_static_log(
        tmp_path / "log",
        [*receipts(0, 2), certificate_entry(pinned), certificate_entry(other), revocation_entry(other_revoked)],
        signer,
    )
    roots = trust_root(tmp_path / "trust-root.json", PINNED)
    report = run_pass(tmp_path / "log", tmp_path / "state", signer, roots)
    assert not report["ok"]
    assert [(v["kind"], v["index"], v.get("kid"), v.get("root_kid")) for v in report["violations"]] == [
        ("unknown_root", 5, other.kid, other.root_kid),
        ("unknown_root", 6, other.kid, other.root_kid),
    ]
    assert "which the trust root does not pin" in report["violations"][0]["detail"]
    # The revocation by a root not pinned takes nothing away: it is not counted.
    assert report["keys"] == [listed(pinned, 4, None, True), listed(other, 5, None, False)]
    # Kept and reported on every later run, as every violation.
    again = run_pass(tmp_path / "log", tmp_path / "state", signer, roots)
    assert again["violations"] == report["violations"] and again["new_entries"] == 0


def test_a_certificate_or_revocation_a_pinned_root_did_not_sign_is_a_violation(
    signer: note.Signer, tmp_path: Path
) -> None:
    """A certificate whose window was widened after signing, a revocation whose time was moved:
    well formed, canonical, naming the pinned root, not signed by it."""
    widened = dataclasses.replace(certificate(1), not_after=certificate(5).not_after)
    revoked = revoke(PINNED, certificate(2).kid, START_MS + 2 * DAY_MS, "")
    moved = dataclasses.replace(revoked, revoked_after=certificate(9).not_before)
    write_static_log(
        tmp_path / "log",
        [certificate_entry(widened), certificate_entry(certificate(2)), revocation_entry(moved)],
        signer,
    )
    report = run_pass(tmp_path / "log", tmp_path / "state", signer, trust_root(tmp_path / "t.json", PINNED))
    assert [(v["kind"], v["index"], v.get("kid")) for v in report["violations"]] == [
        ("bad_certificate", 0, widened.kid),
        ("bad_revocation", 2, moved.kid),
    ]
    # The forged revocation does not revoke: a pinned root did not sign it.
    assert report["keys"][1] == listed(certificate(2), 1, None, True)


def test_a_malformed_key_entry_is_an_entry_violation(signer: note.Signer, tmp_path: Path) -> None:
    good = certificate(1)
    body = good.to_json()
    malformed = [
        b"execution-proof-key-certificate/v1\n" + orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n",
        certificate_entry(good)[:-1],
        b"execution-proof-key-certificate/v1\n" + orjson.dumps({**body, "extra": "x"}) + b"\n",
        b"execution-proof-key-certificate/v1\nnot json\n",
        b"execution-proof-key-revocation/v1\n" + good.entry_body() + b"\n",
        b"<!doctype html>\n",  # a web server's page where an entry should be: no kind this monitor knows
    ]
    write_static_log(tmp_path / "log", [*receipts(0, 2), *malformed, *receipts(2, 2)], signer)
    report = run_pass(tmp_path / "log", tmp_path / "state", signer, trust_root(tmp_path / "t.json", PINNED))
    assert [(v["kind"], v["index"]) for v in report["violations"]] == [("entry", i) for i in range(4, 10)]
    assert report["keys"] == [] and report["new_entries"] == 14
    details = [v["detail"] for v in report["violations"]]
    assert "not its header, the document's RFC 8785 bytes and a newline" in details[0]
    assert "unknown extra" in details[2] and details[5] == "an entry of no kind this monitor knows"


def test_the_entry_classifier_reads_each_kind_once() -> None:
    """``check_chains`` hands each key entry and ``dsse`` leaf to the reader given, counts
    receipt entries alone in the chains, and flags bytes of no known kind."""
    read: list[tuple[int, str]] = []

    class Reader:
        def read(self, index: int, kind: Any, entry: bytes) -> list[Violation]:
            read.append((index, kind.name))
            return []

    found = check_chains(
        7,
        [receipt(0, None), leaf(0), certificate_entry(certificate(1)), b"\xff{}", receipt(1, 0), b"{}",
         revocation_entry(revoke(PINNED, certificate(1).kid, START_MS, ""))],
        {}, MemoryPrevs(), Reader(),
    )  # fmt: skip
    assert read == [(8, "dsse leaf"), (9, "key certificate entry"), (12, "dsse leaf"), (13, "key revocation entry")]
    assert [(v.kind, v.index) for v in found.violations] == [("entry", 10)]
    assert list(found.changed) == ["prj_A"]
    parsed = read_key_entry(8, KEY_CERTIFICATE_ENTRY, certificate_entry(certificate(1)))
    assert not isinstance(parsed, Violation) and parsed.document == certificate(1)


# --------------------------------------------------------------------------- across runs


def test_keys_are_kept_across_runs_and_a_trust_root_given_later_judges_them(
    signer: note.Signer, tmp_path: Path
) -> None:
    log, state = tmp_path / "log", tmp_path / "state"
    first, other = certificate(1), certificate(2, OTHER)
    entries = [*receipts(0, 2), certificate_entry(first), certificate_entry(other)]
    write_static_log(log, entries, signer)
    report = run_pass(log, state, signer)
    assert report["ok"] and report["keys"] == [listed(first, 4, None, None), listed(other, 5, None, None)]
    second = certificate(3)
    revoked = revoke(PINNED, first.kid, START_MS + DAY_MS, "")
    write_static_log(log, [*entries, *receipts(2, 2), certificate_entry(second), revocation_entry(revoked)], signer)
    roots = trust_root(tmp_path / "t.json", PINNED)
    report = run_pass(log, state, signer, roots)
    assert report["new_entries"] == 6
    assert report["keys"] == [
        listed(first, 4, revoked.revoked_after, True),
        listed(other, 5, None, False),
        listed(second, 10, None, True),
    ]
    # The key the first run kept, certified by a root the trust root does not pin, is judged now.
    assert [(v["kind"], v["index"]) for v in report["violations"]] == [("unknown_root", 5)]
    # The text names the keys this pass read, not those read before.
    lines = [line for line in text(report, require_quorum=False) if line.startswith("monitor: key ")]
    assert lines == [
        f"monitor: key {second.kid} (entry 10), certified by {second.root_kid} (pinned) for "
        f"{second.not_before} to {second.not_after}"
    ]
    # A third run: nothing new, the same keys, the violation once.
    third = run_pass(log, state, signer, roots)
    assert third["keys"] == report["keys"] and third["violations"] == report["violations"]


# --------------------------------------------------------------------------- the trust root


def test_the_trust_root_pins_receipt_roots_of_version_2_and_none_of_version_1(tmp_path: Path) -> None:
    assert trust_root(tmp_path / "t.json", PINNED, OTHER).keys() == {
        certificate(1).root_kid,
        certificate(1, OTHER).root_kid,
    }
    version_1 = {
        "version": 1, "service_url": "https://receipts.example", "log": None, "tsa_roots_pem": [],
        "receipt_keys": [{"kid": "k1", "public_key_base64url": b64url_encode(online(1))}],
    }  # fmt: skip
    assert receipt_roots(orjson.dumps(version_1)) == (1, {})
    with pytest.raises(TrustRootError, match="unknown member 'receipt_roots'"):
        receipt_roots(orjson.dumps({**version_1, "receipt_roots": []}))
    twice = orjson.loads((tmp_path / "t.json").read_bytes())
    twice["receipt_roots"].append(twice["receipt_roots"][0])
    with pytest.raises(TrustRootError, match=r"receipt_roots\[2\]\.kid: duplicate"):
        receipt_roots(orjson.dumps(twice))
    twice["receipt_roots"] = [{**twice["receipt_roots"][0], "kid": "root-0000000000000000"}]
    with pytest.raises(TrustRootError, match=r"receipt_roots\[0\]\.kid: must be its key's"):
        receipt_roots(orjson.dumps(twice))
    with pytest.raises(TrustRootError, match=r"must be 1 or 2 \(the versions this client reads\), not 3"):
        receipt_roots(orjson.dumps({**twice, "version": 3}))


@pytest.mark.slow
def test_the_command_exits_1_on_a_root_not_pinned_and_names_the_new_keys(
    signer: note.Signer, tmp_path: Path, serve: Callable[[Path], str]
) -> None:
    pinned, other = certificate(1), certificate(2, OTHER)
    write_static_log(tmp_path / "log", [*receipts(0, 2), certificate_entry(pinned), certificate_entry(other)], signer)
    trust_root(tmp_path / "t.json", PINNED)
    done = subprocess.run(
        [sys.executable, "service.py", "monitor", "--tiles-url", serve(tmp_path / "log"),
         "--log-key", signer.verifier.encode(), "--state", str(tmp_path / "state"), "--once",
         "--trust-root", str(tmp_path / "t.json")],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = orjson.loads(done.stdout)
    assert [v["kind"] for v in report["violations"]] == ["unknown_root"]
    assert [key["root_pinned"] for key in report["keys"]] == [True, False]
    assert (
        f"monitor: key {other.kid} (entry 5), certified by {other.root_kid} (NOT PINNED by --trust-root)" in done.stderr
    )
    assert f"unknown_root at entry 5: the key certificate of {other.kid} names the root" in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 7}')
    done = subprocess.run(
        [sys.executable, "service.py", "monitor", "--tiles-url", serve(tmp_path / "log"), "--json",
         "--log-key", signer.verifier.encode(), "--state", str(tmp_path / "state"), "--once", "--trust-root", str(bad)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and orjson.loads(done.stdout)["error"]["kind"] == "InvalidInput", done.stdout
