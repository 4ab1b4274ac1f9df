"""bench/log_soak.py's pure parts: the fault plan is the seed's alone, the judge flags a forged
or forked checkpoint, a receipt that is not where its proof put it and a receipt's entry
without its dsse leaf, the observer flags a checkpoint going back, and the arguments are
bounded. (The soak itself runs real processes
for minutes: ``python -m bench.log_soak``.)"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from bench import log_soak
from bench.log_soak import Acked, Observer, judge, make_plan, parse_args
from execution_proof.receipts import attestation
from execution_proof.runtime.failpoints import STEPS, Failpoints
from execution_proof.transparency import note, tlog
from execution_proof.transparency.tiles import TileReader, tile_name

ORIGIN = "soak.example/log"
SIGNER = note.Signer.generate(ORIGIN)


# --------------------------------------------------------------------------- the plan


def test_the_plan_is_the_seeds_alone() -> None:
    assert make_plan(7, 180, 3) == make_plan(7, 180, 3)
    assert make_plan(7, 180, 3) != make_plan(8, 180, 3)
    # A slot's lives do not depend on how many slots there are.
    assert make_plan(7, 180, 2).lives == make_plan(7, 180, 3).lives[:2]


def test_the_plan_draws_every_kind_of_fault_within_its_bounds() -> None:
    plan = make_plan(3, 600, 3)
    lives = [life for slot in plan.lives for life in slot]
    assert all(len(slot) == 600 // 2 + 4 for slot in plan.lives)
    actions: set[str] = set()
    sleeps = []
    for life in lives:
        parsed = Failpoints.parse(life.failpoints)
        if parsed is None:
            continue
        assert set(parsed.actions) <= set(STEPS) - {"created"}
        assert list(parsed.actions) == sorted(parsed.actions, key=STEPS.index)
        for action in parsed.actions.values():
            actions.add(action.kind)
            if action.kind == "sleep":
                sleeps.append(action.ms)
        assert log_soak.SHORT_CONT_S[0] <= life.cont_after_s <= log_soak.LONG_CONT_S[1]
        assert log_soak.LIFETIME_S[0] <= life.lifetime_s <= log_soak.LIFETIME_S[1]
    assert actions == {"stop", "kill", "sleep"}
    assert any(not life.failpoints for life in lives), "no healthy life"
    lease_ms = log_soak.LEASE_S * 1000
    assert any(ms < lease_ms for ms in sleeps) and any(ms > lease_ms for ms in sleeps)
    assert any(life.cont_after_s > log_soak.LEASE_S for life in lives)
    assert any(life.cont_after_s < log_soak.LEASE_S for life in lives)
    times = [event.at_s for event in plan.redis]
    assert times == sorted(times) and times[-1] < 600
    assert plan.redis[0].kind == "save"
    kinds = {event.kind for event in plan.redis}
    assert kinds == {"save", "restore", "reload", "flushall", "overwrite"}
    assert all(1 <= e.back <= 3 for e in plan.redis if e.kind in ("restore", "reload", "overwrite"))


def test_fault_points_and_loud_lines_are_read_from_a_workers_log() -> None:
    text = "\n".join(
        [
            '{"level": "warning", "msg": "LOG_FAILPOINTS staged=sleep:5500: reached (pid 12)"}',
            '{"level": "warning", "msg": "LOG_FAILPOINTS tiles=stop: reached (pid 12)"}',
            '{"level": "info", "msg": "the tree state moved under this integrator"}',
            '{"level": "error", "msg": "something failed"}',
            '{"level": "warning", "msg": "pass failed", "exc": "Traceback (most recent call last):\\n  File"}',
            "Traceback (most recent call last):",
        ]
    )
    assert log_soak.reached_points(text) == [("staged", "sleep:5500"), ("tiles", "stop")]
    assert log_soak.loud_lines(text) == [
        "error: something failed",
        "a traceback at warning: pass failed",
        "a traceback",
    ]


def test_the_job_queues_own_report_of_a_redis_restart_is_not_a_finding() -> None:
    """RQ's ``could not connect`` line and its scheduler's exception record (with the same
    tracebacks printed raw under ``Process Scheduler:``) are the documented report of a
    Redis restart; anything else, another traceback included, is still a finding."""
    scheduler = (
        '{"level": "error", "logger": "rq.scheduler", "msg": "Scheduler [PID 7] raised an exception.\\n'
        'Traceback (most recent call last):\\n  x\\nTraceback (most recent call last):\\n  y"}'
    )
    report = [
        '{"level": "error", "logger": "rq.worker", "msg": "Worker w: could not connect to Redis instance: x"}',
        scheduler,
        "Process Scheduler:",
        "Traceback (most recent call last):",
        "  x",
        "Traceback (most recent call last):",
        "  y",
    ]
    text = "\n".join(report)
    left, taken = log_soak.without_queue_outage(text, log_soak.loud_lines(text))
    assert (left, taken) == ([], 4)
    text = "\n".join([*report, '{"level": "error", "logger": "eps.log", "msg": "the log failed"}'])
    left, _ = log_soak.without_queue_outage(text, log_soak.loud_lines(text))
    assert left == ["error: the log failed"]
    text = "\n".join([*report, "Traceback (most recent call last):"])  # one more than RQ's
    left, _ = log_soak.without_queue_outage(text, log_soak.loud_lines(text))
    assert left.count("a traceback") == 3


def test_only_the_exits_a_fault_or_the_harness_explains_pass() -> None:
    started = '{"level": "info", "msg": "Worker vm.1: started with PID 1"}\n'
    assert log_soak.exit_kind(0, started) is not None  # SIGTERM
    assert log_soak.exit_kind(-9, started) is not None  # its kill
    assert log_soak.exit_kind(-15, "") is not None  # SIGTERM before Python had started it
    assert log_soak.exit_kind(2, log_soak.UNREACHABLE + "\n") is not None  # Redis restarting
    outage = '{"level": "warning", "msg": "log integrator pass failed (StoreUnavailable)"}\n'
    assert log_soak.exit_kind(2, log_soak.UNREACHABLE + "\n" + outage) is not None  # its integrator saw it too
    assert log_soak.exit_kind(2, log_soak.UNREACHABLE + '\n{"level": "error", "msg": "x"}\n') is None
    assert log_soak.exit_kind(-15, started) is None
    refused = started + '{"level": "critical", "msg": "LOG REFUSED: the integrator stops and signs nothing"}\n'
    assert log_soak.exit_kind(2, refused) is None
    assert log_soak.exit_kind(1, started) is None


# --------------------------------------------------------------------------- the judge


def receipt(n: int, project: str = "prj_a") -> dict[str, Any]:
    return {
        "receipt_id": f"rcpt_{n:04d}",
        "receipt_hash": f"sha256:{n:064x}",
        "project_id": project,
        "input_hash": f"sha256:{n + 1:064x}",
    }


def leaf(made: dict[str, Any]) -> bytes:
    """The dsse leaf of ``made``'s attestation (its signature left at zeros: the judge holds a
    leaf to its receipt's Statement, not to a key)."""
    payload_hash = hashlib.sha256(attestation.statement_bytes(made, ORIGIN)).digest()
    return attestation.log_body(payload_hash, bytes(64), bytes(range(32)))


