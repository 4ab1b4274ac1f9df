"""``GET /v1/receipts/{id}/attestation`` (docs/attestations.md): the receipt as an in-toto
Statement in a DSSE envelope signed at creation by the receipt's own key, the same bytes on
every read; ``?format=sigstore``: the Sigstore bundle v0.3 whose log entry proves the
attestation's ``dsse`` leaf at the receipt's index + 1. Checked here with this repository's
code and PyNaCl; tests/test_attestation_verifiers.py runs verifiers nobody here wrote."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nacl.signing import VerifyKey

from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.receipts import attestation as att
from execution_proof.receipts import compact
from execution_proof.receipts.canonical import canonical_bytes
from execution_proof.transparency import note, tlog
from tests.conftest import auth
from tests.test_log import ORIGIN, SIGNER, create, integrator, log_app, log_entries, published


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return SIGNER


def b64d(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


async def public_key(client: Any, kid: str) -> bytes:
    _, response = await client.get(f"/v1/public-key?kid={kid}")
    assert response.status == 200, response.text
    (key,) = [k for k in response.json["keys"] if k["kid"] == kid]
    return base64.urlsafe_b64decode(key["public_key_base64url"] + "==")


async def test_the_envelope_is_the_receipt_signed_by_its_key_and_the_same_on_every_read(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="att", plan="pro")
    receipt = (await create(client, key, "one"))["receipt"]
    url = f"/v1/receipts/{receipt['receipt_id']}/attestation"
    _, first = await client.get(url)
    _, second = await client.get(url + "?format=dsse")
    assert first.status == 200, first.text
    assert first.headers["content-type"] == "application/json"
    assert first.headers["access-control-allow-origin"] == "*"
    assert first.body == second.body, "the same bytes on every read"
    envelope = first.json
    assert set(envelope) == {"payloadType", "payload", "signatures"}
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    (signature,) = envelope["signatures"]
    assert signature["keyid"] == receipt["sig_kid"]
    payload = b64d(envelope["payload"])
    statement = orjson.loads(payload)
    assert payload == canonical_bytes(statement), "the payload is RFC 8785"
    assert statement == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "output", "digest": {"sha256": receipt["output_hash"][7:]}}],
        "predicateType": "https://github.com/execution-proof/execution-proof/attestation/receipt/v1",
        "predicate": {"receipt": receipt, "log_origin": ORIGIN},
    }
    pae = b"DSSEv1 %d application/vnd.in-toto+json %d " % (len("application/vnd.in-toto+json"), len(payload)) + payload
    raw = await public_key(client, receipt["sig_kid"])
    VerifyKey(raw).verify(pae, b64d(signature["sig"]))
    with pytest.raises(Exception, match="Signature was forged"):
        VerifyKey(raw).verify(pae.replace(b'"input"', b'"inpuT"') + b" ", b64d(signature["sig"]))


async def test_a_receipt_without_an_output_names_its_input_and_without_a_log_no_origin(
    store: Store, log_store: LogStore, receipt_root: str
) -> None:
    client = log_app(store, log_store, receipt_root, None).asgi_client
    key = await create_project_key(store.keys, project_name="att-in", plan="pro")
    body = {"input_hash": "sha256:" + "ab" * 32, "receipt_kind": "release"}
    _, made = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert made.status == 201, made.text
    receipt = made.json["receipt"]
    _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}/attestation")
    statement = orjson.loads(b64d(response.json["payload"]))
    assert statement["subject"] == [{"name": "input", "digest": {"sha256": "ab" * 32}}]
    assert statement["predicate"]["log_origin"] is None
    # Without a log, the Sigstore bundle carries no log entry.
    _, bundle = await client.get(f"/v1/receipts/{receipt['receipt_id']}/attestation?format=sigstore")
    assert bundle.status == 200, bundle.text
    assert bundle.headers["content-type"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert bundle.json == {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": receipt["sig_kid"]}},
        "dsseEnvelope": response.json,
    }


async def test_unknown_receipts_and_formats_are_clear_4xx(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    _, missing = await client.get("/v1/receipts/rcpt_01HZZZZZZZZZZZZZZZZZZZZZZZ/attestation")
    assert missing.status == 404 and missing.json["error"]["code"] == "not_found"
    _, junk = await client.get("/v1/receipts/nope/attestation")
    assert junk.status == 404 and junk.json["error"]["code"] == "not_found"
    key = await create_project_key(store.keys, project_name="att-fmt", plan="pro")
    receipt = (await create(client, key, "fmt"))["receipt"]
    _, bad = await client.get(f"/v1/receipts/{receipt['receipt_id']}/attestation?format=cosign")
    assert bad.status == 400 and bad.json["error"]["code"] == "bad_request"
    assert bad.json["error"]["details"]["field"] == "format"


async def test_the_sigstore_bundle_proves_the_leaf_after_the_receipt_entry(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    worker = await integrator(store, log_store, signer)
    key = await create_project_key(store.keys, project_name="att-log", plan="pro")
    receipts = [(await create(client, key, f"log-{n}"))["receipt"] for n in range(5)]
    url = f"/v1/receipts/{receipts[2]['receipt_id']}/attestation?format=sigstore"
    _, pending = await client.get(url)
    assert pending.status == 409 and pending.json["error"]["code"] == "log_pending"
    assert pending.headers["retry-after"] == "1"
    await worker.step(force=True)
    checkpoint = await published(log_store, signer)
    _, response = await client.get(url)
    assert response.status == 200, response.text
    bundle = response.json
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    _, envelope = await client.get(url.replace("?format=sigstore", ""))
    assert bundle["dsseEnvelope"] == envelope.json
    assert bundle["verificationMaterial"]["publicKey"] == {"hint": receipts[2]["sig_kid"]}
    (entry,) = bundle["verificationMaterial"]["tlogEntries"]
    assert entry["kindVersion"] == {"kind": "dsse", "version": "0.0.2"}
    key_hash = hashlib.sha256(ORIGIN.encode() + b"\n\x01" + signer.verifier.public_key).digest()
    assert entry["logId"] == {"keyId": base64.b64encode(key_hash).decode()}
    index = int(entry["logIndex"])
    entries = await log_entries(log_store, checkpoint.size)
    # The receipt's own entry, then its attestation's leaf.
    assert entries[index - 1] == tlog.entry_bytes(receipts[2])
    body = b64d(entry["canonicalizedBody"])
    assert entries[index] == body
    raw = await public_key(client, receipts[2]["sig_kid"])
    payload = b64d(envelope.json["payload"])
    assert orjson.loads(body) == {
        "apiVersion": "0.0.2",
        "kind": "dsse",
        "spec": {
            "dsseV002": {
                "payloadHash": {
                    "algorithm": "SHA2_256",
                    "digest": base64.b64encode(hashlib.sha256(payload).digest()).decode(),
                },
                "signatures": [
                    {
                        "content": envelope.json["signatures"][0]["sig"],
                        "verifier": {
                            "publicKey": {
                                "rawBytes": base64.b64encode(bytes.fromhex("302a300506032b6570032100") + raw).decode()
                            },
                            "keyDetails": "PKIX_ED25519",
                        },
                    }
                ],
            }
        },
    }
    assert body == canonical_bytes(orjson.loads(body))
    proof = entry["inclusionProof"]
    opened, _ = note.open_checkpoint(proof["checkpoint"]["envelope"], signer.verifier)
    assert (int(proof["treeSize"]), b64d(proof["rootHash"])) == (opened.size, opened.root)
    assert proof["logIndex"] == entry["logIndex"]
    path = [b64d(h) for h in proof["hashes"]]
    tlog.verify_inclusion(tlog.leaf_hash(body), index, opened.size, path, opened.root)
    # Every receipt is followed by its leaf: twice as many entries as receipts, and the key
    # certificate.
    assert sum(e.startswith(tlog.DSSE_HEADER) for e in entries) == 5
    for at, one in enumerate(entries):
        if one.startswith(tlog.ENTRY_HEADER.encode()):
            assert entries[at + 1].startswith(tlog.DSSE_HEADER)
            assert att.parse_log_body(entries[at + 1]).public_key == raw


async def test_the_record_keeps_the_signature_in_both_forms(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer
) -> None:
    client = log_app(store, log_store, receipt_root, signer).asgi_client
    key = await create_project_key(store.keys, project_name="att-rec", plan="pro")
    receipt = (await create(client, key, "rec"))["receipt"]
    stored = await store.client.get(keys.receipt_key(receipt["receipt_id"]))
    assert compact.is_compact(stored)
    kept = compact.kept(stored)
    assert kept is not None and kept.log_origin == ORIGIN and len(kept.signature) == 64
    # A receipt the compact form cannot hold is stored as JSON with the same kept tail.
    as_json = compact.encode({**receipt, "extra": "x"}, orjson.dumps({**receipt, "extra": "x"}), kept)  # type: ignore[typeddict-unknown-key]
    assert as_json[0] == compact.JSON_KEPT
    assert compact.decode(as_json) == orjson.dumps({**receipt, "extra": "x"})
    assert compact.kept(as_json) == kept
    unlogged = compact.Kept(kept.signature, None)
    assert compact.kept(compact.encode(receipt, orjson.dumps(receipt), unlogged)) == unlogged


def test_pae_is_dsse_v1s_encoding() -> None:
    """The DSSE specification's own example (protocol.md)."""
    assert att.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


