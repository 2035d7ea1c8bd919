"""The ``learnscope`` console script, run as a user runs it (the installed entry point)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = shutil.which("learnscope", path=str(Path(sys.executable).parent)) or shutil.which(
    "learnscope"
)
HEAVY = ("torch", "lightning", "pytorch_lightning", "tensorboard", "wandb", "matplotlib")

pytestmark = pytest.mark.skipif(SCRIPT is None, reason="the learnscope script is not installed")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120)


def test_help_is_plain_text_and_names_the_demo() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: learnscope ")
    assert "learnscope demo --wandb" in result.stdout and "demo " in result.stdout
    assert "``" not in result.stdout and ":func:" not in result.stdout  # no reST markup

    demo = run("demo", "--help")
    assert demo.returncode == 0 and "--logdir LOGDIR" in demo.stdout and "``" not in demo.stdout
    said = " ".join(demo.stdout.split())  # what --seed changes, and its default
    assert "--seed SEED seed of the model's initial weights" in said and "(default: 0)" in said


def test_bare_command_prints_the_help_and_fails_as_argparse_does() -> None:
    result = run()
    assert result.returncode == 2  # argparse's status for a missing argument
    assert result.stdout == ""
    assert result.stderr == run("--help").stdout  # the whole help, not a one-line error


def test_help_imports_nothing_heavy() -> None:
    """``learnscope --help`` loads no torch, Lightning or dashboard (it stays under a second)."""
    code = (
        "import sys\n"
        f"sys.argv = [{SCRIPT!r}, '--help']\n"
        "from learnscope.lightning_glue.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_export_defaults_to_the_export_page_cap() -> None:
    """The CLI's ``--max-points`` default is ``export_html``'s (written out in the CLI)."""
    from learnscope.lightning_glue.cli import build_parser
    from learnscope.plugins.views.view_page import EXPORT_MAX_POINTS

    args = build_parser().parse_args(["export", "runs", "--html", "view.html"])
    assert args.max_points == EXPORT_MAX_POINTS == 5_000
