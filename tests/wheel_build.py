"""The wheel of this checkout, built once per test session, and fresh virtual environments.

``built_wheel`` copies the checkout (its links from execution_proof/ kept as links, without
.git, .venv, build output or caches) to a temporary directory and runs ``python -m pip wheel
--no-deps`` there, so the build leaves nothing in the working tree (setuptools writes
``build/`` and an egg-info beside the sources, and a stale ``build/lib`` would leak deleted
modules into a later wheel). tests/test_wheel.py and tests/test_ci_recipe.py share the one
build through this module's cache.

``Venv`` is ``python -m venv`` with pip pointed at the wheel's directory: ``PIP_FIND_LINKS``
names it first (the machine's own find-links stay after it), so a requirement naming the
distribution installs this checkout's wheel, and its dependencies come from the package index.
That is the tests' own mechanism: the name is not published on an index by the project, and no
document tells a user to install it by name (tests/test_docs_truths.py).

``committed_checkout`` is what the CI recipes install instead: this checkout in a git
repository of its own, at a commit; ``git_install_env`` makes their install line, run as
written (``INSTALL_FROM_GIT``), clone it in place of the repository's GitHub URL.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import REPO, missing_binary
from tests.servers import clean_env

BUILD_TIMEOUT_S = 300.0
INSTALL_TIMEOUT_S = 600.0
COPY_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "node_modules",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
)  # fmt: skip

REPOSITORY_URL = "https://github.com/execution-proof/execution-proof"
# Every recipe's install line: the repository at a ref the user reviewed, never a name on an index.
INSTALL_FROM_GIT = f'python -m pip install "execution-proof @ git+{REPOSITORY_URL}@${{EXECUTION_PROOF_REF}}"'
# An install of the distribution by name (from whatever index pip is configured with):
# `pip install execution-proof`, `'execution-proof[server]'`, `execution-proof==1.0`, among
# other requirements or after options; not `"execution-proof @ URL"`, a direct reference.
INSTALL_BY_NAME = re.compile(
    r"""\b(?:(?:pip3?|pipx|uv pip|uv tool) install|uv add)\s(?:[^\n`]*?\s)?['"]?execution[-_.]proof"""
    r"""(?:\[[\w,\s]*\])?(?![\w.[-])(?!\s*@)"""
)

_built: dict[str, Path] = {}
_committed: dict[str, tuple[Path, str]] = {}


def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The path of this checkout's wheel (built on the first call of the session)."""
    if "wheel" not in _built:
        root = tmp_path_factory.mktemp("wheel-build")
        source = root / "source"
        shutil.copytree(REPO, source, symlinks=True, ignore=COPY_IGNORED)
        out = root / "wheels"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(source)],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False, env=clean_env(),
        )  # fmt: skip
        assert done.returncode == 0, f"pip wheel failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        (wheel,) = out.glob("execution_proof-*.whl")
        _built["wheel"] = wheel
    return _built["wheel"]


def committed_checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This checkout as it is on disk (uncommitted changes included, ignored files left out)
    committed to a new git repository: the repository and the commit (made on the first call
    of the session)."""
    if "checkout" not in _committed:
        if shutil.which("git") is None:
            missing_binary("git", "the CI recipes install the client from a git URL")
        repository = tmp_path_factory.mktemp("git-checkout") / "execution-proof"
        shutil.copytree(REPO, repository, symlinks=True, ignore=COPY_IGNORED)
        git = ["git", "-c", "user.name=tests", "-c", "user.email=tests@localhost", "-c", "commit.gpgsign=false"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "the checkout under test"]):
            subprocess.run([*git, *args], cwd=repository, check=True, capture_output=True, timeout=120, env=clean_env())
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repository, check=True, capture_output=True, text=True, env=clean_env()
        ).stdout.strip()
        _committed["checkout"] = (repository, commit)
    return _committed["checkout"]


def git_install_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """``EXECUTION_PROOF_REF`` (the commit) and git settings reading ``REPOSITORY_URL`` as the
    committed checkout (``url.<file URL>.insteadOf``), so that ``INSTALL_FROM_GIT`` installs it
    offline; no wheel directory for pip to find the distribution in by name."""
    repository, commit = committed_checkout(tmp_path_factory)
    return {
        "EXECUTION_PROOF_REF": commit,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{repository.as_uri()}.insteadOf",
        "GIT_CONFIG_VALUE_0": REPOSITORY_URL,
    }


def assert_installed_from_git(python: Path, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> None:
    """pip recorded the client (``direct_url.json``, PEP 610) as cloned from ``REPOSITORY_URL``
    at the commit given as ``EXECUTION_PROOF_REF``: the committed checkout, not a wheel by name."""
    _, commit = committed_checkout(tmp_path_factory)
    code = "import importlib.metadata as m; print(m.distribution('execution-proof').read_text('direct_url.json'))"
    done = subprocess.run(  # not from a checkout, whose own metadata would be found first
        [str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env, cwd=python.parent
    )
    assert done.returncode == 0, done.stderr
    origin = orjson.loads(done.stdout)
    assert origin["url"] == REPOSITORY_URL, origin
    assert origin["vcs_info"]["vcs"] == "git" and origin["vcs_info"]["commit_id"] == commit, origin


def venv_sizes_mb(site_packages: Path) -> float:
    """``du`` of a directory, in MB (1024 * 1024 bytes of disk blocks)."""
    done = subprocess.run(["du", "-sk", str(site_packages)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0]) / 1024


class Venv:
    """A fresh ``python -m venv``: its bin directory comes first on PATH in ``env()``."""

    def __init__(self, path: Path, wheel_dir: Path | None = None) -> None:
        self.path = path
        self.wheel_dir = wheel_dir
        subprocess.run(
            [sys.executable, "-m", "venv", str(path)], check=True, capture_output=True, timeout=120, env=clean_env()
        )
        self.bin = path / "bin"
        self.python = self.bin / "python"

    def env(self, extra: dict[str, str | None] | None = None) -> dict[str, str]:
        """A clean environment running this venv's tools first, pip finding the wheel."""
        env = clean_env(extra)
        env["PATH"] = f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.path)
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
        if self.wheel_dir is not None:
            inherited = os.environ.get("PIP_FIND_LINKS", "")
            env["PIP_FIND_LINKS"] = " ".join(filter(None, [str(self.wheel_dir), inherited]))
        return env

    def run(self, *args: str, timeout: float = 120.0, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """``args`` with this venv first on PATH (``args[0]`` found there), output captured."""
        env = self.env(kwargs.pop("env", None))
        return subprocess.run(
            list(args), env=env, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
        )

    def pip_install(self, *requirements: str) -> subprocess.CompletedProcess[str]:
        done = self.run(str(self.python), "-m", "pip", "install", *requirements, timeout=INSTALL_TIMEOUT_S)
        assert done.returncode == 0, f"pip install failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def site_packages(self) -> Path:
        (found,) = self.path.glob("lib/python3*/site-packages")
        return found

    def distributions(self) -> dict[str, str]:
        """Installed distributions, by normalized name (lower case, ``-``), with their versions."""
        code = (
            "import importlib.metadata as m, json, re\n"
            "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version"
            " for d in m.distributions()}))"
        )
        done = self.run(str(self.python), "-c", code)
        assert done.returncode == 0, done.stderr
        found: dict[str, str] = orjson.loads(done.stdout)
        return found
