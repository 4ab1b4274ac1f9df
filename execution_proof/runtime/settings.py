"""Settings from the environment (README.md, "Configuration"), parsed once at start-up."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit

from execution_proof.errors import Error
from execution_proof.receipts.limits import Limits, LimitsError, load_limits
from execution_proof.runtime.failpoints import Failpoints, FailpointsError
from execution_proof.runtime.logs import json_logging
from execution_proof.runtime.store_ack import NO_ACK, StoreAck, StoreAckError, parse_store_ack
from execution_proof.transparency.note import NoteError, Signer
from execution_proof.transparency.policy import COSIGNATURE_SKEW_S, Policy, PolicyError, cosignature_skew, parse_policy
from execution_proof.transparency.signer import redact, scheme_of
from execution_proof.transparency.timestamps import StampError, load_roots

DEFAULT_HUMAN_CHECK_VERIFY_URL = "https://challenges.cloudflare.com/turnstile/v0/siteverify"
DEFAULT_HUMAN_CHECK_SCRIPT_URL = "https://challenges.cloudflare.com/turnstile/v0/api.js"
DEFAULT_OPERATOR_CONTACT = "the operator (OPERATOR_CONTACT is not set)"
DEFAULT_METRICS_HOST = "127.0.0.1"
LOG_FORMATS = ("json", "text")
DEFAULT_LOG_ORIGIN = "localhost/v1/log"
DEFAULT_LOG_MAX_PENDING = 100_000
DEFAULT_LOG_STALL_S = 30.0
DEFAULT_RECEIPT_KEY_LIFETIME_S = 86_400
RECEIPT_KEY_LIFETIME_RANGE_S = (30, 604_800)


@dataclass(frozen=True)
class ClientIpConfig:
    """Which client a request counts as (``web.client_ip``): a trusted proxy header
    (``REAL_IP_HEADER``), or ``X-Forwarded-For`` with ``PROXIES_COUNT`` trusted proxies."""

    real_ip_header: str | None = None
    proxies_count: int = 0


class ConfigError(Error, ValueError):
    """A setting is malformed; the message names the variable (never a secret value)."""


class LogSettings(TypedDict, total=False):
    """The transparency log's fields of ``Settings`` that the environment set (the rest keep
    their defaults): what ``_log_settings`` and its helpers read."""

    log_origin: str
    log_store: str | None
    log_cosignature_skew_s: int
    log_max_pending: int
    log_stall_s: float
    log_failpoints: Failpoints
    log_public_url: str
    log_signer: Signer
    log_ephemeral: bool
    log_witness_timeout_ms: int
    log_policy: Policy
    log_tsa_urls: tuple[str, ...]
    log_tsa_interval_s: float
    log_tsa_roots: tuple[Any, ...]


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    receipt_root: str | None = None
    """``RECEIPT_ROOT_KEY``: the signer URI of the root that certifies this deployment's
    receipt keys (docs/keys.md); None: an ephemeral root in memory (embedded mode only)."""
    receipt_key_lifetime_s: int = DEFAULT_RECEIPT_KEY_LIFETIME_S
    """``RECEIPT_KEY_LIFETIME``: how long a receipt key's certificate lasts; renewed from half."""
    public_base_url: str | None = None
    env: str = "development"
    limits: Limits = field(default_factory=lambda: load_limits(None))
    client_ip: ClientIpConfig = field(default_factory=ClientIpConfig)
    jobs_redis_url: str | None = None
    retention_days: float = 180.0
    payment_webhook_secrets: tuple[str, ...] = ()
    claim_window_days: float = 7.0
    human_check_secret: str | None = None
    human_check_verify_url: str = DEFAULT_HUMAN_CHECK_VERIFY_URL
    human_check_site_key: str | None = None
    human_check_script_url: str = DEFAULT_HUMAN_CHECK_SCRIPT_URL
    operator_contact: str = DEFAULT_OPERATOR_CONTACT
    store_ack: StoreAck = NO_ACK
    """``STORE_ACK``: what a create waits for after its write (docs/redis.md)."""
    redis_cluster: bool = False
    """``REDIS_CLUSTER=true``: ``REDIS_URL`` names a Redis Cluster node (docs/cluster.md)."""
    metrics_port: int | None = None
    """``METRICS_PORT``: a separate plain-HTTP listener for ``GET /metrics`` (docs/observability.md)."""
    metrics_host: str = DEFAULT_METRICS_HOST
    metrics_token: str | None = None
    """``METRICS_TOKEN``: ``GET /metrics`` on the main port with this bearer token; unset: 404."""
    log_format: str = "text"
    """``LOG_FORMAT``: ``json`` (one object per line) or ``text``."""
    log_origin: str = DEFAULT_LOG_ORIGIN
    """``LOG_ORIGIN``: the transparency log's origin line and key name (docs/log.md)."""
    log_signer: Signer | None = None
    """``LOG_SIGNING_KEY`` (or an ephemeral key in embedded mode); None: no log."""
    log_ephemeral: bool = False
    log_policy: Policy | None = None
    """``LOG_WITNESS_POLICY``: a C2SP tlog-policy file naming the witnesses (docs/log.md)."""
    log_witness_timeout_ms: int = 1000
    """``LOG_WITNESS_TIMEOUT_MS``: how long a checkpoint waits for cosignatures."""
    log_cosignature_skew_s: int = COSIGNATURE_SKEW_S
    """``LOG_COSIGNATURE_SKEW_S``: how far ahead of this clock a cosignature's time may be
    and still count towards the quorum."""
    log_tsa_urls: tuple[str, ...] = ()
    """``LOG_TSA_URLS``: RFC 3161 time-stamp authorities, comma-separated (docs/log.md)."""
    log_tsa_interval_s: float = 60.0
    """``LOG_TSA_INTERVAL_S``: at most one time-stamp round per this many seconds."""
    log_tsa_roots: tuple[Any, ...] = ()
    """``LOG_TSA_ROOTS``: a PEM file of the TSAs' roots; responses must verify against them."""
    log_store: str | None = None
    """``LOG_STORE``: where the log lives (``file:///PATH``, ``s3://BUCKET/PREFIX``); None: in
    memory (embedded mode only)."""
    log_max_pending: int = DEFAULT_LOG_MAX_PENDING
    """``LOG_MAX_PENDING``: entries that may wait for the log before creates answer 503."""
    log_public_url: str | None = None
    """``LOG_PUBLIC_URL``: where outsiders read the tiles; None: ``/v1/log/`` where asked."""
    log_stall_s: float = DEFAULT_LOG_STALL_S
    """``LOG_STALL_S``: ``/health`` says the log is ``stalled`` when entries wait (or the tree is
    ahead of the published checkpoint) and nothing was published for this long."""
    log_failpoints: Failpoints | None = None
    """``LOG_FAILPOINTS``: the integrator's fault points (runtime/failpoints.py), for fault
    tests and drills; never set in production."""

    @property
    def embedded(self) -> bool:
        return not self.redis_url

    @property
    def metrics_exposed(self) -> bool:
        """Whether anything serves the metrics (a metrics port or the token route)."""
        return self.metrics_port is not None or self.metrics_token is not None


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the environment. Raises ``ConfigError`` for malformed values.

    ``SIGNING_KEYS`` is retired (refused, naming ``RECEIPT_ROOT_KEY``). Without ``REDIS_URL``
    and ``RECEIPT_ROOT_KEY`` an ephemeral root is made at start (demo mode); with ``REDIS_URL``
    the server refuses to start without a root (``require_receipt_root``).
    """
    env = os.environ if environ is None else environ
    redis_url = env.get("REDIS_URL") or None
    if env.get("SIGNING_KEYS"):
        raise ConfigError(
            "SIGNING_KEYS is retired: set RECEIPT_ROOT_KEY to the signer URI of a receipt root "
            "(python service.py signing-key root new --signer URI; docs/keys.md)"
        )
    try:
        limits = load_limits(env.get("LIMITS"))
    except LimitsError as exc:
        raise ConfigError(str(exc)) from exc
    proxies = env.get("PROXIES_COUNT") or "0"
    if not proxies.isdigit():
        raise ConfigError("PROXIES_COUNT must be a whole number (trusted proxies in front of the service)")
    client_ip = ClientIpConfig(real_ip_header=env.get("REAL_IP_HEADER") or None, proxies_count=int(proxies))
    retention_days = _positive_number(env, "RETENTION_DAYS", 180.0)
    claim_window_days = _positive_number(env, "CLAIM_WINDOW_DAYS", 7.0)
    secrets = tuple(part.strip() for part in (env.get("PAYMENT_WEBHOOK_SECRET") or "").split(",") if part.strip())
    base = (env.get("PUBLIC_BASE_URL") or "").rstrip("/") or None
    default_env = "embedded" if not redis_url else "production"
    store_ack = _store_ack(env, redis_url)
    redis_cluster = _redis_cluster(env, redis_url)
    return Settings(
        redis_url=redis_url,
        receipt_root=_receipt_root(env),
        receipt_key_lifetime_s=_receipt_key_lifetime(env),
        public_base_url=base,
        env=env.get("SERVICE_ENV") or default_env,
        limits=limits,
        client_ip=client_ip,
        jobs_redis_url=env.get("JOBS_REDIS_URL") or redis_url,
        redis_cluster=redis_cluster,
        retention_days=retention_days,
        payment_webhook_secrets=secrets,
        claim_window_days=claim_window_days,
        human_check_secret=env.get("HUMAN_CHECK_SECRET") or None,
        human_check_verify_url=env.get("HUMAN_CHECK_VERIFY_URL") or DEFAULT_HUMAN_CHECK_VERIFY_URL,
        human_check_site_key=env.get("HUMAN_CHECK_SITE_KEY") or None,
        human_check_script_url=env.get("HUMAN_CHECK_SCRIPT_URL") or DEFAULT_HUMAN_CHECK_SCRIPT_URL,
        operator_contact=env.get("OPERATOR_CONTACT") or DEFAULT_OPERATOR_CONTACT,
        store_ack=store_ack,
        metrics_port=_metrics_port(env),
        metrics_host=env.get("METRICS_HOST") or DEFAULT_METRICS_HOST,
        metrics_token=env.get("METRICS_TOKEN") or None,
        log_format=_log_format(env, redis_url),
        **_log_settings(env, redis_url),
    )


def _receipt_root(env: Mapping[str, str]) -> str | None:
    uri = (env.get("RECEIPT_ROOT_KEY") or "").strip()
    if not uri:
        return None
    if not scheme_of(uri):
        raise ConfigError(
            f"RECEIPT_ROOT_KEY: {redact(uri)[:80] if ':' in uri else 'the value'} is not a signer URI "
            "(file:/PATH, env:NAME, pkcs11:..., plugin:NAME; docs/keys.md)"
        )
    return uri


def _receipt_key_lifetime(env: Mapping[str, str]) -> int:
    raw = (env.get("RECEIPT_KEY_LIFETIME") or "").strip()
    if not raw:
        return DEFAULT_RECEIPT_KEY_LIFETIME_S
    low, high = RECEIPT_KEY_LIFETIME_RANGE_S
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ConfigError(f"RECEIPT_KEY_LIFETIME must be whole seconds from {low} to {high}")
    return int(raw)


def require_receipt_root(settings: Settings) -> None:
    """The server's check: with ``REDIS_URL`` a receipt root is required (``ConfigError``)."""
    if not settings.embedded and settings.receipt_root is None:
        raise ConfigError(
            "RECEIPT_ROOT_KEY is not set: with REDIS_URL the server needs the receipt root that "
            "certifies its keys (python service.py signing-key root new --signer URI; docs/keys.md)"
        )