def logged(*made: dict[str, Any]) -> list[bytes]:
    """Receipts as the log holds them: each one's entry, then its dsse leaf."""
    return [entry for one in made for entry in (tlog.entry_bytes(one), leaf(one))]


def certificate(n: int) -> bytes:
    """A key certificate's entry (the judge reads none: it only tells the kinds apart)."""
    return tlog.KEY_CERTIFICATE_HEADER + b'{"kid":"key-%d"}\n' % n


def write_tree(folder: Path, entries: list[bytes]) -> None:
    """A store holding exactly this tree's tiles and bundles (full and partial) at its size."""
    hashes = [tlog.leaf_hash(entry) for entry in entries]
    level = 0
    while hashes:
        for first in range(0, len(hashes), tlog.TILE_WIDTH):
            chunk = hashes[first : first + tlog.TILE_WIDTH]
            index = first // tlog.TILE_WIDTH
            path = folder / tile_name(level, index, len(chunk))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"".join(chunk))
            if level == 0:
                bundle = folder / tile_name("entries", index, len(chunk))
                bundle.parent.mkdir(parents=True, exist_ok=True)
                bundle.write_bytes(b"".join(tlog.bundle_entry(e) for e in entries[first : first + tlog.TILE_WIDTH]))
        full = len(hashes) - len(hashes) % tlog.TILE_WIDTH
        hashes = [tlog.merkle_root(hashes[at : at + tlog.TILE_WIDTH]) for at in range(0, full, tlog.TILE_WIDTH)]
        level += 1


def signed(entries: list[bytes], signer: note.Signer = SIGNER) -> bytes:
    root = tlog.merkle_root([tlog.leaf_hash(entry) for entry in entries]) if entries else tlog.EMPTY_ROOT
    return note.sign_note(note.Checkpoint(ORIGIN, len(entries), root).text(), signer).encode()


