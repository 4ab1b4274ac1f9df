"""``python service.py submit``: hash files locally, send only the hashes, save the receipt.

The request body holds ``input_hash`` and, when given, ``output_hash``, ``params_hash``,
``env_hash``, ``receipt_kind``, ``tags``, ``code_ref`` and ``run_id``: never a file's bytes
or its name (unless the user writes it into a tag). The create response body is saved
byte for byte, so ``service.py verify`` can check it later, offline with ``--keys``.

Exit status: 0 issued or replayed (201/200), 1 the service refused (its error code and
message are printed), 2 usage or I/O (no ``SERVICE_API_KEY``, unreadable file, bad
``--tag``, unreachable service, the receipt could not be saved).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from execution_proof.receipts.model import RECEIPT_KINDS

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
HTTP_TIMEOUT_S = 30.0


class UsageError(Exception):
    """Exit 2: the command line, the environment or a file is the problem."""


def add_submit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="input file (hashed locally; its bytes are never sent)")
    parser.add_argument("--output", help="output file, hashed locally into output_hash")
    parser.add_argument("--params", help="parameters file, hashed locally into params_hash")
    parser.add_argument("--env", help="environment file, hashed locally into env_hash")
    parser.add_argument("--kind", choices=RECEIPT_KINDS, help="receipt_kind (a template label, docs/templates.md)")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="a tag (repeatable)")
    parser.add_argument("--code-ref", help="code_ref, e.g. a commit id")
    parser.add_argument("--run-id", help="run_id of the job that produced the files")
    parser.add_argument("--base-url", help=f"the service; default SERVICE_BASE_URL or {DEFAULT_BASE_URL}")
    parser.add_argument("--save", help="where to save the response (default: <input>.receipt.json)")


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


def build_body(args: argparse.Namespace, hash_file: Callable[[str], str]) -> dict[str, Any]:
    """The create body: hashes of the named files, plus the labels the user gave."""
    body: dict[str, Any] = {}
    for field, path in (
        ("input_hash", args.input),
        ("output_hash", args.output),
        ("params_hash", args.params),
        ("env_hash", args.env),
    ):
        if path is not None:
            try:
                body[field] = hash_file(path)
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for field, value in (("receipt_kind", args.kind), ("code_ref", args.code_ref), ("run_id", args.run_id)):
        if value is not None:
            body[field] = value
    tags = parse_tags(args.tag)
    if tags is not None:
        body["tags"] = tags
    return body


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


def _error_text(response: httpx.Response) -> str:
    try:
        error = orjson.loads(response.content).get("error") or {}
        return f"{error.get('code', 'error')}: {error.get('message', '')}"
    except (orjson.JSONDecodeError, AttributeError):
        return f"HTTP {response.status_code} (not a JSON error body)"


def submit_command(
    args: argparse.Namespace,
    hash_file: Callable[[str], str],
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Run ``submit``; ``transport`` is for tests (a recording or mock transport)."""
    try:
        api_key = os.environ.get("SERVICE_API_KEY", "").strip()
        if not api_key:
            raise UsageError("set SERVICE_API_KEY to your API key (it is never accepted on the command line)")
        base = (args.base_url or os.environ.get("SERVICE_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        body = build_body(args, hash_file)
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        try:
            with httpx.Client(timeout=HTTP_TIMEOUT_S, transport=transport) as client:
                response = client.post(base + "/v1/receipts", content=orjson.dumps(body), headers=headers)
        except httpx.HTTPError as exc:
            raise UsageError(f"cannot reach {base}: {exc}") from exc
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if response.status_code not in (200, 201):
        print(f"error: the service answered {response.status_code} {_error_text(response)}", file=sys.stderr)
        return 1
    try:
        receipt_id = str(orjson.loads(response.content)["receipt"]["receipt_id"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        print(f"error: the service answered {response.status_code} without a receipt", file=sys.stderr)
        return 1
    save = Path(args.save) if args.save else default_save_path(args.input, receipt_id)
    try:
        save.write_bytes(response.content)
    except OSError as exc:
        print(f"error: receipt {receipt_id} was issued but cannot be saved to {save}: {exc.strerror}", file=sys.stderr)
        print(response.content.decode("utf-8", "replace"))
        return 2
    replay = " (an earlier receipt for the same request)" if response.status_code == 200 else ""
    print(f"receipt: {receipt_id}{replay}")
    print(f"saved:   {save}")
    print(f"verify:  {base}/verify?receipt_id={receipt_id}")
    return 0
