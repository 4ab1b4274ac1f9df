"""The trust root (docs/trust-root.md): ``receipts/trust_root.py`` reads a file strictly and
builds one from what a service publishes; ``trust-root`` writes it from a real service.

The verb runs against real ``service.py serve`` processes: one with two receipt keys (active
and retired), a transparency log and a witness policy, one without a log. The file it writes
must parse, hold exactly what ``GET /v1/public-key`` and ``GET /v1/log`` say, validate against
docs/trust-root.schema.json, and the fingerprints it prints must equal SHA-256s computed here
from the raw keys, the policy's bytes, the certificates' DER and the file's bytes. Every
malformed field is refused with the field named; the schema refuses what it can see too.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from nacl.signing import SigningKey

from execution_proof.receipts import trust_root
from execution_proof.receipts.encoding import b64url_decode, b64url_encode
from execution_proof.receipts.key_certificates import Root
from execution_proof.receipts.trust_root import TrustRootError, build_trust_root, parse_trust_root
from execution_proof.transparency import note, policy
from execution_proof.transparency.cosignature import Cosigner
from execution_proof.transparency.signer import SeedSigner
from tests.conftest import REPO, RedisServer, free_port
from tests.servers import ServicePool, run_cli, serving
from tests.test_layers import SERVER_LIBRARIES, _loaded_modules

ORIGIN = "trust.example/log"
RECEIPT_ROOT = Root.of(SeedSigner(hashlib.sha256(b"trust-root tests: the receipt root").digest()).public_key())
SCHEMA = orjson.loads((REPO / "docs" / "trust-root.schema.json").read_bytes())
VALIDATOR = jsonschema_rs.Draft202012Validator(SCHEMA)


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def certificate(name: str) -> x509.Certificate:
    """A self-signed CA certificate named ``CN=name`` (a TSA root, as far as the file cares)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode()


@pytest.fixture(scope="module")
def parts() -> dict[str, Any]:
    """Keys, a log, a policy with two witnesses and two TSA roots: the pieces of a valid file."""
    log = note.Signer.generate(ORIGIN)
    witnesses = {name: Cosigner.generate(f"witness.example/{name}") for name in ("w1", "w2")}
    lines = [f"log {log.verifier.encode()}"]
    lines += [f"witness {name} {c.key.encode()}" for name, c in witnesses.items()]
    text = "\n".join([*lines, "group both 2 w1 w2", "quorum both"]) + "\n"
    receipt_keys = {kid: SigningKey.generate() for kid in ("k-2026", "k-2025")}
    roots = [certificate("Trust Test Root One"), certificate("Trust Test Root Two")]
    other = note.Signer.generate(ORIGIN)  # the same origin, another key
    return {
        "log": log,
        "other_log": other,
        "witnesses": witnesses,
        "policy": text,
        "receipt_keys": receipt_keys,
        "roots": roots,
        "document": {
            "version": 1,
            "service_url": "https://proof.example",
            "receipt_keys": [
                {"kid": kid, "public_key_base64url": b64url_encode(bytes(k.verify_key))}
                for kid, k in receipt_keys.items()
            ],
            "log": {"origin": ORIGIN, "vkey": log.verifier.encode(), "policy": text},
            "tsa_roots_pem": [pem(c) for c in roots],
        },
    }


def encode(document: Any) -> bytes:
    return orjson.dumps(document)


# ---------------------------------------------------------------- reading


def test_a_valid_file_round_trips_and_its_parts_work(parts: dict[str, Any]) -> None:
    document = parts["document"]
    root = parse_trust_root(encode(document))
    assert root.to_json() == document
    assert VALIDATOR.is_valid(document)
    assert root.service_url == "https://proof.example"
    assert list(root.keys.keys) == ["k-2026", "k-2025"] and root.keys.active_kid == "k-2026"
    assert not root.keys.can_sign
    signer = parts["receipt_keys"]["k-2025"]
    signature = b64url_encode(signer.sign(b"sha256:" + b"ab" * 32).signature)
    assert root.keys.verify("k-2025", "sha256:" + "ab" * 32, signature)
    assert not root.keys.verify("k-2026", "sha256:" + "ab" * 32, signature)
    assert root.log_verifier() == parts["log"].verifier
    pinned = root.policy()
    assert pinned is not None and pinned.log_key() == parts["log"].verifier and set(pinned.witnesses) == {"w1", "w2"}
    assert [c.public_bytes(Encoding.DER) for c in root.tsa_roots()] == [
        c.public_bytes(Encoding.DER) for c in parts["roots"]
    ]
    # A str is read as the same file.
    assert parse_trust_root(encode(document).decode()).to_json() == document


