"""What a command-line argument names: a file, standard input (``-``) or a receipt id.

An argument that is not an existing file is a receipt id only when it has a receipt id's
shape (``rcpt_`` and 26 Crockford base32 characters); anything else is "no such file"
(``InvalidInput``, exit 2) and nothing goes to the network, so a mistyped file name never
reaches a service's access log.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from execution_proof.receipts.errors import InvalidInput

RECEIPT_ID_SHAPE = re.compile(r"rcpt_[0-9A-HJKMNP-TV-Z]{26}")
"""A receipt id's shape (receipts/ids.py makes them; a real one also starts with 0-7)."""

Kind = Literal["stdin", "file", "receipt_id"]


def classify(argument: str) -> Kind:
    """``stdin`` for ``-``, ``file`` for an existing path, ``receipt_id`` for an argument
    shaped like one; ``InvalidInput`` ("no such file") for anything else."""
    if argument == "-":
        return "stdin"
    if os.path.exists(argument):
        return "file"
    if RECEIPT_ID_SHAPE.fullmatch(argument):
        return "receipt_id"
    raise InvalidInput(f"{argument}: no such file (and not a receipt id: rcpt_ and 26 characters)")
