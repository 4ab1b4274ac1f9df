"""Offline bundles: ``GET /v1/receipts/{id}/bundle`` on fakeredis and a real redis-server, and
``service.py verify BUNDLE.json`` with no network at all."""

from __future__ import annotations

import contextlib
import http.server
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from execution_proof.client import http as http_client
from execution_proof.client.hashing import hash_file
from execution_proof.client.verifying import VerifyOptions, run_verify
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.limits import load_limits
from execution_proof.receipts.signing import load_key_ring, new_key_set
from execution_proof.receipts.verifier import recompute_hash_or_none
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests.clock import Clock
from tests.conftest import auth, hash_of
from tests.independent_verifier import verify as independent_verify
from tests.independent_verifier import verify_chain_link
from tests.servers import raw_json_member, run_cli, serving

BUNDLE_MEMBERS = [
    "format",
    "version",
    "created_at",
    "service",
    "receipt",
    "keys",
    "chain",
    "chain_complete",
    "attestation",
]


async def create(client: Any, key: Any, body: dict[str, Any]) -> dict[str, Any]:
    _, response = await client.post("/v1/receipts", content=orjson.dumps(body), headers=auth(key))
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json["receipt"]
    return receipt


async def chain_of(client: Any, key: Any, n: int, label: str = "c") -> list[dict[str, Any]]:
    return [await create(client, key, {"input_hash": hash_of(f"{label}{i}")}) for i in range(n)]


async def bundle(client: Any, receipt_id: str, **params: str) -> Any:
    _, response = await client.get(f"/v1/receipts/{receipt_id}/bundle", params=params)
    return response


async def test_bundle_holds_the_receipt_its_chain_and_keys(client: Any, api_key: dict[str, Any]) -> None:
    receipts = await chain_of(client, api_key, 4)
    response = await bundle(client, receipts[-1]["receipt_id"])
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"
    body = orjson.loads(response.body)
    assert list(body) == BUNDLE_MEMBERS
    assert body["format"] == "eps-receipt-bundle" and body["version"] == 2
    assert body["service"].startswith("http")
    assert len(body["created_at"]) == 24 and body["created_at"].endswith("Z")
    assert body["receipt"] == receipts[-1]
    assert body["chain"] == list(reversed(receipts[:-1])), "newest first"
    assert body["chain_complete"] is True
    kid = receipts[-1]["sig_kid"]
    assert body["keys"]["active_kid"] == kid and kid.startswith("key-")
    assert [k["kid"] for k in body["keys"]["keys"]] == [kid], "only the kids that signed something"
    assert set(body["keys"]["keys"][0]) == {"kid", "alg", "public_key_base64url", "certificate"}
    assert body["keys"]["keys"][0]["certificate"]["kid"] == kid
    # The stored bytes are spliced in unchanged: the receipt is byte-for-byte what a read returns.
    _, read = await client.get(f"/v1/receipts/{receipts[-1]['receipt_id']}")
    assert raw_json_member(response.body, "receipt") == raw_json_member(read.body, "receipt")
    # The receipt's attestation envelope: the same bytes its own route answers.
    _, envelope = await client.get(f"/v1/receipts/{receipts[-1]['receipt_id']}/attestation")
    assert raw_json_member(response.body, "attestation") == envelope.body
    assert body["attestation"]["signatures"] == [{"keyid": kid, "sig": envelope.json["signatures"][0]["sig"]}]
    # Anyone can check it with nothing but the bundle: its keys member is a public-key body.
    assert independent_verify(body["receipt"], body["keys"])["ok"]
    for later, earlier in zip([body["receipt"], *body["chain"]], body["chain"], strict=False):
        assert verify_chain_link(later, earlier, body["keys"])


async def test_depth_limits_the_segment_and_says_it_is_incomplete(client: Any, api_key: dict[str, Any]) -> None:
    receipts = await chain_of(client, api_key, 4)
    last = receipts[-1]["receipt_id"]
    one = orjson.loads((await bundle(client, last, depth="1")).body)
    assert one["chain"] == [receipts[-2]] and one["chain_complete"] is False
    exact = orjson.loads((await bundle(client, last, depth="3")).body)
    assert len(exact["chain"]) == 3 and exact["chain_complete"] is True
    none = orjson.loads((await bundle(client, last, depth="0")).body)
    assert none["chain"] == [] and none["chain_complete"] is False
    first = orjson.loads((await bundle(client, receipts[0]["receipt_id"], depth="0")).body)
    assert first["chain"] == [] and first["chain_complete"] is True, "the first receipt is a complete chain"
    assert len(orjson.loads((await bundle(client, last, depth="100")).body)["chain"]) == 3
    for bad in ("101", "-1", "x", "1.5", ""):
        response = await bundle(client, last, depth=bad)
        assert response.status_code == 400, bad
        assert response.json["error"]["details"]["field"] == "depth"


