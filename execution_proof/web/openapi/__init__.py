"""The machine-readable API description (version 1.0.0): ``GET /openapi.json``, OpenAPI 3.1.

The document is plain Python data built once at import; only its ``servers`` entry is filled
per request (``PUBLIC_BASE_URL``, else the address the request came to). The ``/docs`` page
is rendered from this same document (``reference_view``), so the two cannot drift apart, and
``tests/test_openapi.py`` fails when the app serves a route that is not described here.

Error responses: every error body is the one ``Error`` schema; each documented error status
narrows ``error.code`` to the codes that operation can answer with at that status.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import orjson
from sanic import Blueprint, HTTPResponse, Request

from execution_proof.receipts.apikeys import MAX_KEY_LEN, MIN_KEY_LEN
from execution_proof.web.info import base_url
from execution_proof.web.openapi.attestation_paths import ATTESTATION_PATHS, ATTESTATION_SCHEMAS
from execution_proof.web.openapi.common import (
    API_VERSION,
    ERROR_CODES,
    JSON,
    OPENAPI_HEADERS,
    OPENAPI_VERSION,
    header_ref,
)
from execution_proof.web.openapi.log_paths import LOG_PATHS
from execution_proof.web.openapi.paths import PATHS
from execution_proof.web.openapi.responses import ERROR_MEANINGS, HEADERS, RESPONSES
from execution_proof.web.openapi.schemas import SCHEMAS

bp = Blueprint("openapi")

INFO = {
    "title": "Execution Proof Service",
    "version": API_VERSION,
    "summary": "Ed25519-signed, chained receipts for hashes you compute yourself.",
    "description": (
        "Issues signed execution receipts for `sha256:` hashes computed by the client (it never receives raw "
        "data), chained per project, readable publicly by id and verifiable without trusting the service.\n\n"
        "Every response carries `X-Request-Id`. Every error is "
        '`{"error": {"code", "message", "details"?}, "request_id"}`. A path that does not exist is 404 '
        "`not_found`; a method the path does not support is 405 `method_not_allowed` with `Allow`. "
        "429 always carries `Retry-After`. API keys (`eps_...`) are sent as `Authorization: Bearer <key>`; "
        "a missing, malformed or unknown key is 401, and too many of those from one address 429."
    ),
}


def _finish_responses(paths: Mapping[str, Any], responses: Mapping[str, Any]) -> None:
    """Every response (inline or shared) carries the ``X-Request-Id`` header."""
    for item in paths.values():
        for operation in item.values():
            for response in operation["responses"].values():
                if "$ref" not in response:
                    response.setdefault("headers", {})["X-Request-Id"] = header_ref("X-Request-Id")
    for response in responses.values():
        response["headers"]["X-Request-Id"] = header_ref("X-Request-Id")


def build_document() -> dict[str, Any]:
    """The whole document, without ``servers`` (added per request)."""
    paths = copy.deepcopy({**PATHS, **ATTESTATION_PATHS, **LOG_PATHS})
    responses = copy.deepcopy(RESPONSES)
    _finish_responses(paths, responses)
    return {
        "openapi": OPENAPI_VERSION,
        "info": INFO,
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, **ATTESTATION_SCHEMAS},
            "responses": responses,
            "headers": HEADERS,
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "eps_ API key",
                    "description": (
                        f"`Authorization: Bearer eps_...`. Keys of {MIN_KEY_LEN}-{MAX_KEY_LEN} characters are looked "
                        "up; others are 401 at once. Get one at `/claim/free` or through a paid checkout."
                    ),
                }
            },
        },
        "tags": [
            {"name": "Service", "description": "Entry information and this description."},
            {"name": "Receipts", "description": "Issue, read, search and verify receipts."},
            {"name": "Keys", "description": "Getting an API key: paid checkouts and free claims."},
            {"name": "Pages", "description": "HTML pages for people."},
            {"name": "Log", "description": "The transparency log: checkpoints, tiles and proofs (C2SP)."},
        ],
    }


DOCUMENT = build_document()


def document_for(base: str) -> dict[str, Any]:
    """The document with ``servers`` naming ``base``."""
    return {
        "openapi": DOCUMENT["openapi"],
        "info": DOCUMENT["info"],
        "servers": [{"url": base}],
        **{key: value for key, value in DOCUMENT.items() if key not in ("openapi", "info")},
    }


@bp.get("/openapi.json")
async def openapi_json(request: Request) -> HTTPResponse:
    body = orjson.dumps(document_for(base_url(request)))
    return HTTPResponse(body, status=200, headers=OPENAPI_HEADERS, content_type=JSON)


# --- the reference page's view of the document ------------------------------------------------

_REF = re.compile(r"^#/components/(schemas|responses|headers)/(.+)$")


def resolve(node: Mapping[str, Any], document: Mapping[str, Any] = DOCUMENT) -> Any:
    """Follow ``$ref`` (recursively) inside ``document``."""
    while isinstance(node, Mapping) and "$ref" in node:
        match = _REF.match(node["$ref"])
        if match is None:
            raise KeyError(node["$ref"])
        node = document["components"][match.group(1)][match.group(2)]
    return node


def type_label(schema: Mapping[str, Any]) -> str:
    """A short human label for a schema: ``Receipt``, ``string | null``, ``integer 1-200``..."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "const" in schema:
        return orjson.dumps(schema["const"]).decode()
    if "allOf" in schema:
        return type_label(schema["allOf"][0])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(type_label(option) for option in schema[key])
    if "enum" in schema:
        return " | ".join(orjson.dumps(value).decode() for value in schema["enum"])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    label = " | ".join(kinds) if kinds else "any"
    if "items" in schema:
        label = f"array of {type_label(schema['items'])}"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        label += f" {'' if low is None else low}-{'' if high is None else high}"
    if "maxLength" in schema:
        label += f", at most {schema['maxLength']} characters"
    if "pattern" in schema:
        label += f", pattern {schema['pattern']}"
    return label


