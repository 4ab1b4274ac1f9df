"""Which checkpoint a bundle's log proof is against (docs/bundles.md, the log member): the
earliest time-stamped checkpoint that covers the receipt and meets the witness quorum;
failing that, the newest covering one that meets it; failing that, the newest covering one.
Cosignatures count up to LOG_COSIGNATURE_SKEW_S ahead of the service's clock."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.logstore import LogStore
from execution_proof.kv.store import Store
from execution_proof.transparency import note, tlog
from execution_proof.transparency.cosignature import Cosigner
from execution_proof.transparency.policy import parse_policy
from tests.test_log import ORIGIN, integrator, is_leaf_of, issue, log_app, log_entries


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.Signer.generate(ORIGIN)


@pytest.fixture(scope="module")
def witness() -> Cosigner:
    return Cosigner.generate("witness.example/w")


class Log:
    """A log grown batch by batch, uncosigned (the integrator has no witnesses); the test
    cosigns, republishes and time-stamps checkpoints by hand, as the witnesses and TSAs would."""

    def __init__(self, app: Any, store: Store, log_store: LogStore, signer: note.Signer, witness: Cosigner) -> None:
        self.app, self.store, self.log_store, self.signer, self.witness = app, store, log_store, signer, witness
        self.receipts: list[dict[str, Any]] = []

    async def grow(self, count: int) -> str:
        """``count`` more receipts (two entries each: the receipt's and its dsse leaf),
        sequenced and published: the signed checkpoint. The app's key certificate joins the
        first batch (the app starts then): 2 receipts make a log of 5 entries, 2 more of 9."""
        key = await create_project_key(self.store.keys, project_name=f"p{len(self.receipts)}", plan="pro")
        worker = await integrator(self.store, self.log_store, self.signer)
        self.receipts += await issue(self.app, key, [f"r{len(self.receipts) + n}" for n in range(count)])
        await worker.step(force=True)
        raw = await self.log_store.checkpoint()
        assert raw is not None
        return raw.decode()

    def cosigned(self, signed: str, ahead_s: int = 0) -> str:
        return signed + self.witness.cosign(note.parse_note(signed).text, int(time.time()) + ahead_s)

    async def stamp(self, signed: str, tsa: str) -> None:
        size = note.parse_checkpoint(note.parse_note(signed).text).size
        record = {"checkpoint": signed, "timestamps": [{"tsa": tsa, "response_base64": ""}]}
        await self.log_store.save_stamp(size, orjson.dumps(record))

    async def bundle(self, receipt: dict[str, Any]) -> tuple[int, str, list[str]]:
        """(size of the proof's checkpoint, that checkpoint, the TSAs of its time-stamps),
        the proof checked against the receipt's leaf."""
        _, response = await self.app.asgi_client.get(f"/v1/receipts/{receipt['receipt_id']}/bundle")
        assert response.status == 200, response.text
        proof = note.parse_tlog_proof(response.json["log"]["proof"])
        checkpoint, _ = note.open_checkpoint(proof.checkpoint, self.signer.verifier)
        leaf = tlog.leaf_hash(tlog.entry_bytes(receipt))
        tlog.verify_inclusion(leaf, proof.index, checkpoint.size, proof.path, checkpoint.root)
        # The receipt's dsse leaf is right after it, within the same checkpoint.
        assert proof.index + 1 < checkpoint.size
        assert is_leaf_of((await log_entries(self.log_store, checkpoint.size))[proof.index + 1], receipt)
        return checkpoint.size, proof.checkpoint, [t["tsa"] for t in response.json["timestamps"]]


def policy_of(signer: note.Signer, witness: Cosigner) -> Any:
    return parse_policy(f"log {signer.verifier.encode()}\nwitness w {witness.key.encode()}\nquorum w\n")


async def test_the_earliest_stamped_checkpoint_that_meets_the_quorum_then_the_newest_that_does(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, witness: Cosigner
) -> None:
    app = log_app(store, log_store, receipt_root, signer, log_policy=policy_of(signer, witness))
    log = Log(app, store, log_store, signer, witness)
    five = await log.grow(2)
    await log.stamp(five, "tsa-5")  # stamped, but no witness cosigned it
    nine = await log.grow(2)
    await log.stamp(log.cosigned(nine), "tsa-9")  # stamped and cosigned
    thirteen = await log.grow(2)  # the latest: neither
    first, third, sixth = [await log.bundle(log.receipts[n]) for n in (0, 2, 5)]
    assert first[0] == 9 and first[2] == ["tsa-9"], "not the stamped 5: it does not meet the quorum"
    assert third[0] == 9 and third[2] == ["tsa-9"]
    assert sixth[0] == 13 and sixth[2] == [], "nothing covering it meets the quorum: the newest"
    # The latest checkpoint published again with its witness's cosignature (body unchanged):
    # the newest covering checkpoint that meets the quorum, though not stamped.
    assert await log_store.publish(log.cosigned(thirteen).encode())
    app.ctx.services.log._read_at = -1e9  # as CHECKPOINT_TTL_S later: the service reads the checkpoint again
    size, text, stamps = await log.bundle(log.receipts[5])
    assert (size, stamps) == (13, []) and text.count("\u2014 ") == 2
    assert (await log.bundle(log.receipts[0]))[0] == 9, "the earliest stamped one that meets it still wins"
    # Stamped later, as first published (uncosigned): read as republished, it meets the quorum.
    await log.stamp(thirteen, "tsa-13")
    size, text, stamps = await log.bundle(log.receipts[5])
    assert (size, stamps) == (13, ["tsa-13"]) and text.count("\u2014 ") == 2


async def test_without_a_policy_the_earliest_stamped_checkpoint(
    store: Store, log_store: LogStore, receipt_root: str, signer: note.Signer, witness: Cosigner
) -> None:
    app = log_app(store, log_store, receipt_root, signer)
    log = Log(app, store, log_store, signer, witness)
    await log.stamp(await log.grow(2), "tsa-5")
    await log.stamp(log.cosigned(await log.grow(2)), "tsa-9")
    await log.grow(2)
    assert (await log.bundle(log.receipts[0]))[::2] == (5, ["tsa-5"])
    assert (await log.bundle(log.receipts[5]))[::2] == (13, [])


@pytest.mark.parametrize(("skew_s", "ahead_s", "counts"), [(300, 120, True), (300, 600, False), (0, 60, False)])
async def test_a_cosignature_ahead_of_the_clock_counts_within_the_skew(
    store: Store,
    log_store: LogStore,
    receipt_root: str,
    signer: note.Signer,
    witness: Cosigner,
    skew_s: int,
    ahead_s: int,
    counts: bool,
) -> None:
    app = log_app(
        store, log_store, receipt_root, signer, log_policy=policy_of(signer, witness), log_cosignature_skew_s=skew_s
    )
    log = Log(app, store, log_store, signer, witness)
    await log.stamp(log.cosigned(await log.grow(2), ahead_s), "tsa-5")
    await log.stamp(await log.grow(2), "tsa-9")
    assert (await log.bundle(log.receipts[0]))[0] == (5 if counts else 9)