@given(st.binary(min_size=32, max_size=32), st.binary(min_size=64, max_size=64), st.binary(min_size=32, max_size=32))
def test_the_log_body_template_is_rfc_8785_of_the_dsse_body(digest: bytes, signature: bytes, key: bytes) -> None:
    body = att.log_body(digest, signature, key)
    value = orjson.loads(body)
    assert canonical_bytes(value) == body
    assert att.parse_log_body(body) == att.LogBody(digest, signature, key)
    assert (
        value["spec"]["dsseV002"]["signatures"][0]["verifier"]["publicKey"]["rawBytes"]
        == base64.b64encode(att.spki_der(key)).decode()
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v.update(apiVersion="0.0.1"),
        lambda v: v.update(kind="hashedrekord"),
        lambda v: v["spec"]["dsseV002"]["payloadHash"].update(algorithm="SHA2_384"),
        lambda v: v["spec"]["dsseV002"]["signatures"].append(v["spec"]["dsseV002"]["signatures"][0]),
        lambda v: v["spec"]["dsseV002"].update(extra=1),
        lambda v: v["spec"]["dsseV002"]["signatures"][0]["verifier"].update(keyDetails="PKIX_ECDSA_P256_SHA_256"),
        lambda v: v["spec"]["dsseV002"]["signatures"][0].update(content="AA=="),
    ],
)
def test_a_log_body_not_exactly_ours_is_refused(change: Any) -> None:
    value = orjson.loads(att.log_body(b"1" * 32, b"2" * 64, b"3" * 32))
    change(value)
    with pytest.raises(att.AttestationError):
        att.parse_log_body(canonical_bytes(value))
    with pytest.raises(att.AttestationError, match="RFC 8785"):
        att.parse_log_body(
            orjson.dumps(orjson.loads(att.log_body(b"1" * 32, b"2" * 64, b"3" * 32)), option=orjson.OPT_INDENT_2)
        )
