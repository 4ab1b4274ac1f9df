"""``GET /v1/receipts/{receipt_id}/bundle[?depth=N]``: an offline bundle (usecases/bundling.py,
docs/bundles.md), and ``GET /v1/receipts/{receipt_id}/attestation[?format=sigstore]``: its
in-toto attestation (usecases/attesting.py, docs/attestations.md); both public like the read
(``Access-Control-Allow-Origin: *``)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from execution_proof.web.auth import caller_of, services_of
from execution_proof.web.errors import report_corrupt_record
from execution_proof.web.info import base_url
from execution_proof.web.receipts_api import JSON, PUBLIC_READ_HEADERS, splice
from execution_proof.web.responses import Answer

bp = Blueprint("bundles")


@bp.get("/v1/receipts/<receipt_id:str>/bundle")
async def get_bundle(request: Request, receipt_id: str) -> HTTPResponse:
    depth = request.get_args(keep_blank_values=True).get("depth")
    bundle = await services_of(request).bundler.bundle(caller_of(request), receipt_id, depth, base_url(request))
    for corrupt in bundle.corrupt:
        report_corrupt_record(request, corrupt)
    headers = {**PUBLIC_READ_HEADERS, **bundle.admission.headers()}
    return Answer(splice(bundle.members), status=200, headers=headers, content_type=JSON)


@bp.get("/v1/receipts/<receipt_id:str>/attestation")
async def get_attestation(request: Request, receipt_id: str) -> HTTPResponse:
    form = request.get_args(keep_blank_values=True).get("format")
    attested = await services_of(request).attester.attest(caller_of(request), receipt_id, form)
    headers = {**PUBLIC_READ_HEADERS, **attested.admission.headers()}
    return Answer(attested.body, status=200, headers=headers, content_type=attested.media_type)
