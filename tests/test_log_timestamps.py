"""RFC 3161 time evidence for the log: a real TSA run locally (``openssl ts -reply``, CA and
TSA certificate made here) stamps checkpoints; only answers that pass the checks are kept;
the route and bundles serve them; ``openssl ts -verify`` (an implementation nobody here
wrote) accepts what we keep; ``verify --tsa-roots`` reports when the receipt existed."""

from __future__ import annotations

import asyncio
import base64
import datetime
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof.jobs.log_timestamps import Stamper, TsaConfig
from execution_proof.kv import keys
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.runtime import metrics
from execution_proof.transparency import note, timestamps, tlog
from tests import tsa_tokens
from tests.conftest import free_port
from tests.local_tsa import LocalTsa, openssl_binary
from tests.servers import verify_cli
from tests.test_log import ORIGIN, ident, integrator, issue, log_app

CHECKPOINT_TEXT = f"{ORIGIN}\n5\n{base64.b64encode(bytes(range(32))).decode()}\n"


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture(scope="module")
def tsa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTsa]:
    local = LocalTsa(tmp_path_factory.mktemp("tsa")).start()
    yield local
    local.stop()


@pytest.fixture(scope="module")
def other_tsa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTsa]:
    local = LocalTsa(tmp_path_factory.mktemp("other-tsa"), name="Other TSA").start()
    yield local
    local.stop()


@pytest.fixture(autouse=True)
def well_behaved(tsa: LocalTsa, other_tsa: LocalTsa) -> Iterator[None]:
    yield
    tsa.mode = other_tsa.mode = "ok"


def ask(tsa: LocalTsa, text: str = CHECKPOINT_TEXT) -> tuple[timestamps.StampRequest, bytes]:
    import httpx

    request = timestamps.new_request(text)
    response = httpx.post(tsa.url, content=request.der, headers={"Content-Type": timestamps.QUERY_TYPE})
    return request, response.content


def roots_of(tsa: LocalTsa) -> list[Any]:
    return timestamps.load_roots(tsa.roots_pem.read_bytes())


# -- the checks (transparency/timestamps.py) against a real TSA


def test_a_good_answer_is_kept_and_verifies_against_its_root(tsa: LocalTsa) -> None:
    request, der = ask(tsa)
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=2)
    kept = timestamps.check_response(der, request)
    assert kept == timestamps.check_response(der, request, roots_of(tsa))
    assert kept.tsa_name == "CN=Local Test TSA" and kept.accuracy_s == 1.0
    assert before <= kept.gen_time <= datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    assert kept.existed_by == kept.gen_time + datetime.timedelta(seconds=1)
    assert timestamps.verify_token(der, CHECKPOINT_TEXT, roots_of(tsa)) == kept


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("rejection", "did not grant"),
        ("garbage", "not a TimeStampResp"),
        ("other_imprint", "over another text"),
        ("other_nonce", "nonce is not the request's"),
        ("no_eku", "no extended key usage"),
    ],
)
def test_a_bad_answer_is_refused_before_it_is_kept(tsa: LocalTsa, mode: str, reason: str) -> None:
    tsa.mode = mode
    request, der = ask(tsa)
    for roots in (None, roots_of(tsa)):
        with pytest.raises(timestamps.StampError, match=reason):
            timestamps.check_response(der, request, roots)


def test_a_token_verifies_only_under_its_root_and_over_its_checkpoint(tsa: LocalTsa, other_tsa: LocalTsa) -> None:
    request, der = ask(tsa)
    with pytest.raises(timestamps.StampError, match="does not verify against the roots"):
        timestamps.verify_token(der, CHECKPOINT_TEXT, roots_of(other_tsa))
    # With the TSA's root among others it verifies.
    assert timestamps.verify_token(der, CHECKPOINT_TEXT, roots_of(other_tsa) + roots_of(tsa))
    with pytest.raises(timestamps.StampError, match="over another text"):
        timestamps.verify_token(der, CHECKPOINT_TEXT.replace("\n5\n", "\n6\n"), roots_of(tsa))
    # A flipped byte in the signed part breaks the signature.
    tampered = bytearray(der)
    tampered[-10] ^= 1
    with pytest.raises(timestamps.StampError):
        timestamps.verify_token(bytes(tampered), CHECKPOINT_TEXT, roots_of(tsa))
    # The nonce is the requester's business: a verifier does not need it, the log checks it.
    assert timestamps.check_response(der, request, roots_of(tsa)).serial > 0