def test_a_file_without_log_or_tsa_roots(parts: dict[str, Any]) -> None:
    document = {**parts["document"], "log": None, "tsa_roots_pem": []}
    root = parse_trust_root(encode(document))
    assert root.log_verifier() is None and root.policy() is None and root.tsa_roots() == []
    assert (root.log_origin, root.log_vkey, root.policy_text) == (None, None, None)
    assert VALIDATOR.is_valid(document)


def _set(path: str, value: Any) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """A mutation setting ``path`` (dotted; ``[n]`` for list items; ``value`` may be a function
    of the parts) in the document."""

    def mutate(document: dict[str, Any], parts: dict[str, Any]) -> None:
        *where, last = path.split(".")
        target: Any = document
        for step in where:
            target = target[int(step)] if step.isdigit() else target[step]
        new = value(parts) if callable(value) else value
        if new is _DELETE:
            del target[int(last) if last.isdigit() else last]
        elif last.isdigit():
            target[int(last)] = new
        else:
            target[last] = new

    return mutate


_DELETE = object()


def _other_policy(parts: dict[str, Any]) -> str:
    return str(parts["policy"]).replace(parts["log"].verifier.encode(), parts["other_log"].verifier.encode())


def _wrong_key_id(parts: dict[str, Any]) -> str:
    name, _, key = parts["log"].verifier.encode().split("+", 2)
    return f"{name}+00000000+{key}"


def _two_logs(parts: dict[str, Any]) -> str:
    return f"log {parts['other_log'].verifier.encode()}\n" + parts["policy"]


def _two_certificates_in_one(parts: dict[str, Any]) -> str:
    return pem(parts["roots"][0]) + pem(parts["roots"][1])


def _corrupt_certificate(parts: dict[str, Any]) -> str:
    text = pem(parts["roots"][0])
    lines = text.splitlines()
    lines[3] = "A" * len(lines[3])
    return "\n".join(lines) + "\n"


