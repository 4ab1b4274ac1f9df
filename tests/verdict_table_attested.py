"""The verdict table's rows for a receipt's in-toto attestation (docs/verdicts.md,
"Attestations"): the DSSE envelope, the Sigstore bundle v0.3 whose log entry proves the
attestation's ``dsse`` leaf, and a version 2 bundle carrying the envelope as ``attestation``.

Built as the service builds them (receipts/attestation.py: ``attest``; receipts/sigstore.py:
``tlog_entry``, ``bundle``), over the table's fixed keys. The log is the table's log grown:
its five entries, then two more receipts of the project, each followed by its attestation's
leaf (as the service queues them), and a filler; its checkpoint is signed and cosigned like the
table's. The third receipt is signed by the table's key, the fourth by the certified key (a key
rotation in the project's chain), so each pin of the table has a row.

tests/verdict_table.py calls ``rows`` and ``pins``; ``python -m tests.verdict_table`` writes the
table.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from execution_proof.receipts import sigstore
from execution_proof.receipts.attestation import Attestation, attest, b64, spki_der
from execution_proof.receipts.canonical import canonical_bytes
from execution_proof.receipts.model import build_receipt, parse_create_request, place_in_chain
from execution_proof.receipts.signing import KeyRing
from execution_proof.transparency import note, tlog
from tests import verdict_table as vt

THIRD_ID = "rcpt_01KF0HJ082VERDCT00000000R2"
FOURTH_ID = "rcpt_01KF0HJ083VERDCT00000000R3"
THIRD_AT = "2026-01-15T10:00:02.000Z"
FOURTH_AT = "2026-01-15T10:00:03.000Z"


def later_receipts(keys: KeyRing, certified: KeyRing, second: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project's third receipt (the table's key) and fourth (the certified key)."""
    third = build_receipt(
        parse_create_request(
            {"input_hash": vt.h("table input 3"), "output_hash": vt.h("table output 3"), "run_id": "run-3"}
        ),
        receipt_id=THIRD_ID,
        project_id=vt.PROJECT,
        actor_id=vt.ACTOR,
        created_at=THIRD_AT,
        placement=place_in_chain(None, second["receipt_hash"]),
        keyring=keys,
    )
    fourth = build_receipt(
        parse_create_request({"input_hash": vt.h("table input 4"), "receipt_kind": "release"}),
        receipt_id=FOURTH_ID,
        project_id=vt.PROJECT,
        actor_id=vt.ACTOR,
        created_at=FOURTH_AT,
        placement=place_in_chain(None, third["receipt_hash"]),
        keyring=certified,
    )
    return dict(third), dict(fourth)


def signed(receipt: dict[str, Any], keys: KeyRing, origin: str | None = vt.ORIGIN) -> Attestation:
    """The receipt's attestation, signed at creation by the key that signed it."""
    return attest(receipt, origin, keys.active_signer)


def public(keys: KeyRing) -> bytes:
    return bytes(keys.keys[str(keys.active_kid)].verify_key)


class Grown:
    """The table's log with the two receipts and their attestations' leaves appended."""

    def __init__(self, log: vt.Log, pairs: list[tuple[dict[str, Any], bytes]]) -> None:
        self.log = log
        entries: list[bytes] = []
        for receipt, leaf in pairs:
            entries += [tlog.entry_bytes(receipt), leaf]
        self.leaves = [*log.leaves, *(tlog.leaf_hash(entry) for entry in [*entries, vt.filler(9)])]
        self.size = len(self.leaves)
        self.root = tlog.merkle_root(self.leaves)
        self.text = note.Checkpoint(vt.ORIGIN, self.size, self.root).text()

    def path(self, index: int) -> list[bytes]:
        tile = b"".join(self.leaves)
        view = tlog.TileHashes(self.size, lambda level, index, width: tile[: width * tlog.HASH_SIZE])
        path = view.inclusion_proof(index)
        tlog.verify_inclusion(self.leaves[index], index, self.size, path, self.root)
        return path

    def checkpoint(
        self, signer: note.Signer | None = None, witnesses: tuple[str, ...] = ("w1", "w2"), text: str = ""
    ) -> str:
        chosen = text or self.text
        signed = note.sign_note(chosen, signer or self.log.signer)
        return signed + "".join(self.log.witnesses[name].cosign(chosen, vt.COSIGNED_AT) for name in witnesses)

    def entry(self, leaf: bytes, index: int, checkpoint: str | None = None) -> dict[str, Any]:
        key_id = sigstore.checkpoint_key_id(vt.ORIGIN, self.log.signer.verifier.public_key)
        return sigstore.tlog_entry(
            leaf, index, self.path(index), self.size, self.root, checkpoint or self.checkpoint(), key_id
        )


