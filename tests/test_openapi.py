"""The OpenAPI document (``GET /openapi.json``) and the reference page rendered from it.

The document must be valid OpenAPI 3.1, describe exactly the routes the app serves, and
describe what the app really answers: bodies issued by the app are validated against the
documented schemas (``jsonschema_rs``, the validator schemathesis itself uses).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import jsonschema_rs
import orjson
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from execution_proof.kv.store import Store
from execution_proof.receipts.model import RECEIPT_FIELDS
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from execution_proof.web.openapi import DOCUMENT, ERROR_CODES, document_for
from tests.conftest import auth, hash_of

UNDOCUMENTED_PREFIXES = ("/static/",)
UNDOCUMENTED_PATHS = {"/metrics"}
"""Prometheus metrics: protected by a token or a separate port, not part of the public API."""
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def resolve_pointer(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


# --- the document itself -----------------------------------------------------------------------


def test_document_is_valid_openapi_3_1() -> None:
    document = document_for("https://proofs.example")
    errors = [str(error) for error in OPENAPI_31_VALIDATOR.iter_errors(document)]
    assert errors == []
    assert document["openapi"].startswith("3.1.")
    assert document["info"]["version"] == "1.0.0"
    assert document["servers"] == [{"url": "https://proofs.example"}]


def test_every_ref_resolves_and_every_schema_is_valid_json_schema() -> None:
    refs = [node["$ref"] for node in walk(DOCUMENT) if isinstance(node, dict) and "$ref" in node]
    assert len(refs) > 50
    for ref in refs:
        assert resolve_pointer(DOCUMENT, ref) is not None, ref
    for name, schema in DOCUMENT["components"]["schemas"].items():
        meta = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
        assert jsonschema_rs.meta.is_valid(meta), name
    # Every component is used (shared, not copied) and every operation has a unique id.
    used = {ref.rsplit("/", 1)[-1] for ref in refs}
    unused = set(DOCUMENT["components"]["schemas"]) - used
    assert unused == set(), unused
    ids = [operation["operationId"] for _, _, operation in operations(DOCUMENT)]
    assert len(ids) == len(set(ids))


def test_every_operation_documents_its_errors_and_headers() -> None:
    for method, path, operation in operations(DOCUMENT):
        label = f"{method.upper()} {path}"
        assert operation["summary"] and "security" in operation, label
        for status, response in operation["responses"].items():
            response = resolve_pointer(DOCUMENT, response["$ref"]) if "$ref" in response else response
            assert "X-Request-Id" in response["headers"], f"{label} {status}"
            if status == "429":
                assert {"Retry-After", "RateLimit-Policy", "RateLimit"} <= set(response["headers"]), label
            if status.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert schema["allOf"][0] == {"$ref": "#/components/schemas/Error"}, f"{label} {status}"
                codes = schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]
                assert codes and set(codes) <= set(ERROR_CODES), f"{label} {status}"
        if operation["security"]:
            assert operation["security"] == [{"apiKey": []}]
            assert "401" in operation["responses"], label
    scheme = DOCUMENT["components"]["securitySchemes"]["apiKey"]
    assert scheme["type"] == "http"
    assert scheme["scheme"] == "bearer"
    create = DOCUMENT["paths"]["/v1/receipts"]["post"]["responses"]["201"]["headers"]
    assert {"X-Service-Plan", "X-Service-Monthly-Limit", "X-Service-Monthly-Used"} <= set(create)
    assert {"X-Service-Monthly-Remaining", "X-Service-Monthly-Reset-At", "RateLimit"} <= set(create)
    assert "/metrics" not in DOCUMENT["paths"]


def test_no_optional_property_is_a_constant() -> None:
    """Client generators mishandle an optional ``const`` (openapi-python-client 0.29 writes code that
    does not parse): a constant is always a required property (``tests/test_client_generation.py``
    generates real clients)."""
    optional_consts = []
    for node in walk(DOCUMENT):
        if not isinstance(node, dict) or not isinstance(node.get("properties"), dict):
            continue
        required = set(node.get("required", []))
        optional_consts += [
            name for name, prop in node["properties"].items() if "const" in prop and name not in required
        ]
    assert optional_consts == []


def test_signed_timestamps_are_plain_strings() -> None:
    """No ``format: date-time``: a generated client would parse it into a date object and write it
    back in another form, while the receipt hash covers the exact string."""
    dated = [node for node in walk(DOCUMENT) if isinstance(node, dict) and node.get("format") == "date-time"]
    assert dated == []
    assert DOCUMENT["components"]["schemas"]["Timestamp"]["type"] == "string"


def test_receipt_schema_lists_every_receipt_field() -> None:
    receipt = DOCUMENT["components"]["schemas"]["Receipt"]
    assert list(receipt["properties"]) == list(RECEIPT_FIELDS)
    assert receipt["required"] == list(RECEIPT_FIELDS)
    assert receipt["additionalProperties"] is False


def app_routes(app: Any) -> set[tuple[str, str]]:
    """(method, path template with ``{}`` for each parameter) of every route the app serves."""
    served = set()
    for route in app.router.routes:
        uri = route.uri if route.uri.startswith("/") else "/" + route.uri
        if uri.startswith(UNDOCUMENTED_PREFIXES) or uri in UNDOCUMENTED_PATHS:
            continue
        template = re.sub(r"<[^>]+>", "{}", uri)
        served |= {(method.lower(), template) for method in route.methods}
    return served


def test_documented_routes_are_exactly_the_served_routes(app: Any) -> None:
    documented = {(method, re.sub(r"\{[^}]+\}", "{}", path)) for method, path, _ in operations(DOCUMENT)}
    assert app_routes(app) == documented


@pytest.mark.parametrize("store", ["fakeredis"], indirect=True)
def test_an_undocumented_route_is_noticed(settings: Settings, store: Store) -> None:
    app = create_app(settings, store=store)

    @app.get("/v1/undocumented")
    async def undocumented(request: Any) -> Any:
        raise NotImplementedError

    documented = {(method, re.sub(r"\{[^}]+\}", "{}", path)) for method, path, _ in operations(DOCUMENT)}
    assert app_routes(app) - documented == {("get", "/v1/undocumented")}


# --- GET /openapi.json ------------------------------------------------------------------------


async def test_openapi_json_is_served_with_cors_cache_and_servers(client: Any) -> None:
    _, response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["access-control-allow-origin"] == "*"
    assert "max-age" in response.headers["cache-control"]
    assert response.headers["x-request-id"]
    served = orjson.loads(response.body)
    base = served["servers"][0]["url"]
    _, entry = await client.get("/")
    assert orjson.loads(entry.body)["docs_url"] == base + "/docs"
    assert served == document_for(base)


@pytest.mark.parametrize("store", ["fakeredis"], indirect=True)
async def test_openapi_servers_use_public_base_url(settings: Settings, store: Store) -> None:
    configured = dataclasses.replace(settings, public_base_url="https://proofs.example")
    _, response = await create_app(configured, store=store).asgi_client.get("/openapi.json")
    assert orjson.loads(response.body)["servers"] == [{"url": "https://proofs.example"}]


# --- real bodies against the documented schemas ------------------------------------------------


class Documented:
    """Validates real responses against the documented response of an operation."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def response(self, method: str, path: str, status: int) -> dict[str, Any]:
        responses = self.document["paths"][path][method]["responses"]
        assert str(status) in responses, f"{method.upper()} {path} does not document {status}"
        response: dict[str, Any] = responses[str(status)]
        if "$ref" in response:
            response = resolve_pointer(self.document, response["$ref"])
        return response

    def check(self, method: str, path: str, response: Any) -> Any:
        documented = self.response(method, path, response.status_code)
        media_type = response.headers["content-type"].split(";")[0]
        assert media_type in documented["content"], (method, path, media_type)
        for name, header in documented.get("headers", {}).items():
            header = resolve_pointer(self.document, header["$ref"]) if "$ref" in header else header
            value = response.headers.get(name)
            if header.get("required"):
                assert value is not None, f"{method.upper()} {path} {response.status_code}: no {name}"
            if value is not None:
                typed: Any = int(value) if header["schema"].get("type") == "integer" else value
                self._validate(header["schema"], typed)
        if media_type == "application/json":
            body = orjson.loads(response.body)
            self._validate(documented["content"][media_type]["schema"], body)
            return body
        return response.body

    def _validate(self, schema: dict[str, Any], instance: Any) -> None:
        # Local references resolve against the root, so the components come along.
        root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": self.document["components"]}
        validator = jsonschema_rs.validator_for({**root, **schema}, validate_formats=True)
        errors = [f"{error.instance_path}: {error.message}" for error in validator.iter_errors(instance)]
        assert errors == [], instance


