"""Generate ``tests/assets/receipt_vectors.json``, the receipt-format test vectors.

Run ``python tests/assets/make_vectors.py`` from the repository root ONLY when the receipt
format changes on purpose (and then update docs/receipt-format.md, whose worked example
inlines these values). The file is committed output: tests never regenerate it. What the
tests check is that the project's code still reproduces the committed bytes exactly
(tests/test_vectors.py), and that verifiers written only from the docs accept them.

The vectors are built with the project's own code (``parse_create_request``,
``place_in_chain``, ``build_receipt``) and the fixed test keys: ``test-2026`` (private seed
= bytes 0..31, tests/assets/signing_keys.json) and the retired ``test-2025``
(tests/assets/retired_signing_key.json). Ids and times are fixed; the ``tip`` of each case
is the project's main tip at issue time, so the cases of project A form a real chain.

``python tests/assets/make_vectors.py --check`` rebuilds in memory and exits 1 when the
result differs from the committed file (it never writes).
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from execution_proof.receipts.canonical import canonical_bytes, signed_payload  # noqa: E402
from execution_proof.receipts.encoding import b64url_decode  # noqa: E402
from execution_proof.receipts.ids import slot_tag  # noqa: E402
from execution_proof.receipts.model import build_receipt, format_created_at, parse_create_request, place_in_chain  # noqa: E402
from execution_proof.receipts.signing import KeyRing, load_key_ring  # noqa: E402

ASSETS = Path(__file__).resolve().parent
OUTPUT = ASSETS / "receipt_vectors.json"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _h(label: str) -> str:
    """A readable, valid hash value: ``sha256:`` + the label's hex SHA-256."""
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def _time_chars(ms: int) -> str:
    out = []
    for _ in range(10):
        out.append(CROCKFORD[ms & 31])
        ms >>= 5
    return "".join(reversed(out))


def _receipt_id(project_id: str, ms: int, suffix: str) -> str:
    """A fixed id shaped like the service's: time, the project's slot tag, 12 chars."""
    return "rcpt_" + _time_chars(ms) + slot_tag(project_id) + suffix


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _fixed_id(prefix: str, created: str, rest: str) -> str:
    """A fixed, well-formed id: ``prefix`` + a ULID from ``created`` and 16 chosen chars."""
    return prefix + _time_chars(_ms(created)) + rest


PROJECT_A = _fixed_id("prj_", "2026-01-02T08:00:00.000Z", "VECTRSA0000000AA")
PROJECT_B = _fixed_id("prj_", "2025-10-01T08:00:00.000Z", "VECTRSB0000000BB")
PROJECT_C = _fixed_id("prj_", "2026-01-31T08:00:00.000Z", "VECTRSC0000000CC")
ACTOR_A = _fixed_id("act_", "2026-01-02T08:00:00.000Z", "VECTRSA0000000A1")
ACTOR_B = _fixed_id("act_", "2025-10-01T08:00:00.000Z", "VECTRSB0000000B1")
ACTOR_C = _fixed_id("act_", "2026-01-31T08:00:00.000Z", "VECTRSC0000000C1")


def _keyring(path: Path, kid: str) -> tuple[KeyRing, str]:
    """A key ring whose active key is ``kid`` from ``path``, and the seed as hex."""
    document = json.loads(path.read_text())
    entry = next(k for k in document["keys"] if k["kid"] == kid)
    seed = b64url_decode(entry["private_key_base64url"])
    ring = load_key_ring(
        {"active_kid": kid, "keys": [{"kid": kid, "private_key_base64url": entry["private_key_base64url"]}]}
    )
    return ring, seed.hex()


UNICODE_TAGS = {
    "template": "release",
    "subject_name": "caf\u00e9 \u00fcber \u65e5\u672c\u8a9e \U0001f600\U0001f680",
    "subject_version": "2.0.0-rc.1",
    'quote"key': 'she said "ok"',
    "back\\slash": "C:\\build\\out",
    "ctl": "line1\nline2\ttab\rcr\bbs\fff\u001fus\u0000nul\u007fdel",
    "sep": "a\u2028b\u2029c",
    "\ue000": "private use U+E000 (sorts AFTER the emoji key in UTF-16 order)",
    "\U0001f600": "emoji key U+1F600 (UTF-16 D83D DE00, sorts BEFORE U+E000)",
    "Zeta": "upper-case letters sort before lower-case",
    "\u00e9t\u00e9": "\U0001d11e non-BMP value (G clef)",
    "event_at": "2026-01-15T10:10:00Z",
    "dropped": None,
}


