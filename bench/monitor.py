"""The monitor's figures: ``python -m bench.monitor [--entries N]`` (default 1,000,000; about
2 minutes on two cores).

1. Builds a log of N entries in a ``file://`` store directory, laid out as C2SP tlog-tiles
   names things (``checkpoint``, ``tile/<L>/<N>[.p/<W>]``, ``tile/entries/<N>[.p/<W>]``):
   entries in the contract's format for ``--projects`` projects, each a valid main chain (a
   tenth of them branch receipts), each receipt's entry followed by its ``dsse`` leaf, hashed
   and tiled with receipts.tlog and written straight to files (``write_static_log``; the
   log's own integrator is measured by bench.log).
2. Serves the directory with ``python -m http.server`` on loopback, with a keep-alive
   asyncio file server (bench/static_server.py), and, where they are installed, with nginx
   and ``busybox httpd`` (the plain web servers a log is served by) as well.
3. Runs ``python service.py monitor --tiles-url URL --once --json`` on a fresh state against each,
   timed: entries/s, the requests the server logged, and the monitor's peak RSS (``ru_maxrss``
   of the child). Every process is bounded in time and stopped after.

Prints a markdown table (bench/RESULTS.md holds it) and a JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from execution_proof.receipts import attestation
from execution_proof.transparency import note, tlog

REPO = Path(__file__).resolve().parent.parent
ORIGIN = "bench.example/v1/log"
WIDTH = tlog.TILE_WIDTH


_NO_HASH = bytes(32)
_LEAF = attestation.log_body(_NO_HASH, bytes([1]) * attestation.SIGNATURE_SIZE, bytes(range(32)))
_PLACEHOLDER = attestation.b64(_NO_HASH).encode()


def dsse_leaf(payload_hash: bytes) -> bytes:
    """A ``dsse`` leaf naming ``payload_hash``, with a fixed key and signature: a monitor
    reads a leaf's form and cannot check its signature (the log holds the payload's hash, not
    the payload), so the bench signs nothing."""
    return _LEAF.replace(_PLACEHOLDER, attestation.b64(payload_hash).encode(), 1)


def chain_entries(count: int, projects: int) -> Iterator[bytes]:
    """``count`` entries as a log holds them, each receipt's entry followed by the ``dsse``
    leaf of its attestation (an odd ``count`` ends with a receipt entry alone): receipts
    round-robin over ``projects`` projects, each project's main entries one unbroken chain
    (every tenth receipt a branch off the tip, which leaves it alone)."""
    tips: list[str | None] = [None] * projects
    for n in range((count + 1) // 2):
        p = n % projects
        digest = hashlib.sha256(n.to_bytes(8, "big")).digest()
        branch = n % 10 == 9
        yield tlog.entry_bytes(
            {
                "receipt_id": f"rcpt_{n:026d}",
                "receipt_hash": "sha256:" + digest.hex(),
                "project_id": f"prj_{p:06d}",
                "prev_receipt_hash": tips[p],
                "chain_status": "branch" if branch else "main",
            }
        )
        if 2 * n + 1 < count:
            yield dsse_leaf(digest)
        if not branch:
            tips[p] = "sha256:" + digest.hex()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_static_log(directory: Path, entries: Iterable[bytes], signer: note.Signer) -> note.Checkpoint:
    """Write a log of ``entries`` under ``directory`` (tiles, bundles, the signed checkpoint),
    streaming: memory holds one tile per level. Returns the checkpoint."""
    tiles = directory / "tile"
    rows: list[list[bytes]] = [[]]
    bundle: list[bytes] = []
    size = 0

    def push(level: int, value: bytes, position: int) -> None:
        while len(rows) <= level:
            rows.append([])
        rows[level].append(value)
        if len(rows[level]) == WIDTH:
            index = position // WIDTH
            _write(tiles / tlog.tile_path(level, index), b"".join(rows[level]))
            push(level + 1, tlog.merkle_root(rows[level]), index)
            rows[level] = []

    for entry in entries:
        bundle.append(tlog.bundle_entry(entry))
        if len(bundle) == WIDTH:
            _write(tiles / tlog.tile_path("entries", size // WIDTH), b"".join(bundle))
            bundle = []
        push(0, tlog.leaf_hash(entry), size)
        size += 1
    if bundle:
        _write(tiles / tlog.tile_path("entries", size // WIDTH, len(bundle)), b"".join(bundle))
    for level, index, width in tlog.edge_tiles(size):
        _write(tiles / tlog.tile_path(level, index, width), b"".join(rows[level]))
    root = tlog.root_from_edge(size, {level: row for level, row in enumerate(rows) if row})
    checkpoint = note.Checkpoint(signer.name, size, root)
    _write(directory / "checkpoint", note.sign_note(checkpoint.text(), signer).encode())
    return checkpoint


def start_static_server(directory: Path, kind: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    if kind == "http.server":
        cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(directory)]
    elif kind == "keepalive":
        cmd = [sys.executable, "-m", "bench.static_server", str(port), str(directory)]
    elif kind == "nginx":
        cmd = ["nginx", "-c", str(nginx_config(directory, port, log)), "-e", str(log.with_suffix(".err"))]
    else:
        cmd = ["busybox", "httpd", "-f", "-v", "-p", f"127.0.0.1:{port}", "-h", str(directory)]
    out = log.open("wb")
    server = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 - our own command line
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"{kind} did not start on port {port}")


def nginx_config(directory: Path, port: int, log: Path) -> Path:
    """A minimal nginx serving ``directory`` on loopback, in the foreground, its access log
    at ``log`` (one line per request, counted like the others'), every path of its own."""
    work = log.with_suffix(".nginx")
    work.mkdir()
    user = "user root;" if os.geteuid() == 0 else ""  # the temporary directory is not the workers' to read
    config = work / "nginx.conf"
    config.write_text(
        f"""daemon off; {user} worker_processes 1; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {log}; client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work}; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{port}; root {directory}; default_type application/octet-stream; }}
}}
"""
    )
    return config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_monitor(url: str, vkey: str, state: Path, timeout: float) -> dict[str, Any]:
    """The monitor as a child process: its report, wall time and peak RSS (KiB, the child's
    own ``ru_maxrss`` from ``wait4``)."""
    out, err = state.with_suffix(".out"), state.with_suffix(".err")
    started = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        child = subprocess.Popen(  # noqa: S603 - our own command line
            [sys.executable, "service.py", "monitor", "--tiles-url", url, "--log-key", vkey,
             "--state", str(state), "--once", "--json"],
            cwd=REPO, stdout=stdout, stderr=stderr,
        )  # fmt: skip
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                child.kill()
                raise RuntimeError("the monitor did not finish in time")
            time.sleep(0.05)
    seconds = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(
            f"the monitor exited {child.returncode}: {out.read_text()[-2000:]} {err.read_text()[-2000:]}"
        )
    report = orjson.loads(out.read_text().splitlines()[-1])
    cpu = usage.ru_utime + usage.ru_stime
    return {"report": report, "seconds": seconds, "rss_kib": usage.ru_maxrss, "cpu_s": cpu}


def count_requests(log: Path, kind: str) -> int:
    text = log.read_text(errors="replace")
    return text.count("GET /")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.monitor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--projects", type=int, default=4_000)
    parser.add_argument(
        "--servers",
        default="http.server,keepalive,nginx,busybox",
        help="comma-separated: http.server, keepalive, nginx, busybox (those not installed are left out)",
    )
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    signer = note.Signer.generate(ORIGIN)
    results: dict[str, Any] = {"entries": args.entries, "projects": args.projects}
    with tempfile.TemporaryDirectory(prefix="bench-monitor-") as tmp_name:
        tmp = Path(tmp_name)
        store = tmp / "log"
        started = time.monotonic()
        checkpoint = write_static_log(store, chain_entries(args.entries, args.projects), signer)
        results["build_s"] = round(time.monotonic() - started, 1)
        results["files"] = sum(len(files) for _, _, files in os.walk(store))
        runs = []
        for kind in args.servers.split(","):
            if kind in ("busybox", "nginx") and shutil.which(kind) is None:
                continue
            port = free_port()
            log = tmp / f"{kind}.log"
            server = start_static_server(store, kind, port, log)
            try:
                run = run_monitor(
                    f"http://127.0.0.1:{port}/", signer.verifier.encode(), tmp / f"state-{kind}", args.timeout
                )
            finally:
                server.terminate()
                server.wait(10)
            if not run["report"]["ok"] or run["report"]["checkpoint"]["size"] != checkpoint.size:
                raise RuntimeError(f"the monitor did not check the whole log: {run['report']}")
            runs.append(
                {
                    "server": kind,
                    "seconds": round(run["seconds"], 2),
                    "entries_per_s": round(args.entries / run["seconds"]),
                    "rss_mib": round(run["rss_kib"] / 1024, 1),
                    "monitor_cpu_s": round(run["cpu_s"], 2),
                    "requests": count_requests(log, kind),
                }
            )
        results["runs"] = runs
    print(render(results))
    print(orjson.dumps(results).decode())
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [
        f"{r['entries']:,} entries over {r['projects']:,} projects ({r['files']:,} files, built in {r['build_s']} s)",
        "",
        "| server | monitor wall time | entries/s | monitor CPU | requests | monitor peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        lines.append(
            f"| {run['server']} | {run['seconds']} s | **{run['entries_per_s']:,}** | {run['monitor_cpu_s']} s | "
            f"{run['requests']:,} | "
            f"{run['rss_mib']} MiB |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