def _fields(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    schema = resolve(schema)
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "type": type_label(prop),
            "required": name in required,
            "description": prop.get("description") or resolve(prop).get("description", ""),
        }
        for name, prop in schema.get("properties", {}).items()
    ]


def _error_codes(content: Mapping[str, Any]) -> list[str]:
    schema = content.get(JSON, {}).get("schema", {})
    for part in schema.get("allOf", []):
        codes = part.get("properties", {}).get("error", {}).get("properties", {}).get("code", {}).get("enum")
        if codes:
            return list(codes)
    return []


def reference_view(document: Mapping[str, Any] = DOCUMENT) -> dict[str, Any]:
    """Everything the ``/docs`` page shows, taken from ``document``."""
    operations = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = []
            for status, response in operation["responses"].items():
                response = resolve(response, document)
                content = response.get("content", {})
                responses.append(
                    {
                        "status": status,
                        "description": response["description"],
                        "media_types": list(content),
                        "schema": type_label(content[JSON]["schema"]) if JSON in content else None,
                        "codes": _error_codes(content),
                        "headers": list(response.get("headers", {})),
                    }
                )
            body = operation.get("requestBody")
            operations.append(
                {
                    "id": operation["operationId"],
                    "method": method.upper(),
                    "path": path,
                    "summary": operation["summary"],
                    "description": operation.get("description", ""),
                    "auth": "Bearer API key" if operation.get("security") else "none",
                    "parameters": [
                        {
                            "name": p["name"],
                            "in": p["in"],
                            "required": p.get("required", False),
                            "type": type_label(p["schema"]),
                            "description": p.get("description", ""),
                        }
                        for p in operation.get("parameters", [])
                    ],
                    "body": type_label(body["content"][JSON]["schema"]) if body else None,
                    "body_fields": _fields(body["content"][JSON]["schema"]) if body else [],
                    "responses": responses,
                }
            )
    schemas = [
        {
            "name": name,
            "description": schema.get("description", ""),
            "type": type_label(schema),
            "fields": _fields(schema),
        }
        for name, schema in document["components"]["schemas"].items()
    ]
    return {
        "info": document["info"],
        "operations": operations,
        "schemas": schemas,
        "schema_names": [schema["name"] for schema in schemas],
        "security": document["components"]["securitySchemes"],
        "headers": document["components"]["headers"],
        "error_codes": [{"code": code, "meaning": ERROR_MEANINGS[code]} for code in ERROR_CODES],
    }
