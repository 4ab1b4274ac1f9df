"""``LOG_FAILPOINTS`` (runtime/failpoints.py): what it accepts, and that ``stop`` stops a
process between steps, never while another of its threads holds a store lock (a process
frozen inside the ``flock`` of ``file://`` would block every other worker: docs/log.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from execution_proof.runtime.failpoints import STEPS, Action, Failpoints, FailpointsError
from tests.log_stack import is_stopped
from tests.servers import wait_until


def test_every_step_and_action_parses() -> None:
    parsed = Failpoints.parse(" staged=stop, tiles=kill,synced=sleep:250 ")
    assert parsed is not None
    assert parsed.actions == {"staged": Action("stop"), "tiles": Action("kill"), "synced": Action("sleep", 250)}
    assert str(parsed) == "staged=stop,tiles=kill,synced=sleep:250"
    assert Failpoints.parse("") is None and Failpoints.parse(" , ") is None
    assert all(Failpoints.parse(f"{step}=stop") is not None for step in STEPS)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nowhere=stop", "STEP one of created, caught_half, batch"),
        ("staged", "a fault point is STEP=ACTION"),
        ("staged=pause", "the action is stop, kill or sleep:MS"),
        ("staged=sleep:", "the action is stop, kill or sleep:MS"),
        ("staged=sleep:-5", "the action is stop, kill or sleep:MS"),
        ("staged=sleep:1234567890", "the action is stop, kill or sleep:MS"),
        ("staged=stop,staged=kill", "staged is named twice"),
    ],
)
def test_a_wrong_fault_point_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(FailpointsError, match=says):
        Failpoints.parse(text)


def test_an_action_acts_once() -> None:
    points = Failpoints.parse("batch=sleep:1")
    assert points is not None
    started = time.monotonic()
    points.reach("staged")  # not named: nothing
    points.reach("batch")
    points.reach("batch")
    assert points._done == {"batch"}
    assert time.monotonic() - started < 5  # one millisecond of sleep, not a hang


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from execution_proof.runtime import failpoints

    marks = Path(sys.argv[1])
    inside = threading.Event()

    def hold():
        with failpoints.store_lock():
            inside.set()
            time.sleep(0.5)
            (marks / "released").write_text(str(time.monotonic()))

    holder = threading.Thread(target=hold)
    holder.start()
    inside.wait()
    failpoints.Failpoints.parse("acked_half=stop").reach("acked_half")
    (marks / "continued").write_text("")
    holder.join()
    """
)


def test_stop_waits_until_no_store_lock_of_its_process_is_held(tmp_path: Path) -> None:
    """Another thread holds a store lock when the step is reached: the process stops only
    after that thread let go of it, and runs on when continued."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stderr=subprocess.PIPE)
    try:
        wait_until(lambda: is_stopped(child.pid) or child.poll() is not None, 30, "the child to stop")
        assert is_stopped(child.pid), child.stderr.read().decode() if child.stderr else ""
        assert (tmp_path / "released").exists(), "stopped while its other thread held the store lock"
        assert not (tmp_path / "continued").exists()
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(30) == 0
        assert (tmp_path / "continued").exists()
        assert b"LOG_FAILPOINTS acked_half=stop: reached" in (child.stderr.read() if child.stderr else b"")
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
