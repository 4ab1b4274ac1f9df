"""A second, Node.js verifier (tests/verifiers/verify.mjs) written only from the docs.

It uses node:crypto and its own strings-only JCS; agreement with the service on the committed
vectors, on freshly issued receipts and on generated payloads shows the format is what
docs/receipt-format.md says, independently of Python and of the rfc8785 package.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_proof.receipts.canonical import canonical_bytes, signed_payload
from tests.conftest import missing_binary
from tests.test_vectors import API_BODIES, CASES, VECTORS, doc_code_block, issue, receipt_strategy, tampered_versions

pytestmark = pytest.mark.slow  # a Node.js process per test

VERIFIER = Path(__file__).parent / "verifiers" / "verify.mjs"
ALL_TRUE = {"format": True, "receipt_hash_recompute": True, "key_known": True, "signature": True}


def node_binary() -> str:
    binary = shutil.which("node")
    if binary is None:
        missing_binary("node", "the Node.js verifier proves receipts verify outside Python")
    assert binary is not None
    return binary


@pytest.fixture(scope="module")
def node() -> str:
    return node_binary()


def run_node(node: str, document: Any, *args: str) -> tuple[int, Any]:
    """Run verify.mjs with ``document`` as JSON on stdin; (exit code, parsed stdout)."""
    proc = subprocess.run(
        [node, str(VERIFIER), *args],
        input=json.dumps(document).encode("ascii"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return proc.returncode, json.loads(proc.stdout)


async def run_node_async(node: str, document: Any) -> tuple[int, Any]:
    proc = await asyncio.create_subprocess_exec(
        node,
        str(VERIFIER),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(document).encode("ascii")), 60)
    assert proc.returncode in (0, 1), err.decode()
    return proc.returncode, json.loads(out)


@pytest.mark.parametrize("name", list(CASES))
def test_node_verifier_accepts_every_vector(node: str, name: str) -> None:
    case = CASES[name]
    code, result = run_node(node, {"receipt": case["receipt"], "keys": VECTORS["public_keys"]})
    assert code == 0
    assert result == {
        "ok": True,
        "checks": ALL_TRUE,
        "recomputed_receipt_hash": case["receipt_hash"],
        "canonical_hex": case["canonical_bytes_hex"],
    }


def test_node_verifier_accepts_a_get_response_body(node: str) -> None:
    case = CASES["all-fields-unicode"]
    code, result = run_node(node, {"receipt": {"ok": True, "receipt": case["receipt"]}, "keys": VECTORS["public_keys"]})
    assert code == 0 and result["ok"]


def test_node_verifier_rejects_every_single_field_tampering(node: str) -> None:
    items: list[dict[str, Any]] = []
    labels: list[str] = []
    for name, case in CASES.items():
        for label, tampered in tampered_versions(case["receipt"]):
            items.append({"receipt": tampered, "keys": VECTORS["public_keys"]})
            labels.append(f"{name}: {label}")
    _, results = run_node(node, items, "--batch")
    assert len(results) == len(items) > 300
    accepted = [label for label, result in zip(labels, results, strict=True) if result["ok"]]
    assert accepted == []


def test_node_verifier_unsigned_receipt_kind_and_retired_key(node: str) -> None:
    keys = VECTORS["public_keys"]
    retired = CASES["retired-key"]["receipt"]
    active_only = {"keys": [k for k in keys["keys"] if k["kid"] == "test-2026"], "active_kid": "test-2026"}
    items = [
        {"receipt": {**CASES["minimal-first"]["receipt"], "receipt_kind": "workflow_audit"}, "keys": keys},
        {"receipt": retired, "keys": keys},
        {"receipt": retired, "keys": active_only},
        {"receipt": {**retired, "sig_kid": "test-2026"}, "keys": keys},
        {"receipt": {**retired, "sig_kid": "unknown"}, "keys": keys},
        {"receipt": {**retired, "code_ref": 7}, "keys": keys},
        {"receipt": {**retired, "code_ref": "\ud800"}, "keys": keys},
        {"receipt": retired, "keys": {"keys": [{**keys["keys"][1], "alg": "Ed448"}]}},
    ]
    _, results = run_node(node, items, "--batch")
    assert [r["ok"] for r in results] == [True, True, False, False, False, False, False, False]
    assert results[2]["checks"]["key_known"] is False and results[2]["checks"]["receipt_hash_recompute"] is True
    assert results[3]["checks"]["key_known"] is True and results[3]["checks"]["signature"] is False


@settings(max_examples=15 * settings.default.max_examples // 100, deadline=None)
@given(receipts=st.lists(receipt_strategy, min_size=1, max_size=40))
def test_node_jcs_agrees_with_the_service(receipts: list[dict[str, Any]]) -> None:
    node = node_binary()
    payloads = [signed_payload(r) for r in receipts]
    _, hexes = run_node(node, payloads, "--canonicalize")
    assert hexes == [canonical_bytes(p).hex() for p in payloads]


def test_js_sketch_in_the_docs_works(node: str, tmp_path: Path) -> None:
    (tmp_path / "sketch.mjs").write_text(doc_code_block("js", "### JavaScript"))
    (tmp_path / "run.mjs").write_text(
        "import { verifyReceipt } from './sketch.mjs';\n"
        "import { readFileSync } from 'node:fs';\n"
        "const v = JSON.parse(readFileSync(process.argv[2], 'utf8'));\n"
        "const out = v.cases.map((c) => [\n"
        "  verifyReceipt(c.receipt, v.public_keys),\n"
        "  verifyReceipt({ ...c.receipt, created_at: '2020-01-01T00:00:00.000Z' }, v.public_keys),\n"
        "  verifyReceipt({ ...c.receipt, sig_kid: 'unknown' }, v.public_keys),\n"
        "]);\n"
        "console.log(JSON.stringify(out));\n"
    )
    vectors_path = Path(__file__).parent / "assets" / "receipt_vectors.json"
    proc = subprocess.run(
        [node, str(tmp_path / "run.mjs"), str(vectors_path)], capture_output=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout) == [[True, False, False]] * len(CASES)


async def test_node_verifies_receipts_issued_through_the_api(client: Any, api_key: dict[str, Any]) -> None:
    node = node_binary()
    _, keys_resp = await client.get("/v1/public-key")
    assert keys_resp.status == 200
    keys = keys_resp.json
    receipts = [await issue(client, api_key, body) for body in API_BODIES]
    receipts.append(
        await issue(
            client,
            api_key,
            {"input_hash": CASES["branch"]["request"]["input_hash"], "prev_receipt_hash": receipts[0]["receipt_hash"]},
        )
    )
    assert receipts[-1]["chain_status"] == "branch"
    for receipt in receipts:
        _, body = await client.get(f"/v1/receipts/{receipt['receipt_id']}")
        code, result = await run_node_async(node, {"receipt": body.json, "keys": keys})
        assert code == 0, result
        assert result["checks"] == ALL_TRUE
        assert result["canonical_hex"] == canonical_bytes(signed_payload(receipt)).hex()
        tampered = {**receipt, "tags": {**(receipt["tags"] or {}), "added": "x"}}
        code, result = await run_node_async(node, {"receipt": tampered, "keys": keys})
        assert code == 1 and result["checks"]["receipt_hash_recompute"] is False
