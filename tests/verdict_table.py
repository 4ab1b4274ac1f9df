"""Generate ``tests/data/verdict_table.json``: the one table of documents and the verdict and
reason every verifier must give for them (docs/verdicts.md), run by the library, the command
line and the ``/verify`` page (tests/test_verdict_table.py).

Everything is fixed: Ed25519 seeds for the receipt key, the log key, two witnesses, a second
log key of the same origin and a stranger's receipt key of the same kid, a receipt root, a root
nobody pins and a key they certify (``key_certificates.certify``, ``revoke``); ids and times.
Receipts are built by the project's own code (``receipts.model``: ``parse_create_request``,
``build_receipt``), the log by ``transparency`` (``tlog``: entries, leaf hashes, the tile
reader's inclusion proof; ``note``: the signed checkpoint and the C2SP tlog-proof;
``cosignature``: the witnesses' cosignature/v1 lines), in the form the service's bundles
carry them (usecases/bundling.py). Ed25519 signatures are deterministic, so the output is too.

The rows of a receipt's attestation (the DSSE envelope, the Sigstore bundle, a bundle's
``attestation`` member) are built in tests/verdict_table_attested.py.

``python -m tests.verdict_table`` writes the file; ``--check`` exits 1 when the committed file
differs from what this makes (tests/test_verdict_table.py asserts the same, so nobody edits
the table by hand).
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from execution_proof.receipts.encoding import b64url_encode
from execution_proof.receipts.key_certificates import KeyCertificate, Root, certify, key_kid, revoke, time_ms
from execution_proof.receipts.model import build_receipt, chain_object, parse_create_request, place_in_chain
from execution_proof.receipts.signing import KeyRing, load_key_ring
from execution_proof.receipts.trust_root import parse_trust_root
from execution_proof.transparency import note, tlog
from execution_proof.transparency.cosignature import Cosigner
from execution_proof.transparency.policy import check_quorum, parse_policy
from execution_proof.transparency.signer import SeedSigner

OUTPUT = Path(__file__).resolve().parent / "data" / "verdict_table.json"

ORIGIN = "table.example/log"
SERVICE = "https://table.example"
KID = "table-2026"
PROJECT = "prj_01KF0HJ080VERDCT00000000PR"
ACTOR = "act_01KF0HJ080VERDCT00000000AC"
FIRST_ID = "rcpt_01KF0HJ080VERDCT00000000R0"
SECOND_ID = "rcpt_01KF0HJ081VERDCT00000000R1"
FIRST_AT = "2026-01-15T10:00:00.000Z"
SECOND_AT = "2026-01-15T10:00:01.000Z"
BUNDLE_AT = "2026-01-15T10:05:00.000Z"
COSIGNED_AT = 1_768_471_500  # 2026-01-15T10:05:00Z: in the past for any verifier's clock
CERTIFIED_FROM = "2026-01-15T09:00:00.000Z"
CERTIFIED_UNTIL = "2026-01-16T09:00:00.000Z"


def seed(label: str) -> bytes:
    """A fixed 32-byte Ed25519 seed, named (never a key in use anywhere)."""
    return hashlib.sha256(f"execution-proof verdict table: {label}".encode()).digest()


def h(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def ring(label: str) -> KeyRing:
    return load_key_ring(
        {"active_kid": KID, "keys": [{"kid": KID, "private_key_base64url": b64url_encode(seed(label))}]}
    )


class Roots:
    """A receipt root, a root nobody pins, and the receipt key they certify (its kid
    ``key-…``), with the certificates the rows need."""

    def __init__(self) -> None:
        self.root = SeedSigner(seed("receipt root"))
        self.stranger = SeedSigner(seed("a receipt root nobody pins"))
        self.seed = seed("certified receipt key")
        self.public = bytes(load_key_ring(private_key_set("k", self.seed)).keys["k"].verify_key)
        self.kid = key_kid(self.public)
        self.certificate = self.certify(self.root, CERTIFIED_FROM, CERTIFIED_UNTIL)

    def certify(self, root: SeedSigner, not_before: str, not_after: str) -> KeyCertificate:
        return certify(root, self.public, time_ms(not_before), time_ms(not_after))

    def ring(self, certificate: KeyCertificate | None = None) -> KeyRing:
        """The certified key, signing, with ``certificate`` (default: the pinned root's)."""
        chosen = certificate or self.certificate
        return load_key_ring(private_key_set(self.kid, self.seed, chosen.to_json()))

    def revocation(self) -> dict[str, str]:
        """The pinned root's revocation of the key from half a second after the first receipt:
        it covers the second receipt, not the first."""
        return revoke(self.root, self.kid, time_ms(FIRST_AT) + 500, "the key left its machine").to_json()

    def badly_signed(self) -> dict[str, str]:
        """The certificate with another message's signature by the same root (64 bytes, wrong)."""
        return {**self.certificate.to_json(), "signature": b64url_encode(self.root.sign(b"another message"))}


def private_key_set(kid: str, key_seed: bytes, certificate: dict[str, str] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"kid": kid, "private_key_base64url": b64url_encode(key_seed)}
    if certificate is not None:
        entry["certificate"] = certificate
    return {"active_kid": kid, "keys": [entry]}


def key_set(keys: KeyRing) -> dict[str, Any]:
    """A ``GET /v1/public-key`` body."""
    return dict(keys.public_keys_json())


def receipts(keys: KeyRing) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project's first receipt and the one after it (main chain)."""
    first = build_receipt(
        parse_create_request({"input_hash": h("table input 1"), "code_ref": "git:0000001"}),
        receipt_id=FIRST_ID,
        project_id=PROJECT,
        actor_id=ACTOR,
        created_at=FIRST_AT,
        placement=place_in_chain(None, None),
        keyring=keys,
    )
    second = build_receipt(
        parse_create_request(
            {"input_hash": h("table input 2"), "output_hash": h("table output 2"), "tags": {"stage": "release"}}
        ),
        receipt_id=SECOND_ID,
        project_id=PROJECT,
        actor_id=ACTOR,
        created_at=SECOND_AT,
        placement=place_in_chain(None, first["receipt_hash"]),
        keyring=keys,
    )
    return dict(first), dict(second)


def filler(n: int) -> bytes:
    """Another project's log entry (only its leaf hash matters to the proofs)."""
    return tlog.entry_bytes(
        {
            "receipt_id": f"rcpt_01KF0HJ07ZVERDCTF000000F{n:02d}",
            "receipt_hash": h(f"filler {n}"),
            "project_id": "prj_01KF0HJ07ZVERDCTF0000000PF",
            "prev_receipt_hash": None,
            "chain_status": "main",
        }
    )


class Log:
    """A five-entry log holding both receipts (at 1 and 3), its signed checkpoint, cosigned."""

    def __init__(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        self.signer = note.Signer(ORIGIN, seed("log key"))
        self.impostor = note.Signer(ORIGIN, seed("another log key of the same origin"))
        self.witnesses = {name: Cosigner(f"witness.example/{name}", seed(f"witness {name}")) for name in ("w1", "w2")}
        entries = [filler(0), tlog.entry_bytes(first), filler(2), tlog.entry_bytes(second), filler(4)]
        self.leaves = [tlog.leaf_hash(entry) for entry in entries]
        self.size = len(entries)
        self.root = tlog.merkle_root(self.leaves)
        self.text = note.Checkpoint(ORIGIN, self.size, self.root).text()

    def path(self, index: int) -> list[bytes]:
        tile = b"".join(self.leaves)  # one partial level-0 tile holds the whole tree
        view = tlog.TileHashes(self.size, lambda level, index, width: tile[: width * tlog.HASH_SIZE])
        path = view.inclusion_proof(index)
        tlog.verify_inclusion(self.leaves[index], index, self.size, path, self.root)
        return path

    def checkpoint(self, signer: note.Signer | None = None, witnesses: tuple[str, ...] = ("w1", "w2")) -> str:
        """The signed checkpoint, then the named witnesses' cosignatures."""
        signed = note.sign_note(self.text, signer or self.signer)
        return signed + "".join(self.witnesses[name].cosign(self.text, COSIGNED_AT) for name in witnesses)

    def proof(self, index: int, checkpoint: str | None = None, path: list[bytes] | None = None) -> str:
        chosen = self.path(index) if path is None else path
        return note.TlogProof(index, tuple(chosen), checkpoint or self.checkpoint()).encode()

    def policy(self) -> str:
        lines = [f"log {self.signer.verifier.encode()} {SERVICE}/v1/log/"]
        lines += [
            f"witness {name} {c.key.encode()} https://{name}.witness.example/" for name, c in self.witnesses.items()
        ]
        return "\n".join([*lines, "group both 2 w1 w2", "quorum both"]) + "\n"


def trust_root(keys: KeyRing, log: Log | None) -> dict[str, Any]:
    """A version 1 trust root pinning the active key of ``keys``."""
    members = {"origin": ORIGIN, "vkey": log.signer.verifier.encode(), "policy": log.policy()} if log else None
    kid = keys.active_kid or KID
    document = {
        "version": 1,
        "service_url": SERVICE,
        "receipt_keys": [{"kid": kid, "public_key_base64url": keys.keys[kid].public_key_base64url}],
        "log": members,
        "tsa_roots_pem": [],
    }
    parse_trust_root(json.dumps(document))  # the project's own reader accepts it
    return document


def trust_root_v2(root: SeedSigner, log: Log | None, revocations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A version 2 trust root pinning ``root`` (and its ``revocations``)."""
    members = {"origin": ORIGIN, "vkey": log.signer.verifier.encode(), "policy": log.policy()} if log else None
    pinned = Root.of(root.public_key()).to_json()
    document = {
        "version": 2,
        "service_url": SERVICE,
        "receipt_roots": [{"kid": pinned["kid"], "public_key_base64url": pinned["public_key_base64url"]}],
        "revocations": revocations or [],
        "log": members,
        "tsa_roots_pem": [],
    }
    parse_trust_root(json.dumps(document))
    return document


def bundle(
    receipt: dict[str, Any], chain: list[dict[str, Any]], keys: KeyRing, log: Log, proof: str | None, version: int = 1
) -> dict[str, Any]:
    """As ``GET /v1/receipts/{id}/bundle`` writes it, members in its order (usecases/bundling.py);
    version 2 when ``keys`` carry their certificates."""
    return {
        "format": "eps-receipt-bundle",
        "version": version,
        "created_at": BUNDLE_AT,
        "service": SERVICE,
        "receipt": receipt,
        "keys": key_set(keys),
        "chain": chain,
        "chain_complete": True,
        "log": {"origin": ORIGIN, "log_vkey": log.signer.verifier.encode(), "proof": proof},
        "timestamps": [],
    }


def create_response(receipt: dict[str, Any]) -> dict[str, Any]:
    """A create's 201 as ``submit --save`` keeps it: the log's pending form, the service's URL."""
    return {
        "ok": True,
        "receipt": receipt,
        "idempotency": {"hit": False, "key": "ik_" + hashlib.sha256(b"table create").hexdigest()},
        "chain": dict(chain_object(receipt)),
        "quota": {
            "plan": "pro",
            "monthly_limit": 100000,
            "monthly_used": 2,
            "monthly_remaining": 99998,
            "monthly_reset_at": "2026-02-01T00:00:00.000Z",
        },
        "log": {"status": "pending", "proof_url": f"{SERVICE}/v1/receipts/{receipt['receipt_id']}/log-proof"},
        "service_url": SERVICE,
    }


def edited(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy with members replaced (``...=DELETE``: removed), in the original order."""
    out = copy.deepcopy(document)
    for name, value in changes.items():
        if value is DELETE:
            del out[name]
        else:
            out[name] = value
    return out


def renamed(document: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return {(new if name == old else name): copy.deepcopy(value) for name, value in document.items()}


DELETE = object()


def row(name: str, document: dict[str, Any], pin: str, verdict: str, reason: str | None) -> dict[str, Any]:
    return {"name": name, "document": document, "pin": pin, "expect": {"verdict": verdict, "reason": reason}}


def build_table() -> dict[str, Any]:
    keys = ring("receipt key")
    first, second = receipts(keys)
    log = Log(first, second)
    index = 3
    proof = log.proof(index)
    policy = parse_policy(log.policy())
    assert check_quorum(log.checkpoint(), policy, COSIGNED_AT).ok
    assert not check_quorum(log.checkpoint(witnesses=("w1",)), policy, COSIGNED_AT).ok

    good = bundle(second, [first], keys, log, proof)
    corrupted = [bytearray(part) for part in log.path(index)]
    corrupted[0][0] ^= 1
    stranger = ring("a stranger's key under the same kid")
    changed = dict(second, input_hash=h("what a forger wants certified"))
    valid, invalid, error, not_verified = "VALID", "INVALID", "ERROR", "NOT VERIFIED"
    rows = [
        row("bundle with its log proof", good, "trust_root_log", valid, None),
        row("bundle with its log proof, keys pinned", good, "keys", valid, None),
        row("bundle with its log proof, trust root without a log", good, "trust_root_no_log", valid, None),
        row("bundle: format renamed to forlat", renamed(good, "format", "forlat"), "trust_root_log", error, None),
        row("bundle: format deleted", edited(good, format=DELETE), "trust_root_log", error, None),
        row("bundle: format of the wrong type", edited(good, format=1), "trust_root_log", error, None),
        row("bundle: unknown format", edited(good, format="eps-receipt-bundle-v9"), "trust_root_log", error, None),
        row("bundle: version 99", edited(good, version=99), "trust_root_log", error, None),
        row(
            "bundle: version 2 whose keys carry no certificate", edited(good, version=2), "trust_root_log", error, None
        ),
        row("bundle: version 3", edited(good, version=3), "trust_root_log", error, None),
        row("bundle: version as a string", edited(good, version="1"), "trust_root_log", error, None),
        row("bundle: receipt renamed to receipts", renamed(good, "receipt", "receipts"), "trust_root_log", error, None),
        row("bundle: receipt deleted", edited(good, receipt=DELETE), "trust_root_log", error, None),
        row(
            "bundle: chain_complete of the wrong type",
            edited(good, chain_complete="yes"),
            "trust_root_log",
            error,
            None,
        ),
        row("bundle: an unknown member", edited(good, note="hello"), "trust_root_log", error, None),
        row(
            "bundle without log",
            edited(good, log=DELETE, timestamps=DELETE),
            "trust_root_log",
            not_verified,
            "no_log_proof",
        ),
        row("bare receipt, log pinned", second, "trust_root_log", not_verified, "no_log_proof"),
        row("GET body, log pinned", {"ok": True, "receipt": second}, "trust_root_log", not_verified, "no_log_proof"),
        row(
            "saved create response, log pinned", create_response(second), "trust_root_log", not_verified, "no_log_proof"
        ),
        row("bare receipt, trust root without a log", second, "trust_root_no_log", valid, None),
        row("bare receipt, keys pinned", second, "keys", valid, None),
        row("bare receipt with chain_complete", dict(second, chain_complete=True), "keys", error, None),
        row("GET body with an unknown member", {"ok": True, "receipt": second, "extra": 1}, "keys", error, None),
        row(
            "bundle whose log proof is null",
            edited(good, log={**good["log"], "proof": None}),
            "trust_root_log",
            not_verified,
            "pending",
        ),
        row(
            "bundle below the pinned quorum",
            edited(good, log={**good["log"], "proof": log.proof(index, log.checkpoint(witnesses=("w1",)))}),
            "trust_root_log",
            not_verified,
            "no_quorum",
        ),
        row(
            "bundle: a receipt field changed", edited(good, receipt=changed), "trust_root_log", invalid, "bad_signature"
        ),
        row("bare receipt: a field changed", changed, "keys", invalid, "bad_signature"),
        row(
            "bundle carrying another key for the kid",
            edited(good, keys=key_set(stranger)),
            "trust_root_log",
            invalid,
            "bad_signature",
        ),
        row(
            "bundle: corrupted inclusion proof",
            edited(good, log={**good["log"], "proof": log.proof(index, path=[bytes(p) for p in corrupted])}),
            "trust_root_log",
            invalid,
            "bad_log_proof",
        ),
        row(
            "bundle: checkpoint signed by another log key",
            edited(good, log={**good["log"], "proof": log.proof(index, log.checkpoint(log.impostor))}),
            "trust_root_log",
            invalid,
            "bad_checkpoint_signature",
        ),
    ]
    roots = Roots()
    rows += certified_rows(roots, log, proof)
    from tests import verdict_table_attested as attested  # it builds on this module's parts

    good_v2 = next(r["document"] for r in rows if r["name"] == "certified: bundle version 2, trust root version 2")
    rows += attested.rows(keys, roots, log, second, good_v2)
    names = [r["name"] for r in rows]
    assert len(set(names)) == len(names), "row names are unique"
    pins = {
        "trust_root_log": {"kind": "trust_root", "document": trust_root(keys, log)},
        "trust_root_no_log": {"kind": "trust_root", "document": trust_root(keys, None)},
        "keys": {"kind": "keys", "document": key_set(keys)},
        "trust_root_v2_log": {"kind": "trust_root", "document": trust_root_v2(roots.root, log)},
        "trust_root_v2_no_log": {"kind": "trust_root", "document": trust_root_v2(roots.root, None)},
        "trust_root_v2_revoked": {
            "kind": "trust_root",
            "document": trust_root_v2(roots.root, log, [roots.revocation()]),
        },
        "trust_root_v1_certified_key": {"kind": "trust_root", "document": trust_root(roots.ring(), log)},
        **attested.pins(roots),
    }
    return {"pins": pins, "rows": rows}


def certified_rows(roots: Roots, log: Log, proof: str) -> list[dict[str, Any]]:
    """Receipts by a key a root certifies, judged by a version 2 trust root (the roots it pins,
    the certificate the bundle carries), and by a version 1 one that pins the key itself. The
    receipts have the hashes of the other rows' (the signing key is not hashed), so the same
    log proof covers them."""
    first, second = receipts(roots.ring())
    good = bundle(second, [first], roots.ring(), log, proof, version=2)
    foreign = roots.certify(roots.stranger, CERTIFIED_FROM, CERTIFIED_UNTIL)
    expired = roots.certify(roots.root, "2026-01-14T09:00:00.000Z", "2026-01-15T09:59:59.999Z")

    def carrying(certificate: dict[str, str]) -> dict[str, Any]:
        keys = key_set(roots.ring())
        keys["keys"][0]["certificate"] = certificate
        return edited(good, keys=keys)

    uncertified = edited(good, version=1, keys={**key_set(roots.ring())})
    uncertified["keys"]["keys"] = [
        {k: v for k, v in entry.items() if k != "certificate"} for entry in uncertified["keys"]["keys"]
    ]
    valid, invalid, error, not_verified = "VALID", "INVALID", "ERROR", "NOT VERIFIED"
    return [
        row("certified: bundle version 2, trust root version 2", good, "trust_root_v2_log", valid, None),
        row("certified: bundle version 2, trust root version 1 pinning the key", good, "trust_root_v1_certified_key", valid, None),
        row("certified: bundle version 2, trust root version 2 without a log", good, "trust_root_v2_no_log", valid, None),
        row("certified: a root nobody pinned", carrying(foreign.to_json()), "trust_root_v2_log", invalid, "bad_signature"),
        row("certified: the receipt outside its key's certificate", carrying(expired.to_json()), "trust_root_v2_log", invalid, "bad_signature"),
        row("certified: the key revoked", good, "trust_root_v2_revoked", invalid, "bad_signature"),
        row("certified: a certificate whose signature fails", carrying(roots.badly_signed()), "trust_root_v2_log", invalid, "bad_signature"),
        row("certified: bare receipt, no certificate at hand", second, "trust_root_v2_no_log", not_verified, "no_key_certificate"),
        row("certified: bundle version 1, keys without certificates", uncertified, "trust_root_v2_log", not_verified, "no_key_certificate"),
        row("certified: bundle version 2, a key without its certificate", edited(uncertified, version=2), "trust_root_v2_log", error, None),
    ]  # fmt: skip


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render(build_table())
    if "--check" in argv:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUTPUT} differs from what tests/verdict_table.py makes", file=sys.stderr)
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
