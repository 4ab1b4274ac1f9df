"""Verifiers nobody here wrote accept a receipt's attestation and refuse it changed
(docs/attestations.md, "Checking an attestation").

- securesystemslib (in-toto's own DSSE library): ``dsse.Envelope.verify`` with the receipt
  key as an ``SSlibKey`` accepts the envelope the service answers and refuses a changed
  payload, a changed signature, another key, and the right key under another keyid.
- sigstore's own verifier, ``@sigstore/verify`` under Node (tests/sigstore/verify.mjs, the
  example docs/attestations.md shows verbatim; versions pinned by
  tests/sigstore/package-lock.json), on the Sigstore bundle of a running service with a log
  (its own redis-server, ``service.py serve`` and ``service.py worker``), against the
  ``trusted_root.json`` and ``keys.json`` the real ``trust-root --sigstore`` command wrote:
  it accepts the bundle and refuses a changed payload, signature, key, proof hash, leaf body,
  checkpoint signature and checkpoint origin, each by the error it gives. After a key
  rotation (a new serving process certifies a key of its own at start) the old ``keys.json``
  does not know the new key, and the refreshed one (``trust-root --sigstore DIR --trust-root
  PINNED``) verifies receipts of both keys.

Node modules: tests/sigstore/node_modules when ``.ci/run`` installed them (``npm ci``) as the
lock file pins them, else ``npm ci`` into a temporary copy; without node or npm the tests
skip (fail under REQUIRE_REAL_SERVICES=1).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from nacl.signing import SigningKey
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.receipts.canonical import canonical_bytes
from execution_proof.transparency import note
from execution_proof.transparency.cosignature import Cosigner
from tests.conftest import REPO, hash_of, missing_binary, require_real_services
from tests.log_stack import Stack, stack_maker
from tests.servers import run_cli
from tests.test_log import SIGNER, create, log_app

SIGSTORE_JS = REPO / "tests" / "sigstore"
NPM_TIMEOUT_S = 300.0
NODE_TIMEOUT_S = 60.0
ATTESTATION_WAIT_S = 30.0


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return SIGNER


def b64d(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def b64e(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def flipped(text: str, at: int = -3) -> str:
    """Standard base64 ``text`` with one bit of one decoded byte changed."""
    raw = bytearray(b64d(text))
    raw[at] ^= 0x01
    return b64e(bytes(raw))


# ---------------------------------------------------------------- securesystemslib


async def test_securesystemslib_accepts_the_envelope_and_refuses_it_changed(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="sslib", plan="pro")
    receipt = (await create(client, key, "sslib"))["receipt"]
    _, answered = await client.get(f"/v1/receipts/{receipt['receipt_id']}/attestation")
    assert answered.status == 200, answered.text
    _, keys = await client.get(f"/v1/public-key?kid={receipt['sig_kid']}")
    (published,) = keys.json["keys"]
    raw = base64.urlsafe_b64decode(published["public_key_base64url"] + "==")
    kid = receipt["sig_kid"]

    def sslib_key(public: bytes, keyid: str = kid) -> SSlibKey:
        return SSlibKey(keyid=keyid, keytype="ed25519", scheme="ed25519", keyval={"public": public.hex()})

    def verify(envelope: dict[str, Any], key: SSlibKey) -> dict[str, Any]:
        return Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)

    envelope = answered.json
    accepted = verify(envelope, sslib_key(raw))
    assert list(accepted) == [kid], "the one signature counts, under the receipt's kid"

    statement = orjson.loads(b64d(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = hash_of("another artifact")[7:]
    changed_payload = {**envelope, "payload": b64e(canonical_bytes(statement))}
    changed_signature = {**envelope, "signatures": [{"keyid": kid, "sig": flipped(envelope["signatures"][0]["sig"])}]}
    another_key = bytes(SigningKey.generate().verify_key)
    for refused, key in (
        (changed_payload, sslib_key(raw)),
        (changed_signature, sslib_key(raw)),
        (envelope, sslib_key(another_key)),
        # securesystemslib counts a signature only for the key whose keyid it names.
        (envelope, sslib_key(raw, keyid="key-0000000000000000")),
    ):
        with pytest.raises(VerificationError, match="Accepted signatures do not match threshold, Found: 0"):
            verify(refused, key)


# ---------------------------------------------------------------- sigstore-js


def installed_as_locked(folder: Path) -> bool:
    """Whether ``folder/node_modules`` holds exactly the versions ``package-lock.json`` pins."""
    lock = orjson.loads((folder / "package-lock.json").read_bytes())
    for path, pinned in lock["packages"].items():
        if not path:
            continue
        manifest = folder / path / "package.json"
        if not manifest.is_file() or orjson.loads(manifest.read_bytes()).get("version") != pinned["version"]:
            return False
    return True


@pytest.fixture(scope="module")
def sigstore_js(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with verify.mjs and the node modules the lock file pins: tests/sigstore when
    ``.ci/run`` installed them there, else ``npm ci`` into a temporary copy."""
    if shutil.which("node") is None:
        missing_binary("node", "sigstore's verifier @sigstore/verify runs under Node.js")
    if installed_as_locked(SIGSTORE_JS):
        return SIGSTORE_JS
    npm = shutil.which("npm")
    if npm is None:
        missing_binary("npm", "@sigstore/verify is installed from the npm registry (npm ci)")
    assert npm is not None
    where = tmp_path_factory.mktemp("sigstore-js")
    for name in ("package.json", "package-lock.json", "verify.mjs"):
        shutil.copyfile(SIGSTORE_JS / name, where / name)
    command = [npm, "ci", "--prefix", str(where), "--no-audit", "--no-fund", "--loglevel=error"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
        failed, why = done.returncode != 0, done.stderr[-2000:]
    except subprocess.TimeoutExpired:
        failed, why = True, f"timed out after {NPM_TIMEOUT_S:.0f} s"
    if failed:
        message = f"npm ci of tests/sigstore failed: {why}"
        if require_real_services():
            pytest.fail(message)
        pytest.skip(message)
    assert installed_as_locked(where)
    return where


def sigstore_verify(sigstore_js: Path, bundle: dict[str, Any], trust: Path, work: Path) -> dict[str, Any]:
    """``node verify.mjs BUNDLE DIR``: what it printed (one JSON line), with its exit status
    checked against it (0 verified, 1 refused)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"bundle-{time.monotonic_ns()}.json"
    path.write_bytes(orjson.dumps(bundle))
    done = subprocess.run(
        ["node", str(sigstore_js / "verify.mjs"), str(path), str(trust)],
        capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.stdout.count("\n") == 1, (done.stdout, done.stderr)
    result: dict[str, Any] = orjson.loads(done.stdout)
    assert done.returncode == (0 if result["verified"] else 1), (done.returncode, result, done.stderr)
    return result


def trust_root_sigstore(*args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli("trust-root", *args)
    assert done.returncode == 0, done.stderr
    return done


def attestation_bundle(stack: Stack, receipt_id: str) -> dict[str, Any]:
    """The receipt's Sigstore bundle, once a checkpoint covers its attestation's leaf (409
    ``log_pending`` before)."""
    url = f"{stack.base_url}/v1/receipts/{receipt_id}/attestation?format=sigstore"
    deadline = time.monotonic() + ATTESTATION_WAIT_S
    while True:
        response = httpx.get(url, timeout=10)
        if response.status_code == 200:
            assert response.headers["content-type"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
            bundle: dict[str, Any] = response.json()
            return bundle
        assert response.status_code == 409 and response.json()["error"]["code"] == "log_pending", response.text
        assert time.monotonic() < deadline, f"no checkpoint covered the attestation in {ATTESTATION_WAIT_S:.0f} s"
        time.sleep(0.1)


def started_stack(make: Any) -> tuple[Stack, dict[str, Any]]:
    stack: Stack = make("sigstore")
    stack.start_redis()
    stack.serve()
    stack.worker()
    return stack, stack.make_keys(1)[0]


class Logged:
    """The running service with a log, one receipt, its bundle, and the files ``trust-root
    --sigstore`` wrote for it."""

    def __init__(self, stack: Stack, receipt: dict[str, Any], bundle: dict[str, Any], folder: Path) -> None:
        self.stack = stack
        self.receipt = receipt
        self.bundle = bundle
        self.folder = folder
        self.trust = folder / "sigstore"


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[Logged]:
    folder = tmp_path_factory.mktemp("attestation-verifiers")
    with stack_maker(folder, redis_binary) as make:
        stack, key = started_stack(make)
        (receipt,) = stack.create_waiting([key], 1)
        bundle = attestation_bundle(stack, receipt["receipt_id"])
        pinned = folder / "trust-root.json"
        trust_root_sigstore("--base-url", stack.base_url, "--out", str(pinned), "--sigstore", str(folder / "sigstore"))
        yield Logged(stack, receipt, bundle, folder)


def with_trust(logged: Logged, name: str, keys: dict[str, str] | None = None, root: Any = None) -> Path:
    """A copy of the written trust files with ``keys.json`` or ``trusted_root.json`` replaced."""
    where = logged.folder / name
    if not where.exists():
        shutil.copytree(logged.trust, where)
    if keys is not None:
        (where / "keys.json").write_bytes(orjson.dumps(keys))
    if root is not None:
        (where / "trusted_root.json").write_bytes(orjson.dumps(root))
    return where


def entry(bundle: dict[str, Any]) -> dict[str, Any]:
    (found,) = bundle["verificationMaterial"]["tlogEntries"]
    return found  # type: ignore[no-any-return]


def another_subject(bundle: dict[str, Any]) -> bytes:
    """The bundle's Statement naming another artifact, as RFC 8785 bytes."""
    statement = orjson.loads(b64d(bundle["dsseEnvelope"]["payload"]))
    statement["subject"][0]["digest"]["sha256"] = hash_of("another artifact")[7:]
    return canonical_bytes(statement)


def changed_payload(bundle: dict[str, Any]) -> None:
    bundle["dsseEnvelope"]["payload"] = b64e(another_subject(bundle))


def changed_signature(bundle: dict[str, Any]) -> None:
    signature = bundle["dsseEnvelope"]["signatures"][0]
    signature["sig"] = flipped(signature["sig"])


def changed_proof_hash(bundle: dict[str, Any]) -> None:
    hashes = entry(bundle)["inclusionProof"]["hashes"]
    hashes[0] = flipped(hashes[0])


def changed_leaf_body(bundle: dict[str, Any]) -> None:
    """Another payload, and a leaf body naming its hash: what the log would hold had it
    logged that payload. The body check passes; the leaf is not the logged one."""
    payload = another_subject(bundle)
    bundle["dsseEnvelope"]["payload"] = b64e(payload)
    body = orjson.loads(b64d(entry(bundle)["canonicalizedBody"]))
    body["spec"]["dsseV002"]["payloadHash"]["digest"] = b64e(hashlib.sha256(payload).digest())
    entry(bundle)["canonicalizedBody"] = b64e(canonical_bytes(body))


def checkpoint_lines(bundle: dict[str, Any]) -> list[str]:
    return entry(bundle)["inclusionProof"]["checkpoint"]["envelope"].split("\n")  # type: ignore[no-any-return]


def set_checkpoint(bundle: dict[str, Any], lines: list[str]) -> None:
    entry(bundle)["inclusionProof"]["checkpoint"]["envelope"] = "\n".join(lines)


def changed_checkpoint_signature(bundle: dict[str, Any]) -> None:
    lines = checkpoint_lines(bundle)
    (at,) = [n for n, line in enumerate(lines) if line.startswith("\u2014 ")]
    dash, name, signature = lines[at].split(" ")
    lines[at] = f"{dash} {name} {flipped(signature)}"
    set_checkpoint(bundle, lines)


def changed_checkpoint_origin(bundle: dict[str, Any]) -> None:
    """The note of another origin, its signature line naming it too."""
    lines = checkpoint_lines(bundle)
    origin = lines[0]
    set_checkpoint(bundle, [line.replace(origin, "elsewhere.example/log") for line in lines])


def changed_log_id(bundle: dict[str, Any]) -> None:
    entry(bundle)["logId"]["keyId"] = flipped(entry(bundle)["logId"]["keyId"])


def no_log_entry(bundle: dict[str, Any]) -> None:
    del bundle["verificationMaterial"]["tlogEntries"]


REFUSALS = {
    "payload": (changed_payload, "TLOG_BODY_ERROR", "DSSE payload hash mismatch"),
    "signature": (changed_signature, "TLOG_BODY_ERROR", "tlog entry signature mismatch"),
    "proof hash": (
        changed_proof_hash,
        "TLOG_INCLUSION_PROOF_ERROR",
        "calculated root hash does not match inclusion proof",
    ),
    "leaf body": (
        changed_leaf_body,
        "TLOG_INCLUSION_PROOF_ERROR",
        "calculated root hash does not match inclusion proof",
    ),
    "checkpoint signature": (
        changed_checkpoint_signature,
        "TLOG_INCLUSION_PROOF_ERROR",
        "invalid checkpoint signature",
    ),
    "checkpoint origin": (changed_checkpoint_origin, "TLOG_INCLUSION_PROOF_ERROR", "invalid checkpoint signature"),
    # @sigstore/verify 4 picks the log by the entry's logId too (3.x read only the checkpoint).
    "log id": (changed_log_id, "TLOG_INCLUSION_PROOF_ERROR", "invalid checkpoint signature"),
    "no log entry": (no_log_entry, "TLOG_ERROR", "expected 1 tlog entries, got 0"),
}


@pytest.mark.slow
def test_sigstore_js_accepts_the_bundle_against_what_trust_root_wrote(logged: Logged, sigstore_js: Path) -> None:
    result = sigstore_verify(sigstore_js, logged.bundle, logged.trust, logged.folder / "runs")
    input_hash = logged.receipt["input_hash"]
    assert result == {"verified": True, "subject": [{"digest": {"sha256": input_hash[7:]}, "name": "input"}]}
    # What it verified is what the service serves: the leaf after the receipt's own entry.
    assert entry(logged.bundle)["kindVersion"] == {"kind": "dsse", "version": "0.0.2"}
    assert logged.bundle["verificationMaterial"]["publicKey"] == {"hint": logged.receipt["sig_kid"]}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_sigstore_js_refuses_the_bundle_changed(logged: Logged, sigstore_js: Path, case: str) -> None:
    change, code, message = REFUSALS[case]
    bundle = copy.deepcopy(logged.bundle)
    change(bundle)
    result = sigstore_verify(sigstore_js, bundle, logged.trust, logged.folder / "runs")
    assert result == {"verified": False, "code": code, "message": message}


@pytest.mark.slow
def test_sigstore_js_refuses_another_key_and_an_unknown_kid(logged: Logged, sigstore_js: Path) -> None:
    kid = logged.receipt["sig_kid"]
    der = bytes.fromhex("302a300506032b6570032100") + bytes(SigningKey.generate().verify_key)
    other = with_trust(logged, "another-key", keys={kid: b64e(der)})
    result = sigstore_verify(sigstore_js, logged.bundle, other, logged.folder / "runs")
    assert result == {"verified": False, "code": "SIGNATURE_ERROR", "message": "signature verification failed"}
    unknown = with_trust(logged, "unknown-kid", keys={"key-0000000000000000": b64e(der)})
    result = sigstore_verify(sigstore_js, logged.bundle, unknown, logged.folder / "runs")
    assert result == {"verified": False, "code": "PUBLIC_KEY_ERROR", "message": f"key not found: {kid}"}


@pytest.mark.slow
def test_sigstore_js_refuses_a_trusted_root_of_another_origin_or_of_no_log(logged: Logged, sigstore_js: Path) -> None:
    root = orjson.loads((logged.trust / "trusted_root.json").read_bytes())
    elsewhere = copy.deepcopy(root)
    elsewhere["tlogs"][0]["baseUrl"] = "https://elsewhere.example/log"
    no_log = {**root, "tlogs": []}
    for name, changed in (("elsewhere", elsewhere), ("no-log", no_log)):
        trust = with_trust(logged, name, root=changed)
        result = sigstore_verify(sigstore_js, logged.bundle, trust, logged.folder / "runs")
        assert result == {
            "verified": False,
            "code": "TLOG_INCLUSION_PROOF_ERROR",
            "message": "invalid checkpoint signature",
        }, name


@pytest.mark.slow
@pytest.mark.parametrize("member", ["rootHash", "treeSize"])
def test_sigstore_js_does_not_read_the_proofs_root_hash_or_tree_size(
    logged: Logged, sigstore_js: Path, member: str
) -> None:
    """It takes both from the signed checkpoint: this repository's own ``verify`` is what
    refuses a bundle whose copies of them disagree with it."""
    bundle = copy.deepcopy(logged.bundle)
    proof = entry(bundle)["inclusionProof"]
    proof[member] = flipped(proof[member]) if member == "rootHash" else str(int(proof[member]) + 1)
    assert sigstore_verify(sigstore_js, bundle, logged.trust, logged.folder / "runs")["verified"] is True


@pytest.mark.slow
def test_after_a_key_rotation_the_refreshed_keys_verify_receipts_of_both_keys(
    stacks: Any, sigstore_js: Path, tmp_path: Path
) -> None:
    stack, key = started_stack(stacks)
    (before,) = stack.create_waiting([key], 1)
    pinned, trust = tmp_path / "trust-root.json", tmp_path / "sigstore"
    trust_root_sigstore("--base-url", stack.base_url, "--out", str(pinned), "--sigstore", str(trust))
    pinned_bytes = pinned.read_bytes()
    # A new serving process certifies a key of its own at start: the rotation.
    assert stack.service is not None
    stack.service.stop()
    stack.serve()
    (after,) = stack.create_waiting([key], 1)
    assert after["sig_kid"] != before["sig_kid"]
    old_bundle, new_bundle = (attestation_bundle(stack, r["receipt_id"]) for r in (before, after))
    refused = sigstore_verify(sigstore_js, new_bundle, trust, tmp_path / "runs")
    assert refused == {"verified": False, "code": "PUBLIC_KEY_ERROR", "message": f"key not found: {after['sig_kid']}"}

    refreshed = trust_root_sigstore("--base-url", stack.base_url, "--sigstore", str(trust), "--trust-root", str(pinned))
    assert f"note: keys.json changed: added {after['sig_kid']}; removed none" in refreshed.stderr
    assert refreshed.stdout == "", "no new trust root: no fingerprint to compare"
    assert pinned.read_bytes() == pinned_bytes
    assert set(orjson.loads((trust / "keys.json").read_bytes())) == {before["sig_kid"], after["sig_kid"]}
    for bundle in (new_bundle, old_bundle):
        assert sigstore_verify(sigstore_js, bundle, trust, tmp_path / "runs")["verified"] is True


# ---------------------------------------------------------------- the documented example


def test_the_documented_example_is_verify_mjs_verbatim() -> None:
    """docs/attestations.md shows the script these tests run, byte for byte."""
    doc = (REPO / "docs" / "attestations.md").read_text()
    script = (SIGSTORE_JS / "verify.mjs").read_text()
    assert f"```js\n{script}```\n" in doc


def doc_block(language: str, after: str) -> str:
    """The first fenced ``language`` block of docs/attestations.md after the text ``after``."""
    doc = (REPO / "docs" / "attestations.md").read_text()
    start = doc.index(f"```{language}\n", doc.index(after)) + len(language) + 4
    return doc[start : doc.index("```\n", start)]


@pytest.mark.slow
def test_the_documented_securesystemslib_example_checks_a_served_envelope(logged: Logged, tmp_path: Path) -> None:
    """The Python block of docs/attestations.md, run as written in a folder holding the
    envelope the service answers and the keys.json trust-root wrote: it prints the subject,
    and a changed payload makes it raise securesystemslib's VerificationError."""
    code = doc_block("python", "### With securesystemslib")
    shutil.copytree(logged.trust, tmp_path / "trust")
    response = httpx.get(f"{logged.stack.base_url}/v1/receipts/{logged.receipt['receipt_id']}/attestation", timeout=10)
    envelope = response.json()

    def run_example(served: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        (tmp_path / "attestation.json").write_bytes(orjson.dumps(served))
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )

    done = run_example(envelope)
    assert done.returncode == 0, done.stderr
    subject = [{"digest": {"sha256": logged.receipt["input_hash"][7:]}, "name": "input"}]  # RFC 8785 order
    assert done.stdout == f"{subject}\n"
    statement = orjson.loads(b64d(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = hash_of("another artifact")[7:]
    refused = run_example({**envelope, "payload": b64e(canonical_bytes(statement))})
    assert refused.returncode == 1 and "securesystemslib.exceptions.VerificationError" in refused.stderr


@pytest.mark.slow
def test_sigstore_js_accepts_a_checkpoint_that_carries_witness_cosignatures(logged: Logged, sigstore_js: Path) -> None:
    """A log with witnesses answers its checkpoint with their cosignature lines after its own
    signature (usecases/log_reading.py picks a cosigned one): sigstore-js picks the log's line by
    its key hint and passes over the others."""
    bundle = copy.deepcopy(logged.bundle)
    signed = entry(bundle)["inclusionProof"]["checkpoint"]["envelope"]
    cosigned = signed + Cosigner.generate("witness.example/w1").cosign(note.parse_note(signed).text, int(time.time()))
    entry(bundle)["inclusionProof"]["checkpoint"]["envelope"] = cosigned
    assert cosigned.count("\u2014 ") == 2
    result = sigstore_verify(sigstore_js, bundle, logged.trust, logged.folder / "runs")
    assert result["verified"] is True, result
