"""A state file of the log store that does not parse is never a 500 (docs/log.md, "Never fork:
what each fault does"): ``.state/halt`` whatever its bytes is a halt (its reason "unreadable
halt record"), ``.state/lease`` that cannot be read has expired, and ``.state/tree`` that
cannot be read is a stall, which the integrator retries like a store error. In process here
(fakeredis, a real directory as the store), each damaged file against each reader: ``/health``,
``/metrics``, ``GET /v1/log``, the checkpoint, a log-proof, a bundle, the integrator and ``log
resume``; then the halt file of a running log filled with garbage under the real processes
(``service.py serve`` and ``service.py worker``, tests/log_stack.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.jobs import log_integrator
from execution_proof.jobs.log_config import LogConfig
from execution_proof.jobs.log_integrator import Integrator
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.logstore.log import UNREADABLE_HALT, checkpoint_size
from execution_proof.kv.store import Store
from tests.conftest import hash_of
from tests.log_stack import WAIT_S, Stack, log_records, log_size, loud_records
from tests.servers import run_cli, wait_until
from tests.test_log import ORIGIN, SIGNER, integrator, issue, log_app, published

TOKEN = "t0ken"
DAMAGED = {
    "truncated": b'{\n  "reason": "someone has signed a history of this log that is not ours: witness w ans',
    "binary": bytes(range(256)),
    "list": b"[]",
    "empty": b"",
}
"""Bytes a damaged state file may hold: cut short mid-write by something that is not the log,
overwritten with binary, valid JSON that is not an object, nothing at all."""
ROUTES = ["/v1/log", "/v1/log/checkpoint", "{proof}", "{bundle}"]


@pytest.fixture(autouse=True)
def halts_said_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no halt said in this process (the integrator says each once)."""
    monkeypatch.setattr(log_integrator, "_HALTS_SAID", set())


class Log:
    """One log in process: its Redis, its store directory, the app and one integrator that
    holds the lease and has read the tree state, after ``receipts`` were integrated."""

    def __init__(self, store: Store, log_store: LogStore, directory: Path, app: Any, worker: Integrator) -> None:
        self.store = store
        self.log_store = log_store
        self.directory = directory
        self.app = app
        self.worker = worker
        self.key: dict[str, Any] = {}
        self.receipts: list[dict[str, Any]] = []

    @property
    def client(self) -> Any:
        return self.app.asgi_client

    async def health(self) -> str:
        """``/health``'s ``log``, judged afresh (past the web process's 2 s cache)."""
        self.app.ctx.services.log._state = (-1e9, "")
        self.app.ctx.services.log._read_at = -1e9
        _, response = await self.client.get("/health")
        assert response.status == 200, response.text
        return str(response.json["log"])

    async def gauges(self) -> dict[str, str]:
        _, response = await self.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status == 200, response.text
        lines = response.text.splitlines()
        return {name: next(line for line in lines if line.startswith(name + " ")) for name in STATE_GAUGES}

    async def assert_routes_answer(self) -> None:
        """Each read route of the log answers 200, as before the damage."""
        receipt_id = self.receipts[0]["receipt_id"]
        for route in ROUTES:
            path = route.format(
                proof=f"/v1/receipts/{receipt_id}/log-proof", bundle=f"/v1/receipts/{receipt_id}/bundle"
            )
            _, response = await self.client.get(path)
            assert response.status == 200, (path, response.status, response.text)

    async def look_again(self, worker: Integrator | None = None) -> bool:
        """The integrator's next look at the lease, now (its 1.7 s between renewals passed)."""
        worker = worker or self.worker
        worker.lease._checked = -1e9
        return await worker._hold_lease()


STATE_GAUGES = ("eps_log_halted", "eps_log_stalled")


@pytest.fixture
async def log(store: Store, log_store: LogStore, receipt_root: str, tmp_path: Path) -> Log:
    app = log_app(store, log_store, receipt_root, SIGNER, metrics_token=TOKEN, log_stall_s=30)
    worker = await integrator(store, log_store, SIGNER)
    made = Log(store, log_store, tmp_path / "log", app, worker)
    assert await made.look_again()
    made.key = await create_project_key(store.keys, project_name="state-files", plan="pro")
    # Two receipts (each its entry and its dsse leaf) and the app's key certificate: five entries.
    made.receipts = await issue(app, made.key, ["r0", "r1"])
    assert await worker.step(force=True) == log_size(2) == 5
    assert await made.health() == "ok"
    return made


# --------------------------------------------------------------------------- .state/halt