def with_entry(bundle: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of a Sigstore bundle whose one tlog entry has ``changes`` (``proof_*``: in its
    inclusionProof)."""
    out = copy.deepcopy(bundle)
    (entry,) = out["verificationMaterial"]["tlogEntries"]
    for name, value in changes.items():
        if name.startswith("proof_"):
            entry["inclusionProof"][name.removeprefix("proof_")] = value
        else:
            entry[name] = value
    return out


def flipped(text: str) -> str:
    """Standard base64 of the same bytes with the first bit flipped."""
    raw = bytearray(base64.b64decode(text))
    raw[0] ^= 1
    return b64(bytes(raw))


def envelope_with(envelope: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(envelope)
    for name, value in changes.items():
        if name in ("keyid", "sig"):
            out["signatures"][0][name] = value
        else:
            out[name] = value
    return out


def statement_payload(receipt: dict[str, Any], origin: str | None) -> str:
    from execution_proof.receipts.attestation import statement

    return b64(canonical_bytes(statement(receipt, origin)))


def keys_json(keys: KeyRing) -> dict[str, str]:
    """``keys.json`` as ``trust-root --sigstore`` writes it: each kid's DER SPKI, standard base64."""
    return {kid: b64(spki_der(bytes(key.verify_key))) for kid, key in keys.keys.items()}


def pins(roots: vt.Roots) -> dict[str, Any]:
    return {"keys_json": {"kind": "keys", "document": keys_json(roots.ring())}}


def rows(
    keys: KeyRing, roots: vt.Roots, log: vt.Log, second: dict[str, Any], good_v2: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every attestation row: ``good_v2`` is the table's version 2 bundle of the certified key's
    second receipt (VALID under ``trust_root_v2_log``)."""
    certified = roots.ring()
    third, fourth = later_receipts(keys, certified, second)
    by_table, by_certified = signed(third, keys), signed(fourth, certified)
    leaf3, leaf4 = by_table.log_body(public(keys)), by_certified.log_body(public(certified))
    grown = Grown(log, [(third, leaf3), (fourth, leaf4)])
    at3, at4 = log.size + 1, log.size + 3  # each leaf right after its receipt's entry
    envelope3, envelope4 = by_table.envelope(), by_certified.envelope()
    bundle3 = sigstore.bundle(by_table, grown.entry(leaf3, at3))
    bundle4 = sigstore.bundle(by_certified, grown.entry(leaf4, at4))
    unlogged3 = sigstore.bundle(by_table, None)
    changed = dict(third, output_hash=vt.h("what a forger wants attested"))
    impostor = grown.checkpoint(log.impostor)
    renamed_origin = grown.checkpoint(text=grown.text.replace(vt.ORIGIN, "elsewhere.example/log", 1))
    (entry3,) = bundle3["verificationMaterial"]["tlogEntries"]
    hashes = entry3["inclusionProof"]["hashes"]

    second_v2 = good_v2["receipt"]
    carried = signed(second_v2, certified).envelope()
    with_member = {**good_v2, "attestation": carried}
    valid, invalid, error, not_verified = "VALID", "INVALID", "ERROR", "NOT VERIFIED"
    row = vt.row
    return [
        row("attestation: envelope, keys pinned", envelope3, "keys", valid, None),
        row("attestation: envelope, trust root without a log", envelope3, "trust_root_no_log", valid, None),
        row("attestation: envelope, log pinned", envelope3, "trust_root_log", not_verified, "no_log_proof"),
        row("attestation: envelope, trust root version 2", envelope4, "trust_root_v2_no_log", not_verified, "no_key_certificate"),
        row("attestation: envelope, keys.json pinned", envelope4, "keys_json", valid, None),
        row("attestation: envelope of another receipt's key, keys.json pinned", envelope3, "keys_json", invalid, "bad_signature"),
        row("attestation: envelope, the receipt changed", envelope_with(envelope3, payload=statement_payload(changed, vt.ORIGIN)), "keys", invalid, "bad_signature"),
        row("attestation: envelope, log_origin changed", envelope_with(envelope3, payload=statement_payload(third, "elsewhere.example/log")), "keys", invalid, "bad_signature"),
        row("attestation: envelope, signature changed", envelope_with(envelope3, sig=flipped(envelope3["signatures"][0]["sig"])), "keys", invalid, "bad_signature"),
        row("attestation: envelope, keyid changed", envelope_with(envelope3, keyid="table-2027"), "keys", invalid, "bad_signature"),
        row("attestation: envelope with an unknown member", envelope_with(envelope3, note="hello"), "keys", error, None),
        row("attestation: envelope with two signatures", envelope_with(envelope3, signatures=envelope3["signatures"] * 2), "keys", error, None),
        row("attestation: envelope of another payloadType", envelope_with(envelope3, payloadType="application/json"), "keys", error, None),
        row("attestation: envelope whose payload is no Statement", envelope_with(envelope3, payload=b64(b'{"receipt": 1}')), "keys", error, None),
        row("attestation: Sigstore bundle, log pinned", bundle3, "trust_root_log", valid, None),
        row("attestation: Sigstore bundle, keys pinned", bundle3, "keys", valid, None),
        row("attestation: Sigstore bundle, keys.json pinned", bundle4, "keys_json", valid, None),
        row("attestation: Sigstore bundle, trust root version 2", bundle4, "trust_root_v2_log", not_verified, "no_key_certificate"),
        row("attestation: Sigstore bundle without tlogEntries, log pinned", unlogged3, "trust_root_log", not_verified, "no_log_proof"),
        row("attestation: Sigstore bundle without tlogEntries, trust root without a log", unlogged3, "trust_root_no_log", valid, None),
        row("attestation: Sigstore bundle below the pinned quorum", with_entry(bundle3, proof_checkpoint={"envelope": grown.checkpoint(witnesses=("w1",))}), "trust_root_log", not_verified, "no_quorum"),
        row("attestation: Sigstore bundle, rootHash changed", with_entry(bundle3, proof_rootHash=flipped(entry3["inclusionProof"]["rootHash"])), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, treeSize changed", with_entry(bundle3, proof_treeSize=str(grown.size + 1)), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, logId changed", with_entry(bundle3, logId={"keyId": flipped(entry3["logId"]["keyId"])}), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, logIndex changed", with_entry(bundle3, logIndex=str(at3 - 1), proof_logIndex=str(at3 - 1)), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, inclusionProof.logIndex changed", with_entry(bundle3, proof_logIndex=str(at3 + 2)), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, canonicalizedBody changed", with_entry(bundle3, canonicalizedBody=b64(leaf4)), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, a proof hash changed", with_entry(bundle3, proof_hashes=[flipped(hashes[0]), *hashes[1:]]), "trust_root_log", invalid, "bad_log_proof"),
        row("attestation: Sigstore bundle, checkpoint signed by another log key", with_entry(bundle3, proof_checkpoint={"envelope": impostor}), "trust_root_log", invalid, "bad_checkpoint_signature"),
        row("attestation: Sigstore bundle, checkpoint origin changed", with_entry(bundle3, proof_checkpoint={"envelope": renamed_origin}), "trust_root_log", invalid, "bad_checkpoint_signature"),
        row("attestation: Sigstore bundle, key hint changed", {**bundle3, "verificationMaterial": {**bundle3["verificationMaterial"], "publicKey": {"hint": "table-2027"}}}, "trust_root_log", invalid, "bad_signature"),
        row("attestation: Sigstore bundle, payload changed", {**bundle3, "dsseEnvelope": envelope_with(envelope3, payload=statement_payload(changed, vt.ORIGIN))}, "trust_root_log", invalid, "bad_signature"),
        row("attestation: Sigstore bundle with an unknown member", {**bundle3, "note": "hello"}, "trust_root_log", error, None),
        row("attestation: Sigstore bundle of another mediaType", {**bundle3, "mediaType": "application/vnd.dev.sigstore.bundle.v0.2+json"}, "trust_root_log", error, None),
        row("attestation: Sigstore bundle with two tlogEntries", {**bundle3, "verificationMaterial": {**bundle3["verificationMaterial"], "tlogEntries": [entry3, entry3]}}, "trust_root_log", error, None),
        row("attestation: Sigstore bundle, an entry of another kind", with_entry(bundle3, kindVersion={"kind": "hashedrekord", "version": "0.0.2"}), "trust_root_log", error, None),
        row("attestation: bundle version 2 carrying its envelope", with_member, "trust_root_v2_log", valid, None),
        row("attestation: bundle version 2 carrying another receipt's envelope", {**good_v2, "attestation": envelope4}, "trust_root_v2_log", invalid, "bad_signature"),
        row("attestation: bundle version 2 whose envelope names another log", {**good_v2, "attestation": signed(second_v2, certified, "elsewhere.example/log").envelope()}, "trust_root_v2_log", invalid, "bad_signature"),
        row("attestation: bundle version 2 carrying its envelope, log taken out", vt.edited(with_member, log=vt.DELETE, timestamps=vt.DELETE), "trust_root_v2_log", not_verified, "no_log_proof"),
        row("attestation: bundle version 2 carrying its envelope, log taken out, no log pinned", vt.edited(with_member, log=vt.DELETE, timestamps=vt.DELETE), "trust_root_v2_no_log", valid, None),
        row("attestation: bundle version 2 whose envelope's signature changed", {**good_v2, "attestation": envelope_with(carried, sig=flipped(carried["signatures"][0]["sig"]))}, "trust_root_v2_log", invalid, "bad_signature"),
        row("attestation: bundle version 2 whose envelope is malformed", {**good_v2, "attestation": {"payload": carried["payload"]}}, "trust_root_v2_log", error, None),
        row("attestation: bundle version 1 carrying an envelope", {**vt.edited(good_v2, version=1), "attestation": carried}, "trust_root_v2_log", error, None),
    ]  # fmt: skip
