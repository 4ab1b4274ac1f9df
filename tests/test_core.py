"""The pure core: chain placement, ids, key sets and tags (the content scan: test_content_scan.py)."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_proof.receipts.apikeys import hash_api_key, is_plausible_key, new_api_key
from execution_proof.receipts.errors import BadRequest
from execution_proof.receipts.ids import RECEIPT_ID_RE, new_project_id, new_receipt_id, new_ulid
from execution_proof.receipts.model import format_created_at, parse_tags, place_in_chain
from execution_proof.receipts.signing import KeySetError, load_key_ring, new_key_set
from tests.conftest import hash_of

TIP, OTHER = hash_of("tip"), hash_of("other")


def test_chain_placement_rules() -> None:
    first = place_in_chain(None, None)
    assert (first.chain_status, first.prev_receipt_hash, first.expected_prev_receipt_hash, first.advances_tip) == (
        "main",
        None,
        None,
        True,
    )
    omitted = place_in_chain(None, TIP)
    assert (omitted.chain_status, omitted.prev_receipt_hash, omitted.advances_tip) == ("main", TIP, True)
    equal = place_in_chain(TIP, TIP)
    assert (equal.chain_status, equal.prev_receipt_hash, equal.advances_tip) == ("main", TIP, True)
    different = place_in_chain(OTHER, TIP)
    assert (different.chain_status, different.prev_receipt_hash, different.expected_prev_receipt_hash) == (
        "branch",
        OTHER,
        TIP,
    )
    assert not different.advances_tip
    no_tip = place_in_chain(OTHER, None)
    assert no_tip.chain_status == "branch" and not no_tip.advances_tip


def test_ids_are_time_sortable_and_well_formed() -> None:
    project = new_project_id()
    ids = [new_receipt_id(project, ms) for ms in (1_000, 2_000, 3_000, 1_700_000_000_000)]
    assert ids == sorted(ids)
    assert all(RECEIPT_ID_RE.fullmatch(i) for i in ids)
    assert len({new_ulid() for _ in range(1000)}) == 1000


def test_random_id_characters_are_uniform_and_keep_the_slot_tag() -> None:
    """Every Crockford character stands for exactly 8 of the 256 byte values (5 uniform bits),
    and a receipt id starts its random part with its project's slot tag."""
    from collections import Counter

    from execution_proof.receipts.ids import CROCKFORD, RANDOM_CHAR_OF_BYTE, receipt_slot_tag, slot_tag

    counts = Counter(bytes(range(256)).translate(RANDOM_CHAR_OF_BYTE).decode("ascii"))
    assert set(counts) == set(CROCKFORD) and set(counts.values()) == {8}
    project = new_project_id()
    receipt_ids = [new_receipt_id(project) for _ in range(200)]
    assert {receipt_slot_tag(i) for i in receipt_ids} == {slot_tag(project)}
    assert all(RECEIPT_ID_RE.fullmatch(i) for i in receipt_ids)
    assert len({i[-12:] for i in receipt_ids}) == 200, "60 random bits: no repeats in 200"


