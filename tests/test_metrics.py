"""Metrics (docs/observability.md): what is counted, with which labels, and who may read it.

In process (ASGI client): requests by route name, receipts new vs replayed, limit refusals
by kind, store errors, the hidden ``/metrics`` route on the main port, and that the request
hook looks its label sets up only once. With real processes: ``serve --workers 2`` sums the
workers' counts in one scrape (metrics port and token route alike), and ``worker`` serves
its job outcomes on its own metrics port.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue
from rq.serializers import JSONSerializer

from execution_proof.jobs.queue import QUEUE_NAME
from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store import Store
from execution_proof.receipts.errors import StoreUnavailable
from execution_proof.receipts.limits import load_limits
from execution_proof.runtime import metrics
from execution_proof.runtime.metrics import job_label
from execution_proof.runtime.settings import ConfigError, Settings, load_settings
from execution_proof.web.app import create_app
from tests.conftest import auth, free_port, hash_of
from tests.servers import ServicePool, clean_env, create_key_cli, service_pool_fixture

service_factory = service_pool_fixture()
TOKEN = "metrics-token-for-tests-0123456789"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def make_app(store: Store, receipt_root: str, limits: dict[str, Any] | None = None, token: str | None = None) -> Any:
    settings = Settings(
        redis_url="redis://injected",
        receipt_root=receipt_root,
        limits=load_limits(orjson.dumps(limits) if limits else None),
        metrics_token=token,
    )
    return create_app(settings, store=store)


# --- configuration -----------------------------------------------------------------------


def test_metrics_settings() -> None:
    off = load_settings({})
    assert (off.metrics_port, off.metrics_host, off.metrics_token, off.metrics_exposed) == (
        None,
        "127.0.0.1",
        None,
        False,
    )
    on = load_settings({"METRICS_PORT": "9091", "METRICS_HOST": "::", "METRICS_TOKEN": "t"})
    assert (on.metrics_port, on.metrics_host, on.metrics_token, on.metrics_exposed) == (9091, "::", "t", True)
    for bad in ("0", "65536", "http", "-1"):
        with pytest.raises(ConfigError, match="METRICS_PORT"):
            load_settings({"METRICS_PORT": bad})


# --- in process ----------------------------------------------------------------------------


async def test_requests_are_counted_by_route_name_never_by_path(client: Any, api_key: dict[str, Any]) -> None:
    unknown_id = "rcpt_01M7YEW44D0PS6HBQR41T1S029"
    before = {
        "read": sample("eps_http_requests_total", route="receipts.get_receipt", method="GET", status="404"),
        "unmatched": sample("eps_http_requests_total", route="unmatched", method="GET", status="404"),
        "create": sample("eps_http_requests_total", route="receipts.create_receipt", method="POST", status="201"),
        "odd": sample("eps_http_requests_total", route="unmatched", method="other", status="404"),
        "timed": sample("eps_http_request_duration_seconds_count", route="receipts.create_receipt"),
    }
    _, read = await client.get(f"/v1/receipts/{unknown_id}")
    assert read.status_code == 404
    for n in range(3):
        _, response = await client.get(f"/no/such/path/{n}")
        assert response.status_code == 404
    _, created = await client.post(
        "/v1/receipts", content=orjson.dumps({"input_hash": hash_of("counted")}), headers=auth(api_key)
    )
    assert created.status_code == 201
    _, odd = await client.request("BREW", "/no/such/path")
    assert odd.status_code in (404, 405)
    after = {
        "read": sample("eps_http_requests_total", route="receipts.get_receipt", method="GET", status="404"),
        "unmatched": sample("eps_http_requests_total", route="unmatched", method="GET", status="404"),
        "create": sample("eps_http_requests_total", route="receipts.create_receipt", method="POST", status="201"),
        "odd": sample("eps_http_requests_total", route="unmatched", method="other", status=str(odd.status_code)),
        "timed": sample("eps_http_request_duration_seconds_count", route="receipts.create_receipt"),
    }
    assert after["read"] - before["read"] == 1
    assert after["unmatched"] - before["unmatched"] == 3
    assert after["create"] - before["create"] == 1
    assert after["timed"] - before["timed"] == 1
    assert after["odd"] >= 1, "an unknown method is labelled 'other', never by its own name"
    text = metrics.render_metrics().decode()
    for raw in (unknown_id, "/no/such/path", "BREW", api_key["project_id"], api_key["api_key"]):
        assert raw not in text, f"{raw} leaked into a label"


async def test_receipts_new_and_replayed(client: Any, api_key: dict[str, Any]) -> None:
    new, replay = (sample("eps_receipts_issued_total", outcome=o, plan="free") for o in ("new", "replay"))
    body = orjson.dumps({"input_hash": hash_of("replayed")})
    statuses = []
    for _ in range(3):
        _, response = await client.post("/v1/receipts", content=body, headers=auth(api_key))
        statuses.append(response.status_code)
    assert statuses == [201, 200, 200]
    assert sample("eps_receipts_issued_total", outcome="new", plan="free") - new == 1
    assert sample("eps_receipts_issued_total", outcome="replay", plan="free") - replay == 2


async def test_limit_refusals_by_kind(store: Store, receipt_root: str) -> None:
    limits = {
        "plans": {"free": {"per_minute": 1, "monthly": 1000}, "basic": {"per_minute": 100, "monthly": 1}},
        "ip_per_minute": {"public_key": 1, "unauthenticated": 1},
    }
    client = make_app(store, receipt_root, limits).asgi_client
    free = await create_project_key(store.keys, project_name="limited", plan="free")
    basic = await create_project_key(store.keys, project_name="quota", plan="basic")
    kinds = [
        ("key_per_minute", "key"),
        ("quota", "month"),
        ("per_ip", "ip-public_key"),
        ("failed_auth", "ip-unauthenticated"),
    ]
    before = {k: sample("eps_limit_refusals_total", kind=k, policy=p) for k, p in kinds}

    async def create(key: dict[str, Any], label: str) -> int:
        _, response = await client.post(
            "/v1/receipts", content=orjson.dumps({"input_hash": hash_of(label)}), headers=auth(key)
        )
        return int(response.status_code)

    assert [await create(free, "a"), await create(free, "b")] == [201, 429]
    assert [await create(basic, "c"), await create(basic, "d")] == [201, 429]
    statuses = [(await client.get("/v1/public-key"))[1].status_code for _ in range(2)]
    assert statuses == [200, 429]
    wrong = {"Authorization": "Bearer eps_" + "A" * 43}
    statuses = [(await client.get("/v1/usage", headers=wrong))[1].status_code for _ in range(3)]
    assert statuses == [401, 429, 429]
    after = {k: sample("eps_limit_refusals_total", kind=k, policy=p) for k, p in kinds}
    assert {k: after[k] - before[k] for k in after} == {
        "key_per_minute": 1,
        "quota": 1,
        "per_ip": 1,
        "failed_auth": 2,
    }


async def test_store_operations_are_timed_and_failures_counted(store: Store) -> None:
    timed = sample("eps_store_operation_duration_seconds_count", operation="find_api_key")
    await store.keys.find_api_key("sha256:" + "0" * 64)
    assert sample("eps_store_operation_duration_seconds_count", operation="find_api_key") - timed == 1

    errors = sample("eps_store_errors_total", operation="find_api_key", kind="ConnectionError")
    down = Store(aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5))
    try:
        with pytest.raises(StoreUnavailable):
            await down.keys.find_api_key("sha256:" + "0" * 64)
    finally:
        await down.close()
    assert sample("eps_store_errors_total", operation="find_api_key", kind="ConnectionError") - errors == 1


async def test_the_request_hook_resolves_labels_once(
    client: Any, api_key: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first request of a route, method and status, no label lookup happens."""
    await client.get("/health")
    before = sample("eps_http_requests_total", route="info.health", method="GET", status="200")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("labels() looked up on the request path")

    monkeypatch.setattr(metrics.HTTP_REQUESTS, "labels", refuse)
    monkeypatch.setattr(metrics.HTTP_REQUEST_SECONDS, "labels", refuse)
    for _ in range(5):
        _, response = await client.get("/health")
        assert response.status_code == 200
    assert sample("eps_http_requests_total", route="info.health", method="GET", status="200") - before == 5


