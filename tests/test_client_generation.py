"""The two client generators README.md names, run on the live ``GET /openapi.json`` of the demo
(``python service.py serve`` with nothing configured), and the clients they generate, used.

- openapi-python-client (the ``test`` extra): generate (its ruff post-hooks included: code that
  does not parse fails them), import, then issue (201), replay (200, ``idempotency.hit``),
  read (200) and verify (200, ``ok``) a receipt through the generated functions and models.
- openapi-generator-cli ``typescript-fetch`` (the ``test`` extra bundles the jar; needs Java):
  generate, compile with TypeScript (npm, installed once per session in a temporary
  directory), and run the compiled client with node for the same four calls.

A missing ``java``, ``node`` or ``npm`` skips (fails under REQUIRE_REAL_SERVICES=1).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import hash_of, missing_binary, require_real_services
from tests.servers import ServicePool, ServiceProcess, service_pool_fixture

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
GENERATE_TIMEOUT_S = 300
NPM_TIMEOUT_S = 240
TYPESCRIPT = "typescript@5"
PACKAGE = "execution_proof_service_client"

service_pool = service_pool_fixture("module")


@pytest.fixture(scope="module")
def demo(service_pool: ServicePool) -> tuple[ServiceProcess, str]:
    """The embedded demo (default limits) and the API key it prints."""
    service = service_pool.start(redis_url=None, receipt_root=None, limits=None)
    (found,) = service.wait_for_output(r"API key:\s+(eps_[A-Za-z0-9_-]{43})\b")
    return service, found.group(1)


def run(command: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    output = f"$ {' '.join(command)}\n{done.stdout[-10_000:]}\n{done.stderr[-10_000:]}"
    assert done.returncode == 0, output
    return done.stdout


def tool_env() -> dict[str, str]:
    """This environment with the virtualenv's scripts (ruff for the generator's post-hooks) first."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


# --- Python: openapi-python-client ------------------------------------------------------------


@pytest.fixture
def python_client(demo: tuple[ServiceProcess, str], tmp_path: Path) -> Iterator[Any]:
    service, _ = demo
    generator = BIN / "openapi-python-client"
    assert generator.exists(), "openapi-python-client is part of the test extra"
    run(
        [str(generator), "generate", "--url", service.base_url + "/openapi.json", "--output-path", "client"],
        cwd=tmp_path,
        timeout=GENERATE_TIMEOUT_S,
        env=tool_env(),
    )
    sys.path.insert(0, str(tmp_path / "client"))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path / "client"))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def test_generated_python_client_issues_replays_reads_and_verifies(
    python_client: Any, demo: tuple[ServiceProcess, str]
) -> None:
    service, api_key = demo
    api = importlib.import_module(PACKAGE + ".api.receipts")
    models = importlib.import_module(PACKAGE + ".models")
    for name in ("create_receipt", "get_receipt", "verify_receipt", "get_public_keys"):
        importlib.import_module(f"{PACKAGE}.api.receipts.{name}")
    authed = python_client.AuthenticatedClient(base_url=service.base_url, token=api_key)
    public = python_client.Client(base_url=service.base_url)
    input_hash, output_hash = hash_of("python-client-in"), hash_of("python-client-out")
    body = models.CreateReceiptRequest(
        input_hash=input_hash,
        output_hash=output_hash,
        receipt_kind=models.ReceiptKind("release"),
        tags=models.TagsInputType0.from_dict({"workflow_stage": "build"}),
    )

    issued = api.create_receipt.sync_detailed(client=authed, body=body)
    assert issued.status_code == 201, issued.content
    created = issued.parsed
    assert isinstance(created, models.IssueResponse)
    assert created.ok is True
    assert created.idempotency.hit is False
    assert created.idempotency.key.startswith("ik_")
    receipt = created.receipt
    assert receipt.input_hash == input_hash
    assert receipt.output_hash == output_hash
    assert receipt.receipt_id.startswith("rcpt_")
    assert created.to_dict() == json.loads(issued.content), "the model round-trips the body"

    replayed = api.create_receipt.sync_detailed(client=authed, body=body)
    assert replayed.status_code == 200, replayed.content
    assert isinstance(replayed.parsed, models.IssueResponse)
    assert replayed.parsed.idempotency.hit is True
    assert replayed.parsed.idempotency.key == created.idempotency.key
    assert replayed.parsed.receipt.receipt_id == receipt.receipt_id

    read = api.get_receipt.sync_detailed(receipt.receipt_id, client=public)
    assert read.status_code == 200, read.content
    assert isinstance(read.parsed, models.ReceiptRead)
    assert read.parsed.receipt.to_dict() == receipt.to_dict()

    verified = api.verify_receipt.sync_detailed(
        client=authed, body=models.VerifyRequest(receipt_id=receipt.receipt_id, input_hash=input_hash)
    )
    assert verified.status_code == 200, verified.content
    assert isinstance(verified.parsed, models.VerifyResult)
    assert verified.parsed.ok is True
    checks = verified.parsed.checks
    assert (checks.signature, checks.hash_match, checks.receipt_hash_recompute, checks.chain_link) == (
        True,
        True,
        True,
        True,
    )
    assert verified.parsed.receipt_hash == receipt.receipt_hash
    wrong = api.verify_receipt.sync_detailed(
        client=authed, body=models.VerifyRequest(receipt_id=receipt.receipt_id, input_hash=hash_of("other"))
    )
    assert wrong.status_code == 200, wrong.content
    assert wrong.parsed.ok is False
    assert wrong.parsed.checks.hash_match is False

    keys = api.get_public_keys.sync_detailed(client=public)
    assert keys.status_code == 200
    assert keys.parsed.active_kid == receipt.sig_kid

    refused = api.create_receipt.sync_detailed(
        client=python_client.AuthenticatedClient(base_url=service.base_url, token="eps_" + "x" * 43), body=body
    )
    assert refused.status_code == 401
    assert refused.parsed.error.code.value == "unauthorized"


