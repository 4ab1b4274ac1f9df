"""The floor: the least work each benchmarked route must do, on the same stack.

The ceiling (bench/ceiling.py) only parses and answers JSON. A create, a read or a verify
cannot be cheaper than this app, which does only what every implementation of the API must
do per request, with nothing else around it: no limits, no idempotency, no chain, no
validation, no content scan, no log line, no metrics, no request id, no error handling.

- ``POST /v1/receipts``: parse the body, hash the bearer key (keys are stored hashed),
  build a receipt (two ids, a timestamp), canonical bytes (orjson, sorted keys), SHA-256,
  Ed25519 signature, then the attestation's second signature (the in-toto Statement holding
  the receipt, canonical bytes, the DSSE pre-authentication encoding, Ed25519: every
  implementation signs it at creation and keeps its 64 bytes), one Redis round trip (a script
  that reads the key record and stores the receipt with that signature), answer 201 with the
  receipt.
- ``GET /v1/receipts/<id>``: one Redis round trip (GET), answer 200 with the stored receipt.
- ``POST /v1/verify``: parse the body, hash the bearer key, one Redis round trip (the key
  record and the receipt), parse the receipt, resolve its ``sig_kid`` through the key
  registry (every implementation signs with keys a registry certifies: the receipt's key must
  be listed and valid at its ``created_at``; the floor keeps the registry in memory, as the
  service does between refreshes), recompute its canonical hash, verify its Ed25519
  signature, answer 200.

Redis goes through the service's own pipelined connection (kv/link.py). The floor's ratio
to the ceiling is the best ratio any implementation on this stack and machine can reach:
bench/PROFILE.md ("The floor") compares it with the targets.

``python -m bench.floor --port P --redis-url URL`` (run from the repository root).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import sys
import time
from typing import Any

import orjson
import redis.asyncio as aioredis
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey
from sanic import HTTPResponse, Request, Sanic
from sanic.worker.loader import AppLoader

from execution_proof.kv.link import FastLink, LuaScript

JSON = "application/json"
STORE = """
local project = redis.call('HGET', KEYS[1], 'project_id')
if not project then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
return 1
"""
LOAD = """
return {redis.call('HGET', KEYS[1], 'project_id'), redis.call('GET', KEYS[2])}
"""
KEY_RECORD = "floor:key"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _key_hash(request: Request) -> str:
    token = (request.headers.get("authorization") or "").partition(" ")[2]
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def create_app() -> Sanic[Any, Any]:
    app: Sanic[Any, Any] = Sanic("bench_floor")
    app.config.ACCESS_LOG = False
    app.config.MOTD = False
    signing_key = SigningKey.generate()
    kid = "kid_" + hashlib.sha256(bytes(signing_key.verify_key)).hexdigest()[:16]
    # The key registry as a verifier holds it: kid -> (public key, valid from, valid until).
    registry = {kid: (signing_key.verify_key, "2000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z")}

    @app.before_server_start
    async def connect(app: Sanic[Any, Any]) -> None:
        client = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        link = FastLink.for_client(client)
        assert link is not None, "the floor needs a plain-TCP Redis"
        app.ctx.link = link
        app.ctx.store = LuaScript.register(client, STORE)
        app.ctx.load = LuaScript.register(client, LOAD)
        await link.send("HSET", KEY_RECORD, "project_id", "prj_floor")

    @app.post("/v1/receipts")
    async def create(request: Request) -> HTTPResponse:
        body = orjson.loads(request.body)
        _key_hash(request)
        now = time.time()
        receipt = {
            "receipt_id": "rcpt_" + _b64(os.urandom(16)),
            "project_id": "prj_floor",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".000Z",
            "input_hash": body.get("input_hash"),
            "output_hash": body.get("output_hash"),
            "tags": body.get("tags"),
            "prev_receipt_hash": None,
            "status": "issued",
            "sig_kid": kid,
        }
        receipt_hash = "sha256:" + hashlib.sha256(orjson.dumps(receipt, option=orjson.OPT_SORT_KEYS)).hexdigest()
        receipt["receipt_hash"] = receipt_hash
        receipt["signature"] = _b64(signing_key.sign(receipt_hash.encode()).signature)
        statement = {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "output", "digest": {"sha256": str(receipt["output_hash"])[7:]}}],
            "predicateType": "https://github.com/execution-proof/execution-proof/attestation/receipt/v1",
            "predicate": {"receipt": receipt, "log_origin": None},
        }
        payload = orjson.dumps(statement, option=orjson.OPT_SORT_KEYS)
        pae = b"DSSEv1 28 application/vnd.in-toto+json %d %s" % (len(payload), payload)
        attestation_signature = signing_key.sign(pae).signature
        stored = orjson.dumps(receipt)
        receipt_key = "floor:r:" + receipt["receipt_id"]
        await request.app.ctx.link.run_script(
            request.app.ctx.store, [KEY_RECORD, receipt_key], [stored + attestation_signature]
        )
        return HTTPResponse(b'{"ok":true,"receipt":' + stored + b"}", status=201, content_type=JSON)

    @app.get("/v1/receipts/<receipt_ref:str>")
    async def read(request: Request, receipt_ref: str) -> HTTPResponse:
        stored = await request.app.ctx.link.send("GET", "floor:r:" + receipt_ref)
        if stored is None:
            return HTTPResponse(b'{"error":{"code":"not_found"}}', status=404, content_type=JSON)
        return HTTPResponse(b'{"ok":true,"receipt":' + stored[:-64] + b"}", content_type=JSON)

    @app.post("/v1/verify")
    async def verify(request: Request) -> HTTPResponse:
        body = orjson.loads(request.body)
        _key_hash(request)
        _project, stored = await request.app.ctx.link.run_script(
            request.app.ctx.load, [KEY_RECORD, "floor:r:" + str(body.get("receipt_id"))], []
        )
        if stored is None:
            return HTTPResponse(b'{"error":{"code":"not_found"}}', status=404, content_type=JSON)
        receipt = orjson.loads(stored[:-64])  # the attestation's signature follows the receipt
        signature = receipt.pop("signature")
        claimed = receipt.pop("receipt_hash")
        recomputed = "sha256:" + hashlib.sha256(orjson.dumps(receipt, option=orjson.OPT_SORT_KEYS)).hexdigest()
        listed = registry.get(receipt.get("sig_kid"))
        if listed is None:
            return HTTPResponse(b'{"ok":false,"checks":{"signature":false}}', content_type=JSON)
        verify_key, valid_from, valid_until = listed
        try:
            if not valid_from <= receipt["created_at"] <= valid_until:
                raise BadSignatureError("the key was not valid when the receipt was made")
            verify_key.verify(claimed.encode(), base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
            signature_ok = True
        except BadSignatureError:
            signature_ok = False
        result = {
            "ok": signature_ok and recomputed == claimed and receipt["input_hash"] == body.get("input_hash"),
            "checks": {"signature": signature_ok, "receipt_hash": recomputed == claimed},
        }
        return HTTPResponse(orjson.dumps(result), content_type=JSON)

    @app.get("/health")
    async def health(request: Request) -> HTTPResponse:
        return HTTPResponse(b'{"ok":true}', content_type=JSON)

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args(argv)
    os.environ["REDIS_URL"] = args.redis_url
    loader = AppLoader(factory=create_app)
    app = loader.load()
    app.prepare(host=args.host, port=args.port, workers=1, access_log=False, motd=False)
    Sanic.serve(primary=app, app_loader=loader)
    return 0


if __name__ == "__main__":
    sys.exit(main())
