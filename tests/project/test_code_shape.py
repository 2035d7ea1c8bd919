"""The shape the code keeps: thin callbacks, classes with little state, no design-doc citations."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("learnscope", "lightning_glue", "plugins")
CALLBACKS = ("embedding_projector.py", "model_autocorrelation.py", "training_helper.py")
MAX_CALLBACK_LINES = 300
MAX_PRIVATE_ATTRIBUTES = 10


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def private_attributes(node: ast.ClassDef) -> set[str]:
    """The ``self._name`` attributes a class assigns anywhere in its body."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                for part in ast.walk(target):
                    if (
                        isinstance(part, ast.Attribute)
                        and isinstance(part.value, ast.Name)
                        and part.value.id == "self"
                        and part.attr.startswith("_")
                        and not part.attr.startswith("__")
                    ):
                        names.add(part.attr)
    return names


@pytest.mark.parametrize("name", CALLBACKS)
def test_callbacks_are_thin(name: str) -> None:
    lines = len((ROOT / "lightning_glue" / name).read_text().splitlines())
    assert lines <= MAX_CALLBACK_LINES, f"{name} has {lines} lines"


def test_no_class_keeps_more_than_ten_private_attributes() -> None:
    heavy = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = private_attributes(node)
                if len(names) > MAX_PRIVATE_ATTRIBUTES:
                    heavy[f"{path.relative_to(ROOT)}::{node.name}"] = sorted(names)
    assert not heavy, heavy


def test_no_code_cites_a_design_document_the_project_does_not_hold() -> None:
    cited = [str(p.relative_to(ROOT)) for p in sources() if "DESIGN.md" in p.read_text()]
    assert not cited
