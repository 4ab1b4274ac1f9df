"""``python service.py monitor``: follow a log and raise the alarm if its history forks, a tile
or an old checkpoint is rewritten, or a project's main chain splits (docs/log.md, "Monitoring").

    monitor [--base-url URL] [--tiles-url URL] (--log-key VKEY | --log-policy FILE) --state DIR
            [--trust-root FILE] [--once] [--interval SECONDS] [--require-quorum] [--json]

Each pass reads the checkpoint (``BASE/v1/log/checkpoint``, or ``TILES/checkpoint`` with
``--tiles-url``), checks its signature, then reads every entry bundle past what it checked,
with its level-0 tile and every tile above that the bundle completes, and recomputes the tree
(transparency/monitor.py): a leaf, tile or root that does not match what it computed is a
violation, as is a chain rule broken or an entry of no known kind. Key certificates and
revocations are read strictly and kept in the state; every report lists every key the log
showed (``keys``), and with ``--trust-root`` each is judged against the receipt roots it pins
(receipts/key_entries.py: ``unknown_root``, ``bad_certificate``, ``bad_revocation``).
Fetches run ahead (16 fetch threads, each with its own keep-alive connection: client/http.py,
the standard library's http.client; retries with backoff and jitter, Retry-After honoured)
while the bundles behind are hashed in order.
Progress is saved as it goes (cli/monitor_state.py), so a killed monitor resumes where it
stopped; one monitor at a time on a state directory (its lock).

Violations are evidence only. With a policy, a checkpoint below the witness quorum is not
one (a log publishes while a witness is down): the state keeps the first checkpoint of the
current run of misses, and every report says since when the log is unwitnessed
(``unwitnessed_since``); ``--require-quorum`` makes a miss exit 1.

The state follows one log, recorded when a checkpoint first verifies (transparency/monitor.py,
"The log"): a key, URL or state of another log is exit 2, never a violation. Time:
``REQUEST_TIMEOUT_S`` to connect and between two reads, ``REQUEST_DEADLINE_S`` for a request
in all; a pass stops (the log cannot be read) once the log has not answered for ``SILENCE_S``
(any reply is an answer, a ``Retry-After`` it asked for is not silence). A whole pass has no
wall-clock limit: a large log takes as long as it takes to catch up, and what was checked is
saved.

Output (JSON on stdout, text on stderr without ``--json``) and the kinds of failure:
cli/monitor_report.py. Exit codes and
environment: ``EPILOG`` (``monitor --help``). Without ``--once`` it follows: a pass every
``--interval`` seconds until a violation, another log, or Ctrl-C; a read error is reported
and retried.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sqlite3
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from execution_proof.cli.monitor_fetch import SILENCE_S, Fetcher, LogReplyError, Workers
from execution_proof.cli.monitor_keys import load_receipt_roots
from execution_proof.cli.monitor_report import MonitorParser, Output
from execution_proof.cli.monitor_state import MonitorDb, MonitorStateError, PassReport, Seen, StateLock
from execution_proof.cli.output import UsageError
from execution_proof.client.log_checks import LogInputError, env_skew
from execution_proof.errors import Error
from execution_proof.receipts.key_entries import KeyReader, listed_keys, roots_digest
from execution_proof.transparency import note, tlog
from execution_proof.transparency.monitor import (
    Frontier,
    Project,
    Violation,
    WrongLog,
    check_chains,
    check_followed,
    completed_tiles,
    open_followed,
    split_bundle,
    tile_name,
)
from execution_proof.transparency.policy import COSIGNATURE_SKEW_S, Policy, QuorumCheck, check_quorum, parse_policy

AHEAD = 64  # bundles fetched ahead of the one being hashed
SAVE_EVERY = 16  # bundles between two saves of the progress (or SAVE_SECONDS, whichever first)
SAVE_SECONDS = 1.0
MIN_INTERVAL_S = 1.0  # asking more often gains nothing: a pass reads all that is new
MAX_INTERVAL_S = 86_400.0


EPILOG = f"""\
exit status:
  0    the log holds together (--once); a checkpoint below the --log-policy quorum is not a
       violation: the report says since when the log is unwitnessed
  1    a violation, found now or by an earlier run on this --state; with --require-quorum,
       also while the newest checkpoint is below the quorum
  2    bad usage or configuration (a key, URL or --state of another log; a --trust-root
       that cannot be read; another monitor running on this --state), or the log could not
       be read (a resource missing, no answer for {SILENCE_S:g} s)
  130  interrupted (Ctrl-C); what was checked is saved