def test_id_time_characters_and_the_random_pool() -> None:
    """The time characters are cached per millisecond and the random bytes come from a pool:
    neither may change an id's meaning, and a forked child never repeats its parent's bytes."""
    import os
    import random

    from execution_proof.receipts import ids as ids_module

    def reference(ms: int) -> str:
        return "".join(ids_module.CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10)))

    for ms in [0, 1, 31, 32, 2**48 - 1, *(random.randrange(2**48) for _ in range(2000))]:
        assert new_ulid(ms)[:10] == reference(ms)
        assert new_ulid(ms)[:10] == reference(ms)  # the cached answer
    # More ids than one pool holds: still unique, still well formed.
    many = [new_ulid(5) for _ in range(3 * ids_module._POOL_SIZE // 16)]
    assert len(set(many)) == len(many)
    read, write = os.pipe()
    new_ulid()  # the parent's pool is filled
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.write(write, "".join(new_ulid(7) for _ in range(8)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.close(write)
    parent = "".join(new_ulid(7) for _ in range(8))
    assert len(child) == len(parent) == 8 * 26
    assert child != parent, "the child drew the parent's pooled bytes"


def test_created_at_format() -> None:
    assert format_created_at(0) == "1970-01-01T00:00:00.000Z"
    assert format_created_at(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"


def test_api_keys() -> None:
    key = new_api_key()
    assert re.fullmatch(r"eps_[A-Za-z0-9_-]{43}", key)
    assert hash_api_key(key).startswith("sha256:") and key not in hash_api_key(key)
    assert is_plausible_key("x" * 16) and is_plausible_key("x" * 256)
    assert not is_plausible_key("x" * 15) and not is_plausible_key("x" * 257)


def test_key_set_errors_name_the_problem_without_the_key() -> None:
    good = new_key_set("k1")
    secret = good["keys"][0]["private_key_base64url"]
    cases = [
        ("not json", "valid JSON"),
        ({"keys": "x"}, "keys"),
        ({"keys": [{"kid": "a"}]}, "neither"),
        ({"keys": [{"kid": "a", "public_key_base64url": "AAAA"}]}, "32 bytes"),
        ({"keys": good["keys"] * 2}, "duplicate"),
        ({"active_kid": "zz", "keys": good["keys"]}, "not in keys"),
        (
            {
                "keys": [
                    {**good["keys"][0], "public_key_base64url": new_key_set("k2")["keys"][0]["public_key_base64url"]}
                ]
            },
            "match",
        ),
    ]
    for document, fragment in cases:
        with pytest.raises(KeySetError, match=fragment) as info:
            load_key_ring(orjson.dumps(document) if not isinstance(document, str) else document)
        assert secret not in str(info.value)


def test_tags_null_dropping() -> None:
    assert parse_tags({"a": None}) is None
    assert parse_tags({"a": "1", "b": None}) == {"a": "1"}
    assert parse_tags(None) is None
    with pytest.raises(BadRequest):
        parse_tags({"k": 1})


def test_signature_encoding_is_not_malleable(keyring: object) -> None:
    """Padding or a different last character that decodes to the same bytes must fail."""
    from execution_proof.receipts.encoding import b64url_decode
    from execution_proof.receipts.signing import KeyRing

    assert isinstance(keyring, KeyRing)
    receipt_hash = hash_of("receipt")
    signature = keyring.sign(receipt_hash)
    assert keyring.verify("test-2026", receipt_hash, signature)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    same_bytes = [
        signature[:-1] + c
        for c in alphabet
        if c != signature[-1] and alphabet.index(c) >> 4 == alphabet.index(signature[-1]) >> 4
    ]
    assert same_bytes, "the last of 86 characters carries 2 bits, so 15 other characters decode alike"
    for variant in [signature + "==", *same_bytes]:
        assert not keyring.verify("test-2026", receipt_hash, variant), variant
    with pytest.raises(ValueError, match="base64url"):
        b64url_decode(signature + "==")


@pytest.mark.parametrize(
    ("argv", "port"), [([], 8000), (["--port", "9123"], 9123), (["serve", "--port", "9124"], 9124)]
)
def test_bare_options_mean_serve_from_service_py(monkeypatch: pytest.MonkeyPatch, argv: list[str], port: int) -> None:
    """``python service.py`` (``default_verb="serve"``) serves with no verb; the installed
    command prints its usage instead (tests/test_cli_client.py)."""
    from execution_proof.cli import main as cli
    from execution_proof.cli import serve

    monkeypatch.delenv("PORT", raising=False)
    seen: list[int] = []

    def fake_serve(args: object) -> int:
        seen.append(getattr(args, "port", -1))
        return 0

    monkeypatch.setattr(serve, "serve", fake_serve)
    assert cli.main(argv, default_verb="serve") == 0
    assert seen == [port]


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4_102_444_800_000), min_size=1, max_size=20))
def test_cached_month_windows_and_timestamps_match_the_calendar(moments: list[int]) -> None:
    """month_window and format_created_at keep results between calls; in any order of
    instants (month ends included), they must give what the calendar says."""
    from datetime import UTC, datetime, timedelta

    from execution_proof.receipts.limits import month_window
    from execution_proof.receipts.model import format_created_at

    for ms in moments + [m - 1 for m in moments] + [m + 1 for m in moments]:
        if ms < 0:
            continue
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
        window = month_window(ms)
        first_next = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
        assert window.id == f"{moment.year:04d}{moment.month:02d}"
        assert window.ends_ms == int(first_next.timestamp() * 1000)
        assert format_created_at(ms) == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
