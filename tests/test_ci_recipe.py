"""The CI recipe (docs/ci.md): the GitHub Actions workflow's ``run:`` steps, executed by bash in
order against a running service, and the curl + jq + openssl verification script.

The workflow's steps run as GitHub runs a ``shell: bash`` step (``bash --noprofile --norc -eo
pipefail FILE``) in a fresh virtual environment whose bin comes first on PATH. Every recipe
installs the client from the project's git URL at ``EXECUTION_PROOF_REF``, never by name from an
index; its install line runs as written, with ``EXECUTION_PROOF_REF`` the commit of a git
repository holding this checkout, which git reads in place of the URL
(tests/wheel_build.py, ``git_install_env``), and the test checks that pip installed that
commit from that URL. The verification script is taken from docs/ci.md as written (the block after its
``ci-recipe`` marker) and run against the service, against the receipt test vectors, and
against receipts with a flipped signature byte or an edited field (served by a stub).
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
import redis
import yaml
from nacl.signing import SigningKey

from execution_proof.receipts.canonical import compute_receipt_hash
from execution_proof.transparency import note
from tests.conftest import REPO, RedisServer, auth, hash_of, missing_binary
from tests.servers import (
    ServicePool,
    ServiceProcess,
    WorkerProcess,
    clean_env,
    create_key_cli,
    service_pool_fixture,
    serving,
)
from tests.wheel_build import INSTALL_BY_NAME, INSTALL_FROM_GIT, Venv, assert_installed_from_git, git_install_env

WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"
CI_DOC = REPO / "docs" / "ci.md"
STEP_TIMEOUT_S = 600.0
LOG_ORIGIN = "ci-recipe.example/log"
RECIPE_TIMEOUT_S = 60.0
# Every recipe fetches the bundle so: with its log proof, or nothing saved (exit 1).
BUNDLE_WITH_PROOF = "execution-proof bundle receipt/receipt.json --wait 120 --out receipt/bundle.json"

module_services = service_pool_fixture("module")
service_factory = service_pool_fixture()


# --- the workflow file ------------------------------------------------------------------


def load_workflow() -> dict[Any, Any]:
    workflow: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return workflow


def the_job(workflow: Mapping[Any, Any]) -> dict[str, Any]:
    (job,) = workflow["jobs"].values()
    return dict(job)


def run_steps(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if "run" in step]


def step_using(job: Mapping[str, Any], action: str) -> dict[str, Any]:
    (step,) = [step for step in job["steps"] if str(step.get("uses", "")).startswith(action + "@")]
    return dict(step)


def test_workflow_is_complete_and_its_run_steps_are_plain_bash() -> None:
    workflow = load_workflow()
    # Quoted in the file: a bare `on` is the boolean true to YAML 1.1 readers such as PyYAML.
    assert True not in workflow
    assert "push" in workflow["on"]
    job = the_job(workflow)
    assert job["env"]["SERVICE_BASE_URL"] == "${{ vars.SERVICE_BASE_URL }}"
    assert job["defaults"]["run"]["shell"] == "bash"
    assert step_using(job, "actions/checkout")
    assert str(step_using(job, "actions/setup-python")["with"]["python-version"]) == "3.11"
    steps = run_steps(job)
    scripts = [step["run"] for step in steps]
    assert INSTALL_FROM_GIT in scripts[0].splitlines(), scripts[0]
    assert steps[0]["env"] == {"EXECUTION_PROOF_REF": "${{ vars.EXECUTION_PROOF_REF }}"}
    assert '"${EXECUTION_PROOF_REF:?' in scripts[0], "no install without the variable"
    assert not any(INSTALL_BY_NAME.search(script) for script in scripts), "installed by name from an index"
    assert all("EXECUTION_PROOF_REF" not in step.get("env", {}) for step in steps[1:])
    submit = [step for step in steps if "execution-proof submit" in step["run"]]
    assert len(submit) == 1
    assert submit[0]["env"] == {"SERVICE_API_KEY": "${{ secrets.SERVICE_API_KEY }}"}
    assert all("SERVICE_API_KEY" not in step.get("env", {}) for step in steps if step is not submit[0])
    for script in scripts:
        assert "${{" not in script, f"a run step needs GitHub to expand it: {script}"
        assert script.lstrip().startswith("set -euo pipefail"), script
    assert any("execution-proof hash" in script for script in scripts)
    assert any(BUNDLE_WITH_PROOF in script for script in scripts), "the bundle is fetched with its proof"
    assert not any("curl" in script for script in scripts), "no polling loop: `bundle --wait` waits"
    upload = step_using(job, "actions/upload-artifact")
    paths = upload["with"]["path"].split()
    assert {"receipt/receipt.json", "receipt/bundle.json"} <= set(paths)
    last_run = max(job["steps"].index(step) for step in steps)
    assert job["steps"].index(upload) > last_run, "the artifact is uploaded after every run step"


def hash_loop(script: str) -> list[str]:
    """The lines that write receipt/SHA256SUMS, from ``mkdir -p receipt`` to the loop's end."""
    lines = [line.strip() for line in script.splitlines()]
    start = lines.index("mkdir -p receipt")
    end = next(at for at, line in enumerate(lines) if line.startswith("done < <("))
    return lines[start : end + 1]


