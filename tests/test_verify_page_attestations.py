"""The ``/verify`` page reads a receipt's attestations (docs/verify-page.md, "Attestations"):
the DSSE envelope of ``GET /v1/receipts/{id}/attestation``, the Sigstore bundle v0.3 of
``?format=sigstore``, and a version 2 bundle's ``attestation``.

First, under Node.js, the page's own modules (static/verify-read.js, static/verify-attest.js)
against the Python they mirror (receipts/attestation.py, receipts/sigstore.py): the same
envelopes read or refused as ``parse_envelope`` + ``parse_statement`` + the receipt's own
reader do, and the same PAE, dsse 0.0.2 body and C2SP key hash bytes.

Then the whole page in a real Chromium, against a real ``service.py serve`` (embedded store, its
own integrator and log): the documents the service answers, valid against a trust root that
pins its key and log (with no request at all), against the service's own keys and log, and
against a saved key set; every tampering the rules name found INVALID with its reason; the
missing parts NOT VERIFIED with theirs; and whatever does not read refused before anything is
checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from nacl.signing import SigningKey

from execution_proof.client.documents import receipt_fault
from execution_proof.receipts import attestation as att
from execution_proof.receipts import sigstore
from execution_proof.receipts.canonical import canonical_bytes
from execution_proof.receipts.key_certificates import key_kid
from execution_proof.transparency import note
from execution_proof.transparency.cosignature import Cosigner
from tests.conftest import REPO, hash_of, missing_binary
from tests.servers import ServicePool, run_cli
from tests.test_verify_page import Page, browser, drop_file  # noqa: F401  (the module fixture)
from tests.verdict_table import Roots, receipts

STATIC = REPO / "execution_proof" / "static"
ORIGIN = "attest.example/log"

Document = dict[str, Any]


def b64d(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def run_node(script: str, stdin: Any, *modules: Path) -> Any:
    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the verification page's JavaScript is tested under Node.js")
    assert node is not None
    done = subprocess.run(
        [node, "--input-type=module", "-e", script, *map(str, modules)],
        input=json.dumps(stdin).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


# ---------------------------------------------------------------- the page's modules, under Node.js

READ_HARNESS = """
const read = await import(process.argv[1]);
const { readFileSync } = await import('node:fs');
const out = [];
for (const value of JSON.parse(readFileSync(0, 'utf8'))) {
  try {
    const doc = read.readDocument(value);
    out.push({ shape: doc.shape, receipt_id: doc.receipt.receipt_id, origin: doc.attestation.logOrigin,
               keyid: doc.attestation.keyid, entry: Boolean(doc.sigstore && doc.sigstore.entry) });
  } catch (err) {
    out.push({ error: err.constructor.name, message: err.message });
  }
}
console.log(JSON.stringify(out));
"""


def fixed_envelope() -> tuple[Document, dict[str, Any], bytes]:
    """An envelope made by receipts/attestation.py for a receipt of the verdict table's
    certified key: (envelope, receipt, raw public key)."""
    roots = Roots()
    _, receipt = receipts(roots.ring())
    made = att.attest(receipt, ORIGIN, SigningKey(roots.seed))
    return made.envelope(), receipt, roots.public


def with_payload(
    envelope: Document, change: Callable[[dict[str, Any]], None], form: Callable[[Any], bytes]
) -> Document:
    statement = orjson.loads(b64d(envelope["payload"]))
    change(statement)
    return {**envelope, "payload": att.b64(form(statement))}


def envelope_variants() -> list[tuple[str, Any]]:
    envelope, _, _ = fixed_envelope()
    (signature,) = envelope["signatures"]
    assert re.search("[+/]", signature["sig"]), "the base64url variant differs"
    canonical = canonical_bytes

    def drop(name: str) -> Document:
        return {k: v for k, v in envelope.items() if k != name}

    def in_receipt(**changes: Any) -> Callable[[dict[str, Any]], None]:
        return lambda s: s["predicate"]["receipt"].update(changes)

    return [
        ("as made", envelope),
        (
            "another log origin (reads; its signature fails)",
            with_payload(envelope, lambda s: s["predicate"].update(log_origin="x"), canonical),
        ),
        ("no log origin", with_payload(envelope, lambda s: s["predicate"].update(log_origin=None), canonical)),
        ("a changed receipt value (reads)", with_payload(envelope, in_receipt(code_ref="git:other"), canonical)),
        ("an unknown member", {**envelope, "note": "x"}),
        ("no payloadType", drop("payloadType")),
        ("another payloadType", {**envelope, "payloadType": "application/json"}),
        ("two signatures", {**envelope, "signatures": [signature, signature]}),
        ("no signature", {**envelope, "signatures": []}),
        ("a signature with a cert", {**envelope, "signatures": [{**signature, "cert": ""}]}),
        ("a keyid that is a number", {**envelope, "signatures": [{**signature, "keyid": 7}]}),
        ("a sig of 63 bytes", {**envelope, "signatures": [{**signature, "sig": att.b64(b"\1" * 63)}]}),
        (
            "a sig in base64url",
            {**envelope, "signatures": [{**signature, "sig": signature["sig"].replace("+", "-").replace("/", "_")}]},
        ),
        ("a sig without padding", {**envelope, "signatures": [{**signature, "sig": signature["sig"].rstrip("=")}]}),
        (
            "a payload with a line break",
            {**envelope, "payload": envelope["payload"][:76] + "\n" + envelope["payload"][76:]},
        ),
        ("a payload that is not JSON", {**envelope, "payload": att.b64(b"not json")}),
        (
            "a payload not in RFC 8785 form",
            with_payload(envelope, lambda s: None, lambda s: orjson.dumps(s, option=orjson.OPT_INDENT_2)),
        ),
        (
            "a payload in key order but with spaces",
            with_payload(envelope, lambda s: None, lambda s: json.dumps(s, sort_keys=True).encode()),
        ),
        (
            "another _type",
            with_payload(envelope, lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"), canonical),
        ),
        (
            "another predicateType",
            with_payload(envelope, lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"), canonical),
        ),
        ("a subject of the input", with_payload(envelope, lambda s: s["subject"][0].update(name="input"), canonical)),
        (
            "a subject of another digest",
            with_payload(envelope, lambda s: s["subject"][0]["digest"].update(sha256="00" * 32), canonical),
        ),
        ("two subjects", with_payload(envelope, lambda s: s["subject"].append(s["subject"][0]), canonical)),
        ("an unknown Statement member", with_payload(envelope, lambda s: s.update(extra="x"), canonical)),
        ("an unknown predicate member", with_payload(envelope, lambda s: s["predicate"].update(extra="x"), canonical)),
        (
            "a log origin that is a list",
            with_payload(envelope, lambda s: s["predicate"].update(log_origin=[]), canonical),
        ),
        (
            "a receipt without code_ref",
            with_payload(envelope, lambda s: s["predicate"]["receipt"].pop("code_ref"), canonical),
        ),
        ("a receipt with a number", with_payload(envelope, in_receipt(run_id=7), canonical)),
        ("a receipt with an unknown member", with_payload(envelope, in_receipt(extra="x"), canonical)),
        ("a receipt without hashes", with_payload(envelope, in_receipt(output_hash=None, input_hash=None), canonical)),
    ]


def python_reads(value: Any) -> bool:
    """What the library's readers make of a document that is an envelope: parse_envelope,
    parse_statement, and the receipt read as a bare receipt is."""
    try:
        statement = att.parse_envelope(value).statement()
    except att.AttestationError:
        return False
    return receipt_fault(statement["predicate"]["receipt"]) is None


def test_the_page_reads_and_refuses_the_envelopes_the_library_does() -> None:
    variants = envelope_variants()
    answers = run_node(READ_HARNESS, [value for _, value in variants], STATIC / "verify-read.js")
    accepted = []
    for (what, value), answer in zip(variants, answers, strict=True):
        assert ("error" not in answer) == python_reads(value), (what, answer)
        if "error" in answer:
            assert answer["error"] == "ReadError", (what, answer)
        else:
            accepted.append(what)
            assert answer["shape"] == "envelope" and answer["keyid"] == value["signatures"][0]["keyid"]
    assert accepted == [
        "as made",
        "another log origin (reads; its signature fails)",
        "no log origin",
        "a changed receipt value (reads)",
    ]
    named = dict(zip([what for what, _ in variants], answers, strict=True))
    assert named["an unknown member"]["message"] == "The DSSE envelope has unknown members: note: it is malformed."
    assert "unknown members: cert" in named["a signature with a cert"]["message"]
    assert "not in RFC 8785 form" in named["a payload in key order but with spaces"]["message"]
    assert "unknown members: extra" in named["a receipt with an unknown member"]["message"]


def sigstore_variants() -> list[tuple[str, Any, bool]]:
    """A Sigstore bundle as receipts/sigstore.py makes it, and copies one fault away: (what, bundle, reads)."""
    envelope, _, raw = fixed_envelope()
    made = att.parse_envelope(envelope)
    leaf = made.log_body(raw)
    signer = note.Signer(ORIGIN, hashlib.sha256(b"page attestations: log key").digest())
    checkpoint = note.sign_note(note.Checkpoint(ORIGIN, 2, b"\7" * 32).text(), signer)
    entry = sigstore.tlog_entry(
        leaf, 1, [b"\5" * 32], 2, b"\7" * 32, checkpoint, sigstore.checkpoint_key_id(ORIGIN, signer.verifier.public_key)
    )
    good = sigstore.bundle(made, entry)

    def changed(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        copy = json.loads(json.dumps(good))
        change(copy)
        return copy

    def in_entry(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        return changed(lambda b: change(b["verificationMaterial"]["tlogEntries"][0]))

    return [
        ("as made", good, True),
        ("without a log", sigstore.bundle(made, None), True),
        # Values that read, and are then checked (INVALID when they do not hold).
        ("another hint", changed(lambda b: b["verificationMaterial"]["publicKey"].update(hint="key-other")), True),
        ("another treeSize", in_entry(lambda e: e["inclusionProof"].update(treeSize="3")), True),
        # Shapes that do not read.
        ("an unknown member", {**good, "extra": 1}, False),
        ("another kind", in_entry(lambda e: e["kindVersion"].update(kind="hashedrekord")), False),
        ("another version", in_entry(lambda e: e["kindVersion"].update(version="0.0.1")), False),
        ("a rootHash of 31 bytes", in_entry(lambda e: e["inclusionProof"].update(rootHash=att.b64(b"\0" * 31))), False),
        (
            "a proof hash of 33 bytes",
            in_entry(lambda e: e["inclusionProof"].update(hashes=[att.b64(b"\0" * 33)])),
            False,
        ),
        ("a logIndex of 20 digits", in_entry(lambda e: e.update(logIndex="1" * 20)), False),
        ("a treeSize with a leading zero", in_entry(lambda e: e["inclusionProof"].update(treeSize="03")), False),
        ("another mediaType", {**good, "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.2"}, False),
        ("no dsseEnvelope", {k: v for k, v in good.items() if k != "dsseEnvelope"}, False),
        (
            "a messageSignature instead",
            {**{k: v for k, v in good.items() if k != "dsseEnvelope"}, "messageSignature": {}},
            False,
        ),
        ("an envelope with an unknown member", changed(lambda b: b["dsseEnvelope"].update(extra=1)), False),
        ("a certificate", changed(lambda b: b["verificationMaterial"].update(certificate={})), False),
        ("a publicKey without hint", changed(lambda b: b["verificationMaterial"].update(publicKey={})), False),
        ("no tlog entry in a list", changed(lambda b: b["verificationMaterial"].update(tlogEntries=[])), False),
        ("two tlog entries", changed(lambda b: b["verificationMaterial"]["tlogEntries"].append(entry)), False),
        ("an entry with an unknown member", in_entry(lambda e: e.update(inclusionPromise={})), False),
        ("a logIndex that is a number", in_entry(lambda e: e.update(logIndex=1)), False),
        ("a logIndex with a sign", in_entry(lambda e: e.update(logIndex="+1")), False),
        (
            "a body in base64url",
            in_entry(
                lambda e: e.update(
                    canonicalizedBody=e["canonicalizedBody"].replace("+", "-").replace("/", "_").rstrip("=")
                )
            ),
            False,
        ),
        ("a proof with an unknown member", in_entry(lambda e: e["inclusionProof"].update(extra=1)), False),
        ("a checkpoint that is text", in_entry(lambda e: e["inclusionProof"].update(checkpoint=checkpoint)), False),
        ("hashes that are not base64", in_entry(lambda e: e["inclusionProof"].update(hashes=["*"])), False),
    ]


def test_the_page_reads_sigstore_bundles_strictly() -> None:
    variants = sigstore_variants()
    answers = run_node(READ_HARNESS, [value for _, value, _ in variants], STATIC / "verify-read.js")
    for (what, _, reads), answer in zip(variants, answers, strict=True):
        assert ("error" not in answer) == reads, (what, answer)
        if reads:
            assert answer["shape"] == "sigstore" and answer["origin"] == ORIGIN, (what, answer)
            assert answer["entry"] == (what != "without a log"), what
    named = {what: answer for (what, _, _), answer in zip(variants, answers, strict=True)}
    assert named["an unknown member"]["message"] == "The Sigstore bundle has unknown members: extra: it is malformed."
    assert "unknown members: inclusionPromise" in named["an entry with an unknown member"]["message"]
    assert "is not a list of exactly one entry" in named["two tlog entries"]["message"]
    assert "not of kind dsse 0.0.2" in named["another kind"]["message"]


PINNED_HARNESS = """
const read = await import(process.argv[1]);
const { readFileSync } = await import('node:fs');
const out = [];
for (const text of JSON.parse(readFileSync(0, 'utf8'))) {
  try {
    const pins = await read.readPinned(text, 'keys.json');
    out.push({ kind: pins.kind, keys: pins.keys.keys, log: pins.log });
  } catch (err) {
    out.push({ error: err.constructor.name, message: err.message });
  }
}
console.log(JSON.stringify(out));
"""


def test_the_saved_key_set_may_be_the_sigstore_key_file() -> None:
    """keys.json as ``trust-root --sigstore DIR`` writes it (kid -> standard base64 of the DER
    SubjectPublicKeyInfo), which ``verify --keys`` takes: its keys pinned, no log."""
    raw = [hashlib.sha256(f"key {n}".encode()).digest() for n in range(2)]
    kids = [key_kid(raw[0]), "table-2026"]  # a certified key's kid, and a kid of another form
    good = {kid: att.b64(att.spki_der(key)) for kid, key in zip(kids, raw, strict=True)}
    p256 = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200") + b"\4" * 65
    files = [
        good,
        {kids[0]: good[kids[0]].rstrip("=")},
        {kids[0]: att.b64(raw[0])},
        {kids[0]: att.b64(p256)},
        {"a key": good[kids[0]]},
        {},
        {key_kid(raw[1]): good[kids[0]]},  # a certified key's kid over another key
    ]
    answers = run_node(PINNED_HARNESS, [json.dumps(f) for f in files], STATIC / "verify-read.js")
    assert answers[0] == {
        "kind": "keys",
        "keys": [
            {"kid": kid, "alg": "Ed25519", "public_key_base64url": base64.urlsafe_b64encode(key).decode().rstrip("=")}
            for kid, key in zip(kids, raw, strict=True)
        ],
        "log": None,
    }
    for answer in answers[1:]:
        assert answer["error"] == "ReadError", answer
        assert answer["message"].startswith('"keys.json" is not a saved key set'), answer
    assert "not an Ed25519 SubjectPublicKeyInfo" in answers[3]["message"]
    assert f"is not the kid of its key ({kids[0]})" in answers[6]["message"]


ENCODE_HARNESS = """
const m = await import(process.argv[1]);
const { readFileSync } = await import('node:fs');
const hex = (b) => Buffer.from(b).toString('hex');
const bytes = (h) => Uint8Array.from(Buffer.from(h, 'hex'));
const out = [];
for (const c of JSON.parse(readFileSync(0, 'utf8'))) {
  out.push({
    body: hex(m.logBody(bytes(c.digest), bytes(c.signature), bytes(c.key))),
    pae: hex(m.pae(c.type, bytes(c.payload))),
    keyId: hex(await m.checkpointKeyId(c.origin, bytes(c.key))),
    spki: m.b64(m.spkiDer(bytes(c.key))),
  });
}
console.log(JSON.stringify(out));
"""


def test_the_page_encodes_the_pae_the_log_body_and_the_key_hash_as_python_does() -> None:
    cases = []
    for n in range(6):
        seeded = hashlib.sha256(f"page encodings {n}".encode()).digest()
        cases.append(
            {
                "digest": hashlib.sha256(seeded).hexdigest(),
                "signature": (seeded * 2).hex(),
                "key": hashlib.sha256(seeded + b"key").hexdigest(),
                "type": ["application/vnd.in-toto+json", "http://example.com/HelloWorld", "t\u00e9"][n % 3],
                "payload": (seeded * n).hex(),
                "origin": f"log{n}.example/\u00e9",
            }
        )
    answers = run_node(ENCODE_HARNESS, cases, STATIC / "verify-attest.js")
    for case, answer in zip(cases, answers, strict=True):
        key = bytes.fromhex(case["key"])
        assert (
            answer["body"] == att.log_body(bytes.fromhex(case["digest"]), bytes.fromhex(case["signature"]), key).hex()
        )
        assert answer["pae"] == att.pae(case["type"], bytes.fromhex(case["payload"])).hex()
        assert answer["keyId"] == sigstore.checkpoint_key_id(case["origin"], key).hex()
        assert answer["spki"] == att.b64(att.spki_der(key))


# ---------------------------------------------------------------- the page, end to end


def created(base: str, api_key: str, label: str) -> dict[str, Any]:
    """A receipt whose log proof is published (``Prefer: wait``)."""
    headers = {"Authorization": f"Bearer {api_key}", "Prefer": "wait=10"}
    body = {"input_hash": hash_of(f"{label} in"), "output_hash": hash_of(f"{label} out")}
    made = httpx.post(base + "/v1/receipts", headers=headers, json=body, timeout=30)
    assert made.status_code == 201, made.text
    assert "proof" in made.json()["log"], f"no checkpoint covered the receipt within 10 s: {made.json()['log']}"
    receipt: dict[str, Any] = made.json()["receipt"]
    return receipt


def sigstore_bundle(base: str, receipt_id: str) -> Document:
    """The Sigstore bundle, once a published checkpoint covers the attestation's leaf (it is
    queued with the receipt's entry, so the receipt's proof above means it is already)."""
    url = f"{base}/v1/receipts/{receipt_id}/attestation?format=sigstore"
    deadline = time.monotonic() + 10
    while (answer := httpx.get(url, timeout=10)).status_code == 409 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == sigstore.BUNDLE_MEDIA_TYPE
    bundle: Document = answer.json()
    return bundle


@pytest.fixture(scope="module")
def attested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """An embedded-store service with a log; two receipts, the first one's envelope, Sigstore
    bundle and offline bundle, and the pinned files: the version 2 trust root
    ``execution-proof trust-root`` writes, a trust root pinning the service's receipt key and
    its log (version 1), one pinning the key and no log, and the sigstore key file
    (``kid -> DER SPKI``, the shape of ``trust-root --sigstore DIR``'s keys.json)."""
    folder = tmp_path_factory.mktemp("page-attestations")
    signer = note.Signer.generate(ORIGIN)
    env = {"LOG_SIGNING_KEY": signer.encode(), "LOG_ORIGIN": ORIGIN}
    with ServicePool(folder) as pool:
        service = pool.start(redis_url=None, receipt_root=None, env=env)
        demo_key = re.search(r"eps_[A-Za-z0-9_-]{43}", service.stdout() + service.stderr())
        assert demo_key is not None, "the embedded server prints a demo key"
        base = service.base_url
        receipt = created(base, demo_key.group(0), "first")
        other = created(base, demo_key.group(0), "second")
        rid = receipt["receipt_id"]
        envelope = httpx.get(f"{base}/v1/receipts/{rid}/attestation", timeout=10).json()
        bundle = httpx.get(f"{base}/v1/receipts/{rid}/bundle", timeout=10).json()
        assert bundle["version"] == 2 and bundle["attestation"] == envelope, "the bundle carries the same envelope"
        files = {"v2": folder / "trust-root.json"}
        made = run_cli("trust-root", "--base-url", base, "--out", str(files["v2"]))
        assert made.returncode == 0, made.stderr
        v2 = json.loads(files["v2"].read_text())
        assert v2["version"] == 2 and v2["log"]["origin"] == ORIGIN
        keys = httpx.get(f"{base}/v1/public-key?kid={receipt['sig_kid']}", timeout=10).json()
        (key,) = [k for k in keys["keys"] if k["kid"] == receipt["sig_kid"]]
        pinned_key = {"kid": key["kid"], "public_key_base64url": key["public_key_base64url"]}
        raw = base64.urlsafe_b64decode(key["public_key_base64url"] + "=")
        v1 = {"version": 1, "service_url": base, "receipt_keys": [pinned_key], "log": v2["log"], "tsa_roots_pem": []}
        files["v1"] = folder / "key-and-log.json"
        files["v1"].write_text(json.dumps(v1))
        files["v1_no_log"] = folder / "key-no-log.json"
        files["v1_no_log"].write_text(json.dumps({**v1, "log": None}))
        files["keys.json"] = folder / "keys.json"
        files["keys.json"].write_text(json.dumps({key["kid"]: att.b64(att.spki_der(raw))}))
        yield {
            "base": base,
            "receipt": receipt,
            "other": other,
            "envelope": envelope,
            "sigstore": sigstore_bundle(base, rid),
            "other_envelope": httpx.get(f"{base}/v1/receipts/{other['receipt_id']}/attestation", timeout=10).json(),
            "bundle": bundle,
            "files": files,
            "log_vkey": signer.verifier.encode(),
            "raw": raw,
        }


@pytest.fixture
def tab(browser: Any, attested: dict[str, Any]) -> Iterator[Page]:  # noqa: F811
    page = Page(browser, attested["base"])
    page.open()
    yield page
    page.close()


def check(tab: Page, document: Any, pins: Path | None) -> tuple[str, str | None, dict[str, bool], str]:
    """Choose ``pins`` (None: nothing) as the saved key set, paste ``document``, press Verify:
    (data-verdict, data-reason, each check's data-ok, the verdict's text)."""
    tab.page.set_input_files("#keys-file", [] if pins is None else str(pins))
    verdict, text = tab.paste_and_verify(orjson.dumps(document).decode())
    return verdict, tab.reason(), tab.checks(), text


def tampered(document: Document, change: Callable[[Document], None]) -> Document:
    copy: Document = json.loads(json.dumps(document))
    change(copy)
    return copy


def statement_changed(envelope: Document, change: Callable[[dict[str, Any]], None]) -> Document:
    """The envelope with its Statement changed and written in RFC 8785 form again (it reads)."""
    return with_payload(envelope, change, canonical_bytes)


def in_entry(bundle: Document, change: Callable[[Document], None]) -> Document:
    return tampered(bundle, lambda b: change(b["verificationMaterial"]["tlogEntries"][0]))


def another_sig(envelope: Document) -> str:
    """A well-formed signature that is not the envelope's."""
    sig = bytearray(b64d(envelope["signatures"][0]["sig"]))
    sig[5] ^= 1
    return att.b64(bytes(sig))


ATTESTED_CHECKS = {"format", "self_consistency", "key", "signature", "attestation_signature"}


@pytest.mark.slow
def test_both_forms_against_a_trust_root_pinning_the_key_and_the_log(tab: Page, attested: dict[str, Any]) -> None:
    from playwright.sync_api import expect

    files = attested["files"]
    tab.requests.clear()
    verdict, reason, checks, text = check(tab, attested["sigstore"], files["v1"])
    assert (verdict, reason) == ("valid", None), text
    assert checks == dict.fromkeys(ATTESTED_CHECKS | {"log", "log_quorum", "no_file"}, True)
    assert "Its in-toto attestation is signed by the same key." in text
    assert "right after the receipt's own entry" in text
    assert f'The Sigstore bundle was checked against the trust root "{files["v1"].name}"' in text
    # The envelope as `execution-proof attest` saves it (RECEIPT_ID.intoto.jsonl: one line), dropped.
    tab.page.fill("#receipt-input", "")
    drop_file(tab, "#bundle-drop", orjson.dumps(attested["envelope"]).decode() + "\n", "r.intoto.jsonl")
    expect(tab.page.locator("#receipt-input")).to_have_value(re.compile("payloadType"))
    tab.page.click("#verify-button")
    verdict, text = tab.verdict()
    assert (verdict, tab.reason()) == ("error", "no_log_proof"), text
    assert tab.page.locator("#bundle-file").get_attribute("accept") == ".json,.jsonl,application/json"

    # The envelope carries no log proof: with a pinned log, it is not verified, pasted as well.
    verdict, reason, checks, text = check(tab, attested["envelope"], files["v1"])
    assert (verdict, reason) == ("error", "no_log_proof"), text
    assert checks["attestation_signature"] is True and checks["log"] is False
    assert "a DSSE envelope" in text and "execution-proof attest RECEIPT_ID --sigstore --wait 60" in text
    # A trust root that names no log asks for none: the envelope is valid.
    verdict, reason, checks, text = check(tab, attested["envelope"], files["v1_no_log"])
    assert (verdict, reason) == ("valid", None), text
    assert checks == dict.fromkeys(ATTESTED_CHECKS | {"log", "no_file"}, True)
    assert f'The trust root "{files["v1_no_log"].name}" pins no transparency log: no log check.' in text
    assert tab.api_requests() == [], "a pasted document with pinned material is checked offline"


@pytest.mark.slow
def test_a_version_2_trust_root_has_no_key_certificate_for_either_form(tab: Page, attested: dict[str, Any]) -> None:
    v2 = attested["files"]["v2"]
    tab.requests.clear()
    verdict, reason, checks, text = check(tab, attested["sigstore"], v2)
    assert (verdict, reason) == ("error", "no_key_certificate"), text
    # Nothing is wrong: the leaf is in the pinned log (the body recomputed with the key it
    # names), but nothing makes that key the service's.
    assert checks["log"] is True and checks["log_quorum"] is True
    assert "with the key the entry names" in text
    for name in ("key", "signature", "key_certificate", "attestation_signature"):
        assert checks[name] is False, name
    assert tab.page.locator('#verdict li[data-check="attestation_signature"] .mark').inner_text() == "Not checked:"
    assert "a DSSE envelope or a Sigstore bundle carries none" in text
    assert "execution-proof bundle RECEIPT_ID --out FILE" in text
    # The envelope misses its log proof too; that is the reason named first (docs/verdicts.md).
    verdict, reason, _, text = check(tab, attested["envelope"], v2)
    assert (verdict, reason) == ("error", "no_log_proof"), text
    # Evidence still counts: an envelope whose keyid is not the receipt's is INVALID.
    wrong = tampered(attested["envelope"], lambda e: e["signatures"][0].update(keyid="key-0000000000000000"))
    verdict, reason, _, text = check(tab, wrong, v2)
    assert (verdict, reason) == ("invalid", "bad_signature"), text
    assert tab.api_requests() == []


@pytest.mark.slow
def test_both_forms_against_the_services_own_keys_and_log(tab: Page, attested: dict[str, Any]) -> None:
    rid = attested["receipt"]["receipt_id"]
    tab.requests.clear()
    verdict, reason, checks, text = check(tab, attested["sigstore"], None)
    assert (verdict, reason) == ("valid", None), text
    assert checks["log"] is True and checks["log_quorum"] is True
    assert "the log key this service publishes (GET /v1/log)" in text
    assert sorted(tab.api_requests()) == [("GET", "/v1/log"), ("GET", "/v1/public-key")]
    tab.requests.clear()
    verdict, reason, checks, text = check(tab, attested["envelope"], None)
    assert (verdict, reason) == ("valid", None), text
    assert checks["attestation_signature"] is True and checks["log"] is True, "the receipt's own proof, asked for"
    assert sorted(tab.api_requests()) == [
        ("GET", "/v1/log"),
        ("GET", "/v1/public-key"),
        ("GET", f"/v1/receipts/{rid}/log-proof"),
    ]
    # The sigstore key file (trust-root --sigstore DIR's keys.json) pins the key, and no log.
    tab.requests.clear()
    verdict, reason, checks, text = check(tab, attested["sigstore"], attested["files"]["keys.json"])
    assert (verdict, reason) == ("valid", None), text
    assert checks["attestation_signature"] is True and "log_quorum" not in checks
    assert 'the saved key set "keys.json"' in text
    assert "A saved key set pins no log, so the log was not checked" in text
    assert tab.api_requests() == []


TAMPERED_ENVELOPES: dict[str, tuple[Callable[[Document], Document], set[str]]] = {
    # Another log origin: the receipt is untouched, only the envelope's signature fails.
    "payload": (lambda e: statement_changed(e, lambda s: s["predicate"].update(log_origin="other.example/log")), set()),
    # A receipt value: its hash fails too.
    "receipt in the payload": (
        lambda e: statement_changed(e, lambda s: s["predicate"]["receipt"].update(code_ref="git:forged")),
        {"self_consistency"},
    ),
    "sig": (lambda e: tampered(e, lambda t: t["signatures"][0].update(sig=another_sig(e))), set()),
    "keyid": (lambda e: tampered(e, lambda t: t["signatures"][0].update(keyid="key-0000000000000000")), set()),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(TAMPERED_ENVELOPES))
def test_a_tampered_envelope_is_invalid_in_both_forms(tab: Page, attested: dict[str, Any], what: str) -> None:
    change, also_failing = TAMPERED_ENVELOPES[what]
    files = attested["files"]
    envelope = change(attested["envelope"])
    verdict, reason, checks, text = check(tab, envelope, files["v1_no_log"])
    assert (verdict, reason) == ("invalid", "bad_signature"), text
    assert {name for name, ok in checks.items() if not ok} == {"attestation_signature", *also_failing}, checks
    bundle = tampered(attested["sigstore"], lambda b: b.update(dsseEnvelope=envelope))
    verdict, reason, checks, text = check(tab, bundle, files["v1"])
    assert (verdict, reason) == ("invalid", "bad_signature"), text
    assert checks["attestation_signature"] is False
    # Its leaf in the log is the original envelope's: the body is no longer this envelope's
    # (the keyid aside, which the body does not name).
    assert checks["log"] is (what == "keyid"), checks


@pytest.mark.slow
def test_a_sigstore_bundle_whose_hint_is_not_the_keyid_is_invalid(tab: Page, attested: dict[str, Any]) -> None:
    bundle = tampered(attested["sigstore"], lambda b: b["verificationMaterial"]["publicKey"].update(hint="key-other"))
    verdict, reason, checks, text = check(tab, bundle, attested["files"]["v1"])
    assert (verdict, reason) == ("invalid", "bad_signature"), text
    assert "publicKey.hint" in text and checks["attestation_signature"] is False


def other_body(attested: dict[str, Any]) -> str:
    """The dsse body of this envelope with another key: a real body, not this attestation's."""
    made = att.parse_envelope(attested["envelope"])
    return att.b64(att.log_body(made.payload_hash(), made.signature, hashlib.sha256(b"another key").digest()))


def forged_checkpoint(entry: Document) -> None:
    """The checkpoint's log signature with one bit flipped."""
    text = entry["inclusionProof"]["checkpoint"]["envelope"]
    line = next(line for line in text.split("\n") if line.startswith("\u2014 "))
    prefix, sig = line.rsplit(" ", 1)
    raw = bytearray(b64d(sig))
    raw[-1] ^= 1
    entry["inclusionProof"]["checkpoint"]["envelope"] = text.replace(line, f"{prefix} {att.b64(bytes(raw))}")


def next_index(entry: Document) -> None:
    entry["logIndex"] = str(int(entry["logIndex"]) + 1)
    entry["inclusionProof"]["logIndex"] = entry["logIndex"]


TAMPERED_ENTRIES: dict[str, tuple[Callable[[Document, dict[str, Any]], None], str, str]] = {
    # what: (change, the failing check, its reason)
    "rootHash": (lambda e, a: e["inclusionProof"].update(rootHash=att.b64(b"\0" * 32)), "log", "bad_log_proof"),
    "treeSize": (
        lambda e, a: e["inclusionProof"].update(treeSize=str(int(e["inclusionProof"]["treeSize"]) + 1)),
        "log",
        "bad_log_proof",
    ),
    "logId": (lambda e, a: e["logId"].update(keyId=att.b64(b"\0" * 32)), "log", "bad_log_proof"),
    "logIndex": (lambda e, a: e.update(logIndex=str(int(e["logIndex"]) - 1)), "log", "bad_log_proof"),
    "both logIndex": (lambda e, a: next_index(e), "log", "bad_log_proof"),
    "a proof hash": (
        lambda e, a: e["inclusionProof"].update(hashes=[att.b64(b"\1" * 32) for _ in e["inclusionProof"]["hashes"]]),
        "log",
        "bad_log_proof",
    ),
    "canonicalizedBody": (lambda e, a: e.update(canonicalizedBody=other_body(a)), "log", "bad_log_proof"),
    "canonicalizedBody not a body": (lambda e, a: e.update(canonicalizedBody=att.b64(b"{}")), "log", "bad_log_proof"),
    # Several changed at once: the first failure in the library's order decides.
    "checkpoint signature and logId": (
        lambda e, a: (forged_checkpoint(e), e["logId"].update(keyId=att.b64(b"\0" * 32))),
        "log",
        "bad_checkpoint_signature",
    ),
    "checkpoint signature": (lambda e, a: forged_checkpoint(e), "log", "bad_checkpoint_signature"),
    "checkpoint origin": (
        lambda e, a: e["inclusionProof"]["checkpoint"].update(
            envelope=e["inclusionProof"]["checkpoint"]["envelope"].replace(ORIGIN + "\n", "other.example/log\n", 1)
        ),
        "log",
        "bad_checkpoint_signature",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(TAMPERED_ENTRIES))
def test_a_sigstore_bundle_with_a_changed_log_entry_is_invalid(tab: Page, attested: dict[str, Any], what: str) -> None:
    change, failing, expected = TAMPERED_ENTRIES[what]
    bundle = in_entry(attested["sigstore"], lambda e: change(e, attested))
    assert bundle != attested["sigstore"]
    verdict, reason, checks, text = check(tab, bundle, attested["files"]["v1"])
    assert (verdict, reason) == ("invalid", expected), text
    assert checks[failing] is False, checks
    assert checks["attestation_signature"] is True and checks["signature"] is True
    data_reason = tab.page.locator(f'#verdict li[data-check="{failing}"]').get_attribute("data-reason")
    assert data_reason == expected


@pytest.mark.slow
def test_a_sigstore_bundle_without_its_log_entry_and_below_the_quorum(tab: Page, attested: dict[str, Any]) -> None:
    files = attested["files"]
    unlogged = tampered(attested["sigstore"], lambda b: b["verificationMaterial"].pop("tlogEntries"))
    verdict, reason, checks, text = check(tab, unlogged, files["v1"])
    assert (verdict, reason) == ("error", "no_log_proof"), text
    assert checks["attestation_signature"] is True and "carries no tlogEntries" in text
    # Nothing pinned: a missing entry is only a note.
    verdict, reason, _, text = check(tab, unlogged, None)
    assert (verdict, reason) == ("valid", None), text
    assert "This Sigstore bundle carries no log entry" in text
    # A pasted witness policy whose quorum needs a witness that never cosigned.
    witness = Cosigner.generate("witness.example/w1")
    tab.page.fill("#policy-input", f"log {attested['log_vkey']}\nwitness w1 {witness.key.encode()}\nquorum w1\n")
    verdict, reason, checks, text = check(tab, attested["sigstore"], files["v1"])
    assert (verdict, reason) == ("error", "no_quorum"), text
    assert checks["log"] is True and checks["log_quorum"] is False
    assert "Policy: the one you pasted on this page" in text


def with_attestation(bundle: Document, envelope: Document) -> Document:
    return {**bundle, "attestation": envelope}


@pytest.mark.slow
def test_a_bundle_with_its_attestation(tab: Page, attested: dict[str, Any]) -> None:
    """The offline bundle that carries the envelope is the complete form: valid under the
    version 2 trust root, its key certified by a pinned root and its log proof at hand."""
    v2 = attested["files"]["v2"]
    tab.requests.clear()
    complete = with_attestation(attested["bundle"], attested["envelope"])
    verdict, reason, checks, text = check(tab, complete, v2)
    assert (verdict, reason) == ("valid", None), text
    assert checks["attestation_signature"] is True and checks["key_certificate"] is True and checks["log"] is True
    cases = {
        "another signature": tampered(attested["envelope"], lambda e: e["signatures"][0].update(sig=another_sig(e))),
        "another receipt's attestation": attested["other_envelope"],
        "another log origin": statement_changed(attested["envelope"], lambda s: s["predicate"].update(log_origin=None)),
        "another keyid": tampered(
            attested["envelope"], lambda e: e["signatures"][0].update(keyid="key-0000000000000000")
        ),
    }
    failing = {
        "another signature": {"attestation_signature"},
        "another receipt's attestation": {"attestation_receipt"},
        # Changed here, not signed by the service: its signature fails too.
        "another log origin": {"attestation_receipt", "attestation_signature"},
        "another keyid": {"attestation_signature"},
    }
    for what, envelope in cases.items():
        verdict, reason, checks, text = check(tab, with_attestation(attested["bundle"], envelope), v2)
        assert (verdict, reason) == ("invalid", "bad_signature"), (what, text)
        assert {name for name, ok in checks.items() if not ok} == failing[what], (what, checks)
    # Its log taken out, the bundle reads as one of a service without a log: the Statement's
    # origin is not compared, and the pinned log's rule decides.
    unlogged = {k: v for k, v in complete.items() if k not in ("log", "timestamps")}
    verdict, reason, checks, text = check(tab, unlogged, v2)
    assert (verdict, reason) == ("error", "no_log_proof"), text
    assert checks["attestation_receipt"] is True and f'names the log "{ORIGIN}"; the bundle has no log member' in text
    assert tab.api_requests() == []


MALFORMED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "an envelope with an unknown member": lambda a: {**a["envelope"], "extra": 1},
    "a Sigstore bundle with an unknown member": lambda a: {**a["sigstore"], "timestampVerificationData": {}},
    "a tlog entry with an unknown member": lambda a: in_entry(a["sigstore"], lambda e: e.update(inclusionPromise={})),
    "a tlog entry of another kind": lambda a: in_entry(
        a["sigstore"], lambda e: e["kindVersion"].update(kind="hashedrekord")
    ),
    "an attestation with an unknown member": lambda a: with_attestation(a["bundle"], {**a["envelope"], "extra": 1}),
    "an attestation in a version 1 bundle": lambda a: with_attestation({**a["bundle"], "version": 1}, a["envelope"]),
    "another payloadType": lambda a: {**a["envelope"], "payloadType": "application/json"},
    "two signatures": lambda a: {**a["envelope"], "signatures": a["envelope"]["signatures"] * 2},
    "a payload that is not base64": lambda a: {**a["envelope"], "payload": "not base64!"},
    "a payload not in RFC 8785 form": lambda a: with_payload(
        a["envelope"], lambda s: None, lambda s: orjson.dumps(s, option=orjson.OPT_INDENT_2)
    ),
    "a subject that is not the receipt's": lambda a: statement_changed(
        a["envelope"], lambda s: s["subject"][0].update(name="input")
    ),
}


@pytest.mark.slow
def test_what_does_not_read_is_not_checked(tab: Page, attested: dict[str, Any]) -> None:
    for what, make in MALFORMED.items():
        for pins in (attested["files"]["v2"], None):
            tab.requests.clear()
            verdict, reason, checks, text = check(tab, make(attested), pins)
            assert (verdict, reason, checks) == ("error", None, {}), (what, text)
            assert text.startswith("Could not verify"), (what, text)
            assert tab.api_requests() == [], what
    text = check(tab, MALFORMED["an envelope with an unknown member"](attested), None)[3]
    assert "The DSSE envelope has unknown members: extra: it is malformed." in text
    text = check(tab, MALFORMED["an attestation in a version 1 bundle"](attested), None)[3]
    assert "unknown members: attestation" in text
