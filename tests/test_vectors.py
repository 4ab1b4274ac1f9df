"""The receipt format: committed vectors, canonical bytes, and a verifier built from the docs.

- The project's code reproduces every committed vector byte for byte (receipt, canonical
  bytes, receipt_hash, signature); the vectors file itself is never regenerated here.
- ``receipts.canonical.canonical_bytes`` equals ``rfc8785.dumps`` and an independent
  strings-only JCS (tests/independent_verifier.py) on generated receipts.
- The independent verifier, written only from docs/receipt-format.md, accepts every vector
  and receipts issued through the API, follows chains by hash, handles the retired key, and
  rejects any single tampered signed field (``receipt_kind`` is unsigned by design).
"""

from __future__ import annotations

import copy
import importlib.util
import re
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execution_proof.receipts.canonical import UNSIGNED_FIELDS, canonical_bytes, compute_receipt_hash, signed_payload
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.ids import is_project_id, is_receipt_id
from execution_proof.receipts.model import (
    RECEIPT_FIELDS,
    CreateRequest,
    build_receipt,
    parse_create_request,
    place_in_chain,
)
from execution_proof.receipts.signing import KeyRing, load_key_ring
from execution_proof.receipts.verifier import verify_receipt
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests import independent_verifier as iv
from tests.conftest import ASSETS, REPO, auth, hash_of

DOC = REPO / "docs" / "receipt-format.md"
VECTORS = orjson.loads((ASSETS / "receipt_vectors.json").read_bytes())
CASES = {case["name"]: case for case in VECTORS["cases"]}
FOUR_UNSIGNED = {"receipt_hash", "signature", "sig_kid", "receipt_kind"}
SIGNED_FIELDS = [f for f in RECEIPT_FIELDS if f not in FOUR_UNSIGNED]
B64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
HASH_FIELDS = {
    "input_hash",
    "output_hash",
    "params_hash",
    "env_hash",
    "prev_receipt_hash",
    "expected_prev_receipt_hash",
}


def ring_for(case: dict[str, Any]) -> KeyRing:
    """A key ring that signs with the case's private seed under the case's kid."""
    seed = bytes.fromhex(case["private_key_seed_hex"])
    return load_key_ring(
        {"active_kid": case["kid"], "keys": [{"kid": case["kid"], "private_key_base64url": b64url_encode(seed)}]}
    )


def ok(result: dict[str, Any]) -> bool:
    return bool(result["ok"])


# --- (i) the committed vectors, reproduced by the project's code ---------------------------


def test_vectors_file_covers_the_required_cases(vectors: dict[str, Any], keyring: KeyRing) -> None:
    names = [case["name"] for case in vectors["cases"]]
    assert len(names) == len(set(names)) >= 4
    assert {"minimal-first", "all-fields-unicode", "main-explicit-prev", "branch", "retired-key"} <= set(names)
    assert vectors["public_keys"] == keyring.public_keys_json()
    minimal = CASES["minimal-first"]["receipt"]
    assert minimal["prev_receipt_hash"] is None and minimal["chain_status"] == "main"
    assert all(minimal[f] is None for f in ("output_hash", "params_hash", "env_hash", "code_ref", "run_id", "tags"))
    full = CASES["all-fields-unicode"]["receipt"]
    assert all(full[f] is not None for f in RECEIPT_FIELDS)
    assert full["receipt_kind"] == "release"
    tag_text = "".join(k + v for k, v in full["tags"].items())
    for char in ('"', "\\", "\n", "\x1f", "\x7f", "\u2028", "\U0001f600", "\ue000"):
        assert char in tag_text
    assert "\ue000" in full["tags"] and "\U0001f600" in full["tags"]
    assert CASES["main-explicit-prev"]["request"]["prev_receipt_hash"] == CASES["main-explicit-prev"]["tip"]
    assert CASES["branch"]["receipt"]["chain_status"] == "branch"
    assert CASES["retired-key"]["kid"] == "test-2025"