def test_gitlab_and_shell_recipes_do_what_the_workflow_does() -> None:
    job = the_job(load_workflow())
    (hash_step,) = [step for step in run_steps(job) if "execution-proof hash" in step["run"]]
    loop = hash_loop(hash_step["run"])
    upload = set(step_using(job, "actions/upload-artifact")["with"]["path"].split())

    build = yaml.safe_load(doc_block("gitlab"))["build"]
    script = "\n".join(build["script"])
    assert INSTALL_FROM_GIT in build["script"][0].splitlines()
    assert not INSTALL_BY_NAME.search(script)
    assert hash_loop(script) == loop
    assert '--tag "commit=$CI_COMMIT_SHA"' in script
    assert '--code-ref "git:$CI_COMMIT_SHA" --run-id "$CI_PIPELINE_ID"' in script
    assert BUNDLE_WITH_PROOF in script and "curl" not in script
    assert set(build["artifacts"]["paths"]) == upload

    shell = doc_block("shell-script")
    assert hash_loop(shell) == loop
    assert INSTALL_FROM_GIT in shell.splitlines() and not INSTALL_BY_NAME.search(shell)
    assert '--tag "commit=$COMMIT"' in shell
    assert BUNDLE_WITH_PROOF in shell and "curl" not in shell


# --- the run steps, end to end ----------------------------------------------------------


def log_settings(store: Path) -> dict[str, str]:
    """A transparency log of its own: a new log key, its origin, a log store in ``store``."""
    return {
        "LOG_SIGNING_KEY": note.Signer.generate(LOG_ORIGIN).encode(),
        "LOG_ORIGIN": LOG_ORIGIN,
        "LOG_STORE": f"file://{store}",
    }


@pytest.fixture(scope="module")
def service(
    module_services: ServicePool,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServiceProcess]:
    """The service with a transparency log (a log store of its own) and a worker integrating it:
    the recipe must wait for the inclusion proof before it fetches the bundle."""
    folder = tmp_path_factory.mktemp("ci-service")
    env = log_settings(folder / "log")
    redis.Redis.from_url(redis_server.url).flushdb()  # no other test's log state in this database
    worker = WorkerProcess(folder, {"REDIS_URL": redis_server.url, **env})
    try:
        yield module_services.start(redis_url=redis_server.url, env=env)
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def api_key(service: ServiceProcess, redis_server: RedisServer) -> str:
    return str(create_key_cli(redis_server.url, project="ci-recipe")["api_key"])


