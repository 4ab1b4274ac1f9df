"""kv/link.py: the store's pipelined connection to Redis, on a real redis-server.

Each test states one promise of ``FastLink``: replies reach their own callers, commands of
one event-loop turn leave in one write, errors keep the reply order, a lost or silent
server fails the waiting commands with the errors the store maps to 503 and the next
command reconnects, and credentials and the database number are applied. Tests taking the
``endpoint`` fixture run over plain TCP, TLS (client certificates required, a CA made by the
test) and a Unix socket (tests/redis_endpoints.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.connection import SSLConnection
from redis.credentials import CredentialProvider

from execution_proof.kv.link import FastLink, LuaScript, PyLink, link_for
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import StoreUnavailable
from tests.conftest import RedisServer
from tests.redis_endpoints import KINDS, Certificates, Endpoint, endpoint_for, make_certificates

pytestmark = pytest.mark.real_redis


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def tls_endpoint(certificates: Certificates) -> Iterator[Endpoint]:
    endpoint = Endpoint("tls", certificates).start()
    yield endpoint
    endpoint.cleanup()


INNER_KINDS = [kind if kind == "tcp" else pytest.param(kind, marks=pytest.mark.slow) for kind in KINDS]
"""Every kind of connection; the inner loop runs TCP, ``slow`` adds TLS and a Unix socket."""


@pytest.fixture(scope="session")
def unix_endpoint() -> Iterator[Endpoint]:
    endpoint = Endpoint("unix").start()
    yield endpoint
    endpoint.cleanup()


@pytest.fixture(params=INNER_KINDS)
def endpoint(request: pytest.FixtureRequest) -> Endpoint:
    """The session's Redis over TCP, TLS or a Unix socket, emptied for this test."""
    endpoint = endpoint_for(request, request.param)
    with endpoint.admin() as admin:
        admin.flushall()
    return endpoint


@pytest.fixture(params=INNER_KINDS)
def own_endpoint(request: pytest.FixtureRequest, certificates: Certificates) -> Iterator[Endpoint]:
    """A redis-server of its own (the test stops, freezes or restarts it)."""
    endpoint = Endpoint(request.param, certificates).start()
    yield endpoint
    endpoint.cleanup()


def fast_link(url: str) -> FastLink:
    fast = FastLink.for_client(aioredis.from_url(url))
    assert fast is not None
    return fast


@pytest.fixture
async def link(endpoint: Endpoint) -> AsyncIterator[FastLink]:
    fast = fast_link(endpoint.url(socket_timeout="2"))
    assert fast.command_timeout_s == 2.0
    yield fast
    await fast.close()


