"""Schemathesis against the live service: ``python service.py serve`` on a real redis-server,
driven by the service's own ``/openapi.json``, every check enabled, 0 failures allowed.

The run uses the ``schemathesis run`` command line (the engine schemathesis supports best)
in a subprocess, deterministic generation, a bounded number of examples per operation, and
reads the outcome from its JSON report. ``tests/schemathesis_hooks.py`` holds the few rules
OpenAPI cannot state (why each exists is written there). Both outside providers are
configured (a fake human check, a webhook secret) so the claim endpoints are exercised
rather than answering 503 ``not_configured``.

Checks: ``--checks all`` - every built-in check of schemathesis 4.32, among them
not_a_server_error, status_code_conformance, content_type_conformance,
response_schema_conformance, response_headers_conformance, negative_data_rejection,
positive_data_acceptance, missing_required_header, unsupported_method,
allow_header_conformance, ignored_auth and the stateful ones. None is excluded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import REPO
from tests.fake_providers import FakeHumanCheck
from tests.servers import ServicePool, clean_env, create_key_cli, service_pool_fixture
from web.openapi import DOCUMENT

service_factory = service_pool_fixture()

WEBHOOK_SECRET = "whsec_schemathesis_test"
# schemathesis's default list of statuses that count as rejecting invalid data, plus 413:
# an oversized invalid body (say, a huge object where a string belongs) is refused for its
# size before its shape is read, which is a rejection too.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
"""
MAX_EXAMPLES = 100
# One worker: with several, schemathesis 4.32.5's coverage phase sometimes failed inside its own
# code (SystemError: AST constructor recursion depth mismatch), whatever the service answered.
RUN_TIMEOUT_S = 240


@pytest.mark.slow
@pytest.mark.real_redis
def test_schemathesis_finds_no_failure_on_the_live_service(
    service_factory: ServicePool, redis_url: str, signing_keys_json: str, tmp_path: Path
) -> None:
    human = FakeHumanCheck()
    try:
        service = service_factory.start(
            redis_url=redis_url,
            signing_keys=signing_keys_json,
            env={
                "PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET,
                "HUMAN_CHECK_SECRET": "human-check-secret",
                "HUMAN_CHECK_VERIFY_URL": human.url,
            },
        )
        key = create_key_cli(redis_url, project="schemathesis", plan="pro")
        report = tmp_path / "schemathesis.json"
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG)
        command = [
            sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
            "run", service.base_url + "/openapi.json",
            "--header", f"Authorization: Bearer {key['api_key']}",
            "--checks", "all",
            "--max-examples", str(MAX_EXAMPLES),
            "--generation-deterministic",
            "--workers", "1",
            "--request-timeout", "10",
            "--no-color",
            "--report", "json",
            "--report-json-path", str(report),
        ]  # fmt: skip
        env = clean_env(
            {
                "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
                "PYTHONPATH": str(REPO),
                "PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET,
                "EPS_TEST_PROJECT_ID": key["project_id"],
            }
        )
        started = time.monotonic()
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
        )
        elapsed = time.monotonic() - started
    finally:
        human.close()
    output = done.stdout[-20_000:] + done.stderr[-5_000:]
    assert report.exists(), output
    result: dict[str, Any] = orjson.loads(report.read_bytes())
    print(
        f"schemathesis: {result['operations']['tested']} operations, "
        f"{result['test_cases']['generated']} test cases, {elapsed:.1f} s"
    )
    assert result["failures"] == [], output
    assert result["errors"] == [], output
    assert done.returncode == 0, output
    assert result["complete"] is True, output
    # The key was accepted: otherwise the protected operations would only have seen 401.
    assert result["warnings"]["missing_auth"] == [], output
    documented = sum(len(item) for item in DOCUMENT["paths"].values())
    # Schemathesis leaves out the operation that serves the document it tests.
    assert result["operations"]["tested"] == documented - 1, output
    assert result["operations"]["errored"] == 0, output
    assert result["test_cases"]["generated"] >= 10 * documented, output