@pytest.mark.slow
@pytest.mark.real_redis
def test_workflow_run_steps_work_against_a_running_service(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    redis_server: RedisServer,
    service_factory: ServicePool,
) -> None:
    """The steps in order; the log's worker starts only once the bundle step has asked the
    service about the receipt (pending then: no worker has integrated it), so the step must
    wait for the inclusion proof to save a bundle holding it."""
    redis_url = redis_server.url.rsplit("/", 1)[0] + "/1"  # a database of its own: no other test's state
    redis.Redis.from_url(redis_url).flushdb()
    log_env = log_settings(tmp_path / "log")
    service = service_factory.start(redis_url=redis_url, env=log_env)
    api_key = str(create_key_cli(redis_url, project="ci-workflow")["api_key"])
    venv = Venv(tmp_path / "venv")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    commit, run_id = secrets.token_hex(20), str(secrets.randbelow(10**10))
    env = venv.env(
        {
            "GITHUB_SHA": commit,
            "GITHUB_RUN_ID": run_id,
            "SERVICE_BASE_URL": service.base_url,
            "SERVICE_API_KEY": api_key,
            **git_install_env(tmp_path_factory),
        }
    )
    job = the_job(load_workflow())
    outputs = []
    workers: list[WorkerProcess] = []
    try:
        for number, step in enumerate(run_steps(job)):
            script = tmp_path / f"step-{number}.sh"
            script.write_text(step["run"])
            process = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            if BUNDLE_WITH_PROOF in step["run"]:
                receipt_id = orjson.loads((workspace / "receipt" / "receipt.json").read_bytes())["receipt"][
                    "receipt_id"
                ]
                service.wait_for_output(rf"/v1/receipts/{receipt_id}/(?:log-proof|bundle)\b", timeout=60)
                workers.append(WorkerProcess(tmp_path, {"REDIS_URL": redis_url, **log_env}))
            stdout, stderr = process.communicate(timeout=STEP_TIMEOUT_S)
            assert process.returncode == 0, f"step {step.get('name')!r} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
            outputs.append(stdout + stderr)
    finally:
        for worker in workers:
            worker.stop()
    assert workers, "no step waited for the log proof"

    located = venv.run("python", "-c", "import execution_proof; print(execution_proof.__file__)", cwd=workspace)
    assert located.stdout.strip().startswith(str(venv.path)), "the client runs from the venv the workflow installed"
    assert_installed_from_git(venv.python, env, tmp_path_factory)
    receipt_dir = workspace / "receipt"
    upload = step_using(job, "actions/upload-artifact")
    for name in upload["with"]["path"].split():
        assert (workspace / name).is_file(), f"{name} is not there to upload"

    sums = (receipt_dir / "SHA256SUMS").read_text().splitlines()
    listed = dict(reversed(line.split("  ", 1)) for line in sums)
    built = sorted(p.relative_to(workspace).as_posix() for p in (workspace / "dist").rglob("*") if p.is_file())
    assert sorted(listed) == built and built
    for name, digest in listed.items():
        assert digest == hashlib.sha256((workspace / name).read_bytes()).hexdigest(), name

    saved = orjson.loads((receipt_dir / "receipt.json").read_bytes())
    receipt = saved["receipt"]
    assert receipt["tags"]["commit"] == commit
    assert receipt["code_ref"] == f"git:{commit}"
    assert receipt["run_id"] == run_id
    assert receipt["input_hash"] == "sha256:" + hashlib.sha256((receipt_dir / "SHA256SUMS").read_bytes()).hexdigest()
    bundle = orjson.loads((receipt_dir / "bundle.json").read_bytes())
    assert bundle["format"] == "eps-receipt-bundle"
    assert bundle["receipt"] == receipt

    verified = venv.run(
        "execution-proof", "verify", "receipt/receipt.json", "--input", "receipt/SHA256SUMS",
        "--base-url", service.base_url, cwd=workspace,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # docs/ci.md, "Verifying afterwards": the saved file names its service (no URL given here).
    assert saved["service_url"].rstrip("/") == service.base_url
    afterwards = venv.run(
        "execution-proof", "verify", "receipt/receipt.json", "--input", "receipt/SHA256SUMS", cwd=workspace
    )
    assert afterwards.returncode == 0, afterwards.stdout + afterwards.stderr
    # docs/ci.md, "Verifying afterwards": a trust root, then the bundle offline, log included.
    assert bundle["log"]["proof"] is not None, "the bundle was fetched before the log held the receipt"
    made = venv.run(
        "execution-proof", "trust-root", "--base-url", service.base_url, "--out", "trust-root.json", cwd=workspace
    )
    assert made.returncode == 0, made.stdout + made.stderr
    offline = venv.run(
        "execution-proof", "verify", "receipt/bundle.json", "--input", "receipt/SHA256SUMS",
        "--trust-root", "trust-root.json", "--json", cwd=workspace,
    )  # fmt: skip
    assert offline.returncode == 0, offline.stdout + offline.stderr
    checks = orjson.loads(offline.stdout)["checks"]
    assert checks["log_inclusion"] is True and checks["signature"] is True, checks
    for text in outputs:
        assert api_key not in text, "a step printed the API key"
    for path in workspace.rglob("*"):
        if path.is_file():
            assert api_key.encode() not in path.read_bytes(), f"{path} holds the API key"


@pytest.mark.slow
@pytest.mark.real_redis
def test_shell_script_recipe_works_against_a_running_service(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, service: ServiceProcess, api_key: str
) -> None:
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "tool.tar.gz").write_bytes(b"a build output")
    script = tmp_path / "receipt.sh"
    script.write_text(doc_block("shell-script"))
    commit, run_id = secrets.token_hex(20), f"nightly-{secrets.token_hex(4)}"
    env = clean_env(
        {
            "COMMIT": commit,
            "RUN_ID": run_id,
            "SERVICE_BASE_URL": service.base_url,
            "SERVICE_API_KEY": api_key,
            **git_install_env(tmp_path_factory),
        }
    )
    done, receipt = _run_recipe(["bash", str(script)], tmp_path, env, commit)
    assert receipt["run_id"] == run_id
    assert api_key not in done.stdout + done.stderr
    assert_installed_from_git(tmp_path / ".receipt-venv" / "bin" / "python", env, tmp_path_factory)

    # Without EXECUTION_PROOF_REF, the script stops before installing anything.
    unset = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env={**env, "EXECUTION_PROOF_REF": ""},
        capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert unset.returncode != 0 and "set EXECUTION_PROOF_REF" in unset.stderr, unset.stderr


