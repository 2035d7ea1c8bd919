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


def test_learnscope_s_own_dashboards_need_no_installed_metadata() -> None:
    """TensorBoard and W&B loggers get their dashboards whatever the installed metadata says (an
    install older than the code, a checkout on PYTHONPATH): learnscope declares no entry point
    for its own, which are named in the code."""
    from importlib.metadata import entry_points

    from learnscope.plugins.pipeline.loggers import (
        ENTRY_POINTS,
        OWN_DASHBOARDS,
        Dashboard,
        installed_dashboards,
    )

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert ENTRY_POINTS not in declared
    own = [e for e in entry_points(group=ENTRY_POINTS) if e.module.startswith("learnscope.")]
    assert own == []
    dashboards = installed_dashboards()
    assert set(OWN_DASHBOARDS) <= set(dashboards)
    assert all(isinstance(dashboards[name], Dashboard) for name in OWN_DASHBOARDS)