class CountingTransport:
    """Wraps the link's transport to count writes."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def assert_store_unavailable(client: aioredis.Redis) -> None:
    """A store over ``client`` takes the fast link, and a read through it is a 503 (``StoreUnavailable``)."""
    store = Store(client)
    try:
        assert isinstance(store.link, FastLink)
        with pytest.raises(StoreUnavailable):
            await store.receipts.get_receipt_json("rcpt_x")
    finally:
        await store.close()


async def test_concurrent_commands_get_their_own_replies_and_leave_in_one_write(link: FastLink) -> None:
    await link.send("PING")  # connected
    protocol = link._protocol
    assert protocol is not None
    counting = CountingTransport(protocol.transport)
    protocol.transport = counting
    replies = await asyncio.gather(*(link.send("ECHO", f"value-{i}") for i in range(200)))
    assert replies == [f"value-{i}".encode() for i in range(200)]
    assert counting.writes == 1, "200 commands of one event-loop turn are one write"


class RecordingTransport(CountingTransport):
    """Also keeps what each write carried."""

    def __init__(self, transport: Any) -> None:
        super().__init__(transport)
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(bytes(data))
        super().write(data)


async def test_commands_sent_while_a_write_is_unanswered_leave_together_when_it_is_answered(link: FastLink) -> None:
    await link.send("PING")  # connected
    protocol = link._protocol
    assert protocol is not None
    recording = RecordingTransport(protocol.transport)
    protocol.transport = recording
    blocked = link.send("BLPOP", "empty-list", "0.2")  # the server holds its answer 0.2 s
    await asyncio.sleep(0)
    assert recording.writes == 1
    later = []
    for i in range(3):  # three event-loop turns: three writes without the hold
        later.append(link.send("ECHO", f"later-{i}"))
        await asyncio.sleep(0)
    assert recording.writes == 1, "nothing more leaves while the first write is unanswered"
    assert await blocked is None
    assert await asyncio.gather(*later) == [f"later-{i}".encode() for i in range(3)]
    assert recording.writes == 2
    assert all(f"later-{i}".encode() in recording.sent[1] for i in range(3)), "the three left in one write"


async def test_a_command_error_is_raised_to_its_caller_only(link: FastLink) -> None:
    await link.send("SET", "text", "not a number")
    before = link.send("SET", "a", 1)
    failing = link.send("INCR", "text")
    after = link.send("GET", "a")
    assert await before == b"OK"
    with pytest.raises(redis_errors.ResponseError, match="not an integer"):
        await failing
    assert await after == b"1", "the replies after an error stay in order"


async def test_a_script_unknown_to_the_server_is_loaded_and_run(link: FastLink, endpoint: Endpoint) -> None:
    script = LuaScript.register(aioredis.Redis(), "return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}")
    with endpoint.admin() as plain:
        plain.script_flush()
        assert plain.script_exists(script.sha) == [False]
        assert await link.run_script(script, ["counter"], ["arg"]) == [b"counter", b"arg", 1]
        assert plain.script_exists(script.sha) == [True]
    assert await link.run_script(script, ["counter"], ["again"]) == [b"counter", b"again", 2]


async def test_a_script_sent_ahead_is_loaded_when_awaited_and_dropped_quietly_when_not(
    link: FastLink, endpoint: Endpoint
) -> None:
    """``send_script`` sends EVALSHA at once; the await sends EVAL when the server does not
    know the script, and a script sent ahead that nobody awaits reports nothing."""
    script = LuaScript.register(aioredis.Redis(), "return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}")
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        with endpoint.admin() as plain:
            plain.script_flush()
            dropped = link.send_script(script, ["dropped"], ["arg"])  # NOSCRIPT, never awaited
            sent = link.send_script(script, ["counter"], ["arg"])
            assert await sent == [b"counter", b"arg", 1]
            assert plain.script_exists(script.sha) == [True]
        assert await link.send_script(script, ["counter"], ["again"]) == [b"counter", b"again", 2]
        del dropped
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert reported == []
    assert link.ordered and not PyLink(fakeredis.FakeAsyncRedis()).ordered


async def test_a_cancelled_caller_does_not_shift_the_replies(link: FastLink) -> None:
    await link.send("SET", "k", "v")
    abandoned = link.send("GET", "k")
    abandoned.cancel()
    assert await link.send("ECHO", "mine") == b"mine"
    assert await link.send("GET", "k") == b"v"


async def test_a_failed_first_command_whose_caller_left_is_not_an_unretrieved_error(link: FastLink) -> None:
    """The first command waits for the connection in a task of its own. When its caller is
    cancelled meanwhile (a client hung up) and the command then fails (here: a script Redis
    does not know), asyncio must not report "Task exception was never retrieved"."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        abandoned = link.send("EVALSHA", "0" * 40, 0)  # no connection yet: goes through a task
        abandoned.cancel()
        assert await link.send("ECHO", "after") == b"after"
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()  # the task is gone: an unretrieved exception is reported now
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert reported == []


async def test_a_killed_connection_fails_waiting_commands_and_the_next_one_reconnects(
    link: FastLink, endpoint: Endpoint
) -> None:
    await link.send("SET", "k", "v")
    with endpoint.admin() as plain:
        blocked = link.send("BLPOP", "never-filled", 0)  # waits in Redis until its connection dies
        await asyncio.sleep(0)  # let it leave
        await asyncio.sleep(0.05)
        assert plain.client_kill_filter(_type="normal", skipme=True) >= 1
    with pytest.raises(redis_errors.ConnectionError):
        await asyncio.wait_for(blocked, 5)
    assert await link.send("GET", "k") == b"v", "the next command opened a new connection"


