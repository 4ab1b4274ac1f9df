"""The ``s3://BUCKET/PREFIX`` log store: S3-compatible object storage (AWS S3, Tigris on
Fly.io, Cloudflare R2, MinIO), the same names as the other backends under ``PREFIX/`` (or
at the bucket's root when there is no prefix). docs/s3.md says how to configure it and what
the tests prove.

The client is obstore (Rust's ``object_store``), chosen on the figures in bench/RESULTS.md
("S3 clients"): one distribution, the fastest import, the least CPU per request. Its
synchronous calls run in a pool of threads (the GIL is released while Rust waits on the
network), never on the event loop. Not its async calls: those finish on a Rust thread that
takes the GIL back after waking the event loop, and when the interpreter is exiting by then
the process aborts (SIGABRT; up to 3 exits in 10 in our runs: bench/RESULTS.md, "S3 clients").

- ``read``: GetObject; the version is the ETag; 404 is "no object".
- ``write``: one PutObject (never multipart: a single PUT appears whole or not at all; S3
  acknowledges it once it is stored durably).
- ``create``: PutObject with ``If-None-Match: *``; ``replace``: PutObject with ``If-Match:
  <ETag>``. The store decides, atomically: this is the log's compare-and-swap.
- ``delete``: DeleteObject (S3 answers the same when there is nothing to delete).
- ``names``: ListObjectsV2 with the prefix and ``StartAfter``, page after page, in the
  bytewise (UTF-8 binary) order S3 lists keys in.

Configuration comes from the environment, read when the store is opened: ``AWS_ENDPOINT_URL``
(unset: AWS itself; ``AWS_ENDPOINT_URL_S3``, the S3-only form that ``fly storage create`` sets
and every AWS SDK prefers, wins when both are set), ``AWS_REGION`` (default ``us-east-1``),
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (both required). Any failure the
library's retries did not overcome is a ``LogStoreError`` naming the store and the object;
credentials never appear in it. A call whose caller is cancelled still runs to its end in
its thread (bounded by the timeouts): the write it carried may land.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, NoReturn, ParamSpec, TypeVar

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
from obstore.store import S3Store

from execution_proof.kv.logstore.objects import Blob, LogStoreError, ObjectStore

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

DEFAULT_REGION = "us-east-1"
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0
MAX_RETRIES = 5
RETRY_TIMEOUT_S = 60.0
CREATE_ATTEMPTS = 5
CREATE_BACKOFF_S = 0.05
MESSAGE_CHARS = 300
THREADS = 16
"""Calls in flight at once, for every s3:// store of the process: the integrator writes a
batch's tiles side by side; more would only queue at the store."""
P = ParamSpec("P")
T = TypeVar("T")

# Threads start when first needed; the interpreter joins them at exit, after the calls they
# run have ended (each bounded by the timeouts).
_POOL = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="logstore-s3")


