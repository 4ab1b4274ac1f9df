"""Verification by certified keys (docs/verdicts.md, docs/trust-root.md): a version 2 trust root
pins receipt roots, not keys; a receipt counts when its key's certificate (from the bundle, or
from the service under ``--online``) is signed by a pinned root, covers the receipt's
``created_at``, and no revocation signed by that root covers it.

The service is tests/test_client_verify.py's fake, signing with a key that a fixed-seed root
certifies (tests/verdict_table.py's ``Roots``); its ``GET /v1/public-key`` answers each key's
certificate, the roots and the revocations, as a service with receipt roots does. The offline
documents come from the shared verdict table, which the page and the command line run too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import execution_proof
from execution_proof.cli.verify import render_report
from execution_proof.client.verifying import VerifyOptions, run_verify
from execution_proof.receipts.key_certificates import Root, certify, revoke, time_ms
from execution_proof.receipts.signing import KeyRing
from execution_proof.receipts.trust_root import TrustRootError, parse_trust_root
from tests.test_client_verify import FakeService, fake_service, no_network
from tests.verdict_table import Roots, trust_root_v2

CREATED_AT = "2026-01-01T00:00:00.000Z"  # every receipt of the fake service


@pytest.fixture(scope="module")
def roots() -> Roots:
    return Roots()


def certified_ring(roots: Roots, revocations: list[dict[str, str]] | None = None, root: Any = None) -> KeyRing:
    """The certified key (covering the fake's receipts), as the service holds it: with the roots
    it publishes and its revocations."""
    certificate = roots.certify(root or roots.root, "2025-12-31T00:00:00.000Z", "2026-01-02T00:00:00.000Z")
    published = root or roots.root
    return roots.ring(certificate).with_roots(
        {Root.of(published.public_key()).kid: published.public_key()}, revocations
    )


def pinned(tmp_path: Path, roots: Roots, url: str, revocations: list[dict[str, str]] | None = None) -> Path:
    document = trust_root_v2(roots.root, None, revocations)
    document["service_url"] = url
    path = tmp_path / "trust-root.json"
    path.write_bytes(orjson.dumps(document))
    return path


@pytest.fixture
def service(roots: Roots) -> FakeService:
    return FakeService(certified_ring(roots))


@pytest.fixture
def url(service: FakeService) -> Iterator[str]:
    with fake_service(service) as base:
        yield base


def saved(tmp_path: Path, document: Any, name: str = "receipt.json") -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(document))
    return path


def report_of(path: Path, root: Path, **options: Any) -> dict[str, Any]:
    report = run_verify(VerifyOptions(receipt_path=str(path), trust_root_path=str(root), **options))
    document: dict[str, Any] = report.to_dict()
    return document


def certified_bundle() -> dict[str, Any]:
    """The verdict table's version 2 bundle of receipts by the certified key (VALID under its
    version 2 trust root)."""
    from tests.verdict_table import build_table

    rows = {row["name"]: row["document"] for row in build_table()["rows"]}
    bundle: dict[str, Any] = rows["certified: bundle version 2, trust root version 2"]
    return bundle


# ---------------------------------------------------------------- a plain receipt


def test_offline_a_plain_receipt_has_no_certificate_at_hand(
    service: FakeService, roots: Roots, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_network(monkeypatch)
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    report = report_of(saved(tmp_path, receipt), pinned(tmp_path, roots, "http://127.0.0.1:9"))
    assert (report["verdict"], report["reason"]) == ("NOT VERIFIED", "no_key_certificate"), report
    assert report["key"]["origin"] == "certified" and report["keys_pinned"] is True
    assert report["key"]["certificate"] == {
        "state": "no_key_certificate",
        "root_kid": None,
        "not_before": None,
        "not_after": None,
    }
    assert report["checks"]["key_certificate"] is False
    assert any("--online" in note and "bundle" in note for note in report["notes"]), report["notes"]


def test_online_the_services_certificate_makes_it_valid(
    service: FakeService, roots: Roots, url: str, tmp_path: Path
) -> None:
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    report = report_of(saved(tmp_path, receipt), pinned(tmp_path, roots, url), online=True)
    assert (report["verdict"], report["reason"]) == ("VALID", None), report
    assert report["checks"]["key_certificate"] is True and report["checks"]["signature"] is True
    assert report["key"]["certificate"]["state"] == "ok" and report["key"]["active"] is True
    assert report["key"]["certificate"]["root_kid"] == Root.of(roots.root.public_key()).kid
    assert f"{url}/v1/public-key" in report["key"]["source"]
    assert "/v1/public-key" in service.paths()


def test_online_a_revocation_the_service_publishes_makes_it_invalid(roots: Roots, tmp_path: Path) -> None:
    revocation = revoke(roots.root, roots.kid, time_ms(CREATED_AT) - 1, "stolen").to_json()
    service = FakeService(certified_ring(roots, [revocation]))
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    with fake_service(service) as url:
        report = report_of(saved(tmp_path, receipt), pinned(tmp_path, roots, url), online=True)
    assert (report["verdict"], report["reason"]) == ("INVALID", "bad_signature"), report
    assert report["checks"]["signature"] is True and report["checks"]["key_certificate"] is False
    assert report["key"]["certificate"]["state"] == "revoked"
    assert report["key"]["certificate"]["revoked_after"] == revocation["revoked_after"]


def test_online_a_revocation_by_another_root_takes_nothing_away(roots: Roots, tmp_path: Path) -> None:
    """The service lists a revocation a root nobody pinned signed: it is not a pinned root's word."""
    forged = revoke(roots.stranger, roots.kid, time_ms(CREATED_AT) - 1, "not yours").to_json()
    service = FakeService(certified_ring(roots))
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    published = service.keyring.public_keys_json()
    original = service.answer

    def answer(method: str, target: str, body: bytes) -> tuple[int, Any]:
        if target.startswith("/v1/public-key"):
            service.requests.append((method, target, body))
            return 200, {**published, "revocations": [forged]}
        return original(method, target, body)

    service.answer = answer  # type: ignore[method-assign]
    with fake_service(service) as url:
        report = report_of(saved(tmp_path, receipt), pinned(tmp_path, roots, url), online=True)
    assert (report["verdict"], report["reason"]) == ("VALID", None), report