@pytest.mark.slow
@pytest.mark.real_redis
def test_gitlab_script_works_against_a_running_service(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, service: ServiceProcess, api_key: str
) -> None:
    """The ``script:`` lines of docs/ci.md's .gitlab-ci.yml, in one bash, as GitLab's runner runs them."""
    venv = Venv(tmp_path / "venv")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script = tmp_path / "gitlab.sh"
    script.write_text("\n".join(yaml.safe_load(doc_block("gitlab"))["build"]["script"]) + "\n")
    commit, pipeline = secrets.token_hex(20), str(secrets.randbelow(10**8))
    env = venv.env(
        {
            "CI_COMMIT_SHA": commit,
            "CI_PIPELINE_ID": pipeline,
            "SERVICE_BASE_URL": service.base_url,
            "SERVICE_API_KEY": api_key,
            **git_install_env(tmp_path_factory),
        }
    )
    _, receipt = _run_recipe(["bash", "-e", str(script)], workspace, env, commit)
    assert receipt["code_ref"] == f"git:{commit}"
    assert receipt["run_id"] == pipeline
    assert_installed_from_git(venv.python, env, tmp_path_factory)


def _run_recipe(
    argv: list[str], cwd: Path, env: dict[str, str], commit: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run a recipe script to the end in ``cwd``: it must succeed and leave receipt/receipt.json
    (tagged with ``commit``) and receipt/bundle.json (that receipt, with its log proof)."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    receipt: dict[str, Any] = orjson.loads((cwd / "receipt" / "receipt.json").read_bytes())["receipt"]
    assert receipt["tags"]["commit"] == commit
    bundle = orjson.loads((cwd / "receipt" / "bundle.json").read_bytes())
    assert bundle["receipt"] == receipt and bundle["log"]["proof"] is not None
    return done, receipt


# --- the curl + jq + openssl script -----------------------------------------------------


def doc_block(name: str) -> str:
    """The code block after ``<!-- ci-recipe: NAME`` in docs/ci.md."""
    text = CI_DOC.read_text()
    after = text[text.index(f"<!-- ci-recipe: {name} ") :]
    match = re.search(r"```(?:sh|bash|yaml)\n(.*?)```", after, re.DOTALL)
    assert match is not None, f"no code block after the ci-recipe marker {name!r} in docs/ci.md"
    return match.group(1)


def recipe() -> str:
    return doc_block("curl-openssl-jq")


@pytest.fixture(scope="module")
def tools() -> None:
    for name in ("curl", "jq", "openssl"):
        if shutil.which(name) is None:
            missing_binary(name, "docs/ci.md's verification recipe uses curl, jq and openssl")
    version = subprocess.run(["openssl", "version"], capture_output=True, text=True, check=False).stdout
    found = re.match(r"OpenSSL (\d+)\.", version)
    if found is None or int(found.group(1)) < 3:
        missing_binary("OpenSSL 3", f"`openssl pkeyutl -rawin` verifies Ed25519 from 3.0 (found {version.strip()!r})")


def run_recipe(tmp_path: Path, base_url: str, receipt_id: str, input_file: Path | None = None) -> Any:
    script = tmp_path / "verify-receipt.sh"
    script.write_text(recipe())
    env: dict[str, str | None] = {"SERVICE_BASE_URL": base_url, "RECEIPT_ID": receipt_id}
    if input_file is not None:
        env["INPUT_FILE"] = str(input_file)
    return subprocess.run(
        ["bash", str(script)], env=clean_env(env), capture_output=True, text=True, timeout=RECIPE_TIMEOUT_S, check=False
    )


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"SERVICE_BASE_URL": None}, "CANNOT CHECK: set SERVICE_BASE_URL"),
        ({"SERVICE_BASE_URL": ""}, "CANNOT CHECK: set SERVICE_BASE_URL"),
        ({"RECEIPT_ID": None}, "CANNOT CHECK: set RECEIPT_ID"),
        ({"TMPDIR": "/nonexistent/eps-recipe"}, "CANNOT CHECK: line "),
    ],
    ids=["no-service-url", "empty-service-url", "no-receipt-id", "a-command-fails"],
)
def test_recipe_that_cannot_start_exits_2(tmp_path: Path, env: dict[str, str | None], why: str) -> None:
    """Its own contract: 2 is "could not check"; bash's ``${VAR:?}`` and ``set -e`` exit 1."""
    script = tmp_path / "verify-receipt.sh"
    script.write_text(recipe())
    given: dict[str, str | None] = {"SERVICE_BASE_URL": "http://127.0.0.1:9", "RECEIPT_ID": "rcpt_x", **env}
    done = subprocess.run(
        ["bash", str(script)],
        env=clean_env(given),
        capture_output=True,
        text=True,
        timeout=RECIPE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert why in done.stderr


class Stub(BaseHTTPRequestHandler):
    """Answers GET with fixed bodies (``routes``: path to bytes), 404 otherwise."""

    routes: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.routes.get(self.path.split("?", 1)[0])
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: Any) -> None:
        pass