async def test_a_connection_quiet_for_longer_than_the_health_interval_is_replaced(link: FastLink) -> None:
    """A connection idle past ``idle_reconnect_s`` may have been dropped silently: the next
    command goes out on a new one instead of waiting out the timeout on the old one."""
    assert await link.send("SET", "idle", "1") == b"OK"
    first = link._protocol
    assert first is not None
    assert await link.send("GET", "idle") == b"1"
    assert link._protocol is first, "a connection in use is kept"
    first.last_heard -= link.idle_reconnect_s + 1
    assert await link.send("GET", "idle") == b"1"
    assert link._protocol is not None and link._protocol is not first
    assert first.transport is None, "the old connection was closed"


async def test_a_server_that_does_not_answer_times_out_every_waiting_command() -> None:
    silent = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    fast = FastLink("127.0.0.1", port, command_timeout_s=0.3)
    try:
        results = await asyncio.gather(fast.send("GET", "a"), fast.send("GET", "b"), return_exceptions=True)
        assert all(isinstance(r, redis_errors.TimeoutError) for r in results), results
    finally:
        await fast.close()
        silent.close()
        await silent.wait_closed()


async def test_a_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fast = FastLink("127.0.0.1", port, connect_timeout_s=1.0)
    with pytest.raises(redis_errors.ConnectionError, match="cannot connect"):
        await fast.send("PING")


async def test_the_store_answers_503_when_its_link_cannot_reach_redis() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    await assert_store_unavailable(aioredis.from_url(f"redis://127.0.0.1:{port}/0", socket_connect_timeout=0.5))