stdout: each pass's report as one JSON document on one line, and a failure as one document
  too: {{"ok": false, "error": {{"kind", "message"}}}}, nothing else; without --json the same
  report as text for people on stderr
environment:
  LOG_COSIGNATURE_SKEW_S       how far ahead a cosignature's time may be (default 300)
  SSL_CERT_FILE, SSL_CERT_DIR  the CA certificates of https (default: the system's)
"""


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    own, verbs._parser_class = verbs._parser_class, MonitorParser  # a --json usage error is a document
    try:
        monitor = verbs.add_parser(
            "monitor",
            help="follow a transparency log; exit 1 on a fork, rewrite or chain split",
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    finally:
        verbs._parser_class = own
    monitor.add_argument("--base-url", help="the service, e.g. https://example.com (optional with --tiles-url)")
    monitor.add_argument(
        "--tiles-url",
        help="read the checkpoint and tiles from this static copy of the log (URL/checkpoint, URL/tile/...)",
    )
    keys = monitor.add_mutually_exclusive_group(required=True)
    keys.add_argument("--log-key", help="the log's verifier key to pin")
    keys.add_argument("--log-policy", metavar="FILE", help="a C2SP tlog-policy: the log key and the witness quorum")
    monitor.add_argument(
        "--state",
        required=True,
        metavar="DIR",
        help="where the monitor keeps what it saw; it records the log it follows, one log per directory, "
        "one monitor at a time",
    )
    monitor.add_argument(
        "--trust-root",
        metavar="FILE",
        help="judge every key certificate and revocation the log holds against the receipt roots this trust "
        "root pins: a key certified by a root it does not pin is a violation (unknown_root)",
    )
    monitor.add_argument("--once", action="store_true", help="one pass, then exit (for cron)")
    monitor.add_argument(
        "--interval",
        type=interval_seconds,
        default=10.0,
        metavar="SECONDS",
        help=f"seconds between passes when following (default 10, at least {MIN_INTERVAL_S:g})",
    )
    monitor.add_argument(
        "--require-quorum",
        action="store_true",
        help="with --log-policy: exit 1 while the newest checkpoint is below the quorum (by default it is "
        "reported, with since when, and the exit status is 0: a log publishes while a witness is down)",
    )
    monitor.add_argument(
        "--json",
        action="store_true",
        help="no text on stderr: stdout's one JSON document per pass (failures and usage errors too) alone",
    )
    monitor.set_defaults(run=monitor_command)


def interval_seconds(text: str) -> float:
    """``--interval``: seconds, ``MIN_INTERVAL_S`` to ``MAX_INTERVAL_S``, else a usage error (exit 2);
    0 is refused, not taken as "no pause": asking without pause loads the log, learning nothing."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:  # NaN too
        raise argparse.ArgumentTypeError(f"must be from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} seconds, not {text}")
    return value


def log_prefix(base_url: str | None, tiles_url: str | None) -> str:
    """Where the log's resources are: ``--tiles-url``, else the service's ``/v1/log/``."""
    if tiles_url:
        prefix, option = tiles_url.rstrip("/") + "/", "--tiles-url"
    elif base_url:
        prefix, option = base_url.rstrip("/") + "/v1/log/", "--base-url"
    else:
        raise UsageError("give --base-url (the service) or --tiles-url (a static copy of the log)")
    parts = urlsplit(prefix)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{option}: not an http(s) URL: {tiles_url or base_url!r}")
    return prefix


INTERRUPTED = "monitor: interrupted (what was checked is saved)"


def monitor_command(args: argparse.Namespace) -> int:
    output = Output(json=args.json)
    lock: StateLock | None = None
    db: MonitorDb | None = None
    try:
        try:
            if args.require_quorum and not args.log_policy:
                raise UsageError("--require-quorum needs --log-policy (the quorum is the policy's)")
            prefix = log_prefix(args.base_url, args.tiles_url)
            policy = parse_policy(Path(args.log_policy).read_bytes()) if args.log_policy else None  # opaque octets
            skew_s = env_skew()
            roots: dict[str, bytes] | None = None
            if args.trust_root:
                version, roots = load_receipt_roots(args.trust_root)
                if version == 1 and not args.json:
                    print(
                        f"monitor: {args.trust_root} is a version 1 trust root: it pins no receipt root, so every "
                        "key certificate is unknown_root (trust-root writes version 2)",
                        file=sys.stderr,
                    )
            if args.log_key:
                log_key = note.Verifier.parse(args.log_key)
            else:
                assert policy is not None  # one of the two is required
                log_key = policy.log_key()
            state_dir = Path(args.state)
            state_dir.mkdir(parents=True, exist_ok=True)
            lock = StateLock(state_dir)  # before anything in it is opened: a second monitor touches nothing
            db = MonitorDb(state_dir / "monitor.sqlite3")
        except (OSError, Error) as exc:  # a usage error, the key, the policy, the state: nothing was read
            output.failure(exc, f"error: {exc}")
            return 2
        if db.cleared_quorum:
            print(
                f"monitor: cleared {len(db.cleared_quorum)} quorum violation(s) an older monitor recorded: a "
                "checkpoint below the quorum is not a violation (the report's unwitnessed_since says since when)",
                file=sys.stderr,
            )
        monitor = Monitor(prefix, log_key, policy, db, skew_s, require_quorum=args.require_quorum, roots=roots)
        return follow(monitor, output, once=args.once, interval=args.interval)
    except KeyboardInterrupt:  # between two passes: each pass has printed its report
        print(INTERRUPTED, file=sys.stderr)
        return 130
    finally:
        if db is not None:
            db.close()
        if lock is not None:
            lock.release()


def follow(monitor: Monitor, output: Output, *, once: bool, interval: float) -> int:
    """Passes, one per ``interval`` (one with ``once``), each reported: the exit code (a read
    error is retried when following; a violation, another log or a lost state ends it)."""
    while True:
        try:
            report = monitor.run_pass()
        except (WrongLog, MonitorStateError, LogInputError) as exc:
            again = not once and isinstance(exc, LogInputError)
            output.failure(exc, f"error: {exc}" + (f" (again in {interval:g} s)" if again else ""), monitor.known())
            if not again:
                return 2
        except KeyboardInterrupt as exc:
            output.failure(exc, INTERRUPTED, monitor.known())
            return 130
        else:
            output.report(report, require_quorum=monitor.require_quorum)
            if not report["ok"]:
                return 1
            if once:
                return 0
        time.sleep(interval)


def known_of(db: MonitorDb, roots: dict[str, bytes] | None) -> dict[str, object]:
    """The report's members the state alone gives (a pass that failed before it read a
    checkpoint)."""
    return {
        "violations": [v.json() for v in db.violations()],
        "unwitnessed_since": db.unwitnessed.json() if db.unwitnessed else None,
        "keys": listed_keys(db.key_entries(), roots),
    }


@dataclass
class Monitor:
    """What every pass of one run shares; ``current``, the pass under way or last run."""

    prefix: str
    log_key: note.Verifier
    policy: Policy | None
    db: MonitorDb
    skew_s: int = COSIGNATURE_SKEW_S
    require_quorum: bool = False
    roots: dict[str, bytes] | None = None
    """The receipt roots ``--trust-root`` pins (None: key entries are listed, not judged)."""
    current: Pass | None = None

    def run_pass(self) -> PassReport:
        self.current = None
        return asyncio.run(self._run())

    async def _run(self) -> PassReport:
        progress = Progress(sys.stderr.isatty())
        with Workers(tls=self.prefix.startswith("https:")) as workers:
            fetcher = Fetcher(workers.get, self.prefix)
            self.current = Pass(
                fetcher,
                self.log_key,
                self.policy,
                self.db,
                progress,
                self.skew_s,
                require_quorum=self.require_quorum,
                roots=self.roots,
            )
            try:
                return await self.current.run()
            finally:
                progress.close()

    def known(self) -> dict[str, object]:
        """The members of the report known so far: the state's, and the checkpoint the pass
        read and its quorum (none when the state cannot even be read)."""
        try:
            return self.current.known() if self.current is not None else known_of(self.db, self.roots)
        except (sqlite3.Error, MonitorStateError):
            return {}


class Progress:
    """``monitor: 120,000/1,000,000 entries, 25,000/s`` on stderr while catching up, when it
    is a terminal."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self.started = self.last = time.monotonic()
        self.first: int | None = None
        self.open = False  # a line shown and not ended yet

    def update(self, done: int, total: int, *, final: bool = False) -> None:
        if not self.shown:
            return
        if self.first is None:
            self.first = done
        now = time.monotonic()
        if not final and now - self.last < 0.5:
            return
        self.last = now
        rate = (done - self.first) / max(now - self.started, 1e-6)
        print(f"\r monitor: {done:,}/{total:,} entries, {rate:,.0f}/s", end="\n" if final else "", file=sys.stderr)
        self.open = not final

    def close(self) -> None:
        """End the line a pass that stopped early left open (what follows starts a line)."""
        if self.open:
            print(file=sys.stderr)
            self.open = False


@dataclass
class Unit:
    """What one bundle's check needs: its level-0 tile, its entries and the tiles it completes."""

    index: int
    width: int
    tile0: bytes
    entries: list[bytes] | Violation
    upper: dict[tuple[int, int], bytes]


class Pass:
    def __init__(
        self,
        fetcher: Fetcher,
        log_key: note.Verifier,
        policy: Policy | None,
        db: MonitorDb,
        progress: Progress,
        skew_s: int = COSIGNATURE_SKEW_S,
        *,
        require_quorum: bool = False,
        clock: Callable[[], float] = time.time,
        roots: dict[str, bytes] | None = None,
    ) -> None:
        self.skew_s = skew_s
        self.fetcher = fetcher
        self.log_key = log_key
        self.policy = policy
        self.db = db
        self.progress = progress
        self.require_quorum = require_quorum
        self.clock = clock
        self.roots = roots
        self.keys = KeyReader(roots)
        """Reads the key entries, judged against ``roots`` as they pass; the state keeps them."""
        self.checkpoint: note.Checkpoint | None = None
        """The checkpoint this pass read, once its signature verified."""
        self.quorum: QuorumCheck | None = None
        """That checkpoint against the policy's quorum (with a policy)."""

    async def run(self) -> PassReport:
        db = self.db
        check_followed(db.log, db.origin, self.log_key, f"the state in {db.path.parent}")
        if self.roots is not None:
            db.judge_kept(self.roots)
        start = db.frontier.size
        raw = await self.fetcher.fetch("checkpoint")
        if raw is None:
            raise LogReplyError(f"{self.fetcher.prefix}checkpoint answered HTTP 404", 404)
        opened = self._open(raw)
        if isinstance(opened, Violation):
            return self._stop(None, opened)
        checkpoint, text = opened
        self.checkpoint = checkpoint
        self._witnessed(text)
        db.frontier.verified = db.seen.size if db.seen else 0
        problem = self._compare(checkpoint)
        if problem is not None:
            return self._stop(checkpoint, problem)
        violation = await self._catch_up(checkpoint, text)
        if violation is None:
            violation = await self._check_edge(checkpoint, text)
        if violation is not None:
            return self._stop(checkpoint, violation)
        return {**self._report(checkpoint), "new_entries": checkpoint.size - start}

    def _witnessed(self, text: str) -> None:
        """The checkpoint against the policy's quorum: never a violation (a log publishes
        while a witness is down), but the state keeps the first checkpoint of a run of misses,
        and the report says since when the log is unwitnessed. Without a policy there is no
        quorum to miss."""
        now = self.clock()
        met = True
        if self.policy is not None:
            self.quorum = check_quorum(text, self.policy, int(now), self.skew_s)
            met = self.quorum.ok
        assert self.checkpoint is not None
        seen_at = datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.db.record_quorum(self.checkpoint.size, met, seen_at)

    def _open(self, raw: bytes) -> tuple[note.Checkpoint, str] | Violation:
        """``open_followed``; the first checkpoint that verifies records the log in the state
        (and clears what an older monitor recorded against a wrong key). Not a signed
        checkpoint: ``LogReplyError``."""
        url, followed = self.fetcher.prefix + "checkpoint", self.db.log
        try:
            text = raw.decode()
            opened = open_followed(text, self.log_key, followed=followed is not None, url=url)
        except (UnicodeDecodeError, note.NoteError) as exc:
            raise LogReplyError(f"{url} is not a signed checkpoint: {exc}") from exc
        if isinstance(opened, Violation):
            return opened
        if followed is None:
            cleared = self.db.record_log(self.log_key)
            if cleared:
                print(
                    f"monitor: the state now follows {self.log_key.name!r}; cleared {len(cleared)} signature "
                    "violation(s) an older monitor recorded before it knew its log (a wrong key)",
                    file=sys.stderr,
                )
        return opened, text

    def _compare(self, checkpoint: note.Checkpoint) -> Violation | None:
        """A checkpoint smaller than what was seen or read, or a second root for a size."""
        seen, size = self.db.seen, self.db.frontier.size
        if seen is not None and checkpoint.size < seen.size:
            return Violation(
                "inconsistent",
                f"the checkpoint has {checkpoint.size} entries; a checkpoint of {seen.size} was seen before",
            )
        if checkpoint.size < size:
            return Violation(
                "inconsistent",
                f"the checkpoint has {checkpoint.size} entries; the log served {size} of a larger checkpoint before",
            )
        if seen is not None and checkpoint.size == seen.size and checkpoint.root != seen.root:
            return Violation("inconsistent", f"a second root for size {seen.size}: history was rewritten")
        return None

    async def _catch_up(self, checkpoint: note.Checkpoint, text: str) -> Violation | None:
        """Check every bundle from the frontier to the checkpoint's size, fetching ahead."""
        db, frontier = self.db, self.db.frontier
        size = checkpoint.size
        first, end = frontier.size // tlog.TILE_WIDTH, -(-size // tlog.TILE_WIDTH)
        if frontier.size == size:
            return None
        ahead: deque[asyncio.Task[Unit]] = deque()
        pending: dict[str, Project] = {}
        found: list[Violation] = []
        since, saved_at = 0, time.monotonic()
        following = first
        try:
            while ahead or following < end:
                while following < end and len(ahead) < AHEAD:
                    ahead.append(asyncio.create_task(self._fetch_unit(following, tlog.tile_width(size, 0, following))))
                    following += 1
                unit = await ahead.popleft()
                have = frontier.size - unit.index * tlog.TILE_WIDTH
                before = None if isinstance(unit.entries, Violation) else frontier.kind_before(unit.entries)
                violation = (
                    unit.entries
                    if isinstance(unit.entries, Violation)
                    else frontier.check_bundle(unit.index, unit.width, unit.tile0, unit.entries, unit.upper)
                )
                if violation is not None:
                    self._save(text, pending, [*found, violation])
                    return violation
                assert not isinstance(unit.entries, Violation)
                chains = check_chains(
                    frontier.size - unit.width + have,
                    unit.entries[have:],
                    db.projects,
                    db.prevs,
                    self.keys,
                    before=before,
                    ends=frontier.size == size,
                )
                frontier.last = chains.last
                db.projects.update(chains.changed)
                pending.update(chains.changed)
                found += chains.violations
                since += 1
                if since >= SAVE_EVERY or time.monotonic() - saved_at > SAVE_SECONDS:
                    self._save(text, pending, found)
                    pending, found, since, saved_at = {}, [], 0, time.monotonic()
                self.progress.update(frontier.size, size)
        except (LogInputError, asyncio.CancelledError):  # the log stopped answering, or Ctrl-C
            self._save(text, pending, found)  # what was checked stays checked
            raise
        finally:
            for task in ahead:
                task.cancel()
        self._save(text, pending, found)
        self.progress.update(frontier.size, size, final=True)
        return None

    def _save(self, text: str, projects: dict[str, Project], found: list[Violation]) -> None:
        judged = roots_digest(self.roots) if self.roots is not None else None
        self.db.save(
            target=text, projects=projects, violations=found, key_entries=self.keys.take(), judged_roots=judged
        )

    async def _fetch_unit(self, index: int, width: int) -> Unit:
        upper_wanted = completed_tiles(index) if width == tlog.TILE_WIDTH else []
        tile0, bundle, *uppers = await asyncio.gather(
            self._resource(0, index, width),
            self._resource("entries", index, width),
            *(self._resource(level, i, tlog.TILE_WIDTH) for level, i in upper_wanted),
        )
        entries: list[bytes] | Violation
        try:
            entries = split_bundle(bundle)
        except tlog.ProofError as exc:
            entries = Violation("tile", f"{tile_name('entries', index, width)}: {exc}", index * tlog.TILE_WIDTH)
        else:
            if len(entries) == tlog.TILE_WIDTH and width < tlog.TILE_WIDTH:
                entries = entries[:width]  # the full bundle stood in for a partial one
        return Unit(index, width, tile0, entries, dict(zip(upper_wanted, uppers, strict=True)))

    async def _resource(self, level: int | str, index: int, width: int) -> bytes:
        """A tile or bundle the checkpoint needs; a partial one that is gone is read from the
        full one (tlog-tiles lets a log delete partial tiles once full). Missing:
        ``LogReplyError`` (the log cannot be read)."""
        data = await self.fetcher.fetch(tile_name(level, index, width))
        if data is None and width < tlog.TILE_WIDTH:
            data = await self.fetcher.fetch(tile_name(level, index))
            if data is not None and level != "entries" and len(data) == tlog.TILE_WIDTH * tlog.HASH_SIZE:
                data = data[: width * tlog.HASH_SIZE]
        if data is None:
            raise LogReplyError(f"{self.fetcher.prefix}{tile_name(level, index, width)} is missing", 404)
        return data

    async def _check_edge(self, checkpoint: note.Checkpoint, text: str) -> Violation | None:
        frontier: Frontier = self.db.frontier
        wanted = frontier.edge()
        datas = await asyncio.gather(*(self._resource(level, index, width) for level, index, width in wanted))
        violation = frontier.check_edge(dict(zip(wanted, datas, strict=True)), checkpoint.root)
        if violation is None:
            self.db.save(target=text, seen=Seen(checkpoint.size, checkpoint.root, text))
        return violation

    def _stop(self, checkpoint: note.Checkpoint | None, violation: Violation) -> PassReport:
        """Record ``violation`` (kept, and reported on every later run) and report."""
        self.db.save(violations=[violation])
        return self._report(checkpoint)

    def _report(self, checkpoint: note.Checkpoint | None) -> PassReport:
        violations = self.db.violations()
        unwitnessed = self.db.unwitnessed
        missed = self.require_quorum and self.quorum is not None and not self.quorum.ok
        report: PassReport = {
            "ok": not violations and not missed,
            "violations": [v.json() for v in violations],
            "unwitnessed_since": unwitnessed.json() if unwitnessed else None,
            "keys": listed_keys(self.db.key_entries(), self.roots),
        }
        if checkpoint is not None:
            report["checkpoint"] = {"origin": checkpoint.origin, "size": checkpoint.size}
        if self.quorum is not None:
            report["quorum"] = {"ok": self.quorum.ok, "reason": self.quorum.reason}
        return report

    def known(self) -> dict[str, object]:
        """The report's members known so far (a pass that failed: ``--json``'s failure
        document carries them)."""
        return dict(self._report(self.checkpoint))