def stub_service(receipt: Mapping[str, Any], keys: Mapping[str, Any]) -> Any:
    """A service that answers the receipt and the key set given."""
    routes = {
        f"/v1/receipts/{receipt['receipt_id']}": orjson.dumps({"ok": True, "receipt": receipt}),
        "/v1/public-key": orjson.dumps(keys),
    }
    handler = type("RecipeStub", (Stub,), {"routes": routes})
    return serving(ThreadingHTTPServer(("127.0.0.1", 0), handler))


@pytest.fixture
def issued(service: ServiceProcess, api_key: str, tmp_path: Path) -> dict[str, Any]:
    """A receipt the service issued for a local file: the receipt, the key set, the file."""
    data = tmp_path / "input.bin"
    data.write_bytes(b"verified with curl, jq and openssl")
    body = {
        "input_hash": "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest(),
        "output_hash": hash_of("ci-recipe-output"),
        "code_ref": "git:" + "a" * 40,
        "tags": {
            "commit": "a" * 40,
            "note": 'quote " back\\slash / \u00e9t\u00e9 \U0001d11e',
            "nonce": secrets.token_hex(8),  # a new request each time, never an idempotent replay
        },
    }
    created = httpx.post(service.base_url + "/v1/receipts", content=orjson.dumps(body), headers=auth(api_key))
    assert created.status_code == 201, created.text
    keys = httpx.get(service.base_url + "/v1/public-key", timeout=10).json()
    return {"receipt": created.json()["receipt"], "keys": keys, "input": data}


