"""Redis servers of every connection kind the service supports, started on loopback.

``tcp`` (``redis://``), ``tls`` (``rediss://`` with a throwaway CA and server certificate made
by openssl, the CA passed in the URL), ``unix`` (``unix:///path?db=0``) and ``cluster`` (three
``--cluster-enabled`` masters joined by ``redis-cli --cluster create``, plus a separate plain
Redis for the job queue). Every server runs the production durability setting unless told
otherwise: ``appendonly yes`` + ``appendfsync always``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis

from bench.procs import HarnessError, Proc, base_env, free_port, pinned

KINDS = ("tls", "tcp", "unix", "cluster")
KIND_TITLES = {
    "tls": "TLS (`rediss://`)",
    "tcp": "plain TCP (`redis://`)",
    "unix": "Unix socket (`unix://`)",
    "cluster": "3-master cluster (`redis://`, REDIS_CLUSTER=true)",
}
READY_TIMEOUT_S = 20.0
CLUSTER_CREATE_TIMEOUT_S = 30.0


@dataclass
class RedisKind:
    """One running Redis of a kind, as the service is configured for it."""

    kind: str
    url: str
    procs: list[Proc] = field(default_factory=list)
    cluster: bool = False
    jobs_url: str | None = None
    admin_urls: list[str] = field(default_factory=list)
    """Plain URLs of every data node, for INFO and CONFIG (the same as ``url`` unless clustered)."""

    def service_env(self) -> dict[str, str]:
        env = {"REDIS_URL": self.url}
        if self.cluster:
            env["REDIS_CLUSTER"] = "true"
        if self.jobs_url:
            env["JOBS_REDIS_URL"] = self.jobs_url
        return env

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise HarnessError(f"{name} is not installed (apt-get install redis-server redis-tools)")
    return found


def persistence(aof_always: bool) -> list[str]:
    return ["--appendonly", "yes", "--appendfsync", "always"] if aof_always else ["--appendonly", "no"]


def _server(
    tmp: Path, name: str, listen: list[str], extra: list[str], cpus: str | None, aof_always: bool
) -> tuple[Proc, Path]:
    data = tmp / name
    data.mkdir()
    cmd = [
        _binary("redis-server"), *listen, "--dir", str(data), "--save", "", *persistence(aof_always),
        "--maxmemory-policy", "noeviction", "--logfile", str(data / "redis.log"), *extra,
    ]  # fmt: skip
    return Proc.start(name, pinned(cmd, cpus), env=base_env(), log_path=tmp / f"{name}.stdout"), data


def _wait_ping(proc: Proc, client: redis.Redis) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with client:
        while True:
            with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                if client.ping():
                    return
            if not proc.alive() or time.monotonic() > deadline:
                raise HarnessError(f"{proc.name} did not start:\n{proc.tail()}\n{_log(proc)}")
            time.sleep(0.05)


def _log(proc: Proc) -> str:
    path = proc.log_path.parent / proc.name / "redis.log"
    return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def start_tcp(tmp: Path, cpus: str | None, aof_always: bool, name: str = "redis-tcp") -> RedisKind:
    port = free_port()
    proc, _ = _server(tmp, name, ["--port", str(port), "--bind", "127.0.0.1"], [], cpus, aof_always)
    _wait_ping(proc, redis.Redis(port=port, socket_connect_timeout=0.2))
    url = f"redis://127.0.0.1:{port}/0"
    return RedisKind("tcp", url, [proc], admin_urls=[url])


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603, S607
    if done.returncode != 0:
        raise HarnessError(f"openssl {' '.join(args[:2])} failed: {done.stderr[-1000:]}")


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it:
    (ca.crt, server.crt, server.key)."""
    directory.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=eps-bench-ca", cwd=directory)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost", cwd=directory)  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "san.ext", cwd=directory)  # fmt: skip
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


def start_tls(tmp: Path, cpus: str | None, aof_always: bool) -> RedisKind:
    ca, cert, key = make_certificates(tmp / "tls")
    port = free_port()
    tls = [
        "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "no",
    ]  # fmt: skip
    listen = ["--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    proc, _ = _server(tmp, "redis-tls", listen, tls, cpus, aof_always)
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={quote(str(ca))}&ssl_cert_reqs=required"
    _wait_ping(proc, redis.Redis.from_url(url, socket_connect_timeout=0.5))
    return RedisKind("tls", url, [proc], admin_urls=[url])


def start_unix(tmp: Path, cpus: str | None, aof_always: bool) -> RedisKind:
    path = tmp / "redis.sock"
    listen = ["--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700"]
    proc, _ = _server(tmp, "redis-unix", listen, [], cpus, aof_always)
    url = f"unix://{path}?db=0"
    _wait_ping(proc, redis.Redis(unix_socket_path=str(path), socket_connect_timeout=0.2))
    return RedisKind("unix", url, [proc], admin_urls=[url])


def start_cluster(tmp: Path, cpus: str | None, aof_always: bool, masters: int = 3) -> RedisKind:
    procs: list[Proc] = []
    ports: list[int] = []
    try:
        for number in range(masters):
            port = free_port()
            data = tmp / f"redis-node{number}"
            extra = [
                "--cluster-enabled", "yes", "--cluster-config-file", str(data / "nodes.conf"),
                "--cluster-node-timeout", "5000", "--cluster-port", str(free_port()),
            ]  # fmt: skip
            proc, _ = _server(
                tmp, f"redis-node{number}", ["--port", str(port), "--bind", "127.0.0.1"], extra, cpus, aof_always
            )
            procs.append(proc)
            _wait_ping(proc, redis.Redis(port=port, socket_connect_timeout=0.2))
            ports.append(port)
        done = subprocess.run(  # noqa: S603
            [_binary("redis-cli"), "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=CLUSTER_CREATE_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise HarnessError(f"redis-cli --cluster create failed: {done.stdout[-1000:]} {done.stderr[-1000:]}")
        _wait_cluster(ports, masters)
        jobs = start_tcp(tmp, cpus, aof_always, name="redis-jobs")
        procs += jobs.procs
    except BaseException:
        for proc in reversed(procs):
            proc.stop()
        raise
    urls = [f"redis://127.0.0.1:{p}/0" for p in ports]
    return RedisKind(
        "cluster", f"redis://127.0.0.1:{ports[0]}", procs, cluster=True, jobs_url=jobs.url, admin_urls=urls
    )


def _wait_cluster(ports: list[int], masters: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = set(ports)
    while pending:
        for port in sorted(pending):
            with redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1) as client:
                info = client.cluster("info")
            if (
                info.get("cluster_state") == "ok"
                and int(info.get("cluster_slots_ok", 0)) == 16384
                and int(info.get("cluster_known_nodes", 0)) == masters
            ):
                pending.discard(port)
        if pending and time.monotonic() > deadline:
            raise HarnessError(f"cluster not ready on ports {sorted(pending)} after {READY_TIMEOUT_S:.0f} s")
        if pending:
            time.sleep(0.05)


def start_kind(kind: str, tmp: Path, cpus: str | None, aof_always: bool) -> RedisKind:
    starters = {"tcp": start_tcp, "tls": start_tls, "unix": start_unix, "cluster": start_cluster}
    return starters[kind](tmp, cpus, aof_always)
