"""The composite GitHub Action (action.yml at the repository root), run as the runner runs it.

``run_action`` plays the runner's part for a composite action: each step in order, as
``bash --noprofile --norc -eo pipefail FILE`` (what ``shell: bash`` runs), with its ``env:``,
a ``GITHUB_OUTPUT`` file of its own read back into ``steps.<id>.outputs``, and the ``${{ }}``
expressions the action uses (``inputs.NAME``, ``github.action_path``,
``steps.ID.outputs.NAME``) substituted textually, as the runner does before a step starts
(``INPUT_*`` variables are not set for composite actions). The first failing step ends the
run; the action's outputs are then resolved from the step outputs.

``GITHUB_ACTION_PATH`` is a copy of this checkout (``pip install`` of a directory writes
``build/`` beside its sources). The install step is the action's own: ``pip install
"$GITHUB_ACTION_PATH"`` (no extra) into a virtual environment under ``RUNNER_TEMP``, which the
module shares, so the first run installs and the others reuse it, as a second use of the
action in one job does. The service has a transparency log (``LOG_SIGNING_KEY``,
``LOG_STORE``) on a real ``redis-server``, with ``python service.py worker`` integrating it;
the pending case runs against a second service with a log and no worker. Each run has a
``GITHUB_STEP_SUMMARY`` file of its own and ``RUNNER_OS`` Linux unless a test says otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import yaml

from tests.conftest import REPO, RedisServer
from tests.servers import (
    ServicePool,
    ServiceProcess,
    WorkerProcess,
    clean_env,
    create_key_cli,
    run_cli,
    service_pool_fixture,
)
from tests.test_ci_recipe import log_settings
from tests.wheel_build import COPY_IGNORED

ACTION = REPO / "action.yml"
INPUTS = {"files", "service-url", "api-key", "wait", "trust-root"}
STEP_TIMEOUT_S = 600.0
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

module_services = service_pool_fixture("module")


def load_action() -> dict[str, Any]:
    action: dict[str, Any] = yaml.safe_load(ACTION.read_text())
    return action


# --- the file ---------------------------------------------------------------------------


def test_action_is_composite_with_plain_bash_steps() -> None:
    action = load_action()
    assert set(action["inputs"]) == INPUTS
    for name in ("files", "service-url", "api-key"):
        assert action["inputs"][name]["required"] is True, name
    assert action["inputs"]["trust-root"]["required"] is False
    assert action["inputs"]["trust-root"]["default"] == ""
    # Which runners: said in the file's description and in docs/ci.md, and checked first.
    assert "Linux and macOS" in action["description"] and "Windows" in action["description"]
    ci_doc = " ".join((REPO / "docs" / "ci.md").read_text().split())
    assert "Linux and macOS runners" in ci_doc and "Windows runners are not supported" in ci_doc
    assert float(action["inputs"]["wait"]["default"]) > 0
    assert {"receipt-id", "bundle-path", "manifest-path", "attestation-path"} <= set(action["outputs"])
    runs = action["runs"]
    assert runs["using"] == "composite"
    steps = runs["steps"]
    for step in steps:
        assert step["shell"] == "bash", step["name"]
        assert "uses" not in step, "every step is plain bash"
        assert "${{" not in step["run"], f"an expression inside a script could inject code: {step['name']}"
        assert step["run"].lstrip().startswith("set -euo pipefail"), step["name"]
        assert "curl" not in step["run"], "the bundle comes from `execution-proof bundle --wait`, not a polling loop"
    scripts = "\n".join(step["run"] for step in steps)
    assert re.search(r'-m pip install [^\n]*"\$GITHUB_ACTION_PATH"\s*$', scripts, re.MULTILINE), "the light install"
    assert "[server]" not in scripts
    assert re.search(r'execution-proof bundle [^\n]*--wait "\$EP_WAIT"', scripts)
    assert re.search(r'execution-proof attest [^\n]*--sigstore --wait "\$EP_WAIT"', scripts)
    # The key: masked by the first step, given as SERVICE_API_KEY to the submit step alone.
    uses_key = [step["name"] for step in steps if "${{ inputs.api-key }}" in str(step.get("env", {}))]
    assert uses_key == [steps[0]["name"], "Submit a receipt"], uses_key
    assert "::add-mask::$EP_API_KEY" in steps[0]["run"]
    (submit,) = [step for step in steps if "execution-proof submit" in step["run"]]
    assert submit["env"]["SERVICE_API_KEY"] == "${{ inputs.api-key }}"


# --- the runner's part ------------------------------------------------------------------


@dataclass
class ActionRun:
    """What a run of the action left: each step's exit code and output, their outputs, the
    action's outputs (empty strings for steps that did not run)."""

    returncodes: list[int] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    summary: str = ""
    step_outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.returncodes)

    def failure(self) -> str:
        return "\n".join(self.logs)[-6000:]