# (mutation, what the message must contain, whether the schema refuses it too)
MALFORMED = {
    "version 2": (_set("version", 2), "version", True),
    "version a string": (_set("version", "1"), "version", True),
    "version true": (_set("version", True), "version", True),
    "version 1.0": (_set("version", 1.0), "version", False),  # JSON Schema counts 1.0 as an integer
    "version missing": (_set("version", _DELETE), "version is missing", True),
    "service_url missing": (_set("service_url", _DELETE), "service_url is missing", True),
    "service_url not http": (_set("service_url", "ftp://proof.example"), "service_url", True),
    "service_url a number": (_set("service_url", 7), "service_url", True),
    "unknown top-level member": (_set("keys", []), "unknown member 'keys'", True),
    "receipt_keys empty": (_set("receipt_keys", []), "receipt_keys", True),
    "receipt_keys an object": (_set("receipt_keys", {}), "receipt_keys", True),
    "receipt key not an object": (_set("receipt_keys.0", "k"), "receipt_keys[0]", True),
    "kid missing": (_set("receipt_keys.0.kid", _DELETE), "receipt_keys[0]: kid is missing", True),
    "kid with a space": (_set("receipt_keys.0.kid", "a b"), "receipt_keys[0].kid", True),
    "kid a number": (_set("receipt_keys.1.kid", 5), "receipt_keys[1].kid", True),
    "duplicate kid": (_set("receipt_keys.1.kid", "k-2026"), "receipt_keys[1].kid: duplicate", False),
    "key 31 bytes": (_set("receipt_keys.0.public_key_base64url", b64url_encode(b"x" * 31)), "receipt_keys[0].public_key_base64url", True),
    "key 33 bytes": (_set("receipt_keys.0.public_key_base64url", b64url_encode(b"x" * 33)), "receipt_keys[0].public_key_base64url", True),
    "key padded": (_set("receipt_keys.0.public_key_base64url", b64url_encode(b"x" * 32) + "="), "receipt_keys[0].public_key_base64url", True),
    "key in base64, not base64url": (_set("receipt_keys.0.public_key_base64url", "+" * 42 + "A"), "receipt_keys[0].public_key_base64url", True),
    "key missing": (_set("receipt_keys.0.public_key_base64url", _DELETE), "receipt_keys[0]: public_key_base64url is missing", True),
    "unknown member in a key": (_set("receipt_keys.0.alg", "Ed25519"), "receipt_keys[0]: unknown member 'alg'", True),
    "log a list": (_set("log", []), "log: must be an object or null", True),
    "log missing": (_set("log", _DELETE), "log is missing", True),
    "log.policy missing": (_set("log.policy", _DELETE), "log: policy is missing", True),
    "unknown member in log": (_set("log.witnesses", []), "log: unknown member 'witnesses'", True),
    "log.origin a number": (_set("log.origin", 1), "log.origin", True),
    "log.vkey garbage": (_set("log.vkey", "not a key"), "log.vkey", True),
    "log.vkey key id wrong": (_set("log.vkey", _wrong_key_id), "log.vkey: not a valid verifier key: its key id", False),
    "log.vkey of another origin": (_set("log.vkey", lambda p: note.Signer.generate("elsewhere.example/log").verifier.encode()), "log.vkey: its name", False),
    "log.policy empty": (_set("log.policy", ""), "log.policy", True),
    "log.policy garbage": (_set("log.policy", "trust me\n"), "log.policy", False),
    "log.policy of another log": (_set("log.policy", _other_policy), "log.policy: is the policy of another log", False),
    "log.policy naming two logs": (_set("log.policy", _two_logs), "log.policy: names 2 logs", False),
    "log.policy naming no log": (_set("log.policy", "quorum none\n"), "log.policy: names 0 logs", False),
    "tsa_roots_pem missing": (_set("tsa_roots_pem", _DELETE), "tsa_roots_pem is missing", True),
    "tsa_roots_pem a string": (_set("tsa_roots_pem", "-----BEGIN CERTIFICATE-----"), "tsa_roots_pem", True),
    "tsa root not PEM": (_set("tsa_roots_pem.0", "hello"), "tsa_roots_pem[0]", True),
    "tsa root a number": (_set("tsa_roots_pem.1", 3), "tsa_roots_pem[1]", True),
    "two certificates in one string": (_set("tsa_roots_pem.0", _two_certificates_in_one), "tsa_roots_pem[0]: must be exactly one", True),
    "tsa root corrupt": (_set("tsa_roots_pem.0", _corrupt_certificate), "tsa_roots_pem[0]", False),
    "tsa root twice": (_set("tsa_roots_pem.1", lambda p: pem(p["roots"][0])), "tsa_roots_pem[1]: the same certificate", False),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_malformed_field_is_refused_with_its_name(parts: dict[str, Any], case: str) -> None:
    mutate, message, schema_refuses = MALFORMED[case]
    document = copy.deepcopy(parts["document"])
    mutate(document, parts)
    with pytest.raises(TrustRootError) as refused:
        parse_trust_root(encode(document))
    assert message in str(refused.value), str(refused.value)
    assert VALIDATOR.is_valid(document) is not schema_refuses, case


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"{", "not JSON", id="not-json"),
        pytest.param(b"[]", "must be a JSON object", id="a-list"),
        pytest.param(b'{"version": 1}' + b" " * trust_root.MAX_TRUST_ROOT_BYTES, "larger than", id="too-large"),
        pytest.param(b"\xff\xfe", "not JSON", id="not-utf8"),
    ],
)
def test_a_file_that_is_no_trust_root_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(TrustRootError, match=message):
        parse_trust_root(data)


def test_the_policy_for_another_log_is_refused_even_when_the_origin_matches(parts: dict[str, Any]) -> None:
    """The other log has the same origin (name); only its key differs: still refused."""
    document = copy.deepcopy(parts["document"])
    document["log"]["policy"] = _other_policy(parts)
    assert parts["other_log"].verifier.name == ORIGIN
    with pytest.raises(TrustRootError, match="another log"):
        parse_trust_root(encode(document))


# ---------------------------------------------------------------- building and fingerprints


