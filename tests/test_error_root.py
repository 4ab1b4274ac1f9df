"""One exception root (docs/python-api.md, "Errors"): every exception class the
package defines derives from ``execution_proof.Error``, whatever builtin it also is (a
``ValueError``, a ``LookupError``); only control-flow classes that derive from
``BaseException`` and not ``Exception`` are exempt."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import execution_proof
from execution_proof import Error


def every_module() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(execution_proof.__path__, "execution_proof.")]


def test_every_exception_class_the_package_defines_derives_from_error() -> None:
    found, outside = [], []
    for name in every_module():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name or not issubclass(cls, BaseException):
                continue
            if not issubclass(cls, Exception):
                continue  # control flow (a BaseException of its own), as KeyboardInterrupt is
            found.append(f"{name}.{cls.__qualname__}")
            if not issubclass(cls, Error):
                outside.append(f"{name}.{cls.__qualname__}")
    assert len(found) > 40, found
    assert not outside, f"not an execution_proof.Error: {outside}"