def test_openssl_accepts_what_we_keep_over_the_checkpoint_text(tsa: LocalTsa, tmp_path: Path) -> None:
    """The imprint is SHA-256 of the checkpoint's text, as the contract says: OpenSSL's own
    verifier, given only that text, the response and the root, agrees."""
    request, der = ask(tsa)
    timestamps.check_response(der, request, roots_of(tsa))
    (tmp_path / "checkpoint.txt").write_text(CHECKPOINT_TEXT)
    (tmp_path / "reply.tsr").write_bytes(der)
    command = [openssl_binary(), "ts", "-verify", "-data", str(tmp_path / "checkpoint.txt")]
    command += ["-in", str(tmp_path / "reply.tsr"), "-CAfile", str(tsa.roots_pem)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "Verification: OK" in done.stdout, done.stdout + done.stderr
    (tmp_path / "checkpoint.txt").write_text(CHECKPOINT_TEXT + "— a signature line is not part of the text\n")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode != 0


# -- the stamper, the store and the routes


def tsa_config(*urls: str, interval_s: float = 60, roots: tuple[Any, ...] = ()) -> TsaConfig:
    return TsaConfig(tuple(urls), interval_s, roots)


async def grow(
    app: Any, store: Store, log_store: LogStore, signer: note.Signer, key: dict[str, Any], labels: list[str]
) -> Any:
    """A receipt per label, sequenced and published (the first time, with the app's key
    certificate: the app starts then)."""
    worker = await integrator(store, log_store, signer)
    receipts = await issue(app, key, labels)
    await worker.step(force=True)
    return receipts


def failures(url: str, kind: str) -> float:
    return metrics.LOG_TSA_FAILURES.labels(url, kind)._value.get()


async def test_the_newest_checkpoint_is_stamped_and_served(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tsa: LocalTsa, other_tsa: LocalTsa
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    await integrator(store, log_store, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="stamped", plan="pro")
    await grow(app, store, log_store, signer, key, ["s0", "s1", "s2"])  # each its entry and leaf, a certificate: 7
    both_roots = tuple(roots_of(tsa) + roots_of(other_tsa))
    stamper = Stamper(store.log_queue, log_store, ident(signer), tsa_config(tsa.url, other_tsa.url, roots=both_roots))
    asked = len(tsa.requests)
    assert await stamper.step() == 7
    assert len(tsa.requests) == asked + 1
    _, response = await client.get("/v1/log/checkpoints/7/timestamps")
    assert response.status == 200, response.text
    body = response.json
    assert body["tree_size"] == 7
    checkpoint_text = note.parse_note(body["checkpoint"]).text
    assert note.parse_checkpoint(checkpoint_text).size == 7
    assert [t["tsa"] for t in body["timestamps"]] == [tsa.url, other_tsa.url]
    for item, local in zip(body["timestamps"], (tsa, other_tsa), strict=True):
        timestamps.verify_token(base64.b64decode(item["response_base64"]), checkpoint_text, roots_of(local))
    # Nothing new: no request. New entries within the interval: still none (one per interval).
    assert await stamper.step() is None
    await grow(app, store, log_store, signer, key, ["s7"])  # 9 entries
    assert await stamper.step() is None
    assert len(tsa.requests) == asked + 1
    ttl = await store.client.pttl(keys.log_stamping_key(ident(signer)))
    assert 0 < ttl <= 60_000
    # The interval over (its claim expired): the newest checkpoint is stamped.
    await store.client.delete(keys.log_stamping_key(ident(signer)))
    assert await stamper.step() == 9
    # The latest checkpoint before it is stamped, and sizes never stamped.
    await grow(app, store, log_store, signer, key, ["s8"])
    _, latest = await client.get("/v1/log/checkpoints/11/timestamps")
    assert latest.status == 200 and latest.json["timestamps"] == [] and latest.json["tree_size"] == 11
    for size in ("6", "8", "10", "12", "07", "x", "9" * 30):
        _, missing = await client.get(f"/v1/log/checkpoints/{size}/timestamps")
        assert missing.status == 404, size
        assert missing.json["error"]["code"] == "not_found"


async def test_workers_stamp_once_per_interval_between_them(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tsa: LocalTsa
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    await integrator(store, log_store, signer)
    key = await create_project_key(store.keys, project_name="racing", plan="pro")
    await grow(app, store, log_store, signer, key, ["r0"])  # its entry and leaf, the app's key certificate: 3
    asked = len(tsa.requests)
    stampers = [Stamper(store.log_queue, log_store, ident(signer), tsa_config(tsa.url)) for _ in range(4)]
    results = await asyncio.gather(*(s.step() for s in stampers))
    assert sorted(results, key=lambda r: r or 0) == [None, None, None, 3]
    assert len(tsa.requests) == asked + 1


async def test_an_answer_that_fails_a_check_is_not_kept(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tsa: LocalTsa, other_tsa: LocalTsa
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    await integrator(store, log_store, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="refused", plan="pro")
    await grow(app, store, log_store, signer, key, [])  # the app's key certificate alone: 1 entry
    down = f"http://127.0.0.1:{free_port()}/"
    other_tsa.mode = "other_nonce"
    refused, unreachable = failures(other_tsa.url, "refused"), failures(down, "unreachable")
    stamper = Stamper(store.log_queue, log_store, ident(signer), tsa_config(tsa.url, other_tsa.url, down))
    assert await stamper.step() == 1
    _, response = await client.get("/v1/log/checkpoints/1/timestamps")
    assert [t["tsa"] for t in response.json["timestamps"]] == [tsa.url]
    assert failures(other_tsa.url, "refused") == refused + 1
    assert failures(down, "unreachable") == unreachable + 1
    # No TSA answers well: nothing is kept, and the latest checkpoint has no time-stamps.
    await grow(app, store, log_store, signer, key, ["f1"])  # 3 entries
    await store.client.delete(keys.log_stamping_key(ident(signer)))
    tsa.mode, other_tsa.mode = "error_500", "no_eku"
    assert await stamper.step() is None
    assert await log_store.stamp(3) is None
    assert failures(tsa.url, "http_500") >= 1 and failures(other_tsa.url, "refused") == refused + 2
    # Roots configured: a good answer from a TSA under another root is not kept.
    tsa.mode = other_tsa.mode = "ok"
    await store.client.delete(keys.log_stamping_key(ident(signer)))
    pinned = Stamper(
        store.log_queue, log_store, ident(signer), tsa_config(tsa.url, other_tsa.url, roots=tuple(roots_of(tsa)))
    )
    assert await pinned.step() == 3
    _, response = await client.get("/v1/log/checkpoints/3/timestamps")
    assert [t["tsa"] for t in response.json["timestamps"]] == [tsa.url]


async def test_a_bundle_proves_against_the_first_stamped_checkpoint_covering_it(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tsa: LocalTsa
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    await integrator(store, log_store, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="bundled", plan="pro")
    early = await grow(app, store, log_store, signer, key, ["b0", "b1"])  # their leaves, the app's key certificate: 5
    stamper = Stamper(store.log_queue, log_store, ident(signer), tsa_config(tsa.url))
    assert await stamper.step() == 5
    late = await grow(app, store, log_store, signer, key, [f"c{n}" for n in range(300)])  # past a full tile

    async def bundle(receipt: dict[str, Any]) -> dict[str, Any]:
        _, response = await client.get(f"/v1/receipts/{receipt['receipt_id']}/bundle")
        assert response.status == 200
        return dict(response.json)

    stamped = await bundle(early[1])
    proof = note.parse_tlog_proof(stamped["log"]["proof"])
    checkpoint, _ = note.open_checkpoint(proof.checkpoint, signer.verifier)
    assert checkpoint.size == 5, "the proof is against the stamped checkpoint, not the latest (605)"
    tlog.verify_inclusion(
        tlog.leaf_hash(tlog.entry_bytes(early[1])), proof.index, 5, proof.path, checkpoint.root
    )  # fmt: skip
    assert len(stamped["timestamps"]) == 1
    timestamps.verify_token(
        base64.b64decode(stamped["timestamps"][0]["response_base64"]),
        note.parse_note(proof.checkpoint).text,
        roots_of(tsa),
    )
    newer = await bundle(late[-1])
    assert (
        note.parse_checkpoint(note.parse_note(note.parse_tlog_proof(newer["log"]["proof"]).checkpoint).text).size == 605
    )
    assert newer["timestamps"] == []
    # The stamps are kept in the log store with the log: the checkpoint as published, every answer.
    record = orjson.loads(await log_store.stamp(5) or b"{}")
    assert note.parse_checkpoint(note.parse_note(record["checkpoint"]).text).size == 5
    assert await log_store.last_stamped() == 5


# -- verify --tsa-roots


@pytest.mark.slow  # seven ``service.py verify`` processes
async def test_verify_reports_when_the_receipt_existed(
    store: Store,
    log_store: LogStore,
    receipt_root: str,
    signer: note.Signer,
    tsa: LocalTsa,
    other_tsa: LocalTsa,
    tmp_path: Path,
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    await integrator(store, log_store, signer)
    client = app.asgi_client
    key = await create_project_key(store.keys, project_name="timed", plan="pro")
    receipts = await grow(app, store, log_store, signer, key, ["t0"])  # its leaf, the app's key certificate: 3
    assert await Stamper(store.log_queue, log_store, ident(signer), tsa_config(tsa.url)).step() == 3
    _, response = await client.get(f"/v1/receipts/{receipts[0]['receipt_id']}/bundle")
    bundle = response.json
    _, keys_response = await client.get("/v1/public-key")
    (tmp_path / "keys.json").write_text(keys_response.text)
    bundle_file = tmp_path / "bundle.json"
    bundle_file.write_bytes(orjson.dumps(bundle))
    common = [str(bundle_file), "--keys", str(tmp_path / "keys.json"), "--log-key", signer.verifier.encode()]
    done = verify_cli(*common, "--tsa-roots", str(tsa.roots_pem))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "time: the receipt existed by 20" in done.stdout and "CN=Local Test TSA" in done.stdout
    report = orjson.loads(verify_cli(*common, "--tsa-roots", str(tsa.roots_pem), "--json").stdout)
    existed_by = datetime.datetime.fromisoformat(report["log"]["time"]["existed_by"].replace("Z", "+00:00"))
    issued = datetime.datetime.fromisoformat(receipts[0]["created_at"].replace("Z", "+00:00"))
    assert issued <= existed_by <= datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    # Roots of another TSA: no time-stamp is trusted, the check fails.
    done = verify_cli(*common, "--tsa-roots", str(other_tsa.roots_pem), "--json")
    report = orjson.loads(done.stdout)
    assert done.returncode == 1 and report["checks"]["log_time"] is False
    assert "does not verify against the roots" in report["log"]["time"]["stamps"][0]["reason"]
    # A time-stamp moved onto another checkpoint does not count.
    moved = dict(bundle, timestamps=[dict(bundle["timestamps"][0], response_base64="AAAA")])
    bundle_file.write_bytes(orjson.dumps(moved))
    done = verify_cli(*common, "--tsa-roots", str(tsa.roots_pem), "--json")
    assert done.returncode == 1 and orjson.loads(done.stdout)["checks"]["log_time"] is False
    # No time-stamps yet: asked for time evidence, the verdict says it is missing.
    bundle_file.write_bytes(orjson.dumps(dict(bundle, timestamps=[])))
    done = verify_cli(*common, "--tsa-roots", str(tsa.roots_pem))
    assert done.returncode == 1 and "no time-stamps yet" in done.stdout
    # --tsa-roots needs the log key pinned, and a readable PEM file.
    done = verify_cli(str(bundle_file), "--keys", str(tmp_path / "keys.json"), "--tsa-roots", str(tsa.roots_pem))
    assert done.returncode == 2 and "need --log-key or --log-policy" in done.stdout
    (tmp_path / "not.pem").write_text("no certificate here\n")
    done = verify_cli(*common, "--tsa-roots", str(tmp_path / "not.pem"))
    assert done.returncode == 2 and "--tsa-roots" in done.stdout


async def test_the_stamper_keeps_a_chain_tsas_answer(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, tsa: LocalTsa, tmp_path: Path
) -> None:
    """A TSA that sends its chain (``openssl ts -reply -chain``: signer, intermediate, root,
    out of DER set order) and names it in its ESSCertIDs: kept, with and without roots, and
    verified by ``verify_token`` and OpenSSL."""
    chained = LocalTsa(tmp_path / "chained", name="Chained TSA", chain=True, ess_cert_id_chain=True).start()
    try:
        app = log_app(store, log_store, receipt_root, signer)
        await integrator(store, log_store, signer)
        key = await create_project_key(store.keys, project_name="chained", plan="pro")
        await grow(app, store, log_store, signer, key, ["k0"])  # its leaf, and the app's key certificate: 3
        refused = failures(chained.url, "refused")
        pinned = Stamper(
            store.log_queue, log_store, ident(signer), tsa_config(chained.url, roots=tuple(roots_of(chained)))
        )
        assert await pinned.step() == 3
        assert failures(chained.url, "refused") == refused
        record = orjson.loads(await log_store.stamp(3) or b"{}")
        (kept,) = record["timestamps"]
        der = base64.b64decode(kept["response_base64"])
        text = note.parse_note(record["checkpoint"]).text
        assert timestamps.verify_token(der, text, roots_of(chained)).tsa_name == "CN=Chained TSA"
        with pytest.raises(timestamps.StampError, match="does not verify against the roots"):
            timestamps.verify_token(der, text, roots_of(tsa))
        (tmp_path / "checkpoint.txt").write_text(text)
        (tmp_path / "reply.tsr").write_bytes(der)
        assert tsa_tokens.openssl_ok(tmp_path, der, tmp_path / "checkpoint.txt", chained.roots_pem)
        # Without roots the Stamper keeps it too (the chain is then left to verifiers).
        await grow(app, store, log_store, signer, key, ["k3"])
        await store.client.delete(keys.log_stamping_key(ident(signer)))
        assert await Stamper(store.log_queue, log_store, ident(signer), tsa_config(chained.url)).step() == 5
    finally:
        chained.stop()


async def test_a_store_outage_is_one_line_down_and_one_back(
    store: Store, log_store: LogStore, signer: note.Signer, caplog: pytest.LogCaptureFixture
) -> None:
    """The time-stamper's loop used to log a traceback every pass while the store was down."""
    import logging

    from execution_proof.kv.logstore import LogStoreError

    stamper = Stamper(store.log_queue, log_store, ident(signer), tsa_config("http://127.0.0.1:9/", interval_s=0.001))
    stop = asyncio.Event()
    passes = 0

    async def step() -> int | None:
        nonlocal passes
        passes += 1
        if passes == 15:
            stop.set()
        if 2 <= passes <= 11:
            raise LogStoreError("the log store does not answer")
        return None

    stamper.step = step  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, "eps.log")
    await stamper.run(stop)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("eps.log")]
    assert [m for m in said if "pass failed" in m] == [
        "time-stamper pass failed (LogStoreError: the log store does not answer); retrying every pass, "
        "said again only when it passes"
    ], said
    back = [m for m in said if "passes again" in m]
    assert len(back) == 1 and back[0].endswith("(failed passes: LogStoreError 10)"), said
    assert passes == 15