def _public_key_document(keys: dict[str, SigningKey], active: str) -> dict[str, Any]:
    entries = [
        {"kid": kid, "alg": "Ed25519", "public_key_base64url": b64url_encode(bytes(k.verify_key))}
        for kid, k in keys.items()
    ]
    return {"keys": entries, "active_kid": active, "roots": [RECEIPT_ROOT.to_json()], "revocations": []}


def test_build_pins_the_published_roots_not_the_keys(parts: dict[str, Any]) -> None:
    keys = parts["receipt_keys"]
    built = build_trust_root("https://proof.example/", _public_key_document(keys, "k-2025"), None, None)
    assert built["version"] == 2 and built["service_url"] == "https://proof.example"
    assert built["receipt_roots"] == [
        {"kid": RECEIPT_ROOT.kid, "public_key_base64url": b64url_encode(RECEIPT_ROOT.public_key)}
    ]
    assert "receipt_keys" not in built and built["revocations"] == []
    assert built["log"] is None and built["tsa_roots_pem"] == []
    assert VALIDATOR.is_valid(built)


def test_build_gives_a_log_without_witnesses_a_policy_of_its_own_key(parts: dict[str, Any]) -> None:
    vkey = parts["log"].verifier.encode()
    keys = _public_key_document(parts["receipt_keys"], "k-2026")
    built = build_trust_root("https://p.example", keys, {"origin": ORIGIN, "log_vkey": vkey, "policy": ""}, None)
    assert built["log"] == {"origin": ORIGIN, "vkey": vkey, "policy": f"log {vkey}\nquorum none\n"}
    witnesses_only = parts["policy"].replace(f"log {vkey}\n", "")
    built = build_trust_root(
        "https://p.example", keys, {"origin": ORIGIN, "log_vkey": vkey, "policy": witnesses_only}, None
    )
    assert built["log"]["policy"] == f"log {vkey}\n{witnesses_only}"
    root = parse_trust_root(encode(built))
    assert root.policy() is not None and set(root.policy().witnesses) == {"w1", "w2"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("keys", "log", "pem_bytes", "message"),
    [
        pytest.param({"keys": []}, None, None, "at least one key", id="no-keys"),
        pytest.param([], None, None, "GET /v1/public-key", id="keys-a-list"),
        pytest.param({"keys": [{"kid": "a"}]}, None, None, "publishes no receipt roots", id="no-roots"),
        pytest.param({"keys": [{"kid": "a"}], "roots": [{**RECEIPT_ROOT.to_json(), "alg": "RSA"}]}, None, None, "Ed25519", id="rsa"),
        pytest.param({"keys": [{"kid": "a"}], "roots": [{"kid": RECEIPT_ROOT.kid, "public_key_base64url": "x"}]}, None, None, "receipt_roots[0].public_key_base64url", id="short-key"),
        pytest.param(None, {"origin": ORIGIN}, None, "GET /v1/log", id="log-without-vkey"),
        pytest.param(None, {"origin": ORIGIN, "log_vkey": "x", "policy": "nonsense"}, None, "GET /v1/log: its policy", id="log-policy-garbage"),
        pytest.param(None, None, b"not a certificate", "--tsa-roots", id="pem-garbage"),
    ],
)  # fmt: skip
def test_build_refuses_what_cannot_be_pinned(
    parts: dict[str, Any], keys: Any, log: Any, pem_bytes: bytes | None, message: str
) -> None:
    keys = keys if keys is not None else _public_key_document(parts["receipt_keys"], "k-2026")
    with pytest.raises(TrustRootError) as refused:
        build_trust_root("https://p.example", keys, log, pem_bytes)
    assert message in str(refused.value)


def test_build_splits_a_pem_bundle_into_one_string_per_certificate(parts: dict[str, Any]) -> None:
    one, two = parts["roots"]
    bundle = ("# comment\n" + pem(one) + "\n" + pem(two) + pem(one)).encode()  # the first one twice
    keys = _public_key_document(parts["receipt_keys"], "k-2026")
    built = build_trust_root("https://p.example", keys, None, bundle)
    assert built["tsa_roots_pem"] == [pem(one), pem(two)]


