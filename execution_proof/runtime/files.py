"""The one atomic file write of every process (the witness's state, the client's receipts,
bundles and trust roots): a temporary file of a unique name in the same folder, fsynced,
renamed over the target, the folder fsynced; on any failure the temporary file is removed
and the target is what it was. (The ``file://`` log store has its own: its temporary files
live under ``.state/tmp/`` and create-only names are hard-linked, kv/logstore/files.py.)"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """``data`` at ``path``, whole or not at all, with ``mode``. ``OSError`` if it cannot be
    written."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems cannot fsync a folder; the rename stands
            os.fsync(directory)
    finally:
        os.close(directory)