def proof_text(folder: Path, entries: list[bytes], index: int) -> str:
    async def fetch(name: str) -> bytes | None:
        path = folder / name
        return path.read_bytes() if path.is_file() else None

    path = asyncio.run(TileReader(fetch).compute(len(entries), lambda view: view.inclusion_proof(index)))
    return note.TlogProof(index, tuple(path), signed(entries).decode()).encode()


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """A log of 300 entries (a full tile, a partial one, a level-1 tile), published: a key
    certificate, 149 receipts (receipt n's entry at 1 + 2n, its leaf after it), another one."""
    folder = tmp_path / "store"
    entries = [certificate(1), *logged(*(receipt(n) for n in range(149))), certificate(2)]
    write_tree(folder, entries)
    (folder / "checkpoint").write_bytes(signed(entries))
    return folder, entries


def test_the_judge_passes_a_log_whose_every_checkpoint_is_a_prefix(store: tuple[Path, list[bytes]]) -> None:
    folder, entries = store
    observed = [signed(entries[:n]) for n in (0, 1, 101, 257, 299, 300)]
    acked = [Acked(receipt(n), proof_text(folder, entries, 1 + 2 * n)) for n in (0, 75, 148)]
    verdict = judge(folder, SIGNER.verifier, observed, acked)
    assert verdict.findings == []
    assert (verdict.final_size, verdict.checkpoints, verdict.acked) == (300, 6, 3)
    assert log_soak.receipt_ids(entries) == [receipt(n)["receipt_id"] for n in range(149)]


def test_the_judge_flags_a_forged_checkpoint(store: tuple[Path, list[bytes]]) -> None:
    folder, entries = store
    forger = note.Signer.generate(ORIGIN)  # the same origin, another key
    verdict = judge(folder, SIGNER.verifier, [signed(entries[:101]), signed(entries[:201], forger)], [])
    assert len(verdict.findings) == 1
    assert "does not verify" in verdict.findings[0]


