"""The verification page's own JavaScript (static/verify-core.js, static/verify-read.js,
static/sha256.js) under Node.js.

The same ES modules the browser loads are imported by tests/verifiers/page_vectors.mjs, so the
page's JCS, hashing, strict base64url and WebCrypto Ed25519 calls are checked against every
committed vector, against tampered copies of them, and its incremental SHA-256 against
node:crypto, without a browser.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ASSETS, REPO, missing_binary

SCRIPT = Path(__file__).parent / "verifiers" / "page_vectors.mjs"
ALL_TRUE = {"format": True, "self_consistency": True, "key": True, "signature": True}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the verification page's JavaScript is tested under Node.js")
    assert node is not None
    done = subprocess.run(
        [node, str(SCRIPT), str(ASSETS / "receipt_vectors.json")], capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_every_vector_is_valid_with_its_key(report: dict[str, Any], vectors: dict[str, Any]) -> None:
    names = [case["name"] for case in vectors["cases"]]
    assert [case["name"] for case in report["cases"]] == names
    for case in report["cases"]:
        assert case["result"]["ok"] is True, case["name"]
        assert case["result"]["checks"] == ALL_TRUE, case["name"]
        assert case["canonical_matches"], f"{case['name']}: canonical bytes differ from the vector"
        assert case["hash_matches"], f"{case['name']}: receipt_hash differs from the vector"
        assert case["wrapped_kind"] == "get"
        expected_status = "active" if case["kid"] == vectors["public_keys"]["active_kid"] else "retired"
        assert case["result"]["keyStatus"] == expected_status, case["name"]
    assert any(case["result"]["keyStatus"] == "retired" for case in report["cases"])


def test_every_tampered_copy_is_rejected(report: dict[str, Any], vectors: dict[str, Any]) -> None:
    tags = {vector["name"]: vector["receipt"]["tags"] for vector in vectors["cases"]}
    for case in report["cases"]:
        assert len(case["tampered"]) >= 30, case["name"]
        accepted = [t["what"] for t in case["tampered"] if t["ok"]]
        assert accepted == [], f"{case['name']}: accepted {accepted}"
        by_what = {t["what"]: t["checks"] for t in case["tampered"]}
        # A changed field fails self-consistency while the signature over the old hash still holds.
        assert by_what["changed input_hash"]["self_consistency"] is False
        assert by_what["changed input_hash"]["signature"] is True
        # A replaced hash fails both; a wrong or unknown key fails the key or the signature.
        assert by_what["replaced receipt_hash"]["signature"] is False
        assert by_what["unknown sig_kid"]["key"] is False
        assert by_what["other listed sig_kid"]["signature"] is False
        assert by_what["padded signature"]["format"] is False
        assert by_what["a lone surrogate"]["self_consistency"] is False
        # Pasted, a copy that lost or gained a member, or holds a number (or text for tags), is
        # not read at all (could not verify); a copy with a changed value is read, and its
        # checks fail.
        reads = {t["what"]: t["read"] for t in case["tampered"]}
        unreadable = {what for what, kind in reads.items() if kind == "invalid"}
        assert unreadable == {
            *(what for what in reads if what.startswith("removed ")),
            "added a null field",
            "a number value",
            *(["changed tags"] if tags[case["name"]] is None else []),
        }, case["name"]
        assert reads["changed input_hash"] == "document"


def test_unlisted_key_is_invalid(report: dict[str, Any]) -> None:
    assert report["no_keys"]["ok"] is False
    assert report["no_keys"]["checks"]["key"] is False
    assert report["no_keys"]["checks"]["self_consistency"] is True


def test_incremental_sha256_matches_node_crypto(report: dict[str, Any]) -> None:
    assert report["empty_hex"] == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert {row["size"] for row in report["sha"]} >= {0, 55, 56, 63, 64, 65, 1048579}
    for row in report["sha"]:
        assert row["one_shot"], row
        assert row["chunked"], row


def test_strict_base64url(report: dict[str, Any]) -> None:
    assert report["b64"]["good"] == "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    # padding, '+' (standard alphabet), non-zero unused bits, one character short
    assert report["b64"]["rejects"] == [True, True, True, True]


def test_input_classification(report: dict[str, Any]) -> None:
    """Each document is read against its own member list: a bundle missing members, a bundle of a
    newer version, a receipt carrying a bundle's member are not read at all."""
    assert report["inputs"] == [
        "id",
        "id",
        "invalid",
        "invalid",
        "document:bundle",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "document:receipt",
        "document:get",
        "invalid",
        "invalid",
    ]
    assert report["support"] == {"ok": True, "reason": None}


