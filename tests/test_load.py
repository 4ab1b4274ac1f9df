"""Load on a real service (loopback, real redis-server, bounded): concurrent creates on one
project leave exactly one linear chain, and a mixed-traffic soak serves no 5xx with flat
worker memory. Figures are printed (``pytest -s``) and recorded in docs/operations.md.

``SOAK_SECONDS`` (default 60) sets the soak's length; the first sixth is warm-up, after
which the resident set size (``VmRSS``) of the server and every worker is sampled, and again
at the end.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import hash_of
from tests.servers import ServicePool, create_key_cli, service_pool_fixture

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

service_factory = service_pool_fixture()

CREATES = 200
CLIENTS = 50
SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS") or 60)
SOAK_CONCURRENCY = 16
RSS_GROWTH_LIMIT_KB = 20 * 1024
RSS_GROWTH_LIMIT_RATIO = 0.15


def tip_hash(redis_url: str, project_id: str) -> str:
    with redis.Redis.from_url(redis_url) as conn:
        for name in conn.scan_iter(match=f"p:*:{project_id}"):
            tip = conn.hget(name, "tip")
            assert tip is not None
            return str(tip.decode())
    raise AssertionError("project not found")


def test_concurrent_creates_form_one_linear_chain(service_factory: ServicePool, redis_url: str) -> None:
    service = service_factory.start(workers=4, redis_url=redis_url)
    key = create_key_cli(redis_url, project="load", plan="pro")
    headers = {"Authorization": f"Bearer {key['api_key']}"}

    async def run() -> tuple[list[httpx.Response], float]:
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        gate = asyncio.Semaphore(CLIENTS)
        async with httpx.AsyncClient(base_url=service.base_url, limits=limits, timeout=30) as http:

            async def one(n: int) -> httpx.Response:
                async with gate:
                    return await http.post("/v1/receipts", json={"input_hash": hash_of(f"load-{n}")}, headers=headers)

            started = time.monotonic()
            answers = await asyncio.gather(*(one(n) for n in range(CREATES)))
            return list(answers), time.monotonic() - started

    answers, elapsed = asyncio.run(run())
    statuses = Counter(r.status_code for r in answers)
    assert statuses == {201: CREATES}, statuses
    created = {r.json()["receipt"]["receipt_id"] for r in answers}

    # Walk back from the tip through the public read by hash.
    walked: list[dict[str, Any]] = []
    current: str | None = tip_hash(redis_url, key["project_id"])
    with httpx.Client(base_url=service.base_url, timeout=10) as http:
        while current is not None:
            read = http.get(f"/v1/receipts/{current}", params={"project_id": key["project_id"]})
            assert read.status_code == 200, read.text
            receipt = read.json()["receipt"]
            walked.append(receipt)
            current = receipt["prev_receipt_hash"]
            assert len(walked) <= CREATES
    prevs = [r["prev_receipt_hash"] for r in walked]
    assert len(walked) == CREATES
    assert len(set(prevs)) == CREATES  # no two receipts share a prev: zero forks
    assert {r["receipt_id"] for r in walked} == created
    assert all(r["chain_status"] == "main" for r in walked)
    print(f"\nload: {CREATES} creates from {CLIENTS} clients on 4 workers in {elapsed:.2f} s, 0 forks")


# --- soak ------------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (``ps --ppid``)."""
    found = [pid]
    index = 0
    while index < len(found):
        done = subprocess.run(["ps", "--ppid", str(found[index]), "-o", "pid="], capture_output=True, text=True)
        found += [int(p) for p in done.stdout.split()]
        index += 1
    return found


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def sample_rss(pid: int) -> dict[int, int]:
    return {p: kb for p in descendants(pid) if (kb := rss_kb(p)) is not None}


