"""The JSON shapes that cross the layers, typed: any JSON value, a JSON object, a receipt.

A value parsed from JSON whose shape is not known yet is a ``JSONValue`` and is narrowed where
it is read; a shape that is known gets a ``TypedDict``. ``ReceiptObject`` is the receipt object of
docs/receipt-format.md, "The receipt object": every key present, an absent optional value
``None``. A stored record or a receipt read back from a peer is checked before it is called one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias, TypedDict

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
JSONOut: TypeAlias = "str | int | float | bool | Sequence[JSONOut] | Mapping[str, JSONOut] | None"
"""A value that is only written out as JSON (an error's ``details``): read-only containers, so
a ``list[str]`` is one (``list`` is invariant, so it is not a ``list[JSONValue]``)."""


class ReceiptObject(TypedDict):
    """The signed receipt, in the order of docs/receipt-format.md's table."""

    receipt_id: str
    project_id: str
    actor_id: str
    created_at: str
    input_hash: str
    output_hash: str | None
    params_hash: str | None
    env_hash: str | None
    code_ref: str | None
    run_id: str | None
    tags: dict[str, str] | None
    receipt_kind: str | None
    status: str
    prev_receipt_hash: str | None
    receipt_hash: str
    signature: str
    sig_kid: str
    chain_status: str | None
    expected_prev_receipt_hash: str | None


ReceiptLike: TypeAlias = "ReceiptObject | Mapping[str, JSONValue]"
"""What hashing and the log entry read: a receipt this code built, or a receipt-shaped JSON
object read from outside and not checked yet (a ``ReceiptObject`` is not a ``Mapping[str, JSONValue]``
to a type checker, although every value of one is JSON)."""