@pytest.fixture
def documented() -> Documented:
    return Documented(DOCUMENT)


def test_the_validation_helper_rejects_wrong_bodies(documented: Documented) -> None:
    error = {"error": {"code": "quota_exceeded", "message": "m"}, "request_id": "req_01M7YEXKR8V9PBDZV0RCEEQHWS"}
    schema = documented.response("post", "/v1/receipts", 429)["content"]["application/json"]["schema"]
    documented._validate(schema, error)
    with pytest.raises(AssertionError):  # the code is narrowed per status
        documented._validate(schema, {**error, "error": {"code": "not_found", "message": "m"}})
    with pytest.raises(AssertionError):  # nested component references are followed
        documented._validate({"$ref": "#/components/schemas/ReceiptRead"}, {"ok": True, "receipt": {}})


async def test_real_bodies_match_the_documented_schemas(
    client: Any, api_key: dict[str, Any], documented: Documented
) -> None:
    headers = auth(api_key)
    for path in ("/", "/health", "/v1/public-key"):
        _, response = await client.get(path)
        documented.check("get", path, response)

    first = orjson.dumps({"input_hash": hash_of("doc-1"), "receipt_kind": "release", "tags": {"stage": "build"}})
    _, response = await client.post("/v1/receipts", content=first, headers=headers)
    assert response.status_code == 201
    created = documented.check("post", "/v1/receipts", response)
    assert created["idempotency"]["hit"] is False
    _, response = await client.post("/v1/receipts", content=first, headers=headers)
    assert response.status_code == 200
    assert documented.check("post", "/v1/receipts", response)["idempotency"]["hit"] is True
    second = {"input_hash": hash_of("doc-2"), "output_hash": hash_of("out-2"), "code_ref": "git:abc", "run_id": "7"}
    _, response = await client.post("/v1/receipts", content=orjson.dumps(second), headers=headers)
    receipt = documented.check("post", "/v1/receipts", response)["receipt"]
    assert receipt["prev_receipt_hash"] == created["receipt"]["receipt_hash"]

    receipt_id = receipt["receipt_id"]
    reads = [
        f"/v1/receipts/{receipt_id}",
        f"/v1/receipts/{receipt['receipt_hash']}?project_id={api_key['project_id']}",
    ]
    for url in reads:
        _, response = await client.get(url)
        assert response.status_code == 200
        documented.check("get", "/v1/receipts/{receipt_id}", response)
    _, response = await client.get(f"/v1/receipts/{receipt_id}/bundle")
    bundle = documented.check("get", "/v1/receipts/{receipt_id}/bundle", response)
    assert len(bundle["chain"]) == 1
    _, response = await client.get(f"/v1/receipts?output_hash={hash_of('out-2')}&limit=1", headers=headers)
    assert len(documented.check("get", "/v1/receipts", response)["receipts"]) == 1
    both = f"input_hash={hash_of('doc-2')}&output_hash={hash_of('out-2')}"
    _, response = await client.get(f"/v1/receipts?{both}", headers=headers)
    assert response.status_code == 200, response.body
    assert documented.check("get", "/v1/receipts", response)["receipts"] == [receipt]
    for check in ({"input_hash": hash_of("doc-2")}, {"input_hash": hash_of("wrong")}):
        body = orjson.dumps({"receipt_id": receipt_id, **check})
        _, response = await client.post("/v1/verify", content=body, headers=headers)
        assert response.status_code == 200
        documented.check("post", "/v1/verify", response)
    _, response = await client.get("/v1/usage", headers=headers)
    assert documented.check("get", "/v1/usage", response)["month"]["used"] == 2
    for page in ("/verify", "/docs", "/claim/free", "/claim/success?session_id=cs_1"):
        _, response = await client.get(page)
        assert response.status_code == 200
        documented.check("get", page.split("?")[0], response)


