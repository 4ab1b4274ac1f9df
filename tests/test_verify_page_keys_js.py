"""The page's reading of a version 2 trust root (static/verify-read.js, static/verify-keys.js)
under Node.js, against the library's ``parse_trust_root``: the documented version 2 example and
copies one fault away from it are accepted or refused alike, with the same roots, revocations
and log. (How the page judges a key by those roots is run on the shared verdict table in
Chromium, tests/test_verdict_table.py.)
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from typing import Any

from execution_proof.receipts.key_certificates import revoke, time_ms
from execution_proof.receipts.trust_root import TrustRootError, parse_trust_root
from execution_proof.transparency.signer import SeedSigner
from tests.conftest import REPO, missing_binary
from tests.test_trust_root import DOC, _block
from tests.test_trust_root_v2 import V2_HEADING

HARNESS = """
const read = await import(process.argv[1]);
const files = JSON.parse(require('node:fs').readFileSync(0, 'utf8'));
const out = [];
for (const text of files) {
  try {
    const pins = await read.readPinned(text, 'trust-root.json');
    out.push({
      kind: pins.kind,
      version: pins.version,
      roots: [...pins.roots.keys()],
      revocations: pins.revocations.length,
      origin: pins.log ? pins.log.origin : null,
    });
  } catch (err) {
    out.push({ error: err.constructor.name, message: err.message });
  }
}
console.log(JSON.stringify(out));
"""


def variants() -> list[tuple[str, str]]:
    example: dict[str, Any] = json.loads(_block(DOC, V2_HEADING, "json"))
    roots, [revoked] = example["receipt_roots"], example["revocations"]
    stranger = SeedSigner(hashlib.sha256(b"page keys test: a root nobody pins").digest())
    foreign = revoke(stranger, revoked["kid"], time_ms(revoked["revoked_after"]), "not yours").to_json()

    def variant(**changes: Any) -> str:
        return json.dumps({**example, **changes})

    return [
        ("the documented example", json.dumps(example)),
        ("no log, no revocation", variant(log=None, revocations=[])),
        ("a trailing slash", variant(service_url="https://proof.example/")),
        ("version 3", variant(version=3)),
        ("receipt_keys too", variant(receipt_keys=[])),
        ("no revocations member", json.dumps({k: v for k, v in example.items() if k != "revocations"})),
        ("no roots", variant(receipt_roots=[])),
        ("a root whose kid is not its key's", variant(receipt_roots=[{**roots[0], "kid": roots[1]["kid"]}, roots[1]])),
        ("the same root twice", variant(receipt_roots=[roots[0], roots[0]])),
        ("a root with alg", variant(receipt_roots=[{**roots[0], "alg": "Ed25519"}, roots[1]])),
        ("a changed revocation", variant(revocations=[{**revoked, "reason": "changed"}])),
        ("a revocation by a root not pinned", variant(revocations=[foreign])),
        ("a revocation missing a member", variant(revocations=[{k: v for k, v in revoked.items() if k != "reason"}])),
        ("revocations an object", variant(revocations={})),
        ("the revocation's root no longer pinned", variant(receipt_roots=[roots[1]])),
    ]


def test_the_page_reads_a_version_2_trust_root_as_the_library_does() -> None:
    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the verification page's JavaScript is tested under Node.js")
    assert node is not None
    cases = variants()
    module = str(REPO / "execution_proof" / "static" / "verify-read.js")
    done = subprocess.run(
        [node, "--input-type=commonjs", "-e", f"(async () => {{ {HARNESS} }})()", module],
        input=json.dumps([text for _, text in cases]).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    accepted = []
    for (what, text), got in zip(cases, json.loads(done.stdout), strict=True):
        try:
            root = parse_trust_root(text)
        except TrustRootError:
            assert got.get("error") == "ReadError", (what, got)
            assert "is not a usable trust root" in got["message"], (what, got)
            continue
        accepted.append(what)
        assert got == {
            "kind": "trust_root",
            "version": 2,
            "roots": list(root.roots or {}),
            "revocations": len(root.revocations),
            "origin": root.log_origin,
        }, what
    assert accepted == ["the documented example", "no log, no revocation", "a trailing slash"]


def test_the_page_and_the_library_name_the_same_certificate_states() -> None:
    """The page's ``data-state`` values are the report's ``key.certificate.state`` values."""
    from execution_proof.client.reports import CERTIFICATE_STATES

    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the verification page's JavaScript is tested under Node.js")
    assert node is not None
    module = str(REPO / "execution_proof" / "static" / "verify-keys.js")
    script = "(async () => { const keys = await import(process.argv[1]); console.log(JSON.stringify(keys.STATES)); })()"
    done = subprocess.run(
        [node, "--input-type=commonjs", "-e", script, module], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == list(CERTIFICATE_STATES)
