"""The monitor's pure core (transparency/monitor.py: the frontier it extends bundle by bundle, the
chain rules) and its fetcher's retries (cli/monitor_fetch.py), without processes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest

from bench.monitor import chain_entries, dsse_leaf, write_static_log
from execution_proof.cli import monitor_fetch
from execution_proof.cli.monitor import Progress
from execution_proof.cli.monitor_fetch import Fetcher
from execution_proof.client.http import HttpError, HttpUnreachable, Reply
from execution_proof.client.log_checks import LogInputError
from execution_proof.transparency import note, tlog
from execution_proof.transparency.monitor import (
    DSSE_LEAF,
    KEY_CERTIFICATE_ENTRY,
    RECEIPT_ENTRY,
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


def leaf(n: int) -> bytes:
    """The ``dsse`` leaf after receipt ``n``'s entry."""
    return dsse_leaf(hashlib.sha256(f"leaf-{n}".encode()).digest())


def paired(*receipts: bytes) -> list[bytes]:
    """Receipt entries as the log holds them, each followed by a ``dsse`` leaf."""
    return [e for n, receipt in enumerate(receipts) for e in (receipt, leaf(n))]


def test_the_chain_rules() -> None:
    known = {"prj_A": Project(h(2), h(1))}
    entries = [
        *paired(
            entry(3, 2),  # follows the tip (index 10; its leaf 11, and so on)
            entry(4, 2),  # the same previous hash as the last main entry: a fork
            entry(5, 9),  # not the tip: a split
            entry(6, None),  # a fresh start
            entry(7, 3, "branch"),  # branches do not move the tip
            entry(8, 6),
            entry(10, 2),  # a previous hash main entries followed before (3 and 4): a fork too
            entry(9, 77, project="prj_new"),  # a project's first main entry starts anywhere
        ),
        b"not an entry\n",
        b"\xff\n",
    ]
    used = MemoryPrevs()
    result = check_chains(10, entries, known, used)
    assert [(v.kind, v.index) for v in result.violations] == [
        ("chain_fork", 12),
        ("chain_split", 14),
        ("chain_fork", 22),
        ("entry", 26),
        ("entry", 27),
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


# --------------------------------------------------------------------------- the pairs


def pairing(first: int, entries: list[bytes], **given: Any) -> tuple[list[tuple[str, int | None, str]], Any]:
    """The violations ``check_chains`` finds in ``entries`` (kind, index, detail) and the kind
    of the last one."""
    result = check_chains(first, entries, {}, MemoryPrevs(), **given)
    return [(v.kind, v.index, v.detail) for v in result.violations], result.last


def test_every_receipt_entry_is_followed_by_its_dsse_leaf_and_every_leaf_follows_one() -> None:
    certificate = tlog.KEY_CERTIFICATE_HEADER + b"{}\n"  # its reader is not given here: the kind is what counts
    assert pairing(0, paired(entry(1, None), entry(2, 1))) == ([], DSSE_LEAF)
    # A receipt entry without its leaf: named at the receipt's index, whatever follows it.
    found, _ = pairing(4, [entry(1, None), entry(2, 1), leaf(2), entry(3, 2), certificate])
    assert [(kind, index) for kind, index, _ in found] == [("entry", 4), ("entry", 7)]
    assert found[0][2] == "receipt entry 4 is followed by a receipt entry, not by the dsse leaf of its attestation"
    assert found[1][2].startswith("receipt entry 7 is followed by a key certificate entry")
    found, _ = pairing(4, [entry(1, None), b"\xff"])
    assert [(index, detail) for _, index, detail in found] == [
        (4, "receipt entry 4 is followed by an entry of no known kind, not by the dsse leaf of its attestation"),
        (5, "an entry of no kind this monitor knows"),
    ]
    # A leaf after anything but a receipt entry, or first in the log.
    found, _ = pairing(0, [leaf(0), certificate, leaf(1), entry(2, None), leaf(2), leaf(3)])
    assert [(index, detail) for _, index, detail in found] == [
        (0, "a dsse leaf is the log's first entry, not the entry of its receipt"),
        (2, "a dsse leaf follows a key certificate entry, not the entry of its receipt"),
        (5, "a dsse leaf follows a dsse leaf, not the entry of its receipt"),
    ]


def test_a_pair_is_judged_across_calls_and_unknown_after_a_restart_is_not_judged() -> None:
    # The kind of the last entry carries to the next call (the next bundle, or the next pass).
    found, last = pairing(254, [leaf(0), entry(1, None)], before=RECEIPT_ENTRY)
    assert (found, last) == ([], RECEIPT_ENTRY)
    assert pairing(256, [leaf(1), entry(2, 1), leaf(2)], before=last) == ([], DSSE_LEAF)
    found, _ = pairing(256, [entry(2, 1), leaf(2)], before=last)
    assert [(index, detail[:40]) for _, index, detail in found] == [(255, "receipt entry 255 is followed by a recei")]
    found, _ = pairing(256, [leaf(1)], before=KEY_CERTIFICATE_ENTRY)
    assert [index for _, index, _ in found] == [256]
    # Not known (a restart at a bundle's edge): the first entry's pairing is not judged; the rest is.
    assert pairing(256, [leaf(1), entry(2, 1), leaf(2)]) == ([], DSSE_LEAF)
    found, _ = pairing(256, [leaf(1), leaf(2)])
    assert [index for _, index, _ in found] == [257]
    # No checkpoint ends between a receipt entry and its leaf: they are integrated as one.
    found, _ = pairing(10, [leaf(0), entry(1, None)], before=RECEIPT_ENTRY, ends=True)
    assert found == [
        ("entry", 11, "receipt entry 11 ends the checkpoint: the dsse leaf of its attestation is not after it")
    ]
    assert pairing(10, [entry(1, None), leaf(1)], ends=True) == ([], DSSE_LEAF)
    assert pairing(10, [entry(1, None)])[0] == []  # more entries may follow within the checkpoint


def test_after_a_restart_the_kind_before_comes_from_the_partial_bundle_when_it_hashes_to_its_leaf() -> None:
    entries = list(chain_entries(600, 3))
    store = TileStore()
    store.append(tlog.leaf_hashes(entries))
    frontier = Frontier()
    feed(frontier, store, entries, 101)  # entry 100 is a receipt's, 101 its leaf
    assert entries[100].startswith(RECEIPT_ENTRY.header) and entries[101].startswith(DSSE_LEAF.header)
    frontier.last = RECEIPT_ENTRY  # as a run that read entry 100 knows it
    assert frontier.kind_before([]) is RECEIPT_ENTRY and frontier.copy().last is RECEIPT_ENTRY
    resumed = Frontier.decode(frontier.size, frontier.encode())
    assert resumed.last is None
    assert resumed.kind_before(entries[:256]) is RECEIPT_ENTRY
    feed(resumed, store, entries, 102)
    assert Frontier.decode(102, resumed.encode()).kind_before(entries[:256]) is DSSE_LEAF
    # The entry the log serves again must be the one the monitor hashed: else it is not known.
    served = list(entries[:256])
    served[100] = leaf(100)
    assert Frontier.decode(101, frontier.encode()).kind_before(served) is None
    assert Frontier.decode(101, frontier.encode()).kind_before(entries[:100]) is None  # too short to hold it
    # At a bundle's edge the level-0 row is empty: nothing to read it from.
    feed(resumed, store, entries, 512)
    edge = Frontier.decode(512, resumed.encode())
    assert edge.kind_before(entries[512:]) is None and edge.kind_before(entries[256:512]) is None