async def test_username_password_and_database_are_applied(endpoint: Endpoint) -> None:
    with endpoint.admin() as admin:
        admin.acl_setuser("linktest", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
        try:
            fast = FastLink.for_client(aioredis.from_url(endpoint.url(db=5, userinfo="linktest:s3cret")))
            assert fast is not None
            await fast.send("SET", "in-db-5", "yes")
            await fast.close()
            with endpoint.admin(db=5) as in_5, endpoint.admin(db=0) as in_0:
                assert in_5.get("in-db-5") == b"yes"
                assert in_0.get("in-db-5") is None
            wrong = fast_link(endpoint.url(userinfo="linktest:wrong"))
            with pytest.raises(redis_errors.AuthenticationError):
                await wrong.send("PING")
            await assert_store_unavailable(aioredis.from_url(endpoint.url(userinfo="linktest:wrong")))
        finally:
            admin.acl_deluser("linktest")


class CountingCredentials(CredentialProvider):
    """Answers the ACL user's credentials and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def get_credentials(self) -> tuple[str, str]:
        self.asked += 1
        return ("linktest", "s3cret")

    async def get_credentials_async(self) -> tuple[str, str]:
        return self.get_credentials()


async def test_a_credential_provider_is_asked_at_every_connect(redis_url: str) -> None:
    provider = CountingCredentials()
    with redis.Redis.from_url(redis_url) as admin:
        admin.acl_setuser("linktest", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
        try:
            fast = FastLink.for_client(aioredis.Redis(port=port_of(redis_url), credential_provider=provider))
            assert fast is not None
            assert await fast.send("ACL", "WHOAMI") == b"linktest"
            assert provider.asked == 1
            assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
            with contextlib.suppress(redis_errors.ConnectionError):
                await fast.send("PING")  # may meet the closed connection first
            assert await fast.send("ACL", "WHOAMI") == b"linktest"
            assert provider.asked == 2, "the new connection asked again"
            await fast.close()
        finally:
            admin.acl_deluser("linktest")


def test_the_link_follows_the_store_from_one_event_loop_to_the_next(redis_url: str) -> None:
    fast = FastLink("127.0.0.1", port_of(redis_url))

    async def call(*args: Any) -> Any:
        return await fast.send(*args)

    assert asyncio.run(call("SET", "loop", "one")) == b"OK"
    assert asyncio.run(call("GET", "loop")) == b"one"


async def test_link_for_takes_the_fast_path_for_tcp_tls_and_unix_sockets(tmp_path: Any) -> None:
    assert isinstance(link_for(aioredis.from_url("redis://127.0.0.1:6399/0")), FastLink)
    assert isinstance(link_for(fakeredis.FakeAsyncRedis()), PyLink)
    unix = link_for(aioredis.from_url(f"unix://{tmp_path}/redis.sock?db=3"))
    assert isinstance(unix, FastLink) and unix.unix_path == f"{tmp_path}/redis.sock" and unix.db == 3
    tls = link_for(aioredis.from_url("rediss://127.0.0.1:6399/0"))
    assert isinstance(tls, FastLink) and tls.ssl_context is not None


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"ssl_cert_reqs": "none"},
        {"ssl_cert_reqs": "optional", "ssl_check_hostname": "false"},
        {
            "ssl_cert_reqs": "required",
            "ssl_check_hostname": "true",
            "ssl_min_version": str(int(ssl.TLSVersion.TLSv1_3)),
        },
        {"ssl_ciphers": "ECDHE+AESGCM", "ssl_ca_certs": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/c.key"},
    ],
)
def test_a_tls_links_context_is_the_one_redis_py_builds_from_the_same_url(query: dict[str, str]) -> None:
    url = "rediss://127.0.0.1:6399/0" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    pool = aioredis.from_url(url).connection_pool
    fast = FastLink.for_client(aioredis.Redis(connection_pool=pool))
    assert fast is not None and fast.ssl_context is not None
    theirs = SSLConnection(**pool.connection_kwargs).ssl_context
    for name in ("keyfile", "certfile", "cert_reqs", "ca_certs", "ca_data", "check_hostname", "min_version", "ciphers"):
        assert getattr(fast.ssl_context, name) == getattr(theirs, name), name


async def test_tls_with_an_unknown_ca_or_no_client_certificate_is_a_connection_error(
    tls_endpoint: Endpoint, certificates: Certificates
) -> None:
    for url in (
        tls_endpoint.url(ssl_ca_certs=str(certificates.other_ca)),  # the server's certificate is not trusted
        tls_endpoint.url(ssl_certfile="", ssl_keyfile=""),  # the server wants a client certificate
    ):
        fast = fast_link(url)
        with pytest.raises(redis_errors.ConnectionError):
            await fast.send("PING")
        await fast.close()
        await assert_store_unavailable(aioredis.from_url(url, socket_connect_timeout=1))
    # ssl_cert_reqs=none: no CA needed to reach it (the client certificate still is).
    trusting = fast_link(tls_endpoint.url(ssl_ca_certs="", ssl_cert_reqs="none"))
    assert await trusting.send("PING") == b"PONG"
    await trusting.close()


async def test_a_missing_unix_socket_is_a_connection_error(tmp_path: Path) -> None:
    fast = fast_link(f"unix://{tmp_path}/absent.sock")
    with pytest.raises(redis_errors.ConnectionError, match="cannot connect"):
        await fast.send("PING")


async def test_the_link_reconnects_after_the_server_restarts(own_endpoint: Endpoint) -> None:
    fast = fast_link(own_endpoint.url(socket_connect_timeout="1"))
    try:
        assert await fast.send("SET", "k", "v") == b"OK"
        own_endpoint.server.stop()
        with pytest.raises(redis_errors.ConnectionError):
            await fast.send("GET", "k")
        own_endpoint.server.start()
        assert await fast.send("PING") == b"PONG", "the next command opened a new connection"
    finally:
        await fast.close()


async def test_a_frozen_server_times_out_every_waiting_command(own_endpoint: Endpoint) -> None:
    fast = fast_link(own_endpoint.url(socket_timeout="0.3"))
    process = own_endpoint.server.process
    assert process is not None
    try:
        assert await fast.send("PING") == b"PONG"
        os.kill(process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            results = await asyncio.gather(fast.send("GET", "a"), fast.send("GET", "b"), return_exceptions=True)
            assert all(isinstance(r, redis_errors.TimeoutError) for r in results), results
            assert time.monotonic() - started < 2
        finally:
            os.kill(process.pid, signal.SIGCONT)
        assert await fast.send("PING") == b"PONG"
    finally:
        await fast.close()


async def test_the_store_uses_the_link_on_real_redis(redis_server: RedisServer, endpoint: Endpoint) -> None:
    store = Store(aioredis.from_url(endpoint.url()))
    try:
        assert isinstance(store.link, FastLink)
        assert await store.receipts.get_receipt_json("rcpt_missing") is None
        assert store.link._protocol is not None, "the read went through the link"
    finally:
        await store.close()
        with contextlib.suppress(Exception):
            await store.link.close()


async def test_reads_and_verifies_share_round_trips_with_their_limit_checks(
    endpoint: Endpoint, settings: Any, keyring: Any
) -> None:
    """A public read by id is one write to Redis (limit check and read together); a verify of
    a chained receipt is two (key and address limit + receipt, key limit + previous receipt
    found by its hash and read in one script), once Redis knows the lookup script (the first
    lookup after a Redis start loads it: one more)."""
    import orjson

    from execution_proof.kv.accounts import create_project_key
    from execution_proof.web.app import create_app
    from tests.conftest import auth, hash_of

    store = Store(aioredis.from_url(endpoint.url()))
    client = create_app(settings, store=store).asgi_client
    try:
        key = await create_project_key(store.keys, project_name="trips", plan="pro")
        created = []
        for label in ("first", "second"):
            _, response = await client.post(
                "/v1/receipts", content=orjson.dumps({"input_hash": hash_of(label)}), headers=auth(key)
            )
            assert response.status_code == 201
            created.append(response.json["receipt"])
        # Every script these routes run is loaded once (a first EVALSHA of a script new to the
        # server is answered NOSCRIPT and sent again as EVAL: a second write).
        await client.get(f"/v1/receipts/{created[0]['receipt_id']}")
        assert isinstance(store.link, FastLink) and store.link._protocol is not None
        counting = CountingTransport(store.link._protocol.transport)
        store.link._protocol.transport = counting

        _, read = await client.get(f"/v1/receipts/{created[1]['receipt_id']}")
        assert read.status_code == 200 and read.json["receipt"] == created[1]
        assert counting.writes == 1

        body = {"receipt_id": created[1]["receipt_id"], "input_hash": hash_of("second")}
        for expected_writes in (3, 2):  # the first loads the lookup script
            counting.writes = 0
            _, verified = await client.post("/v1/verify", content=orjson.dumps(body), headers=auth(key))
            assert verified.status_code == 200 and verified.json["ok"] is True, verified.json
            assert verified.json["chain"]["prev_found"] is True
            assert counting.writes == expected_writes

        counting.writes = 0
        _, missing = await client.get("/v1/receipts/rcpt_01M7YR62DJ67JXQHA2S1YESJGE")
        assert missing.status_code == 404 and counting.writes == 1
    finally:
        await store.close()


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(redis_url: str) -> None:
    """A process forked while the link is connected (an RQ work horse, say) must not use or
    close the parent's socket: it reconnects, and the parent's connection keeps working."""
    import os

    fast = FastLink("127.0.0.1", port_of(redis_url))
    loop = asyncio.new_event_loop()

    async def call(*args: Any) -> Any:
        return await fast.send(*args)

    try:
        assert loop.run_until_complete(call("SET", "forked", "parent")) == b"OK"
        parent_protocol = fast._protocol
        pid = os.fork()
        if pid == 0:  # the child: a fresh loop, as asyncio.run gives a job
            code = 1
            try:

                async def child() -> Any:
                    await fast.send("SET", "forked", "child")
                    return await fast.send("GET", "forked")

                code = 0 if asyncio.run(child()) == b"child" and fast._protocol is not parent_protocol else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert fast._protocol is parent_protocol
        assert loop.run_until_complete(call("GET", "forked")) == b"child", "the parent's socket still works"
    finally:
        loop.run_until_complete(fast.close())
        loop.close()
