"""The tests share one kit: helpers live in ``tests/kit/`` and are imported by its package name,
and the ``browser`` fixture is defined once, in a ``conftest.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
KIT = TESTS / "kit"
# Every helper of the kit, and the names the helpers had at the test root before the kit.
HELPERS = sorted({p.stem for p in KIT.glob("*.py") if p.stem != "__init__"} | {"tiny_models"})
# A bare import of a helper, also inside a script a test runs in a child process.
BARE = re.compile(rf"^\s*(?:from|import)\s+({'|'.join(HELPERS)})\b", re.MULTILINE)
PLUGIN = re.compile(rf"""pytest_plugins\s*=.*["']({"|".join(HELPERS)})["']""")


def python_files() -> list[Path]:
    """The tests' Python files, and the benchmarks and docs scripts that use the kit."""
    folders = (TESTS, ROOT / "benchmarks", ROOT / "docs")
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "data" not in p.parts)


def is_fixture(decorator: ast.expr) -> bool:
    """``@pytest.fixture`` or ``@pytest.fixture(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def test_the_test_root_holds_no_helper_module() -> None:
    loose = sorted(p.name for p in TESTS.glob("*.py"))
    assert loose == ["__init__.py", "conftest.py"], f"put shared helpers in tests/kit/: {loose}"


def test_helpers_are_imported_by_the_kit_s_package_name() -> None:
    bare = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in python_files()
        for match in [*BARE.finditer(path.read_text()), *PLUGIN.finditer(path.read_text())]
    ]
    assert bare == [], "import them as tests.kit.<module>:\n" + "\n".join(bare)


def test_the_browser_fixture_is_defined_once_in_a_conftest() -> None:
    defined = [
        path.relative_to(ROOT)
        for path in sorted(TESTS.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
        and node.name == "browser"
        and any(is_fixture(d) for d in node.decorator_list)
    ]
    assert len(defined) == 1 and defined[0].name == "conftest.py", defined


def test_no_test_module_imports_another() -> None:
    """What two test files share lives in the kit, not in one of them."""
    borrowed = re.compile(r"^\s*(?:from|import)\s+((?:tests\.\w+\.)?test_\w+)\b", re.MULTILINE)
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in python_files()
        for match in borrowed.finditer(path.read_text("utf-8"))
    ]
    assert found == [], f"move what they share into tests/kit/: {found}"