def test_soak_mixed_traffic_no_5xx_and_flat_memory(service_factory: ServicePool, redis_url: str) -> None:
    service = service_factory.start(workers=2, redis_url=redis_url)
    assert service.process is not None
    keys = [create_key_cli(redis_url, project=f"soak-{n}", plan="pro") for n in range(3)]
    rng = random.Random(20260101)
    counts: Counter[tuple[str, int]] = Counter()
    recent: list[tuple[dict[str, Any], str, str]] = []  # (key, receipt_id, input_hash)
    serial = iter(range(10**9))
    samples: dict[str, dict[int, int]] = {}

    async def operation(http: httpx.AsyncClient) -> None:
        key = rng.choice(keys)
        auth = {"Authorization": f"Bearer {key['api_key']}"}
        op = rng.choice(["create", "create", "replay", "read", "verify", "bundle", "bad", "unauth"])
        if op in ("replay", "read", "verify", "bundle") and not recent:
            op = "create"
        if op == "create":
            h = hash_of(f"soak-{next(serial)}")
            r = await http.post("/v1/receipts", json={"input_hash": h}, headers=auth)
            if r.status_code == 201:
                recent.append((key, r.json()["receipt"]["receipt_id"], h))
                del recent[:-500]
            expected = {201}
        elif op == "replay":
            owner, _, h = rng.choice(recent)
            r = await http.post(
                "/v1/receipts", json={"input_hash": h}, headers={"Authorization": f"Bearer {owner['api_key']}"}
            )
            expected = {200}
        elif op == "read":
            r = await http.get(f"/v1/receipts/{rng.choice(recent)[1]}")
            expected = {200}
        elif op == "verify":
            owner, rid, h = rng.choice(recent)
            r = await http.post(
                "/v1/verify",
                json={"receipt_id": rid, "input_hash": h},
                headers={"Authorization": f"Bearer {owner['api_key']}"},
            )
            expected = {200}
            assert r.status_code != 200 or r.json()["ok"] is True
        elif op == "bundle":
            r = await http.get(f"/v1/receipts/{rng.choice(recent)[1]}/bundle", params={"depth": "5"})
            expected = {200}
        elif op == "bad":
            r = await http.post("/v1/receipts", json={"input_hash": "md5:nope"}, headers=auth)
            expected = {400}
        else:
            r = await http.post(
                "/v1/verify",
                json={"receipt_id": "x", "input_hash": hash_of("x")},
                headers={"Authorization": "Bearer eps_" + "Z" * 43},
            )
            expected = {401}
        counts[(op, r.status_code)] += 1
        assert r.status_code < 500, f"{op}: {r.status_code} {r.text[:300]}"
        assert r.status_code in expected, f"{op}: {r.status_code} {r.text[:300]}"

    async def run() -> float:
        warmup = SOAK_SECONDS / 6
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=service.base_url, timeout=30) as http:

            async def client() -> None:
                while time.monotonic() - started < SOAK_SECONDS:
                    await operation(http)
                    if "start" not in samples and time.monotonic() - started >= warmup:
                        samples["start"] = sample_rss(service.process.pid)  # type: ignore[union-attr]

            await asyncio.gather(*(client() for _ in range(SOAK_CONCURRENCY)))
        return time.monotonic() - started

    elapsed = asyncio.run(run())
    samples["end"] = sample_rss(service.process.pid)
    served = sum(counts.values())
    print(
        f"\nsoak: {served} requests in {elapsed:.1f} s ({served / elapsed:.0f}/s), statuses {dict(sorted(counts.items()))}"
    )
    assert all(status < 500 for _, status in counts)
    assert served > 100
    start, end = samples["start"], samples["end"]
    assert len(start) >= 3  # the server and its two workers
    for pid in start:
        if pid not in end:
            continue
        growth = end[pid] - start[pid]
        print(
            f"soak RSS pid {pid}: {start[pid] / 1024:.1f} MiB -> {end[pid] / 1024:.1f} MiB ({growth / 1024:+.1f} MiB)"
        )
        assert growth < RSS_GROWTH_LIMIT_KB or growth < start[pid] * RSS_GROWTH_LIMIT_RATIO, (pid, start[pid], end[pid])
    assert set(start) == set(end), "a worker process was replaced during the soak"
