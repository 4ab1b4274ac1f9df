"""fly.toml and the Dockerfile, checked against the code they deploy (docs/deploy.md).

A deploy file that names a verb the CLI does not have, a port nothing listens on, a health
path that is not a route, or a variable the code never reads fails here, not in production.
The image is also run for real: the build stage's COPY sources, copied to an empty directory,
build the wheel its `pip install '.[server]'` installs; that installed copy serves pages and
issues receipts on a real Redis (no Docker daemon needed).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from sanic.config import DEFAULT_CONFIG

from execution_proof.cli.main import GROUPS, _parser
from execution_proof.receipts.encoding import b64url_encode
from execution_proof.runtime.settings import ConfigError, load_settings, require_log_store, require_receipt_root
from execution_proof.runtime.signers import open_root
from execution_proof.transparency import cosignature, note, tlog
from execution_proof.transparency.note import Signer
from execution_proof.transparency.signer import SeedSigner, write_key_file
from tests.conftest import REPO, free_port, hash_of
from tests.servers import ServicePool, run_cli, service_pool_fixture

INSTALLED = (sys.executable, "-m", "execution_proof")
"""The installed copy's command line (the image's ``execution-proof`` is this entry point)."""

FLY = tomllib.loads((REPO / "fly.toml").read_text())
FLY_ENV: dict[str, str] = FLY["env"]
CODE_DIRS = ("receipts", "runtime", "kv", "jobs", "web", "cli")
service_factory = service_pool_fixture()


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [argument for name, argument in self.instructions if name == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"no {keyword} in the stage FROM {self.base}"
        return found[-1]


def dockerfile_stages(text: str) -> list[Stage]:
    """Instructions per stage: comments dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    stages: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, argument = line.strip().partition(" ")
        keyword, argument = keyword.upper(), argument.strip()
        if keyword == "FROM":
            words = argument.split()
            stages.append(Stage(base=words[0], name=words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append((keyword, argument))
    return stages


STAGES = dockerfile_stages((REPO / "Dockerfile").read_text())
IMAGE = STAGES[-1]


def command_words(command: str) -> list[str]:
    """A Dockerfile CMD (exec form) or a fly.toml process command, as argv."""
    return list(json.loads(command)) if command.startswith("[") else shlex.split(command)


def assert_runs_the_console_script(argv: list[str], verb: str) -> None:
    """``execution-proof VERB ...``: the installed console script (pyproject's), and a verb
    with arguments the command line accepts."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert argv[0] in scripts, argv
    assert scripts[argv[0]] == "execution_proof.cli.main:run"
    assert argv[1] == verb
    parsed = _parser(GROUPS).parse_args(argv[1:])  # the CLI accepts exactly these arguments
    assert parsed.verb == verb


# --- fly.toml -------------------------------------------------------------------------------


def test_fly_process_groups_run_the_web_service_and_the_worker() -> None:
    processes = FLY["processes"]
    assert set(processes) == {"web", "worker"}
    assert_runs_the_console_script(command_words(processes["web"]), "serve")
    assert_runs_the_console_script(command_words(processes["worker"]), "worker")


def test_fly_http_service_is_the_web_group_on_the_port_the_service_listens_on() -> None:
    http = FLY["http_service"]
    assert http["processes"] == ["web"]
    assert http["internal_port"] == int(FLY_ENV["PORT"])
    # `serve` takes its port and host from PORT and HOST when no flag is given (the fly command has none).
    assert "--port" not in command_words(FLY["processes"]["web"])
    serve = _parser(GROUPS).parse_args(["serve"])
    assert serve.port == 8000, "the parser default (PORT unset in this test process)"
    assert FLY_ENV["HOST"] == "0.0.0.0", "Fly's proxy connects to the machine's address, not loopback"
    assert int(FLY_ENV["WEB_WORKERS"]) >= 2, "several Sanic workers per web machine"
    concurrency = http["concurrency"]
    assert concurrency["type"] == "requests"
    assert 0 < concurrency["soft_limit"] <= concurrency["hard_limit"]


async def test_fly_health_check_path_is_the_health_route(client: Any) -> None:
    (check,) = FLY["http_service"]["checks"]
    assert check["method"] == "GET"
    path = check["path"]
    assert path == "/health"
    _, response = await client.get(path)
    assert response.status_code == 200
    assert response.json["store"] == "ok"
    # The check's timeout leaves room for /health's own 1 s store probe.
    assert float(check["timeout"].rstrip("s")) > 1.0


def test_fly_env_names_only_variables_the_code_reads() -> None:
    sources = (
        "\n".join(
            path.read_text() for directory in CODE_DIRS for path in (REPO / "execution_proof" / directory).rglob("*.py")
        )
        + (REPO / "service.py").read_text()
    )
    for name in FLY_ENV:
        if name.startswith("SANIC_"):
            assert name.removeprefix("SANIC_") in DEFAULT_CONFIG, f"{name} is not a Sanic setting"
        else:
            assert re.search(rf"[\"']{name}[\"']", sources), f"fly.toml sets {name}, which no code reads"


def test_fly_env_is_a_valid_production_configuration() -> None:
    """The [env] block plus the secrets a deploy sets gives settings the service accepts."""
    secrets = {
        "REDIS_URL": "redis://redis.internal:6379",
        "RECEIPT_ROOT_KEY": "env:RECEIPT_ROOT_SEED",
        "RECEIPT_ROOT_SEED": b64url_encode(SeedSigner.generate().seed),
    }
    settings = load_settings({**FLY_ENV, **secrets})
    require_log_store(settings)  # no log key: no log, nothing required
    require_receipt_root(settings)
    assert settings.receipt_root == "env:RECEIPT_ROOT_SEED"
    open_root(settings.receipt_root, environ=secrets)  # the runbook's root opens from its secret
    with pytest.raises(ConfigError, match="RECEIPT_ROOT_KEY"):
        require_receipt_root(load_settings({**FLY_ENV, "REDIS_URL": secrets["REDIS_URL"]}))
    assert settings.client_ip.real_ip_header == "Fly-Client-IP"
    assert settings.client_ip.proxies_count == 0, "only the configured header, no X-Forwarded-For counting"
    assert settings.env == "production"
    assert settings.public_base_url == FLY_ENV["PUBLIC_BASE_URL"]
    for secret in (
        "REDIS_URL",
        "RECEIPT_ROOT_KEY",
        "RECEIPT_ROOT_SEED",
        "PAYMENT_WEBHOOK_SECRET",
        "HUMAN_CHECK_SECRET",
    ):
        assert secret not in FLY_ENV, f"{secret} is a secret: `fly secrets set`, never fly.toml"
    # With the log's key, the runbook's LOG_STORE (a shared bucket) is what lets both groups start.
    origin = urlsplit(FLY_ENV["PUBLIC_BASE_URL"]).netloc + "/v1/log"
    log_secrets = {**secrets, "LOG_SIGNING_KEY": Signer.generate(origin).encode()}
    with pytest.raises(ConfigError, match="LOG_STORE"):
        require_log_store(load_settings({**FLY_ENV, **log_secrets}))
    with_store = load_settings({**FLY_ENV, **log_secrets, "LOG_STORE": "s3://eps-log-bucket/log"})
    require_log_store(with_store)
    assert with_store.log_origin == origin
    assert with_store.log_public_url == FLY_ENV["PUBLIC_BASE_URL"] + "/v1/log/"


def test_fly_stops_gracefully_within_its_kill_timeout() -> None:
    assert FLY["kill_signal"] == "SIGTERM"
    grace = float(FLY_ENV["SANIC_GRACEFUL_SHUTDOWN_TIMEOUT"])
    assert FLY["kill_timeout"] > grace, "Fly would SIGKILL before Sanic's graceful stop ends"
    assert IMAGE.last("STOPSIGNAL") == FLY["kill_signal"]


def test_fly_scrapes_metrics_on_the_metrics_port_of_both_groups() -> None:
    port = int(FLY_ENV["METRICS_PORT"])
    assert port != FLY["http_service"]["internal_port"], "metrics must not share the public port"
    (metrics,) = FLY["metrics"]
    assert metrics["port"] == port
    assert metrics["path"] == "/metrics"
    assert set(metrics["processes"]) == {"web", "worker"}
    worker_check = FLY["checks"]["worker_alive"]
    assert worker_check["processes"] == ["worker"]
    assert (worker_check["port"], worker_check["path"]) == (port, "/metrics")


# --- Dockerfile ------------------------------------------------------------------------------


def test_image_is_slim_python_matching_the_project() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    minimum = re.fullmatch(r">=(\d+\.\d+)", pyproject["project"]["requires-python"])
    assert minimum
    for stage in STAGES:
        assert re.fullmatch(rf"python:{re.escape(minimum.group(1))}(\.\d+)?-slim(-\w+)?", stage.base), stage.base
    assert sys.version_info[:2] == tuple(int(part) for part in minimum.group(1).split(".")), "tests run what ships"


def test_image_runs_as_a_non_root_user() -> None:
    user = IMAGE.last("USER").split(":")[0]
    assert user not in ("root", "0"), user
    created = " ".join(IMAGE.all("RUN"))
    assert re.search(rf"useradd\b.*--uid {user}\b", created) or re.search(rf"useradd\b.*\b{user}$", created)


def test_image_command_and_port_match_fly() -> None:
    argv = command_words(IMAGE.last("CMD"))
    assert_runs_the_console_script(argv, "serve")
    assert argv == command_words(FLY["processes"]["web"])
    assert int(IMAGE.last("EXPOSE")) == FLY["http_service"]["internal_port"]
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(IMAGE.all("ENV"))))
    assert env["PORT"] == FLY_ENV["PORT"]
    assert env["HOST"] == "0.0.0.0"
    assert env["PATH"].startswith("/venv/bin:"), "the console script is on PATH"


BUILD = STAGES[0]


def build_copies() -> list[str]:
    """Sources the build stage copies from the build context."""
    sources = []
    for argument in BUILD.all("COPY"):
        *paths, _destination = argument.split()
        sources.extend(paths)
    return sources


def test_image_installs_the_server_extra_and_holds_only_the_environment() -> None:
    assert re.search(r"pip install '\.\[server\]'", " ".join(BUILD.all("RUN"))), "the image installs .[server]"
    assert all(argument.startswith(f"--from={BUILD.name} ") for argument in IMAGE.all("COPY")), IMAGE.all("COPY")
    copied = build_copies()
    assert {"pyproject.toml", "execution_proof"} <= set(copied), "the one package folder holds every layer"
    for unwanted in ("tests", "docs", "bench", ".", ".git", ".venv", "service.py"):
        assert unwanted not in copied, f"the image copies {unwanted}"
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in ignored, ".dockerignore starts from nothing"
    for source in copied:
        assert (REPO / source).exists(), f"the Dockerfile copies {source}, which does not exist"
        assert f"!{source.rstrip('/')}/" in ignored or f"!{source}" in ignored, f".dockerignore drops {source}"


def install_like_the_image(tmp_path: Path) -> Path:
    """The build stage's sources, copied alone built into a
    wheel and installed (without its dependencies, which this venv has): the image's copy."""
    context = tmp_path / "context"
    context.mkdir()
    for source in build_copies():
        origin = REPO / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, context / source)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."],
        cwd=context, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("execution_proof-*.whl")
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    return site


@pytest.mark.slow
@pytest.mark.real_redis
def test_the_image_install_serves_issues_and_works_jobs(
    tmp_path: Path, redis_url: str, service_factory: ServicePool
) -> None:
    """The installed copy alone: `serve` (2 workers) issues a receipt and serves the pages and
    static files from inside the package, and `worker --burst` runs."""
    site = install_like_the_image(tmp_path)
    assert not any((site / name).exists() for name in CODE_DIRS), "no generic top-level import name"
    found = run_cli("--help", app_dir=site, entry=INSTALLED)
    assert found.returncode == 0, found.stderr
    # The installed copy is the one imported (not the repository's, installed in editable mode).
    where = subprocess.run(
        [sys.executable, "-c", "import execution_proof.web.app as app; print(app.__file__, app.STATIC_DIR)"],
        cwd=site, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    module, static = where.stdout.split()
    assert Path(module).is_relative_to(site) and Path(static).is_relative_to(site), where.stdout

    service = service_factory.start(workers=2, redis_url=redis_url, app_dir=site, entry=INSTALLED)
    created_key = run_cli(
        "keys",
        "create",
        "--project",
        "image",
        "--plan",
        "pro",
        env={"REDIS_URL": redis_url},
        app_dir=site,
        entry=INSTALLED,
    )
    assert created_key.returncode == 0, created_key.stderr
    api_key = orjson.loads(created_key.stdout)["api_key"]
    with httpx.Client(base_url=service.base_url, timeout=10) as http:
        created = http.post(
            "/v1/receipts",
            json={"input_hash": hash_of("image-in"), "output_hash": hash_of("image-out")},
            headers={"Authorization": f"Bearer {api_key}"},
        )
        assert created.status_code == 201, created.text
        for page in ("/verify", "/docs", "/claim/free"):
            response = http.get(page)
            assert response.status_code == 200, (page, response.text[:300])
            assert response.headers["content-type"].startswith("text/html")
        script = http.get("/static/verify.js")
        assert script.status_code == 200
        assert script.content == (site / "execution_proof/static/verify.js").read_bytes()
    burst = run_cli("worker", "--burst", env={"REDIS_URL": redis_url}, app_dir=site, entry=INSTALLED)
    assert burst.returncode == 0, burst.stderr


# --- fly.witness.toml ------------------------------------------------------------------------

WITNESS_FLY = tomllib.loads((REPO / "fly.witness.toml").read_text())
PLACEHOLDER = "REPLACE_WITH_THE_LOG_VKEY"


def test_the_witness_app_runs_witness_serve_on_its_port_volume_and_key_file() -> None:
    (name,) = WITNESS_FLY["processes"]
    words = command_words(WITNESS_FLY["processes"][name])
    assert_runs_the_console_script(words, "witness")
    args = _parser(GROUPS).parse_args(words[1:])
    assert (args.verb, args.action) == ("witness", "serve")
    assert WITNESS_FLY["http_service"]["internal_port"] == args.port and args.host == "0.0.0.0"
    (key_file,) = WITNESS_FLY["files"]
    assert key_file["guest_path"] == args.key_file and key_file["secret_name"]
    assert Path(args.state).parent == Path(WITNESS_FLY["mounts"]["destination"]), "the state lives on the volume"
    assert WITNESS_FLY["app"] != FLY["app"], "a witness is not a process group of the log's own app"
    assert [PLACEHOLDER in log for log in args.log] == [True]


@pytest.mark.slow
def test_the_witness_command_refuses_the_placeholder_and_serves_once_the_log_key_is_set(tmp_path: Path) -> None:
    words = command_words(WITNESS_FLY["processes"]["witness"])
    (key_path,) = (f["guest_path"] for f in WITNESS_FLY["files"])
    cosigner = cosignature.Cosigner.generate("witness.example.org")
    write_key_file(tmp_path / "witness.key", cosigner.encode())  # mode 0600: a key file others read is refused
    port = str(free_port())
    args = _parser(GROUPS).parse_args(words[1:])
    local = [
        {key_path: str(tmp_path / "witness.key"), args.state: str(tmp_path / "state.json")}.get(word, word)
        for word in words[1:]
    ]
    local[local.index("--port") + 1], local[local.index("--host") + 1] = port, "127.0.0.1"
    done = run_cli(*local)
    assert done.returncode == 2 and "--log example.com/log" in done.stderr, done.stderr
    log_key = note.Signer.generate("example.com/log")
    local[local.index("--log") + 1] = f"example.com/log={log_key.verifier.encode()}"
    process = subprocess.Popen(
        [sys.executable, "service.py", *local], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        checkpoint = note.sign_note(note.Checkpoint("example.com/log", 0, tlog.EMPTY_ROOT).text(), log_key)
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = httpx.post(f"http://127.0.0.1:{port}/add-checkpoint", content=f"old 0\n\n{checkpoint}")
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and process.poll() is None, "the witness did not start"
                time.sleep(0.05)
        assert answer.status_code == 200 and answer.text.startswith("\u2014 witness.example.org ")
    finally:
        process.terminate()
        process.wait(10)
