"""Creating a receipt: the walk of ``POST /v1/receipts`` below the web layer, in one call.

The handler reads the request into plain values (the caller, the body's media type and
bytes, the ``Idempotency-Key`` header, the seconds of ``Prefer: wait``), calls
``Creator.create`` once and renders the ``Created`` it returns. In between: the key and
the address's limits (usecases/limiting.py: one round trip on a plain Redis), the body
parsed and checked (receipts/model.py), the issue (usecases/issuing.py: one script call per
group commit) and the receipt's ``log`` member (usecases/log_reading.py).

The key and the address come first, the body after (docs/limits.md): a request refused for
its key or its address costs no parse and no content scan of its body. The request is
counted in the same round trip as the key lookup; one then refused for its body, its claims
or its header is refunded, so it uses up nothing (the extra round trip is on that refused
path only).
"""

from __future__ import annotations

from dataclasses import dataclass

from execution_proof.kv.records import KeyRecord
from execution_proof.receipts.errors import Forbidden, ServiceError
from execution_proof.receipts.limits import Usage
from execution_proof.receipts.model import CreateRequest, check_idempotency_header, parse_create_request
from execution_proof.receipts.shapes import JSONObject
from execution_proof.usecases.bodies import json_object
from execution_proof.usecases.issuing import Issued, ReceiptIssuer
from execution_proof.usecases.limiting import Caller, Limiter, naming
from execution_proof.usecases.log_reading import LogService
from execution_proof.usecases.signing_keys import ReceiptKeys


@dataclass(frozen=True, slots=True)
class Created:
    """What the create's answer is made of: the receipt (new or replayed), the caller (naming
    the key), the key that asked, the address's usage and the ``log`` member (None when the
    service has no log)."""

    issued: Issued
    caller: Caller
    key: KeyRecord
    ip_usage: Usage
    log: JSONObject | None


class Creator:
    """Creates receipts: admission, parsing, issuing and the log member, in one call."""

    def __init__(self, limiter: Limiter, issuer: ReceiptIssuer, keys: ReceiptKeys, log: LogService | None) -> None:
        self.limiter = limiter
        self.issuer = issuer
        self.keys = keys
        self.log = log

    async def create(
        self,
        caller: Caller,
        content_type: str | None,
        body: bytes,
        idempotency_key: str | None,
        wait_s: float = 0.0,
    ) -> Created:
        """Issue (or replay) the receipt a create asks for: ``content_type``, ``body`` and
        ``idempotency_key`` as sent (None: the header is absent), ``wait_s`` the seconds of
        ``Prefer: wait`` for the receipt's log proof. Raises, in this order:
        ``SigningKeyUnavailable``; ``RateLimited``, ``Unauthorized`` or ``Forbidden`` (a
        suspended project) for the key and the address; ``UnsupportedMediaType`` and
        ``BadRequest`` for the body, ``Forbidden`` for a claimed ``project_id``/``actor_id``
        that is not the key's, ``BadRequest`` for ``Idempotency-Key`` (the address's count
        refunded for these); then what ``ReceiptIssuer.issue`` raises."""
        self.keys.signing(self.issuer.clock_ms())

        async def checks(key: KeyRecord) -> tuple[CreateRequest, str | None]:
            req = parse_create_request(json_object(content_type, body))
            if req.claimed_project_id is not None and req.claimed_project_id != key.project_id:
                raise Forbidden("project_id does not match the API key's project", {"field": "project_id"})
            if req.claimed_actor_id is not None and req.claimed_actor_id != key.actor_id:
                raise Forbidden("actor_id does not match the API key's actor", {"field": "actor_id"})
            return req, check_idempotency_header(idempotency_key)

        admission = await self.limiter.admit(caller, "authenticated", key=True, checks=checks)
        key, ip_usage, checked = admission.key, admission.ip, admission.checked
        assert key is not None
        assert ip_usage is not None
        assert checked is not None
        req, header_key = checked
        try:
            issued = await self.issuer.issue(req, key, header_key, self.limiter.limits.plan(key.plan))
            log = None
            if self.log is not None:  # a wait is asked for rarely: without one, no await
                log = (
                    await self.log.create_member(issued.receipt, wait_s)
                    if wait_s > 0
                    else self.log.pending_member(issued.receipt)
                )
        except ServiceError as error:
            raise naming(error, key) from None
        return Created(issued, admission.caller, key, ip_usage, log)
