"""The trust root, version 2 (docs/trust-root.md): receipt roots and revocations pinned instead
of receipt keys. ``receipts/trust_root.py`` reads it strictly (every revocation checked against
the pinned roots when read), writes it from a service's ``GET /v1/public-key`` (its ``roots`` and
``revocations``; a service without ``roots`` is refused), and fingerprints the roots; version 1
is still read. ``trust-root`` is run against a stub service that publishes roots.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson
import pytest

from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import KeyVerdict, Root, certify, revoke, time_ms
from execution_proof.receipts.signing import load_key_ring
from execution_proof.receipts.trust_root import (
    TrustRootError,
    build_trust_root,
    encode_trust_root,
    fingerprints,
    parse_trust_root,
)
from execution_proof.transparency.signer import SeedSigner
from tests.conftest import REPO
from tests.servers import run_cli
from tests.test_trust_root import DOC, _block, stub

SCHEMA = orjson.loads((REPO / "docs" / "trust-root.schema.json").read_bytes())
VALIDATOR = jsonschema_rs.Draft202012Validator(SCHEMA)


def seeded(label: str) -> SeedSigner:
    return SeedSigner(hashlib.sha256(f"trust root v2 tests: {label}".encode()).digest())


ROOT, SECOND_ROOT, STRANGER, KEY = (seeded(n) for n in ("root", "second root", "stranger", "receipt key"))
KEY_PUBLIC = KEY.public_key()


def root_entry(signer: SeedSigner) -> dict[str, str]:
    root = Root.of(signer.public_key())
    return {"kid": root.kid, "public_key_base64url": b64url_encode(root.public_key)}


def revocation(signer: SeedSigner = ROOT, after: str = "2026-02-01T00:00:00.000Z") -> dict[str, str]:
    return revoke(signer, "key-" + hashlib.sha256(KEY_PUBLIC).hexdigest()[:16], time_ms(after), "lost").to_json()


def document() -> dict[str, Any]:
    return {
        "version": 2,
        "service_url": "https://proof.example",
        "receipt_roots": [root_entry(ROOT), root_entry(SECOND_ROOT)],
        "revocations": [revocation()],
        "log": None,
        "tsa_roots_pem": [],
    }


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- reading


def test_a_version_2_file_round_trips_and_pins_roots_not_keys() -> None:
    pinned = document()
    root = parse_trust_root(encode_trust_root(pinned))  # type: ignore[arg-type]
    assert root.version == 2 and root.to_json() == pinned
    assert VALIDATOR.is_valid(pinned)
    assert list(root.roots or {}) == [Root.of(ROOT.public_key()).kid, Root.of(SECOND_ROOT.public_key()).kid]
    assert root.keys.keys == {} and root.keys.roots == root.roots
    assert [r.to_json() for r in root.revocations] == pinned["revocations"]


def test_the_roots_judge_keys_from_elsewhere() -> None:
    root = parse_trust_root(encode_trust_root(document()))  # type: ignore[arg-type]
    certificate = certify(ROOT, KEY_PUBLIC, time_ms("2026-01-01T00:00:00.000Z"), time_ms("2026-03-01T00:00:00.000Z"))
    carried = load_key_ring(
        {
            "keys": [
                {
                    "kid": certificate.kid,
                    "public_key_base64url": b64url_encode(KEY_PUBLIC),
                    "certificate": certificate.to_json(),
                }
            ],
            "active_kid": None,
        }
    )
    ring = root.certified(carried)
    assert ring.judge(certificate.kid, "2026-01-15T00:00:00.000Z") is KeyVerdict.OK
    assert ring.judge(certificate.kid, "2026-02-15T00:00:00.000Z") is KeyVerdict.REVOKED  # the pinned revocation
    assert ring.judge(certificate.kid, "2026-03-15T00:00:00.000Z") is KeyVerdict.OUTSIDE_CERTIFICATE
    # A revocation handed in (as a bundle or the service gives it), signed by a pinned root, counts too.
    earlier = revocation(after="2026-01-10T00:00:00.000Z")
    assert root.certified(carried, [earlier]).judge(certificate.kid, "2026-01-15T00:00:00.000Z") is KeyVerdict.REVOKED
    # Not one a root nobody pinned signed.
    foreign = revocation(STRANGER, after="2026-01-10T00:00:00.000Z")
    assert root.certified(carried, [foreign]).judge(certificate.kid, "2026-01-15T00:00:00.000Z") is KeyVerdict.OK


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(target: dict[str, Any]) -> None:
        *where, last = path.split(".")
        node: Any = target
        for step in where:
            node = node[int(step)] if step.isdigit() else node[step]
        if value is _DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()
_OTHER_KID = "root-" + "0" * 16

# (mutation, what the message must contain, whether the schema refuses it too)
MALFORMED = {
    "version 3": (_set("version", 3), "newer version", True),
    "receipt_keys in a version 2 file": (_set("receipt_keys", []), "the trust root (version 2): unknown member 'receipt_keys'", True),
    "receipt_roots missing": (_set("receipt_roots", _DELETE), "receipt_roots is missing", True),
    "revocations missing": (_set("revocations", _DELETE), "revocations is missing", True),
    "receipt_roots empty": (_set("receipt_roots", []), "receipt_roots: must be a non-empty list", True),
    "root not an object": (_set("receipt_roots.0", "r"), "receipt_roots[0]: must be an object", True),
    "root kid not its key's": (_set("receipt_roots.0.kid", _OTHER_KID), "receipt_roots[0].kid: must be its key's", False),
    "root kid of another shape": (_set("receipt_roots.0.kid", "k-1"), "receipt_roots[0].kid", True),
    "root key 31 bytes": (_set("receipt_roots.0.public_key_base64url", b64url_encode(b"x" * 31)), "receipt_roots[0].public_key_base64url", True),
    "root with alg": (_set("receipt_roots.0.alg", "Ed25519"), "receipt_roots[0]: unknown member 'alg'", True),
    "the same root twice": (_set("receipt_roots.1", root_entry(ROOT)), "receipt_roots[1].kid: duplicate root", False),
    "revocations an object": (_set("revocations", {}), "revocations: must be a list", True),
    "revocation malformed": (_set("revocations.0.type", "x"), "revocations[0]: a key revocation has type", True),
    "revocation with a member more": (_set("revocations.0.extra", "x"), "revocations[0]: a key revocation: unknown extra", True),
    "revocation by a root not pinned": (_set("revocations.0", revocation(STRANGER)), "revocations[0]: signed by root-", False),
    "revocation whose signature fails": (_set("revocations.0.reason", "changed"), "revocations[0]: its signature does not verify", False),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_malformed_field_is_refused_with_its_name(case: str) -> None:
    mutate, message, schema_refuses = MALFORMED[case]
    changed = copy.deepcopy(document())
    mutate(changed)
    with pytest.raises(TrustRootError) as refused:
        parse_trust_root(orjson.dumps(changed))
    assert message in str(refused.value), str(refused.value)
    assert VALIDATOR.is_valid(changed) is not schema_refuses, case


def test_version_1_is_still_read_and_stays_version_1() -> None:
    key = b64url_encode(KEY_PUBLIC)
    old = {
        "version": 1,
        "service_url": "https://proof.example",
        "receipt_keys": [{"kid": "k-1", "public_key_base64url": key}],
        "log": None,
        "tsa_roots_pem": [],
    }
    root = parse_trust_root(orjson.dumps(old))
    assert root.version == 1 and root.roots is None and list(root.keys.keys) == ["k-1"]
    assert root.to_json() == old and VALIDATOR.is_valid(old)
    assert [label for label, _ in fingerprints(root)] == ["receipt key k-1"]


# ---------------------------------------------------------------- writing and fingerprints


def published(**more: Any) -> dict[str, Any]:
    """A service's GET /v1/public-key body with receipt roots."""
    return {
        "keys": [{"kid": "key-0123456789abcdef", "alg": "Ed25519", "public_key_base64url": b64url_encode(KEY_PUBLIC)}],
        "active_kid": "key-0123456789abcdef",
        "roots": [{**root_entry(ROOT), "alg": "Ed25519"}, {**root_entry(SECOND_ROOT), "alg": "Ed25519"}],
        "revocations": [revocation()],
        **more,
    }