async def test_real_errors_match_the_documented_errors(
    client: Any, api_key: dict[str, Any], documented: Documented
) -> None:
    headers = auth(api_key)
    cases: list[tuple[str, str, str, dict[str, str], bytes | None, int, str]] = [
        ("post", "/v1/receipts", "/v1/receipts", {}, b"{}", 401, "unauthorized"),
        ("post", "/v1/receipts", "/v1/receipts", headers, b"{}", 400, "bad_request"),
        ("post", "/v1/receipts", "/v1/receipts", headers, b'{"input_hash": "sha256:00", "x": 1}', 400, "bad_request"),
        (
            "post",
            "/v1/receipts",
            "/v1/receipts",
            headers,
            orjson.dumps({"input_hash": hash_of("e"), "run_id": "someone@example.com"}),
            400,
            "forbidden_content",
        ),
        (
            "post",
            "/v1/receipts",
            "/v1/receipts",
            headers,
            orjson.dumps({"input_hash": hash_of("e"), "project_id": "prj_other"}),
            403,
            "forbidden",
        ),
        (
            "post",
            "/v1/receipts",
            "/v1/receipts",
            {**headers, "Content-Type": "text/plain"},
            orjson.dumps({"input_hash": hash_of("e")}),
            415,
            "unsupported_media_type",
        ),
        ("post", "/v1/verify", "/v1/verify", headers, b"x" * 9000, 413, "payload_too_large"),
        (
            "post",
            "/v1/verify",
            "/v1/verify",
            headers,
            orjson.dumps({"receipt_id": "rcpt_nope", "input_hash": hash_of("e")}),
            404,
            "not_found",
        ),
        ("get", "/v1/receipts/{receipt_id}", "/v1/receipts/rcpt_unknown", {}, None, 404, "not_found"),
        ("get", "/v1/receipts/{receipt_id}", f"/v1/receipts/{hash_of('e')}", {}, None, 400, "bad_request"),
        (
            "get",
            "/v1/receipts/{receipt_id}/bundle",
            "/v1/receipts/rcpt_x/bundle?depth=101",
            {},
            None,
            400,
            "bad_request",
        ),
        ("get", "/v1/receipts", "/v1/receipts?limit=5", headers, None, 400, "bad_request"),
        ("get", "/v1/usage", "/v1/usage", {"Authorization": "Bearer short"}, None, 401, "unauthorized"),
        ("post", "/v1/claim", "/v1/claim", {"Content-Type": "application/json"}, b"{}", 503, "claim_not_ready"),
        ("post", "/v1/claim/free", "/v1/claim/free", {}, b"{}", 503, "not_configured"),
        ("post", "/v1/webhooks/payment", "/v1/webhooks/payment", {}, b"{}", 503, "claim_not_ready"),
    ]
    for method, path, url, request_headers, body, status, code in cases:
        if method == "get":
            _, response = await client.get(url, headers=request_headers)
        else:
            _, response = await client.post(url, content=body, headers=request_headers)
        assert response.status_code == status, (url, response.body)
        error = documented.check(method, path, response)
        assert error["error"]["code"] == code
        assert error["request_id"] == response.headers["x-request-id"]


