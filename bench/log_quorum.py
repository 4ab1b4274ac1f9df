"""The log with a witness that never answers: ``python -m bench.log_quorum`` (about 1 minute).

Real processes: a plain-TCP Redis, the service with the log (fly.toml's web worker count), a
``service.py worker`` (the integrator, default ``LOG_WITNESS_TIMEOUT_MS``), one
``service.py witness serve`` that answers, and one witness that accepts connections and
never replies (a socket held open in this process). The policy's quorum is 1 of the 2.

A client creates receipts one after another with ``Prefer: wait=5`` (a pause of
``--gap`` between them, so each is its own batch) for ``--count`` creates or ``--seconds``,
whichever comes first. Each create's time is from sending it to its 201 carrying the log
proof, whose checkpoint must carry the answering witness's cosignature: the time for a
covering, quorum-meeting checkpoint to be published. Target: p99 under 1 s (before the
quorum-early client, each waited out the silent witness: about 6 s).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import prom
from bench.harness import RAISED_LIMITS, create_projects, loadavg, machine_info, new_receipt_root
from bench.log import ORIGIN, _pct, start_metered_worker, start_witness, store_url, witness_key
from bench.procs import HarnessError, Proc, log
from bench.production import ServiceSpec, fly_workers
from bench.redis_kinds import start_kind
from execution_proof.transparency import cosignature, note
from execution_proof.transparency.note import Signer

TARGET_P99_S = 1.0


class Silent:
    """A witness that accepts every connection and never answers (until ``stop``)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)

    def stop(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def run(args: Any) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="eps-bench-quorum-"))
    receipt_root = new_receipt_root(tmp)
    signer = Signer.generate(ORIGIN)
    redis_kind = start_kind("tcp", tmp, None, True)
    services = ServiceSpec(receipt_root, orjson.dumps(RAISED_LIMITS).decode(), "json", True, tmp)
    procs: list[Proc] = []
    silent = Silent()
    try:
        key = create_projects(redis_kind.url, "bench-quorum", 1)[0]["api_key"]
        key_file, fast_key = witness_key(tmp, "fast")
        fast, fast_url = start_witness(tmp, "fast", key_file, signer.verifier.encode())
        procs.append(fast)
        silent_key = cosignature.Cosigner.generate("witness.bench.example/silent").key
        policy = tmp / "policy.txt"
        policy.write_text(
            f"log {signer.verifier.encode()}\nwitness silent {silent_key.encode()} {silent.url}\n"
            f"witness fast {fast_key.encode()} {fast_url}\ngroup any 1 silent fast\nquorum any\n"
        )
        log_env = {
            "LOG_SIGNING_KEY": signer.encode(),
            "LOG_ORIGIN": ORIGIN,
            "LOG_STORE": store_url(tmp / "store"),
            "LOG_WITNESS_POLICY": str(policy),
        }
        port = services.start("quorum", redis_kind, fly_workers(), log_env)
        worker, metrics_url = start_metered_worker(
            tmp, redis_kind.url, receipt_root, "worker-quorum", signer.encode(), tmp / "store",
            {"LOG_WITNESS_POLICY": str(policy)},
        )  # fmt: skip
        procs.append(worker)
        times, missing = measure(port, key, signer, fast_key, args)
        after = prom.scrape(metrics_url)
        if not worker.alive():
            raise HarnessError(f"the worker died:\n{worker.tail()}")
        return {
            "started": args.started,
            "machine": machine_info(),
            "loadavg": loadavg(),
            "web_workers": fly_workers(),
            "creates": len(times),
            "not_covered": missing,
            "p50_s": _pct(times, 0.5),
            "p99_s": _pct(times, 0.99),
            "max_s": times[-1] if times else None,
            "mean_s": statistics.fmean(times) if times else None,
            "silent_connections": silent.accepted,
            "silent_timeouts": prom.total(after, "eps_log_witness_failures_total", witness="silent", kind="timeout"),
            "silent_skipped": prom.total(after, "eps_log_witness_skipped_total", witness="silent"),
            "fast_cosignatures": prom.total(after, "eps_log_witness_cosignatures_total", witness="fast"),
            "checkpoints": prom.total(after, "eps_log_checkpoints_total"),
        }
    finally:
        for proc in procs:
            proc.stop()
        services.stop()
        redis_kind.stop()
        silent.stop()