def default_log_origin(env: Mapping[str, str]) -> str:
    """``LOG_ORIGIN``, else ``PUBLIC_BASE_URL`` without its scheme (host, port, path)
    followed by ``/v1/log``: the schema-less URL of the log's prefix, as tlog-tiles asks;
    ``localhost/v1/log`` without either."""
    origin = (env.get("LOG_ORIGIN") or "").strip()
    if origin:
        return origin
    base = urlsplit((env.get("PUBLIC_BASE_URL") or "").strip())
    host = base.netloc.rpartition("@")[2]
    return f"{host}{base.path.rstrip('/')}/v1/log" if host else DEFAULT_LOG_ORIGIN


def require_log_store(settings: Settings) -> None:
    """The server's and the worker's check of where the log lives; ``ConfigError`` naming the
    variables: with ``REDIS_URL`` and a log key, the log needs ``LOG_STORE`` (it is never kept
    in Redis); in embedded mode, a ``LOG_STORE`` kept across restarts needs ``LOG_SIGNING_KEY``
    (the demo's ephemeral key would not match the store's identity on the next start)."""
    if not settings.embedded and settings.log_signer is not None and settings.log_store is None:
        raise ConfigError(
            "LOG_STORE is not set: with REDIS_URL and LOG_SIGNING_KEY the transparency log lives in a log store, "
            "file:///ABSOLUTE/PATH (one machine or one shared POSIX filesystem) or s3://BUCKET/PREFIX (docs/log.md)"
        )
    if settings.embedded and settings.log_ephemeral and settings.log_store is not None:
        raise ConfigError(
            f"LOG_STORE is set ({settings.log_store}) but LOG_SIGNING_KEY is not: a log kept across restarts needs "
            "its own key (the demo's ephemeral key would not match the store on the next start); set "
            "LOG_SIGNING_KEY (python service.py log-key new), or unset LOG_STORE for a log in memory"
        )


