"""Operator verbs on the store at ``REDIS_URL``: ``keys``, ``receipts delete``; and the key maker
``log-key new`` (a log key printed, or made where ``--signer`` says: runtime/signers.py).

``keys create`` prints the new key once, as JSON; every other ``keys`` verb takes
``--project`` as the project id (``prj_...``) or its unique name (docs/operations.md).
``receipts delete`` writes an audit record (``eps.audit``) with the reason, never the content.
The store is imported only when a verb runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from execution_proof.cli.stores import run_on_store
from execution_proof.receipts.apikeys import hash_api_key
from execution_proof.receipts.encoding import is_hash_str
from execution_proof.receipts.ids import is_receipt_id
from execution_proof.receipts.limits import PLANS
from execution_proof.receipts.model import format_created_at
from execution_proof.runtime.settings import load_settings

PROJECT_HELP = "the project: its id (prj_...) or the name `keys create` gave it"
NEEDS_REDIS = (
    "error: keys commands need REDIS_URL; the embedded store lives inside the running "
    "server (which prints a demo key at start-up)"
)
audit_log = logging.getLogger("eps.audit")


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = verbs.add_parser("keys", help="API keys (needs REDIS_URL)").add_subparsers(dest="action", required=True)
    create = keys.add_parser("create", help="create a project, actor and API key; prints JSON")
    create.add_argument(
        "--project", required=True, help="name of the new project; refused when a project already has it"
    )
    create.add_argument("--plan", required=True, choices=PLANS)
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

    log_key = verbs.add_parser("log-key", help="transparency-log keys (the light install)").add_subparsers(
        dest="action", required=True
    )
    log_new = log_key.add_parser(
        "new",
        help="print a LOG_SIGNING_KEY value, then the log's verifier key (what verifiers pin); runs on the light "
        "install",
    )
    log_new.add_argument(
        "--origin",
        help="the log's origin (default: LOG_ORIGIN, else PUBLIC_BASE_URL without its scheme + /v1/log, else "
        "localhost/v1/log)",
    )
    log_new.add_argument(
        "--signer",
        metavar="URI",
        help="make the key there and print the URI to configure (LOG_SIGNING_KEY, any pin-value removed), then the "
        "verifier key: pkcs11:... (in the token, never extractable), file:/ABSOLUTE/PATH (a new file, mode 0600), "
        "plugin:NAME[?ARG] (the plugin's key); env: cannot be created",
    )
    log_new.set_defaults(run=_log_key_new)
    for action, parser in keys.choices.items():
        parser.set_defaults(run=_on_store(KEY_ACTIONS[action]))
    delete.set_defaults(run=_on_store(_receipts_delete))


def _log_key_new(args: argparse.Namespace) -> int:
    """Without ``--signer``: the private key line, then the verifier key. With it: the key made
    there, then the URI to configure and the verifier key. Exit 2, one line naming the URI, when
    it cannot be made (nothing is made then)."""
    from execution_proof.runtime.settings import default_log_origin
    from execution_proof.runtime.signers import make_key, without_pin
    from execution_proof.transparency.note import NoteError, Signer, check_name
    from execution_proof.transparency.signer import SignerError

    origin = args.origin or default_log_origin(os.environ)
    try:
        check_name(origin)
    except NoteError as exc:
        print(f"error: --origin: {exc}", file=sys.stderr)
        return 2
    if args.signer is None:
        signer = Signer.generate(origin)
        print(signer.encode())
        print(signer.verifier.encode())
        return 0
    try:
        key = make_key(args.signer, text_of=lambda made: Signer(origin, made).encode())
    except SignerError as exc:
        print(f"error: --signer {exc}", file=sys.stderr)
        return 2
    print(without_pin(args.signer))
    print(Signer(origin, key).verifier.encode())
    return 0


def _on_store(action: Callable[[Any, argparse.Namespace], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    """The verb: ``action(store, args)`` on the configured store, with the audit log set up."""

    def verb(args: argparse.Namespace) -> int:
        settings = load_settings()
        if not settings.embedded:
            from execution_proof.runtime.logs import configure_logging

            configure_logging(settings.log_format)  # the audit log of `receipts delete` (eps.audit)
        return run_on_store(settings, NEEDS_REDIS, lambda store: action(store, args))

    return verb


async def _keys_create(store: Any, args: argparse.Namespace) -> int:
    from execution_proof.kv.accounts import ProjectNameTaken, create_project_key

    name = args.project.strip()
    if not name or name.startswith("prj_"):
        print(
            "error: --project must be a name, not empty and not starting with prj_ (ids are made here)", file=sys.stderr
        )
        return 2
    try:
        created = await create_project_key(store.keys, project_name=name, plan=args.plan, unique_name=True)
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
    from execution_proof.kv.accounts import UnknownProject, resolve_project

    try:
        return await resolve_project(store.keys, ref)
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
    revoked = await store.keys.revoke_api_key(key_hash)
    print(orjson.dumps({"revoked": revoked, "key_hash": key_hash}).decode())
    return 0 if revoked else 1


async def _keys_list(store: Any, args: argparse.Namespace) -> int:
    from execution_proof.kv.accounts import key_state

    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    now = _now_ms()
    records = await store.keys.list_project_keys(project_id)
    print(orjson.dumps({"project_id": project_id, "keys": [key_state(r, now) for r in records]}).decode())
    return 0


async def _keys_reissue(store: Any, args: argparse.Namespace) -> int:
    from execution_proof.kv.accounts import reissue_project_key

    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    reissued = await reissue_project_key(store.keys, project_id)
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
    updated = await store.keys.set_project_suspension(project_id, until)
    shown = until if until == "forever" else format_created_at(int(until))
    print(orjson.dumps({"project_id": project_id, "suspended_until": shown, "keys_updated": updated}).decode())
    return 0


async def _keys_unsuspend(store: Any, args: argparse.Namespace) -> int:
    project_id = await _project_id(store, args.project)
    if project_id is None:
        return 1
    updated = await store.keys.set_project_suspension(project_id, "")
    print(orjson.dumps({"project_id": project_id, "suspended_until": None, "keys_updated": updated}).decode())
    return 0


async def _receipts_delete(store: Any, args: argparse.Namespace) -> int:
    removed = await store.receipts.delete_receipt(args.receipt_id) if is_receipt_id(args.receipt_id) else None
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