def expected_fingerprints(document: dict[str, Any], parts: dict[str, Any], data: bytes | None) -> list[str]:
    """Each fingerprint computed here, from the raw material, as docs/trust-root.md says."""
    pinned, label = (
        (document["receipt_roots"], "receipt root")
        if document["version"] == 2
        else (document["receipt_keys"], "receipt key")
    )
    lines = [f"{label} {k['kid']}  {sha(b64url_decode(k['public_key_base64url']))}" for k in pinned]
    log = document["log"]
    if log is not None:
        lines.append(f"log key {log['origin']}  {sha(note.Verifier.parse(log['vkey']).public_key)}")
        pinned = policy.parse_policy(log["policy"])
        lines += [f"witness {name}  {sha(w.key.public_key)}" for name, w in pinned.witnesses.items()]
        lines.append(f"policy  {sha(log['policy'].encode())}")
    for text in document["tsa_roots_pem"]:
        cert = x509.load_pem_x509_certificate(text.encode())
        cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        lines.append(f"tsa root {cn}  {sha(cert.public_bytes(Encoding.DER))}")
    if data is not None:
        lines.append(f"trust root  {sha(data)}")
    return lines


def test_fingerprints_are_the_sha256_of_the_raw_keys(parts: dict[str, Any]) -> None:
    document = parts["document"]
    data = trust_root.encode_trust_root(document)
    root = parse_trust_root(data)
    printed = [f"{label}  {value}" for label, value in trust_root.fingerprints(root, data)]
    assert printed == expected_fingerprints(document, parts, data)
    witness = parts["witnesses"]["w1"].key.public_key
    assert f"witness w1  {sha(witness)}" in printed
    assert len(trust_root.fingerprints(root)) == len(printed) - 1  # no file bytes, no "trust root" line


@pytest.mark.slow
def test_the_module_imports_no_x509_library() -> None:
    """``verify`` imports it for every receipt: cryptography's X.509 and asn1crypto only load
    when a certificate is read."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import execution_proof.receipts.trust_root"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "execution_proof.receipts.trust_root" in loaded
    assert not {"cryptography.x509", "asn1crypto", "execution_proof.transparency.timestamps"} & loaded


def test_the_verb_loads_no_server_library() -> None:
    loaded = _loaded_modules("trust-root", "--help")
    # (importlib.import_module, which loads the verb's module, is not traced: its imports are.)
    assert "execution_proof.receipts.trust_root" in loaded
    assert not {name.split(".")[0] for name in loaded} & set(SERVER_LIBRARIES)
    assert not {
        name for name in loaded if name.split(".")[:2] in (["execution_proof", p] for p in ("web", "kv", "jobs"))
    }


# ---------------------------------------------------------------- the verb against real services


@pytest.fixture(scope="module")
def logged_service(parts: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An embedded-store service with two receipt keys, a log and a policy of two witnesses."""
    folder = tmp_path_factory.mktemp("trust-root-service")
    (folder / "policy.txt").write_text(parts["policy"])
    env = {
        "LOG_SIGNING_KEY": parts["log"].encode(),
        "LOG_ORIGIN": ORIGIN,
        "LOG_WITNESS_POLICY": str(folder / "policy.txt"),
        "LOG_WITNESS_TIMEOUT_MS": "100",
    }
    with ServicePool(folder) as pool:
        yield pool.start(redis_url=None, env=env).base_url


def trust_root_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("trust-root", *args)


@pytest.mark.slow
def test_the_verb_writes_what_the_service_publishes(parts: dict[str, Any], logged_service: str, tmp_path: Path) -> None:
    roots = tmp_path / "tsa-roots.pem"
    roots.write_text(pem(parts["roots"][0]) + pem(parts["roots"][1]))
    out = tmp_path / "trust-root.json"
    done = trust_root_cli("--base-url", logged_service + "/", "--out", str(out), "--tsa-roots", str(roots))
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    document = orjson.loads(data)
    root = parse_trust_root(data)
    assert VALIDATOR.is_valid(document), list(VALIDATOR.iter_errors(document))
    assert os.stat(out).st_mode & 0o777 == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary file left"
    # Exactly what the service publishes: its receipt roots (not its keys), the log, its policy.
    keys = httpx.get(logged_service + "/v1/public-key").json()
    published = [{"kid": r["kid"], "public_key_base64url": r["public_key_base64url"]} for r in keys["roots"]]
    assert document["version"] == 2 and document["receipt_roots"] == published
    assert document["revocations"] == keys["revocations"]
    log = httpx.get(logged_service + "/v1/log").json()
    assert document["log"] == {"origin": log["origin"], "vkey": log["log_vkey"], "policy": log["policy"]}
    assert document["log"]["vkey"] == parts["log"].verifier.encode() and log["policy"] == parts["policy"]
    assert document["service_url"] == logged_service
    assert len(document["tsa_roots_pem"]) == 2 and len(root.tsa_roots()) == 2
    # The fingerprints printed are SHA-256s computed here, the file's own last.
    assert done.stdout.splitlines() == expected_fingerprints(document, parts, data)
    assert done.stdout.splitlines()[-1] == f"trust root  {sha(data)}"
    assert "tsa root Trust Test Root Two  " in done.stdout and "witness w2  " in done.stdout
    # Again: the file is replaced (same content), with a note saying so.
    again = trust_root_cli("--base-url", logged_service, "--out", str(out), "--tsa-roots", str(roots))
    assert again.returncode == 0 and "replaced" in again.stderr and "identical" in again.stderr, again.stderr
    assert out.read_bytes() == data


