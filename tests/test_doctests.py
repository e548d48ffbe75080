"""The examples in docstrings run: every traceflow module's doctests, collected the way pytest's
``--doctest-modules`` would, but importing each module under its package name."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import traceflow


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(traceflow.__path__, "traceflow."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return sorted(names)


def _with_examples() -> list[str]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    out = []
    for name in _modules():
        module = importlib.import_module(name)
        if any(t.examples for t in finder.find(module)):
            out.append(name)
    return out


def test_some_modules_have_examples() -> None:
    assert _with_examples(), "no doctests found: the collector is broken"


@pytest.mark.parametrize("name", _with_examples())
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
