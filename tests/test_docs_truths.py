"""Small truths the README, docs and --help tell a newcomer, checked against what the code
and the repository really do."""

from __future__ import annotations

import json
import re
import shlex

from execution_proof.receipts.limits import DEFAULT_LIMITS
from tests.conftest import REPO
from tests.servers import run_cli
from tests.wheel_build import INSTALL_BY_NAME, INSTALL_FROM_GIT

README = (REPO / "README.md").read_text()


def test_ci_paragraph_names_everything_ci_installs() -> None:
    """`.ci/run` installs these when missing; the README's CI paragraph must say so."""
    script = (REPO / ".ci" / "run").read_text()
    installed = re.findall(r"need_apt\+=\(([^)]+)\)", script)
    assert installed, "the CI script's install list was not found"
    paragraph = README[README.index("CI runs `bash .ci/run`") :].split("\n\n", 1)[0]
    names = {"redis-server": "`redis-server`", "nodejs": "Node.js", "chromium": "Chromium", "npm": "npm"}
    for package in (p for group in installed for p in shlex.split(group)):
        assert names.get(package, package) in paragraph, f"{package} is installed by CI but not named"


# Text a user reads: docs, recipes, pages, the action; CHANGELOG.md is history, tests/ has fixtures.
USER_TEXT = {".md", ".yml", ".yaml", ".html", ".js", ".toml", ".txt", ".sh"}
NOT_USER_TEXT = {".git", ".venv", "tests", "node_modules", "build", "dist", "CHANGELOG.md"}


def test_no_document_installs_the_client_by_name() -> None:
    """The name is not published on an index by the project: whoever registered it would run
    code where SERVICE_API_KEY lives. Documents install from the git URL or a clone."""
    hits = []
    for path in sorted(REPO.rglob("*")):
        relative = path.relative_to(REPO)
        if path.suffix not in USER_TEXT or not path.is_file() or NOT_USER_TEXT & set(relative.parts):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if INSTALL_BY_NAME.search(line):
                hits.append(f"{relative}:{number}: {line.strip()}")
    helped = run_cli("--help")
    assert helped.returncode == 0
    hits += [f"--help: {line}" for line in helped.stdout.splitlines() if INSTALL_BY_NAME.search(line)]
    assert not hits, "install from the repository's git URL at a reviewed ref instead:\n" + "\n".join(hits)
    readme = " ".join(README.split())
    assert INSTALL_FROM_GIT.removeprefix("python -m ") in readme, "the README's quick start installs from git"
    assert "pip install ." in readme


def test_the_install_by_name_pattern_catches_each_form() -> None:
    by_name = [
        "pip install execution-proof",
        "python -m pip install --quiet execution-proof==0.2.0",
        "`pip install 'execution-proof[server]'`",
        'pip3 install mypy "execution_proof"',
        "uv add execution-proof",
    ]
    not_by_name = [
        INSTALL_FROM_GIT,
        'pip install "execution-proof[server] @ git+https://github.com/execution-proof/execution-proof@v1"',
        "pip install '.[server]'",
        'pip install "$GITHUB_ACTION_PATH"',
        "pip install execution-proof-helper",
    ]
    assert [line for line in by_name if not INSTALL_BY_NAME.search(line)] == []
    assert [line for line in not_by_name if INSTALL_BY_NAME.search(line)] == []


def test_benchmark_standing_keeps_target_and_measurement_apart() -> None:
    """The verify ratio: the README gives the target and the measured value from RESULTS.md,
    each named as what it is."""
    results = (REPO / "bench" / "RESULTS.md").read_text()
    target, measured = re.search(r"\| verify: ratio to ceiling >= ([\d.]+) \| ([\d.]+) \|", results).groups()  # type: ignore[union-attr]
    standing = " ".join(README[README.index("Standing (latest run)") :].split("\n\n", 1)[0].split())
    assert f"the target is a ratio of {target}" in standing
    assert f"the measured ratio is {measured}" in standing


def test_jobs_doc_says_the_embedded_server_sweeps() -> None:
    text = " ".join((REPO / "docs" / "jobs.md").read_text().split())
    assert "server does not sweep" not in text
    assert "The embedded server sweeps its own store" in text


def test_verify_help_names_service_base_url_as_the_default() -> None:
    done = run_cli("verify", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "default $SERVICE_BASE_URL, else http://127.0.0.1:8000" in text


def test_the_limits_doc_shows_every_default() -> None:
    """docs/limits.md's JSON block is the defaults, every key (a new limit fails here until
    the doc names it)."""
    text = (REPO / "docs" / "limits.md").read_text()
    section = text[text.index("## Configuration: `LIMITS`") :]
    block = section[section.index("```json\n") + len("```json\n") : section.index("\n```", section.index("```json\n"))]
    assert json.loads(block) == DEFAULT_LIMITS


def nginx_levels(config: str) -> list[str]:
    """The directives each block of an nginx configuration holds itself (its nested blocks left out)."""
    levels: list[list[str]] = [[]]
    done: list[str] = []
    for char in re.sub(r"#[^\n]*", "", config):
        if char == "{":
            levels.append([])
        elif char == "}":
            done.append("".join(levels.pop()))
        else:
            levels[-1].append(char)
    return [*done, "".join(levels[0])]


def test_log_doc_nginx_block_sends_cors_from_every_location() -> None:
    """An nginx location with an add_header of its own inherits none from above: the block in
    docs/log.md must repeat the CORS header wherever it sets one (a page reads checkpoints and
    partial tiles too)."""
    text = (REPO / "docs" / "log.md").read_text()
    block = re.search(r"```nginx\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/log.md has no nginx block"
    with_headers = [" ".join(level.split()) for level in nginx_levels(block.group(1)) if "add_header" in level]
    assert len(with_headers) == 3, with_headers
    for level in with_headers:
        assert 'add_header Access-Control-Allow-Origin "*" always;' in level, level