def test_online_a_key_certified_by_a_root_not_pinned_is_invalid(roots: Roots, tmp_path: Path) -> None:
    service = FakeService(certified_ring(roots, root=roots.stranger))
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    with fake_service(service) as url:
        report = report_of(saved(tmp_path, receipt), pinned(tmp_path, roots, url), online=True)
    assert (report["verdict"], report["reason"]) == ("INVALID", "bad_signature"), report
    assert report["key"]["certificate"]["state"] == "unknown_root"
    assert report["key"]["certificate"]["root_kid"] == Root.of(roots.stranger.public_key()).kid


def test_a_pinned_revocation_is_applied_offline_to_a_bundle(roots: Roots, tmp_path: Path) -> None:
    """The trust root's own revocations count without any request."""
    good = certified_bundle()
    revocation = roots.revocation()
    report = report_of(saved(tmp_path, good), pinned(tmp_path, roots, "http://127.0.0.1:9", [revocation]))
    assert report["verdict"] == "INVALID" and report["key"]["certificate"]["state"] == "revoked"
    # The chain's first receipt was made before revoked_after: its link still counts.
    assert [link["key_certificate"] for link in report["chain"]["links"]] == ["ok"]


def test_a_bundle_verified_online_also_takes_the_services_revocations(roots: Roots, tmp_path: Path) -> None:
    good = certified_bundle()
    service = FakeService(
        roots.ring().with_roots({Root.of(roots.root.public_key()).kid: roots.root.public_key()}, [roots.revocation()])
    )
    service.receipts = [good["chain"][0], good["receipt"]]
    with fake_service(service) as url:
        offline = report_of(saved(tmp_path, good), pinned(tmp_path, roots, url))
        online = report_of(saved(tmp_path, good), pinned(tmp_path, roots, url), online=True)
    assert offline["verdict"] == "VALID", offline
    assert (online["verdict"], online["key"]["certificate"]["state"]) == ("INVALID", "revoked"), online


def test_the_chain_walk_judges_every_link_by_its_certificate(
    service: FakeService, roots: Roots, url: str, tmp_path: Path
) -> None:
    service.create({"input_hash": "sha256:" + "1" * 64})
    newest = service.create({"input_hash": "sha256:" + "2" * 64})
    report = report_of(saved(tmp_path, newest), pinned(tmp_path, roots, url), online=True, chain=True)
    assert report["verdict"] == "VALID", report
    assert [link["key_certificate"] for link in report["chain"]["links"]] == ["ok"]


