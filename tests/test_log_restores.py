"""A Redis put back under a running worker, keeping its connections (docs/log.md, "Never fork:
what each fault does"), with real processes: its own ``redis-server`` (``--enable-debug-command
yes``), a real directory as ``LOG_STORE``, ``python service.py serve`` and ``python service.py
worker`` stopped at a fault point (``LOG_FAILPOINTS``). The restore is ``DEBUG RELOAD
NOSAVE`` over a ``dump.rdb`` saved earlier: Redis keeps every client connection, so the
worker's next command succeeds on the older data (a restart would have failed it).

The log is judged from its tiles: every receipt id once, right after it the dsse leaf of its
attestation, every receipt Redis holds proving its place, every proof given earlier still at
its index, and Go's sumdb/tlog over the store with every checkpoint seen. In process, the same faults: tests/test_log_sync.py.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import RedisServer
from tests.log_stack import WAIT_S, Stack, certificate_indices, is_stopped, log_entries, log_size
from tests.receipt_keys import KEY_ENTRIES
from tests.servers import wait_until
from tests.test_log_operator_faults import assert_whole

pytestmark = pytest.mark.slow


def debug_redis(stack: Stack) -> Stack:
    """The stack's Redis with ``DEBUG`` allowed (``DEBUG RELOAD`` is how the restore is made)."""
    stack.redis = RedisServer(stack.redis.binary, extra=["--enable-debug-command", "yes"])
    return stack.start_redis()


def save(stack: Stack, name: str) -> Path:
    """``SAVE``, and a copy of the dump kept aside."""
    with redis.Redis.from_url(stack.redis_url) as conn:
        assert conn.save()
    kept = stack.folder / name
    shutil.copyfile(Path(stack.redis.dir) / "dump.rdb", kept)
    return kept


def reload_keeping_connections(stack: Stack, dump: Path) -> None:
    """Put ``dump`` back and load it into the running server: every client stays connected."""
    shutil.copyfile(dump, Path(stack.redis.dir) / "dump.rdb")
    with redis.Redis.from_url(stack.redis_url) as conn:
        assert conn.execute_command("DEBUG", "RELOAD", "NOSAVE")


def wait_for_stop(pid: int, step: str) -> None:
    wait_until(lambda: is_stopped(pid), WAIT_S, f"the worker to stop itself at {step}")


def queues_empty(stack: Stack) -> Callable[[], bool]:
    def empty() -> bool:
        with redis.Redis.from_url(stack.redis_url) as conn:
            return not any(conn.llen(name) for name in conn.scan_iter(match="lq:*"))

    return empty


def judge(
    stack: Stack, receipts: list[dict[str, Any]], acknowledged: list[dict[str, Any]], checker: Path, tmp: Path
) -> None:
    """Every queue empties, the log holds exactly ``receipts`` once each, each its entry and
    its dsse leaf (beside each serving process's key certificate), Go's check passes, every
    proof given earlier still proves at its index and every receipt's log-proof works."""
    wait_until(queues_empty(stack), WAIT_S, "every queue to empty")
    final = stack.wait_for_size(log_size(len(receipts)))
    wait_until(queues_empty(stack), WAIT_S, "every queue to empty")
    final = stack.served()
    certificates = certificate_indices(log_entries(stack.store_dir, final))
    assert len(certificates) >= KEY_ENTRIES
    assert final.size == log_size(len(receipts), len(certificates)), (
        f"the log holds {final.size} entries for {len(receipts)} receipts (two entries each) "
        f"and {len(certificates)} key certificates"
    )
    stack.assert_fills(receipts, final)
    assert stack.observer is not None
    assert_whole(
        stack.store_dir,
        stack.verifier,
        final,
        observers=[stack.observer],
        receipts=receipts,
        acknowledged=acknowledged,
        checker=checker,
        tmp=tmp / "go",
    )
    stack.assert_proofs(receipts)


@pytest.mark.parametrize("action", ["stop", "sleep:4000"])
def test_redis_put_back_between_a_batchs_two_halves_keeping_connections_adds_no_entry_twice(
    stacks: Callable[..., Stack], tlogcheck: Path, tmp_path: Path, action: str
) -> None:
    """The log at 10 (its proofs given with ``Prefer: wait``), the worker stopped, 6 creates in
    2 projects. A worker with ``LOG_FAILPOINTS=staged=stop,acked_half=ACTION``: Redis saved
    while it is stopped with its batch staged; when it has acknowledged half the batch's queues
    (stopped there, or sleeping 4 s: less than its lease), the dump is put back with ``DEBUG
    RELOAD NOSAVE`` and it goes on, on its open connection, to the other half and the log's
    size. Then 4 creates more. The first half's entries were back in their queues: they are
    found in the tree, not taken again (this put 23 entries in a log of 20 receipts, before
    each receipt had its dsse leaf; a receipt's entry and its leaf, one queue item, go back
    and are found together)."""
    stack = debug_redis(stacks(f"reload-{action.partition(':')[0]}"))
    stack.serve()
    stack.observe()
    api_keys = stack.make_keys(2)
    first = stack.worker()
    acknowledged = stack.create_waiting(api_keys, 10)
    assert first.stop() == 0
    receipts = acknowledged + stack.create(api_keys, 6)
    worker = stack.worker(LOG_FAILPOINTS=f"staged=stop,acked_half={action}")
    wait_for_stop(worker.pid, "staged")
    dump = save(stack, "staged.rdb")
    os.kill(worker.pid, signal.SIGCONT)
    if action == "stop":
        wait_for_stop(worker.pid, "acked_half")
    else:
        wait_until(
            lambda: "acked_half=sleep:4000: reached" in worker.log(), WAIT_S, "the worker to sleep at acked_half"
        )
    reload_keeping_connections(stack, dump)
    os.kill(worker.pid, signal.SIGCONT)
    receipts += stack.create(api_keys, 4)
    judge(stack, receipts, acknowledged, tlogcheck, tmp_path)
    assert "queued entries were in the log already" in worker.log(), "the restored queues were not found in the tree"
    assert worker.stop() == 0


def test_redis_put_back_between_a_catch_ups_queues_keeping_connections_adds_no_entry_twice(
    stacks: Callable[..., Stack], tlogcheck: Path, tmp_path: Path
) -> None:
    """The same shape in a catch-up: a worker killed once its tree advanced (``unstaged=kill``)
    leaves the batch's two queues behind the tree; Redis saved there. The next worker
    (``caught_half=stop``) finds them in the tree and takes half of them off; the dump is put
    back under it; it goes on. The first queue is behind again and is caught up again, never
    batched twice."""
    stack = debug_redis(stacks("reload-catch-up"))
    stack.serve()
    stack.observe()
    api_keys = stack.make_keys(2)
    first = stack.worker()
    acknowledged = stack.create_waiting(api_keys, 4)
    assert first.stop() == 0
    receipts = acknowledged + stack.create(api_keys, 6)
    doomed = stack.worker(LOG_FAILPOINTS="unstaged=kill")
    assert doomed.process.wait(WAIT_S) == -signal.SIGKILL
    dump = save(stack, "behind.rdb")
    worker = stack.worker(LOG_FAILPOINTS="caught_half=stop")
    wait_for_stop(worker.pid, "caught_half")
    reload_keeping_connections(stack, dump)
    os.kill(worker.pid, signal.SIGCONT)
    receipts += stack.create(api_keys, 2)
    judge(stack, receipts, acknowledged, tlogcheck, tmp_path)
    assert worker.stop() == 0