async def test_method_not_allowed_matches_the_shared_405(client: Any) -> None:
    _, response = await client.delete("/v1/receipts")
    assert response.status_code == 405
    documented = resolve_pointer(DOCUMENT, "#/components/responses/Error405MethodNotAllowed")
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    validator = jsonschema_rs.validator_for(
        {"components": DOCUMENT["components"], **documented["content"]["application/json"]["schema"]}
    )
    assert validator.is_valid(orjson.loads(response.body))


# --- the reference page -------------------------------------------------------------------------


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.ids: set[str] = set()
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.urls += [value for name, value in attrs if name in ("src", "href", "action") and value is not None]
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "script":
            self.scripts += 1


async def test_docs_page_lists_every_operation_from_the_document(client: Any) -> None:
    _, response = await client.get("/docs")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp
    page = response.body.decode()
    parser = Links()
    parser.feed(page)
    assert parser.scripts == 0
    assert "/openapi.json" in parser.urls
    assert "/static/style.css" in parser.urls
    for url in parser.urls:
        assert not re.match(r"^[a-z][a-z0-9+.-]*:|^//", url, re.IGNORECASE), f"external URL {url}"
    for method, path, operation in operations(DOCUMENT):
        assert operation["operationId"] in parser.ids
        assert f"<code>{method.upper()} {path}</code>" in page
        for parameter in operation.get("parameters", []):
            assert f"<code>{parameter['name']}</code>" in page
        for status in operation["responses"]:
            assert f'data-status="{status}"' in page
    for code in ERROR_CODES:
        assert f"<code>{code}</code>" in page
    for field in RECEIPT_FIELDS:
        assert f"<code>{field}</code>" in page
    assert "Bearer" in page
    assert "1.0.0" in page


def test_the_error_codes_are_the_error_classes_codes() -> None:
    """One source: the document's ErrorCode enum and its table of meanings are the codes of
    ``receipts.errors``' classes, no more and no fewer."""
    from execution_proof.receipts import errors
    from execution_proof.web.openapi.responses import ERROR_MEANINGS

    def codes(error: type[errors.ServiceError]) -> set[str]:
        return {error.code}.union(*(codes(sub) for sub in error.__subclasses__()))

    class_codes = set().union(*(codes(sub) for sub in errors.ServiceError.__subclasses__()))
    assert set(DOCUMENT["components"]["schemas"]["ErrorCode"]["enum"]) == class_codes
    assert set(ERROR_MEANINGS) == class_codes
    assert len(ERROR_CODES) == len(class_codes)