def test_build_writes_version_2_from_the_published_roots_and_revocations() -> None:
    built = build_trust_root("https://proof.example/", published(), None, None)
    assert built == document()
    assert VALIDATOR.is_valid(built)


@pytest.mark.parametrize(
    ("more", "message"),
    [
        pytest.param({"roots": None}, "roots is not a non-empty list", id="roots-null"),
        pytest.param({"roots": []}, "roots is not a non-empty list", id="roots-empty"),
        pytest.param({"revocations": {}}, "revocations is not a list", id="revocations-object"),
        pytest.param(
            {"revocations": [revocation(STRANGER)]}, "revocations[0]: signed by root-", id="foreign-revocation"
        ),
    ],
)
def test_build_refuses_roots_and_revocations_it_cannot_pin(more: dict[str, Any], message: str) -> None:
    with pytest.raises(TrustRootError) as refused:
        build_trust_root("https://proof.example", published(**more), None, None)
    assert message in str(refused.value)


def test_build_refuses_a_service_that_publishes_no_roots() -> None:
    body = {key: value for key, value in published().items() if key not in ("roots", "revocations")}
    with pytest.raises(TrustRootError, match="publishes no receipt roots"):
        build_trust_root("https://proof.example", body, None, None)


def test_the_fingerprints_are_the_roots() -> None:
    data = encode_trust_root(document())  # type: ignore[arg-type]
    root = parse_trust_root(data)
    assert fingerprints(root, data) == [
        (f"receipt root {Root.of(ROOT.public_key()).kid}", sha(ROOT.public_key())),
        (f"receipt root {Root.of(SECOND_ROOT.public_key()).kid}", sha(SECOND_ROOT.public_key())),
        ("trust root", sha(data)),
    ]


