"""The Python versions learnscope claims: one oldest version everywhere it is stated, sources
that the oldest can parse and the newest can compile, and the tests run on the oldest in CI.

pip refuses an older Python from ``requires-python`` ("requires a different Python: 3.10.13
not in '>=3.11'"). The suite itself runs on the oldest (CI's Python). On the newest it is not
run here: the only torch 2.13.0 wheel for cp313 that this machine can reach is PyPI's CUDA
build (526 MB, with the nvidia-* CUDA 13 packages); without torch, the 59 doctests of
``plugins/views`` (numpy and fsspec only) pass on 3.13.0 (2026-12-07), besides the compile check.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SOURCES = [
    path
    for folder in ("learnscope", "plugins", "lightning_glue", "tests", "benchmarks")
    for path in sorted((ROOT / folder).rglob("*.py"))
]
NEWEST_CLAIMED = "3.13"


def oldest() -> tuple[int, int]:
    """The oldest Python of ``requires-python`` (a ``>=3.N`` bound and nothing else)."""
    bound = PYPROJECT["project"]["requires-python"]
    match = re.fullmatch(r">=3\.(\d+)", bound)
    assert match, f"requires-python is {bound!r}: expected one lower bound, >=3.N"
    return 3, int(match[1])


def claimed_minors() -> list[int]:
    classifiers = PYPROJECT["project"]["classifiers"]
    prefix = "Programming Language :: Python :: 3."
    return sorted(int(c.removeprefix(prefix)) for c in classifiers if c.startswith(prefix))


def test_the_oldest_version_is_the_same_everywhere_it_is_stated() -> None:
    major, minor = oldest()
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    minors = claimed_minors()
    assert minors[0] == minor, minors  # the classifiers start at the oldest
    assert minors == list(range(minors[0], minors[-1] + 1)), minors  # with no gap
    assert f"{major}.{minors[-1]}" == NEWEST_CLAIMED
    readme = (ROOT / "README.md").read_text()
    stated = set(re.findall(r"Python (3\.\d+)(?:\+| or newer)", readme))
    assert stated == {f"{major}.{minor}"}, stated


def test_the_tests_run_on_a_claimed_version_and_ci_on_the_oldest() -> None:
    """CI runs the suite on the oldest claimed Python, so an API newer than it fails there."""
    assert sys.version_info[:2] >= oldest()
    if os.environ.get("CI"):
        assert sys.version_info[:2] == oldest(), (sys.version, oldest())


def test_every_source_parses_with_the_oldest_grammar() -> None:
    """The parser's check of newer syntax (``except*`` is 3.11, ``type X = ...`` 3.12)."""
    assert len(SOURCES) > 100
    for path in SOURCES:
        ast.parse(path.read_text(), str(path), feature_version=oldest())


def interpreter(version: str) -> str | None:
    """A working ``python<version>``: on the PATH, or pyenv's; None where there is none."""
    candidates = [f"python{version}"] + [
        str(path / "bin" / "python")
        for path in sorted((Path.home() / ".pyenv" / "versions").glob(f"{version}.*"))
    ]
    for candidate in candidates:
        try:
            done = subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return candidate
    return None


def test_every_source_compiles_without_a_warning_on_the_newest_version() -> None:
    """The newest claimed Python compiles every source with warnings as errors (an invalid escape
    such as ``"\\d"`` is a SyntaxWarning from 3.12 on). Skipped where it is not installed."""
    python = interpreter(NEWEST_CLAIMED)
    if python is None:
        pytest.skip(f"no Python {NEWEST_CLAIMED} here (pyenv install {NEWEST_CLAIMED})")
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('error')\n"
        "for path in sys.argv[1:]:\n"
        "    compile(open(path, encoding='utf-8').read(), path, 'exec', dont_inherit=True)\n"
        "print('%d.%d' % sys.version_info[:2], len(sys.argv) - 1)\n"
    )
    done = subprocess.run(
        [python, "-c", code, *map(str, SOURCES)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [NEWEST_CLAIMED, str(len(SOURCES))]