def read_github_output(path: Path) -> dict[str, str]:
    """``name=value`` lines and ``name<<DELIMITER`` blocks, as the runner reads them."""
    found: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            value = []
            for inner in lines:
                if inner == delimiter:
                    break
                value.append(inner)
            found[name] = "\n".join(value)
        elif line:
            name, value_text = line.split("=", 1)
            found[name] = value_text
    return found


def substitute(text: str, context: Mapping[str, str], step_outputs: Mapping[str, Mapping[str, str]]) -> str:
    """The action's ``${{ }}`` expressions replaced by their values (an output not set is empty)."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression in context:
            return context[expression]
        step = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression)
        assert step is not None, f"the test's runner does not know the expression {expression!r}"
        return step_outputs.get(step.group(1), {}).get(step.group(2), "")

    return EXPRESSION.sub(value, text)


def run_action(
    inputs: Mapping[str, str], *, action_path: Path, runner_temp: Path, workspace: Path, env: Mapping[str, str]
) -> ActionRun:
    """The action's steps in order in ``workspace``, until one fails."""
    action = load_action()
    context = {"github.action_path": str(action_path)}
    for name, spec in action["inputs"].items():
        context[f"inputs.{name}"] = inputs.get(name, str(spec.get("default", "")))
    run = ActionRun()
    with_steps = runner_temp / f"steps-{secrets.token_hex(4)}"
    with_steps.mkdir()
    summary = with_steps / "summary.md"
    summary.touch()
    for number, step in enumerate(action["runs"]["steps"]):
        script = with_steps / f"{number}.sh"
        script.write_text(substitute(step["run"], context, run.step_outputs))
        output = with_steps / f"{number}.output"
        output.touch()
        step_env = clean_env(
            {
                "RUNNER_OS": "Linux",
                **env,
                "GITHUB_ACTION_PATH": str(action_path),
                "GITHUB_OUTPUT": str(output),
                "GITHUB_STEP_SUMMARY": str(summary),
                "RUNNER_TEMP": str(runner_temp),
                # The client must come from the action's own install, not this checkout.
                "PYTHONPATH": None,
                "PYTHONHOME": None,
            }
        )
        step_env.update(
            {name: substitute(str(v), context, run.step_outputs) for name, v in step.get("env", {}).items()}
        )
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace, env=step_env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False,
        )  # fmt: skip
        run.returncodes.append(done.returncode)
        run.logs.append(f"--- {step['name']} (exit {done.returncode})\n{done.stdout}{done.stderr}")
        if "id" in step:
            run.step_outputs[step["id"]] = read_github_output(output)
        if done.returncode != 0:
            break
    run.summary = summary.read_text()
    run.outputs = {
        name: substitute(str(spec["value"]), context, run.step_outputs) for name, spec in action["outputs"].items()
    }
    return run


def assert_key_only_masked(run: ActionRun, api_key: str) -> None:
    """The key appears in the output only in the runner's ``::add-mask::`` command."""
    for log in run.logs:
        for line in log.splitlines():
            assert api_key not in line or line == f"::add-mask::{api_key}", f"a step printed the API key: {line}"


# --- against running services -----------------------------------------------------------


