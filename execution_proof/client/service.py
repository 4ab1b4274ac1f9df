"""``Client``: the service's API as a Python program uses it (docs/python-api.md): submit hashes,
read a receipt, fetch its offline bundle or its attestation (waiting for the log proof), fetch
the trust root.

Replies that are not a success raise the server's own error class for their code
(``receipts.errors.from_reply``): a 409 ``log_pending`` is ``ProofPending``, a 401 is
``Unauthorized``, a code this version does not know is a ``ServiceError`` with the reply's
status and code. No reply at all is ``Unreachable``; a bad argument ``InvalidInput``,
raised before anything is sent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import quote

import orjson

from execution_proof.client import http
from execution_proof.client.hashing import HashSource, fresh_salt, hash_source, is_given_hash
from execution_proof.client.models import Attestation, Bundle, Receipt
from execution_proof.receipts import errors

if TYPE_CHECKING:
    from execution_proof.receipts.shapes import JSONObject, JSONValue
    from execution_proof.receipts.trust_root import TrustRoot

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0
POLL_S = 1.0
"""How often ``bundle(wait=...)`` asks again while the proof is pending (the service's
``Retry-After`` for ``log_pending`` is 1 s)."""
HASHES = (("input", "input_hash"), ("output", "output_hash"), ("params", "params_hash"), ("env", "env_hash"))


def base_url_from(explicit: str | None) -> str:
    """``explicit``, else ``SERVICE_BASE_URL``, else the default, without a trailing slash."""
    for candidate in (explicit, os.environ.get("SERVICE_BASE_URL")):
        if candidate and candidate.strip():
            return candidate.strip().rstrip("/")
    return DEFAULT_BASE_URL


class Client:
    """One service. ``base_url`` defaults to ``SERVICE_BASE_URL`` (else
    ``http://127.0.0.1:8000``), ``api_key`` to ``SERVICE_API_KEY`` (needed by ``submit``
    only). Connections are kept alive; ``close`` (or ``with``) ends them. One thread at a
    time."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0) -> None:
        self.base_url = base_url_from(base_url)
        key = api_key if api_key is not None else os.environ.get("SERVICE_API_KEY", "")
        self._api_key = key.strip() or None
        self._http = http.HttpClient(timeout=timeout)

    def __repr__(self) -> str:  # never the key
        return f"Client({self.base_url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- the API

    def submit(
        self,
        *,
        input: HashSource,
        output: HashSource | None = None,
        params: HashSource | None = None,
        env: HashSource | None = None,
        tags: Mapping[str, str] | None = None,
        code_ref: str | None = None,
        run_id: str | None = None,
        receipt_kind: str | None = None,
        salt: bool = False,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """Ask for a receipt. Each hash: a path or bytes hashed here (with ``salt``, after a
        fresh 16-byte salt of its own, kept in the receipt's ``salts`` and never sent), or a
        ``"sha256:<hex>"`` string as it is. The receipt comes back with ``service_url``;
        ``Receipt.save`` keeps it."""
        if self._api_key is None:
            raise errors.InvalidInput("no API key: give api_key or set SERVICE_API_KEY")
        body: JSONObject = {}
        salts: dict[str, str] = {}
        for (name, field), source in zip(HASHES, (input, output, params, env), strict=True):
            if source is None:
                continue
            fresh = fresh_salt() if salt and not is_given_hash(source) else None
            body[field] = hash_source(source, salt=fresh)
            if fresh is not None:
                salts[name] = fresh.hex()
        for field, value in (("receipt_kind", receipt_kind), ("code_ref", code_ref), ("run_id", run_id)):
            if value is not None:
                body[field] = value
        if tags:
            body["tags"] = {**tags}
        headers = {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        reply = self._http.post(self.base_url + "/v1/receipts", orjson.dumps(body), headers=headers)
        self._raise_for(reply, (200, 201))
        return Receipt.from_reply(reply.body, self.base_url, salts, replayed=reply.status == 200)

    def get(self, receipt_id: str) -> Receipt:
        """A receipt by id (public: no key needed); ``NotFound`` if the service has none."""
        reply = self._http.get(f"{self.base_url}/v1/receipts/{_segment(receipt_id)}")
        self._raise_for(reply, (200,))
        return Receipt.from_reply(reply.body, self.base_url)

    def bundle(
        self, receipt_id: str, *, wait: float = 0, on_wait: Callable[[float, float], None] | None = None
    ) -> Bundle:
        """The receipt's offline bundle. From a service with a log, its proof: asked again
        every second until one comes or ``wait`` seconds have passed, then ``ProofPending``
        (``errors.ProofPending``). A service without a log: the bundle at once (it carries no
        proof). ``on_wait(waited, wait)`` is called before each new try."""
        if wait < 0:
            raise errors.InvalidInput("wait must be 0 or more seconds")
        started = time.monotonic()
        url = f"{self.base_url}/v1/receipts/{_segment(receipt_id)}/bundle"
        while True:
            reply = self._http.get(url)
            self._raise_for(reply, (200,))
            bundle = Bundle.from_dict(_json(reply), where=url)
            waited = time.monotonic() - started
            if not bundle.pending:
                return bundle
            if waited >= wait:
                raise errors.ProofPending(
                    f"no published checkpoint covers {receipt_id} yet"
                    + (f" (waited {waited:.0f} s)" if wait else "")
                    + ": its bundle has no log proof; ask again later"
                )
            if on_wait is not None:
                on_wait(waited, wait)
            time.sleep(min(POLL_S, wait - waited))

    def attestation(
        self,
        receipt_id: str,
        *,
        sigstore: bool = False,
        wait: float = 0,
        on_wait: Callable[[float, float], None] | None = None,
    ) -> Attestation:
        """The receipt's in-toto attestation (docs/attestations.md): the DSSE envelope, or with
        ``sigstore`` the Sigstore bundle v0.3 whose log entry proves its leaf. From a service
        with a log, the Sigstore bundle comes once a published checkpoint covers the leaf: asked
        again every second until then or until ``wait`` seconds have passed, then
        ``ProofPending``. The envelope, and a service without a log, answer at once.
        ``on_wait(waited, wait)`` is called before each new try."""
        if wait < 0:
            raise errors.InvalidInput("wait must be 0 or more seconds")
        started = time.monotonic()
        url = f"{self.base_url}/v1/receipts/{_segment(receipt_id)}/attestation"
        params = {"format": "sigstore"} if sigstore else None
        while True:
            reply = self._http.get(url, params=params)
            waited = time.monotonic() - started
            try:
                self._raise_for(reply, (200,))
            except errors.ProofPending as exc:
                if waited >= wait:
                    raise errors.ProofPending(
                        f"no published checkpoint covers the attestation of {receipt_id} yet"
                        + (f" (waited {waited:.0f} s)" if wait else "")
                        + ": ask again later"
                    ) from exc
                if on_wait is not None:
                    on_wait(waited, wait)
                time.sleep(min(POLL_S, wait - waited))
                continue
            return Attestation.from_dict(_json(reply), where=reply.url)

    def public_keys(self) -> JSONValue:
        """``GET /v1/public-key``'s body: the service's receipt keys, active and retired, each with
        its certificate, and the ``roots`` and ``revocations`` of a service with receipt roots."""
        reply = self._http.get(self.base_url + "/v1/public-key", headers={"Accept": "application/json"})
        self._raise_for(reply, (200,))
        return _json(reply)

    def log_info(self) -> JSONValue:
        """``GET /v1/log``'s body, None when the service runs no log."""
        reply = self._http.get(self.base_url + "/v1/log", headers={"Accept": "application/json"})
        if reply.status == 404 or (reply.status == 503 and _error_code(reply) == "log_unavailable"):
            return None
        self._raise_for(reply, (200,))
        return _json(reply)

    def trust_root(self, *, tsa_roots: bytes | None = None) -> TrustRoot:
        """The service's trust root (docs/trust-root.md, version 2): its receipt roots and
        revocations (``TrustRootError`` when it publishes no roots), its log's key and
        witness policy, and the TSA roots given (PEM). Compare its fingerprints out of band
        before pinning it."""
        return self.trust_root_and_log(tsa_roots=tsa_roots)[0]

    def trust_root_and_log(self, *, tsa_roots: bytes | None = None) -> tuple[TrustRoot, JSONValue]:
        """``trust_root``, and the ``GET /v1/log`` body it was made from (None: no log), for a
        caller that says how the two differ (``trust-root``'s notes)."""
        from execution_proof.receipts.trust_root import build_trust_root, encode_trust_root, parse_trust_root

        if tsa_roots is not None:
            from execution_proof.receipts.trust_root import pem_roots

            pem_roots(tsa_roots)  # refused before anything is asked of the service
        log = self.log_info()
        document = build_trust_root(self.base_url, self.public_keys(), log, tsa_roots)
        return parse_trust_root(encode_trust_root(document)), log

    # -- replies

    def _raise_for(self, reply: http.Reply, ok: tuple[int, ...]) -> None:
        if reply.status in ok:
            return
        error = _error_member(reply)
        code, message = error.get("code"), error.get("message")
        if not isinstance(code, str) or not isinstance(message, str):
            message = f"{reply.method} {reply.url} answered HTTP {reply.status} without an error body"
            raise errors.ServiceError(message, code="http_error", status=reply.status)
        details = error.get("details")
        refused = errors.from_reply(reply.status, code, message, details if isinstance(details, dict) else None)
        refused.request = f"{reply.method} {reply.url}"
        raise refused


def _segment(receipt_id: str) -> str:
    if not receipt_id or not isinstance(receipt_id, str):
        raise errors.InvalidInput("a receipt id is a non-empty string")
    return quote(receipt_id, safe="")


def _json(reply: http.Reply) -> JSONValue:
    try:
        return reply.json()
    except ValueError as exc:
        raise errors.ServiceError(f"{reply.url} did not answer JSON", code="http_error", status=reply.status) from exc


def _error_member(reply: http.Reply) -> JSONObject:
    try:
        body = reply.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _error_code(reply: http.Reply) -> str:
    code = _error_member(reply).get("code")
    return code if isinstance(code, str) else ""