@dataclass(frozen=True)
class LogStoreSettings:
    log_store: str | None
    log_format: str


def load_log_store_settings(environ: Mapping[str, str] | None = None) -> LogStoreSettings:
    """What the operator's ``log`` verbs (``resume``, ``export``) read, and nothing more:
    ``LOG_STORE`` and ``LOG_FORMAT``. They touch the log store alone, so they run without
    ``REDIS_URL`` or the log's private key, and a setting the service would refuse for another
    reason never keeps an operator from lifting a halt or moving the log."""
    env = os.environ if environ is None else environ
    return LogStoreSettings(_log_store(env), _log_format(env, env.get("REDIS_URL") or None))


def _log_settings(env: Mapping[str, str], redis_url: str | None) -> LogSettings:
    """``LOG_ORIGIN`` (default: ``default_log_origin``) and ``LOG_SIGNING_KEY`` (a
    ``PRIVATE+KEY+…`` key, or a signer URI: runtime/signers.py), whose key name must be the
    origin, and where the log lives and is read (``LOG_STORE`` and friends).
    Without a key the embedded mode makes an ephemeral one; with ``REDIS_URL`` the service
    runs without a log."""
    origin = default_log_origin(env)
    if any(c.isspace() or c == "+" for c in origin):
        raise ConfigError("LOG_ORIGIN must hold no spaces and no '+' (a schema-less URL such as example.com/v1/log)")
    store = _log_store(env)
    try:
        skew = cosignature_skew(env)
    except PolicyError as exc:
        raise ConfigError(str(exc)) from exc
    settings = _log_serving(env)
    settings["log_origin"], settings["log_store"], settings["log_cosignature_skew_s"] = origin, store, skew
    raw = (env.get("LOG_SIGNING_KEY") or "").strip()
    if not raw:
        if redis_url:
            return settings
        settings["log_signer"], settings["log_ephemeral"] = Signer.generate(origin), True
        settings.update(_tsa_settings(env))
        return settings
    from execution_proof.runtime.signers import open_named
    from execution_proof.transparency.signer import SignerError

    try:
        # A key in a token or behind a plugin is named by the origin. Its public key is read
        # here through a session closed at once: the signing session opens at the first
        # signature, in the process and thread that sign (runtime/pkcs11_signer.py).
        signer = open_named(raw, origin, parse_key=Signer.parse, wrap=Signer, environ=env)
    except (NoteError, SignerError) as exc:
        raise ConfigError(f"LOG_SIGNING_KEY: {exc} (make one with: python service.py log-key new)") from exc
    if signer.name != origin:
        raise ConfigError(
            f"LOG_SIGNING_KEY is the key of {signer.name!r} but the log's origin is {origin!r}: set LOG_ORIGIN "
            f"to it, or make a key for this origin (python service.py log-key new --origin {origin})"
        )
    settings["log_signer"] = signer
    settings.update(_witness_settings(env))
    settings.update(_tsa_settings(env))
    return settings


