"""The wheel, as a user installs it: complete, one import name, a small client, the server as an extra.

The wheel of this checkout is built once (tests/wheel_build.py) and installed into fresh
virtual environments by name from its local directory (``PIP_FIND_LINKS``: the tests' own
mechanism; a user installs from a clone or the repository's git URL, which builds this
wheel): one without extras, where the client verbs run against a real service and a server
verb names the extra to install; one with ``[server]``, where ``execution-proof serve``
serves the verification page from the files inside the wheel.
"""

from __future__ import annotations

import contextlib
import email.parser
import hashlib
import os
import re
import signal
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import REPO, RedisServer
from tests.servers import ServicePool, ServiceProcess, create_key_cli, service_pool_fixture
from tests.wheel_build import Venv, built_wheel, venv_sizes_mb

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

PACKAGES = ("cli", "client", "web", "usecases", "jobs", "kv", "runtime", "receipts", "transparency")
SERVER_DISTRIBUTIONS = (
    "sanic", "redis", "rq", "fakeredis", "jinja2", "httpx", "prometheus-client", "obstore", "lupa", "hiredis",
)  # fmt: skip
TOOLING = {"pip", "setuptools", "wheel"}
MAX_BASE_DISTRIBUTIONS = 15
LISTENING_RE = re.compile(r"listening on (http://127\.0\.0\.1:(\d+))\b")

module_services = service_pool_fixture("module")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    """The wheel (no extra), from its local directory, in a fresh venv."""
    venv = Venv(tmp_path_factory.mktemp("venv-base") / "venv", wheel.parent)
    venv.pip_install("execution-proof")
    return venv


@pytest.fixture(scope="module")
def service(module_services: ServicePool, redis_server: RedisServer) -> ServiceProcess:
    return module_services.start(redis_url=redis_server.url)


@pytest.fixture(scope="module")
def api_key(service: ServiceProcess, redis_server: RedisServer) -> str:
    return str(create_key_cli(redis_server.url, project="wheel")["api_key"])


def expected_members() -> set[str]:
    """What the wheel must hold, read from the checkout: every module, page, template, script."""
    package = REPO / "execution_proof"
    members = {f"execution_proof/{path.relative_to(package).as_posix()}" for path in package.glob("*.py")}
    for directory in PACKAGES:
        for path in (package / directory).rglob("*.py"):
            if "__pycache__" not in path.parts:
                members.add(f"execution_proof/{path.relative_to(package).as_posix()}")
    for pattern in ("static/*", "web/templates/*.html", "kv/lua/*.lua", "jobs/lua/*.lua"):
        members |= {
            f"execution_proof/{p.relative_to(package).as_posix()}" for p in package.glob(pattern) if p.is_file()
        }
    return members


def test_wheel_holds_every_module_page_and_script_under_one_import_name(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = expected_members()
    assert "execution_proof/static/verify.html" in expected
    assert any(name.endswith(".lua") for name in expected)
    assert any(name.startswith("execution_proof/web/templates/") for name in expected)
    missing = sorted(expected - names)
    assert not missing, f"the wheel lacks {missing}"
    top_level = {name.split("/")[0] for name in names}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}
    assert top_level - dist_info == {"execution_proof"}, f"top-level names in the wheel: {sorted(top_level)}"
    for generic in (*PACKAGES, "static", "service.py", "tests", "bench"):
        assert not any(name == generic or name.startswith(generic + "/") for name in names), generic
    (info,) = dist_info
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert re.search(r"^execution-proof\s*=\s*execution_proof\.cli\.main:run$", entry_points, re.MULTILINE)


def test_wheel_metadata_names_its_license_urls_and_python(wheel: Path) -> None:
    """What an index page, ``pip show`` and a license scanner read: the license (PEP 639: an
    SPDX expression, and the file itself inside the dist-info), the project's URLs, the
    Python it needs."""
    archive = zipfile.ZipFile(wheel)
    (info,) = {name.split("/")[0] for name in archive.namelist() if name.split("/")[0].endswith(".dist-info")}
    metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert metadata["License-Expression"] == "Apache-2.0" or metadata["License"] == "Apache-2.0", metadata.items()
    assert metadata["Requires-Python"] == ">=3.11"
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL", []))
    assert set(urls) >= {"Homepage", "Documentation", "Source", "Issues", "Changelog"}, urls
    assert all(url.startswith("https://github.com/execution-proof/execution-proof") for url in urls.values()), urls
    classifiers = set(metadata.get_all("Classifier", []))
    assert "Programming Language :: Python :: 3.11" in classifiers and "Typing :: Typed" in classifiers
    tested = {c for c in classifiers if c.startswith("Programming Language :: Python :: 3.")}
    assert tested == {"Programming Language :: Python :: 3.11"}, "claim only the Python the tests run on"
    assert "execution_proof/py.typed" in archive.namelist()
    assert not any(c.startswith("License ::") for c in classifiers), "PEP 639: the expression, not a classifier"
    licenses = [name for name in archive.namelist() if name.startswith(f"{info}/") and name.endswith("/LICENSE")]
    assert licenses, f"no LICENSE in {info}"
    (license_file,) = licenses
    assert archive.read(license_file) == (REPO / "LICENSE").read_bytes()
    assert "LICENSE" in metadata.get_all("License-File", []), metadata.items()