@pytest.mark.slow
def test_the_verb_writes_version_2_and_prints_the_roots(tmp_path: Path) -> None:
    out = tmp_path / "trust-root.json"
    routes = {"/v1/public-key": (200, orjson.dumps(published())), "/v1/log": (404, b'{"error": {"code": "not_found"}}')}
    with stub(routes) as base:
        done = run_cli("trust-root", "--base-url", base, "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    assert orjson.loads(data) == {**document(), "service_url": base}
    assert done.stdout.splitlines() == [
        f"receipt root {Root.of(ROOT.public_key()).kid}  {sha(ROOT.public_key())}",
        f"receipt root {Root.of(SECOND_ROOT.public_key()).kid}  {sha(SECOND_ROOT.public_key())}",
        f"trust root  {sha(data)}",
    ]


@pytest.mark.slow
def test_the_verb_refuses_a_service_without_roots_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "trust-root.json"
    body = {"keys": published()["keys"], "active_kid": "key-0123456789abcdef"}
    routes = {"/v1/public-key": (200, orjson.dumps(body)), "/v1/log": (404, b'{"error": {"code": "not_found"}}')}
    with stub(routes) as base:
        done = run_cli("trust-root", "--base-url", base, "--out", str(out), "--json")
    assert done.returncode == 2
    failure = orjson.loads(done.stdout)
    assert failure["ok"] is False and failure["error"]["kind"] == "InvalidInput"
    assert "publishes no receipt roots" in failure["error"]["message"]
    assert "publishes no receipt roots" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


# ---------------------------------------------------------------- docs/trust-root.md

V2_HEADING = "### The file `trust-root` writes"


def test_the_documented_version_2_file_is_a_trust_root_with_the_fingerprints_shown() -> None:
    example = _block(DOC, V2_HEADING, "json") + "\n"
    pinned = orjson.loads(example)
    assert encode_trust_root(pinned) == example.encode(), "the example is written as trust-root writes"
    assert VALIDATOR.is_valid(pinned)
    root = parse_trust_root(example)
    assert root.version == 2 and len(root.roots or {}) == 2 and len(root.revocations) == 1
    shown = _block(DOC, V2_HEADING, "text").splitlines()
    assert [f"{label}  {value}" for label, value in fingerprints(root, example.encode())] == shown
    # A root's kid is the start of its fingerprint, as the page says.
    for line in shown[:2]:
        label, value = line.split("  ")
        assert value.startswith("sha256:" + label.removeprefix("receipt root root-"))


@pytest.mark.slow
def test_the_documented_recipes_reproduce_every_version_2_fingerprint(tmp_path: Path) -> None:
    for tool in ("jq", "basenc", "base64", "sha256sum", "openssl", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    (tmp_path / "trust-root.json").write_text(_block(DOC, V2_HEADING, "json") + "\n")
    recipe = _block(DOC, "### Recomputing them with standard tools", "sh")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", recipe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = [line.rsplit("sha256:", 1)[1] for line in _block(DOC, V2_HEADING, "text").splitlines()]
    assert re.findall(r"\b[0-9a-f]{64}\b", done.stdout) == shown, done.stdout
