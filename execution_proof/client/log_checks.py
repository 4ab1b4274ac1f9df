"""The log part of ``verify``: find the receipt's tlog-proof (in the bundle, or from the
service), check it against the pinned log key, and, given an older checkpoint, check the
log's consistency with it from the service's tiles (transparency/log_check.py decides); given
TSA roots, check the RFC 3161 time-stamps of the proof's checkpoint (transparency/timestamps.py)
and report the latest time by which the receipt provably existed. What it finds is a typed
``LogCheck`` (the report's ``log`` member, and the ``log_*`` checks).

Requests go through the caller's ``http_client.HttpClient`` (an ``OfflineClient`` when the check
promised no network). The time-stamp code (asn1crypto, cryptography's x509) is loaded only
when time-stamps are checked."""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from execution_proof.client.http import HttpClient, HttpError, Reply
from execution_proof.transparency import log_check, note, tlog
from execution_proof.transparency.errors import LogError
from execution_proof.transparency.policy import (
    Policy,
    PolicyError,
    QuorumCheck,
    check_quorum,
    cosignature_skew,
    parse_policy,
)
from execution_proof.transparency.tiles import Fetch, TileMissing, TileReader

if TYPE_CHECKING:
    import cryptography.x509

    from execution_proof.receipts.shapes import JSONObject, JSONValue
    from execution_proof.receipts.trust_root import TrustRoot

PENDING = "pending: no published checkpoint covers the receipt yet"


class LogInputError(LogError):
    """The log key, a checkpoint, the policy or the log's resources could not be read (the
    verb then exits 2: it could not check)."""


def parse_log_key(vkey: str) -> note.Verifier:
    try:
        return note.Verifier.parse(vkey)
    except note.NoteError as exc:
        raise LogInputError(f"--log-key: {exc}") from exc