@pytest.mark.slow
def test_a_service_without_a_log_gives_log_null(redis_server: RedisServer, tmp_path: Path) -> None:
    with ServicePool(tmp_path) as pool:
        service = pool.start(redis_url=redis_server.url)
        assert httpx.get(service.base_url + "/v1/log").status_code in (404, 503)
        out = tmp_path / "root.json"
        done = trust_root_cli("--base-url", service.base_url, "--out", str(out))
        roots = httpx.get(service.base_url + "/v1/public-key").json().get("roots", [])
    assert done.returncode == 0, done.stderr
    document = orjson.loads(out.read_bytes())
    assert document["log"] is None and document["tsa_roots_pem"] == []
    assert "no transparency log" in done.stderr
    assert VALIDATOR.is_valid(document)
    assert [line.split("  ")[0] for line in done.stdout.splitlines()] == [
        *(f"receipt root {root['kid']}" for root in roots),
        "trust root",
    ]


@pytest.mark.slow
def test_an_unreachable_service_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "root.json"
    done = trust_root_cli("--base-url", f"http://127.0.0.1:{free_port()}", "--out", str(out))
    assert done.returncode == 2
    assert "cannot reach http://" in done.stderr and "no trust root written" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not out.exists() and list(tmp_path.iterdir()) == []


class _Stub(BaseHTTPRequestHandler):
    """Answers from the server's ``routes``: path -> (status, body)."""

    def do_GET(self) -> None:
        status, body = self.server.routes.get(self.path, (404, b'{"error": {"code": "not_found"}}'))  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def stub(routes: dict[str, tuple[int, bytes]]) -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    server.routes = routes  # type: ignore[attr-defined]
    return serving(server)


