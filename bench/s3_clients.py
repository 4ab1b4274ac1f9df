"""Which client the ``s3://`` log store uses: ``python -m bench.s3_clients`` (about two minutes).

Every candidate importable here (``obstore``'s async calls; ``obstore-threads``, its
synchronous calls each in a thread, which is what kv/logstore/s3.py runs; ``aiobotocore``;
``boto3`` run in threads) is measured against one moto server (``python -m moto.server``)
on a free loopback port, started and stopped by this script; each client gets its own
bucket, so no client lists another's keys. The whole run is bounded by ``--deadline``
seconds; past it the run stops and says so. obstore and boto3 (moto's own dependency) come
with the test extra; aiobotocore is no dependency of the project: ``pip install aiobotocore``
to measure it, else it is left out, and the run says so.

1. Import time: in ``--imports`` fresh interpreters each, the median time to import the
   library, and to import it and build a client (no request sent: for botocore, loading the
   S3 service model).
2. Latency, one operation at a time (median, p99 and the client process's CPU time per
   operation, Rust threads included): a 32-byte GET, an 8 KiB PUT, a conditional create
   (``If-None-Match: *``, a new key each time), a conditional replace (``If-Match`` with
   the ETag the previous replace returned) and a listing of 1,000 keys (one ListObjectsV2
   page). ``--ops`` of each, ``--list-ops`` listings, in ``--rounds`` rounds with the
   clients' order rotated from round to round.

The server is moto, a single Python process: its own time per request (a millisecond or
more) is in every figure, so the differences between clients are what the clients add.

``python -m bench.s3_clients footprint VENV...``: for virtualenvs each made with only one
client installed (``python -m venv V && V/bin/pip install obstore``), the distributions it
pulled in and their installed size (from each distribution's RECORD; pip and setuptools left
out). Reads the directories, nothing else.

``python -m bench.s3_clients race``: is moto's own server (``python -m moto.server``, not the
one-request-at-a-time one the tests run) atomic in its conditional writes? ``--racers``
stores (kv/logstore/s3.py, each its own connections) replace the same version, and create the
same name, ``--race-rounds`` times; it counts rounds with other than one winner. The server's
GIL switch interval (``--switch-interval``, Python's default 0.005 s) sets how often its
request threads can interleave between a precondition check and the write.

Prints a markdown section (append it to bench/RESULTS.md) and a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from bench.procs import HarnessError, Proc, base_env, free_port, log, wait_http

CANDIDATES = ("obstore", "obstore-threads", "aiobotocore", "boto3")
MODULE = {"obstore": "obstore", "obstore-threads": "obstore", "aiobotocore": "aiobotocore", "boto3": "boto3"}
ACCESS_KEY = "bench"  # moto accepts any credentials; these are not secrets
SECRET_KEY = "bench-secret"  # noqa: S105 - a made-up key for a local emulator
REGION = "us-east-1"
LIST_KEYS = 1000
OPERATIONS = ("get 32 B", "put 8 KiB", "create (If-None-Match)", "replace (If-Match)", f"list {LIST_KEYS:,} keys")
LEFT_OUT = {"pip", "setuptools", "wheel"}


# --------------------------------------------------------------------------- the clients


class Client:
    """One library's way to do the five operations the log store needs."""

    name: str

    async def get(self, key: str) -> bytes:
        raise NotImplementedError

    async def put(self, key: str, data: bytes) -> str:
        raise NotImplementedError

    async def create(self, key: str, data: bytes) -> bool:
        raise NotImplementedError

    async def replace(self, key: str, data: bytes, etag: str) -> str | None:
        raise NotImplementedError

    async def count(self, prefix: str) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class ObstoreClient(Client):
    name = "obstore"

    def __init__(self, endpoint: str, bucket: str) -> None:
        import obstore
        from obstore.store import S3Store

        self._obstore = obstore
        self.store = S3Store(
            bucket,
            endpoint=endpoint,
            region=REGION,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            client_options={"allow_http": True, "timeout": timedelta(seconds=10)},
            retry_config={"max_retries": 1, "retry_timeout": timedelta(seconds=10)},
        )

    async def get(self, key: str) -> bytes:
        result = await self._obstore.get_async(self.store, key)
        return bytes(await result.bytes_async())

    async def put(self, key: str, data: bytes) -> str:
        return str((await self._obstore.put_async(self.store, key, data))["e_tag"])

    async def create(self, key: str, data: bytes) -> bool:
        from obstore.exceptions import AlreadyExistsError

        try:
            await self._obstore.put_async(self.store, key, data, mode="create")
        except AlreadyExistsError:
            return False
        return True

    async def replace(self, key: str, data: bytes, etag: str) -> str | None:
        from obstore.exceptions import PreconditionError

        try:
            result = await self._obstore.put_async(self.store, key, data, mode={"e_tag": etag})
        except PreconditionError:
            return None
        return str(result["e_tag"])

    async def count(self, prefix: str) -> int:
        total = 0
        async for batch in self._obstore.list(self.store, prefix):
            total += len(batch)
        return total


