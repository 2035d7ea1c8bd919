"""Every docstring ``Example:`` runs, with each module imported under its installed name."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import learnscope
import learnscope.lightning_glue
import learnscope.plugins

PACKAGES = (learnscope, learnscope.plugins, learnscope.lightning_glue)


def module_names() -> list[str]:
    names = {package.__name__ for package in PACKAGES}
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            names.add(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", module_names())
def test_examples_run(name: str, tmp_path, monkeypatch: pytest.MonkeyPatch, lenient: None) -> None:
    """The examples show what a user sees, outside strict mode."""
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