def test_base_install_is_the_client_alone(base_venv: Venv, tmp_path: Path) -> None:
    installed = base_venv.distributions()
    assert "execution-proof" in installed
    server = sorted(set(SERVER_DISTRIBUTIONS) & set(installed))
    assert not server, f"the base install brought server distributions: {server}"
    counted = sorted(set(installed) - TOOLING)
    empty = Venv(tmp_path / "empty")
    size_mb = venv_sizes_mb(base_venv.site_packages()) - venv_sizes_mb(empty.site_packages())
    print(f"\nbase install: {len(counted)} distributions besides pip/setuptools/wheel, {size_mb:.1f} MB: {counted}")
    assert len(counted) <= MAX_BASE_DISTRIBUTIONS, counted
    assert (base_venv.bin / "execution-proof").is_file()


def test_base_install_has_no_generic_import_name(base_venv: Venv, tmp_path: Path) -> None:
    done = base_venv.run(str(base_venv.python), "-c", "import cli", cwd=tmp_path)
    assert done.returncode != 0
    assert "No module named 'cli'" in done.stderr
    code = (
        "import importlib.util\n"
        f"print([n for n in {list(PACKAGES)!r} + ['service'] if importlib.util.find_spec(n) is not None])"
    )
    found = base_venv.run(str(base_venv.python), "-c", code, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def test_base_install_server_verb_names_the_extra(base_venv: Venv, tmp_path: Path) -> None:
    done = base_venv.run("execution-proof", "serve", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "execution-proof[server]" in done.stderr
    assert "Traceback" not in done.stderr


def test_base_install_makes_log_witness_and_root_keys(base_venv: Venv, tmp_path: Path) -> None:
    """The key makers run on the light install (``--help`` says so); ``witness serve`` does not."""
    log_key = base_venv.run("execution-proof", "log-key", "new", "--origin", "log.example/v1/log", cwd=tmp_path)
    assert log_key.returncode == 0 and log_key.stdout.startswith("PRIVATE+KEY+log.example/v1/log+"), log_key.stderr
    witness = base_venv.run("execution-proof", "witness", "key", "new", "--name", "w.example", cwd=tmp_path)
    assert witness.returncode == 0 and witness.stdout.splitlines()[1].startswith("w.example+"), witness.stderr
    root = base_venv.run("execution-proof", "signing-key", "root", "new", "--signer", f"file:{tmp_path}/root.key")
    assert root.returncode == 0 and root.stdout.startswith('{"kid":"root-'), root.stderr
    serve = base_venv.run("execution-proof", "witness", "serve", "--key-file", "k", "--state", "s", "--log", "a=b")
    assert serve.returncode == 2 and "execution-proof[server]" in serve.stderr and "Traceback" not in serve.stderr
    helped = base_venv.run("execution-proof", "--help", cwd=tmp_path)
    assert "key makers (the light install too):\n  log-key new, witness key new, signing-key root new" in helped.stdout


def test_base_install_json_failure_asks_nothing(base_venv: Venv, tmp_path: Path) -> None:
    """No such file and not a receipt id: InvalidInput, not Unreachable (nothing listens at the
    default URL, so asking would have been Unreachable)."""
    done = base_venv.run("execution-proof", "bundle", "s2.tar.reciept.json", "--json", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    document = orjson.loads(done.stdout)
    assert document["ok"] is False and document["error"]["kind"] == "InvalidInput"


def test_base_install_hash(base_venv: Venv, tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"hashed by the installed client\x00\x01")
    done = base_venv.run("execution-proof", "hash", str(data), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()


def test_base_install_submit_then_verify_online_and_with_pinned_keys(
    base_venv: Venv, service: ServiceProcess, api_key: str, tmp_path: Path
) -> None:
    data = tmp_path / "input.bin"
    data.write_bytes(b"submitted by the installed client")
    env: dict[str, str | None] = {"SERVICE_API_KEY": api_key, "SERVICE_BASE_URL": service.base_url}
    saved = tmp_path / "receipt.json"
    done = base_venv.run(
        "execution-proof", "submit", "--input", str(data), "--tag", "from=wheel", "--save", str(saved),
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = orjson.loads(saved.read_bytes())["receipt"]
    assert receipt["input_hash"] == "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()
    assert receipt["tags"] == {"from": "wheel"}

    online = base_venv.run(
        "execution-proof", "verify", str(saved), "--input", str(data), "--base-url", service.base_url, cwd=tmp_path
    )
    assert online.returncode == 0, online.stdout + online.stderr
    keys = tmp_path / "keys.json"
    keys.write_bytes(httpx.get(service.base_url + "/v1/public-key", timeout=10).content)
    pinned = base_venv.run("execution-proof", "verify", str(saved), "--input", str(data), "--keys", str(keys))
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr

    tampered = tmp_path / "tampered.json"
    body = orjson.loads(saved.read_bytes())
    body["receipt"]["input_hash"] = "sha256:" + "0" * 64
    tampered.write_bytes(orjson.dumps(body))
    refused = base_venv.run("execution-proof", "verify", str(tampered), "--keys", str(keys))
    assert refused.returncode == 1, refused.stdout + refused.stderr


def test_base_install_trust_root_then_verify_against_it(
    base_venv: Venv, service: ServiceProcess, api_key: str, tmp_path: Path
) -> None:
    data = tmp_path / "input.bin"
    data.write_bytes(b"checked against a trust root")
    env: dict[str, str | None] = {"SERVICE_API_KEY": api_key, "SERVICE_BASE_URL": service.base_url}
    saved = tmp_path / "receipt.json"
    submitted = base_venv.run("execution-proof", "submit", "--input", str(data), "--save", str(saved), env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    root = tmp_path / "trust-root.json"
    done = base_venv.run("execution-proof", "trust-root", "--base-url", service.base_url, "--out", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    written = orjson.loads(root.read_bytes())
    published = httpx.get(service.base_url + "/v1/public-key", timeout=10).json()
    assert written["version"] == 2 and {r["kid"]: r["public_key_base64url"] for r in written["receipt_roots"]} == {
        r["kid"]: r["public_key_base64url"] for r in published["roots"]
    }
    receipt_id = orjson.loads(saved.read_bytes())["receipt"]["receipt_id"]
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(httpx.get(f"{service.base_url}/v1/receipts/{receipt_id}/bundle", timeout=10).content)
    checked = base_venv.run(
        "execution-proof", "verify", str(bundle), "--input", str(data), "--trust-root", str(root),
        env={"SERVICE_BASE_URL": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def served(tmp_path: Path, wheel: Path) -> Iterator[tuple[Venv, list[subprocess.Popen[bytes]]]]:
    venv = Venv(tmp_path / "venv-server", wheel.parent)
    started: list[subprocess.Popen[bytes]] = []
    yield venv, started
    for process in started:  # each in a session of its own: its workers go with it
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)
        assert process.returncode == 0, "serve did not stop cleanly on SIGTERM"


def test_server_extra_serves_the_verify_page_from_the_wheel(
    served: tuple[Venv, list[subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    venv, started = served
    venv.pip_install("execution-proof[server]")
    installed = venv.distributions()
    assert {"sanic", "redis", "jinja2"} <= set(installed)
    out = tmp_path / "serve.out"
    with open(out, "wb") as sink:
        # Started from an empty directory: the page can only come from the installed package.
        process = subprocess.Popen(
            [str(venv.bin / "execution-proof"), "serve", "--host", "127.0.0.1", "--port", "0"],
            cwd=tmp_path, env=venv.env(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    started.append(process)
    base = wait_listening(out, process)
    page = wait_answer(base + "/verify")
    assert page.status_code == 200
    assert "<html" in page.text.lower()
    for name in ("verify.js", "verify.css", "verify-core.js"):
        static = httpx.get(f"{base}/static/{name}", timeout=10)
        assert static.status_code == 200, name
        assert static.content == (REPO / "execution_proof" / "static" / name).read_bytes(), name


def wait_listening(out: Path, process: subprocess.Popen[bytes], timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        match = LISTENING_RE.search(out.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"serve did not print its address:\n{out.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)


def wait_answer(url: str, timeout: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