@pytest.mark.parametrize("damage", list(DAMAGED))
async def test_a_halt_record_that_does_not_parse_halts_the_log_and_no_reader_answers_500(
    log: Log, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``.state/halt`` written with bytes that are not a halt record under the integrator that
    holds the lease: at its next look at the lease it stops integrating and says so once at
    CRITICAL with the reason "unreadable halt record"; an integrator that starts then
    integrates nothing either. ``/health`` answers 200 ``halted`` (it answered 500 on every
    call), ``/metrics`` ``eps_log_halted 1``, and the log's routes go on answering 200.
    ``resume`` lifts it, keeping what could be read, and the log goes on."""
    (log.directory / ".state/halt").write_bytes(DAMAGED[damage])
    late = await issue(log.app, log.key, ["while-halted"])
    with caplog.at_level(logging.INFO, logger="eps.log"):
        assert await log.look_again()  # it keeps the lease, and finds the halt
        assert await log.worker.step(force=True) == 0
        starting = await integrator(log.store, log.log_store, SIGNER)
        assert await starting.step(force=True) == 0
    critical = [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert len(critical) == 1 and critical[0].startswith(f"LOG HALTED: {UNREADABLE_HALT}."), critical
    assert (await published(log.log_store, SIGNER)).size == 5
    assert await log.health() == "halted"
    assert await log.gauges() == {"eps_log_halted": "eps_log_halted 1.0", "eps_log_stalled": "eps_log_stalled 0.0"}
    await log.assert_routes_answer()

    lifted = await log.log_store.resume("looked: the halt file was overwritten")
    assert lifted is not None and lifted["reason"] == UNREADABLE_HALT
    assert lifted["text"] == DAMAGED[damage].decode(errors="replace")
    log.worker._halt_checked = -1e9  # its 2 s between looks at a halt passed
    assert await log.worker.step(force=True) == 0  # it notices the resume, and reads the tree state again
    assert await log.worker.step(force=True) == 2
    assert (await published(log.log_store, SIGNER)).size == 7
    log.app.ctx.services.log._read_at = -1e9  # past MIN_READ_S: a fast machine asks again within 20 ms
    assert await log.app.ctx.services.log.proof(late[0]) is not None
    assert await log.health() == "ok"


def test_log_resume_lifts_a_halt_record_that_does_not_parse_and_prints_its_reason(tmp_path: Path) -> None:
    """``log resume`` on a ``.state/halt`` of binary bytes: exit 0, its output names the reason
    "unreadable halt record" (with what could be read), the halt is gone and kept under
    ``.state/resumed/``."""
    directory = tmp_path / "store"
    (directory / ".state").mkdir(parents=True)
    (directory / ".state/halt").write_bytes(DAMAGED["binary"])
    done = run_cli("log", "resume", "--reason", "looked: garbage", env={"LOG_STORE": f"file://{directory}"})
    assert done.returncode == 0, done.stdout + done.stderr
    said = orjson.loads(done.stdout.splitlines()[-1])
    assert said["resumed"] is True and said["halt"]["reason"] == UNREADABLE_HALT, said
    assert said["halt"]["bytes"] == 256
    assert not (directory / ".state/halt").exists()
    [kept] = [path for path in (directory / ".state/resumed").rglob("*") if path.is_file()]
    record = orjson.loads(kept.read_bytes())
    assert record["reason"] == "looked: garbage" and record["halt"] == said["halt"]


# --------------------------------------------------------------------------- .state/lease


@pytest.mark.parametrize("damage", list(DAMAGED))
async def test_a_lease_that_does_not_parse_has_expired_and_another_integrator_takes_it(log: Log, damage: str) -> None:
    """``.state/lease`` overwritten while one integrator holds it: another integrator takes it
    at its first look (its compare-and-swap replaces the bad bytes), the first finds it lost at
    its next renewal, no reader answers 500 and the log goes on under the new holder."""
    (log.directory / ".state/lease").write_bytes(DAMAGED[damage])
    assert await log.health() == "ok"
    await log.assert_routes_answer()
    other = await integrator(log.store, log.log_store, SIGNER)
    assert await log.look_again(other), "an unreadable lease was not taken"
    assert orjson.loads((log.directory / ".state/lease").read_bytes())["token"] == other.lease.token
    assert not await log.look_again(), "the first integrator still holds the lease"
    await issue(log.app, log.key, ["after"])
    assert await other.step(force=True) == 2
    assert (await published(log.log_store, SIGNER)).size == 7


# --------------------------------------------------------------------------- .state/tree


@pytest.mark.parametrize("damage", list(DAMAGED))
async def test_a_tree_state_that_does_not_parse_is_stalled_never_a_500_and_the_integrator_retries(
    log: Log, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``.state/tree`` damaged: ``/health`` answers 200 ``stalled`` at once, nothing waiting or
    not (never ``ok``: nothing can be integrated), ``/metrics`` ``eps_log_stalled 1``; the log's
    routes answer 200 (the published checkpoint is intact). The integrator, running, retries as
    for a store error (said once, at WARNING) and never ends; with the tree state put back it
    integrates again."""
    tree = log.directory / ".state/tree"
    good = tree.read_bytes()
    tree.write_bytes(DAMAGED[damage])
    assert await log.health() == "stalled"
    assert await log.gauges() == {"eps_log_halted": "eps_log_halted 0.0", "eps_log_stalled": "eps_log_stalled 1.0"}
    await log.assert_routes_answer()
    await issue(log.app, log.key, ["waits"])
    assert await log.health() == "stalled"

    await log.log_store.lease(log.worker.lease.token, 0, "drop")  # the running one below may take it at once
    running = Integrator(log.store.log_queue, log.log_store, LogConfig(ORIGIN, SIGNER))
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="eps.log"):
        task = asyncio.ensure_future(running.run(stop))
        try:
            await poll(lambda: any(".state/tree cannot be read" in r.getMessage() for r in caplog.records), "a warning")
            assert not task.done(), "the integrator ended on an unreadable tree state"
            tree.write_bytes(good)
            await poll(lambda: checkpoint_size((log.directory / "checkpoint").read_bytes()) == 7, "a checkpoint of 7")
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    said = [r for r in caplog.records if ".state/tree cannot be read" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING], [r.getMessage() for r in said]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert await log.health() == "ok"