# --- TypeScript: openapi-generator-cli typescript-fetch ---------------------------------------

NODE_SCRIPT = """
const { Configuration, ReceiptsApi } = require(process.argv[2]);
const [basePath, accessToken, inputHash] = process.argv.slice(3);
(async () => {
  const api = new ReceiptsApi(new Configuration({ basePath, accessToken }));
  const body = { createReceiptRequest: { inputHash, tags: { workflow_stage: "build" } } };
  const issued = await api.createReceiptRaw(body);
  const created = await issued.value();
  const replayed = await api.createReceiptRaw(body);
  const again = await replayed.value();
  const read = await api.getReceipt({ receiptId: created.receipt.receiptId });
  const verified = await api.verifyReceipt({
    verifyRequest: { receiptId: created.receipt.receiptId, inputHash },
  });
  console.log(JSON.stringify({
    issued: [issued.raw.status, created.idempotency.hit, created.receipt.receiptId, created.receipt.inputHash],
    replayed: [replayed.raw.status, again.idempotency.hit, again.receipt.receiptId],
    read: [read.receipt.receiptId, read.receipt.receiptHash === created.receipt.receiptHash],
    verified: [verified.ok, verified.checks.signature, verified.checks.hashMatch],
  }));
})().catch((error) => { console.error(error); process.exit(1); });
"""


@pytest.fixture(scope="session")
def tsc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TypeScript's compiler, installed from npm once per session into a temporary directory."""
    npm = shutil.which("npm")
    if npm is None:
        missing_binary("npm", "the TypeScript client is compiled with TypeScript from npm")
    where = tmp_path_factory.mktemp("typescript")
    command = [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(where), TYPESCRIPT]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
        failed = done.returncode != 0
        why = done.stderr[-2000:]
    except subprocess.TimeoutExpired:
        failed, why = True, f"timed out after {NPM_TIMEOUT_S} s"
    if failed:
        message = f"npm install {TYPESCRIPT} failed: {why}"
        if require_real_services():
            pytest.fail(message)
        pytest.skip(message)
    return where / "node_modules" / ".bin" / "tsc"


def test_generated_typescript_client_compiles_and_works(
    demo: tuple[ServiceProcess, str], tsc: Path, tmp_path: Path
) -> None:
    service, api_key = demo
    if shutil.which("java") is None:
        missing_binary("java", "openapi-generator-cli runs the generator's jar")
    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the generated TypeScript client is run with node")
    generator = BIN / "openapi-generator-cli"
    assert generator.exists(), "openapi-generator-cli is part of the test extra"
    url = service.base_url + "/openapi.json"
    run(
        [str(generator), "generate", "-i", url, "-g", "typescript-fetch", "-o", "client"],
        cwd=tmp_path,
        timeout=GENERATE_TIMEOUT_S,
        env=tool_env(),
    )
    compile_options = ["--strict", "--target", "es2020", "--module", "commonjs", "--lib", "es2020,dom"]
    run(
        [str(tsc), *compile_options, "--outDir", "out", "client/index.ts"],
        cwd=tmp_path,
        timeout=GENERATE_TIMEOUT_S,
    )
    (tmp_path / "use.js").write_text(NODE_SCRIPT)
    input_hash = hash_of("typescript-client-in")
    printed = run(
        [node, "use.js", str(tmp_path / "out" / "index.js"), service.base_url, api_key, input_hash],
        cwd=tmp_path,
        timeout=60,
    )
    result = json.loads(printed)
    receipt_id = result["issued"][2]
    assert result["issued"] == [201, False, receipt_id, input_hash]
    assert receipt_id.startswith("rcpt_")
    assert result["replayed"] == [200, True, receipt_id]
    assert result["read"] == [receipt_id, True]
    assert result["verified"] == [True, True, True]
    # The same receipt, read without the generated client.
    assert httpx.get(f"{service.base_url}/v1/receipts/{receipt_id}", timeout=10).json()["receipt"]["input_hash"] == (
        input_hash
    )
