"""The log part of ``verify``: find the receipt's tlog-proof (in the bundle, or from the
service), check it against the pinned log key, and, given an older checkpoint, check the
log's consistency with it from the service's tiles (receipts/log_check.py decides)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from receipts import log_check, note, tlog
from receipts.policy import Policy, PolicyError, check_quorum, parse_policy

MAX_TILE_FETCHES = 256
T = TypeVar("T")


class LogInputError(Exception):
    """The log key, the older checkpoint or the service's answers could not be read."""


def parse_log_key(vkey: str) -> note.Verifier:
    try:
        return note.Verifier.parse(vkey)
    except note.NoteError as exc:
        raise LogInputError(f"--log-key: {exc}") from exc


def proof_text(receipt: dict[str, Any], bundle_log: Any, base: str | None, client: httpx.Client) -> str | None:
    """The tlog-proof: the bundle's (None when it was pending), else the service's (None
    while pending: 409 ``log_pending``)."""
    if bundle_log is not None:
        proof = bundle_log.get("proof") if isinstance(bundle_log, dict) else None
        return proof if isinstance(proof, str) else None
    if base is None:
        raise LogInputError("the receipt carries no log proof: give --base-url to fetch it")
    url = f"{base}/v1/receipts/{receipt.get('receipt_id')}/log-proof"
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise LogInputError(f"cannot reach {url}: {exc}") from exc
    if response.status_code == 409:
        return None
    if response.status_code != 200:
        raise LogInputError(f"{url} answered HTTP {response.status_code}")
    return response.text


def load_policy(path: str) -> Policy:
    try:
        return parse_policy(_read(path))
    except PolicyError as exc:
        raise LogInputError(f"--log-policy: {exc}") from exc


def policy_log_key(policy: Policy) -> note.Verifier:
    keys = policy.log_keys()
    if len(keys) != 1:
        raise LogInputError("--log-policy names no log or several: give --log-key too")
    return keys[0]


def check(
    receipt: dict[str, Any],
    bundle_log: Any,
    log_key: note.Verifier,
    since_path: str | None,
    base: str | None,
    client: httpx.Client,
    policy: Policy | None = None,
) -> tuple[dict[str, Any], dict[str, bool]]:
    """(the report's ``log`` member, the checks it adds)."""
    text = proof_text(receipt, bundle_log, base, client)
    if text is None:
        report = {"ok": False, "reason": "pending: no published checkpoint covers the receipt yet"}
        return report, {"log_inclusion": False}
    inclusion = log_check.check_inclusion(receipt, text, log_key)
    report = inclusion.report()
    checks = {"log_inclusion": inclusion.ok}
    if policy is not None:
        try:
            checkpoint_note = note.parse_tlog_proof(text).checkpoint
        except note.NoteError:
            checkpoint_note = ""
        quorum = check_quorum(checkpoint_note, policy, int(time.time()))
        report["quorum"] = {"ok": quorum.ok, "reason": quorum.reason, "cosigned": quorum.cosigned}
        checks["log_quorum"] = quorum.ok
    if since_path is not None:
        older_text = _read(since_path)
        try:
            older, _ = note.open_checkpoint(older_text, log_key)
        except note.NoteError as exc:
            raise LogInputError(f"--since-checkpoint: {exc}") from exc
        newer = inclusion.checkpoint
        if newer is None or base is None:
            raise LogInputError("--since-checkpoint needs a log proof and --base-url (the tiles are read from it)")
        proof = consistency_proof(client, base, older.size, newer.size)
        ok, reason = log_check.check_consistency(older, newer, proof)
        report["consistency"] = {"ok": ok, "reason": reason, "since_size": older.size}
        checks["log_consistency"] = ok
    return report, checks


class HttpTiles:
    """The log's tiles read over HTTP, each once, for computations on a tree of a given size
    (``receipts.tlog.TileHashes``): whatever a computation finds missing is fetched and the
    computation run again. Used by ``verify --since-checkpoint`` and by ``monitor``."""

    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client, self.base = client, base
        self.tiles: dict[tuple[int, int, int], bytes] = {}

    def read(self, level: int, index: int, width: int) -> bytes:
        if (level, index, width) not in self.tiles:
            raise tlog.MissingTile(level, index, width)
        return self.tiles[(level, index, width)]

    def fetch(self, level: int, index: int, width: int) -> bytes:
        if (level, index, width) not in self.tiles:
            url = f"{self.base}/v1/log/tile/{tlog.tile_path(level, index, width)}"
            try:
                response = self.client.get(url)
            except httpx.HTTPError as exc:
                raise LogInputError(f"cannot reach {url}: {exc}") from exc
            if response.status_code != 200:
                raise LogInputError(f"{url} answered HTTP {response.status_code}")
            self.tiles[(level, index, width)] = response.content
        return self.tiles[(level, index, width)]

    def compute(self, size: int, fn: Callable[[tlog.TileHashes], T]) -> T:
        for _ in range(MAX_TILE_FETCHES):
            try:
                return fn(tlog.TileHashes(size, self.read))
            except tlog.MissingTile as missing:
                self.fetch(missing.level, missing.index, missing.width)
            except tlog.ProofError as exc:
                raise LogInputError(f"the log's tiles are unusable: {exc}") from exc
        raise LogInputError("a computation needed more tiles than any proof does")


def consistency_proof(client: httpx.Client, base: str, old_size: int, size: int) -> list[bytes]:
    """The consistency proof from ``old_size`` to ``size``, computed here from the tiles the
    service serves (the service is not asked for a proof, and not trusted for one)."""
    if old_size == 0 or old_size >= size:
        return []
    return HttpTiles(client, base).compute(size, lambda view: view.consistency_proof(old_size))


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogInputError(f"cannot read {path}: {exc}") from exc


def render(report: dict[str, Any], mark: Any) -> list[str]:
    lines = [f"  {mark(report['ok'])} transparency log: {report['reason']}"]
    quorum = report.get("quorum")
    if quorum:
        lines.append(f"  {mark(quorum['ok'])} witnesses: {quorum['reason']}")
    consistency = report.get("consistency")
    if consistency:
        lines.append(f"  {mark(consistency['ok'])} {consistency['reason']}")
    return lines