async def poll(predicate: Any, what: str, within_s: float = 10.0) -> None:
    """Wait (awaiting, so tasks of this loop run) until ``predicate()`` holds."""
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- the real processes


@pytest.mark.slow
def test_garbage_in_the_halt_file_of_a_running_log_halts_it_until_resumed(stacks: Any) -> None:
    """A running log (``service.py serve`` and one ``service.py worker``): ``.state/halt``
    written with binary garbage. The worker says ``LOG HALTED: unreadable halt record`` once at
    CRITICAL and integrates nothing (creates answer 201 with the pending form after a ``Prefer:
    wait=2`` that never came, their entries stay queued, the checkpoint stays); ``/health``
    answers 200 ``halted``. ``log resume`` exits 0 and prints the reason "unreadable halt
    record"; the same worker integrates the waiting entries and the log goes on."""
    stack: Stack = stacks("garbage-halt")
    stack.start_redis()
    stack.serve()
    worker = stack.worker()
    api_keys = stack.make_keys(2)
    # Nine receipts (each its entry and its dsse leaf) and the server's key certificate.
    receipts = stack.create_waiting(api_keys, 1) + stack.create(api_keys, 8)
    before = stack.wait_for_size(log_size(9))
    halt = stack.store_dir / ".state/halt"
    halt.write_bytes(DAMAGED["binary"])

    def said_halted() -> list[dict[str, Any]]:
        return [r for r in log_records(worker) if "LOG HALTED" in str(r.get("msg"))]

    wait_until(lambda: bool(said_halted()), WAIT_S, "the worker to say the log is halted")
    wait_until(lambda: health(stack) == "halted", WAIT_S, "/health to say halted")
    waiting = []
    for n in range(3):
        response = stack.client.post(
            stack.base_url + "/v1/receipts",
            headers={"Authorization": f"Bearer {api_keys[n % 2]['api_key']}", "Prefer": "wait=2"},
            json={"input_hash": hash_of(f"while-halted-{n}")},
        )
        assert response.status_code == 201, response.text
        assert response.json()["log"]["status"] == "pending", response.json()["log"]
        waiting.append(response.json()["receipt"])
    assert stack.served() == before and stack.stored() == before
    assert stack.pending() == 3
    assert health(stack) == "halted"

    done = run_cli(
        "log", "resume", "--reason", "looked: garbage in the halt file", env={"LOG_STORE": stack.env["LOG_STORE"]}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = orjson.loads(done.stdout.splitlines()[-1])
    assert said["resumed"] is True and said["halt"]["reason"] == UNREADABLE_HALT, said
    assert not halt.exists()
    final = stack.wait_for_size(log_size(12))
    stack.assert_fills(receipts + waiting, final)
    assert final.size == log_size(12) == 25
    wait_until(lambda: health(stack) == "ok", WAIT_S, "/health to say ok")
    [line] = said_halted()
    assert line["level"] == "critical" and line["msg"].startswith(f"LOG HALTED: {UNREADABLE_HALT}."), line
    assert loud_records(worker) == [f"critical: {line['msg']}"]
    assert "the log was resumed" in worker.log()
    assert worker.process.poll() is None


def health(stack: Stack) -> str:
    """``/health``'s ``log`` (always 200)."""
    response = httpx.get(stack.base_url + "/health", timeout=10)
    assert response.status_code == 200, response.text
    return str(response.json()["log"])
