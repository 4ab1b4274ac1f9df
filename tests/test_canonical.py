"""receipts/canonical.py: the orjson fast path writes exactly rfc8785's bytes, or steps aside.

The signed bytes of every receipt come from ``canonical_bytes``: a difference from RFC 8785
would make receipts that no other verifier accepts. hypothesis generates JSON values of every
kind a receipt or a verified bundle can hold, and more (floats, big integers, astral and
surrogate characters, deep nesting); for each, ``canonical_bytes`` must equal
``rfc8785.dumps`` or raise what it raises.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_proof.receipts import canonical
from execution_proof.receipts.canonical import MAX_SAFE_INTEGER, canonical_bytes

KEYS = st.one_of(
    st.text(max_size=8),
    st.text(alphabet=st.characters(min_codepoint=0xE000, max_codepoint=0x1F64F), max_size=3),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.text(),
    st.text(alphabet=st.characters(max_codepoint=0x7F)),
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(KEYS, children, max_size=6),
    max_leaves=40,
)


def outcome(function: Any, value: Any) -> tuple[str, Any]:
    try:
        return "bytes", function(value)
    except Exception as exc:  # the same failure counts as the same outcome
        return "raises", type(exc)


@settings(max_examples=3000 * settings.default.max_examples // 100, deadline=None)
@given(VALUES)
def test_canonical_bytes_equal_rfc8785_for_every_generated_value(value: Any) -> None:
    assert outcome(canonical_bytes, value) == outcome(rfc8785.dumps, value)


BMP_TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), min_size=1, max_size=64)
"""Tag keys without surrogate pairs: astral keys are valid but take rfc8785 (next test)."""
RECEIPT_LIKE = st.fixed_dictionaries(
    {
        "receipt_id": st.text(min_size=1, max_size=40),
        "project_id": st.text(min_size=1, max_size=40),
        "created_at": st.text(max_size=30),
        "input_hash": st.one_of(st.none(), st.text(max_size=71)),
        "prev_receipt_hash": st.one_of(st.none(), st.text(max_size=71)),
        "tags": st.one_of(st.none(), st.dictionaries(BMP_TEXT, st.text(min_size=1), max_size=16)),
        "seq": st.integers(min_value=0, max_value=MAX_SAFE_INTEGER),
    }
)


@settings(max_examples=2000 * settings.default.max_examples // 100, deadline=None)
@given(RECEIPT_LIKE)
def test_receipt_shaped_values_take_the_fast_path_and_match(value: dict[str, Any]) -> None:
    """Receipts are what the service signs: they must be written by orjson, and correctly."""
    with mock.patch.object(canonical.rfc8785, "dumps", side_effect=AssertionError("fell back")):
        fast = canonical_bytes(value)
    assert fast == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        {"a": 0.1},
        2**53,
        -(2**53),
        {"\ue000": 1, "\U0001f600": 2},  # UTF-16 order differs from code-point order
        "lone \ud800 surrogate",
        [
            [
                [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                        1
                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            ]
        ],
        {1: "non-string key"},
        ("tuple",),
    ],
)
def test_values_outside_the_fast_path_go_to_rfc8785(value: Any) -> None:
    calls = []
    original = rfc8785.dumps

    def spy(arg: Any) -> bytes:
        calls.append(arg)
        return original(arg)

    with mock.patch.object(canonical.rfc8785, "dumps", side_effect=spy):
        result = outcome(canonical_bytes, value)
    assert calls, "rfc8785 decided"
    assert result == outcome(rfc8785.dumps, value)


def test_deep_nesting_is_not_a_recursion_error() -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    kind, _ = outcome(canonical_bytes, deep)
    assert kind == outcome(rfc8785.dumps, deep)[0]
    assert orjson.dumps([[1]]) == canonical_bytes([[1]])