def _without_request_id(response: Any) -> tuple[int, dict[str, Any], str]:
    body = response.json
    body.pop("request_id")
    return response.status_code, body, response.headers.get("content-type")


async def test_metrics_on_the_main_port_look_like_any_unknown_path(store: Store, receipt_root: str) -> None:
    unknown = _without_request_id((await make_app(store, receipt_root).asgi_client.get("/no-such-path"))[1])
    assert unknown[0] == 404 and unknown[1]["error"]["code"] == "not_found"

    hidden = make_app(store, receipt_root).asgi_client  # no METRICS_TOKEN: no route at all
    for headers in ({}, {"Authorization": f"Bearer {TOKEN}"}):
        assert _without_request_id((await hidden.get("/metrics", headers=headers))[1]) == unknown

    guarded = make_app(store, receipt_root, token=TOKEN).asgi_client
    refused = [
        await guarded.get("/metrics"),
        await guarded.get("/metrics", headers={"Authorization": "Bearer wrong"}),
        await guarded.get("/metrics", headers={"Authorization": TOKEN}),
        await guarded.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"}),
        await guarded.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}),
        await guarded.delete("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}),
        await guarded.request("OPTIONS", "/metrics"),
        await guarded.request("TRACE", "/metrics"),
        await guarded.request("BREW", "/metrics"),
    ]
    for _, response in refused:
        assert _without_request_id(response) == unknown
        assert "allow" not in response.headers
    _, scraped = await guarded.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    assert scraped.headers["cache-control"] == "no-store"
    assert "eps_http_requests_total" in scraped.text
    assert TOKEN not in scraped.text


