"""``python service.py monitor`` against logs the tests serve themselves: a healthy one that
grows, one that forks, one that rewrites an old checkpoint, and ones whose project chain
splits or forks; each named in the JSON report, exit 1; an unreadable log exits 2."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from receipts import note, tlog
from tests.conftest import REPO
from tests.servers import serving
from tests.test_tlog import TileStore

ORIGIN = "served.example/log"
pytestmark = pytest.mark.slow


class ServedLog:
    """A log the test builds entry by entry and serves over HTTP as the service would."""

    def __init__(self, signer: note.Signer) -> None:
        self.signer = signer
        self.entries: list[bytes] = []
        self.files: dict[str, bytes] = {}

    def publish(self, entries: list[bytes]) -> None:
        """Serve the tree of ``entries`` (tiles, bundles, a signed checkpoint)."""
        store = TileStore()
        store.append([tlog.leaf_hash(e) for e in entries])
        files = {}
        for (level, index), data in store.tiles.items():
            width = len(data) // 32
            files[f"tile/{tlog.tile_path(level, index, width)}"] = bytes(data)
            if level == 0:
                bundle = b"".join(tlog.bundle_entry(e) for e in entries[index * 256 : index * 256 + width])
                files[f"tile/{tlog.tile_path('entries', index, width)}"] = bundle
        checkpoint = note.Checkpoint(ORIGIN, store.size, store.root)
        files["checkpoint"] = note.sign_note(checkpoint.text(), self.signer).encode()
        self.files, self.entries = files, list(entries)


def entry(n: int, project: str, prev: int | None, status: str = "main") -> bytes:
    def h(k: int) -> str:
        return "sha256:" + hashlib.sha256(f"{project}-{k}".encode()).hexdigest()

    receipt = {
        "receipt_id": f"rcpt_01JD{n:022d}",
        "receipt_hash": h(n),
        "project_id": project,
        "prev_receipt_hash": h(prev) if prev is not None else None,
        "chain_status": status,
    }
    return tlog.entry_bytes(receipt)


def chain(project: str, count: int, start: int = 0) -> list[bytes]:
    return [entry(start + i, project, start + i - 1 if i or start else None) for i in range(count)]


@pytest.fixture
def served() -> Iterator[tuple[ServedLog, str]]:
    log = ServedLog(note.Signer.generate(ORIGIN))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = log.files.get(self.path.removeprefix("/v1/log/"))
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield log, url


def monitor(base: str, log: ServedLog, state: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "service.py", "monitor", "--base-url", base, "--log-key", log.signer.verifier.encode(),
         "--state", str(state), "--once"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, orjson.loads(done.stdout.splitlines()[-1]) if done.stdout else {}


def kinds(report: dict[str, Any]) -> list[str]:
    return [v["kind"] for v in report["violations"]]


def test_a_healthy_log_passes_as_it_grows(served: tuple[ServedLog, str], tmp_path: Path) -> None:
    log, base = served
    entries = chain("prj_A", 200) + chain("prj_B", 100)
    log.publish(entries[:150])
    assert monitor(base, log, tmp_path) == (
        0,
        {"ok": True, "violations": [], "checkpoint": {"origin": ORIGIN, "size": 150}, "new_entries": 150},
    )
    log.publish(entries)  # a tile boundary crossed, another project
    code, report = monitor(base, log, tmp_path)
    assert (code, report["new_entries"]) == (0, 150)


def test_a_fork_and_a_rewritten_checkpoint_are_named(served: tuple[ServedLog, str], tmp_path: Path) -> None:
    log, base = served
    log.publish(chain("prj_A", 20))
    assert monitor(base, log, tmp_path)[0] == 0
    log.publish(chain("prj_A", 10) + chain("prj_Z", 30))  # another history, larger
    code, report = monitor(base, log, tmp_path)
    assert code == 1 and kinds(report) == ["inconsistent"] and "does not extend" in report["violations"][0]["detail"]
    log.publish([*chain("prj_A", 19), entry(99, "prj_A", 18)])  # the same size, another root
    code, report = monitor(base, log, tmp_path)
    assert code == 1 and kinds(report) == ["inconsistent"] and "rewritten" in report["violations"][0]["detail"]
    log.publish(chain("prj_A", 5))  # smaller than what was seen
    assert kinds(monitor(base, log, tmp_path)[1]) == ["inconsistent"]


def test_a_split_and_a_forked_project_chain_are_named(served: tuple[ServedLog, str], tmp_path: Path) -> None:
    log, base = served
    good = chain("prj_A", 5)
    log.publish(good)
    assert monitor(base, log, tmp_path)[0] == 0
    # A main receipt that follows a receipt that is not the tip (40, never on main), and one
    # that follows 3, which receipt 4 already follows.
    log.publish([*good, entry(50, "prj_A", 40), entry(51, "prj_A", 3)])
    code, report = monitor(base, log, tmp_path)
    assert code == 1
    assert [(v["kind"], v["index"], v["project_id"]) for v in report["violations"]] == [
        ("chain_split", 5, "prj_A"),
        ("chain_fork", 6, "prj_A"),
    ]
    # Branches and a fresh start (no previous hash) are fine.
    log.publish([*good, entry(60, "prj_A", 1, "branch"), entry(61, "prj_A", None)])
    assert monitor(base, log, tmp_path)[0] == 0


def test_a_tampered_entry_and_an_unreadable_log(served: tuple[ServedLog, str], tmp_path: Path) -> None:
    log, base = served
    log.publish(chain("prj_A", 3))
    bundle = log.files["tile/entries/000.p/3"]
    log.files["tile/entries/000.p/3"] = bundle.replace(b"prj_A", b"prj_X", 1)
    code, report = monitor(base, log, tmp_path)
    assert code == 1 and kinds(report) == ["entry"]
    log.files.clear()
    assert monitor(base, log, tmp_path)[0] == 2