def test_the_judge_flags_a_forked_checkpoint_and_a_receipt_proven_in_the_fork(
    store: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    folder, entries = store
    fork = entries[:101] + logged(*(receipt(n, "prj_other") for n in range(100, 110)))
    elsewhere = tmp_path / "fork"
    write_tree(elsewhere, fork)
    forked_proof = Acked(receipt(105, "prj_other"), proof_text(elsewhere, fork, 111))
    verdict = judge(folder, SIGNER.verifier, [signed(entries[:121]), signed(fork)], [forked_proof])
    assert any("not a prefix of the final tree" in finding for finding in verdict.findings), verdict.findings
    assert any("acknowledged at index 111, not there" in finding for finding in verdict.findings)
    assert len(verdict.findings) == 2


def test_the_judge_flags_a_receipt_entry_without_its_leaf_a_stray_leaf_and_anothers_leaf(tmp_path: Path) -> None:
    """Each receipt enters the log with the dsse leaf of its attestation right after it: a
    receipt entry followed by anything else, a leaf after anything but a receipt entry, and an
    acknowledged receipt followed by another receipt's leaf are findings."""
    zero, one, two, three = (receipt(n) for n in range(4))
    folder = tmp_path / "unpaired"
    entries = [certificate(1), *logged(zero), tlog.entry_bytes(one), *logged(two), certificate(2), leaf(three)]
    assert log_soak.unpaired(entries) == [3, 7]
    write_tree(folder, entries)
    (folder / "checkpoint").write_bytes(signed(entries))
    verdict = judge(folder, SIGNER.verifier, [], [Acked(zero, proof_text(folder, entries, 1))])
    assert verdict.findings == ["2 entries break a receipt's pair of entry and dsse leaf, at [3, 7]"]
    folder = tmp_path / "swapped"
    entries = [certificate(1), tlog.entry_bytes(zero), leaf(one), *logged(one)]
    write_tree(folder, entries)
    (folder / "checkpoint").write_bytes(signed(entries))
    acked = [Acked(zero, proof_text(folder, entries, 1)), Acked(one, proof_text(folder, entries, 3))]
    verdict = judge(folder, SIGNER.verifier, [], acked)
    assert verdict.findings == ["receipt rcpt_0000: the dsse leaf of its attestation is not at 2"]


def test_the_judge_flags_a_log_that_went_back_a_receipt_twice_and_a_halt(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    entries = logged(*(receipt(n) for n in range(10))) + logged(receipt(3))
    write_tree(folder, entries)
    (folder / "checkpoint").write_bytes(signed(entries))
    (folder / ".state").mkdir()
    (folder / ".state" / "halt").write_text('{"kind": "refused"}')
    bigger = [*entries, *logged(receipt(11))]
    verdict = judge(folder, SIGNER.verifier, [signed(bigger)], [])
    assert len(verdict.findings) == 3, verdict.findings
    assert "halted" in verdict.findings[0]
    assert "more than once: ['rcpt_0003']" in verdict.findings[1]
    assert "went back" in verdict.findings[2]


def test_the_observer_flags_a_checkpoint_going_back_or_forged(tmp_path: Path) -> None:
    entries = [tlog.entry_bytes(receipt(n)) for n in range(20)]
    observer = Observer("http://127.0.0.1:9", tmp_path, SIGNER.verifier)
    for n in (5, 10, 10, 20):
        observer.keep("served", signed(entries[:n]))
    assert observer.findings == []
    assert len(observer.texts) == 3
    observer.keep("served", signed(entries[:15]))
    forked = [*entries[:19], tlog.entry_bytes(receipt(99))]
    observer.keep("file", signed(entries[:20]))
    observer.keep("file", signed(forked))
    observer.keep("file", signed(entries[:20], note.Signer.generate(ORIGIN)))
    assert observer.findings[0] == "the served checkpoint went back from 20 to 15"
    assert observer.findings[1] == "the file checkpoint showed two roots for size 20"
    assert "the file checkpoint does not verify" in observer.findings[2]


def test_the_observer_forgives_going_back_only_while_a_copy_lies_over_the_store(tmp_path: Path) -> None:
    entries = [tlog.entry_bytes(receipt(n)) for n in range(20)]
    observer = Observer("http://127.0.0.1:9", tmp_path, SIGNER.verifier)
    observer.keep("file", signed(entries[:20]))
    observer.allow_back_until = float("inf")
    observer.keep("file", signed(entries[:10]))
    observer.allow_back_until = 0.0
    observer.keep("file", signed(entries[:20]))
    observer.keep("file", signed(entries[:15]))
    assert observer.forgiven == 1
    assert observer.findings == ["the file checkpoint went back from 20 to 15"]


def test_an_overwrite_is_undone_to_the_live_files(store: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    """A copy taken at 100 entries, copied over the store grown to 300 (``cp -a``: newer files
    stay, the copy's replace theirs, its own are added), then undone: the live store again."""
    folder, entries = store
    (folder / ".state").mkdir()
    (folder / ".state" / "tree").write_bytes(b"live tree")
    live = {name: (folder / name).read_bytes() for name in log_soak.store_files(folder)}
    older = tmp_path / "older"
    write_tree(older, entries[:100])
    (older / "checkpoint").write_bytes(signed(entries[:100]))
    (older / ".state").mkdir()
    (older / ".state" / "tree").write_bytes(b"older tree")
    (tmp_path / "soak").mkdir()
    copies = log_soak.StoreCopies(tmp_path / "soak", folder)
    copies.store = older
    copies.take()
    copies.store = folder
    overwritten = copies.overwrite(1)
    assert (overwritten.live_size, overwritten.copy_size) == (300, 100)
    assert (folder / ".state" / "tree").read_bytes() == b"older tree"
    assert (folder / "tile/0/000.p/100").exists(), "the copy's own partial tile was not added"
    assert (folder / "tile/0/001.p/44").exists(), "a newer file went: cp -a keeps them"
    assert "tile/0/000.p/100" in overwritten.created
    copies.undo(overwritten)
    undone = {name: (folder / name).read_bytes() for name in log_soak.store_files(folder)}
    assert undone == live


def test_only_the_lines_of_an_overwrites_refusal_are_forgiven() -> None:
    reason = "tile/0/000.p/80 is beyond the tree state of size 50: the store held a larger tree"
    lines = [
        f"critical: LOG REFUSED: the integrator stops and signs nothing: {reason}",
        f"critical: LOG HALTED: {reason}. The integrator signs nothing",
        "critical: LOG REFUSED: the integrator stops and signs nothing: another reason",
        "error: something else",
    ]
    left, taken = log_soak.without_refusals(lines, [reason])
    assert (left, taken) == (lines[2:], 2)


# --------------------------------------------------------------------------- arguments


def test_arguments_have_bounded_defaults_and_a_seed_is_always_reported() -> None:
    args = parse_args([])
    assert (args.minutes, args.workers, args.rate, args.out) == (3.0, 3, 10.0, None)
    assert isinstance(args.seed, int)
    args = parse_args(["--minutes", "1", "--workers", "2", "--seed", "42", "--rate", "5", "--out", "r.json"])
    assert (args.minutes, args.workers, args.seed, args.rate, args.out) == (1.0, 2, 42, 5.0, Path("r.json"))


@pytest.mark.parametrize(
    "argv", [["--minutes", "0"], ["--minutes", "1000"], ["--workers", "1"], ["--workers", "7"], ["--rate", "0"]]
)
def test_arguments_out_of_bounds_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
