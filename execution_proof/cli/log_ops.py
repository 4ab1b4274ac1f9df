"""``log resume`` (lift a halt) and ``log export`` (copy and verify a log between stores):
the operator's verbs on the log store of ``LOG_STORE`` (docs/log.md, "Operating the log").

    python service.py log resume --reason TEXT
    python service.py log export --to URL

``resume`` exits 0, also when nothing was halted. ``export`` exits 0 when the copy is made
and verified, 1 when the copy does not verify (the destination holds another history, or a
tile read back is not what was written), 2 when it cannot run (no ``LOG_STORE``, a store
that cannot be reached, a source that is not a log).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import orjson

from execution_proof.runtime.settings import load_log_store_settings

audit_log = logging.getLogger("eps.audit")
NEEDS_STORE = (
    "error: LOG_STORE is not set: the log's store is where its halt and its files are kept "
    "(file:///ABSOLUTE/PATH or s3://BUCKET/PREFIX). The embedded demo keeps its log in the server's memory"
)


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    log_verbs = verbs.add_parser("log", help="operate the transparency log's store (LOG_STORE)")
    actions = log_verbs.add_subparsers(dest="action", required=True)
    resume = actions.add_parser("resume", help="lift a halt after looking into a witness's evidence of a fork")
    resume.add_argument("--reason", required=True, help="what was checked (kept in the store and the audit log)")
    resume.set_defaults(run=resume_command)
    export = actions.add_parser(
        "export", help="copy the log (public files and .state/) to another store, and verify it"
    )
    export.add_argument("--to", required=True, metavar="URL", help="file:///ABSOLUTE/PATH or s3://BUCKET/PREFIX")
    export.set_defaults(run=export_command)


def resume_command(args: argparse.Namespace) -> int:
    from execution_proof.kv.logstore import LogStoreError, open_log_store

    settings = load_log_store_settings()
    if settings.log_store is None:
        print(NEEDS_STORE, file=sys.stderr)
        return 2
    from execution_proof.runtime.logs import configure_logging

    configure_logging(settings.log_format)

    async def run() -> None:
        assert settings.log_store is not None
        log_store = open_log_store(settings.log_store)
        try:
            lifted = await log_store.resume(args.reason)
        finally:
            await log_store.close()
        event = {"event": "log_resumed" if lifted else "log_resume_nothing_halted", "reason": args.reason}
        if lifted is not None:
            event["halt"] = lifted
        audit_log.warning("%s", orjson.dumps(event).decode(), extra={"fields": event})
        print(orjson.dumps({"resumed": lifted is not None, "halt": lifted}).decode())

    try:
        asyncio.run(run())
    except LogStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def export_command(args: argparse.Namespace) -> int:
    from execution_proof.kv.logstore import LogStoreError, open_log_store
    from execution_proof.kv.logstore.export import CannotExport, ExportFailed, export

    settings = load_log_store_settings()
    if settings.log_store is None:
        print(NEEDS_STORE, file=sys.stderr)
        return 2
    if args.to.rstrip("/") == settings.log_store.rstrip("/"):
        print("error: --to names LOG_STORE itself", file=sys.stderr)
        return 2

    async def run() -> bytes:
        """The line to print: the export's report (its type is the exporter's)."""
        assert settings.log_store is not None
        source, target = open_log_store(settings.log_store), open_log_store(args.to)
        try:
            report = await export(source, target)
        finally:
            await source.close()
            await target.close()
        return orjson.dumps({"ok": True, **report})

    try:
        line = asyncio.run(run())
    except (CannotExport, LogStoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ExportFailed as exc:
        print(orjson.dumps({"ok": False, "error": str(exc)}).decode())
        return 1
    print(line.decode())
    return 0
