"""Where the transparency log lives (docs/log.md): ``LOG_STORE`` opened as one of three
backends behind one interface (kv/logstore/objects.py), and the log's typed view of it
(kv/logstore/log.py)."""

from __future__ import annotations

from urllib.parse import urlsplit

from execution_proof.kv.logstore.log import LogStore, LogStoreConflict
from execution_proof.kv.logstore.objects import LogStoreError, ObjectStore

__all__ = ["LogStore", "LogStoreConflict", "LogStoreError", "ObjectStore", "open_log_store", "open_objects"]


def open_objects(url: str) -> ObjectStore:
    """The backend ``url`` names: ``memory:``, ``file:///ABSOLUTE/PATH`` or
    ``s3://BUCKET/PREFIX`` (endpoint, region and credentials from ``AWS_ENDPOINT_URL``,
    ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``). ``LogStoreError``
    for anything else."""
    parts = urlsplit(url)
    if url == "memory:":
        from execution_proof.kv.logstore.memory import MemoryObjects

        return MemoryObjects()
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise LogStoreError(f"LOG_STORE {url!r}: a file store is file:///ABSOLUTE/PATH")
        from execution_proof.kv.logstore.files import FileObjects

        return FileObjects(parts.path.rstrip("/") or "/")
    if parts.scheme == "s3":
        if not parts.netloc or parts.query or parts.fragment:
            raise LogStoreError(f"LOG_STORE {url!r}: an object store is s3://BUCKET/PREFIX")
        from execution_proof.kv.logstore.s3 import S3Objects

        return S3Objects(parts.netloc, parts.path.strip("/"))
    raise LogStoreError(f"LOG_STORE {url!r}: use file:///ABSOLUTE/PATH or s3://BUCKET/PREFIX")


def open_log_store(url: str) -> LogStore:
    return LogStore(open_objects(url))
