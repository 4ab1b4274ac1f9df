"""The monitor's pure core (transparency/monitor.py: the frontier it extends bundle by bundle, the
chain rules) and its fetcher's retries (cli/monitor_fetch.py), without processes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from bench.monitor import chain_entries, write_static_log
from execution_proof.cli import monitor_fetch
from execution_proof.cli.monitor import Progress
from execution_proof.cli.monitor_fetch import Fetcher
from execution_proof.client.http import HttpError, HttpUnreachable, Reply
from execution_proof.client.log_checks import LogInputError
from execution_proof.transparency import note, tlog
from execution_proof.transparency.monitor import (
    Frontier,
    MemoryPrevs,
    Project,
    Violation,
    WrongLog,
    check_chains,
    check_followed,
    completed_tiles,
    open_followed,
    split_bundle,
    subtree_root,
)
from tests.test_tlog import TileStore


def feed(frontier: Frontier, store: TileStore, entries: list[bytes], size: int) -> None:
    """Extend ``frontier`` to ``size`` from the tiles of ``store`` (a tree at least that big)."""
    while frontier.size < size:
        index = frontier.size // 256
        width = tlog.tile_width(size, 0, index)
        upper = {(level, i): store.read(level, i, 256) for level, i in (completed_tiles(index) if width == 256 else [])}
        violation = frontier.check_bundle(
            index, width, store.read(0, index, width), entries[index * 256 : index * 256 + width], upper
        )
        assert violation is None, violation


@pytest.mark.parametrize("sizes", [(1,), (255, 256, 257), (3, 600, 70_000), (65_536,), (65_535, 65_537)])
def test_the_frontier_gives_the_logs_root_at_every_size(sizes: tuple[int, ...]) -> None:
    entries = list(chain_entries(max(sizes), 7))
    store = TileStore()
    store.append(tlog.leaf_hashes(entries))
    frontier = Frontier()
    for size in sizes:
        feed(frontier, store, entries, size)
        frontier = Frontier.decode(frontier.size, frontier.encode())  # as a resumed run finds it
        expected = tlog.TileHashes(size, store.read).root()
        edge = {key: store.read(*key) for key in frontier.edge()}
        assert frontier.check_edge(edge, expected) is None
        assert frontier.root() == expected


def test_a_frontier_that_does_not_fit_its_size_is_refused() -> None:
    with pytest.raises(ValueError, match="level 0"):
        Frontier.decode(5, bytes([4]) + bytes(4 * 32))
    with pytest.raises(ValueError, match="too few levels"):
        Frontier.decode(256, b"")


def test_a_mismatch_leaves_the_frontier_as_it_was() -> None:
    entries = list(chain_entries(512, 3))
    store = TileStore()
    store.append(tlog.leaf_hashes(entries))
    frontier = Frontier()
    feed(frontier, store, entries, 100)
    before = frontier.encode()
    bad = entries[:256]
    bad[200] = bad[200].replace(b"main", b"mainx")
    violation = frontier.check_bundle(0, 256, store.read(0, 0, 256), bad, {})
    assert violation is not None and (violation.kind, violation.index) == ("entry", 200)
    assert (frontier.size, frontier.encode()) == (100, before)
    frontier.verified = 100
    rewritten = bytearray(store.read(0, 0, 256))
    rewritten[3 * 32] ^= 1
    violation = frontier.check_bundle(0, 256, bytes(rewritten), entries[:256], {})
    assert violation is not None and (violation.kind, violation.index) == ("inconsistent", 3)


def test_fast_helpers_match_tlog() -> None:
    entries = list(chain_entries(300, 5))
    bundle = b"".join(tlog.bundle_entry(e) for e in entries)
    assert split_bundle(bundle) == tlog.split_bundle(bundle)
    with pytest.raises(tlog.ProofError):
        split_bundle(bundle[:-1])
    leaves = tlog.leaf_hashes(entries[:256])
    assert subtree_root(leaves) == tlog.merkle_root(leaves)
    assert completed_tiles(254) == [] and completed_tiles(255) == [(1, 0)]
    assert completed_tiles(65_535) == [(1, 255), (2, 0)]


def h(n: int) -> str:
    return "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()


def entry(n: int, prev: int | None, status: str = "main", project: str = "prj_A") -> bytes:
    return tlog.entry_bytes(
        {"receipt_id": f"r{n}", "receipt_hash": h(n), "project_id": project,
         "prev_receipt_hash": h(prev) if prev is not None else None, "chain_status": status}
    )  # fmt: skip


def test_the_chain_rules() -> None:
    known = {"prj_A": Project(h(2), h(1))}
    entries = [
        entry(3, 2),  # follows the tip
        entry(4, 2),  # the same previous hash as the last main entry: a fork
        entry(5, 9),  # not the tip: a split
        entry(6, None),  # a fresh start
        entry(7, 3, "branch"),  # branches do not move the tip
        entry(8, 6),
        entry(10, 2),  # a previous hash main entries followed before (3 and 4): a fork too
        entry(9, 77, project="prj_new"),  # a project's first main entry starts anywhere
        b"not an entry\n",
        b"\xff\n",
    ]
    used = MemoryPrevs()
    result = check_chains(10, entries, known, used)
    assert [(v.kind, v.index) for v in result.violations] == [
        ("chain_fork", 11),
        ("chain_split", 12),
        ("chain_fork", 16),
        ("entry", 18),
        ("entry", 19),
    ]
    assert result.changed == {"prj_A": Project(h(10), h(2)), "prj_new": Project(h(9), h(77))}
    assert used.seen("prj_A", h(9)) and used.seen("prj_new", h(77)) and not used.seen("prj_new", h(2))
    assert known == {"prj_A": Project(h(2), h(1))}  # the input is left alone


def response(status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> Reply:
    return Reply(status, headers or {}, body, "http://log/")


def refused() -> HttpError:
    """What http_client raises when the connection is refused."""
    return HttpUnreachable("cannot reach http://log/: Connection refused")


async def test_the_fetcher_retries_with_backoff_and_honours_retry_after() -> None:
    answers: list[Reply | HttpError] = [
        refused(),
        response(503),
        response(429, {"retry-after": "7"}),
        response(200, body=b"tile"),
    ]
    slept: list[float] = []

    async def get(url: str) -> Reply:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    fetcher = Fetcher(get, "http://log/", sleep=sleep)
    assert await fetcher.fetch("tile/0/000") == b"tile"
    assert len(slept) == 3 and slept[2] == 7.0
    assert 0 <= slept[0] <= 0.5 and 0 <= slept[1] <= 1.0  # jittered, doubling
    answers[:] = [response(404)]
    assert await fetcher.fetch("tile/0/001") is None
    answers[:] = [response(403)]
    with pytest.raises(LogInputError, match="HTTP 403"):
        await fetcher.fetch("tile/0/002")
    answers[:] = [response(500)] * 10
    with pytest.raises(LogInputError, match="6 attempts"):
        await fetcher.fetch("tile/0/003")
    answers[:] = [refused()] * 10
    with pytest.raises(LogInputError, match=r"Connection refused \(6 attempts\)"):
        await fetcher.fetch("tile/0/004")
    # A failure that trying again cannot mend (a redirect loop, a reply over the ceiling:
    # http_client raises those without an OSError behind them) is reported at once.
    slept.clear()
    answers[:] = [HttpError("http://log/tile/0/005: more than 5 redirects"), response(200)]
    with pytest.raises(LogInputError, match="more than 5 redirects"):
        await fetcher.fetch("tile/0/005")
    assert slept == [] and len(answers) == 1


async def test_a_log_silent_for_the_silence_limit_ends_the_fetch() -> None:
    """Every request times out after 10 s of the (fake) clock: the fetcher stops at 30 s of
    silence, long before its 6 attempts; a ``Retry-After`` longer than that, asked for by a
    log that answered, is not silence."""
    now = [0.0]

    async def silent(url: str) -> Reply:
        now[0] += 10
        raise HttpUnreachable(f"cannot reach {url}: timed out")

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    fetcher = Fetcher(silent, "http://log/", sleep=sleep, clock=lambda: now[0])
    with pytest.raises(LogInputError, match=r"has not answered for 30 s \(cannot reach http://log/checkpoint"):
        await fetcher.fetch("checkpoint")
    assert 30 <= now[0] <= 31.5 and fetcher.requests == 3  # the third request began before 30 s: 0-1.5 s of backoff
    answers = [response(429, {"retry-after": "45"}), response(200, body=b"tile")]

    async def slow_down(url: str) -> Reply:
        now[0] += 1
        return answers.pop(0)

    fetcher = Fetcher(slow_down, "http://log/", sleep=sleep, clock=lambda: now[0])
    assert await fetcher.fetch("tile/0/000") == b"tile"
    assert fetcher.waits == [45.0]


async def test_a_request_without_a_reply_is_given_up_on_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply that never comes (real time, a deadline of 50 ms) is a failure retried like a
    refused connection, and the silence limit ends the fetch."""
    monkeypatch.setattr(monitor_fetch, "REQUEST_DEADLINE_S", 0.05)

    async def never(url: str) -> Reply:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def no_pause(seconds: float) -> None:
        pass

    fetcher = Fetcher(never, "http://log/", sleep=no_pause, silence_s=0.2)
    with pytest.raises(LogInputError, match=r"has not answered for 0.2 s \(http://log/checkpoint: no reply within"):
        await fetcher.fetch("checkpoint")
    assert fetcher.requests >= 2  # given up on, then tried again


