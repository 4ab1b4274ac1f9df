"""The monitor reads the dsse leaf of each receipt's attestation (transparency/monitor.py,
``DSSE_LEAF``; receipts/key_entries.py, ``read_dsse_leaf``): read strictly, and held to its
place, right after its receipt's entry. A receipt entry followed by anything else, a leaf
after anything but a receipt entry, a malformed leaf and a checkpoint that ends between the
two are ``entry`` violations; a pair may straddle two bundles or two passes. Logs are static
copies (bench/monitor.py's writer) read in process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench.monitor import write_static_log
from execution_proof.cli.monitor import Pass, Progress
from execution_proof.cli.monitor_fetch import Fetcher
from execution_proof.cli.monitor_state import MonitorDb, PassReport
from execution_proof.client.http import Reply
from execution_proof.receipts import attestation
from execution_proof.transparency import note
from tests.test_monitor_keys import PREFIX, certificate, certificate_entry, leaf, receipt, receipts

ORIGIN = "leaves.example/log"


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


async def one_pass(log: Path, db: MonitorDb, signer: note.Signer) -> PassReport:
    async def get(url: str) -> Reply:
        path = log / url.removeprefix(PREFIX)
        return Reply(200, {}, path.read_bytes(), url) if path.is_file() else Reply(404, {}, b"", url)

    return await Pass(Fetcher(get, PREFIX), signer.verifier, None, db, Progress(False)).run()


def passes(log: Path, state: Path, signer: note.Signer, *grown: list[bytes]) -> list[PassReport]:
    """One run (one state, opened once) of a pass per log in ``grown``, each written over
    ``log`` before its pass: what a monitor following the log (``--interval``) sees."""
    state.mkdir(exist_ok=True)
    db = MonitorDb(state / "monitor.sqlite3")
    reports = []
    try:
        for entries in grown:
            write_static_log(log, entries, signer)
            reports.append(asyncio.run(one_pass(log, db, signer)))
    finally:
        db.close()
    return reports


def found(report: PassReport) -> list[tuple[str, Any, str]]:
    return [(v["kind"], v.get("index"), v["detail"]) for v in report["violations"]]


def test_a_log_of_pairs_and_key_entries_passes(signer: note.Signer, tmp_path: Path) -> None:
    entries = [certificate_entry(certificate(1)), *receipts(0, 200), certificate_entry(certificate(2))]
    [report] = passes(tmp_path / "log", tmp_path / "state", signer, entries)
    assert report["ok"] and report["violations"] == [] and report["new_entries"] == 402, report


def test_a_receipt_without_its_leaf_a_stray_leaf_and_a_malformed_leaf_are_entry_violations(
    signer: note.Signer, tmp_path: Path
) -> None:
    body = attestation.parse_log_body(leaf(9))
    unsorted = b'{"kind":"dsse","apiVersion":"0.0.2"' + leaf(9)[len(b'{"apiVersion":"0.0.2","kind":"dsse"') :]
    entries = [
        *receipts(0, 2),
        receipt(2, 1),  # 4: no leaf after it
        *receipts(3, 1),
        certificate_entry(certificate(1)),
        leaf(4),  # 8: after a key certificate
        *receipts(4, 1),
        receipt(5, 4),
        leaf(5).replace(b"PKIX_ED25519", b"PKIX_ED25519X"),  # 12: another key's details
        receipt(6, 5),
        unsorted,  # 14: not RFC 8785
    ]
    assert body.public_key == bytes(range(32))
    [report] = passes(tmp_path / "log", tmp_path / "state", signer, entries)
    assert not report["ok"] and report["new_entries"] == len(entries) == 15
    violations = found(report)
    assert [(kind, index) for kind, index, _ in violations] == [
        ("entry", 4),
        ("entry", 8),
        ("entry", 12),
        ("entry", 14),
    ]
    details = [detail for _, _, detail in violations]
    assert details[0] == "receipt entry 4 is followed by a receipt entry, not by the dsse leaf of its attestation"
    assert details[1] == "a dsse leaf follows a key certificate entry, not the entry of its receipt"
    assert details[2].startswith("a malformed dsse leaf: ") and "PKIX_ED25519" in details[2]
    assert details[3] == "a malformed dsse leaf: a dsse body not in RFC 8785 form"


def test_a_checkpoint_that_ends_after_a_receipt_entry_is_a_violation(signer: note.Signer, tmp_path: Path) -> None:
    """The two are queued and integrated as one: no honest checkpoint ends between them."""
    [report] = passes(tmp_path / "log", tmp_path / "state", signer, [*receipts(0, 3), receipt(3, 2)])
    assert found(report) == [
        ("entry", 6, "receipt entry 6 ends the checkpoint: the dsse leaf of its attestation is not after it")
    ]


def test_a_pair_across_two_bundles_is_judged_as_one(signer: note.Signer, tmp_path: Path) -> None:
    """Receipt 127's entry is the last of bundle 0 (index 255), its leaf the first of bundle 1."""
    paired = [certificate_entry(certificate(1)), *receipts(0, 127), receipt(127, 126), leaf(127), *receipts(128, 10)]
    [report] = passes(tmp_path / "paired", tmp_path / "state-paired", signer, paired)
    assert report["ok"] and report["new_entries"] == 277, report
    split = [certificate_entry(certificate(1)), *receipts(0, 127), receipt(127, 126), *receipts(128, 10)]
    [report] = passes(tmp_path / "split", tmp_path / "state-split", signer, split)
    assert found(report) == [
        ("entry", 255, "receipt entry 255 is followed by a receipt entry, not by the dsse leaf of its attestation")
    ]