def test_the_library_takes_a_version_2_trust_root_object(
    service: FakeService, roots: Roots, url: str, tmp_path: Path
) -> None:
    receipt = service.create({"input_hash": "sha256:" + "1" * 64})
    root = parse_trust_root(pinned(tmp_path, roots, url).read_bytes())
    assert root.version == 2 and root.keys.keys == {}
    report = execution_proof.verify(saved(tmp_path, receipt), trust_root=root, online=True)
    assert report.ok and report.reason is None
    offline = execution_proof.verify(saved(tmp_path, receipt), trust_root=root)
    assert (offline.verdict, offline.reason) == ("NOT VERIFIED", "no_key_certificate")
    with pytest.raises(execution_proof.VerificationFailed):
        offline.raise_for_failure()


def test_a_version_1_trust_root_cannot_judge_by_roots() -> None:
    from tests.verdict_table import ring, trust_root

    root = parse_trust_root(orjson.dumps(trust_root(ring("receipt key"), None)))
    assert root.version == 1 and root.roots is None
    with pytest.raises(TrustRootError, match="version 1"):
        root.certified(root.keys)


def test_the_text_report_says_which_rule_failed(roots: Roots, tmp_path: Path) -> None:
    from tests.verdict_table import build_table

    table = build_table()
    rows = {row["name"]: row for row in table["rows"]}
    said = {}
    for name in (
        "certified: a root nobody pinned",
        "certified: the receipt outside its key's certificate",
        "certified: a certificate whose signature fails",
        "certified: the key revoked",
        "certified: bundle version 2, trust root version 2",
    ):
        row = rows[name]
        pin = saved(tmp_path, table["pins"][row["pin"]]["document"], "pin.json")
        report = run_verify(
            VerifyOptions(receipt_path=str(saved(tmp_path, copy.deepcopy(row["document"]))), trust_root_path=str(pin))
        )
        said[name] = (report.to_dict()["key"]["certificate"]["state"], render_report(report))
    assert said["certified: a root nobody pinned"][0] == "unknown_root"
    assert "a root the trust root does NOT pin" in said["certified: a root nobody pinned"][1]
    assert said["certified: the receipt outside its key's certificate"][0] == "outside_certificate"
    assert "created outside the certificate" in said["certified: the receipt outside its key's certificate"][1]
    assert said["certified: a certificate whose signature fails"][0] == "bad_certificate"
    assert "does NOT verify with the root" in said["certified: a certificate whose signature fails"][1]
    assert said["certified: the key revoked"][0] == "revoked"
    assert "REVOKED by" in said["certified: the key revoked"][1]
    assert said["certified: bundle version 2, trust root version 2"][0] == "ok"
    assert "[ok]   certificate: key" in said["certified: bundle version 2, trust root version 2"][1]


def test_a_version_2_bundle_is_read_strictly(roots: Roots, tmp_path: Path) -> None:
    """No member beyond its list (``attestation``, when present, is a well-formed envelope), and
    every key with a certificate for that very key."""
    good = certified_bundle()
    root = pinned(tmp_path, roots, "http://127.0.0.1:9")
    with pytest.raises(execution_proof.InvalidInput, match="unknown members: attestations"):
        execution_proof.verify(saved(tmp_path, {**good, "attestations": {}}), trust_root=root)
    with pytest.raises(execution_proof.InvalidInput, match=r"\(attestation\): a DSSE envelope has exactly"):
        execution_proof.verify(saved(tmp_path, {**good, "attestation": {}}), trust_root=root)
    with pytest.raises(execution_proof.InvalidInput, match="unknown members: attestation"):
        execution_proof.verify(saved(tmp_path, {**good, "version": 1, "attestation": {}}), trust_root=root)
    swapped = copy.deepcopy(good)
    another_key = roots.stranger.public_key()  # any other 32-byte key, certified by the pinned root
    other = certify(roots.root, another_key, time_ms(CREATED_AT), time_ms(CREATED_AT))
    swapped["keys"]["keys"][0]["certificate"] = other.to_json()
    with pytest.raises(execution_proof.InvalidInput, match="another key"):
        execution_proof.verify(saved(tmp_path, swapped), trust_root=root)


