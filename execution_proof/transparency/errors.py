"""``LogError``, the root of the transparency log's errors."""

from __future__ import annotations

from execution_proof.errors import Error


class LogError(Error):
    """The one root of the transparency log's errors, for code that checks or keeps a log:
    a proof, note, policy or time-stamp that does not hold, a tile that cannot be read, a log
    store that fails or is refused. Subclasses say which; none carries a public HTTP code (the
    routes wrap what they meet in a ``ServiceError``)."""
