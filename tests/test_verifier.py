"""receipts/verifier.py on its own: receipts, chain links, walk steps and bundles, with keys
and receipts made in memory (no store, no server, no files)."""

from __future__ import annotations

from typing import Any

import pytest

from execution_proof.receipts.model import CreateRequest, build_receipt, place_in_chain
from execution_proof.receipts.signing import KeyRing, load_key_ring, new_key_set
from execution_proof.receipts.verifier import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    BUNDLE_VERSIONS,
    BundleError,
    bundle_parts,
    carried_key_ring,
    carried_keys_match,
    check_bundle_chain,
    check_link,
    check_receipt,
    is_bundle,
    recompute_hash_or_none,
    unreadable_receipt_result,
    verify_receipt,
    walk_step,
)

OLD = new_key_set("old-1")
NEW = new_key_set("new-2")
# The service after a rotation: "new-2" signs, "old-1" is retired but still published.
ROTATED = load_key_ring({"active_kid": "new-2", "keys": OLD["keys"] + NEW["keys"]})
PUBLIC = load_key_ring(ROTATED.public_keys_json())


def issue(keyring: KeyRing, prev: str | None, n: int, project_id: str = "prj_A") -> dict[str, Any]:
    req = CreateRequest(
        input_hash=f"sha256:{n:064x}",  # type: ignore[arg-type]
        output_hash=None,
        params_hash=None,
        env_hash=None,
        code_ref=f"build-{n}",
        run_id=None,
        tags=None,
        receipt_kind=None,
        prev_receipt_hash=prev,  # type: ignore[arg-type]
        claimed_project_id=None,
        claimed_actor_id=None,
    )
    return build_receipt(
        req,
        receipt_id=f"rcpt_{n:026d}",
        project_id=project_id,
        actor_id="act_1",
        created_at="2025-01-01T00:00:00.000Z",
        placement=place_in_chain(prev, prev),
        keyring=keyring,
    )


FIRST = issue(load_key_ring(OLD), None, 1)  # signed before the rotation
SECOND = issue(ROTATED, FIRST["receipt_hash"], 2)
THIRD = issue(ROTATED, SECOND["receipt_hash"], 3)


def bundle(**members: Any) -> dict[str, Any]:
    document = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "receipt": THIRD,
        "keys": PUBLIC.public_keys_json(),
        "chain": [SECOND, FIRST],
        "chain_complete": True,
    }
    document.update(members)
    return document


def test_a_valid_receipt_passes_every_check() -> None:
    check = check_receipt(THIRD, PUBLIC)
    assert check.receipt_hash_recompute and check.signature
    assert check.recomputed_receipt_hash == THIRD["receipt_hash"]
    assert (check.kid, check.key_known, check.key_active) == ("new-2", True, True)
    result = verify_receipt(
        THIRD, PUBLIC, input_hash=THIRD["input_hash"].upper(), output_hash=None, prev_receipt=SECOND
    )
    assert result["ok"] is True
    assert result["checks"] == {
        "signature": True,
        "hash_match": True,
        "receipt_hash_recompute": True,
        "chain_link": True,
    }
    assert result["chain"] == {
        "prev_receipt_hash": SECOND["receipt_hash"],
        "prev_found": True,
        "prev_receipt_hash_recompute": True,
    }


@pytest.mark.parametrize("field", ["input_hash", "code_ref", "created_at", "prev_receipt_hash", "project_id"])
def test_an_altered_signed_field_fails_the_recompute_but_not_the_signature(field: str) -> None:
    altered = {**THIRD, field: "sha256:" + "e" * 64}
    check = check_receipt(altered, PUBLIC)
    assert check.receipt_hash_recompute is False
    assert check.recomputed_receipt_hash not in (None, THIRD["receipt_hash"])
    assert check.signature is True  # the signature covers receipt_hash, which was left alone
    assert verify_receipt(altered, PUBLIC, input_hash=None, output_hash=None, prev_receipt=SECOND)["ok"] is False


def test_an_altered_receipt_hash_fails_both_and_an_unsigned_field_fails_neither() -> None:
    rehashed = check_receipt({**THIRD, "receipt_hash": "sha256:" + "0" * 64}, PUBLIC)
    assert (rehashed.receipt_hash_recompute, rehashed.signature) == (False, False)
    unsigned = check_receipt({**THIRD, "receipt_kind": "document"}, PUBLIC)
    assert (unsigned.receipt_hash_recompute, unsigned.signature) == (True, True)


def test_an_unreadable_record_recomputes_to_none() -> None:
    unreadable = {**THIRD, "run_id": 2**64}  # beyond what RFC 8785 can write
    assert recompute_hash_or_none(unreadable) is None
    check = check_receipt(unreadable, PUBLIC)
    assert check.recomputed_receipt_hash is None and check.receipt_hash_recompute is False


