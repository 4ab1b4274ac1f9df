"""bench/client.py's pieces: the receipt it signs in process really verifies offline against
the key set it saves (so its timing is of a passing verify), and a failing command is reported,
not timed."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import client
from tests.servers import verify_cli


def test_the_benchs_receipt_verifies_offline_against_its_saved_keys(tmp_path: Path) -> None:
    inputs = client.make_inputs(tmp_path)
    done = verify_cli(str(inputs["receipt"]), "--keys", str(inputs["keys"]), "--input", str(inputs["file"]))
    assert done.returncode == 0, done.stdout + done.stderr
    tampered = inputs["receipt"].read_text().replace('"stage":"bench"', '"stage":"other"')
    assert tampered != inputs["receipt"].read_text()
    (tmp_path / "tampered.json").write_text(tampered)
    assert verify_cli(str(tmp_path / "tampered.json"), "--keys", str(inputs["keys"])).returncode == 1


def test_a_failing_command_is_reported_not_timed(tmp_path: Path) -> None:
    ok = client.wall_times([sys.executable, "-c", "pass"], 2, tmp_path)
    assert isinstance(ok, client.Timed) and len(ok.wall_s) == len(ok.cpu_s) == 2
    assert all(t > 0 for t in ok.wall_s + ok.cpu_s)
    failed = client.wall_times([sys.executable, "-c", "raise SystemExit('no httpx here')"], 2, tmp_path)
    assert failed == "exit 1: no httpx here"
