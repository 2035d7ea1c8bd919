"""Every sub-package is listed in pyproject.toml, so that a wheel, not only an editable
install, has it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for package, directory in config["package-dir"].items():
        for init in (ROOT / directory).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / directory)
            found.add(".".join([package, *relative.parts]))
    assert found == listed


def test_the_installed_dashboards_are_those_pyproject_declares() -> None:
    """learnscope finds its dashboards through its installed entry points: an install older than
    pyproject.toml would give TensorBoard and W&B loggers only their scalars."""
    from importlib.metadata import entry_points

    group = "learnscope.dashboards"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    installed = {
        entry.name: entry.value
        for entry in entry_points(group=group)
        if entry.dist is not None and entry.dist.name == "learnscope"
    }
    assert installed == declared[group], "the install is out of date: pip install -e ."
