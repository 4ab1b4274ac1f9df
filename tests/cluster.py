"""A real three-master Redis Cluster on loopback, for the cluster tests (docs/cluster.md).

``redis_cluster`` (session scope) starts three ``redis-server --cluster-enabled yes``
processes on free loopback ports, each in its own temporary directory, joins them with
``redis-cli --cluster create ... --cluster-replicas 0``, waits (bounded, polling) until
every node reports ``cluster_state:ok`` and agrees on the slot map, and stops and removes
everything afterwards. Without ``redis-server`` or ``redis-cli`` the tests skip (under
REQUIRE_REAL_SERVICES=1 they fail).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import RedisServer, free_port, missing_binary

MASTERS = 3
READY_TIMEOUT_S = 20.0
CREATE_TIMEOUT_S = 30.0
POLL_S = 0.05


class RedisClusterNodes:
    """Three cluster-enabled redis-server processes joined into one cluster (no replicas)."""

    def __init__(self, server_binary: str, cli_binary: str) -> None:
        self.cli_binary = cli_binary
        self.nodes: list[RedisServer] = []
        for _ in range(MASTERS):
            node = RedisServer(server_binary)
            node.extra = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"{node.dir}/nodes.conf",
                "--cluster-node-timeout", "5000",
                # The bus port defaults to port + 10000, which is past 65535 for a high free
                # port (redis-server then refuses to start): pick a free one explicitly.
                "--cluster-port", str(free_port()),
            ]  # fmt: skip
            self.nodes.append(node)

    @property
    def url(self) -> str:
        """``REDIS_URL`` for the service: any one node (the client discovers the others)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self) -> None:
        for node in self.nodes:
            node.start()  # bounded wait for PING inside
        addresses = [f"127.0.0.1:{port}" for port in self.ports]
        done = subprocess.run(
            [self.cli_binary, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            timeout=CREATE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout!r} {done.stderr!r}")
        self.wait_until_ready()

    def wait_until_ready(self) -> None:
        """Every node says ``cluster_state:ok`` and knows all 16384 slots, within READY_TIMEOUT_S."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = set(self.ports)
        while pending:
            for port in sorted(pending):
                with redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1) as client:
                    info = client.cluster("info")
                    ok = info.get("cluster_state") == "ok" and int(info.get("cluster_slots_ok", 0)) == 16384
                    known = int(info.get("cluster_known_nodes", 0)) == MASTERS
                if ok and known:
                    pending.discard(port)
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"cluster not ready on ports {sorted(pending)} after {READY_TIMEOUT_S}s")
            if pending:
                time.sleep(POLL_S)

    def client(self, port: int) -> redis.Redis:
        """A plain (non-cluster) connection to one node, for per-node checks."""
        return redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=5)

    def flushall(self) -> None:
        for port in self.ports:
            with self.client(port) as client:
                client.flushall()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if server is None:
        missing_binary("redis-server", "the store's cluster mode is proven on a real Redis Cluster")
    if cli is None:
        missing_binary("redis-cli", "the test cluster is created with redis-cli --cluster create")
    assert server is not None and cli is not None
    cluster = RedisClusterNodes(server, cli)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()