def test_a_pair_is_judged_across_passes_and_after_a_restart_from_the_bundle_read_again(
    signer: note.Signer, tmp_path: Path
) -> None:
    """The log at 100 entries, then a stray leaf at 100. Within one run the kind of entry 99
    is known; after a restart it is read again from the partial bundle (its hash checked
    against the frontier kept), so the stray leaf is found either way. At a bundle's edge
    (a log of 256) a restart knows nothing of entry 255: the first entry's pairing is not
    judged then (the rest is), while one run that goes on knows it."""
    first = receipts(0, 50)
    grown = [*first, leaf(99), *receipts(50, 2)]
    stray = [("entry", 100, "a dsse leaf follows a dsse leaf, not the entry of its receipt")]
    one_run = passes(tmp_path / "a", tmp_path / "state-a", signer, first, grown)
    assert [found(report) for report in one_run] == [[], stray]
    [report] = passes(tmp_path / "b", tmp_path / "state-b", signer, first)
    assert report["ok"], report
    [restarted] = passes(tmp_path / "b", tmp_path / "state-b", signer, grown)
    assert found(restarted) == stray and restarted["new_entries"] == 5

    edge = receipts(0, 128)
    grown = [*edge, leaf(999), *receipts(128, 2)]
    stray = [("entry", 256, "a dsse leaf follows a dsse leaf, not the entry of its receipt")]
    assert [found(report) for report in passes(tmp_path / "d", tmp_path / "state-d", signer, edge, grown)] == [
        [],
        stray,
    ]
    passes(tmp_path / "e", tmp_path / "state-e", signer, edge)
    [restarted] = passes(tmp_path / "e", tmp_path / "state-e", signer, grown)
    assert found(restarted) == [] and restarted["new_entries"] == 5


def test_the_monitors_quick_read_of_a_leaf_agrees_with_the_strict_parser() -> None:
    """``read_dsse_leaf`` accepts a leaf at once when it is byte for byte the body
    ``log_body`` writes for the values it holds, else asks ``parse_log_body``: on valid bodies
    and on bodies with a byte or three changed anywhere (seeded), the verdict is the parser's."""
    import random

    from execution_proof.receipts.key_entries import _is_leaf, read_dsse_leaf

    draw = random.Random(20261129)
    accepted = refused = 0
    for _ in range(600):
        body = attestation.log_body(draw.randbytes(32), draw.randbytes(64), draw.randbytes(32))
        assert _is_leaf(body) and read_dsse_leaf(3, body) is None
        changed = bytearray(body)
        for _ in range(draw.randint(1, 3)):
            changed[draw.randrange(len(changed))] = draw.choice(b'AZaz09+/="{}:,x\\\x00\xff')
        try:
            attestation.parse_log_body(bytes(changed))
        except attestation.AttestationError:
            violation = read_dsse_leaf(3, bytes(changed))
            assert violation is not None and (violation.kind, violation.index) == ("entry", 3)
            assert not _is_leaf(bytes(changed))
            refused += 1
        else:
            assert read_dsse_leaf(3, bytes(changed)) is None
            accepted += 1
    assert refused > 500, (accepted, refused)  # nearly every change breaks the body (a base64 letter may not)