def _log_store(env: Mapping[str, str]) -> str | None:
    """``LOG_STORE``, checked for its form (kv/logstore opens it)."""
    raw = (env.get("LOG_STORE") or "").strip()
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return raw
    if parts.scheme == "s3" and parts.netloc and not parts.query and not parts.fragment:
        return raw
    raise ConfigError("LOG_STORE must be file:///ABSOLUTE/PATH or s3://BUCKET/PREFIX")


def _log_serving(env: Mapping[str, str]) -> LogSettings:
    """``LOG_MAX_PENDING``, ``LOG_STALL_S``, ``LOG_FAILPOINTS`` and ``LOG_PUBLIC_URL`` (default
    ``PUBLIC_BASE_URL`` + ``/v1/log/``)."""
    settings: LogSettings = {}
    raw = (env.get("LOG_MAX_PENDING") or "").strip()
    if raw:
        if not raw.isdigit() or not 0 < int(raw) <= 10**12:
            raise ConfigError("LOG_MAX_PENDING must be a whole number of entries, at least 1")
        settings["log_max_pending"] = int(raw)
    stall = (env.get("LOG_STALL_S") or "").strip()
    if stall:
        try:
            seconds = float(stall)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds <= 86_400:
            raise ConfigError("LOG_STALL_S must be seconds, more than 0 and at most 86400")
        settings["log_stall_s"] = seconds
    try:
        failpoints = Failpoints.parse(env.get("LOG_FAILPOINTS") or "")
    except FailpointsError as exc:
        raise ConfigError(f"LOG_FAILPOINTS: {exc}") from exc
    if failpoints is not None:
        settings["log_failpoints"] = failpoints
    public = (env.get("LOG_PUBLIC_URL") or "").strip()
    base = (env.get("PUBLIC_BASE_URL") or "").strip().rstrip("/")
    if public:
        parts = urlsplit(public)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError("LOG_PUBLIC_URL must be an http(s) URL (where outsiders read the log's tiles)")
        settings["log_public_url"] = public if public.endswith("/") else public + "/"
    elif base:
        settings["log_public_url"] = base + "/v1/log/"
    return settings