class ObstoreThreadsClient(ObstoreClient):
    """obstore's synchronous calls, each in a thread: what kv/logstore/s3.py does, because the
    library's async calls finish on a Rust thread that takes the GIL back after waking the
    event loop, and the process aborts when that happens while the interpreter exits."""

    name = "obstore-threads"

    def __init__(self, endpoint: str, bucket: str) -> None:
        super().__init__(endpoint, bucket)
        self.pool = ThreadPoolExecutor(16, thread_name_prefix="bench-obstore")

    async def _run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: func(*args, **kwargs))

    async def get(self, key: str) -> bytes:
        return bytes(await self._run(lambda: self._obstore.get(self.store, key).bytes()))

    async def put(self, key: str, data: bytes) -> str:
        return str((await self._run(self._obstore.put, self.store, key, data))["e_tag"])

    async def create(self, key: str, data: bytes) -> bool:
        from obstore.exceptions import AlreadyExistsError

        try:
            await self._run(self._obstore.put, self.store, key, data, mode="create")
        except AlreadyExistsError:
            return False
        return True

    async def replace(self, key: str, data: bytes, etag: str) -> str | None:
        from obstore.exceptions import PreconditionError

        try:
            result = await self._run(self._obstore.put, self.store, key, data, mode={"e_tag": etag})
        except PreconditionError:
            return None
        return str(result["e_tag"])

    async def count(self, prefix: str) -> int:
        return int(await self._run(lambda: sum(len(batch) for batch in self._obstore.list(self.store, prefix))))

    async def close(self) -> None:
        self.pool.shutdown()


