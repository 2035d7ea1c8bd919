"""The code cites no design document that the project does not hold.

(Caps on callback lines and private attributes were retired: they were met by packing lines
with tuple assignments and ``# fmt: skip``, which measures formatting, not design.)
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("learnscope", "lightning_glue", "plugins")


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_code_cites_a_design_document_the_project_does_not_hold() -> None:
    cited = [str(p.relative_to(ROOT)) for p in sources() if "DESIGN.md" in p.read_text()]
    assert not cited