@pytest.fixture(scope="module")
def action_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout, copied as the runner downloads an action (no .git, venv or build output)."""
    path = tmp_path_factory.mktemp("action") / "execution-proof"
    shutil.copytree(REPO, path, symlinks=True, ignore=COPY_IGNORED)
    return path


@pytest.fixture(scope="module")
def runner_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-temp")


@dataclass
class Service:
    process: ServiceProcess
    api_key: str


def start_service(
    pool: ServicePool, redis_server: RedisServer, folder: Path, database: int
) -> tuple[Service, str, dict[str, str]]:
    """A service with a log of its own in its own Redis database: the service, the database's
    URL and the log's settings (for a worker)."""
    redis_url = redis_server.url.rsplit("/", 1)[0] + f"/{database}"
    redis.Redis.from_url(redis_url).flushdb()
    log_env = log_settings(folder / "log")
    process = pool.start(redis_url=redis_url, env=log_env)
    api_key = str(create_key_cli(redis_url, project=f"action-{database}")["api_key"])
    return Service(process, api_key), redis_url, log_env


@pytest.fixture(scope="module")
def service(
    module_services: ServicePool,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    """With a log and a worker integrating it."""
    folder = tmp_path_factory.mktemp("action-service")
    started, redis_url, log_env = start_service(module_services, redis_server, folder, 2)
    worker = WorkerProcess(folder, {"REDIS_URL": redis_url, **log_env})
    try:
        yield started
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def service_without_worker(
    module_services: ServicePool,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Service:
    """With a log and no worker: no receipt is ever integrated, every proof stays pending."""
    folder = tmp_path_factory.mktemp("action-service-pending")
    return start_service(module_services, redis_server, folder, 3)[0]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    (path / "dist" / "lib").mkdir(parents=True)
    (path / "dist" / "app.tar.gz").write_bytes(b"the application\x00" + secrets.token_bytes(16))
    (path / "dist" / "lib" / "core.so").write_bytes(b"a library")
    (path / "dist" / "notes with spaces.txt").write_text("a name with spaces\n")
    (path / "SBOM.json").write_text('{"packages": []}\n')
    (path / "-release.sig").write_bytes(b"a name the command line would read as an option")
    return path


def runner_env() -> dict[str, str]:
    return {"GITHUB_SHA": secrets.token_hex(20), "GITHUB_RUN_ID": str(secrets.randbelow(10**10))}


def sha256_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def client_tool(run: ActionRun, name: str) -> str:
    """A program of the client the action installed."""
    return str(Path(run.step_outputs["client"]["bin"]) / name)


def pinned_trust_root(service: Service, workspace: Path) -> str:
    """A trust root of ``service`` committed to the user's repository: its path from the workspace."""
    relative = ".github/execution-proof-trust-root.json"
    (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
    made = run_cli("trust-root", "--base-url", service.process.base_url, "--out", str(workspace / relative))
    assert made.returncode == 0, made.stdout + made.stderr
    return relative


def assert_summary_names_no_runner_path(run: ActionRun, runner_temp: Path, workspace: Path) -> None:
    """The step summary names the files as the artifact holds them, never where the runner put them."""
    assert "`bundle.json`" in run.summary and "`receipt.json`" in run.summary, run.summary
    assert f"`{Path(run.outputs['attestation-path']).name}`" in run.summary, run.summary
    assert run.outputs["receipt-id"] in run.summary
    paths = (run.outputs["bundle-path"], run.outputs["attestation-path"])
    for path in (str(runner_temp), str(workspace), *paths, "RUNNER_TEMP"):
        assert path not in run.summary, f"the summary names a runner path: {run.summary}"


def check_offline(run: ActionRun, service: Service, workspace: Path) -> None:
    """``trust-root`` from the service, then ``verify`` of the bundle against it, with no
    service to ask (signature, log inclusion against the pinned log key)."""
    client = client_tool(run, "execution-proof")
    env = clean_env({"PYTHONPATH": None})
    made = subprocess.run(
        [client, "trust-root", "--base-url", service.process.base_url, "--out", "trust-root.json"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    offline = subprocess.run(
        [client, "verify", run.outputs["bundle-path"], "--trust-root", "trust-root.json"],
        cwd=workspace, env={**env, "SERVICE_BASE_URL": "http://127.0.0.1:9"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert offline.returncode == 0, offline.stdout + offline.stderr
    check_attestation(run, workspace, env)


def check_attestation(run: ActionRun, workspace: Path, env: dict[str, str]) -> None:
    """The saved attestation of a service with a log: the Sigstore bundle of the receipt, whose
    log entry verifies against the trust root's log; its key, offline, has no certificate at
    hand (NOT VERIFIED), and with ``--online`` the service's certificate makes it VALID."""
    client = client_tool(run, "execution-proof")
    path = Path(run.outputs["attestation-path"])
    assert path.name == f"{run.outputs['receipt-id']}.sigstore.json", path
    document = orjson.loads(path.read_bytes())
    assert document["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    (entry,) = document["verificationMaterial"]["tlogEntries"]
    assert entry["kindVersion"] == {"kind": "dsse", "version": "0.0.2"}
    bundle = orjson.loads(Path(run.outputs["bundle-path"]).read_bytes())
    assert document["dsseEnvelope"] == bundle["attestation"], "the bundle carries the same envelope"

    def verify(*options: str) -> dict[str, Any]:
        done = subprocess.run(
            [client, "verify", str(path), "--trust-root", "trust-root.json", "--json", *options],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        report: dict[str, Any] = orjson.loads(done.stdout)
        assert done.returncode == (0 if report["verdict"] == "VALID" else 1), done.stdout + done.stderr
        return report

    offline = verify()
    assert (offline["verdict"], offline["reason"]) == ("NOT VERIFIED", "no_key_certificate"), offline
    assert offline["checks"]["log_inclusion"] is True, "the entry's proof is checked offline all the same"
    online = verify("--online")
    assert (online["verdict"], online["reason"]) == ("VALID", None), online
    assert online["attestation"]["form"] == "sigstore" and online["checks"]["attestation_signature"] is True


@pytest.mark.slow
@pytest.mark.real_redis
def test_action_submits_several_files_as_one_manifest_and_saves_the_bundle_with_its_proof(
    service: Service, action_path: Path, runner_temp: Path, workspace: Path
) -> None:
    env = runner_env()
    inputs = {
        # Blank lines, spaces around a line, a file named twice, a name starting with '-'.
        "files": "dist/**\n  SBOM.json  \n\ndist/app.tar.gz\n-*.sig",
        "service-url": service.process.base_url,
        "api-key": service.api_key,
    }
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=env)
    assert run.ok, run.failure()
    assert_key_only_masked(run, service.api_key)
    assert [path.name for path in runner_temp.glob("execution-proof-client-*")] != [], "the client's venv"

    outputs = run.outputs
    assert re.fullmatch(r"rcpt_[0-9A-Z]{26}", outputs["receipt-id"]), outputs
    manifest = Path(outputs["manifest-path"])
    assert manifest.name == "SHA256SUMS" and manifest.is_file()
    listed = [line.split("  ", 1) for line in manifest.read_text().splitlines()]
    expected = ["./-release.sig", "SBOM.json", "dist/app.tar.gz", "dist/lib/core.so", "dist/notes with spaces.txt"]
    assert [path for _, path in listed] == expected, "each file once, sorted by path"
    for digest, path in listed:
        assert "sha256:" + digest == sha256_file(workspace / path), path
    sha256sum = shutil.which("sha256sum")
    if sha256sum is not None:
        checked = subprocess.run([sha256sum, "-c", str(manifest)], cwd=workspace, capture_output=True, check=False)
        assert checked.returncode == 0, checked.stdout

    receipt = orjson.loads(Path(outputs["receipt-path"]).read_bytes())["receipt"]
    assert receipt["receipt_id"] == outputs["receipt-id"]
    assert receipt["input_hash"] == sha256_file(manifest)
    assert receipt["tags"] == {"template": "release.v1", "commit": env["GITHUB_SHA"]}
    assert receipt["code_ref"] == f"git:{env['GITHUB_SHA']}"
    assert receipt["run_id"] == env["GITHUB_RUN_ID"]

    bundle = orjson.loads(Path(outputs["bundle-path"]).read_bytes())
    assert bundle["receipt"] == receipt
    assert bundle["log"]["proof"] is not None, "the bundle was saved without its log proof"
    check_offline(run, service, workspace)

    # No trust root given: the summary says what the check was worth, and what to give.
    assert_summary_names_no_runner_path(run, runner_temp, workspace)
    assert "`SHA256SUMS`" in run.summary
    assert "checked only against the keys published by the service that issued it" in run.summary
    assert "give its path as the input `trust-root`" in run.summary
    assert "::notice::the bundle was checked only against the service's own keys" in run.logs[-1]


@pytest.mark.slow
@pytest.mark.real_redis
def test_action_submits_one_file_itself_and_verifies_it_against_the_trust_root_given(
    service: Service, action_path: Path, runner_temp: Path, workspace: Path
) -> None:
    trust_root = pinned_trust_root(service, workspace)
    inputs = {
        "files": "dist/*.tar.gz",
        "service-url": service.process.base_url,
        "api-key": service.api_key,
        "trust-root": trust_root,
    }
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=runner_env())
    assert run.ok, run.failure()
    assert "VALID" in run.logs[-1], run.logs[-1]
    assert f"The bundle was verified against the trust root `{trust_root}`." in run.summary, run.summary
    assert "only against the keys" not in run.summary
    assert_summary_names_no_runner_path(run, runner_temp, workspace)
    assert "SHA256SUMS" not in run.summary, "one file: no manifest to name"
    assert run.outputs["manifest-path"] == ""
    bundle = orjson.loads(Path(run.outputs["bundle-path"]).read_bytes())
    assert bundle["receipt"]["receipt_id"] == run.outputs["receipt-id"]
    assert bundle["receipt"]["input_hash"] == sha256_file(workspace / "dist" / "app.tar.gz")
    assert bundle["log"]["proof"] is not None
    check_offline(run, service, workspace)
    installed = list(runner_temp.glob("execution-proof-client-*"))
    assert len(installed) == 1, f"a second use of the action installs nothing: {installed}"


@pytest.mark.slow
@pytest.mark.real_redis
def test_action_fails_and_saves_no_bundle_while_the_proof_is_pending(
    service_without_worker: Service, action_path: Path, runner_temp: Path, workspace: Path
) -> None:
    service = service_without_worker
    inputs = {
        "files": "dist/**",
        "service-url": service.process.base_url,
        "api-key": service.api_key,
        "wait": "2",
    }
    started = time.monotonic()
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=runner_env())
    elapsed = time.monotonic() - started
    assert not run.ok, run.failure()
    steps = load_action()["runs"]["steps"]
    failed = steps[len(run.returncodes) - 1]
    assert failed["id"] == "bundle", run.failure()
    assert run.returncodes[-1] == 1, run.failure()
    assert "no log proof" in run.logs[-1]
    assert run.outputs["receipt-id"], "the receipt was issued; only its proof is pending"
    assert run.outputs["bundle-path"] == "" and run.outputs["attestation-path"] == ""
    folder = Path(run.step_outputs["files"]["dir"])
    assert not list(folder.glob("*bundle*")), f"a bundle was saved without its proof: {list(folder.iterdir())}"
    assert elapsed < 120, f"the action took {elapsed:.0f} s for a wait of 2 s"
    assert_key_only_masked(run, service.api_key)


@pytest.fixture(scope="module")
def service_without_log(
    module_services: ServicePool,
    redis_server: RedisServer,
) -> Service:
    """A service that keeps no transparency log."""
    redis_url = redis_server.url.rsplit("/", 1)[0] + "/4"
    redis.Redis.from_url(redis_url).flushdb()
    process = module_services.start(redis_url=redis_url)
    return Service(process, str(create_key_cli(redis_url, project="action-no-log")["api_key"]))


@pytest.mark.slow
@pytest.mark.real_redis
def test_action_saves_the_envelope_from_a_service_without_a_log(
    service_without_log: Service, action_path: Path, runner_temp: Path, workspace: Path
) -> None:
    """No log: the bundle at once (no proof to wait for), and the attestation as the DSSE
    envelope, one line, which verifies against the service's keys."""
    service = service_without_log
    inputs = {"files": "dist/**", "service-url": service.process.base_url, "api-key": service.api_key}
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=runner_env())
    assert run.ok, run.failure()
    assert "log" not in orjson.loads(Path(run.outputs["bundle-path"]).read_bytes())
    path = Path(run.outputs["attestation-path"])
    assert path.name == f"{run.outputs['receipt-id']}.intoto.jsonl", path
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 1, "one line: an in-toto JSON Lines file"
    envelope = orjson.loads(text)
    assert set(envelope) == {"payloadType", "payload", "signatures"}
    statement = orjson.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicate"]["receipt"]["receipt_id"] == run.outputs["receipt-id"]
    assert statement["predicate"]["log_origin"] is None
    assert f"`{path.name}` (the in-toto attestation; output `attestation-path`)" in run.summary, run.summary
    client = client_tool(run, "execution-proof")
    checked = subprocess.run(
        [client, "verify", str(path), "--base-url", service.process.base_url, "--json"],
        cwd=workspace, env=clean_env({"PYTHONPATH": None}), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert orjson.loads(checked.stdout)["checks"]["attestation_signature"] is True


@pytest.mark.slow
def test_action_fails_on_a_pattern_that_matches_no_file(action_path: Path, runner_temp: Path, workspace: Path) -> None:
    """Before anything is submitted: a build output missing from the receipt is an error."""
    inputs = {"files": "dist/**\nbuild/*.whl", "service-url": "http://127.0.0.1:9", "api-key": "not-used"}
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=runner_env())
    assert not run.ok
    assert load_action()["runs"]["steps"][len(run.returncodes) - 1]["id"] == "files"
    assert "no file matches 'build/*.whl'" in run.logs[-1]
    assert run.outputs["receipt-id"] == ""


@pytest.mark.slow
@pytest.mark.real_redis
def test_action_fails_when_the_bundle_does_not_verify_against_the_trust_root(
    service: Service, action_path: Path, runner_temp: Path, workspace: Path
) -> None:
    """A trust root pinning another receipt root than the service's: the check fails, whatever
    the service itself says about its receipt."""
    from execution_proof.receipts.encoding import b64url_encode
    from execution_proof.receipts.key_certificates import root_kid
    from execution_proof.transparency.signer import SeedSigner

    trust_root = pinned_trust_root(service, workspace)
    document = orjson.loads((workspace / trust_root).read_bytes())
    assert document["receipt_roots"], document
    other = SeedSigner(secrets.token_bytes(32)).public_key()
    document["receipt_roots"] = [{"kid": root_kid(other), "public_key_base64url": b64url_encode(other)}]
    (workspace / trust_root).write_bytes(orjson.dumps(document))
    inputs = {
        "files": "dist/**",
        "service-url": service.process.base_url,
        "api-key": service.api_key,
        "trust-root": trust_root,
    }
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=runner_env())
    steps = load_action()["runs"]["steps"]
    assert len(run.returncodes) == len(steps), run.failure()
    assert run.returncodes[-1] == 1, run.failure()
    assert f"does not verify against the trust root '{trust_root}'" in run.logs[-1]
    assert run.outputs["bundle-path"], "the bundle was fetched; it is the check that refused it"
    assert "verified against" not in run.summary and run.outputs["receipt-id"] not in run.summary


def test_action_fails_at_once_on_a_windows_runner(action_path: Path, runner_temp: Path, workspace: Path) -> None:
    inputs = {"files": "dist/**", "service-url": "http://127.0.0.1:9", "api-key": "not-used"}
    env = {**runner_env(), "RUNNER_OS": "Windows"}
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=env)
    assert run.returncodes == [1], run.failure()
    assert "::error::this action supports Linux and macOS runners only, not Windows" in run.logs[0]
    assert run.outputs["receipt-id"] == "" and run.summary == ""


def test_action_fails_at_once_without_python_3_11(
    action_path: Path, runner_temp: Path, workspace: Path, tmp_path: Path
) -> None:
    """``python3`` and ``python`` on PATH both older than 3.11 (their version check exits 1)."""
    old = tmp_path / "old-python"
    old.mkdir()
    for name in ("python3", "python"):
        (old / name).write_text("#!/bin/sh\nexit 1\n")
        (old / name).chmod(0o755)
    inputs = {"files": "dist/**", "service-url": "http://127.0.0.1:9", "api-key": "not-used"}
    env = {**runner_env(), "PATH": f"{old}{os.pathsep}{os.environ['PATH']}"}
    run = run_action(inputs, action_path=action_path, runner_temp=runner_temp, workspace=workspace, env=env)
    assert run.returncodes == [1], run.failure()
    assert "::error::the client needs Python 3.11 or later on the runner" in run.logs[0]