@pytest.mark.parametrize("kid", ["nobody", None, 7, ["new-2"]])
def test_an_unknown_or_malformed_kid_fails_the_signature(kid: Any) -> None:
    check = check_receipt({**THIRD, "sig_kid": kid}, PUBLIC)
    assert (check.signature, check.key_known, check.key_active) == (False, False, None)
    assert check.receipt_hash_recompute is True  # sig_kid is not signed


def test_another_key_under_the_right_kid_fails_the_signature() -> None:
    impostor = load_key_ring({"active_kid": "new-2", "keys": new_key_set("new-2")["keys"]})
    check = check_receipt(THIRD, impostor)
    assert check.key_known is True and check.signature is False


def test_a_receipt_signed_by_a_retired_key_verifies_and_says_retired() -> None:
    check = check_receipt(FIRST, PUBLIC)
    assert check.signature and check.receipt_hash_recompute
    assert (check.kid, check.key_known, check.key_active) == ("old-1", True, False)
    without_old = load_key_ring({"active_kid": "new-2", "keys": NEW["keys"]})
    assert check_receipt(FIRST, without_old).signature is False


def test_a_chain_link_needs_the_named_hash_the_project_and_a_consistent_entry() -> None:
    good = check_link(THIRD["prev_receipt_hash"], SECOND, "prj_A", PUBLIC)
    assert (good.linked, good.receipt_hash_recompute, good.signature, good.same_project) == (True, True, True, True)
    assert check_link(THIRD["prev_receipt_hash"], FIRST, "prj_A", PUBLIC).linked is False
    assert check_link(None, SECOND, "prj_A", PUBLIC).linked is False
    assert check_link(THIRD["prev_receipt_hash"], SECOND, "prj_B", PUBLIC).same_project is False
    tampered = check_link(THIRD["prev_receipt_hash"], {**SECOND, "code_ref": "x"}, "prj_A", PUBLIC)
    assert tampered.linked and not tampered.receipt_hash_recompute


def test_the_service_chain_link_fails_for_a_missing_foreign_or_tampered_previous_receipt() -> None:
    def chain(prev: dict[str, Any] | None) -> dict[str, Any]:
        return verify_receipt(THIRD, PUBLIC, input_hash=None, output_hash=None, prev_receipt=prev)

    assert chain(None)["checks"]["chain_link"] is False
    assert chain(None)["chain"]["prev_found"] is False
    foreign = issue(ROTATED, FIRST["receipt_hash"], 2, project_id="prj_B")
    assert chain({**SECOND, "project_id": "prj_B"})["checks"]["chain_link"] is False
    assert chain(foreign)["checks"]["chain_link"] is False
    tampered = chain({**SECOND, "code_ref": "x"})
    assert tampered["checks"]["chain_link"] is False and tampered["chain"]["prev_found"] is True
    first = verify_receipt(FIRST, PUBLIC, input_hash=None, output_hash=None, prev_receipt=None)
    assert first["checks"]["chain_link"] is True  # the start of a chain names nothing


def test_the_service_check_verifies_one_signature_and_trusts_its_stored_previous_receipt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``POST /v1/verify`` reads the previous receipt from its own store: it checks that
    receipt's link and hash but not its signature, so a request costs one Ed25519 check."""
    calls: list[str] = []
    real_verify = KeyRing.verify

    def counting_verify(ring: KeyRing, kid: str, receipt_hash: str, signature: str) -> bool:
        calls.append(receipt_hash)
        return real_verify(ring, kid, receipt_hash, signature)

    monkeypatch.setattr(KeyRing, "verify", counting_verify)
    unsigned_prev = {**SECOND, "signature": "not-a-signature"}
    result = verify_receipt(THIRD, PUBLIC, input_hash=None, output_hash=None, prev_receipt=unsigned_prev)
    assert result["ok"] and result["checks"]["chain_link"]
    assert calls == [THIRD["receipt_hash"]]
    assert check_link(SECOND["receipt_hash"], unsigned_prev, "prj_A", None).signature is None
    assert check_link(SECOND["receipt_hash"], unsigned_prev, "prj_A", PUBLIC).signature is False


def test_the_service_check_compares_hashes_case_insensitively_and_output_only_when_sent() -> None:
    other = "sha256:" + "9" * 64
    assert verify_receipt(THIRD, PUBLIC, input_hash=other, output_hash=None, prev_receipt=SECOND)["ok"] is False
    wrong_output = verify_receipt(THIRD, PUBLIC, input_hash=THIRD["input_hash"], output_hash=other, prev_receipt=SECOND)
    assert wrong_output["checks"]["hash_match"] is False


def test_an_unreadable_record_fails_every_check() -> None:
    result = unreadable_receipt_result("rcpt_x")
    assert result["ok"] is False and result["receipt_id"] == "rcpt_x"
    assert not any(result["checks"].values())