def test_metrics_listener_serves_only_get_metrics() -> None:
    listener = metrics.start_metrics_listener("127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{listener.port}"
        scraped = httpx.get(base + "/metrics", timeout=5)
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain")
        assert "eps_http_requests_total" in scraped.text or "eps_receipts_issued_total" in scraped.text
        assert httpx.get(base + "/", timeout=5).status_code == 404
        assert httpx.get(base + "/metrics/x", timeout=5).status_code == 404
    finally:
        listener.stop()


def test_refusal_kinds_of_claim_policies() -> None:
    assert metrics.refusal_kind("ip-claim") == "per_ip"
    assert metrics.refusal_kind("ip-free-claim") == "per_ip"


# --- real processes ------------------------------------------------------------------------


def _requests_total(samples: dict[Any, float], route: str, status: str) -> float:
    return sum(
        value
        for (name, labels), value in samples.items()
        if name == "eps_http_requests_total" and ("route", route) in labels and ("status", status) in labels
    )


@pytest.mark.slow
@pytest.mark.real_redis
def test_two_workers_are_summed_in_one_scrape(service_factory: ServicePool, redis_url: str) -> None:
    metrics_port = free_port()
    service = service_factory.start(
        workers=2,
        redis_url=redis_url,
        env={"METRICS_PORT": str(metrics_port), "METRICS_TOKEN": TOKEN},
    )
    key = create_key_cli(redis_url, project="summed", plan="pro")
    sent = 0

    def create(n: int) -> int:
        # A fresh connection each time, so the kernel spreads them over both workers.
        with httpx.Client(base_url=service.base_url, timeout=10) as http:
            response = http.post(
                "/v1/receipts",
                json={"input_hash": hash_of(f"summed-{n}")},
                headers={"Authorization": f"Bearer {key['api_key']}"},
            )
            return response.status_code

    served_by: Counter[int] = Counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        while sent < 400:
            statuses = list(pool.map(create, range(sent, sent + 80)))
            assert statuses == [201] * 80
            sent += 80
            served_by = Counter(
                line["pid"]
                for line in map(orjson.loads, service.stderr().splitlines())
                if line.get("route") == "receipts.create_receipt"
            )
            if len(served_by) >= 2 and min(served_by.values()) >= 10:
                break
    assert len(served_by) == 2, f"both workers should have served creates: {served_by}"
    assert sum(served_by.values()) == sent

    # A worker records a request's values as its answer leaves, so the last answers may be
    # read before their values are written: scrape until the sum is complete, for a bounded time.
    deadline = time.monotonic() + 10.0
    while True:
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert scraped.status_code == 200
        samples = scrape_samples(scraped.text)
        if _requests_total(samples, "receipts.create_receipt", "201") >= sent or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert _requests_total(samples, "receipts.create_receipt", "201") == sent
    receipts = sum(v for (name, labels), v in samples.items() if name == "eps_receipts_issued_total")
    assert receipts == sent
    timed = samples[("eps_http_request_duration_seconds_count", (("route", "receipts.create_receipt"),))]
    assert timed == sent
    # Group commit: one store operation per group of a project's concurrent creates (more
    # when the two workers' groups race for the tip and one is sent again).
    issue_ops = samples[("eps_store_operation_duration_seconds_count", (("operation", "issue_receipts"),))]
    assert issue_ops >= 1

    # The token route on the main port, served by either worker, sees the same sum.
    with httpx.Client(base_url=service.base_url, timeout=10) as http:
        for _ in range(4):
            page = http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert page.status_code == 200
            assert _requests_total(scrape_samples(page.text), "receipts.create_receipt", "201") == sent
    assert not re.findall(r"eps-metrics-", service.stderr()), "the private directory is never named in the logs"

    # The private directory of the counts is removed at exit.
    assert service.process is not None
    pid = service.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    # /proc shows the environment a process was started with: the workers', set by serve.
    found = {
        v.split(b"=", 1)[1].decode()
        for child in children
        for v in Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")
    }
    (multiproc_dir,) = found
    assert Path(multiproc_dir).is_dir() and any(Path(multiproc_dir).glob("counter_*.db"))
    service.stop()
    assert service.process.returncode == 0
    assert not Path(multiproc_dir).exists()


@pytest.mark.slow
@pytest.mark.real_redis
def test_metrics_are_off_by_default(service_factory: ServicePool, redis_url: str) -> None:
    service = service_factory.start(workers=1, redis_url=redis_url)
    with httpx.Client(base_url=service.base_url, timeout=10) as http:
        for headers in ({}, {"Authorization": f"Bearer {TOKEN}"}):
            response = http.get("/metrics", headers=headers)
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"


@pytest.mark.slow
@pytest.mark.real_redis
def test_worker_serves_its_job_outcomes(redis_url: str, tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    metrics_port = free_port()
    env = clean_env({"REDIS_URL": redis_url, "METRICS_PORT": str(metrics_port)})
    queue = Queue(QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)
    queue.enqueue("execution_proof.jobs.retention.sweep_expired")
    queue.enqueue("execution_proof.jobs.retention.sweep_expired", "not a time")  # fails: no retry configured here
    log = open(tmp_path / "worker.stderr", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [sys.executable, "service.py", "worker"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log
    )
    wanted = {
        ("jobs.retention.sweep_expired", "success"): 1.0,
        ("jobs.retention.sweep_expired", "failure"): 1.0,
    }
    seen: dict[tuple[str, str], float] = {}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).text
            except httpx.HTTPError:
                page = ""
            samples = scrape_samples(page)
            seen = {
                (dict(labels)["job"], dict(labels)["outcome"]): value
                for (name, labels), value in samples.items()
                if name == "eps_jobs_total"
            }
            if all(seen.get(k, 0) >= v for k, v in wanted.items()):
                break
            time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
    output = (tmp_path / "worker.stderr").read_text()
    assert all(seen.get(k, 0) >= v for k, v in wanted.items()), (seen, output[-3000:])
    for line in output.splitlines():
        assert isinstance(orjson.loads(line), dict), line  # REDIS_URL set: JSON logs by default


@pytest.mark.parametrize(
    ("job", "label"),
    [
        ("execution_proof.jobs.retention.sweep_expired", "jobs.retention.sweep_expired"),
        ("execution_proof.jobs.claims.index_checkout", "jobs.claims.index_checkout"),
        ("jobs.retention.sweep_expired", "other"),
        ("execution_proof.web.app.create_app", "other"),
        ("os.getcwd", "other"),
    ],
)
def test_a_job_is_labelled_by_its_path_inside_the_package(job: str, label: str) -> None:
    assert job_label(job) == label
