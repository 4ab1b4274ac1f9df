"""The ``s3://`` log store (kv/logstore/s3.py) against a real S3 API: moto's server on a
loopback port (tests/moto_server.py), one process for the session.

``TestS3`` runs the backends' contract (tests/test_log_store.py) with a fresh prefix per test.
The rest: how names map under a prefix (nested, and none), the environment it is configured
from, what failures become (a dead or silent endpoint, unknown credentials: ``LogStoreError``,
quickly, no credential in the message), conditional writes raced from separate stores (each
its own connection pool), and, through another client (boto3), what moto itself checks of ``If-None-Match``
and ``If-Match`` (docs/s3.md, "What the tests prove and what they cannot").

Skipped when moto's server is not installed (``pip install 'moto[server]'``), a failure under
REQUIRE_REAL_SERVICES=1.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from execution_proof.kv.logstore import LogStore, LogStoreError, open_objects
from execution_proof.kv.logstore.log import Identity
from execution_proof.kv.logstore.objects import ObjectStore
from execution_proof.transparency import note, tlog
from tests.conftest import free_port, missing_binary
from tests.test_log_store import ObjectStoreContract

# A real S3 API (moto's server) started for the module: the inner loop proves the log store on
# a directory (tests/test_log_store.py), CI on both.
pytestmark = pytest.mark.slow

MOTO_SERVER = Path(__file__).with_name("moto_server.py")
BUCKET = "eps-log"
ACCESS_KEY = "AKIATESTLOGSTORE0001"
SECRET_KEY = "test-secret-never-in-a-message-0001"
READY_TIMEOUT_S = 30.0
# Variables the library would read by itself: cleared so this machine's environment cannot
# reach the tests (kv/logstore/s3.py names what it honours).
FOREIGN_VARIABLES = (
    "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_CONDITIONAL_PUT",
    "AWS_ALLOW_HTTP", "AWS_SKIP_SIGNATURE", "AWS_BUCKET", "AWS_BUCKET_NAME", "AWS_ENDPOINT", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
)  # fmt: skip


@dataclass
class MotoServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def create_bucket(self, name: str) -> None:
        """moto's server checks no signature unless told to: a bare PUT makes a bucket."""
        response = httpx.put(f"{self.endpoint}/{name}", timeout=10)
        assert response.status_code == 200, response.text

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_moto(extra_env: dict[str, str] | None = None) -> MotoServer:
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        missing_binary("moto[server]", "the s3:// log store is proven against a real S3 API")
    port = free_port()
    env = {**os.environ, **(extra_env or {})}
    process = subprocess.Popen(
        [sys.executable, str(MOTO_SERVER), str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = MotoServer(port, process)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            if httpx.get(f"{server.endpoint}/moto-api/", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"moto's server did not start on port {port}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto_checking_credentials() -> Iterator[MotoServer]:
    """A second server that checks every request's credentials (and knows none)."""
    server = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    yield server
    server.stop()


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, moto: MotoServer) -> MotoServer:
    """The four variables the store is configured from, pointing at the session's server."""
    for name in FOREIGN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    return moto


def fresh_prefix(kind: str) -> str:
    return f"{kind}/{uuid.uuid4().hex}"


def s3_client(server: MotoServer) -> Any:
    """Another S3 client, to look from outside: boto3 (moto needs it, so it is installed)."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )


def keys_in(server: MotoServer, bucket: str, prefix: str = "") -> list[str]:
    """The bucket's keys as S3 lists them, seen by another client."""
    keys: list[str] = []
    for page in s3_client(server).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


def s3_objects(prefix: str, bucket: str = BUCKET, **options: float) -> ObjectStore:
    from execution_proof.kv.logstore.s3 import S3Objects

    return S3Objects(bucket, prefix, **options)


class TestS3(ObjectStoreContract):
    @pytest.fixture
    async def objects(self, s3_env: MotoServer) -> AsyncIterator[ObjectStore]:
        store = s3_objects(fresh_prefix("contract"))
        yield store
        await store.close()

    async def test_any_string_is_a_prefix_not_only_whole_segments(self, objects: ObjectStore) -> None:
        """S3 lists by string prefix, the library by path segment: the store keeps the
        interface's meaning ("tile/0/00" matches "tile/0/001", not "tile/0/1")."""
        for name in ("tile/0/000", "tile/0/001", "tile/0/002.p/5", "tile/0/1", "tile/00", "tile/0a"):
            await objects.write(name, b"x")
        assert await objects.names("tile/0/00") == ["tile/0/000", "tile/0/001", "tile/0/002.p/5"]
        assert await objects.names("tile/0") == [
            "tile/0/000",
            "tile/0/001",
            "tile/0/002.p/5",
            "tile/0/1",
            "tile/00",
            "tile/0a",
        ]
        assert await objects.names("tile/0/00", after="tile/0/000", limit=1) == ["tile/0/001"]
        assert await objects.names("tile/0/00", limit=0) == []
        assert await objects.names("tile/0/000.") == []

    async def test_a_listing_goes_past_one_page(self, objects: ObjectStore) -> None:
        """ListObjectsV2 answers at most 1,000 keys a page: the store asks for the next."""
        names = [f"tile/entries/{n:04d}" for n in range(1100)]
        await asyncio.gather(*(objects.write(name, b"e") for name in names))
        assert await objects.names("tile/entries/") == names
        assert await objects.names("tile/entries/", after=names[1049], limit=3) == names[1050:1053]

    async def test_a_version_names_the_content(self, objects: ObjectStore) -> None:
        """moto's ETag (like S3's for a single unencrypted PUT) is the MD5 of the bytes, as the
        file store's version is their SHA-256: the same bytes again keep the version. The log
        never depends on it: it only ever compares a version it read with the current one."""
        await objects.write(".state/tree", b"same")
        first = await objects.read(".state/tree")
        assert first is not None
        assert await objects.replace(".state/tree", b"same", first.version) == first.version

    async def test_names_that_leave_the_prefix_are_refused(self, objects: ObjectStore) -> None:
        for bad in ("../escape", "/abs", "tile//0", "tile/./0", "", "tile/"):
            with pytest.raises(LogStoreError):
                await objects.write(bad, b"x")
            with pytest.raises(LogStoreError):
                await objects.read(bad)


# --------------------------------------------------------------------------- names and prefixes


async def test_names_live_under_a_nested_prefix_and_nowhere_else(s3_env: MotoServer) -> None:
    base = fresh_prefix("nested")
    store = s3_objects(f"{base}/log")
    sibling = s3_objects(f"{base}/log2")
    assert store.url == f"s3://{BUCKET}/{base}/log"
    await store.write("tile/0/000", b"t")
    await store.write(".state/tree", b"s")
    await sibling.write("checkpoint", b"c")
    assert keys_in(s3_env, BUCKET, base + "/") == [
        f"{base}/log/.state/tree",
        f"{base}/log/tile/0/000",
        f"{base}/log2/checkpoint",
    ]
    assert await store.names("") == [".state/tree", "tile/0/000"]
    assert await sibling.names("") == ["checkpoint"]
    assert await store.read("checkpoint") is None


async def test_an_empty_prefix_is_the_bucket_root(s3_env: MotoServer) -> None:
    bucket = f"root-{uuid.uuid4().hex[:12]}"
    s3_env.create_bucket(bucket)
    store = open_objects(f"s3://{bucket}")
    assert store.url == f"s3://{bucket}"
    await store.write("checkpoint", b"c")
    await store.write("tile/0/000", b"t")
    assert keys_in(s3_env, bucket) == ["checkpoint", "tile/0/000"]
    assert await store.names("") == ["checkpoint", "tile/0/000"]
    blob = await store.read("checkpoint")
    assert blob is not None and blob.data == b"c"


async def test_open_objects_reaches_the_store_end_to_end(s3_env: MotoServer) -> None:
    from execution_proof.kv.logstore.s3 import S3Objects

    prefix = fresh_prefix("url")
    objects = open_objects(f"s3://{BUCKET}/{prefix}/")
    assert isinstance(objects, S3Objects) and objects.url == f"s3://{BUCKET}/{prefix}"
    store = LogStore(objects)
    signer = note.Signer.generate("s3.example/v1/log")
    empty = note.sign_note(note.Checkpoint(signer.name, 0, tlog.EMPTY_ROOT).text(), signer).encode()
    assert await store.create_identity(Identity(signer.name, signer.verifier.encode()))
    await store.start_tree(empty)
    assert keys_in(s3_env, BUCKET, prefix) == [
        f"{prefix}/.state/identity",
        f"{prefix}/.state/tree",
        f"{prefix}/checkpoint",
    ]
    tree = await store.tree()
    assert tree is not None and (tree.size, tree.root) == (0, tlog.EMPTY_ROOT)
    assert await store.checkpoint() == empty


# --------------------------------------------------------------------------- configuration


async def test_aws_endpoint_url_s3_wins_over_aws_endpoint_url(
    s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fly storage create`` sets the S3-only variable; every AWS SDK prefers it, so do we."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env.endpoint)
    store = s3_objects(fresh_prefix("endpoint"), max_retries=0)
    await store.write("checkpoint", b"c")
    assert await store.names("") == ["checkpoint"]


@pytest.mark.parametrize("unset", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_a_missing_credential_is_refused_when_opened(
    s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch, unset: str
) -> None:
    monkeypatch.delenv(unset)
    with pytest.raises(LogStoreError, match=unset) as caught:
        open_objects(f"s3://{BUCKET}/x")
    assert ACCESS_KEY not in str(caught.value) and SECRET_KEY not in str(caught.value)


def test_an_endpoint_must_be_an_http_url(s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "fly.storage.tigris.dev")
    with pytest.raises(LogStoreError, match="not an http"):
        open_objects(f"s3://{BUCKET}/x")


# --------------------------------------------------------------------------- failures


def assert_names_the_store_not_the_secret(error: LogStoreError, store: ObjectStore, name: str) -> None:
    message = str(error)
    assert store.url in message and name in message
    assert SECRET_KEY not in message and ACCESS_KEY not in message


async def test_a_dead_endpoint_fails_fast_with_a_log_store_error(
    s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    store = s3_objects("dead", max_retries=1, request_timeout_s=2, retry_timeout_s=3)
    started = time.monotonic()
    for call in (store.read("checkpoint"), store.write("checkpoint", b"c"), store.create("checkpoint", b"c"),
                 store.replace("checkpoint", b"c", '"v"'), store.delete("checkpoint"), store.names("tile/")):  # fmt: skip
        with pytest.raises(LogStoreError) as caught:
            await call
        assert_names_the_store_not_the_secret(
            caught.value, store, "tile/" if "listing" in str(caught.value) else "checkpoint"
        )
    assert time.monotonic() - started < 30


async def test_a_silent_endpoint_times_out(s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that accepts the connection and never answers: the request timeout ends it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the backlog; nothing ever reads them
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        store = s3_objects("silent", max_retries=0, request_timeout_s=1, retry_timeout_s=1)
        started = time.monotonic()
        with pytest.raises(LogStoreError) as caught:
            await store.read(".state/tree")
        elapsed = time.monotonic() - started
    assert_names_the_store_not_the_secret(caught.value, store, ".state/tree")
    assert 0.9 <= elapsed < 10


async def test_unknown_credentials_are_a_log_store_error(
    s3_env: MotoServer, moto_checking_credentials: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_checking_credentials.endpoint)
    store = s3_objects("refused", max_retries=0)
    for call in (store.read(".state/tree"), store.write(".state/tree", b"t"), store.create(".state/tree", b"t")):
        with pytest.raises(LogStoreError, match="403") as caught:
            await call
        assert_names_the_store_not_the_secret(caught.value, store, ".state/tree")


async def test_a_create_refused_for_an_absent_object_is_tried_again(
    s3_env: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 answers 409 to a conditional write while another one to the name is in flight; the
    library calls that "already exists". moto never does, so a stand-in refuses the first
    attempts: the store checks, finds nothing, tries again, and answers False only once
    there is an object. Forever refused yet absent: a LogStoreError, not a False."""
    import obstore
    from obstore.exceptions import AlreadyExistsError

    import execution_proof.kv.logstore.s3 as s3

    real_put = obstore.put
    refusals = {"left": 2}

    def refusing_put(*args: object, **kwargs: object) -> object:
        if kwargs.get("mode") == "create" and refusals["left"] > 0:
            refusals["left"] -= 1
            raise AlreadyExistsError("409 Conflict: ConditionalRequestConflict (stand-in)")
        return real_put(*args, **kwargs)

    monkeypatch.setattr(s3.obstore, "put", refusing_put)
    store = s3_objects(fresh_prefix("conflict"))
    assert await store.create(".state/lease", b"mine") is True
    assert refusals["left"] == 0
    assert await store.create(".state/lease", b"other") is False  # a real 412 now: it exists

    refusals["left"] = s3.CREATE_ATTEMPTS
    with pytest.raises(LogStoreError, match="no such object"):
        await store.create(".state/halt", b"h")
    assert await store.read(".state/halt") is None


# --------------------------------------------------------------------------- races


async def test_of_racing_replaces_from_separate_stores_one_wins(s3_env: MotoServer) -> None:
    """Eight stores (eight connection pools, as eight processes would have) replace the same
    version, five rounds: one wins each round, and the object holds its bytes."""
    prefix = fresh_prefix("race-replace")
    stores = [s3_objects(prefix) for _ in range(8)]
    await stores[0].write(".state/tree", b"start")
    for round_ in range(5):
        current = await stores[0].read(".state/tree")
        assert current is not None
        results = await asyncio.gather(
            *(store.replace(".state/tree", f"{round_}:{n}".encode(), current.version) for n, store in enumerate(stores))
        )
        winners = [n for n, version in enumerate(results) if version is not None]
        assert len(winners) == 1
        blob = await stores[0].read(".state/tree")
        assert blob is not None and blob.data == f"{round_}:{winners[0]}".encode()
        assert blob.version == results[winners[0]]


async def test_of_racing_creates_from_separate_stores_one_wins(s3_env: MotoServer) -> None:
    prefix = fresh_prefix("race-create")
    stores = [s3_objects(prefix) for _ in range(8)]
    for round_ in range(5):
        name = f".state/staging/{round_}"
        results = await asyncio.gather(*(store.create(name, f"{n}".encode()) for n, store in enumerate(stores)))
        assert sum(results) == 1
        blob = await stores[-1].read(name)
        assert blob is not None and blob.data == f"{results.index(True)}".encode()


# --------------------------------------------------------------------------- what moto checks


def put(server: MotoServer, key: str, body: bytes, **conditions: str) -> tuple[int, str, str]:
    """A PutObject from another client (boto3, the AWS SDK): what moto answers, whatever our
    client does. (Status, error code, ETag.)"""
    from botocore.exceptions import ClientError

    try:
        response = s3_client(server).put_object(Bucket=BUCKET, Key=key, Body=body, **conditions)
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"], ""
    return response["ResponseMetadata"]["HTTPStatusCode"], "", response["ETag"]


def body_of(server: MotoServer, key: str) -> bytes | None:
    from botocore.exceptions import ClientError

    try:
        return bytes(s3_client(server).get_object(Bucket=BUCKET, Key=key)["Body"].read())
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise


def test_moto_refuses_if_none_match_star_when_the_key_exists(moto: MotoServer) -> None:
    key = fresh_prefix("moto") + "/k"
    assert put(moto, key, b"first", IfNoneMatch="*")[0] == 200  # absent: created
    assert put(moto, key, b"second", IfNoneMatch="*")[:2] == (412, "PreconditionFailed")
    assert body_of(moto, key) == b"first"


def test_moto_refuses_if_match_with_a_stale_etag(moto: MotoServer) -> None:
    key = fresh_prefix("moto") + "/k"
    old = put(moto, key, b"one")[2]
    status, _, new = put(moto, key, b"two", IfMatch=old)
    assert status == 200 and new != old
    assert put(moto, key, b"three", IfMatch=old)[:2] == (412, "PreconditionFailed")
    assert body_of(moto, key) == b"two"


def test_moto_answers_if_match_on_a_missing_key_with_404(moto: MotoServer) -> None:
    """As S3 does (the library turns it into a precondition failure: replace says None)."""
    key = fresh_prefix("moto") + "/absent"
    assert put(moto, key, b"x", IfMatch='"0123456789abcdef0123456789abcdef"')[:2] == (404, "NoSuchKey")
    assert body_of(moto, key) is None
