"""Every command learnscope prints pastes into a shell as it reads: paths are quoted.

The end of a fit prints ``tensorboard --logdir ...`` and ``learnscope export ...``; with a log
directory such as ``runs dir/ü`` the unquoted export failed with "unrecognized arguments".
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.shell import shell_command
from tests.kit.models import TinyClassifier, loaders, trainer

SUMMARY_LOG = "lightning.pytorch.learnscope"
STATIC = Path(__file__).resolve().parents[2] / "plugins" / "views" / "static"
AWKWARD = ["runs dir/ü", "it's", "", "$HOME", "a;b", "plain/path.txt", "--html"]


@pytest.fixture
def summary_lines(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The end-of-fit line, on Lightning's logger (which may not propagate to the root)."""
    summary_log = logging.getLogger(SUMMARY_LOG)
    summary_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger=SUMMARY_LOG)
    yield caplog
    summary_log.removeHandler(caplog.handler)


def printed_commands(line: str) -> tuple[str, str]:
    """The ``tensorboard`` and ``learnscope export`` commands of an end-of-fit line."""
    opened = line.split(". Open it with: ", 1)[1]
    tensorboard, rest = opened.split(" (its learnscope tab, Projector, Custom Scalars); ", 1)
    return tensorboard, rest.removesuffix(" (one page)")


def test_the_end_of_fit_commands_run_as_printed(
    tmp_path: Path, summary_lines: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "runs dir" / "ü"
    logger = TensorBoardLogger(str(root), name="run")
    callbacks = [EmbeddingProjector("encoder"), ModelAutocorrelation(), TrainingHelper()]
    trainer(tmp_path, logger, callbacks, max_epochs=1).fit(TinyClassifier(), *loaders())
    lines = {r.getMessage() for r in summary_lines.records if r.name == SUMMARY_LOG}
    (line,) = lines
    tensorboard, export = printed_commands(line)

    assert shlex.split(tensorboard) == ["tensorboard", "--logdir", str(root)]
    assert shlex.split(export) == ["learnscope", "export", str(root), "--html", "view.html"]
    scripts = str(Path(sys.executable).parent)  # the venv's learnscope entry point
    env = {**os.environ, "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")])}
    done = subprocess.run(
        export, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "1 run(s): run/version_0" in done.stdout
    assert "run/version_0" in (tmp_path / "view.html").read_text("utf-8")


def test_shell_command_round_trips_through_the_shell(tmp_path: Path) -> None:
    command = shell_command(sys.executable, "-c", "import sys; print(sys.argv[1:])", *AWKWARD)
    assert shlex.split(command)[3:] == AWKWARD
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(AWKWARD)


def test_the_page_quotes_its_command_as_python_does(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's shellCommand is not run")
    for module in STATIC.glob("*.js"):  # model.js and the modules it imports
        shutil.copy(module, tmp_path / module.name)
    (tmp_path / "package.json").write_text('{"type": "module"}', "utf-8")  # ES modules
    script = tmp_path / "quote.mjs"
    script.write_text(
        "import { shellCommand } from './model.js';\n"
        f"console.log(JSON.stringify(shellCommand('learnscope', ...{json.dumps(AWKWARD)})));\n",
        "utf-8",
    )
    done = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == shell_command("learnscope", *AWKWARD)
