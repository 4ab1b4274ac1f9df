"""The library code the service copies or reads from the inside is still the code it was
written against.

Two modules lean on the inside of a library: web/sanic_fixes.py copies and replaces parts
of Sanic's worker manager, kv/link.py maps error replies with redis-py's private parser. Each
is pinned in pyproject.toml to the releases proven here. An upgrade
that changes what is copied or read fails here, with what to re-check and where; once it
is re-checked (and the module adjusted), record the new release's version and hashes below.
"""

from __future__ import annotations

import hashlib
import inspect
import tomllib
from importlib.metadata import version
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import REPO

PROVEN = {
    "sanic": ("25.12.1", ">=25.12.1,<25.13", "web/sanic_fixes.py"),
    "redis": ("8.1.0", ">=8.1.0,<8.2", "kv/link.py"),
}
"""Per library: the release the tests below ran against, the range pyproject.toml pins, and
the module that depends on its inside."""

UPSTREAM_FILES = {
    "sanic": "sanic/worker/manager.py",
    "redis": "redis/_parsers/base.py",
}
"""Where in each library the code that module copies or reads lives."""

SANIC_SOURCES = {
    # sanic/worker/manager.py: what web/sanic_fixes.py copies (wait_for_ack, monitor), replaces
    # (shutdown_signal) or relies on (__init__ registers the handler; shutdown sets
    # _shutting_down; _poll_monitor breaks on the None stop message).
    "WorkerManager.__init__": "2affda937d0692de10890f49b7c92c2c2eb658df0598a41af52541a3d3cae5e7",
    "WorkerManager.wait_for_ack": "f08ad25923f550492ba62c44dc615e9788ed092171f5cad1ab900af81c049919",
    "WorkerManager.monitor": "7aa74ae380c46f916d32013b99745b34be82a73bb71102fcd08d47ae0b73bea9",
    "WorkerManager.shutdown_signal": "991228e28239eaff1398b087745af32fd3122a435266942b9f21ffac765d6bd2",
    "WorkerManager.shutdown": "8e80ce1be450658e440dfa16d233df7f9d18672c6c5b1a5dcb5ce6371bcfc404",
    "WorkerManager._poll_monitor": "3dca8fc4593ff7277b1e71cfe484ccf77bb6dc90157e9f33855f155550b3b0c5",
}

REDIS_SOURCES = {
    # redis/_parsers/base.py: how an error reply becomes redis-py's exception.
    "BaseParser.parse_error": "66c735931d7e365a9654fc37ab1cbb285022d50f6638e8442be85a75fed02829",
}


def _sha256_of_source(obj: Any) -> str:
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()


def _sanic_objects() -> dict[str, Any]:
    from sanic.worker.manager import WorkerManager

    from execution_proof.web import sanic_fixes

    return {
        "WorkerManager.__init__": WorkerManager.__init__,
        "WorkerManager.wait_for_ack": sanic_fixes._original_wait_for_ack,
        "WorkerManager.monitor": sanic_fixes._original_monitor,
        "WorkerManager.shutdown_signal": sanic_fixes._original_shutdown_signal,
        "WorkerManager.shutdown": WorkerManager.shutdown,
        "WorkerManager._poll_monitor": WorkerManager._poll_monitor,
    }


def _check_sources(library: str, recorded: dict[str, str], found: dict[str, Any]) -> None:
    proven, _, module = PROVEN[library]
    changed = [name for name, digest in recorded.items() if _sha256_of_source(found[name]) != digest]
    assert not changed, (
        f"{library} {version(library)} changed {', '.join(changed)} since {proven}, the release "
        f"{module} was written against. Re-check {module} (its docstring names what it copies or "
        f"reads) against the new code in {UPSTREAM_FILES[library]}, then record the new version "
        f"and hashes in tests/test_library_pins.py and the new range in pyproject.toml."
    )


@pytest.mark.parametrize("library", sorted(PROVEN))
def test_the_installed_release_is_in_the_proven_range_and_pyproject_pins_it(library: str) -> None:
    proven, pinned, module = PROVEN[library]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dependencies = project["dependencies"] + project["optional-dependencies"]["server"]
    requirement = next(Requirement(d) for d in dependencies if Requirement(d).name == library)
    assert str(requirement.specifier) == str(Requirement(f"{library}{pinned}").specifier), (
        f"pyproject.toml allows {library}{requirement.specifier}, but {module} is proven only for "
        f"{pinned}: re-check {module} against {UPSTREAM_FILES[library]} of the new releases "
        f"before changing the pin, and record the range in tests/test_library_pins.py."
    )
    installed = version(library)
    assert Version(installed) in requirement.specifier, (
        f"{library} {installed} is installed, outside the proven range {pinned}: re-check {module} "
        f"(its docstring names what it copies or reads) against {UPSTREAM_FILES[library]} of "
        f"{installed}, and this file's recorded hashes."
    )
    assert Version(proven) in requirement.specifier


def test_sanic_code_that_web_sanic_fixes_copies_is_unchanged() -> None:
    _check_sources("sanic", SANIC_SOURCES, _sanic_objects())


def test_sanic_names_web_sanic_fixes_uses_still_exist() -> None:
    from sanic.worker.manager import MonitorCycle, WorkerManager

    needed = ["_all_workers_ack", "_sync_states", "_cleanup_non_tracked_workers", "kill", "THRESHOLD"]
    missing = [name for name in needed if not hasattr(WorkerManager, name)]
    assert not missing, (
        f"sanic {version('sanic')}: WorkerManager lost {missing}, which web/sanic_fixes.py's "
        "wait_for_ack and monitor call: re-check them against sanic/worker/manager.py."
    )
    assert {MonitorCycle.BREAK, MonitorCycle.CONTINUE} <= set(MonitorCycle), (
        "sanic's MonitorCycle changed: re-check web/sanic_fixes.py's monitor against sanic/worker/manager.py."
    )


def test_redis_parser_that_kv_link_uses_is_unchanged() -> None:
    from redis._parsers.base import BaseParser

    _check_sources("redis", REDIS_SOURCES, {"BaseParser.parse_error": BaseParser.parse_error})


def test_redis_parse_error_maps_the_replies_the_store_relies_on() -> None:
    from redis import exceptions
    from redis._parsers.base import BaseParser

    where = f"redis {version('redis')}: re-check kv/link.py's error mapping against redis/_parsers/base.py"
    assert isinstance(inspect.getattr_static(BaseParser, "parse_error"), classmethod), f"{where}: not a classmethod"
    assert list(inspect.signature(BaseParser.parse_error).parameters) == ["response"], f"{where}: other arguments"
    for reply, expected in [
        ("NOSCRIPT No matching script.", exceptions.NoScriptError),
        ("READONLY You can't write against a read only replica.", exceptions.ReadOnlyError),
        ("LOADING Redis is loading the dataset in memory", exceptions.BusyLoadingError),
        ("WRONGPASS invalid username-password pair", exceptions.AuthenticationError),
        ("ERR unknown command 'NOPE'", exceptions.ResponseError),
    ]:
        error = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
        assert type(error) is expected, f"{where}: {reply!r} gave {type(error).__name__}, not {expected.__name__}"