# ---------------------------------------------------------------- keys.json beside a version 2 trust root


def table_rows() -> tuple[dict[str, Any], dict[str, Any]]:
    from tests.verdict_table import build_table

    table = build_table()
    return {row["name"]: row["document"] for row in table["rows"]}, {
        name: pin["document"] for name, pin in table["pins"].items()
    }


def test_keys_json_pins_a_key_beside_the_roots(roots: Roots, tmp_path: Path) -> None:
    """``trust-root --sigstore``'s ``keys.json`` beside a version 2 trust root: its keys count as
    pinned without a certificate, take the place of the document's of the same kid, and a
    revocation by a pinned root still covers them."""
    documents, pins = table_rows()
    keys = saved(tmp_path, pins["keys_json"], "keys.json")
    trust = saved(tmp_path, pins["trust_root_v2_log"], "trust-root.json")
    revoked = saved(tmp_path, pins["trust_root_v2_revoked"], "revoked.json")
    bundle = saved(tmp_path, documents["attestation: Sigstore bundle, trust root version 2"], "a.sigstore.json")

    without = execution_proof.verify(bundle, trust_root=trust)
    assert (without.verdict, without.reason) == ("NOT VERIFIED", "no_key_certificate")
    report = execution_proof.verify(bundle, trust_root=trust, keys=keys)
    assert (report.verdict, report.reason) == ("VALID", None), report.to_dict()
    document = report.to_dict()
    assert document["key"]["certificate"] == {
        "state": "ok",
        "root_kid": None,
        "not_before": None,
        "not_after": None,
    }
    assert document["key"]["source"].startswith(f"{keys} (pinned), and ")
    assert "is pinned with --keys" in render_report(report)
    assert document["checks"]["log_inclusion"] is True and document["checks"]["attestation_signature"] is True
    # The pinned root revoked the key from before this receipt: the pin does not outlive it.
    taken = execution_proof.verify(bundle, trust_root=revoked, keys=keys)
    assert (taken.verdict, taken.reason) == ("INVALID", "bad_signature")
    assert taken.to_dict()["key"]["certificate"]["state"] == "revoked"
    # A bundle carrying a certificate by a root nobody pinned: the key pinned in keys.json is
    # the user's word for that kid, and the carried certificate is not consulted.
    foreign = saved(tmp_path, documents["certified: a root nobody pinned"], "foreign.json")
    assert execution_proof.verify(foreign, trust_root=trust).reason == "bad_signature"
    assert execution_proof.verify(foreign, trust_root=trust, keys=keys).ok


def test_keys_json_is_read_strictly(tmp_path: Path) -> None:
    _, pins = table_rows()
    (kid, der), *_ = pins["keys_json"].items()
    trust = saved(tmp_path, pins["trust_root_v2_no_log"], "trust-root.json")
    envelope = saved(tmp_path, table_rows()[0]["attestation: envelope, keys.json pinned"], "e.json")
    assert execution_proof.verify(envelope, keys=saved(tmp_path, {kid: der}, "keys.json")).ok
    stranger = "MCowBQYDK2VwAyEA" + "A" * 43 + "="  # another 32-byte key, well-formed DER
    for bad, said in (
        ({}, "expected a key set"),
        ({kid: 1}, "expected a key set"),
        ({kid: der[:-1]}, "not standard base64"),  # its padding cut
        ({kid: "AAAA"}, "not an Ed25519 SubjectPublicKeyInfo"),
        ({kid: stranger}, "names another key"),
        ({"a kid with spaces": der}, "1-64 characters"),
    ):
        with pytest.raises(execution_proof.InvalidInput, match=said):
            execution_proof.verify(envelope, keys=saved(tmp_path, bad, "bad.json"))
    version_1 = saved(tmp_path, pins["trust_root_log"], "v1.json")
    with pytest.raises(execution_proof.InvalidInput, match="version 1"):
        execution_proof.verify(envelope, trust_root=version_1, keys=saved(tmp_path, {kid: der}, "keys.json"))
    assert execution_proof.verify(envelope, trust_root=trust, keys=saved(tmp_path, {kid: der}, "keys.json")).ok
