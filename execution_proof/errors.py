"""``Error``, the root of every exception this package defines (``execution_proof.Error``).

It stands alone on the lowest floor so that every layer, the transparency log's core included,
derives its errors from it without importing anything else of the package.
"""

from __future__ import annotations


class Error(Exception):
    """The root of every exception this package defines (docs/python-api.md, "Errors"): ``except
    execution_proof.Error`` catches whatever the library raises on purpose."""