@dataclass(frozen=True)
class StampCheck:
    """One RFC 3161 time-stamp of the proof's checkpoint, against the trusted roots: ``tsa``
    as the service named it; once it verifies, what it says (else ``reason`` says why not)."""

    tsa: str | None
    ok: bool
    reason: str
    gen_time: str | None = None
    accuracy_s: float | None = None
    tsa_name: str | None = None

    def to_json(self) -> JSONObject:
        if not self.ok:
            return {"tsa": self.tsa, "ok": False, "reason": self.reason}
        return {
            "tsa": self.tsa,
            "ok": True,
            "gen_time": self.gen_time,
            "accuracy_s": self.accuracy_s,
            "tsa_name": self.tsa_name,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class TimeCheck:
    """When the receipt provably existed: ``existed_by``, from the time-stamps that verify
    (``stamps`` None: the proof did not check, so there was no checkpoint to time)."""

    ok: bool
    reason: str
    existed_by: str | None = None
    stamps: tuple[StampCheck, ...] | None = None

    def to_json(self) -> JSONObject:
        if self.stamps is None:
            return {"ok": self.ok, "reason": self.reason}
        stamps: list[JSONValue] = [stamp.to_json() for stamp in self.stamps]
        return {"ok": self.ok, "reason": self.reason, "existed_by": self.existed_by, "stamps": stamps}


@dataclass(frozen=True)
class ConsistencyCheck:
    """The log still extends the older checkpoint of ``--since-checkpoint`` (of ``since_size``)."""

    ok: bool
    reason: str
    since_size: int


@dataclass(frozen=True)
class LogCheck:
    """The receipt against the log: its inclusion (None: pending, no published checkpoint
    covers it yet) and, when asked, the checkpoint's time, witness quorum and consistency."""

    inclusion: log_check.LogInclusion | None
    time: TimeCheck | None = None
    quorum: QuorumCheck | None = None
    consistency: ConsistencyCheck | None = None

    @property
    def ok(self) -> bool:
        return self.inclusion is not None and self.inclusion.ok

    @property
    def reason(self) -> str:
        return self.inclusion.reason if self.inclusion is not None else PENDING

    def results(self) -> dict[str, bool]:
        """The report's ``log_*`` checks."""
        results = {"log_inclusion": self.ok}
        if self.time is not None:
            results["log_time"] = self.time.ok
        if self.quorum is not None:
            results["log_quorum"] = self.quorum.ok
        if self.consistency is not None:
            results["log_consistency"] = self.consistency.ok
        return results

    def to_json(self) -> JSONObject:
        """The report's ``log`` member."""
        inclusion = self.inclusion
        if inclusion is None:
            return {"ok": False, "reason": PENDING}
        log: JSONObject = {
            "ok": inclusion.ok,
            "reason": inclusion.reason,
            "index": inclusion.index,
            "tree_size": inclusion.tree_size,
            "origin": inclusion.origin,
        }
        if self.time is not None:
            log["time"] = self.time.to_json()
        if self.quorum is not None:
            quorum = self.quorum
            log["quorum"] = {"ok": quorum.ok, "reason": quorum.reason, "cosigned": dict(quorum.cosigned)}
        if self.consistency is not None:
            consistency = self.consistency
            log["consistency"] = {
                "ok": consistency.ok,
                "reason": consistency.reason,
                "since_size": consistency.since_size,
            }
        return log


def proof_text(receipt: JSONObject, bundle_log: JSONObject | None, base: str | None, client: HttpClient) -> str | None:
    """The tlog-proof: the bundle's (None when it was pending), else the service's (None
    while pending: 409 ``log_pending``)."""
    if bundle_log is not None:
        proof = bundle_log.get("proof")
        return proof if isinstance(proof, str) else None
    if base is None:
        raise LogInputError("the receipt carries no log proof: give --base-url to fetch it")
    url = f"{base}/v1/receipts/{receipt.get('receipt_id')}/log-proof"
    response = _get(client, url)
    if response.status == 409:
        return None
    if response.status != 200:
        raise LogInputError(f"{url} answered HTTP {response.status}")
    return response.text


def _get(client: HttpClient, url: str, params: dict[str, str] | None = None) -> Reply:
    try:
        return client.get(url, params=params)
    except HttpError as exc:
        raise LogInputError(str(exc)) from exc


@dataclass(frozen=True)
class Stamps:
    """The time-stamps to check (a bundle's ``timestamps``) and the roots trusted for them."""

    items: list[JSONValue]
    roots: list[cryptography.x509.Certificate]


def load_tsa_roots(path: str) -> list[cryptography.x509.Certificate]:
    from execution_proof.transparency import timestamps

    try:
        return timestamps.load_roots(Path(path).read_bytes())
    except OSError as exc:
        raise LogInputError(f"cannot read {path}: {exc.strerror}") from exc
    except timestamps.StampError as exc:
        raise LogInputError(f"--tsa-roots: {exc}") from exc


def service_bundle_log(
    receipt: JSONObject, base: str | None, client: HttpClient
) -> tuple[JSONObject, list[JSONValue] | None]:
    """(``log``, ``timestamps``) of the service's bundle of the receipt: its proof is against
    the earliest time-stamped checkpoint covering the receipt that meets the quorum, else
    the newest that meets it, else the newest (checked here like any proof)."""
    if base is None:
        raise LogInputError("give --base-url to fetch the receipt's log proof and time-stamps")
    url = f"{base}/v1/receipts/{receipt.get('receipt_id')}/bundle"
    response = _get(client, url, params={"depth": "0"})
    if response.status != 200:
        raise LogInputError(f"{url} answered HTTP {response.status}")
    try:
        document: JSONValue = orjson.loads(response.body)
    except orjson.JSONDecodeError as exc:
        raise LogInputError(f"{url} did not answer JSON") from exc
    log = document.get("log") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(log, dict):
        raise LogInputError(f"{url} carries no log member: the service runs without a transparency log")
    stamps = document.get("timestamps")
    return log, stamps if isinstance(stamps, list) else None


def check_stamps(stamps: Stamps, checkpoint_text: str, created_at: JSONValue) -> TimeCheck:
    """The report's ``time`` member: each time-stamp checked against the trusted roots over
    the checkpoint's text; ``existed_by`` is the earliest genTime plus accuracy among those
    that verify. A time-stamp that does not verify is reported and not relied on (like a
    cosignature by an unknown key); ``ok`` needs one that does."""
    from execution_proof.transparency import timestamps

    checked: list[StampCheck] = []
    bounds: list[datetime.datetime] = []
    for item in stamps.items:
        named = item.get("tsa") if isinstance(item, dict) else None
        tsa = named if isinstance(named, str) else None
        try:
            raw = item.get("response_base64") if isinstance(item, dict) else None
            if not isinstance(raw, str):
                raise timestamps.StampError("no response_base64")
            der = base64.b64decode(raw, validate=True)
            stamp = timestamps.verify_token(der, checkpoint_text, stamps.roots)
        except (binascii.Error, timestamps.StampError) as exc:
            checked.append(StampCheck(tsa, False, str(exc)))
        else:
            bounds.append(stamp.existed_by)
            said = f"time-stamped by {stamp.tsa_name} at {_iso(stamp.gen_time)} (accuracy {stamp.accuracy_s:g} s)"
            checked.append(StampCheck(tsa, True, said, _iso(stamp.gen_time), stamp.accuracy_s, stamp.tsa_name))
    if not bounds:
        reason = (
            "no time-stamp of the proof's checkpoint verifies against --tsa-roots"
            if checked
            else "the proof's checkpoint has no time-stamps yet (the service stamps every LOG_TSA_INTERVAL_S): "
            "fetch the bundle again later"
        )
        return TimeCheck(False, reason, None, tuple(checked))
    existed_by = min(bounds)
    reason = f"the receipt existed by {_iso(existed_by)} (RFC 3161, the checkpoint that holds it)"
    issued = _parse_time(created_at)
    if issued is not None and issued > existed_by:
        reason += f"; its created_at {created_at} is LATER than that: the service's clock was ahead"
    return TimeCheck(True, reason, _iso(existed_by), tuple(checked))


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(value: JSONValue) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def env_skew() -> int:
    """``LOG_COSIGNATURE_SKEW_S`` as the service reads it (the same quorum everywhere)."""
    try:
        return cosignature_skew(os.environ)
    except PolicyError as exc:
        raise LogInputError(str(exc)) from exc


def load_policy(path: str) -> Policy:
    try:
        return parse_policy(Path(path).read_bytes())  # octets: tlog-policy's names are opaque
    except OSError as exc:
        raise LogInputError(f"cannot read {path}: {exc}") from exc
    except PolicyError as exc:
        raise LogInputError(f"--log-policy {path}: {exc}") from exc


def pinned_log(
    log_key: str | None,
    log_policy: str | None,
    tsa_roots: str | None,
    trust: TrustRoot | None,
    trust_path: str | None,
) -> tuple[note.Verifier, Policy | None, list[cryptography.x509.Certificate] | None]:
    """(the log key, the witness policy, the TSA roots) to check against: each option given
    (``--log-key``, ``--log-policy``, ``--tsa-roots``), else the trust root's."""
    policy = load_policy(log_policy) if log_policy else None
    roots = load_tsa_roots(tsa_roots) if tsa_roots else None
    trusted_key = None
    if trust is not None:
        try:  # parse_trust_root has checked these; a failure here is still a malformed file
            policy = policy if log_policy else trust.policy()
            roots = roots if tsa_roots else (trust.tsa_roots() or None)
            trusted_key = trust.log_verifier()
        except ValueError as exc:
            raise LogInputError(f"the trust root {trust_path}: {exc}") from exc
    if log_key is not None:
        return parse_log_key(log_key), policy, roots
    if log_policy and policy is not None:
        try:
            return policy.log_key(), policy, roots
        except PolicyError as exc:
            raise LogInputError(f"--log-policy: {exc}") from exc
    if trusted_key is None:
        raise LogInputError("--since-checkpoint and --tsa-roots need --log-key or --log-policy (the log's key to pin)")
    return trusted_key, policy, roots


def check(
    receipt: JSONObject,
    bundle_log: JSONObject | None,
    log_key: note.Verifier,
    since_path: str | None,
    base: str | None,
    client: HttpClient,
    policy: Policy | None = None,
    stamps: Stamps | None = None,
    *,
    inclusion: log_check.LogInclusion | None = None,
) -> LogCheck:
    """The receipt against the log: the bundle's proof (``bundle_log``), else the service's;
    ``inclusion``: already checked (a Sigstore bundle's entry, receipts/attestation_checks.py),
    to which the quorum and consistency checks are added."""
    if inclusion is None:
        text = proof_text(receipt, bundle_log, base, client)
        if text is None:
            return LogCheck(None)
        inclusion = log_check.check_inclusion(receipt, text, log_key)
    moment: TimeCheck | None = None
    quorum: QuorumCheck | None = None
    consistency: ConsistencyCheck | None = None
    if stamps is not None:
        moment = TimeCheck(False, "no checkpoint to time: the log proof did not check")
        if inclusion.checkpoint is not None:
            moment = check_stamps(stamps, inclusion.checkpoint_text, receipt.get("created_at"))
    if policy is not None:
        quorum = check_quorum(inclusion.checkpoint_note, policy, int(time.time()), env_skew())
    if since_path is not None:
        older_text = _read(since_path)
        try:
            older, _ = note.open_checkpoint(older_text, log_key)
        except note.NoteError as exc:
            raise LogInputError(f"--since-checkpoint: {exc}") from exc
        newer = inclusion.checkpoint
        if newer is None or base is None:
            raise LogInputError("--since-checkpoint needs a log proof and --base-url (the tiles are read from it)")
        kept_size = older.size
        if older.size > newer.size:  # a bundle's proof may be against an older, time-stamped checkpoint
            older, newer = newer, older
        proof = consistency_proof(base, older.size, newer.size, client)
        consistency = ConsistencyCheck(*log_check.check_consistency(older, newer, proof), since_size=kept_size)
    return LogCheck(inclusion, moment, quorum, consistency)


def http_fetch(client: HttpClient, prefix: str) -> Fetch:
    """Reads a log's resources (``checkpoint``, tiles, bundles) over HTTP under ``prefix``:
    the service's ``/v1/log/``, or a static copy of the log store behind any web server.
    A 404 is "not there" (None); any other failure is ``LogInputError``. The request is made
    synchronously: the reader's concurrent reads then run one after another on the one
    client (an ``HttpClient`` is used by one thread at a time)."""

    async def fetch(path: str) -> bytes | None:
        url = prefix + path
        response = _get(client, url)
        if response.status == 404:
            return None
        if response.status != 200:
            raise LogInputError(f"{url} answered HTTP {response.status}")
        return response.body

    return fetch


def consistency_proof(base: str, old_size: int, size: int, client: HttpClient) -> list[bytes]:
    """The consistency proof from ``old_size`` to ``size``, computed here from the tiles the
    service serves (the service is not asked for a proof, and not trusted for one)."""
    if old_size == 0 or old_size >= size:
        return []
    reader = TileReader(http_fetch(client, f"{base}/v1/log/"))
    try:
        return asyncio.run(reader.compute(size, lambda view: view.consistency_proof(old_size)))
    except (TileMissing, tlog.ProofError) as exc:
        raise LogInputError(f"the log's tiles are unusable: {exc}") from exc


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogInputError(f"cannot read {path}: {exc}") from exc