def test_a_walk_step_reports_found_linked_signed_same_project() -> None:
    step = walk_step(THIRD, SECOND["receipt_hash"], SECOND, PUBLIC)
    assert step == {
        "receipt_id": SECOND["receipt_id"],
        "receipt_hash": SECOND["receipt_hash"],
        "found": True,
        "receipt_hash_recompute": True,
        "signature": True,
        "same_project": True,
        "ok": True,
    }
    assert walk_step(THIRD, SECOND["receipt_hash"], None, PUBLIC) == {
        "receipt_hash": SECOND["receipt_hash"],
        "found": False,
        "ok": False,
    }
    wrong_receipt = walk_step(THIRD, SECOND["receipt_hash"], FIRST, PUBLIC)
    assert wrong_receipt["receipt_hash_recompute"] is False and wrong_receipt["ok"] is False
    unsigned = walk_step(THIRD, SECOND["receipt_hash"], {**SECOND, "signature": "A" * 86}, PUBLIC)
    assert unsigned["signature"] is False and unsigned["ok"] is False


def test_a_whole_bundle_verifies_and_is_complete() -> None:
    parts = bundle_parts(bundle())
    assert parts.receipt is THIRD and parts.chain == [SECOND, FIRST] and parts.claimed_complete is True
    part, ok = check_bundle_chain(parts.receipt, parts.chain, PUBLIC, parts.claimed_complete)
    assert ok is True
    assert part["complete"] is True and part["truncated"] is False
    assert [link["receipt_id"] for link in part["links"]] == [SECOND["receipt_id"], FIRST["receipt_id"]]
    assert all(link["linked"] and link["ok"] for link in part["links"])


def test_a_bundle_with_a_broken_link_fails_at_that_link() -> None:
    stranger = issue(ROTATED, None, 9)  # self-consistent and signed, but not the receipt SECOND names
    part, ok = check_bundle_chain(THIRD, [SECOND, stranger], PUBLIC, False)
    assert ok is False
    assert [link["ok"] for link in part["links"]] == [True, False]
    assert part["links"][1]["linked"] is False
    assert part["links"][1]["receipt_hash_recompute"] and part["links"][1]["signature"]


def test_a_bundle_with_reordered_or_foreign_entries_fails() -> None:
    assert check_bundle_chain(THIRD, [FIRST, SECOND], PUBLIC, False)[1] is False
    foreign = issue(ROTATED, FIRST["receipt_hash"], 2, project_id="prj_B")
    part, ok = check_bundle_chain({**THIRD, "prev_receipt_hash": foreign["receipt_hash"]}, [foreign], PUBLIC, False)
    assert ok is False and part["links"][0]["same_project"] is False and part["links"][0]["linked"] is True


def test_a_partial_segment_passes_unless_it_claims_to_be_complete() -> None:
    part, ok = check_bundle_chain(THIRD, [SECOND], PUBLIC, False)
    assert ok is True and part["complete"] is False
    part, ok = check_bundle_chain(THIRD, [SECOND], PUBLIC, True)
    assert ok is False and part["claimed_complete"] is True


def test_the_bundle_format_and_version_are_checked() -> None:
    assert is_bundle(bundle()) is True
    assert is_bundle(bundle(format="eps-receipt")) is False
    assert is_bundle(THIRD) is False and is_bundle([bundle()]) is False
    assert BUNDLE_VERSION in BUNDLE_VERSIONS
    for version in (3, 0, None, "1"):
        with pytest.raises(BundleError, match="unsupported bundle version"):
            bundle_parts(bundle(version=version))


@pytest.mark.parametrize(
    "members", [{"receipt": "x"}, {"receipt": None}, {"chain": {"a": 1}}, {"chain": [SECOND, 1]}, {"chain": None}]
)
def test_a_malformed_bundle_is_refused(members: dict[str, Any]) -> None:
    with pytest.raises(BundleError, match="the bundle is malformed"):
        bundle_parts(bundle(**members))


def test_carried_keys_must_be_the_pinned_keys() -> None:
    assert carried_keys_match(PUBLIC.public_keys_json(), PUBLIC) == (True, [])
    swapped = load_key_ring({"active_kid": "new-2", "keys": new_key_set("new-2")["keys"]}).public_keys_json()
    assert carried_keys_match(swapped, PUBLIC) == (False, ["new-2"])
    unknown = load_key_ring(new_key_set("extra")).public_keys_json()
    assert carried_keys_match(unknown, PUBLIC) == (False, ["extra"])
    assert carried_keys_match("junk", PUBLIC) == (False, [])


def test_a_carried_key_ring_tolerates_an_absent_active_kid_and_refuses_a_malformed_set() -> None:
    old_only = {"keys": load_key_ring(OLD).public_keys_json()["keys"], "active_kid": "new-2"}
    ring = carried_key_ring(old_only)
    assert list(ring.keys) == ["old-1"] and ring.active_kid == "new-2" and not ring.can_sign
    assert check_receipt(FIRST, ring).signature is True
    assert carried_key_ring({"keys": [], "active_kid": "new-2"}).keys == {}
    with pytest.raises(BundleError, match="the bundle's key set is malformed"):
        carried_key_ring({"keys": [{"kid": "k"}]})
    with pytest.raises(BundleError, match="the bundle's key set is malformed"):
        carried_key_ring("junk")
