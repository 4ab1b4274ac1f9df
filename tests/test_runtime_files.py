"""runtime/files.py: the one atomic write (the witness's state, the client's files)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from execution_proof.runtime.files import write_atomically


def test_a_write_replaces_whole_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    write_atomically(target, b"new bytes", mode=0o600)
    assert target.read_bytes() == b"new bytes"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomically(target, b"again")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"], "no temporary file left"


def test_a_failed_write_leaves_the_target_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "keep.json"
    target.write_bytes(b"kept")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, b"lost")
    assert target.read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]


def test_a_relative_path_in_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_atomically("here.json", b"{}")
    assert (tmp_path / "here.json").read_bytes() == b"{}"