def test_bundle_keys_must_be_the_pinned_keys(report: dict[str, Any], vectors: dict[str, Any]) -> None:
    """A bundle's carried keys are pinned kid for kid: another key (or another encoding of it)
    under a known kid, or a kid the pinned set lacks, fails; nothing is matched by trying keys."""
    first = vectors["public_keys"]["keys"][0]["kid"]
    every = [key["kid"] for key in vectors["public_keys"]["keys"]]
    cases = report["bundle_keys"]
    assert {case["id"] for case in cases.values()} == {"bundle_keys"}
    assert cases["same"] == {"id": "bundle_keys", "ok": True, "differing": [], "unknown": []}
    assert cases["none carried"]["ok"] is True
    assert cases["other key, same kid"] == {"id": "bundle_keys", "ok": False, "differing": [first], "unknown": []}
    assert cases["unknown kid"] == {"id": "bundle_keys", "ok": False, "differing": [], "unknown": ["stranger"]}
    assert cases["non-canonical encoding"]["ok"] is False
    assert cases["non-canonical encoding"]["differing"] == [first]
    assert cases["carried keys not a list"]["ok"] is False
    assert cases["empty pinned set"] == {"id": "bundle_keys", "ok": False, "differing": [], "unknown": every}


# ---------------------------------------------------------------- the trust root, as the page reads it

TRUST_ROOT_HARNESS = """
const read = await import(process.argv[1]);
const files = JSON.parse(require('node:fs').readFileSync(0, 'utf8'));
const out = [];
for (const text of files) {
  try {
    const pins = await read.readPinned(text, 'trust-root.json');
    out.push({ kind: pins.kind, kids: pins.keys.keys.map((k) => k.kid), origin: pins.log ? pins.log.origin : null });
  } catch (err) {
    out.push({ error: err.constructor.name, message: err.message });
  }
}
console.log(JSON.stringify(out));
"""


def trust_root_variants() -> list[tuple[str, str]]:
    """The documented example, and copies each one fault away from it (docs/trust-root.md,
    "Format"), as (what, text)."""
    doc = (REPO / "docs" / "trust-root.md").read_text()
    start = doc.index("```json\n", doc.index("### Example")) + len("```json\n")
    example: dict[str, Any] = json.loads(doc[start : doc.index("\n```", start)])
    log, keys = example["log"], example["receipt_keys"]
    other_policy = log["policy"].replace(log["vkey"], log["vkey"].replace("+ARBbkm", "+ARBbkn"))

    def variant(**changes: Any) -> str:
        return json.dumps({**example, **changes})

    return [
        ("the documented example", json.dumps(example)),
        ("no log", variant(log=None)),
        ("an unknown member", variant(extra=1)),
        ("no tsa_roots_pem", json.dumps({k: v for k, v in example.items() if k != "tsa_roots_pem"})),
        ("version 2", variant(version=2)),
        ("a trailing slash", variant(service_url="https://proof.example/")),
        ("no receipt keys", variant(receipt_keys=[])),
        ("a duplicate kid", variant(receipt_keys=[keys[0], {**keys[1], "kid": keys[0]["kid"]}])),
        (
            "a short key",
            variant(receipt_keys=[{**keys[0], "public_key_base64url": keys[0]["public_key_base64url"][:-1]}]),
        ),
        ("a kid with a space", variant(receipt_keys=[{**keys[0], "kid": "a b"}])),
        ("vkey named for another origin", variant(log={**log, "origin": "other.example/log"})),
        ("a vkey whose key id is wrong", variant(log={**log, "vkey": log["vkey"].replace("+91698d43+", "+91698d44+")})),
        ("the policy of another log", variant(log={**log, "policy": other_policy})),
        ("a policy that does not parse", variant(log={**log, "policy": "quorum nobody\n"})),
        ("a certificate twice", variant(tsa_roots_pem=example["tsa_roots_pem"] * 2)),
        ("not a certificate", variant(tsa_roots_pem=["hello"])),
    ]


def test_the_page_reads_a_trust_root_as_the_library_does() -> None:
    """Every variant the library's parse_trust_root refuses, the page refuses as not usable
    (naming the field); the ones it accepts, the page accepts with the same keys and log."""
    from execution_proof.receipts.trust_root import TrustRootError, parse_trust_root

    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the verification page's JavaScript is tested under Node.js")
    assert node is not None
    variants = trust_root_variants()
    module = str(REPO / "execution_proof" / "static" / "verify-read.js")
    done = subprocess.run(
        [node, "--input-type=commonjs", "-e", f"(async () => {{ {TRUST_ROOT_HARNESS} }})()", module],
        input=json.dumps([text for _, text in variants]).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    results = json.loads(done.stdout)
    accepted = []
    for (what, text), got in zip(variants, results, strict=True):
        try:
            root = parse_trust_root(text)
        except TrustRootError:
            assert got.get("error") == "ReadError", (what, got)
            assert "is not a usable trust root" in got["message"], (what, got)
            continue
        accepted.append(what)
        assert got == {"kind": "trust_root", "kids": list(root.keys.keys), "origin": root.log_origin}, what
    # A trailing slash is read (the file's writer never puts one there).
    assert accepted == ["the documented example", "no log", "a trailing slash"]