def _witness_settings(env: Mapping[str, str]) -> LogSettings:
    settings: LogSettings = {}
    raw = (env.get("LOG_WITNESS_TIMEOUT_MS") or "").strip()
    if raw:
        if not raw.isdigit() or not 0 < int(raw) <= 60_000:
            raise ConfigError("LOG_WITNESS_TIMEOUT_MS must be milliseconds, 1 to 60000")
        settings["log_witness_timeout_ms"] = int(raw)
    path = (env.get("LOG_WITNESS_POLICY") or "").strip()
    if path:
        try:
            settings["log_policy"] = parse_policy(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"LOG_WITNESS_POLICY: cannot read {path}: {exc}") from exc
        except PolicyError as exc:
            raise ConfigError(f"LOG_WITNESS_POLICY {path}: {exc}") from exc
    return settings


def _tsa_settings(env: Mapping[str, str]) -> LogSettings:
    settings: LogSettings = {}
    urls = tuple(u.strip() for u in (env.get("LOG_TSA_URLS") or "").split(",") if u.strip())
    for url in urls:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ConfigError(f"LOG_TSA_URLS: {url!r} is not an http(s) URL of an RFC 3161 time-stamp authority")
    if urls:
        settings["log_tsa_urls"] = urls
    raw = (env.get("LOG_TSA_INTERVAL_S") or "").strip()
    if raw:
        try:
            interval = float(raw)
        except ValueError:
            interval = 0.0
        if not 1 <= interval <= 86400:
            raise ConfigError("LOG_TSA_INTERVAL_S must be seconds, 1 to 86400")
        settings["log_tsa_interval_s"] = interval
    path = (env.get("LOG_TSA_ROOTS") or "").strip()
    if path:
        try:
            settings["log_tsa_roots"] = tuple(load_roots(Path(path).read_bytes()))
        except OSError as exc:
            raise ConfigError(f"LOG_TSA_ROOTS: cannot read {path}: {exc}") from exc
        except StampError as exc:
            raise ConfigError(f"LOG_TSA_ROOTS: {exc}") from exc
    return settings