def measure(
    port: int, key: str, signer: Signer, fast_key: cosignature.CosignerKey, args: Any
) -> tuple[list[float], int]:
    """Each create's time to its 201 with a proof whose checkpoint the fast witness cosigned
    (sorted), and how many creates came back without one."""
    url = f"http://127.0.0.1:{port}/v1/receipts"
    headers = {"Authorization": f"Bearer {key}", "Prefer": "wait=5"}
    times: list[float] = []
    missing = 0
    deadline = time.monotonic() + args.seconds
    with httpx.Client(timeout=20) as client:
        for n in range(args.count + 1):
            if time.monotonic() > deadline:
                break
            body = {"input_hash": "sha256:" + f"{n:064x}"}
            started = time.perf_counter()
            response = client.post(url, headers=headers, json=body)
            took = time.perf_counter() - started
            if response.status_code != 201:
                raise HarnessError(f"create answered {response.status_code}: {response.text[:300]}")
            proof = response.json().get("log", {}).get("proof")
            if n == 0:
                continue  # the first: the log's and the witness's first checkpoint, not measured
            if proof is None or not _cosigned(proof, signer, fast_key):
                missing += 1
            else:
                times.append(took)
            time.sleep(args.gap)
    times.sort()
    return times, missing


def _cosigned(proof: str, signer: Signer, fast_key: cosignature.CosignerKey) -> bool:
    checkpoint = note.parse_tlog_proof(proof).checkpoint
    parsed = note.parse_note(checkpoint)
    return bool(cosignature.cosignatures(parsed, [fast_key]))


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    met = "met" if r["p99_s"] < TARGET_P99_S and not r["not_covered"] else "NOT met"
    return "\n".join(
        [
            f"## The log with a silent witness at quorum 1 (`python -m bench.log_quorum`, {r['started']})",
            "",
            f"Machine: {m['cpu']}, {m['cores']} cores; load average {r['loadavg']} after. Real processes: Redis "
            f"(TCP, AOF always), the service ({r['web_workers']} web workers), a worker with the integrator "
            "(`LOG_WITNESS_TIMEOUT_MS` default 1000), one `witness serve` that answers and one witness that "
            "accepts and never replies; policy 1 of the 2. One create at a time with `Prefer: wait=5`.",
            "",
            "| figure | measured | target |",
            "|---|---|---|",
            f"| create to a 201 whose proof's checkpoint the answering witness cosigned, p50 | "
            f"{r['p50_s'] * 1000:.0f} ms | |",
            f"| the same, p99 (max) | {r['p99_s'] * 1000:.0f} ms ({r['max_s'] * 1000:.0f} ms) | < 1 s: {met} |",
            f"| creates measured / without a cosigned covering checkpoint | {r['creates']} / {r['not_covered']} | 0 |",
            "| the silent witness: connections, timed-out requests, checkpoints not sent (backoff, or its open "
            f"request) | "
            f"{r['silent_connections']}, {r['silent_timeouts']:.0f}, {r['silent_skipped']:.0f} | |",
            f"| checkpoints signed; cosignatures by the answering witness | {r['checkpoints']:.0f}; "
            f"{r['fast_cosignatures']:.0f} | |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.log_quorum", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="creates measured (at most)")
    parser.add_argument("--seconds", type=float, default=90.0, help="and at most this long")
    parser.add_argument("--gap", type=float, default=0.05, help="pause between two creates (s)")
    args = parser.parse_args(argv)
    args.started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        report = run(args)
    except HarnessError as exc:
        log(f"HARNESS FAILURE: {exc}")
        return 2
    print(render(report))
    print("BENCHJSON " + orjson.dumps(report).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