async def test_default_depth_is_twenty(client: Any, api_key: dict[str, Any]) -> None:
    receipts = await chain_of(client, api_key, 22)
    body = orjson.loads((await bundle(client, receipts[-1]["receipt_id"])).body)
    assert len(body["chain"]) == 20 and body["chain_complete"] is False
    assert body["chain"][-1] == receipts[1]


async def test_unknown_receipt_is_404(client: Any, api_key: dict[str, Any]) -> None:
    receipts = await chain_of(client, api_key, 1)
    rid = receipts[0]["receipt_id"]
    for ref in (rid[:-1] + ("A" if rid[-1] != "A" else "B"), "rcpt_nonsense", receipts[0]["receipt_hash"]):
        response = await bundle(client, ref)
        assert response.status_code == 404, ref
        assert response.json["error"]["code"] == "not_found"


async def test_a_missing_link_ends_the_chain(client: Any, store: Store, api_key: dict[str, Any]) -> None:
    receipts = await chain_of(client, api_key, 4)
    await store.receipts.delete_receipt(receipts[1]["receipt_id"])
    body = orjson.loads((await bundle(client, receipts[-1]["receipt_id"])).body)
    assert body["chain"] == [receipts[2]] and body["chain_complete"] is False
    branch = await create(client, api_key, {"input_hash": hash_of("b"), "prev_receipt_hash": hash_of("nowhere")})
    body = orjson.loads((await bundle(client, branch["receipt_id"])).body)
    assert body["chain"] == [] and body["chain_complete"] is False


