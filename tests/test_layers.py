"""The house rules that keep the code readable: the layer contract, light client verbs, short modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "execution_proof"
CODE_DIRS = ("transparency", "receipts", "runtime", "kv", "jobs", "usecases", "web", "client", "cli")
MAX_MODULE_LINES = 600
SERVER_LIBRARIES = ("sanic", "redis", "fakeredis", "rq", "jinja2")


def test_the_layer_contract_holds() -> None:
    """cli above web above jobs above kv above runtime above receipts, no circles (pyproject.toml)."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def _loaded_modules(*argv: str) -> set[str]:
    """Modules a ``service.py`` command imports (full names), read from ``-X importtime``."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "service.py", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    loaded = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            loaded.add(name)
    assert loaded, result.stderr[-2000:]
    return loaded


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(("hash", "README.md"), id="hash"),
        pytest.param(("verify", "--help"), id="verify"),
        pytest.param(("submit", "--help"), id="submit"),
    ],
)
def test_client_verbs_load_no_server_library(argv: tuple[str, ...]) -> None:
    loaded = _loaded_modules(*argv)
    assert "execution_proof.cli.main" in loaded  # the import trace is read
    top = {name.split(".")[0] for name in loaded}
    assert not top & set(SERVER_LIBRARIES), sorted(top & set(SERVER_LIBRARIES))
    server_code = {
        name for name in loaded if name.split(".")[:2] in (["execution_proof", p] for p in ("web", "kv", "jobs"))
    }
    assert not server_code, sorted(server_code)
    assert not top & set(CODE_DIRS), "the code is imported under execution_proof only"


def test_no_module_is_over_600_lines() -> None:
    long = {}
    for directory in CODE_DIRS:
        for path in (PACKAGE / directory).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            if lines > MAX_MODULE_LINES:
                long[str(path.relative_to(REPO))] = lines
    assert not long, f"split these by concern: {long}"


def _layout_block() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Layout\n") :]
    return section[section.index("```\n") + 4 : section.index("\n```", section.index("```\n") + 4)]


def test_the_readme_layout_names_every_package_and_module() -> None:
    """README's layout section matches the tree: each code package, and each module in it."""
    block = _layout_block()
    listed_dirs = {line.split()[0].rstrip("/") for line in block.splitlines() if line and not line[0].isspace()}
    for entry in listed_dirs:
        assert (REPO / entry).exists(), f"README's layout lists {entry}, which does not exist"
    packages = {line.split()[0].rstrip("/") for line in block.splitlines() if line.startswith("  ") and line[2] != " "}
    assert set(CODE_DIRS) <= packages
    for entry in packages:
        assert (PACKAGE / entry).exists(), f"README's layout lists execution_proof/{entry}, which does not exist"
    missing = [
        str(path.relative_to(REPO))
        for directory in CODE_DIRS
        for path in sorted((PACKAGE / directory).rglob("*.py"))
        if path.name != "__init__.py" and path.parent.name != "openapi" and path.name not in block
    ]
    assert not missing, f"README's layout does not mention {missing}"


def test_the_tree_has_no_links() -> None:
    """One tree: every tool, and a checkout without symlink support, reads the same files."""
    tracked = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    links = [line.split("\t", 1)[1] for line in tracked.stdout.splitlines() if line.startswith("120000 ")]
    assert not links, f"symbolic links in the tree: {links}"
    on_disk = [str(path.relative_to(REPO)) for path in PACKAGE.rglob("*") if path.is_symlink()]
    assert not on_disk, on_disk


FORBIDDEN_FOR_WEB = ("execution_proof.kv", "execution_proof.jobs")


def _imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """Every module an ``import`` or ``from ... import`` names (the imported names too, so
    ``from execution_proof import kv`` counts as ``execution_proof.kv``), TYPE_CHECKING blocks
    and function bodies included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_web_imports_neither_kv_nor_jobs() -> None:
    """web/ talks to usecases/ only: Redis's shape lives in kv/, background work in jobs/
    (docs/decisions.md, "The house"); lint-imports' forbidden contract says the same."""
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in sorted((PACKAGE / "web").rglob("*.py"))
        for line, module in _imported_modules(ast.parse(path.read_text()))
        if any(module == name or module.startswith(name + ".") for name in FORBIDDEN_FOR_WEB)
    ]
    assert offenders == []
    probe = ast.parse("from execution_proof import kv\nimport execution_proof.jobs.queue\n")
    assert [m for _, m in _imported_modules(probe) if m.startswith(FORBIDDEN_FOR_WEB)] == [
        "execution_proof.kv",
        "execution_proof.jobs.queue",
    ]
