"""``python service.py monitor``: follow a log and raise the alarm if its history forks, an old
checkpoint is rewritten, or a project's main chain splits (docs/log.md, "Monitoring").

    monitor --base-url URL [--log-key VKEY | --log-policy FILE] --state DIR [--once]

Each pass reads the checkpoint, checks its signature (and the witness quorum with a policy),
checks it extends the last one this monitor saw (a consistency proof computed here from the
tiles), reads every new entry from the bundles (each must hash to its level-0 tile), and
applies the chain rules of receipts/monitor.py. Exit 0 when all holds (``--once``), 1 with a
JSON report naming each violation, 2 when the log cannot be read. Without ``--once`` it
follows: a pass every ``--interval`` seconds until a violation (exit 1) or Ctrl-C; a read
error is reported and retried. The state (DIR/state.json) advances only after a clean pass.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from cli.verify_log import LogInputError, http_fetch
from receipts import note, tlog
from receipts.monitor import MonitorState, Violation, check_entries
from receipts.policy import Policy, PolicyError, check_quorum, parse_policy
from receipts.tiles import TileMissing, TileReader


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    monitor = verbs.add_parser("monitor", help="follow a transparency log; exit 1 on a fork, rewrite or chain split")
    monitor.add_argument("--base-url", required=True, help="the service, e.g. https://example.com")
    keys = monitor.add_mutually_exclusive_group(required=True)
    keys.add_argument("--log-key", help="the log's verifier key to pin")
    keys.add_argument("--log-policy", metavar="FILE", help="a C2SP tlog-policy: the log key and the witness quorum")
    monitor.add_argument("--state", required=True, metavar="DIR", help="where the monitor keeps what it saw")
    monitor.add_argument("--once", action="store_true", help="one pass, then exit (for cron)")
    monitor.add_argument("--interval", type=float, default=10.0, help="seconds between passes when following")
    monitor.set_defaults(run=monitor_command)


def monitor_command(args: argparse.Namespace) -> int:
    try:
        policy = parse_policy(Path(args.log_policy).read_text(encoding="utf-8")) if args.log_policy else None
        if args.log_key:
            log_key = note.Verifier.parse(args.log_key)
        else:
            assert policy is not None  # one of the two is required
            log_key = policy.log_key()
    except (OSError, PolicyError, note.NoteError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state_dir = Path(args.state)
    state_dir.mkdir(parents=True, exist_ok=True)
    base = args.base_url.rstrip("/")
    while True:
        try:
            report = run_pass(base, log_key, policy, state_dir)
        except LogInputError as exc:
            print(orjson.dumps({"ok": False, "error": str(exc)}).decode())
            if args.once:
                return 2
            time.sleep(args.interval)
            continue
        print(orjson.dumps(report).decode(), flush=True)
        if not report["ok"]:
            return 1
        if args.once:
            return 0
        time.sleep(args.interval)


def run_pass(base: str, log_key: note.Verifier, policy: Policy | None, state_dir: Path) -> dict[str, Any]:
    """One pass; ``LogInputError`` when a resource the pass needed could not be read."""
    try:
        return asyncio.run(_run_pass(base, log_key, policy, state_dir))
    except TileMissing as exc:
        raise LogInputError(str(exc)) from exc


async def _run_pass(base: str, log_key: note.Verifier, policy: Policy | None, state_dir: Path) -> dict[str, Any]:
    state_path = state_dir / "state.json"
    state = MonitorState.from_json(orjson.loads(state_path.read_bytes())) if state_path.exists() else MonitorState()
    async with httpx.AsyncClient(timeout=10) as client:
        fetch = http_fetch(client, f"{base}/v1/log/")
        raw = await fetch("checkpoint")
        if raw is None:
            raise LogInputError(f"{base}/v1/log/checkpoint answered HTTP 404")
        text = raw.decode()
        violations: list[Violation] = []
        try:
            checkpoint, _ = note.open_checkpoint(text, log_key)
        except note.NoteError as exc:
            return _report(False, [Violation("signature", str(exc))], None)
        if policy is not None:
            quorum = check_quorum(text, policy, int(time.time()))
            if not quorum.ok:
                violations.append(Violation("quorum", quorum.reason))
        tiles = TileReader(fetch)
        if checkpoint.size < state.size:
            violations.append(
                Violation(
                    "inconsistent", f"the checkpoint has {checkpoint.size} entries; {state.size} were seen before"
                )
            )
        elif checkpoint.size == state.size and checkpoint.root != state.root:
            violations.append(Violation("inconsistent", f"a second root for size {state.size}: history was rewritten"))
        elif checkpoint.size > state.size:
            root = await tiles.compute(checkpoint.size, lambda view: view.root())
            if root != checkpoint.root:
                violations.append(Violation("inconsistent", "the tiles do not hash to the checkpoint's root"))
            elif state.size:
                proof = await tiles.compute(checkpoint.size, lambda view: view.consistency_proof(state.size))
                try:
                    tlog.verify_consistency(state.size, state.root, checkpoint.size, checkpoint.root, proof)
                except tlog.ProofError as exc:
                    violations.append(
                        Violation("inconsistent", f"the log does not extend the tree of size {state.size}: {exc}")
                    )
        if violations:
            return _report(False, violations, checkpoint)
        first = state.size
        entries, problems = await _entries(tiles, first, checkpoint.size)
        violations += [Violation("entry", problem, index) for index, problem in problems]
        violations += check_entries(state, first, entries)
        if violations:
            return _report(False, violations, checkpoint)
        state.size, state.root = checkpoint.size, checkpoint.root
        temporary = state_path.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps(state.json()))
        temporary.replace(state_path)
        return {**_report(True, [], checkpoint), "new_entries": checkpoint.size - first}


def _report(ok: bool, violations: list[Violation], checkpoint: note.Checkpoint | None) -> dict[str, Any]:
    report: dict[str, Any] = {"ok": ok, "violations": [v.json() for v in violations]}
    if checkpoint is not None:
        report["checkpoint"] = {"origin": checkpoint.origin, "size": checkpoint.size}
    return report


async def _entries(tiles: TileReader, first: int, size: int) -> tuple[list[bytes], list[tuple[int, str]]]:
    """Entries ``first``..``size``-1 from the bundles, each checked against its leaf hash."""
    entries: list[bytes] = []
    problems: list[tuple[int, str]] = []
    index = first // tlog.TILE_WIDTH
    while index * tlog.TILE_WIDTH < size:
        width = tlog.tile_width(size, 0, index)
        hashes = tlog.split_tile(await tiles.tile(0, index, width))
        try:
            bundle = await tiles.bundle(index, width)
        except TileMissing as exc:
            problems.append((index * tlog.TILE_WIDTH, str(exc)))
            bundle = []
        for offset, entry in enumerate(bundle):
            position = index * tlog.TILE_WIDTH + offset
            if position < first:
                continue
            if tlog.leaf_hash(entry) != hashes[offset]:
                problems.append((position, "the entry does not hash to its leaf in the tile"))
            entries.append(entry)
        index += 1
    return entries, problems