def _stub_routes(parts: dict[str, Any], **log: Any) -> dict[str, tuple[int, bytes]]:
    keys = _public_key_document(parts["receipt_keys"], "k-2026")
    answer = {"origin": ORIGIN, "log_vkey": parts["log"].verifier.encode(), "policy": parts["policy"], **log}
    return {"/v1/public-key": (200, orjson.dumps(keys)), "/v1/log": (200, orjson.dumps(answer))}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"/v1/public-key": (200, b"<html>")}, "did not answer JSON", id="keys-not-json"),
        pytest.param({"/v1/public-key": (500, b'{"error": {"code": "signing_key_unavailable", "message": "no key"}}')}, "answered 500 signing_key_unavailable", id="keys-500"),
        pytest.param({"/v1/public-key": (200, b'{"keys": [{"kid": "a", "public_key_base64url": "AAAA"}], "roots": [{"kid": "root-0000000000000000", "public_key_base64url": "AAAA"}]}')}, "receipt_roots[0].public_key_base64url", id="short-key"),
        pytest.param({"/v1/public-key": (200, b'{"keys": [{"kid": "a", "public_key_base64url": "AAAA"}], "active_kid": "a"}')}, "publishes no receipt roots", id="no-roots"),
        pytest.param({"/v1/log": (503, b'{"error": {"code": "store_unavailable", "message": "down"}}')}, "answered 503 store_unavailable", id="log-503"),
        pytest.param({"/v1/log": (200, b"[]")}, "GET /v1/log", id="log-a-list"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_malformed_answers_exit_2_and_write_nothing(
    parts: dict[str, Any], tmp_path: Path, change: dict[str, tuple[int, bytes]], message: str
) -> None:
    out = tmp_path / "root.json"
    out.write_text("kept\n")  # an earlier file stays as it was
    with stub({**_stub_routes(parts), **change}) as base:
        done = trust_root_cli("--base-url", base, "--out", str(out))
    assert done.returncode == 2, done.stdout
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert out.read_text() == "kept\n" and done.stdout == ""


@pytest.mark.slow
def test_a_published_policy_for_another_log_is_refused(parts: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "root.json"
    with stub(_stub_routes(parts, policy=_other_policy(parts))) as base:
        done = trust_root_cli("--base-url", base, "--out", str(out))
    assert done.returncode == 2
    assert "log.policy: is the policy of another log" in done.stderr, done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_log_answering_log_unavailable_is_no_log(parts: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "root.json"
    unavailable = (503, b'{"error": {"code": "log_unavailable", "message": "no log"}}')
    with stub({**_stub_routes(parts), "/v1/log": unavailable}) as base:
        done = trust_root_cli("--base-url", base, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert orjson.loads(out.read_bytes())["log"] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "--tsa-roots: cannot read", id="missing"),
        pytest.param(b"", "--tsa-roots: not a PEM file", id="empty"),
        pytest.param(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "--tsa-roots: not a PEM", id="garbage"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_an_unreadable_pem_exits_2_before_asking_the_service(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    roots = tmp_path / "roots.pem"
    if content is not None:
        roots.write_bytes(content)
    out = tmp_path / "root.json"
    # The address answers nothing: the PEM is read (and refused) first.
    done = trust_root_cli("--base-url", f"http://127.0.0.1:{free_port()}", "--out", str(out), "--tsa-roots", str(roots))
    assert done.returncode == 2
    assert message in done.stderr and "cannot reach" not in done.stderr, done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_an_out_file_in_a_missing_folder_exits_2_before_asking_the_service(tmp_path: Path) -> None:
    out = tmp_path / "no-such-folder" / "root.json"
    # The address answers nothing: the folder is checked (and refused) first.
    done = trust_root_cli("--base-url", f"http://127.0.0.1:{free_port()}", "--out", str(out))
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "cannot reach" not in done.stderr, done.stderr
    assert not out.parent.exists()


@pytest.mark.slow
def test_the_base_url_is_needed(tmp_path: Path) -> None:
    done = trust_root_cli("--out", str(tmp_path / "root.json"))
    assert done.returncode == 2 and "--base-url" in done.stderr
    assert not (tmp_path / "root.json").exists()


# ---------------------------------------------------------------- docs/trust-root.md


def _block(text: str, heading: str, fence: str) -> str:
    """The first ``fence`` code block after ``heading`` in ``text`` (its lines, without fences)."""
    start = text.index(f"```{fence}\n", text.index(heading)) + len(fence) + 4
    return text[start : text.index("\n```", start)]


DOC = (REPO / "docs" / "trust-root.md").read_text()


def test_the_documented_example_is_a_trust_root_with_the_fingerprints_shown() -> None:
    example = _block(DOC, "### Example", "json") + "\n"
    document = orjson.loads(example)
    assert trust_root.encode_trust_root(document) == example.encode(), "the example is written as trust-root writes"
    assert VALIDATOR.is_valid(document)
    root = parse_trust_root(example)
    assert root.log_origin is not None and root.tsa_roots_pem and len(root.keys.keys) == 2
    shown = _block(DOC, "### Example", "text").splitlines()
    assert [f"{label}  {value}" for label, value in trust_root.fingerprints(root, example.encode())] == shown


@pytest.mark.slow
def test_the_documented_recipes_reproduce_every_fingerprint(tmp_path: Path) -> None:
    """The shell block of docs/trust-root.md, run by bash on the documented example, prints the
    hex of every fingerprint line, in order."""
    for tool in ("jq", "basenc", "base64", "sha256sum", "openssl", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    example = _block(DOC, "### Example", "json") + "\n"
    (tmp_path / "trust-root.json").write_text(example)
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
    printed = re.findall(r"\b[0-9a-f]{64}\b", done.stdout)
    shown = [line.rsplit("sha256:", 1)[1] for line in _block(DOC, "### Example", "text").splitlines()]
    assert printed == shown, done.stdout