def test_the_log_a_state_follows_is_checked_before_and_after_it_is_recorded() -> None:
    log = note.Signer.generate("a.example/log")
    impostor, other = note.Signer.generate("a.example/log"), note.Signer.generate("b.example/log")
    where = "the state in DIR"
    check_followed(None, None, log.verifier, where)
    check_followed(log.verifier, "a.example/log", log.verifier, where)
    with pytest.raises(
        WrongLog, match=r"follows the log 'a\.example/log'; the key given is of the log 'b\.example/log'"
    ):
        check_followed(log.verifier, None, other.verifier, where)
    with pytest.raises(WrongLog, match=f"with the key {re.escape(log.verifier.encode())}; the key given is"):
        check_followed(log.verifier, None, impostor.verifier, where)
    with pytest.raises(WrongLog, match=r"holds progress on the log 'b\.example/log'"):
        check_followed(None, "b.example/log", log.verifier, where)

    text = note.sign_note(note.Checkpoint("a.example/log", 3, bytes(32)).text(), log)
    forged = note.sign_note(note.Checkpoint("a.example/log", 3, bytes(32)).text(), impostor)
    for followed in (False, True):
        opened = open_followed(text, log.verifier, followed=followed, url="URL")
        assert opened == note.Checkpoint("a.example/log", 3, bytes(32))
        with pytest.raises(WrongLog, match=r"URL is of the log 'a\.example/log'; .* the log 'b\.example/log'"):
            open_followed(text, other.verifier, followed=followed, url="URL")
        with pytest.raises(note.NoteError):
            open_followed("<html>", log.verifier, followed=followed, url="URL")
    with pytest.raises(WrongLog, match=r"not signed by the key given .*nothing was recorded"):
        open_followed(forged, log.verifier, followed=False, url="URL")
    violation = open_followed(forged, log.verifier, followed=True, url="URL")
    assert isinstance(violation, Violation) and violation.kind == "signature"
    assert "the checkpoint of size 3 is not signed by the log's key" in violation.detail


