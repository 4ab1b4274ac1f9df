"""The log store's backends keep one contract (kv/logstore/objects.py): whole objects,
conditional writes, sorted listing. ``ObjectStoreContract`` runs against each backend: memory
and a real directory here, S3-compatible storage in test_log_store_s3.py. The file backend's
own promises (atomic appearance, nothing partial left, the flock across processes) follow."""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof.kv.logstore import LogStoreError, open_objects
from execution_proof.kv.logstore.files import FileObjects
from execution_proof.kv.logstore.log import (
    UNREADABLE_HALT,
    Batch,
    CheckpointUnreadable,
    Identity,
    Lease,
    LogStore,
    LogStoreConflict,
    TileMismatch,
    TreeState,
    TreeUnreadable,
    size_name,
)
from execution_proof.kv.logstore.memory import MemoryObjects
from execution_proof.kv.logstore.objects import ObjectStore
from execution_proof.transparency import note, tlog


class ObjectStoreContract:
    """Subclasses provide the ``objects`` fixture (an empty store)."""

    async def test_a_written_object_reads_back_with_a_version(self, objects: ObjectStore) -> None:
        assert await objects.read("tile/0/000") is None
        await objects.write("tile/0/000", b"a" * 32)
        blob = await objects.read("tile/0/000")
        assert blob is not None and blob.data == b"a" * 32 and blob.version
        await objects.write("tile/0/000", b"b" * 32)
        again = await objects.read("tile/0/000")
        assert again is not None and again.data == b"b" * 32 and again.version != blob.version

    async def test_create_writes_only_when_there_is_nothing(self, objects: ObjectStore) -> None:
        assert await objects.create(".state/identity", b"first")
        assert not await objects.create(".state/identity", b"second")
        blob = await objects.read(".state/identity")
        assert blob is not None and blob.data == b"first"

    async def test_replace_needs_the_version_it_read(self, objects: ObjectStore) -> None:
        assert await objects.replace(".state/tree", b"x", "no-such-version") is None
        assert await objects.read(".state/tree") is None
        await objects.write(".state/tree", b"one")
        first = await objects.read(".state/tree")
        assert first is not None
        second_version = await objects.replace(".state/tree", b"two", first.version)
        assert second_version is not None
        assert await objects.replace(".state/tree", b"three", first.version) is None
        blob = await objects.read(".state/tree")
        assert blob is not None and blob.data == b"two" and blob.version == second_version

    async def test_only_one_of_racing_replaces_wins(self, objects: ObjectStore) -> None:
        await objects.write(".state/tree", b"0")
        start = await objects.read(".state/tree")
        assert start is not None
        results = await asyncio.gather(
            *(objects.replace(".state/tree", f"{n}".encode(), start.version) for n in range(1, 9))
        )
        winners = [n for n, version in enumerate(results, start=1) if version is not None]
        assert len(winners) == 1
        blob = await objects.read(".state/tree")
        assert blob is not None and blob.data == f"{winners[0]}".encode()

    async def test_only_one_of_racing_creates_wins(self, objects: ObjectStore) -> None:
        results = await asyncio.gather(*(objects.create(".state/lease", f"{n}".encode()) for n in range(8)))
        assert sum(results) == 1
        blob = await objects.read(".state/lease")
        assert blob is not None and blob.data == f"{results.index(True)}".encode()

    async def test_delete_removes_and_tolerates_absence(self, objects: ObjectStore) -> None:
        await objects.write(".state/halt", b"h")
        await objects.delete(".state/halt")
        assert await objects.read(".state/halt") is None
        await objects.delete(".state/halt")
        assert await objects.create(".state/halt", b"again")

    async def test_list_sorts_bytewise_and_starts_after(self, objects: ObjectStore) -> None:
        names = [
            "tile/0/000",
            "tile/0/000.p/7",
            "tile/0/000.p/12",
            "tile/0/001",
            "tile/1/000.p/1",
            "tile/entries/000",
            ".state/tree",
            "checkpoint",
        ]
        for name in names:
            await objects.write(name, b"x")
        assert await objects.names("") == sorted(names, key=str.encode)
        assert await objects.names("tile/0/000.p/") == ["tile/0/000.p/12", "tile/0/000.p/7"]
        assert await objects.names("tile/0/") == ["tile/0/000", "tile/0/000.p/12", "tile/0/000.p/7", "tile/0/001"]
        assert await objects.names("tile/", after="tile/0/001") == ["tile/1/000.p/1", "tile/entries/000"]
        assert await objects.names("tile/", after="tile/0/000.p/12", limit=2) == ["tile/0/000.p/7", "tile/0/001"]
        assert await objects.names("nothing/") == []

    async def test_sized_names_list_in_numeric_order(self, objects: ObjectStore) -> None:
        sizes = [0, 7, 999, 1000, 1001, 65536, 1234067, 2000, 10**12 + 5]
        for size in sizes:
            await objects.write(size_name(".state/timestamps/", size), b"r")
        listed = await objects.names(".state/timestamps/")
        assert listed == [size_name(".state/timestamps/", s) for s in sorted(sizes)]
        after = await objects.names(".state/timestamps/", after=size_name(".state/timestamps/", 1001), limit=2)
        assert after == [size_name(".state/timestamps/", 2000), size_name(".state/timestamps/", 65536)]

    async def test_the_typed_store_keeps_the_log_rules(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        assert await store.is_empty()
        signer = note.Signer.generate("contract.example/v1/log")
        empty = note.sign_note(note.Checkpoint(signer.name, 0, tlog.EMPTY_ROOT).text(), signer).encode()
        assert await store.create_identity(Identity(signer.name, signer.verifier.encode()))
        assert not await store.create_identity(Identity("another.example/log", "x"))
        assert await store.identity() == Identity(signer.name, signer.verifier.encode())
        assert await store.tree() is None  # a creation cut short here is finished by start_tree
        await store.start_tree(empty)
        await store.start_tree(empty)  # again: nothing changes
        assert not await store.is_empty()
        tree = await store.tree()
        assert tree is not None and (tree.size, tree.root, tree.staged) == (0, tlog.EMPTY_ROOT, None)

        # Staging is the compare-and-swap: one batch per tree state as read, whoever comes first.
        batch = Batch(0, tlog.EMPTY_ROOT, 2, b"t" * 32, 9, [b"e1\n", b"e2\n"])
        staged = await store.stage(tree, batch)
        assert staged is not None and staged.staged is not None and staged.staged.new_size == 2
        assert await store.stage(tree, Batch(0, tlog.EMPTY_ROOT, 1, b"u" * 32, 9, [b"other\n"])) is None
        assert await store.staging_names() == [staged.staged.name], "the loser's entries are removed again"
        assert await store.staged_batch(staged) == batch
        assert (await store.tree()) == staged
        advanced = await store.advance(staged)
        assert advanced is not None and (advanced.size, advanced.root, advanced.staged) == (2, b"t" * 32, None)
        assert await store.advance(staged) is None, "a stale read never advances"
        assert advanced.version not in (tree.version, staged.version)
        await store.unstage(staged.staged)
        assert await store.staging_names() == []

        # Every tile path, full or partial, is written once; the same bytes again are fine.
        full = b"\x01" * 8192
        await store.write_tile(0, 0, full[:64], 2)
        await store.write_tile(0, 0, full[:64], 2)
        with pytest.raises(TileMismatch):
            await store.write_tile(0, 0, b"\x02" * 64, 2)
        assert await store.fetch("tile/0/000.p/2") == full[:64]
        await store.write_tile(0, 0, full[:96], 3)
        await store.write_tile(0, 0, full, 256)
        assert await objects.names("tile/0/000.p/") == []  # partials go once the full tile is there
        await store.write_tile(0, 0, full, 256)  # the same bytes again: fine
        with pytest.raises(LogStoreConflict):
            await store.write_tile(0, 0, b"\x02" * 8192, 256)
        assert await store.fetch("tile/0/000") == full

    async def test_a_tree_state_never_repeats_its_version(self, objects: ObjectStore) -> None:
        """The same size and root written twice is two versions: a compare-and-swap from the
        first read fails after the second write, although the content says the same."""
        store = LogStore(objects)
        first = await store.replace_tree(None, TreeState(5, b"r" * 32, 1))
        assert first is not None
        second = await store.replace_tree(first, TreeState(5, b"r" * 32, 1))
        assert second is not None and second.version != first.version
        assert await store.replace_tree(first, TreeState(6, b"s" * 32, 1)) is None

    async def test_an_unreadable_checkpoint_is_replaced_only_when_asked(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        signer = note.Signer.generate("contract.example/v1/log")
        signed = note.sign_note(note.Checkpoint(signer.name, 3, b"r" * 32).text(), signer).encode()
        await objects.write("checkpoint", b"contract.example/v1/log\n3\n")  # truncated
        with pytest.raises(CheckpointUnreadable):
            await store.publish(signed)
        assert await store.checkpoint() == b"contract.example/v1/log\n3\n"
        assert await store.publish(signed, repair=True)
        assert await store.checkpoint() == signed

    async def test_the_public_checkpoint_never_goes_back(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        signer = note.Signer.generate("contract.example/v1/log")

        witness = note.Signer.generate("witness.example")

        def signed(size: int, cosigned: bool = False) -> bytes:
            text = note.Checkpoint(signer.name, size, bytes([size]) * 32).text()
            extra = witness.signature_line(text.encode()) if cosigned else ""
            return (note.sign_note(text, signer) + extra).encode()

        assert await store.publish(signed(5))
        assert await store.publish(signed(7))
        assert not await store.publish(signed(6))
        assert await store.checkpoint() == signed(7)
        cosigned = signed(7, cosigned=True)
        assert await store.publish(cosigned)  # the same tree with more signatures
        assert not await store.publish(signed(7))  # ... is not replaced by fewer
        assert await store.checkpoint() == cosigned

    async def test_the_lease_is_held_by_one_until_it_expires_or_is_dropped(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        assert (await store.lease("a", 60_000, deployment="blue")).held
        assert await store.lease("b", 60_000, deployment="green") == Lease(False, "blue")  # who holds it
        assert (await store.lease("a", 60_000, "keep", "blue")).held
        assert await store.lease("b", 60_000, "keep", "green") == Lease(False, "blue")
        await store.lease("a", 0, "drop")
        assert (await store.lease("b", 60_000, deployment="green")).held
        assert await store.lease("c", -1) == Lease(False, "green")
        assert (await store.lease("b", -1, "keep", "green")).held  # renewed into the past: expired at once
        assert (await store.lease("c", 60_000, deployment="green")).held
        blob = await objects.read(".state/lease")
        assert blob is not None and orjson.loads(blob.data)["deployment"] == "green"

    @pytest.mark.parametrize(
        "damaged",
        [b"", b'{"token": "a", "until', b"\x00\xff\xfe binary", b"[]", b"null", b'{"token": 7, "until_ms": 1}',
         b'{"token": "a", "until_ms": "later"}'],
    )  # fmt: skip
    async def test_a_lease_that_cannot_be_read_has_expired(self, objects: ObjectStore, damaged: bytes) -> None:
        """Any integrator takes an unreadable ``.state/lease`` (replacing those bytes by
        compare-and-swap); nobody is named as its holder, and nobody renews it."""
        store = LogStore(objects)
        await objects.write(".state/lease", damaged)
        assert await store.lease("a", 60_000, "keep", "blue") == Lease(False, None)
        assert await store.lease("b", 60_000, deployment="green") == Lease(True, None)
        blob = await objects.read(".state/lease")
        assert blob is not None and orjson.loads(blob.data)["token"] == "b"
        assert await store.lease("a", 60_000, deployment="blue") == Lease(False, "green")

    async def test_halt_and_resume(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        assert await store.halted() is None
        assert await store.resume("nothing to lift") is None
        assert await store.halt("witness w answered 422", {"witness": "w"})
        assert not await store.halt("again", {})
        halted = await store.halted()
        assert halted is not None and halted["reason"] == "witness w answered 422"
        assert await store.resume("checked: our own test witness") == halted
        assert await store.halted() is None
        assert len(await objects.names(".state/resumed/")) == 1

    @pytest.mark.parametrize(
        "damaged", [b"", b'{"reason": "witness w answered 4', b"\x00\xff\xfe binary", b"[]", b'{"at": 5}']
    )
    async def test_a_halt_record_that_cannot_be_read_is_still_a_halt(
        self, objects: ObjectStore, damaged: bytes
    ) -> None:
        """``.state/halt`` there is a halt whatever its bytes: its reason is "unreadable halt
        record", with what could be read of it; ``resume`` lifts it and keeps that under
        ``.state/resumed/``."""
        store = LogStore(objects)
        await objects.write(".state/halt", damaged)
        halted = await store.halted()
        assert halted == {"reason": UNREADABLE_HALT, "bytes": len(damaged), "text": damaged.decode(errors="replace")}
        assert not await store.halt("a witness answered 422", {})  # halted already
        assert await store.resume("looked: a damaged halt record") == halted
        assert await store.halted() is None
        [kept] = await objects.names(".state/resumed/")
        blob = await objects.read(kept)
        assert blob is not None and orjson.loads(blob.data)["halt"] == halted

    async def test_a_tree_state_that_cannot_be_read_says_so(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        await objects.write(".state/tree", b'{"size": 3, "ro')
        with pytest.raises(TreeUnreadable, match="cannot be read"):
            await store.tree()

    async def test_time_stamps_are_found_by_the_index_they_cover(self, objects: ObjectStore) -> None:
        store = LogStore(objects)
        assert await store.stamps_covering(0, 4) == []
        for size in (10, 300, 1200):
            await store.save_stamp(size, f"record {size}".encode())
        assert await store.stamps_covering(0, 1) == [(10, b"record 10")]
        assert await store.stamps_covering(9, 4) == [(10, b"record 10"), (300, b"record 300"), (1200, b"record 1200")]
        assert await store.stamps_covering(10, 4) == [(300, b"record 300"), (1200, b"record 1200")]
        assert await store.stamps_covering(1199, 4) == [(1200, b"record 1200")]
        assert await store.stamps_covering(1200, 4) == []
        assert await store.last_stamped() == 1200
        assert await store.stamp(300) == b"record 300"


class TestMemory(ObjectStoreContract):
    @pytest.fixture
    def objects(self) -> ObjectStore:
        return MemoryObjects()


class TestFiles(ObjectStoreContract):
    @pytest.fixture
    async def objects(self, tmp_path: Path) -> AsyncIterator[ObjectStore]:
        store = open_objects(f"file://{tmp_path}/log")
        yield store
        await store.close()


def test_urls_name_their_backend(tmp_path: Path) -> None:
    assert isinstance(open_objects("memory:"), MemoryObjects)
    files = open_objects(f"file://{tmp_path}")
    assert isinstance(files, FileObjects) and files.url == f"file://{tmp_path}"
    for bad in ("file://relative/path", "ftp://x/y", "redis://localhost", "s3:///no-bucket", "/plain/path"):
        with pytest.raises(LogStoreError):
            open_objects(bad)


async def test_files_appear_whole_and_nothing_partial_is_left(tmp_path: Path) -> None:
    objects = FileObjects(tmp_path)
    await objects.write("tile/0/x001/234", b"h" * 8192)
    assert (tmp_path / "tile/0/x001/234").read_bytes() == b"h" * 8192
    await objects.create(".state/identity", b"i")
    # Only the objects and the (empty) directory of temporary files: nothing half written.
    assert _files_under(tmp_path) == [".state/identity", "tile/0/x001/234"]
    assert (tmp_path / ".state/tmp").is_dir()


async def test_a_file_store_never_lists_its_own_files(tmp_path: Path) -> None:
    """The temporary files and the lock are the driver's, not log objects: no listing names
    them (so ``log export`` never copies them, and needs no names of this driver's)."""
    objects = FileObjects(tmp_path)
    await objects.write(".state/tree", b"t")
    written = await objects.read(".state/tree")
    assert written is not None
    assert await objects.replace(".state/tree", b"u", written.version) is not None  # takes the lock
    (tmp_path / ".state/tmp/left-by-a-writer-that-died").write_bytes(b"x")
    assert (tmp_path / ".state/lock").exists()
    assert await objects.names(".state/") == [".state/tree"]
    assert await objects.names("") == [".state/tree"]


def _files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_a_file_store_refuses_names_that_leave_it(tmp_path: Path) -> None:
    objects = FileObjects(tmp_path / "log")
    for bad in ("../escape", "/abs", "tile//0", "tile/./0", ""):
        with pytest.raises(LogStoreError):
            await objects.write(bad, b"x")
    assert not (tmp_path / "escape").exists()


def _race_replace(root: str, start: str, value: int, results: Any) -> None:
    objects = FileObjects(root)
    results.put((value, asyncio.run(objects.replace(".state/tree", str(value).encode(), start))))


def test_a_replace_is_won_by_one_process_of_many(tmp_path: Path) -> None:
    """The flock excludes other processes, not only other threads: eight processes try to
    replace the same version, one wins, and the file holds its bytes."""
    objects = FileObjects(tmp_path)
    asyncio.run(objects.write(".state/tree", b"start"))
    blob = asyncio.run(objects.read(".state/tree"))
    assert blob is not None
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [
        context.Process(target=_race_replace, args=(str(tmp_path), blob.version, n, results)) for n in range(8)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
    outcomes = [results.get(timeout=5) for _ in processes]
    winners = [value for value, version in outcomes if version is not None]
    assert len(winners) == 1
    assert (tmp_path / ".state/tree").read_bytes() == str(winners[0]).encode()


def test_a_process_forked_while_the_lock_is_held_does_not_keep_it(tmp_path: Path) -> None:
    """The worker forks (RQ's scheduler, a job's work horse) while its integrator thread may
    hold the store's lock. A flock belongs to the open file, which a forked child shares: a
    child that kept the descriptor would hold the lock for as long as it lives (the
    scheduler: as long as the worker), and every replace of every process would wait on it.
    The child closes the lock's descriptors it was forked with (as soon as it runs: the
    test polls), so the lock is free once the parent lets it go, long before the child ends."""

    objects = FileObjects(tmp_path)
    context = multiprocessing.get_context("fork")
    child = context.Process(target=time.sleep, args=(60,))
    with objects._locked():
        child.start()
    try:
        fd = os.open(tmp_path / ".state/lock", os.O_RDWR)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "the forked child still holds the lock"
                    time.sleep(0.01)
        finally:
            os.close(fd)
        assert child.is_alive()
    finally:
        child.kill()
        child.join(10)


async def test_a_file_store_serves_the_state_directory_as_its_own_files(tmp_path: Path) -> None:
    """What a static web server would see: the tree state is a plain JSON file."""
    store = LogStore(FileObjects(tmp_path))
    signer = note.Signer.generate("files.example/v1/log")
    await store.create_identity(Identity(signer.name, signer.verifier.encode()))
    await store.start_tree(note.sign_note(note.Checkpoint(signer.name, 0, tlog.EMPTY_ROOT).text(), signer).encode())
    state = TreeState.decode((tmp_path / ".state/tree").read_bytes(), "")
    assert (state.size, state.root) == (0, tlog.EMPTY_ROOT)
    assert (tmp_path / "checkpoint").read_text().startswith("files.example/v1/log\n0\n")
    assert os.stat(tmp_path / "checkpoint").st_size > 0


def test_the_log_settings_name_what_is_wrong() -> None:
    from execution_proof.runtime.settings import ConfigError, load_settings, require_log_store

    signer = note.Signer.generate("eps.example:8443/base/v1/log")
    base = {"PUBLIC_BASE_URL": "https://eps.example:8443/base/", "LOG_SIGNING_KEY": signer.encode()}
    # The origin defaults to the schema-less URL of the log's prefix; the tiles to the service's.
    settings = load_settings({**base, "REDIS_URL": "redis://r:6379", "LOG_STORE": "file:///srv/log"})
    assert settings.log_origin == "eps.example:8443/base/v1/log"
    assert settings.log_public_url == "https://eps.example:8443/base/v1/log/"
    assert settings.log_store == "file:///srv/log" and settings.log_max_pending == 100_000
    require_log_store(settings)
    assert load_settings({}).log_origin == "localhost/v1/log"
    assert load_settings({}).log_public_url is None  # /v1/log/ on the address asked
    # With REDIS_URL and a key but no store: the server and the worker refuse, naming it.
    with pytest.raises(ConfigError, match="LOG_STORE"):
        require_log_store(load_settings({**base, "REDIS_URL": "redis://r:6379"}))
    # A store kept across restarts with the demo's ephemeral key: refused, naming both.
    with pytest.raises(ConfigError, match=r"LOG_STORE.*LOG_SIGNING_KEY"):
        require_log_store(load_settings({"LOG_STORE": "file:///srv/log"}))
    for bad in ("/srv/log", "file://host/srv/log", "file:relative", "s3://", "redis://x", "s3://b/p?x=1"):
        with pytest.raises(ConfigError, match="LOG_STORE"):
            load_settings({**base, "REDIS_URL": "redis://r:6379", "LOG_STORE": bad})
    for bad in ("0", "-1", "many", "1.5"):
        with pytest.raises(ConfigError, match="LOG_MAX_PENDING"):
            load_settings({"LOG_MAX_PENDING": bad})
    assert load_settings({"LOG_MAX_PENDING": "5"}).log_max_pending == 5
    with pytest.raises(ConfigError, match="LOG_PUBLIC_URL"):
        load_settings({"LOG_PUBLIC_URL": "cdn.example/log"})
    assert load_settings({"LOG_PUBLIC_URL": "https://cdn.example/log"}).log_public_url == "https://cdn.example/log/"
