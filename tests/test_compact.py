"""The compact receipt record (receipts/compact.py): every receipt the service can build is
stored compactly and decodes to exactly the JSON bytes the issue path made; anything else is
kept as JSON; ULIDs survive their 16-byte form."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execution_proof.receipts import compact
from execution_proof.receipts.ids import (
    CROCKFORD,
    new_actor_id,
    new_project_id,
    new_receipt_id,
    ulid_from_bytes,
    ulid_to_bytes,
)
from execution_proof.receipts.model import (
    MAX_TAG_KEY_LEN,
    MAX_TAG_VALUE_LEN,
    MAX_TAGS,
    MAX_TAGS_BYTES,
    MAX_TEXT_LEN,
    RECEIPT_KINDS,
    CreateRequest,
    build_receipt,
    format_created_at,
    place_in_chain,
)
from execution_proof.receipts.signing import KeyRing
from tests.conftest import hash_of

# Every code point a JSON string can carry (no lone surrogates: request bodies cannot hold
# them), weighted towards the ones escaping and UTF-8 treat specially.
TEXT_CHARS = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "é", "\U0001d11e", "😀"]),
)
TEXT = st.text(TEXT_CHARS, min_size=0, max_size=MAX_TEXT_LEN)
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant created_at can write
HASHES = st.binary(min_size=32, max_size=32).map(lambda raw: "sha256:" + raw.hex())


@st.composite
def tag_maps(draw: Any) -> dict[str, str] | None:
    tags = draw(
        st.dictionaries(
            st.text(TEXT_CHARS, min_size=1, max_size=MAX_TAG_KEY_LEN),
            st.text(TEXT_CHARS, min_size=1, max_size=MAX_TAG_VALUE_LEN),
            max_size=MAX_TAGS,
        )
    )
    while tags and len(orjson.dumps(tags)) > MAX_TAGS_BYTES:
        tags.pop(next(iter(tags)))
    return tags or None


@st.composite
def receipts(draw: Any, keyring: KeyRing) -> dict[str, Any]:
    """A receipt exactly as ``usecases.issuing`` builds one, over the whole request space."""
    req = CreateRequest(
        input_hash=draw(HASHES),  # type: ignore[arg-type]
        output_hash=draw(st.none() | HASHES),  # type: ignore[arg-type]
        params_hash=draw(st.none() | HASHES),  # type: ignore[arg-type]
        env_hash=draw(st.none() | HASHES),  # type: ignore[arg-type]
        code_ref=draw(st.none() | TEXT),
        run_id=draw(st.none() | TEXT),
        tags=draw(tag_maps()),
        receipt_kind=draw(st.sampled_from((None, *RECEIPT_KINDS))),
        prev_receipt_hash=draw(st.none() | HASHES),  # type: ignore[arg-type]
        claimed_project_id=None,
        claimed_actor_id=None,
    )
    tip = draw(st.none() | st.just(req.prev_receipt_hash) | HASHES)
    now = draw(st.integers(min_value=0, max_value=MAX_MS))
    project_id = new_project_id()
    return build_receipt(
        req,
        receipt_id=new_receipt_id(project_id, now),
        project_id=project_id,
        actor_id=new_actor_id(),
        created_at=format_created_at(now),
        placement=place_in_chain(req.prev_receipt_hash, tip),
        keyring=keyring,
    )


@settings(
    max_examples=400 * settings.default.max_examples // 100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_every_buildable_receipt_is_stored_compactly_and_reads_back_byte_identical(
    data: st.DataObject, keyring: KeyRing
) -> None:
    receipt = data.draw(receipts(keyring))
    receipt_json = orjson.dumps(receipt)
    kept = compact.Kept(data.draw(st.binary(min_size=64, max_size=64)), data.draw(st.none() | st.text(max_size=200)))
    stored = compact.encode(receipt, receipt_json, kept)
    assert compact.is_compact(stored), "a receipt the service built fell back to JSON"
    assert compact.decode(stored) == receipt_json
    assert compact.kept(stored) == kept, "the attestation's signature and log origin read back"
    assert len(stored) < len(receipt_json) + len(kept.log_origin or "")


def test_maximum_sizes_round_trip(keyring: KeyRing) -> None:
    big = "\U0001f600" * MAX_TEXT_LEN  # 4 UTF-8 bytes each: a two-byte length prefix
    tags = {f"{n:02d}" + "k" * (MAX_TAG_KEY_LEN - 2): "v" * 40 for n in range(MAX_TAGS)}
    while len(orjson.dumps(tags)) > MAX_TAGS_BYTES:
        tags.popitem()
    req = CreateRequest(hash_of("i"), hash_of("o"), hash_of("p"), hash_of("e"), big, big, tags, "audit_pack",
                        hash_of("prev"), None, None)  # type: ignore[arg-type]  # fmt: skip
    project_id = new_project_id()
    receipt = build_receipt(
        req,
        receipt_id=new_receipt_id(project_id, MAX_MS),
        project_id=project_id,
        actor_id=new_actor_id(),
        created_at=format_created_at(MAX_MS),
        placement=place_in_chain(req.prev_receipt_hash, hash_of("tip")),
        keyring=keyring,
    )
    receipt_json = orjson.dumps(receipt)
    stored = compact.encode(receipt, receipt_json, KEPT)
    assert compact.is_compact(stored) and compact.decode(stored) == receipt_json
    assert list(orjson.loads(compact.decode(stored))["tags"]) == list(tags), "tag order is kept"


KEPT = compact.Kept(bytes(range(64)), "log.example/v1/log")


def _receipt(keyring: KeyRing, **changes: Any) -> dict[str, Any]:
    project_id = new_project_id()
    receipt = build_receipt(
        CreateRequest(hash_of("i"), None, None, None, None, None, {"b": "1", "a": "2"}, None, None, None, None),  # type: ignore[arg-type]
        receipt_id=new_receipt_id(project_id, 1_700_000_000_000),
        project_id=project_id,
        actor_id=new_actor_id(),
        created_at=format_created_at(1_700_000_000_000),
        placement=place_in_chain(None, None),
        keyring=keyring,
    )
    receipt.update(changes)
    return receipt


@pytest.mark.parametrize(
    "changes",
    [
        {"input_hash": "sha256:" + "A" * 64},  # upper-case hex would come back lower-case
        {"signature": "x" * 85 + "B"},  # non-canonical base64url (unused low bits set)
        {"receipt_id": "rcpt_not-a-ulid"},
        {"chain_status": "sideways"},
        {"status": "unknown"},
        {"tags": {}},
        {"code_ref": 7},
        {"created_at": "2023-11-14T22:13:20Z"},  # not the service's millisecond form
        {"extra": "field"},
    ],
)
def test_what_cannot_be_reproduced_exactly_is_kept_as_json(keyring: KeyRing, changes: dict[str, Any]) -> None:
    receipt = _receipt(keyring, **changes)
    receipt_json = orjson.dumps(receipt)
    stored = compact.encode(receipt, receipt_json, KEPT)
    assert stored[0] == compact.JSON_KEPT and stored.endswith(receipt_json)
    assert compact.decode(stored) == receipt_json
    assert compact.kept(stored) == KEPT


def test_a_created_at_other_than_the_id_time_is_carried(keyring: KeyRing) -> None:
    receipt = _receipt(keyring, created_at=format_created_at(1_600_000_000_123))
    receipt_json = orjson.dumps(receipt)
    stored = compact.encode(receipt, receipt_json, KEPT)
    assert compact.is_compact(stored) and compact.decode(stored) == receipt_json


def test_bare_json_passes_through_keeping_nothing_and_garbage_is_refused(keyring: KeyRing) -> None:
    receipt_json = orjson.dumps(_receipt(keyring))
    assert compact.decode(receipt_json) == receipt_json
    assert compact.kept(receipt_json) is None, "a bare JSON record (a test's or a preload's) keeps no attestation"
    receipt = _receipt(keyring)
    stored = compact.encode(receipt, orjson.dumps(receipt), KEPT)
    assert compact.is_compact(stored)
    other = _receipt(keyring)
    as_json = compact.encode(receipt, orjson.dumps(other), KEPT)
    assert compact.decode(as_json) == orjson.dumps(other), "JSON that is not the receipt's"
    unlogged = compact.encode(receipt, orjson.dumps(receipt), compact.Kept(KEPT.signature, None))
    for broken in (stored[:-1], stored + b"x", stored[:40], unlogged[:-1], as_json[:50]):
        with pytest.raises(ValueError, match="not a stored receipt"):
            compact.decode(broken)
    with pytest.raises(ValueError, match="64 bytes"):
        compact.encode(receipt, orjson.dumps(receipt), compact.Kept(b"short", None))


@given(st.binary(min_size=16, max_size=16))
def test_ulid_bytes_round_trip(raw: bytes) -> None:
    text = ulid_from_bytes(raw)
    assert len(text) == 26 and set(text) <= set(CROCKFORD) and text[0] in "01234567"
    assert ulid_to_bytes(text) == raw


def test_ulid_bytes_keep_the_ids_order() -> None:
    ids = sorted(new_receipt_id(new_project_id(), ms)[5:] for ms in (0, 1, 2**20, 2**40, MAX_MS) for _ in range(5))
    assert sorted(ids, key=ulid_to_bytes) == ids
