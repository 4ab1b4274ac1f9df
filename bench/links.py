"""The store's command mix through each Redis client, over TCP, TLS and a Unix socket.

    python -m bench.links [--seconds 5] [--tasks 32] [--extra-site DIR]

Starts one redis-server per connection kind (TLS with a test CA and a client certificate,
made by ``openssl``; ``appendfsync always`` for all three, as production runs), then, for each
kind and client in turn, runs ``--tasks`` concurrent tasks that each repeat one
"operation": an ``EVALSHA`` of a small script that writes (as the issue script does) followed
by an ``HMGET`` (a key lookup). Prints operations per second and the p50/p99 latency of an
operation. Clients: ``FastLink`` (kv/link.py), redis-py's blocking pool (the service's
fallback), and coredis and valkey-glide when importable. Neither is a dependency of the
service: install them elsewhere (``pip install --target DIR coredis valkey-glide``) and name
the directory with ``--extra-site`` (appended to ``sys.path``, after the service's own
packages). docs/redis.md ("The connection") holds the figures and the choice made from them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from execution_proof.kv.link import FastLink, LuaScript

# The tests' servers and certificates (tests/redis_endpoints.py), loaded by name: the tests
# are outside the packages mypy checks, and an import statement would pull them in.
endpoints_module = importlib.import_module("tests.redis_endpoints")
KINDS = endpoints_module.KINDS

SCRIPT = "redis.call('HINCRBY', KEYS[1], 'n', 1) return redis.call('HGET', KEYS[1], 'n')"
AOF_ALWAYS = ["--appendonly", "yes", "--appendfsync", "always"]

Operation = Callable[[int], Awaitable[Any]]


def ssl_context(certificates: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certificates.ca))
    context.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
    return context


@contextlib.asynccontextmanager
async def fastlink(endpoint: Any) -> AsyncIterator[Operation]:
    client = aioredis.from_url(endpoint.url())
    link = FastLink.for_client(client)
    assert link is not None
    script = LuaScript.register(client, SCRIPT)

    async def operation(task: int) -> Any:
        await link.run_script(script, [f"bench:{task}"], [])
        return await link.send("HMGET", f"bench:{task}", "n", "missing")

    try:
        yield operation
    finally:
        await link.close()
        await client.aclose()


@contextlib.asynccontextmanager
async def redis_py_pool(endpoint: Any) -> AsyncIterator[Operation]:
    pool = aioredis.BlockingConnectionPool.from_url(endpoint.url(), max_connections=64, timeout=5)
    client = aioredis.Redis(connection_pool=pool)
    script = client.register_script(SCRIPT)

    async def operation(task: int) -> Any:
        await script(keys=[f"bench:{task}"])
        return await client.hmget(f"bench:{task}", ["n", "missing"])

    try:
        yield operation
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def coredis_client(endpoint: Any) -> AsyncIterator[Operation]:
    coredis = importlib.import_module("coredis")  # not a dependency: see the module's description

    kwargs: dict[str, Any] = {}
    if endpoint.kind == "unix":
        kwargs["unix_socket_path"] = endpoint.unix_path
    else:
        kwargs |= {"host": "127.0.0.1", "port": endpoint.server.port}
    if endpoint.kind == "tls":
        assert endpoint.certificates is not None
        kwargs["ssl_context"] = ssl_context(endpoint.certificates)
    async with coredis.Redis(**kwargs) as client:
        sha = await client.script_load(SCRIPT)

        async def operation(task: int) -> Any:
            await client.evalsha(sha, keys=[f"bench:{task}"])
            return await client.hmget(f"bench:{task}", ["n", "missing"])

        yield operation


@contextlib.asynccontextmanager
async def glide_client(endpoint: Any) -> AsyncIterator[Operation]:
    glide = importlib.import_module("glide")  # not a dependency: see the module's description
    if endpoint.kind == "unix":
        raise NotImplementedError("valkey-glide connects to host:port only (no Unix sockets)")
    advanced = None
    if endpoint.kind == "tls":
        assert endpoint.certificates is not None
        advanced = glide.AdvancedGlideClientConfiguration(
            tls_config=glide.TlsAdvancedConfiguration(
                root_pem_cacerts=endpoint.certificates.ca.read_bytes(),
                client_cert_path=str(endpoint.certificates.client_cert),
                client_key_path=str(endpoint.certificates.client_key),
            )
        )
    config = glide.GlideClientConfiguration(
        [glide.NodeAddress("127.0.0.1", endpoint.server.port)],
        use_tls=endpoint.kind == "tls",
        advanced_config=advanced,
    )
    client = await glide.GlideClient.create(config)
    sha = await client.custom_command(["SCRIPT", "LOAD", SCRIPT])

    async def operation(task: int) -> Any:
        await client.custom_command(["EVALSHA", sha, "1", f"bench:{task}"])
        return await client.custom_command(["HMGET", f"bench:{task}", "n", "missing"])

    try:
        yield operation
    finally:
        await client.close()


CLIENTS: dict[str, Callable[[Any], contextlib.AbstractAsyncContextManager[Operation]]] = {
    "FastLink": fastlink,
    "redis-py pool": redis_py_pool,
    "coredis": coredis_client,
    "valkey-glide": glide_client,
}


async def measure(operation: Operation, tasks: int, seconds: float) -> tuple[float, float, float]:
    """Operations per second, p50 and p99 in milliseconds, after a one-second warm-up."""
    latencies: list[float] = []
    recording = False
    stop_at = time.monotonic() + 1 + seconds

    async def worker(task: int) -> None:
        while (now := time.monotonic()) < stop_at:
            await operation(task)
            if recording:
                latencies.append(time.monotonic() - now)

    runner = asyncio.gather(*(worker(task) for task in range(tasks)))
    await asyncio.sleep(1)
    recording, started = True, time.monotonic()
    await runner
    elapsed = time.monotonic() - started
    quantiles = statistics.quantiles(latencies, n=100)
    return len(latencies) / elapsed, quantiles[49] * 1000, quantiles[98] * 1000


async def run(endpoints: dict[str, Any], tasks: int, seconds: float) -> None:
    print("| client | connection | ops/s | p50 ms | p99 ms |\n|---|---|---:|---:|---:|")
    for kind, endpoint in endpoints.items():
        for name, factory in CLIENTS.items():
            try:
                async with factory(endpoint) as operation:
                    rate, p50, p99 = await measure(operation, tasks, seconds)
            except (ImportError, NotImplementedError) as exc:
                print(f"| {name} | {kind} | - | - | - | <!-- {exc} -->")
                continue
            print(f"| {name} | {kind} | {rate:,.0f} | {p50:.2f} | {p99:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--extra-site", action="append", default=[], help="a directory with coredis / valkey-glide")
    parser.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=True)
    options = parser.parse_args()
    sys.path.extend(options.extra_site)
    certificates = endpoints_module.make_certificates(Path(tempfile.mkdtemp(prefix="eps-links-")) / "tls")
    endpoints = {kind: endpoints_module.Endpoint(kind, certificates) for kind in KINDS}
    try:
        for endpoint in endpoints.values():
            endpoint.server.extra += AOF_ALWAYS
            endpoint.start()
        if options.uvloop:
            import uvloop

            uvloop.run(run(endpoints, options.tasks, options.seconds))
        else:
            asyncio.run(run(endpoints, options.tasks, options.seconds))
    finally:
        for endpoint in endpoints.values():
            endpoint.cleanup()


if __name__ == "__main__":
    main()
