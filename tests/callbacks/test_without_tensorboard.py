"""A fit whose TensorBoardLogger writes through tensorboardX, the ``tensorboard`` package missing.

``pip install lightning tensorboardX learnscope`` gives Lightning a ``TensorBoardLogger`` that
writes through tensorboardX. learnscope's TensorBoard writer needs ``tensorboard``: the fit must
lose nothing, learnscope must say so once, when its writers are made, with the install, and the
logger gets what needs no ``tensorboard`` (learnscope's scalars through the logger, the run
record that ``learnscope export`` reads).

The package is hidden for real in a child process (an import finder and ``importlib.metadata``
that do not know it, installed before Lightning is imported), so nothing leaks into other tests;
what the child wrote is read back here, where tensorboard is installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope.run_directory.file_names import EVENTS_SUFFIX, PROJECTOR_FOLDER, RECORD_FILE
from learnscope.run_directory.record import RecordReader

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]  # holds the tests package

HIDE_TENSORBOARD = """
import importlib.abc
import importlib.metadata
import sys


class NoTensorBoard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorboard" or name.startswith("tensorboard."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def unknown(lookup):
    def look_up(name):
        if name.lower() == "tensorboard":
            raise importlib.metadata.PackageNotFoundError(name)
        return lookup(name)

    return look_up


sys.meta_path.insert(0, NoTensorBoard())
importlib.metadata.distribution = unknown(importlib.metadata.distribution)
importlib.metadata.version = unknown(importlib.metadata.version)
"""

FIT = """
import json
import logging

from lightning.pytorch.loggers import TensorBoardLogger
from tests.kit.models import TinyClassifier, loaders, trainer

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue.cli import main as learnscope_command


class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


said, summary = Keep(), Keep()
logging.getLogger("learnscope").addHandler(said)
logging.getLogger("learnscope").setLevel(logging.INFO)
logging.getLogger("lightning.pytorch.learnscope").addHandler(summary)
root = sys.argv[1]
logger = TensorBoardLogger(root, name="run")
callbacks = [
    EmbeddingProjector("encoder"),
    ModelAutocorrelation(buffer_size=8, analyze_every_n_steps=4, lags=(1,)),
    TrainingHelper(check_every_n_steps=3),
]
fit = trainer(root, logger, callbacks, max_epochs=2)
fit.fit(TinyClassifier(), *loaders())
exported = learnscope_command(["export", root, "--html", sys.argv[2]])
print(json.dumps({
    "steps": fit.global_step,
    "experiment": type(logger.experiment).__module__,
    "tensorboard_imported": "tensorboard" in sys.modules,
    "log_dir": logger.log_dir,
    "said": [(r.levelname, r.getMessage(), r.exc_info is not None) for r in said.records],
    "summary": [r.getMessage() for r in summary.records],
    "exported": exported,
}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What a strict-mode fit without the ``tensorboard`` package did and said."""
    root = tmp_path_factory.mktemp("no_tensorboard")
    env = {
        **os.environ,
        "LEARNSCOPE_STRICT": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", HIDE_TENSORBOARD + FIT, str(root / "logs"), str(root / "view.html")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return {**json.loads(done.stdout.splitlines()[-1]), "stderr": done.stderr, "root": root}


def test_the_fit_ends_through_tensorboardx(child: dict) -> None:
    assert child["steps"] == 12  # 2 epochs of 6 batches: nothing stopped it
    assert child["experiment"].startswith("tensorboardX")
    assert not child["tensorboard_imported"]


def test_the_missing_package_is_said_once_with_its_install(child: dict) -> None:
    warnings = [(level, message) for level, message, _ in child["said"] if level != "INFO"]
    assert len(warnings) == 1, warnings
    level, message = warnings[0]
    assert level == "WARNING"
    assert "cannot import 'tensorboard'" in message
    assert "pip install tensorboard or pip install 'learnscope[tensorboard]'" in message
    assert child["log_dir"] in message and "learnscope export" in message
    assert not any(traced for _, _, traced in child["said"])
    assert "Traceback" not in child["stderr"]


def test_the_summary_names_only_what_opens_it(child: dict) -> None:
    (line,) = child["summary"]
    assert "2 embedding snapshots" in line
    assert "no 'tensorboard' package" in line
    assert "learnscope export" in line and "tensorboard --logdir" not in line


def test_scalars_go_through_the_logger_beside_the_users(child: dict) -> None:
    events = EventAccumulator(child["log_dir"], size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train_loss", "val_loss"} <= tags  # the user's own metrics
    assert "learnscope/health/loss" in tags
    assert {s.step for s in events.Scalars("learnscope/health/loss")} == {0, 3, 6, 9, 11}
    assert any(t.startswith("learnscope/autocorrelation/") for t in tags), sorted(tags)


def test_the_run_record_is_kept_and_exported(child: dict) -> None:
    log_dir = Path(child["log_dir"])
    entries = RecordReader(log_dir / RECORD_FILE).read()
    kinds = [e["kind"] for e in entries]
    assert kinds[0] == "run" and kinds[-1] == "end" and entries[-1]["status"] == "finished"
    snapshots = [e for e in entries if e["kind"] == "snapshot"]
    assert [(e["key"], e["step"]) for e in snapshots] == [
        ("encoder/validate", 6),
        ("encoder/validate", 12),
    ]
    assert all(e["points"] == 48 for e in snapshots)  # every validation row
    assert "autocorrelation" in kinds and "findings" in kinds
    assert child["exported"] == 0
    page = (child["root"] / "view.html").read_text("utf-8")
    data = json.loads(re.search(r'id="learnscope-data">(.*?)</script>', page, re.S)[1])
    (run,) = data["runs"]
    assert run["name"] == "run/version_0"
    assert len(run["view"]["attached"]) == 3 and run["view"]["autocorrelation"]


def test_nothing_is_written_that_needs_tensorboard(child: dict) -> None:
    log_dir = Path(child["log_dir"])
    assert not (log_dir / PROJECTOR_FOLDER).exists()
    assert not [p.name for p in log_dir.iterdir() if p.name.endswith(EVENTS_SUFFIX)]