@pytest.mark.slow
@pytest.mark.real_redis
@pytest.mark.usefixtures("tools")
def test_recipe_verifies_a_receipt_from_the_service(
    service: ServiceProcess, issued: dict[str, Any], tmp_path: Path
) -> None:
    receipt_id = issued["receipt"]["receipt_id"]
    done = run_recipe(tmp_path, service.base_url, receipt_id, issued["input"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"VALID: {receipt_id}: receipt_hash recomputed, Ed25519 signature by ")
    assert "matches input_hash" in done.stdout

    other = tmp_path / "other.bin"
    other.write_bytes(b"not the input")
    mismatch = run_recipe(tmp_path, service.base_url, receipt_id, other)
    assert mismatch.returncode == 1
    assert "does not match input_hash" in mismatch.stderr

    unknown = run_recipe(tmp_path, service.base_url, "rcpt_01KF0HJ080VECT0000000000ZZ")
    assert unknown.returncode == 2
    assert "CANNOT CHECK" in unknown.stderr


def flip_signature_byte(receipt: dict[str, Any]) -> None:
    raw = bytearray(base64.urlsafe_b64decode(receipt["signature"] + "=="))
    raw[10] ^= 0x01
    receipt["signature"] = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def edit_a_tag(receipt: dict[str, Any]) -> None:
    receipt["tags"] = {**receipt["tags"], "commit": "b" * 40}


@pytest.mark.slow
@pytest.mark.real_redis
@pytest.mark.usefixtures("tools")
@pytest.mark.parametrize(
    ("tamper", "why"),
    [(flip_signature_byte, "the Ed25519 signature by"), (edit_a_tag, "receipt_hash does not match")],
    ids=["flipped-signature-byte", "edited-tag"],
)
def test_recipe_rejects_a_tampered_receipt(issued: dict[str, Any], tmp_path: Path, tamper: Any, why: str) -> None:
    receipt = dict(issued["receipt"])
    with stub_service(receipt, issued["keys"]) as base:
        assert run_recipe(tmp_path, base, receipt["receipt_id"]).returncode == 0, "the untouched copy verifies"
    tamper(receipt)
    with stub_service(receipt, issued["keys"]) as base:
        done = run_recipe(tmp_path, base, receipt["receipt_id"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "VALID" not in done.stdout
    assert f"INVALID: {why}" in done.stderr


def resign(case: Mapping[str, Any], receipt: dict[str, Any]) -> dict[str, Any]:
    """``receipt`` hashed and signed again with the case's test key (the vectors hold its seed)."""
    receipt["receipt_hash"] = compute_receipt_hash(receipt)
    signature = SigningKey(bytes.fromhex(case["private_key_seed_hex"])).sign(receipt["receipt_hash"].encode()).signature
    receipt["signature"] = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    return receipt


@pytest.mark.slow
@pytest.mark.usefixtures("tools")
def test_recipe_on_the_vectors_verifies_what_jq_canonicalizes_and_refuses_the_rest(
    vectors: dict[str, Any], tmp_path: Path
) -> None:
    """jq -cS is RFC 8785 for a receipt except U+007F and keys from U+E000 to U+FFFF (docs/ci.md)."""
    verdicts = {}
    for case in vectors["cases"]:
        with stub_service(case["receipt"], vectors["public_keys"]) as base:
            done = run_recipe(tmp_path, base, case["receipt"]["receipt_id"])
        verdicts[case["name"]] = done.returncode
        if case["name"] == "all-fields-unicode":
            assert "U+007F" in done.stderr, done.stderr
        else:
            assert done.stdout.startswith("VALID: "), (case["name"], done.stdout, done.stderr)
    assert verdicts.pop("all-fields-unicode") == 2
    assert set(verdicts.values()) == {0} and len(verdicts) == 6

    (case,) = [case for case in vectors["cases"] if case["name"] == "all-fields-unicode"]
    receipt = dict(case["receipt"])
    assert any("\x7f" in value for value in receipt["tags"].values())
    assert any("\ue000" <= ch <= "\uffff" for key in receipt["tags"] for ch in key)
    receipt["tags"] = {key: value.replace("\x7f", "") for key, value in receipt["tags"].items()}
    with stub_service(resign(case, receipt), vectors["public_keys"]) as base:
        order = run_recipe(tmp_path, base, receipt["receipt_id"])
    assert order.returncode == 2 and "U+E000 to U+FFFF" in order.stderr, order.stderr

    receipt["tags"] = {key: value for key, value in receipt["tags"].items() if not re.search("[\ue000-\uffff]", key)}
    with stub_service(resign(case, receipt), vectors["public_keys"]) as base:
        rest = run_recipe(tmp_path, base, receipt["receipt_id"])
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert rest.stdout.startswith("VALID: ")
