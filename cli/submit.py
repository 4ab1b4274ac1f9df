"""``execution-proof submit``: hash files locally, send only the hashes, save the receipt.

The request body holds ``input_hash`` and, when given, ``output_hash``, ``params_hash``,
``env_hash``, ``receipt_kind``, ``tags``, ``code_ref`` and ``run_id``: never a file's bytes
or its name (unless the user writes it into a tag). With ``--salt`` each file is hashed with
its own fresh 16-byte salt (sha256(salt || file), as ``hash --salt``); the salts are never sent.

The saved file (``--save``, default ``<input>.receipt.json``) is the create response body,
byte for byte, with two members added at its end: ``service_url`` (the service that issued
it, which ``verify`` then talks to) and, with ``--salt``, ``salts`` (hex, by file: ``input``,
``output``, ``params``, ``env``), which ``verify`` uses to hash the files again.

Exit status: 0 issued or replayed (201/200), 1 the service refused (its error code and
message are printed), 2 usage or I/O (no ``SERVICE_API_KEY``, unreadable file, bad
``--tag``, unreachable service, the receipt could not be saved).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from execution_proof.cli.http_client import Client, HttpError, Reply

HTTP_TIMEOUT_S = 30.0
SALT_BYTES = 16
FILES = (("input", "input_hash"), ("output", "output_hash"), ("params", "params_hash"), ("env", "env_hash"))


class UsageError(Exception):
    """Exit 2: the command line, the environment or a file is the problem."""


def parse_tags(items: list[str]) -> dict[str, str] | None:
    """``KEY=VALUE`` items (split at the first ``=``); both parts non-empty, keys unique."""
    tags: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"--tag must be KEY=VALUE with both parts non-empty (got {item!r})")
        if key in tags:
            raise UsageError(f"--tag {key} is given twice")
        tags[key] = value
    return tags or None


def build_body(
    args: argparse.Namespace, hash_file: Callable[..., str], salt: bool = False
) -> tuple[dict[str, Any], dict[str, str]]:
    """(the create body: hashes of the named files plus the labels the user gave; the salts
    by file name, hex, with ``salt``: one fresh salt per file, kept here and never sent)."""
    body: dict[str, Any] = {}
    salts: dict[str, str] = {}
    for name, field in FILES:
        path = getattr(args, name)
        if path is not None:
            try:
                if salt:
                    fresh = secrets.token_bytes(SALT_BYTES)
                    body[field] = hash_file(path, fresh)
                    salts[name] = fresh.hex()
                else:
                    body[field] = hash_file(path)
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for field, value in (("receipt_kind", args.kind), ("code_ref", args.code_ref), ("run_id", args.run_id)):
        if value is not None:
            body[field] = value
    tags = parse_tags(args.tag)
    if tags is not None:
        body["tags"] = tags
    return body, salts


def default_save_path(input_path: str, receipt_id: str) -> Path:
    """``<input>.receipt.json``; if that already holds another receipt, it is kept and this
    one goes to ``<input>.<receipt_id>.receipt.json`` (a receipt file is never lost)."""
    path = Path(input_path + ".receipt.json")
    if path.exists():
        try:
            held = orjson.loads(path.read_bytes())
            held_id = held.get("receipt", {}).get("receipt_id") if isinstance(held, dict) else None
        except (OSError, orjson.JSONDecodeError, AttributeError):
            held_id = None
        if held_id != receipt_id:
            return Path(f"{input_path}.{receipt_id}.receipt.json")
    return path


def saved_bytes(content: bytes, base: str, salts: dict[str, str]) -> bytes:
    """The response body with ``service_url`` (and ``salts``) added as its last members; the
    body's own bytes are kept (``ValueError`` if it is not a JSON object)."""
    body = content.rstrip()
    if not body.endswith(b"}") or not isinstance(orjson.loads(body), dict):
        raise ValueError("the response body is not a JSON object")
    extra = {"service_url": base, **({"salts": salts} if salts else {})}
    return body[:-1].rstrip() + b"," + orjson.dumps(extra)[1:] + b"\n"


def _error_text(response: Reply) -> str:
    try:
        error = response.json().get("error") or {}
        return f"{error.get('code', 'error')}: {error.get('message', '')}"
    except (orjson.JSONDecodeError, AttributeError):
        return f"HTTP {response.status} (not a JSON error body)"


def submit_command(
    args: argparse.Namespace,
    hash_file: Callable[..., str],
    default_base_url: str,
    client: Client | None = None,
) -> int:
    """Run ``submit`` against ``--base-url``, else ``SERVICE_BASE_URL``, else ``default_base_url``;
    ``client`` is for tests."""
    try:
        api_key = os.environ.get("SERVICE_API_KEY", "").strip()
        if not api_key:
            raise UsageError("set SERVICE_API_KEY to your API key (it is never accepted on the command line)")
        base = (args.base_url or os.environ.get("SERVICE_BASE_URL") or default_base_url).strip().rstrip("/")
        body, salts = build_body(args, hash_file, args.salt)
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        try:
            with client or Client(timeout=HTTP_TIMEOUT_S) as http:
                response = http.post(base + "/v1/receipts", orjson.dumps(body), headers=headers)
        except HttpError as exc:
            raise UsageError(str(exc)) from exc
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if response.status not in (200, 201):
        print(f"error: the service answered {response.status} {_error_text(response)}", file=sys.stderr)
        return 1
    try:
        receipt_id = str(response.json()["receipt"]["receipt_id"])
        content = saved_bytes(response.body, base, salts)
    except (ValueError, KeyError, TypeError):
        print(f"error: the service answered {response.status} without a receipt", file=sys.stderr)
        return 1
    save = Path(args.save) if args.save else default_save_path(args.input, receipt_id)
    try:
        save.write_bytes(content)
    except OSError as exc:
        print(f"error: receipt {receipt_id} was issued but cannot be saved to {save}: {exc.strerror}", file=sys.stderr)
        print(content.decode("utf-8", "replace"))
        return 2
    replay = " (an earlier receipt for the same request)" if response.status == 200 else ""
    print(f"receipt: {receipt_id}{replay}")
    print(f"saved:   {save}")
    if salts:
        print(
            f"salts:   kept in {save} for {', '.join(salts)} (never sent; `verify` uses them). "
            "Keep that file: without a salt the receipt can no longer be tied to its file"
        )
    print(f"verify:  {base}/verify?receipt_id={receipt_id}")
    return 0