class S3Objects(ObjectStore):
    """Objects in ``bucket`` under ``prefix`` ("" for the bucket's root).

    ``LogStoreError`` at once when a credential variable is missing or the endpoint is not an
    http(s) URL; nothing is sent until the first call. ``request_timeout_s``,
    ``max_retries`` and ``retry_timeout_s`` bound how long one call may take (the defaults
    ride out a blip of a minute; tests that aim at a dead endpoint lower them)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_retries: int = MAX_RETRIES,
        retry_timeout_s: float = RETRY_TIMEOUT_S,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        missing = [name for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(name)]
        if missing:
            raise LogStoreError(f"log store {self.url}: set {' and '.join(missing)}")
        access_key = os.environ["AWS_ACCESS_KEY_ID"]
        secret_key = os.environ["AWS_SECRET_ACCESS_KEY"]
        # Kept only to strike them from any message the library might echo.
        self._secrets = (secret_key, access_key)
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        if endpoint is not None and not endpoint.startswith(("https://", "http://")):
            raise LogStoreError(f"log store {self.url}: the endpoint {endpoint!r} is not an http(s) URL")
        self.endpoint = endpoint
        client: ClientConfig = {
            # Plain HTTP only when the endpoint says so (a local emulator): never by default.
            "allow_http": bool(endpoint and endpoint.startswith("http://")),
            "connect_timeout": timedelta(seconds=min(CONNECT_TIMEOUT_S, request_timeout_s)),
            "timeout": timedelta(seconds=request_timeout_s),
        }
        retry: RetryConfig = {"max_retries": max_retries, "retry_timeout": timedelta(seconds=retry_timeout_s)}
        config: S3Config = {
            "region": os.environ.get("AWS_REGION") or DEFAULT_REGION,
            "access_key_id": access_key,
            "secret_access_key": secret_key,
            # Named although it is the library's default, so that an AWS_CONDITIONAL_PUT
            # left in the environment cannot turn off the log's compare-and-swap.
            "conditional_put": "etag",
        }
        if endpoint:
            config["endpoint"] = endpoint
        try:
            self._store = S3Store(
                bucket, prefix=self.prefix or None, config=config, client_options=client, retry_config=retry
            )
        except (BaseError, ValueError) as exc:
            self._fail("opening", "", exc)

    # -- the interface (each call runs in a thread of the pool)

    async def read(self, name: str) -> Blob | None:
        return await self._run("reading", name, self._read, name)

    async def write(self, name: str, data: bytes) -> None:
        await self._run("writing", name, self._write, name, data)

    async def create(self, name: str, data: bytes) -> bool:
        """False only when the object exists. A refusal is checked with a HEAD: S3 also
        refuses (409 ConditionalRequestConflict, which the library reports as "already
        exists") while another conditional write to the name is in flight, and that one may
        still fail; saying False then would make the log read back nothing where it expects
        an object (kv/logstore/log.py would halt on a conflict that is not one). So an absent
        object after a refusal is tried again, a few times, then a ``LogStoreError``."""
        return await self._run("creating", name, self._create, name, data)

    async def replace(self, name: str, data: bytes, version: str) -> str | None:
        """None when the ETag is no longer ``version`` (412), the object is gone (404), or
        another conditional write kept conflicting (409, after the library's retries):
        callers re-read and try again, so the last is safe to report as a change."""
        return await self._run("replacing", name, self._replace, name, data, version)

    async def delete(self, name: str) -> None:
        await self._run("deleting", name, self._delete, name)

    async def names(self, prefix: str, after: str = "", limit: int | None = None) -> list[str]:
        return await self._run("listing", prefix or "(all)", self._names, prefix, after, limit)

    async def _run(self, doing: str, name: str, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(func, *args, **kwargs))
        except (BaseError, OSError, ValueError) as exc:
            self._fail(doing, name, exc)

    def _fail(self, doing: str, name: str, exc: BaseException) -> NoReturn:
        """A ``LogStoreError`` naming the store, the object and the library's first line."""
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        for secret in self._secrets:
            if secret:
                detail = detail.replace(secret, "[redacted]")
        where = f" {name}" if name else ""
        raise LogStoreError(
            f"log store {self.url}: {doing}{where}: {type(exc).__name__}: {detail[:MESSAGE_CHARS]}"
        ) from exc

    # -- blocking work

    def _read(self, name: str) -> Blob | None:
        _check(name)
        try:
            result = obstore.get(self._store, name)
            data = bytes(result.bytes())
        except FileNotFoundError:
            return None
        return Blob(data, self._etag(result.meta.get("e_tag"), name))

    def _write(self, name: str, data: bytes) -> None:
        _check(name)
        obstore.put(self._store, name, data, mode="overwrite", use_multipart=False)

    def _create(self, name: str, data: bytes) -> bool:
        _check(name)
        for attempt in range(CREATE_ATTEMPTS):
            try:
                obstore.put(self._store, name, data, mode="create", use_multipart=False)
                return True
            except AlreadyExistsError:
                if self._exists(name):
                    return False
            time.sleep(CREATE_BACKOFF_S * 2**attempt)  # in a pool thread, not on the event loop
        raise LogStoreError(f"log store {self.url}: creating {name}: refused, yet there is no such object")

    def _replace(self, name: str, data: bytes, version: str) -> str | None:
        _check(name)
        try:
            result = obstore.put(self._store, name, data, mode={"e_tag": version}, use_multipart=False)
        except (PreconditionError, AlreadyExistsError, FileNotFoundError):
            return None
        return self._etag(result.get("e_tag"), name)

    def _delete(self, name: str) -> None:
        _check(name)
        try:
            obstore.delete(self._store, name)
        except FileNotFoundError:
            return  # some S3-compatible stores answer 404 where S3 answers 204

    def _exists(self, name: str) -> bool:
        try:
            obstore.head(self._store, name)
        except FileNotFoundError:
            return False
        return True

    def _names(self, prefix: str, after: str, limit: int | None) -> list[str]:
        # The library lists by path segments ("a/b" lists "a/b/..."); the interface's prefix
        # is any string. So list the segment the prefix ends in and keep what starts with it:
        # in sorted order those names are contiguous, so the first one past them ends it.
        found: list[str] = []
        if limit is not None and limit <= 0:
            return found
        directory = prefix.rpartition("/")[0]
        # ``after`` goes as StartAfter (the library puts the store's prefix before it).
        stream = obstore.list(self._store, directory or None, offset=after or None, chunk_size=min(limit or 1000, 1000))
        for batch in stream:
            for meta in batch:
                name = meta["path"]
                if not name.startswith(prefix):
                    if name > prefix:
                        return found
                    continue
                if name <= after:
                    continue
                found.append(name)
                if limit is not None and len(found) >= limit:
                    return found
        return found

    def _etag(self, value: str | None, name: str) -> str:
        if not value:
            raise LogStoreError(f"log store {self.url}: {name}: the store answered without an ETag")
        return value


def _check(name: str) -> None:
    """The names every backend accepts: relative, ``/``-separated, no empty, ``.`` or ``..``
    part (kv/logstore/files.py refuses the same; the library would rewrite some of them)."""
    if not name or name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        raise LogStoreError(f"log store: {name!r} is not an object name")