class AiobotocoreClient(Client):
    name = "aiobotocore"

    def __init__(self, endpoint: str, bucket: str) -> None:
        self.endpoint = endpoint
        self.bucket = bucket
        self._stack = contextlib.AsyncExitStack()
        self.client: Any = None

    async def open(self) -> None:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session

        config = AioConfig(
            retries={"max_attempts": 2},
            connect_timeout=10,
            read_timeout=10,
            # botocore >= 1.36 adds CRC checksums to every PUT by default; the log store
            # would turn that off too (some S3-compatible stores refuse them).
            request_checksum_calculation="when_required",
        )
        self.client = await self._stack.enter_async_context(
            get_session().create_client(
                "s3",
                endpoint_url=self.endpoint,
                region_name=REGION,
                aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY,
                config=config,
            )
        )

    async def get(self, key: str) -> bytes:
        response = await self.client.get_object(Bucket=self.bucket, Key=key)
        async with response["Body"] as stream:
            return bytes(await stream.read())

    async def put(self, key: str, data: bytes) -> str:
        return str((await self.client.put_object(Bucket=self.bucket, Key=key, Body=data))["ETag"])

    async def create(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            await self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    async def replace(self, key: str, data: bytes, etag: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            response = await self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfMatch=etag)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict"):
                return None
            raise
        return str(response["ETag"])

    async def count(self, prefix: str) -> int:
        paginator = self.client.get_paginator("list_objects_v2")
        total = 0
        async for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            total += len(page.get("Contents", []))
        return total

    async def close(self) -> None:
        await self._stack.aclose()


class Boto3Client(Client):
    """boto3 is synchronous: every call runs in the default thread pool."""

    name = "boto3"

    def __init__(self, endpoint: str, bucket: str) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(
                retries={"max_attempts": 2},
                connect_timeout=10,
                read_timeout=10,
                request_checksum_calculation="when_required",
            ),
        )

    async def get(self, key: str) -> bytes:
        def call() -> bytes:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

        return await asyncio.to_thread(call)

    async def put(self, key: str, data: bytes) -> str:
        response = await asyncio.to_thread(self.client.put_object, Bucket=self.bucket, Key=key, Body=data)
        return str(response["ETag"])

    async def create(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            await asyncio.to_thread(self.client.put_object, Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    async def replace(self, key: str, data: bytes, etag: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            response = await asyncio.to_thread(
                self.client.put_object, Bucket=self.bucket, Key=key, Body=data, IfMatch=etag
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict"):
                return None
            raise
        return str(response["ETag"])

    async def count(self, prefix: str) -> int:
        def call() -> int:
            total = 0
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                total += len(page.get("Contents", []))
            return total

        return await asyncio.to_thread(call)


async def open_client(name: str, endpoint: str, bucket: str) -> Client:
    if name == "obstore":
        return ObstoreClient(endpoint, bucket)
    if name == "obstore-threads":
        return ObstoreThreadsClient(endpoint, bucket)
    if name == "aiobotocore":
        client = AiobotocoreClient(endpoint, bucket)
        await client.open()
        return client
    return Boto3Client(endpoint, bucket)


# --------------------------------------------------------------------------- import time

IMPORT_ONLY = {
    "obstore": "import obstore, obstore.store",
    "aiobotocore": "import aiobotocore.session, aiobotocore.config",
    "boto3": "import boto3",
}
WITH_CLIENT = {
    "obstore": (
        "import obstore, obstore.store\n"
        "obstore.store.S3Store('b', endpoint='http://127.0.0.1:9', region='us-east-1',"
        " access_key_id='k', secret_access_key='s', client_options={'allow_http': True})"
    ),
    "aiobotocore": (
        "import asyncio, aiobotocore.session\n"
        "async def main():\n"
        "    async with aiobotocore.session.get_session().create_client('s3', endpoint_url='http://127.0.0.1:9',"
        " region_name='us-east-1', aws_access_key_id='k', aws_secret_access_key='s'):\n"
        "        pass\n"
        "asyncio.run(main())"
    ),
    "boto3": (
        "import boto3\n"
        "boto3.client('s3', endpoint_url='http://127.0.0.1:9', region_name='us-east-1',"
        " aws_access_key_id='k', aws_secret_access_key='s')"
    ),
}
TIMED = "import time\n_t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)\n"


def import_seconds(code: str, runs: int) -> float:
    """Median wall time of ``code`` in ``runs`` fresh interpreters (compiled bytecode warm)."""
    times = []
    for _ in range(runs + 1):  # the first run also writes .pyc files: left out
        done = subprocess.run(  # noqa: S603 - our own interpreter and code
            [sys.executable, "-c", TIMED.format(code=code)], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise HarnessError(f"timing {code!r} failed:\n{done.stderr[-2000:]}")
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(times[1:])


# --------------------------------------------------------------------------- latency


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.seconds)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return {
            "n": len(ordered),
            "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": p99 * 1000,
            "cpu_us": statistics.mean(self.cpu) * 1e6,
        }


async def timed(samples: Samples, operation: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    cpu = time.process_time()
    start = time.perf_counter()
    result = await operation(*args)
    samples.seconds.append(time.perf_counter() - start)
    samples.cpu.append(time.process_time() - cpu)
    return result


@dataclass
class Run:
    client: Client
    samples: dict[str, Samples] = field(default_factory=lambda: {op: Samples() for op in OPERATIONS})
    etag: str = ""
    created: int = 0


async def prepare(run: Run) -> None:
    """The objects every operation needs: one to read, one to replace, 1,000 to list."""
    client = run.client
    await client.put("small", b"s" * 32)
    run.etag = await client.put(".state/tree", b"t" * 64)
    await asyncio.gather(*(client.put(f"list/{n:04d}", b"l") for n in range(LIST_KEYS)))
    assert await client.count("list/") == LIST_KEYS, f"{client.name} lists {LIST_KEYS:,} keys"
    for _ in range(5):  # warm the connection pool and the code paths, unrecorded
        await client.get("small")
        await client.put("warm", b"w")


async def one_round(run: Run, ops: int, list_ops: int) -> None:
    client = run.client
    s = run.samples
    page = b"p" * 8192
    for n in range(ops):
        assert await timed(s["get 32 B"], client.get, "small") == b"s" * 32
        await timed(s["put 8 KiB"], client.put, f"put/{n % 50:02d}", page)
        key = f"create/{run.created:06d}"
        run.created += 1
        assert await timed(s["create (If-None-Match)"], client.create, key, b"c") is True
        etag = await timed(s["replace (If-Match)"], client.replace, ".state/tree", b"r" * 64, run.etag)
        assert etag is not None, f"{client.name}: a replace with the current ETag was refused"
        run.etag = etag
    for _ in range(list_ops):
        assert await timed(s[f"list {LIST_KEYS:,} keys"], client.count, "list/") == LIST_KEYS
    # The conditional writes must also refuse: else the figures time something else.
    assert await client.create("create/000000", b"again") is False
    assert await client.replace(".state/tree", b"x", '"0123456789abcdef0123456789abcdef"') is None


def create_bucket(endpoint: str, bucket: str) -> None:
    """moto checks no signature: a bare PUT makes a bucket."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")  # noqa: S310 - http://127.0.0.1
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - http://127.0.0.1
        if response.status != 200:
            raise HarnessError(f"moto answered {response.status} to creating bucket {bucket}")


async def latency(endpoint: str, names: list[str], ops: int, list_ops: int, rounds: int) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for name in names:
        bucket = f"bench-{name}"
        create_bucket(endpoint, bucket)
        runs[name] = Run(await open_client(name, endpoint, bucket))
        log(f"{name}: writing {LIST_KEYS:,} keys to list")
        await prepare(runs[name])
    try:
        for number in range(rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            for name in order:
                log(f"round {number + 1}/{rounds}: {name}")
                share = ops // rounds + (1 if number < ops % rounds else 0)
                list_share = list_ops // rounds + (1 if number < list_ops % rounds else 0)
                await one_round(runs[name], share, list_share)
    finally:
        for run in runs.values():
            await run.client.close()
    return runs


# --------------------------------------------------------------------------- footprint


def footprint(venv: Path) -> dict[str, Any]:
    """The distributions in ``venv`` (pip and setuptools left out) and their installed bytes."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise HarnessError(f"{venv}: no lib/python3*/site-packages")
    site = found[0]
    dists = []
    total = 0
    for dist in metadata.distributions(path=[str(site)]):
        name = dist.metadata["Name"]
        if name.lower() in LEFT_OUT:
            continue
        size = 0
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        dists.append(f"{name} {dist.version}")
        total += size
    return {"venv": str(venv), "distributions": sorted(dists, key=str.lower), "bytes": total}


# --------------------------------------------------------------------------- report


def render(report: dict[str, Any]) -> str:
    lines = [
        f"## S3 clients for the `s3://` log store (`python -m bench.s3_clients`, {report['date']})",
        "",
        f"One moto {report['moto']} server on loopback (one Python process), each client on its own bucket; "
        f"Python {report['python']}, {report['machine']}. Operations one at a time: "
        f"{report['ops']} of each ({report['list_ops']} listings) in {report['rounds']} rounds, "
        "the clients' order rotated per round. CPU = the client process's CPU time per operation "
        "(all its threads). moto's own time per request is in every figure.",
        "",
        "| client | import | import + client | " + " | ".join(f"{op} p50 / p99 / CPU" for op in OPERATIONS) + " |",
        "|---|---:|---:|" + "---:|" * len(OPERATIONS),
    ]
    for name, result in report["clients"].items():
        cells = [f"{name} {result['version']}", f"{result['import_ms']:.0f} ms", f"{result['client_ms']:.0f} ms"]
        for op in OPERATIONS:
            figures = result["latency"][op]
            cells.append(f"{figures['p50_ms']:.2f} / {figures['p99_ms']:.2f} ms / {figures['cpu_us']:.0f} µs")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_footprint(results: list[dict[str, Any]]) -> str:
    lines = ["| virtualenv | distributions | installed |", "|---|---:|---:|"]
    for result in results:
        names = ", ".join(result["distributions"])
        lines.append(
            f"| {result['venv']} | {len(result['distributions'])} ({names}) | {result['bytes'] / 2**20:.1f} MiB |"
        )
    return "\n".join(lines)


async def race(endpoint: str, bucket: str, rounds: int, racers: int) -> dict[str, int]:
    """Rounds in which other than one of ``racers`` stores won a replace, and a create."""
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint, AWS_REGION=REGION, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY
    )
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)
    from execution_proof.kv.logstore.s3 import S3Objects

    stores = [S3Objects(bucket, "race") for _ in range(racers)]
    bad = {"replace": 0, "create": 0}
    for number in range(rounds):
        await stores[0].write("tree", f"start {number}".encode())
        current = await stores[0].read("tree")
        assert current is not None
        replaced = await asyncio.gather(
            *(s.replace("tree", f"{number} {n}".encode(), current.version) for n, s in enumerate(stores))
        )
        bad["replace"] += sum(version is not None for version in replaced) != 1
        created = await asyncio.gather(*(s.create(f"created/{number}", f"{n}".encode()) for n, s in enumerate(stores)))
        bad["create"] += sum(created) != 1
    return bad


def run_race(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    code = (
        f"import sys; sys.setswitchinterval({args.switch_interval!r}); "
        f"from moto.server import main; main(['-H', '127.0.0.1', '-p', '{port}'])"
    )
    with tempfile.TemporaryDirectory(prefix="eps-moto-") as tmp:
        server = Proc.start("moto", [sys.executable, "-c", code], env=base_env(), log_path=Path(tmp) / "moto.log")
        try:
            wait_http(server, f"{endpoint}/moto-api/", timeout=30)
            create_bucket(endpoint, "bench-race")
            started = time.monotonic()
            bad = asyncio.run(
                asyncio.wait_for(race(endpoint, "bench-race", args.race_rounds, args.racers), args.deadline)
            )
            seconds = time.monotonic() - started
        finally:
            server.stop()
    return {
        "moto": version_of("moto"),
        "switch_interval_s": args.switch_interval,
        "rounds": args.race_rounds,
        "racers": args.racers,
        "seconds": seconds,
        "replace_rounds_without_one_winner": bad["replace"],
        "create_rounds_without_one_winner": bad["create"],
    }


def render_race(result: dict[str, Any]) -> str:
    return (
        f"| moto {result['moto']}, switch interval {result['switch_interval_s']} s | {result['rounds']} rounds "
        f"of {result['racers']} racers | replace: {result['replace_rounds_without_one_winner']} rounds "
        f"without exactly one winner | create: {result['create_rounds_without_one_winner']} |"
    )


def version_of(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


async def measure(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="eps-moto-") as tmp:
        server = Proc.start(
            "moto",
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=base_env(),
            log_path=Path(tmp) / "moto.log",
        )
        try:
            wait_http(server, f"{endpoint}/moto-api/", timeout=30)
            runs = await latency(endpoint, names, args.ops, args.list_ops, args.rounds)
        finally:
            server.stop()
    clients: dict[str, Any] = {}
    imports: dict[str, tuple[float, float]] = {}
    for name in names:
        module = MODULE[name]
        if module not in imports:
            log(f"{module}: import time")
            imports[module] = (
                await asyncio.to_thread(import_seconds, IMPORT_ONLY[module], args.imports) * 1000,
                await asyncio.to_thread(import_seconds, WITH_CLIENT[module], args.imports) * 1000,
            )
        clients[name] = {
            "version": version_of(module),
            "import_ms": imports[module][0],
            "client_ms": imports[module][1],
            "latency": {op: samples.summary() for op, samples in runs[name].samples.items()},
        }
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}",
        "moto": version_of("moto"),
        "ops": args.ops,
        "list_ops": args.list_ops,
        "rounds": args.rounds,
        "clients": clients,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.s3_clients", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=300, help="operations of each kind per client (default 300)")
    parser.add_argument("--list-ops", type=int, default=60, help="listings of 1,000 keys per client (default 60)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--imports", type=int, default=7, help="fresh interpreters per import figure (default 7)")
    parser.add_argument("--deadline", type=float, default=600.0, help="stop after this many seconds (default 600)")
    parser.add_argument("--only", action="append", choices=CANDIDATES, help="measure only this client (repeatable)")
    parser.add_argument("--race-rounds", type=int, default=300)
    parser.add_argument("--racers", type=int, default=16)
    parser.add_argument("--switch-interval", type=float, default=0.005, help="moto's GIL switch interval (race)")
    parser.add_argument("footprint", nargs="*", help="'footprint VENV...' or 'race' (see above)")
    args = parser.parse_args(argv)

    if args.footprint == ["race"]:
        try:
            result = run_race(args)
        except TimeoutError:
            print(f"stopped: the run took longer than --deadline {args.deadline:.0f} s", file=sys.stderr)
            return 1
        print(render_race(result))
        print("BENCHJSON " + orjson.dumps(result).decode())
        return 0

    if args.footprint:
        if args.footprint[0] != "footprint" or len(args.footprint) < 2:
            parser.error("usage: python -m bench.s3_clients footprint VENV...")
        results = [footprint(Path(venv)) for venv in args.footprint[1:]]
        print(render_footprint(results))
        print("BENCHJSON " + orjson.dumps(results).decode())
        return 0

    if importlib.util.find_spec("moto") is None:
        print("moto is not installed: pip install 'moto[server]'", file=sys.stderr)
        return 2
    names = [name for name in (args.only or CANDIDATES) if importlib.util.find_spec(MODULE[name]) is not None]
    missing = sorted(set(args.only or CANDIDATES) - set(names))
    if missing:
        log(f"not installed, not measured: {', '.join(missing)}")
    if not names:
        return 2
    try:
        report = asyncio.run(asyncio.wait_for(measure(args, names), args.deadline))
    except TimeoutError:
        print(f"stopped: the run took longer than --deadline {args.deadline:.0f} s", file=sys.stderr)
        return 1
    print(render(report))
    print("BENCHJSON " + orjson.dumps(report).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