def _metrics_port(env: Mapping[str, str]) -> int | None:
    raw = (env.get("METRICS_PORT") or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError("METRICS_PORT must be a TCP port number (1-65535), or unset for no metrics listener")
    return int(raw)


def _log_format(env: Mapping[str, str], redis_url: str | None) -> str:
    """``LOG_FORMAT``: json by default in production (``REDIS_URL`` set), text for the demo."""
    raw = (env.get("LOG_FORMAT") or "").strip().lower()
    if not raw:
        return "json" if redis_url else "text"
    if raw not in LOG_FORMATS:
        raise ConfigError("LOG_FORMAT must be json or text")
    return raw


CLUSTER_NEEDS_JOBS_REDIS = (
    "REDIS_CLUSTER=true needs JOBS_REDIS_URL: the job queue (RQ) cannot run on a Redis Cluster, "
    "so point JOBS_REDIS_URL at a plain, non-cluster Redis (see docs/cluster.md)"
)


def _redis_cluster(env: Mapping[str, str], redis_url: str | None) -> bool:
    """``REDIS_CLUSTER``: true/false (also 1/0, yes/no). A cluster needs ``REDIS_URL`` (one of
    its nodes) and ``JOBS_REDIS_URL`` (a plain Redis: the queue never defaults to the cluster)."""
    raw = (env.get("REDIS_CLUSTER") or "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw not in ("1", "true", "yes"):
        raise ConfigError("REDIS_CLUSTER must be true or false")
    if not redis_url:
        raise ConfigError("REDIS_CLUSTER=true needs REDIS_URL (any node of the cluster, e.g. redis://10.0.0.1:6379)")
    if not env.get("JOBS_REDIS_URL"):
        raise ConfigError(CLUSTER_NEEDS_JOBS_REDIS)
    return True


def _store_ack(env: Mapping[str, str], redis_url: str | None) -> StoreAck:
    try:
        ack = parse_store_ack(env.get("STORE_ACK"))
    except StoreAckError as exc:
        raise ConfigError(str(exc)) from exc
    if ack.enabled and not redis_url:
        raise ConfigError("STORE_ACK needs REDIS_URL (the embedded store has no replicas and no AOF)")
    if ack.enabled and (env.get("REDIS_CLUSTER") or "").strip().lower() in ("1", "true", "yes"):
        raise ConfigError("STORE_ACK is not supported with REDIS_CLUSTER yet; use none")
    return ack


def _positive_number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number of days, such as 180 or 0.0001") from exc
    if not value > 0 or value != value or value == float("inf"):
        raise ConfigError(f"{name} must be a positive number of days")
    return value


def warn(message: str) -> None:
    """Operator-facing warnings go to stderr (a JSON log record under ``LOG_FORMAT=json``),
    never with secret values."""
    if json_logging():
        logging.getLogger("eps").warning(message)
        return
    print(f"WARNING: {message}", file=sys.stderr, flush=True)