@pytest.mark.parametrize("name", list(CASES))
def test_code_reproduces_vector_byte_for_byte(name: str) -> None:
    case = CASES[name]
    req = parse_create_request(case["request"])
    placement = place_in_chain(req.prev_receipt_hash, case["tip"])
    receipt = build_receipt(
        req,
        receipt_id=case["receipt_id"],
        project_id=case["project_id"],
        actor_id=case["actor_id"],
        created_at=case["created_at"],
        placement=placement,
        keyring=ring_for(case),
    )
    assert list(receipt.items()) == list(case["receipt"].items())
    assert list(receipt) == list(RECEIPT_FIELDS)
    assert orjson.dumps(receipt) == orjson.dumps(case["receipt"])
    canonical = canonical_bytes(signed_payload(receipt))
    assert canonical.hex() == case["canonical_bytes_hex"]
    assert canonical == case["canonical_text"].encode("utf-8")
    assert receipt["receipt_hash"] == case["receipt_hash"] == case["signature_input_ascii"]
    assert receipt["signature"] == case["signature"]
    assert receipt["sig_kid"] == case["kid"]


@pytest.mark.parametrize("name", list(CASES))
def test_vector_internal_consistency(name: str, vectors: dict[str, Any]) -> None:
    case = CASES[name]
    receipt = case["receipt"]
    assert case["signed_payload"] == {k: v for k, v in receipt.items() if k not in FOUR_UNSIGNED}
    assert list(case["signed_payload"]) == SIGNED_FIELDS
    assert UNSIGNED_FIELDS == FOUR_UNSIGNED
    assert rfc8785.dumps(case["signed_payload"]).hex() == case["canonical_bytes_hex"]
    assert compute_receipt_hash(receipt) == case["receipt_hash"]
    assert (receipt["receipt_id"], receipt["project_id"], receipt["actor_id"], receipt["created_at"]) == (
        case["receipt_id"],
        case["project_id"],
        case["actor_id"],
        case["created_at"],
    )
    assert is_receipt_id(receipt["receipt_id"]) and is_project_id(receipt["project_id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", receipt["created_at"])
    listed = {k["kid"]: k["public_key_base64url"] for k in vectors["public_keys"]["keys"]}
    assert listed[case["kid"]] == case["public_key_base64url"]
    assert ring_for(case).keys[case["kid"]].public_key_base64url == case["public_key_base64url"]
    checks = verify_receipt(
        receipt, load_key_ring(vectors["public_keys"]), input_hash=None, output_hash=None, prev_receipt=None
    )["checks"]
    assert checks["signature"] and checks["receipt_hash_recompute"]


def test_vector_tips_form_the_documented_chain() -> None:
    """Each case's tip is the newest main receipt of its project before it (docs/receipt-format.md, chain fields)."""
    tips: dict[str, str | None] = {}
    for case in sorted(VECTORS["cases"], key=lambda c: c["created_at"]):
        receipt = case["receipt"]
        assert case["tip"] == tips.get(case["project_id"]) or (
            case["name"] == "branch-without-tip" and case["tip"] is None
        )
        assert receipt["expected_prev_receipt_hash"] == case["tip"]
        if receipt["chain_status"] == "main":
            assert receipt["prev_receipt_hash"] == case["tip"]
            tips[case["project_id"]] = receipt["receipt_hash"]
        else:
            assert receipt["prev_receipt_hash"] not in (None, case["tip"])
    assert CASES["branch"]["receipt"]["prev_receipt_hash"] == CASES["minimal-first"]["receipt_hash"]
    assert CASES["main-implicit-prev"]["request"].get("prev_receipt_hash") is None
    assert CASES["main-implicit-prev"]["receipt"]["prev_receipt_hash"] == CASES["main-explicit-prev"]["receipt_hash"]


def test_generator_still_reproduces_the_committed_file() -> None:
    """make_vectors.py, run in memory, gives exactly the committed text (it is not rewritten)."""
    spec = importlib.util.spec_from_file_location("make_vectors", ASSETS / "make_vectors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render(module.build_vectors()) == (ASSETS / "receipt_vectors.json").read_text()


# --- (ii) canonical bytes: the project's function, rfc8785 and the independent JCS agree ---

TRICKY = [
    '"', "\\", "/", "\x00", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\x1f", " ", "\x7f", "\x80", "\u00e9",
    "\u2028", "\u2029", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0001f600", "\U0010ffff", "A", "a", "Z",
]  # fmt: skip
unicode_text = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(TRICKY)),
    max_size=30,
)
tags_strategy = st.none() | st.dictionaries(unicode_text.filter(bool), unicode_text, max_size=20)
receipt_strategy = st.fixed_dictionaries(
    {field: (tags_strategy if field == "tags" else st.none() | unicode_text) for field in RECEIPT_FIELDS}
)