def _specs() -> list[dict[str, Any]]:
    """Each case: what to send, ids, time, key; ``tip``/``prev`` filled in while building."""
    return [
        {
            "name": "minimal-first",
            "description": "Only input_hash; the project's first receipt: prev_receipt_hash null, chain_status main.",
            "key": "active",
            "project_id": PROJECT_A,
            "actor_id": ACTOR_A,
            "created_at": "2026-01-15T10:00:00.000Z",
            "id_suffix": "0000000000A1",
            "request": {"input_hash": _h("vector input A1")},
            "tip_from": None,
        },
        {
            "name": "all-fields-unicode",
            "description": (
                "Every optional field set; receipt_kind release (present in the receipt, not signed); "
                "prev_receipt_hash sent and equal to the tip (main); tags with non-ASCII and non-BMP "
                "text, characters JCS must escape, raw U+007F/U+2028, a null tag value (dropped), and "
                "keys whose UTF-16 order differs from code-point order. output_hash is sent in upper "
                "case: the receipt holds it in lower case."
            ),
            "key": "active",
            "project_id": PROJECT_A,
            "actor_id": ACTOR_A,
            "created_at": "2026-01-15T10:10:00.456Z",
            "id_suffix": "0000000000A2",
            "request": {
                "input_hash": _h("vector input A2"),
                "output_hash": _h("vector output A2").upper().replace("SHA256:", "sha256:"),
                "params_hash": _h("vector params A2"),
                "env_hash": _h("vector env A2"),
                "code_ref": "git:3f2a9c1d\u2026 \u00e9t\u00e9 \U0001f680",
                "run_id": 'run-\u00e9-\U0001f600-"q"-\\',
                "tags": UNICODE_TAGS,
                "receipt_kind": "release",
                "prev_receipt_hash": "TIP",
            },
            "tip_from": "minimal-first",
        },
        {
            "name": "main-explicit-prev",
            "description": "prev_receipt_hash sent and equal to the project's tip: main, the chain continues.",
            "key": "active",
            "project_id": PROJECT_A,
            "actor_id": ACTOR_A,
            "created_at": "2026-01-15T10:20:00.789Z",
            "id_suffix": "0000000000A3",
            "request": {
                "input_hash": _h("vector input A3"),
                "output_hash": _h("vector output A3"),
                "receipt_kind": "document",
                "tags": {"workflow_stage": "review", "actor_role": "reviewer"},
                "prev_receipt_hash": "TIP",
            },
            "tip_from": "all-fields-unicode",
        },
        {
            "name": "main-implicit-prev",
            "description": "prev_receipt_hash omitted while the project has a tip: the service fills the tip in (main).",
            "key": "active",
            "project_id": PROJECT_A,
            "actor_id": ACTOR_A,
            "created_at": "2026-01-15T10:30:00.001Z",
            "id_suffix": "0000000000A4",
            "request": {"input_hash": _h("vector input A4"), "run_id": "nightly-42", "tags": None},
            "tip_from": "main-explicit-prev",
        },
        {
            "name": "branch",
            "description": (
                "prev_receipt_hash sent but different from the tip (it names the first receipt): branch; "
                "expected_prev_receipt_hash records the tip, which does not move."
            ),
            "key": "active",
            "project_id": PROJECT_A,
            "actor_id": ACTOR_A,
            "created_at": "2026-01-15T10:40:00.999Z",
            "id_suffix": "0000000000A5",
            "request": {
                "input_hash": _h("vector input A5"),
                "receipt_kind": "audit_pack",
                "tags": {"audit_scope": "q4", "template_version": "1"},
                "prev_receipt_hash": "HASH:minimal-first",
            },
            "tip_from": "main-implicit-prev",
        },
        {
            "name": "branch-without-tip",
            "description": "prev_receipt_hash sent while the project has no tip at all: branch, expected null.",
            "key": "active",
            "project_id": PROJECT_C,
            "actor_id": ACTOR_C,
            "created_at": "2026-02-01T00:00:00.001Z",
            "id_suffix": "0000000000C1",
            "request": {"input_hash": _h("vector input C1"), "prev_receipt_hash": _h("imported from elsewhere")},
            "tip_from": None,
        },
        {
            "name": "retired-key",
            "description": (
                "Signed by test-2025, since retired: GET /v1/public-key still lists it, so the receipt "
                "stays verifiable; pick the key by sig_kid."
            ),
            "key": "retired",
            "project_id": PROJECT_B,
            "actor_id": ACTOR_B,
            "created_at": "2025-11-03T09:15:00.250Z",
            "id_suffix": "0000000000B1",
            "request": {
                "input_hash": _h("vector input B1"),
                "env_hash": _h("vector env B1"),
                "code_ref": "v1.0.0",
                "receipt_kind": "document",
                "tags": {"artifact_type": "report"},
            },
            "tip_from": None,
        },
    ]


