"""Schemathesis against the live service: the README's ``schemathesis run`` command, every
check enabled, 0 failures allowed, against two configurations:

- the demo: ``python service.py serve`` with nothing configured (embedded store, ephemeral
  signing key, no payments, no human check) except the README's ``LIMITS`` (room for a
  fuzzer's bursts: every limit raised, checked below against the defaults), authenticated with the demo key it prints. The claim and webhook
  endpoints answer their documented 503s here.
- a fully configured service: a real redis-server, fixed signing keys, and both outside
  providers (a fake human check, a webhook secret), so the claim endpoints are exercised
  rather than answering 503.

The command is read from README.md (API section) and run as a subprocess with the repository's
``schemathesis.toml`` (which loads ``tests/schemathesis_hooks.py``: the few rules OpenAPI cannot
state); the test adds only what makes a run bounded and readable: deterministic generation, a
number of examples, one worker, a request timeout and the JSON report it reads the outcome from.

Checks: ``--checks all`` - every built-in check of schemathesis 4.32, among them
not_a_server_error, status_code_conformance, content_type_conformance,
response_schema_conformance, response_headers_conformance, negative_data_rejection,
positive_data_acceptance, missing_required_header, unsupported_method,
allow_header_conformance, ignored_auth and the stateful ones. None is excluded.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from execution_proof.receipts.limits import DEFAULT_LIMITS, load_limits
from execution_proof.transparency.note import Signer
from execution_proof.web.openapi import DOCUMENT
from tests.conftest import REPO
from tests.fake_providers import FakeHumanCheck
from tests.servers import ServicePool, clean_env, create_key_cli, service_pool_fixture

service_factory = service_pool_fixture()

WEBHOOK_SECRET = "whsec_schemathesis_test"
README_BASE = "http://127.0.0.1:8000"
MAX_EXAMPLES = 100
# One worker: with several, schemathesis 4.32.5's coverage phase sometimes failed inside its own
# code (SystemError: AST constructor recursion depth mismatch), whatever the service answered.
RUN_TIMEOUT_S = 240


def readme_commands() -> tuple[dict[str, Any], list[str]]:
    """The README's demo ``LIMITS`` and its ``schemathesis run`` command (as words)."""
    readme = (REPO / "README.md").read_text()
    limits = re.search(r"^LIMITS='([^']+)' \\\n\s+python service\.py serve --port 8000", readme, re.M)
    command = re.search(r"^schemathesis run .+$", readme, re.M)
    assert limits and command, "README.md no longer shows the schemathesis commands"
    return orjson.loads(limits.group(1)), shlex.split(command.group(0))


def run_readme_command(base_url: str, api_key: str, tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run the README's command against ``base_url``; the JSON report, checked for a clean run."""
    _, words = readme_commands()
    assert words[:3] == ["schemathesis", "run", README_BASE + "/openapi.json"], words
    assert words[3:] == ["--checks", "all", "-H", "Authorization: Bearer $KEY"], words
    report = tmp_path / "schemathesis.json"
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(REPO / "schemathesis.toml"),
        "run", base_url + "/openapi.json",
        *(word.replace("$KEY", api_key) for word in words[3:]),
        "--max-examples", str(MAX_EXAMPLES),
        "--generation-deterministic",
        "--workers", "1",
        "--request-timeout", "10",
        "--no-color",
        "--report", "json",
        "--report-json-path", str(report),
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=clean_env({"PYTHONPATH": str(REPO), **env}),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    elapsed = time.monotonic() - started
    output = done.stdout[-20_000:] + done.stderr[-5_000:]
    assert report.exists(), output
    result: dict[str, Any] = orjson.loads(report.read_bytes())
    print(
        f"schemathesis: {result['operations']['tested']} operations, "
        f"{result['test_cases']['generated']} test cases, {len(result['failures'])} failures, {elapsed:.1f} s"
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
    return result


FUZZER_ROOM = 100_000
"""The least a limit of the README's ``LIMITS`` may be: room for a fuzzer's thousands of requests."""


def limit_paths(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Every limit of a ``LIMITS``-shaped object, by its path: ``("ip_per_minute", "public_key")``."""
    found: dict[tuple[str, ...], int] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            found.update(limit_paths(value, (*prefix, key)))
        else:
            found[(*prefix, key)] = value
    return found


def test_the_readme_limits_raise_every_limit_of_the_defaults() -> None:
    """Derived from the limits model: every per-plan and per-address limit the defaults have
    (a new one too) must be raised by the recipe, or schemathesis meets its 429s, not the handlers."""
    readme_limits, _ = readme_commands()
    defaults = limit_paths(DEFAULT_LIMITS)
    assert {path[0] for path in defaults} >= {"plans", "ip_per_minute"}
    assert len(defaults) >= 12, defaults  # 3 plans x 2, 5 per-address, the free claims
    raised = limit_paths(readme_limits)
    assert set(raised) <= set(defaults), f"not limits: {sorted(set(raised) - set(defaults))}"
    assert not set(defaults) - set(raised), f"left at their defaults: {sorted(set(defaults) - set(raised))}"
    for path, default in defaults.items():
        assert raised[path] > default and raised[path] >= FUZZER_ROOM, (path, default, raised[path])
    # And the service reads it so: it is a valid LIMITS, every plan's and address's limit raised.
    loaded = load_limits(orjson.dumps(readme_limits))
    for name, plan in loaded.plans.items():
        assert min(plan.per_minute, plan.monthly) >= FUZZER_ROOM, name
    assert min(loaded.ip_per_minute.values()) >= FUZZER_ROOM
    assert loaded.free_claims_per_ip_per_day >= FUZZER_ROOM


@pytest.mark.slow
def test_schemathesis_finds_no_failure_on_the_demo(service_factory: ServicePool, tmp_path: Path) -> None:
    limits, _ = readme_commands()
    service = service_factory.start(redis_url=None, receipt_root=None, limits=limits)
    (found,) = service.wait_for_output(r"API key:\s+(eps_[A-Za-z0-9_-]{43})\b")
    assert "NOTHING SURVIVES A RESTART" in service.stderr(), "not the embedded demo"
    run_readme_command(service.base_url, found.group(1), tmp_path, {})


@pytest.mark.slow
@pytest.mark.real_redis
def test_schemathesis_finds_no_failure_on_a_configured_service(
    service_factory: ServicePool, redis_url: str, tmp_path: Path
) -> None:
    human = FakeHumanCheck()
    try:
        service = service_factory.start(
            redis_url=redis_url,
            env={
                "PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET,
                "HUMAN_CHECK_SECRET": "human-check-secret",
                "HUMAN_CHECK_VERIFY_URL": human.url,
                "LOG_SIGNING_KEY": Signer.generate("schemathesis.example/log").encode(),
                "LOG_ORIGIN": "schemathesis.example/log",
                "LOG_STORE": f"file://{tmp_path}/log",
            },
        )
        key = create_key_cli(redis_url, project="schemathesis", plan="pro")
        env = {"PAYMENT_WEBHOOK_SECRET": WEBHOOK_SECRET, "EPS_TEST_PROJECT_ID": key["project_id"]}
        run_readme_command(service.base_url, key["api_key"], tmp_path, env)
    finally:
        human.close()