async def test_a_record_stored_under_another_id_is_refused(
    client: Any, store: Store, api_key: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Receipt A's stored bytes under B's key: B's bundle is a JSON 500, and a later receipt's
    bundle ends its chain at B (incomplete) rather than carrying A as B; each logged once."""
    from execution_proof.kv.keys import receipt_key

    receipts = await chain_of(client, api_key, 3)
    a, b, c = (r["receipt_id"] for r in receipts)
    await store.client.set(receipt_key(b), await store.client.get(receipt_key(a)))
    caplog.set_level(logging.INFO)
    before = REGISTRY.get_sample_value("eps_corrupt_records_total", {"route": "bundles.get_bundle"}) or 0.0
    response = await bundle(client, b)
    assert response.status_code == 500 and response.json["error"]["code"] == "internal_error"
    body = orjson.loads((await bundle(client, c)).body)
    assert body["chain"] == [] and body["chain_complete"] is False
    logged = [r for r in caplog.records if r.name == "eps.records" and r.levelno >= logging.ERROR]
    assert [r.fields["receipt_id"] for r in logged] == [b, b]  # type: ignore[attr-defined]
    after = REGISTRY.get_sample_value("eps_corrupt_records_total", {"route": "bundles.get_bundle"})
    assert after == before + 2


@pytest.mark.parametrize("broken", [b"{garbage", b"\x01\x00"])
async def test_a_corrupt_record_is_a_json_500_logged_once(
    client: Any, store: Store, api_key: dict[str, Any], caplog: pytest.LogCaptureFixture, broken: bytes
) -> None:
    from execution_proof.kv.keys import receipt_key

    receipts = await chain_of(client, api_key, 1)
    await store.client.set(receipt_key(receipts[0]["receipt_id"]), broken)
    caplog.set_level(logging.INFO)
    response = await bundle(client, receipts[0]["receipt_id"])
    assert response.status_code == 500 and response.json["error"]["code"] == "internal_error"
    (logged,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged.name == "eps.records" and logged.fields["receipt_id"] == receipts[0]["receipt_id"]  # type: ignore[attr-defined]


async def test_bundle_lists_every_signing_kid_and_leaves_unknown_ones_out(
    settings: Settings, store: Store, api_key: dict[str, Any]
) -> None:
    """Two serving processes, each with its own certified key: a bundle lists the keys that
    signed its receipts, the answering process's first; a key the registry no longer holds is
    left out (fail closed)."""
    before = create_app(settings, store=store).asgi_client
    after = create_app(settings, store=store).asgi_client
    first = await create(before, api_key, {"input_hash": hash_of("1")})
    second = await create(after, api_key, {"input_hash": hash_of("2")})
    old, new = first["sig_kid"], second["sig_kid"]
    assert old != new
    body = orjson.loads((await bundle(after, second["receipt_id"])).body)
    assert body["chain"] == [first]
    assert [k["kid"] for k in body["keys"]["keys"]] == [new, old]
    assert body["keys"]["active_kid"] == new
    # A service whose registry no longer holds the old key leaves it out.
    await store.signing_keys.forget([old], [])
    unknown = create_app(settings, store=store).asgi_client
    body = orjson.loads((await bundle(unknown, second["receipt_id"])).body)
    assert [k["kid"] for k in body["keys"]["keys"]] == [new] and body["keys"]["active_kid"] not in (old, new)


async def test_service_is_the_public_base_url_when_configured(
    settings: Settings, store: Store, api_key: dict[str, Any]
) -> None:
    client = create_app(replace(settings, public_base_url="https://eps.example"), store=store).asgi_client
    receipt = await create(client, api_key, {"input_hash": hash_of("x")})
    assert orjson.loads((await bundle(client, receipt["receipt_id"])).body)["service"] == "https://eps.example"


async def test_bundle_reads_count_against_the_per_ip_read_limit(settings: Settings, store: Store) -> None:
    limited = replace(settings, limits=load_limits(orjson.dumps({"ip_per_minute": {"get_receipt": 2}})))
    # A fixed clock: on the real one, a minute boundary between the reads resets the window.
    client = create_app(limited, store=store, clock_ms=Clock("2026-11-21T10:00:15.200Z")).asgi_client
    key = await create_project_key(store.keys, project_name="p", plan="free")
    receipt = await create(client, key, {"input_hash": hash_of("x")})
    assert (await bundle(client, receipt["receipt_id"])).status_code == 200
    _, read = await client.get(f"/v1/receipts/{receipt['receipt_id']}")
    assert read.status_code == 200
    refused = await bundle(client, receipt["receipt_id"])
    assert refused.status_code == 429 and refused.json["error"]["code"] == "rate_limited"
    assert "retry-after" in refused.headers


# --- offline verification ---------------------------------------------------------------------


@pytest.fixture
async def saved_bundle(client: Any, api_key: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A 3-receipt chain whose last receipt's input is a real file; the bundle saved to disk."""
    data = tmp_path / "input.bin"
    data.write_bytes(b"release tarball bytes\n")
    await chain_of(client, api_key, 2)
    last = await create(client, api_key, {"input_hash": hash_file(data)})
    response = await bundle(client, last["receipt_id"])
    path = tmp_path / "bundle.json"
    path.write_bytes(response.body)
    return {"path": path, "input": data, "body": orjson.loads(response.body), "dir": tmp_path}


def offline(path: Path, **options: Any) -> dict[str, Any]:
    """The report as ``verify --json`` prints it."""
    return run_verify(VerifyOptions(receipt_path=str(path), **options)).to_dict()


@pytest.fixture
async def pinned_keys(saved_bundle: dict[str, Any], client: Any) -> str:
    """The service's ``GET /v1/public-key`` body saved: the keys a verifier pins."""
    _, response = await client.get("/v1/public-key")
    path = saved_bundle["dir"] / "keys.json"
    path.write_bytes(response.body)
    return str(path)


@contextlib.contextmanager
def key_server(body: dict[str, Any]) -> Iterator[str]:
    """A loopback HTTP server answering ``GET /v1/public-key`` with ``body`` (the service's keys)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/v1/public-key"
            payload = orjson.dumps(body if found else {"error": {"code": "not_found"}})
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield url


def forge(body: dict[str, Any], input_hash: str) -> dict[str, Any]:
    """The bundle with its receipt rewritten to commit to ``input_hash``, re-hashed and re-signed
    by a stranger's key of the same kid, which the forged bundle carries in place of the real one."""
    forged = orjson.loads(orjson.dumps(body))
    stranger = load_key_ring(new_key_set(forged["receipt"]["sig_kid"]))
    receipt = forged["receipt"]
    receipt["input_hash"] = input_hash
    receipt["receipt_hash"] = recompute_hash_or_none(receipt)
    receipt["signature"] = stranger.sign(receipt["receipt_hash"])
    for entry in forged["chain"]:
        entry["signature"] = stranger.sign(entry["receipt_hash"])
    forged["keys"] = stranger.public_keys_json()
    # A stranger's key can carry no certificate under the service's kid (a kid names its key):
    # the forger writes the version without certificates, which every verifier still reads,
    # and which holds no attestation.
    forged["version"] = 1
    del forged["attestation"]
    return forged


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("verifying a bundle must not touch the network")

    monkeypatch.setattr(http_client.HttpClient, "request", refuse)


async def test_verify_bundle_offline_with_pinned_keys(
    saved_bundle: dict[str, Any], pinned_keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_network(monkeypatch)
    report = offline(saved_bundle["path"], input_path=str(saved_bundle["input"]), keys_path=pinned_keys)
    assert report["error"] is None, report
    assert report["ok"] is True and report["bundle"] is True and report["keys_pinned"] is True
    assert report["checks"] == {
        "bundle_keys": True,
        "receipt_hash_recompute": True,
        "signature": True,
        "attestation_signature": True,
        "attestation_receipt": True,
        "input_hash": True,
        "chain": True,
    }
    assert report["attestation"]["form"] == "bundle" and report["attestation"]["log_origin"] is None
    assert report["key"]["source"] == pinned_keys
    assert len(report["chain"]["links"]) == 2 and report["chain"]["complete"] is True


async def test_unpinned_bundle_is_checked_but_not_verified(
    saved_bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A genuine bundle without pinned keys: every check against its own keys passes, and
    still it is not ``ok``: those keys could be anyone's."""
    no_network(monkeypatch)
    report = offline(saved_bundle["path"], input_path=str(saved_bundle["input"]))
    assert report["error"] is None, report
    assert report["checks"] == {
        "receipt_hash_recompute": True,
        "signature": True,
        "attestation_signature": True,
        "attestation_receipt": True,
        "input_hash": True,
        "chain": True,
    }
    assert report["keys_pinned"] is False and report["ok"] is False
    assert report["key"]["source"] == "the bundle"


@pytest.mark.slow
def test_verify_bundle_command_needs_no_service(saved_bundle: dict[str, Any], pinned_keys: str) -> None:
    """The CLI as a subprocess with saved keys and no service anywhere: VALID, exit 0."""
    done = run_cli("verify", str(saved_bundle["path"]), "--input", str(saved_bundle["input"]), "--keys", pinned_keys)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "chain: 2 earlier link(s) checked" in done.stdout
    assert "complete: the segment reaches the start of the chain" in done.stdout
    assert "the bundle's keys are the pinned keys" in done.stdout and "Verdict: VALID" in done.stdout
    wrong = saved_bundle["dir"] / "other.bin"
    wrong.write_bytes(b"something else")
    assert run_cli("verify", str(saved_bundle["path"]), "--input", str(wrong), "--keys", pinned_keys).returncode == 1


@pytest.mark.slow
def test_forged_bundle_is_not_valid_by_default(saved_bundle: dict[str, Any], pinned_keys: str) -> None:
    """A bundle re-signed by a stranger's key that it carries itself: self-consistent, so
    without pinned keys it says so and exits 1 (never VALID); with the service's keys pinned
    (a saved set, --base-url or SERVICE_BASE_URL) its keys and signatures fail."""
    where = saved_bundle["dir"]
    mine = where / "my-tampered-input.bin"
    mine.write_bytes(b"what the forger wants certified")
    forged = _write(where / "forged.json", forge(saved_bundle["body"], hash_file(mine)))

    done = run_cli("verify", str(forged), "--input", str(mine))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Verdict: VALID" not in done.stdout
    assert "Verdict: NOT VERIFIED" in done.stdout and "--keys" in done.stdout and "--base-url" in done.stdout
    assert "carried by the bundle itself (NOT pinned)" in done.stdout
    as_json = run_cli("verify", str(forged), "--input", str(mine), "--json")
    assert as_json.returncode == 1
    report = orjson.loads(as_json.stdout)
    assert report["keys_pinned"] is False and report["ok"] is False
    assert all(report["checks"].values()), "self-consistent: only pinning can tell"

    done = run_cli("verify", str(forged), "--input", str(mine), "--keys", pinned_keys, "--json")
    assert done.returncode == 1
    report = orjson.loads(done.stdout)
    assert report["keys_pinned"] is True and report["ok"] is False
    assert report["checks"]["bundle_keys"] is False and report["checks"]["signature"] is False
    assert report["key"]["differing_kids"] == [saved_bundle["body"]["receipt"]["sig_kid"]]

    service_keys = orjson.loads(Path(pinned_keys).read_bytes())
    with key_server(service_keys) as base_url:
        for how in (["--base-url", base_url], []):
            env = {} if how else {"SERVICE_BASE_URL": base_url}
            done = run_cli("verify", str(forged), "--input", str(mine), *how, env=env)
            assert done.returncode == 1, done.stdout + done.stderr
            assert "are NOT the pinned keys" in done.stdout and "Verdict: INVALID" in done.stdout
            genuine = run_cli("verify", str(saved_bundle["path"]), "--input", str(saved_bundle["input"]), *how, env=env)
            assert genuine.returncode == 0, genuine.stdout + genuine.stderr
            assert "Verdict: VALID" in genuine.stdout


def _write(path: Path, body: dict[str, Any]) -> Path:
    path.write_bytes(orjson.dumps(body))
    return path


async def test_tampered_bundles_fail(
    saved_bundle: dict[str, Any], pinned_keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_network(monkeypatch)
    body, where = saved_bundle["body"], saved_bundle["dir"]

    def offline(path: Path) -> dict[str, Any]:
        return run_verify(VerifyOptions(receipt_path=str(path), keys_path=pinned_keys)).to_dict()

    edited = orjson.loads(orjson.dumps(body))
    edited["chain"][1]["run_id"] = "rewritten"
    report = offline(_write(where / "edited.json", edited))
    assert report["ok"] is False and report["checks"]["chain"] is False
    assert report["checks"]["signature"] is True, "the receipt itself is still fine"
    assert report["chain"]["links"][1]["receipt_hash_recompute"] is False

    swapped = orjson.loads(orjson.dumps(body))
    swapped["chain"].reverse()  # each entry is genuine, the links are not
    report = offline(_write(where / "swapped.json", swapped))
    assert report["checks"]["chain"] is False
    assert [link["linked"] for link in report["chain"]["links"]] == [False, False]

    cut = orjson.loads(orjson.dumps(body))
    cut["chain"] = cut["chain"][:1]  # still claims chain_complete
    report = offline(_write(where / "cut.json", cut))
    assert report["checks"]["chain"] is False and report["chain"]["complete"] is False
    cut["chain_complete"] = False
    report = offline(_write(where / "cut-honest.json", cut))
    assert report["ok"] is True, "an honest partial segment verifies, and says it is partial"
    assert report["chain"]["complete"] is False

    keyless = orjson.loads(orjson.dumps(body))
    keyless["keys"]["keys"] = []
    report = run_verify(VerifyOptions(receipt_path=str(_write(where / "keyless.json", keyless)))).to_dict()
    assert report["ok"] is False and report["checks"]["signature"] is False and report["key"]["known"] is False

    forged_key = orjson.loads(orjson.dumps(body))
    other = new_key_set("forged")["keys"][0]["public_key_base64url"]
    forged_key["keys"]["keys"][0]["public_key_base64url"] = other
    del forged_key["keys"]["keys"][0]["certificate"]
    forged_key["version"] = 1
    del forged_key["attestation"]
    report = offline(_write(where / "forged.json", forged_key))
    assert report["checks"]["bundle_keys"] is False and report["ok"] is False

    assert offline(_write(where / "v3.json", {**body, "version": 3}))["error"] is not None


async def test_keys_option_overrides_the_bundles_keys(
    saved_bundle: dict[str, Any], pinned_keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_network(monkeypatch)
    report = offline(saved_bundle["path"], keys_path=pinned_keys)
    assert report["ok"] is True and report["key"]["source"] == pinned_keys
    stranger = saved_bundle["dir"] / "stranger.json"
    kid = saved_bundle["body"]["receipt"]["sig_kid"]
    other = new_key_set("stranger")["keys"][0]["public_key_base64url"]
    stranger.write_bytes(orjson.dumps({"keys": [{"kid": kid, "alg": "Ed25519", "public_key_base64url": other}]}))
    report = offline(saved_bundle["path"], keys_path=str(stranger))
    assert report["ok"] is False and report["checks"]["signature"] is False
    assert report["checks"]["bundle_keys"] is False


def test_bundle_doc_example_matches_the_format() -> None:
    """docs/bundles.md shows a bundle with exactly the members the endpoint returns."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "bundles.md").read_text()
    assert "eps-receipt-bundle" in text
    for member in BUNDLE_MEMBERS:
        assert f'"{member}"' in text, member