def test_progress_is_shown_on_a_terminal_only() -> None:
    out = io.StringIO()
    with redirect_stderr(out):
        Progress(False).update(5, 10, final=True)
        assert out.getvalue() == ""
        Progress(True).update(120_000, 1_000_000, final=True)
    assert out.getvalue().startswith("\r monitor: 120,000/1,000,000 entries, ")
    assert out.getvalue().endswith("/s\n")


def test_the_bench_writer_makes_a_log_that_verifies(tmp_path: Path) -> None:
    """write_static_log (the tests' and the bench's logs) agrees with receipts.tlog."""
    root = tmp_path / "log"
    signer = note.Signer.generate("w.example/log")
    entries = list(chain_entries(700, 3))
    checkpoint = write_static_log(root, entries, signer)
    store = TileStore()
    store.append(tlog.leaf_hashes(entries))
    assert checkpoint.root == store.root
    assert (root / "tile/1/000.p/2").read_bytes() == store.read(1, 0, 2)
    assert tlog.split_bundle((root / "tile/entries/002.p/188").read_bytes()) == entries[512:]


def test_the_previous_hashes_used_are_kept_on_disk_as_far_as_committed(tmp_path: Path) -> None:
    from execution_proof.cli.monitor_state import MonitorStateError, PrevFile

    path = tmp_path / "prevs.bin"
    kept = PrevFile(path, 0)
    for n in range(1000):
        kept.add("prj_A", h(n))
    assert kept.seen("prj_A", h(999)) and not kept.seen("prj_B", h(999))  # before the flush too
    assert kept.flush() == 16_000
    kept.add("prj_A", h(5000))  # added, never committed: a run killed before its save
    kept.flush()
    kept.close()
    again = PrevFile(path, 16_000)  # the state committed 16,000 bytes
    assert path.stat().st_size == 16_000
    assert again.seen("prj_A", h(0)) and again.seen("prj_A", h(999)) and not again.seen("prj_A", h(5000))
    again.close()
    with pytest.raises(MonitorStateError, match="the state says 32000 were written"):
        PrevFile(path, 32_000)