@settings(max_examples=400 * settings.default.max_examples // 100, suppress_health_check=[HealthCheck.too_slow])
@given(receipt=receipt_strategy)
def test_canonical_bytes_agree_with_rfc8785_and_independent_jcs(receipt: dict[str, Any]) -> None:
    payload = signed_payload(receipt)
    ours = canonical_bytes(payload)
    assert ours == rfc8785.dumps(payload) == iv.jcs_bytes(payload)
    assert canonical_bytes(receipt) == iv.jcs_bytes(receipt)
    assert orjson.loads(ours) == payload


@given(keys=st.lists(unicode_text, unique=True, max_size=20))
def test_member_order_is_utf16_code_units(keys: list[str]) -> None:
    obj = dict.fromkeys(keys, "v")
    order = list(orjson.loads(canonical_bytes(obj)))
    assert order == sorted(keys, key=lambda k: k.encode("utf-16-be"))
    assert order == sorted(keys, key=iv.utf16_units)


def test_known_canonical_forms() -> None:
    """Hand-written expectations for the rules docs/receipt-format.md lists for canonical bytes."""
    cases = [
        ({"b": None, "a": "x"}, '{"a":"x","b":null}'),
        ({"\ue000": "1", "\U0001f600": "2"}, '{"\U0001f600":"2","\ue000":"1"}'),
        ({"k": '"\\/\b\f\n\r\t\x00\x1f\x7f\u2028'}, '{"k":"\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f\u2028"}'),
        ({"a": {"z": "1", "Z": "2", "é": "3"}}, '{"a":{"Z":"2","z":"1","é":"3"}}'),
    ]
    for value, text in cases:
        assert canonical_bytes(value) == text.encode("utf-8") == iv.jcs_bytes(value)


@settings(max_examples=60 * settings.default.max_examples // 100, deadline=None)
@given(
    code_ref=st.none() | unicode_text,
    run_id=st.none() | unicode_text,
    tags=st.none() | st.dictionaries(unicode_text.filter(bool), unicode_text.filter(bool), min_size=1, max_size=20),
    kind=st.sampled_from([None, "release", "document", "audit_pack"]),
    prev=st.sampled_from([None, hash_of("p1")]),
    tip=st.sampled_from([None, hash_of("p1"), hash_of("p2")]),
)
def test_any_receipt_the_code_signs_verifies_independently(
    code_ref: str | None,
    run_id: str | None,
    tags: dict[str, str] | None,
    kind: str | None,
    prev: str | None,
    tip: str | None,
) -> None:
    """Validation aside, whatever text the service signs, the doc-only verifier accepts."""
    case = CASES["minimal-first"]
    req = CreateRequest(
        input_hash=hash_of("in"),  # type: ignore[arg-type]
        output_hash=None,
        params_hash=hash_of("params"),  # type: ignore[arg-type]
        env_hash=None,
        code_ref=code_ref,
        run_id=run_id,
        tags=tags,
        receipt_kind=kind,
        prev_receipt_hash=prev,  # type: ignore[arg-type]
        claimed_project_id=None,
        claimed_actor_id=None,
    )
    receipt = build_receipt(
        req,
        receipt_id=case["receipt_id"],
        project_id=case["project_id"],
        actor_id=case["actor_id"],
        created_at=case["created_at"],
        placement=place_in_chain(prev, tip),
        keyring=ring_for(case),
    )
    assert ok(iv.verify(orjson.loads(orjson.dumps(receipt)), VECTORS["public_keys"]))


# --- (iii) tampering with any single field is rejected -------------------------------------


def tampered_versions(receipt: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One changed copy per way of editing one field (values, presence, type)."""
    out: list[tuple[str, dict[str, Any]]] = []

    def variant(label: str, field: str, value: Any) -> None:
        copy_ = copy.deepcopy(receipt)
        copy_[field] = value
        out.append((label, copy_))

    for field in SIGNED_FIELDS:
        value = receipt[field]
        if field == "tags":
            if value is None:
                variant("tags set", field, {"k": "v"})
                variant("tags empty object", field, {})
            else:
                first = next(iter(value))
                variant("tag value changed", field, {**value, first: value[first] + "x"})
                variant("tag added", field, {**value, "extra": "x"})
                variant("tag removed", field, {k: v for k, v in value.items() if k != first})
                variant("tag renamed", field, {(k + "x" if k == first else k): v for k, v in value.items()})
                variant("tags null", field, None)
            continue
        if value is None:
            variant(f"{field} set", field, hash_of("tamper") if field in HASH_FIELDS else "x")
            variant(f"{field} empty string", field, "")
        else:
            if field in HASH_FIELDS:
                swapped = value[:-1] + ("0" if value[-1] != "0" else "1")
                variant(f"{field} one hex digit", field, swapped)
                variant(f"{field} upper case", field, value.upper().replace("SHA256:", "sha256:"))
            else:
                variant(f"{field} appended", field, value + "x")
                variant(f"{field} last char", field, value[:-1] + ("y" if value[-1] != "y" else "z"))
            variant(f"{field} null", field, None)
        without = copy.deepcopy(receipt)
        del without[field]
        out.append((f"{field} removed", without))
    variant("extra signed key", "note", None)
    digits = receipt["receipt_hash"]
    variant("receipt_hash other", "receipt_hash", digits[:-1] + ("0" if digits[-1] != "0" else "1"))
    variant("receipt_hash upper", "receipt_hash", "sha256:" + digits[7:].upper())
    variant("receipt_hash of another receipt", "receipt_hash", hash_of("another"))
    sig = receipt["signature"]
    variant("signature first char", "signature", ("B" if sig[0] != "B" else "C") + sig[1:])
    variant("signature padded", "signature", sig + "==")
    # Same 64 bytes for a lenient decoder (only the 4 unused low bits change): still not the signature.
    last = B64URL_ALPHABET.index(sig[-1])
    variant("signature non-canonical last char", "signature", sig[:-1] + B64URL_ALPHABET[last ^ 1])
    variant("signature of another receipt", "signature", CASES["branch"]["signature"])
    variant("sig_kid other known", "sig_kid", "test-2025" if receipt["sig_kid"] != "test-2025" else "test-2026")
    variant("sig_kid unknown", "sig_kid", "nope-1")
    variant("sig_kid null", "sig_kid", None)
    return [(label, value) for label, value in out if value != receipt]


@pytest.mark.parametrize("name", list(CASES))
def test_tampering_any_single_field_is_rejected(name: str) -> None:
    receipt = CASES[name]["receipt"]
    assert ok(iv.verify(receipt, VECTORS["public_keys"]))
    versions = tampered_versions(receipt)
    assert len(versions) > 40
    for label, tampered in versions:
        result = iv.verify(tampered, VECTORS["public_keys"])
        assert not result["ok"], f"tampering not detected: {label}"


@pytest.mark.parametrize("name", list(CASES))
def test_unsigned_receipt_kind_and_member_order_do_not_matter(name: str) -> None:
    """Documented: receipt_kind is not signed; JSON member order is irrelevant (JCS sorts)."""
    receipt = CASES[name]["receipt"]
    for kind in (None, "release", "document", "audit_pack", "workflow_audit"):
        assert ok(iv.verify({**receipt, "receipt_kind": kind}, VECTORS["public_keys"]))
    reordered = dict(reversed(list(receipt.items())))
    if receipt["tags"]:
        reordered["tags"] = dict(reversed(list(receipt["tags"].items())))
    assert ok(iv.verify(reordered, VECTORS["public_keys"]))
    without_kind = {k: v for k, v in receipt.items() if k != "receipt_kind"}
    assert ok(iv.verify(without_kind, VECTORS["public_keys"]))


def test_malformed_inputs_are_rejected_without_raising() -> None:
    receipt = CASES["minimal-first"]["receipt"]
    keys = VECTORS["public_keys"]
    for bad in (
        {**receipt, "code_ref": 5},
        {**receipt, "code_ref": True},
        {**receipt, "tags": ["a"]},
        {**receipt, "tags": {"a": 1}},
        {**receipt, "code_ref": "\ud800"},
        {**receipt, "receipt_hash": "sha256:\u00e9" + receipt["receipt_hash"][8:]},
        {**receipt, "signature": 12},
        {k: v for k, v in receipt.items() if k != "signature"},
    ):
        assert not ok(iv.verify(bad, keys))
    for bad_keys in ({}, {"keys": None}, {"keys": [{"kid": "test-2026", "alg": "Ed448", "public_key_base64url": "A"}]}):
        assert not ok(iv.verify(receipt, bad_keys))
    assert not ok(iv.verify("not a receipt", keys))  # type: ignore[arg-type]


# --- (iv) every vector, the retired key, unknown kids --------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_independent_verifier_accepts_every_vector(name: str) -> None:
    case = CASES[name]
    result = iv.verify(case["receipt"], VECTORS["public_keys"])
    assert result == {
        "ok": True,
        "checks": {"format": True, "receipt_hash_recompute": True, "key_known": True, "signature": True},
        "recomputed_receipt_hash": case["receipt_hash"],
    }
    assert iv.jcs_bytes(case["signed_payload"]).hex() == case["canonical_bytes_hex"]
    assert iv.signed_payload(case["receipt"]) == case["signed_payload"]


def test_retired_key_receipt_verifies_only_with_a_key_set_listing_it() -> None:
    receipt = CASES["retired-key"]["receipt"]
    assert receipt["sig_kid"] == "test-2025" != VECTORS["public_keys"]["active_kid"]
    assert ok(iv.verify(receipt, VECTORS["public_keys"]))
    active_only = {
        "keys": [k for k in VECTORS["public_keys"]["keys"] if k["kid"] == "test-2026"],
        "active_kid": "test-2026",
    }
    result = iv.verify(receipt, active_only)
    assert not result["ok"]
    assert result["checks"]["key_known"] is False and result["checks"]["receipt_hash_recompute"] is True
    relabelled = iv.verify({**receipt, "sig_kid": "test-2026"}, VECTORS["public_keys"])
    assert relabelled["checks"] == {**relabelled["checks"], "key_known": True, "signature": False}


@pytest.mark.parametrize("name", list(CASES))
def test_unknown_kid_is_invalid(name: str) -> None:
    case = CASES[name]
    renamed = {
        "keys": [{**k, "kid": k["kid"] + "-renamed"} for k in VECTORS["public_keys"]["keys"]],
        "active_kid": "x",
    }
    result = iv.verify(case["receipt"], renamed)
    assert not result["ok"] and result["checks"]["key_known"] is False and result["checks"]["signature"] is False
    assert not ok(iv.verify({**case["receipt"], "sig_kid": "unknown-kid"}, VECTORS["public_keys"]))


# --- the documentation stays in step with the vectors --------------------------------------


def doc_code_block(language: str, after_heading: str) -> str:
    text = DOC.read_text()
    start = text.index(after_heading)
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(text, start)
    assert match is not None
    return match.group(1)


def test_docs_inline_the_minimal_vector() -> None:
    case = CASES["minimal-first"]
    text = DOC.read_text()
    for value in (
        case["private_key_seed_hex"],
        case["public_key_base64url"],
        case["canonical_text"],
        case["receipt_hash"],
        case["receipt_hash"].encode("ascii").hex(),
        case["signature"],
        case["request"]["input_hash"],
        bytes(ring_for(case).keys[case["kid"]].verify_key).hex(),
    ):
        assert value in text
    signature_hex = iv.b64url_strict(case["signature"], 64).hex()
    assert signature_hex in text
    assert f"{len(bytes.fromhex(case['canonical_bytes_hex']))} bytes" in text
    block = doc_code_block("json", "Receipt as `GET /v1/receipts/")
    assert orjson.loads(block) == case["receipt"]
    keys_block = doc_code_block("json", "## 6. Public keys")
    assert orjson.loads(keys_block) == VECTORS["public_keys"]
    for case_name in CASES:
        assert f"`{case_name}`" in text


def test_python_sketch_in_the_docs_works() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(doc_code_block("python", "### Python"), str(DOC), "exec"), namespace)
    sketch_verify = namespace["verify"]
    for case in VECTORS["cases"]:
        assert sketch_verify(case["receipt"], VECTORS["public_keys"]) is True
        assert namespace["jcs"](case["signed_payload"]).encode("utf-8").hex() == case["canonical_bytes_hex"]
        tampered = {**case["receipt"], "created_at": "2020-01-01T00:00:00.000Z"}
        assert sketch_verify(tampered, VECTORS["public_keys"]) is False
        assert sketch_verify({**case["receipt"], "sig_kid": "unknown"}, VECTORS["public_keys"]) is False


# --- receipts issued through the API --------------------------------------------------------


async def issue(client: Any, api_key: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    _, resp = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(api_key))
    assert resp.status == 201, resp.text
    created: dict[str, Any] = resp.json["receipt"]
    _, got = await client.get(f"/v1/receipts/{created['receipt_id']}")
    assert got.status == 200
    receipt: dict[str, Any] = got.json["receipt"]
    assert receipt == created
    assert list(receipt) == list(RECEIPT_FIELDS)
    return receipt


API_BODIES: list[dict[str, Any]] = [
    {"input_hash": hash_of("api-1")},
    {
        "input_hash": hash_of("api-2"),
        "output_hash": hash_of("api-2-out").upper().replace("SHA256:", "sha256:"),
        "params_hash": hash_of("api-2-params"),
        "env_hash": hash_of("api-2-env"),
        "code_ref": "git:abc\u2026 \U0001f680",
        "run_id": 'run "\u00e9" \\ \u2028 \x7f',
        "receipt_kind": "release",
        "tags": {
            "\ue000": "private use",
            "\U0001f600": "emoji key",
            "subject_name": "caf\u00e9 \u65e5\u672c \U0001d11e",
            "ctl": "a\nb\tc\x1fd\x00e",
            'quote"key': "x\\y",
            "dropped": None,
        },
    },
    {"input_hash": hash_of("api-3"), "receipt_kind": "document", "tags": {"workflow_stage": "review"}},
    {"input_hash": hash_of("api-4"), "run_id": "nightly", "receipt_kind": "audit_pack"},
]


async def test_api_issued_receipts_verify_independently_and_chain(client: Any, api_key: dict[str, Any]) -> None:
    _, keys_resp = await client.get("/v1/public-key")
    assert keys_resp.status == 200
    keys = keys_resp.json
    issued = []
    for body in API_BODIES:
        receipt = await issue(client, api_key, body)
        result = iv.verify(receipt, keys)
        assert result["ok"], result
        issued.append(receipt)
    # an explicit continuation of the tip, then a branch off the first receipt
    issued.append(
        await issue(client, api_key, {"input_hash": hash_of("api-5"), "prev_receipt_hash": issued[-1]["receipt_hash"]})
    )
    branch = await issue(
        client, api_key, {"input_hash": hash_of("api-6"), "prev_receipt_hash": issued[0]["receipt_hash"]}
    )
    assert ok(iv.verify(branch, keys)) and branch["chain_status"] == "branch"
    assert branch["expected_prev_receipt_hash"] == issued[-1]["receipt_hash"]

    assert [r["chain_status"] for r in issued] == ["main"] * len(issued)
    assert issued[0]["prev_receipt_hash"] is None
    assert issued[1]["output_hash"] == API_BODIES[1]["output_hash"].lower()
    assert "dropped" not in issued[1]["tags"] and issued[1]["tags"]["\U0001f600"] == "emoji key"
    for receipt in issued:
        assert ok(iv.verify(receipt, keys))

    # follow the main chain backwards by hash, within the project, from the newest receipt
    walked = [issued[-1]]
    current = issued[-1]
    while current["prev_receipt_hash"] is not None:
        prev_hash = current["prev_receipt_hash"]
        _, resp = await client.get(f"/v1/receipts/{prev_hash}", params={"project_id": current["project_id"]})
        assert resp.status == 200
        previous = resp.json["receipt"]
        assert iv.verify_chain_link(current, previous, keys)
        walked.append(previous)
        current = previous
    assert [r["receipt_id"] for r in reversed(walked)] == [r["receipt_id"] for r in issued]

    _, resp = await client.get(
        f"/v1/receipts/{branch['prev_receipt_hash']}", params={"project_id": branch["project_id"]}
    )
    assert resp.status == 200 and iv.verify_chain_link(branch, resp.json["receipt"], keys)
    upper = "sha256:" + issued[0]["receipt_hash"][7:].upper()
    _, resp = await client.get(f"/v1/receipts/{upper}", params={"project_id": issued[0]["project_id"]})
    assert resp.status == 200 and resp.json["receipt"] == issued[0]
    _, resp = await client.get(f"/v1/receipts/{issued[0]['receipt_hash']}")
    assert resp.status == 400
    _, resp = await client.get(
        f"/v1/receipts/{hash_of('never issued')}", params={"project_id": issued[0]["project_id"]}
    )
    assert resp.status == 404


async def test_receipt_signed_before_a_key_rotation_still_verifies(
    store: Any, api_key: dict[str, Any], receipt_root: str
) -> None:
    """Issued by one process's key, read and verified through another process (a key of its
    own, the same root) after the first stopped: the service lists both keys."""
    old_app = create_app(
        Settings(redis_url="redis://injected-by-tests", receipt_root=receipt_root, env="test"), store=store
    )
    old = await issue(old_app.asgi_client, api_key, {"input_hash": hash_of("before rotation"), "tags": {"k": "\u00e9"}})
    await old_app.ctx.services.close()  # that process stops

    new_app = create_app(
        Settings(redis_url="redis://injected-by-tests", receipt_root=receipt_root, env="test"), store=store
    )
    client = new_app.asgi_client
    new = await issue(client, api_key, {"input_hash": hash_of("after rotation")})
    assert new["sig_kid"] != old["sig_kid"] and new["prev_receipt_hash"] == old["receipt_hash"]
    _, keys_resp = await client.get("/v1/public-key")
    keys = keys_resp.json
    assert keys["active_kid"] == new["sig_kid"] and {k["kid"] for k in keys["keys"]} == {old["sig_kid"], new["sig_kid"]}
    _, resp = await client.get(f"/v1/receipts/{old['receipt_id']}")
    assert ok(iv.verify(resp.json["receipt"], keys))
    assert ok(iv.verify(new, keys))
    assert iv.verify_chain_link(new, resp.json["receipt"], keys)
    assert not ok(iv.verify(old, {"keys": [k for k in keys["keys"] if k["kid"] == new["sig_kid"]]}))
