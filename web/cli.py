"""Command-line verbs (contract section 9). ``service.py`` only calls ``main``.

Exit status: 0 success (for ``verify``: every requested check passed, against pinned keys for
a bundle), 1 a check failed, a bundle's keys were not pinned, or the thing asked for does
not exist, 2 usage, configuration or I/O error.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import hashlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from receipts.apikeys import hash_api_key
from receipts.encoding import is_hash_str
from receipts.errors import StoreUnavailable
from receipts.ids import is_receipt_id
from receipts.model import format_created_at
from receipts.signing import KeySetError, new_key_set
from web.config import ConfigError, Settings, load_settings
from web.offline_verify import DEFAULT_BASE_URL, VerifyOptions, render_report, run_verify
from web.submit import add_submit_arguments, submit_command

HASH_CHUNK = 1 << 20
PROJECT_HELP = "the project: its id (prj_...) or the name `keys create` gave it"
LISTEN_BACKLOG = 100
"""Sanic's own default backlog for the socket it would have bound."""
audit_log = logging.getLogger("eps.audit")
serve_log = logging.getLogger("eps.serve")
"""The address ``serve`` listens on (a log line: with LOG_FORMAT=json it is JSON like the rest)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="service.py", description="Execution Proof Service")
    verbs = parser.add_subparsers(dest="verb")

    serve = verbs.add_parser("serve", help="run the HTTP service (the default)")
    serve.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve.add_argument("--workers", type=int, default=int(os.environ.get("WEB_WORKERS", "1")))

    signing = verbs.add_parser("signing-key", help="signing keys").add_subparsers(dest="action", required=True)
    new = signing.add_parser("new", help="print a new key set JSON for SIGNING_KEYS")
    new.add_argument("--kid", required=True)

    keys = verbs.add_parser("keys", help="API keys (needs REDIS_URL)").add_subparsers(dest="action", required=True)
    create = keys.add_parser("create", help="create a project, actor and API key; prints JSON")
    create.add_argument(
        "--project", required=True, help="name of the new project; refused when a project already has it"
    )
    create.add_argument("--plan", required=True, choices=("free", "basic", "pro"))
    revoke = keys.add_parser("revoke", help="revoke an API key")
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--api-key")
    which.add_argument("--key-hash", help="sha256:<hex> of the key")

    listing = keys.add_parser("list", help="the project's keys: hashes and states only")
    listing.add_argument("--project", required=True, help=PROJECT_HELP)
    reissue = keys.add_parser("reissue", help="revoke the project's keys and print a new one")
    reissue.add_argument("--project", required=True, help=PROJECT_HELP)
    suspend = keys.add_parser("suspend", help="suspend a project's API access (403 with the operator contact)")
    suspend.add_argument("--project", required=True, help=PROJECT_HELP)
    suspend.add_argument(
        "--until", help="ISO 8601 time (UTC if no offset) when it ends by itself; default: until lifted"
    )
    unsuspend = keys.add_parser("unsuspend", help="lift a project's suspension")
    unsuspend.add_argument("--project", required=True, help=PROJECT_HELP)

    receipts = verbs.add_parser("receipts", help="operator actions on receipts (needs REDIS_URL)")
    receipt_actions = receipts.add_subparsers(dest="action", required=True)
    delete = receipt_actions.add_parser("delete", help="remove a receipt that holds violating data")
    delete.add_argument("receipt_id")
    delete.add_argument("--reason", required=True, help="why (logged; the content never is)")

    worker = verbs.add_parser("worker", help="run background jobs and their schedule (needs REDIS_URL)")
    worker.add_argument("--burst", action="store_true", help="run the jobs queued now, then exit (no schedule)")
    verbs.add_parser("expire", help="run the retention sweep once, now; prints a JSON summary (needs REDIS_URL)")

    digest = verbs.add_parser("hash", help="print sha256:<hex> of a file, computed locally")
    digest.add_argument("file")
    salt = digest.add_mutually_exclusive_group()
    salt.add_argument("--salt", action="store_true", help="hash a fresh random salt + the file; prints the salt")
    salt.add_argument("--salt-hex", help="reuse a kept salt (hex) to reproduce a salted hash")

    verify = verbs.add_parser("verify", help="verify a receipt without trusting the service")
    verify.add_argument("receipt", help="receipt JSON (a receipt, a create/read response body, or an offline bundle)")
    verify.add_argument("--input", help="local input file; its hash must equal input_hash")
    verify.add_argument(
        "--salt", metavar="HEX", help="the salt of a blinded input hash: input_hash = sha256(salt || input file)"
    )
    verify.add_argument("--output", help="local output file; its hash must equal output_hash")
    source = verify.add_mutually_exclusive_group()
    source.add_argument(
        "--base-url",
        help="service to fetch public keys (and the chain) from; default $SERVICE_BASE_URL, else "
        f"{DEFAULT_BASE_URL} for a receipt. For a bundle it pins the keys (the only request made); a "
        "bundle with neither --base-url, SERVICE_BASE_URL nor --keys is NOT VERIFIED (exit 1)",
    )
    source.add_argument("--keys", help="saved key set (GET /v1/public-key body) to pin: fully offline")
    verify.add_argument("--chain", action="store_true", help="follow prev_receipt_hash links through the service")
    verify.add_argument("--max-links", type=int, default=1000, help="stop the chain walk after this many links")
    verify.add_argument("--json", action="store_true", help="machine-readable output")

    submit = verbs.add_parser("submit", help="hash files locally and ask the service for a receipt")
    add_submit_arguments(submit)
    return parser


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["serve", *argv]  # `python service.py --port 9000` serves, like `serve --port 9000`
    args = _parser().parse_args(argv)
    verb = args.verb or "serve"
    try:
        if verb == "serve":
            return _serve(args)
        if verb == "signing-key":
            print(orjson.dumps(new_key_set(args.kid), option=orjson.OPT_INDENT_2).decode())
            return 0
        if verb == "keys":
            return _with_store(KEY_ACTIONS[args.action], args)
        if verb == "receipts":
            return _with_store(_receipts_delete, args)
        if verb == "worker":
            from jobs.worker import worker_command

            return worker_command(burst=args.burst)
        if verb == "expire":
            from jobs.retention import expire_command

            return expire_command()
        if verb == "hash":
            return _hash(args)
        if verb == "verify":
            return _verify(args)
        if verb == "submit":
            return submit_command(args, hash_file)
    except (ConfigError, KeySetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 2


def _serve(args: argparse.Namespace) -> int:
    settings = load_settings()
    own_metrics_dir = None
    if settings.metrics_exposed and not settings.embedded and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Sanic's workers each count in files here and a scrape sums them. Set before
        # prometheus_client is imported anywhere: it picks its value class at import, and the
        # spawned workers inherit this environment.
        own_metrics_dir = tempfile.mkdtemp(prefix="eps-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = own_metrics_dir
    listener = None
    try:
        if settings.metrics_port is not None:
            from web.metrics import start_metrics_listener

            # The one metrics listener of the service: this (main or only) process, never a worker.
            listener = start_metrics_listener(settings.metrics_host, settings.metrics_port)
        return _run_server(args, settings)
    finally:
        # The server has stopped; a repeated SIGTERM must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if listener is not None:
            listener.stop()
        if own_metrics_dir is not None:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)


def listen_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` of a listening address (IPv6 hosts in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _listen(host: str, port: int) -> socket.socket | None:
    """The server's listening socket, bound here so that port 0 means an ephemeral port.

    Sanic reads a port of 0 as "unset" and listens on 8000; handing it a bound socket
    avoids that, and tells us the real address before any worker starts. Returns None
    (after a one-line error) when the address cannot be bound.
    """
    from sanic.server.socket import bind_socket

    try:
        return bind_socket(host, port, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        address = listen_url(host, port).removeprefix("http://")
        if exc.errno == errno.EADDRINUSE:
            print(
                f"error: {address} is already in use; choose another port with --port N or PORT=N (0 picks a free one)",
                file=sys.stderr,
            )
        else:
            print(f"error: cannot listen on {address}: {exc.strerror or exc}", file=sys.stderr)
        return None


def _run_server(args: argparse.Namespace, settings: Settings) -> int:
    from sanic import Sanic
    from sanic.worker.loader import AppLoader

    from web.app import create_app_from_env

    sock = _listen(args.host, args.port)
    if sock is None:
        return 2
    url = listen_url(args.host, sock.getsockname()[1])
    if settings.embedded:
        if args.workers != 1:
            print("note: the embedded store lives in one process; serving with 1 worker", file=sys.stderr)
        app = create_app_from_env()  # configures logging
        app.ctx.listen_url = url
        serve_log.info("listening on %s", url)
        app.run(sock=sock, single_process=True, access_log=False, motd=False)
        return 0
    from web import sanic_fixes

    sanic_fixes.install()  # a SIGTERM during start-up must not hang the manager
    loader = AppLoader(factory=create_app_from_env)
    app = loader.load()  # configures logging
    serve_log.info("listening on %s", url)
    app.prepare(sock=sock, workers=args.workers, access_log=False, motd=False)
    Sanic.serve(primary=app, app_loader=loader)
    return 0


def _with_store(action: Callable[[Any, argparse.Namespace], Awaitable[int]], args: argparse.Namespace) -> int:
    settings = load_settings()
    if settings.embedded:
        print(
            "error: keys commands need REDIS_URL; the embedded store lives inside the running "
            "server (which prints a demo key at start-up)",
            file=sys.stderr,
        )
        return 2
    from kv.connect import open_store
    from web.logs import configure_logging

    configure_logging(settings.log_format)  # the audit log of `receipts delete` (eps.audit)

    async def run() -> int:
        try:
            store = open_store(settings.redis_url, cluster=settings.redis_cluster)
        except ValueError:
            # The URL may hold a password: say what is wrong without echoing it.
            print("error: REDIS_URL is not a Redis URL (redis://, rediss:// or unix://)", file=sys.stderr)
            return 2
        try:
            return await action(store, args)
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except StoreUnavailable:
        print("error: the store at REDIS_URL is unreachable (is Redis running?)", file=sys.stderr)
        return 2


async def _keys_create(store: Any, args: argparse.Namespace) -> int:
    from web.keys_admin import ProjectNameTaken, create_project_key

    name = args.project.strip()
    if not name or name.startswith("prj_"):
        print(
            "error: --project must be a name, not empty and not starting with prj_ (ids are made here)", file=sys.stderr
        )
        return 2
    try:
        created = await create_project_key(store, project_name=name, plan=args.plan, unique_name=True)
    except ProjectNameTaken as exc:
        print(
            f"error: {exc}; nothing was created. Choose another name, or for a new key of that "
            f"project run `keys reissue --project {exc.project_id}` (it revokes the project's keys)",
            file=sys.stderr,
        )
        return 1
    print(orjson.dumps(created).decode())
    return 0


async def _project_id(store: Any, ref: str) -> str | None:
    """The project ``--project`` names (id or name), or None after printing why not."""
    from web.keys_admin import UnknownProject, resolve_project

    try:
        return await resolve_project(store, ref)
    except UnknownProject as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


async def _keys_revoke(store: Any, args: argparse.Namespace) -> int:
    if args.key_hash is not None:
        if not is_hash_str(args.key_hash):
            print("error: --key-hash must be sha256:<64 hex>", file=sys.stderr)
            return 2
        key_hash = args.key_hash.lower()
    else:
        key_hash = hash_api_key(args.api_key)
    revoked = await store.revoke_api_key(key_hash)
    print(orjson.dumps({"revoked": revoked, "key_hash": key_hash}).decode())
    return 0 if revoked else 1


async def _keys_list(store: Any, args: argparse.Namespace) -> int:
    from web.keys_admin import key_state

    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    now = _now_ms()
    records = await store.list_project_keys(project_id)
    print(orjson.dumps({"project_id": project_id, "keys": [key_state(r, now) for r in records]}).decode())
    return 0


async def _keys_reissue(store: Any, args: argparse.Namespace) -> int:
    from web.keys_admin import reissue_project_key

    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    reissued = await reissue_project_key(store, project_id)
    if reissued is None:
        print(f"error: no project {project_id}", file=sys.stderr)
        return 1
    print(orjson.dumps(reissued).decode())
    return 0


async def _keys_suspend(store: Any, args: argparse.Namespace) -> int:
    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    until = "forever"
    if args.until:
        try:
            until = str(parse_until_ms(args.until))
        except ValueError as exc:
            print(f"error: --until {exc}", file=sys.stderr)
            return 2
    updated = await store.set_project_suspension(project_id, until)
    shown = until if until == "forever" else format_created_at(int(until))
    print(orjson.dumps({"project_id": project_id, "suspended_until": shown, "keys_updated": updated}).decode())
    return 0


async def _keys_unsuspend(store: Any, args: argparse.Namespace) -> int:
    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    updated = await store.set_project_suspension(project_id, "")
    print(orjson.dumps({"project_id": project_id, "suspended_until": None, "keys_updated": updated}).decode())
    return 0


async def _receipts_delete(store: Any, args: argparse.Namespace) -> int:
    removed = await store.delete_receipt(args.receipt_id) if is_receipt_id(args.receipt_id) else None
    if removed is None:
        print(f"error: no receipt {args.receipt_id}", file=sys.stderr)
        return 1
    event = {"event": "receipt_deleted", **removed, "reason": args.reason, "at": format_created_at(_now_ms())}
    audit_log.warning("%s", orjson.dumps(event).decode(), extra={"fields": event})
    print(orjson.dumps(event).decode())
    return 0


KEY_ACTIONS: dict[str, Callable[[Any, argparse.Namespace], Awaitable[int]]] = {
    "create": _keys_create,
    "revoke": _keys_revoke,
    "list": _keys_list,
    "reissue": _keys_reissue,
    "suspend": _keys_suspend,
    "unsuspend": _keys_unsuspend,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def parse_until_ms(text: str) -> int:
    """Unix ms of an ISO 8601 date or date-time; without an offset it is UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError("must be an ISO 8601 date or time, such as 2026-12-01T00:00:00Z") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def hash_file(path: str | Path, salt: bytes = b"") -> str:
    """``sha256:<hex>`` of ``salt`` followed by the file's bytes, read in chunks."""
    digest = hashlib.sha256(salt)
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _hash(args: argparse.Namespace) -> int:
    if args.salt or args.salt_hex:
        try:
            salt = bytes.fromhex(args.salt_hex) if args.salt_hex else secrets.token_bytes(16)
        except ValueError:
            print("error: --salt-hex must be hexadecimal", file=sys.stderr)
            return 2
        print(hash_file(args.file, salt))
        print(f"salt: {salt.hex()}  (keep it: the hash is SHA-256 of these salt bytes followed by the file)")
        return 0
    print(hash_file(args.file))
    return 0


def _verify(args: argparse.Namespace) -> int:
    options = VerifyOptions(
        receipt_path=args.receipt,
        input_path=args.input,
        output_path=args.output,
        base_url=args.base_url or os.environ.get("SERVICE_BASE_URL") or None,
        keys_path=args.keys,
        chain=args.chain,
        max_links=args.max_links,
        salt_hex=args.salt,
    )
    report = run_verify(options, hash_file)
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_report(report))
    if report.get("error"):
        return 2
    return 0 if report["ok"] else 1