def build_vectors() -> dict[str, Any]:
    active_ring, active_seed = _keyring(ASSETS / "signing_keys.json", "test-2026")
    retired_ring, retired_seed = _keyring(ASSETS / "retired_signing_key.json", "test-2025")
    published = load_key_ring((ASSETS / "signing_keys.json").read_text())
    rings = {"active": (active_ring, active_seed), "retired": (retired_ring, retired_seed)}
    by_name: dict[str, dict[str, Any]] = {}
    cases = []
    for spec in _specs():
        ring, seed = rings[spec["key"]]
        tip = by_name[spec["tip_from"]]["receipt_hash"] if spec["tip_from"] else None
        request = dict(spec["request"])
        if request.get("prev_receipt_hash") == "TIP":
            request["prev_receipt_hash"] = tip
        elif str(request.get("prev_receipt_hash", "")).startswith("HASH:"):
            request["prev_receipt_hash"] = by_name[request["prev_receipt_hash"][5:]]["receipt_hash"]
        req = parse_create_request(request)
        placement = place_in_chain(req.prev_receipt_hash, tip)
        created_at = spec["created_at"]
        assert format_created_at(_ms(created_at)) == created_at
        receipt = build_receipt(
            req,
            receipt_id=_receipt_id(spec["project_id"], _ms(created_at), spec["id_suffix"]),
            project_id=spec["project_id"],
            actor_id=spec["actor_id"],
            created_at=created_at,
            placement=placement,
            keyring=ring,
        )
        payload = signed_payload(receipt)
        canonical = canonical_bytes(payload)
        case = {
            "name": spec["name"],
            "description": spec["description"],
            "kid": ring.active_kid,
            "private_key_seed_hex": seed,
            "public_key_base64url": published.keys[ring.active_kid or ""].public_key_base64url,
            "request": request,
            "receipt_id": receipt["receipt_id"],
            "project_id": spec["project_id"],
            "actor_id": spec["actor_id"],
            "created_at": created_at,
            "tip": tip,
            "receipt": receipt,
            "signed_payload": payload,
            "canonical_text": canonical.decode("utf-8"),
            "canonical_bytes_hex": canonical.hex(),
            "receipt_hash": receipt["receipt_hash"],
            "signature_input_ascii": receipt["receipt_hash"],
            "signature": receipt["signature"],
        }
        by_name[spec["name"]] = case
        cases.append(case)
    return {
        "about": (
            "Receipt-format test vectors (docs/receipt-format.md). Generated once by "
            "tests/assets/make_vectors.py; regenerate only when the format changes on purpose. "
            "The file is ASCII JSON: non-ASCII characters appear as \\u escapes here but are raw "
            "UTF-8 in canonical_bytes_hex. canonical_text is the canonical bytes decoded as UTF-8."
        ),
        "public_keys": published.public_keys_json(),
        "cases": cases,
    }


def render(vectors: dict[str, Any]) -> str:
    return json.dumps(vectors, indent=2, ensure_ascii=True) + "\n"


def main(argv: list[str]) -> int:
    text = render(build_vectors())
    if "--check" in argv:
        same = OUTPUT.exists() and OUTPUT.read_text() == text
        print("vectors reproduce" if same else "vectors DIFFER from the committed file")
        return 0 if same else 1
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
