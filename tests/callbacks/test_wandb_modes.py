"""W&B runs that are disabled or offline, and a W&B run whose files folder is gone.

A disabled run (``WANDB_MODE=disabled`` or ``mode="disabled"``: wandb's ``NoopRun``, whose
folder never exists) gets no learnscope writer and one line saying why; the end of the fit says
nothing false about it. An offline run's line is decided from the run's settings: its ``url``,
which makes wandb print "URL not available in offline run", is never read. A gone folder
switches the writer off with one message, not one per record.
"""

from __future__ import annotations

import logging
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import wandb
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from learnscope import EmbeddingSnapshot
from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.plugins.wandb.writer import WandbWriter
from learnscope.records import RunStart
from learnscope.run_directory.file_names import RECORD_FILE
from tests.kit.models import TinyClassifier, loaders, trainer

SUMMARY_LOG = "lightning.pytorch.learnscope"


@pytest.fixture
def said(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """learnscope's warnings and the end-of-fit line (Lightning's logger may not propagate)."""
    summary_log = logging.getLogger(SUMMARY_LOG)
    summary_log.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger="learnscope")
    caplog.set_level(logging.INFO, logger=SUMMARY_LOG)
    yield caplog
    summary_log.removeHandler(caplog.handler)


@pytest.fixture
def wandb_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``WANDB_MODE``, a temporary ``WANDB_DIR``, and wandb's settings fresh before and after.

    wandb keeps the environment's settings of its first ``wandb.init`` in a process-wide
    singleton: an earlier test's offline mode would hide ``WANDB_MODE=disabled`` set here, and
    the disabled mode would reach a later test's offline run. ``wandb.teardown`` drops it.
    """
    wandb.teardown()
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    yield
    wandb.finish()
    wandb.teardown()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and r.levelno >= logging.WARNING
    ]


def summaries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return list(dict.fromkeys(r.getMessage() for r in caplog.records if r.name == SUMMARY_LOG))


def callbacks() -> list[Any]:
    return [
        EmbeddingProjector("encoder"),
        ModelAutocorrelation(buffer_size=8, analyze_every_n_steps=4, lags=(1,)),
        TrainingHelper(check_every_n_steps=3),
    ]


def fit(tmp_path: Path, loggers: list[Any]) -> int:
    run = trainer(tmp_path, loggers, callbacks(), max_epochs=2)
    run.fit(TinyClassifier(), *loaders())
    return run.global_step


def test_wandb_mode_disabled_gets_no_writer_and_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wandb_off: None,
    said: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    tensorboard = TensorBoardLogger(str(tmp_path / "logs"), name="run")
    disabled = WandbLogger(project="t")
    assert fit(tmp_path, [tensorboard, disabled]) == 12
    assert disabled.experiment.disabled

    assert warnings_of(said) == [
        "learnscope: W&B is disabled (WANDB_MODE=disabled), so learnscope writes nothing to "
        "WandbLogger's run"
    ]
    (line,) = summaries(said)
    assert "2 embedding snapshots" in line  # TensorBoard's, written
    assert f"to {tensorboard.log_dir}; nothing to W&B (disabled by WANDB_MODE=disabled)" in line
    assert "dummy-" not in line and "wandb sync" not in line and "offline" not in line
    assert not list(tmp_path.rglob(f"wandb/**/{RECORD_FILE}"))


def test_mode_disabled_alone_writes_nothing_and_says_so(
    tmp_path: Path, wandb_off: None, said: pytest.LogCaptureFixture
) -> None:
    disabled = WandbLogger(project="t", mode="disabled")
    assert fit(tmp_path, [disabled]) == 12

    (warning,) = warnings_of(said)
    assert 'W&B is disabled (mode="disabled")' in warning
    assert summaries(said) == [
        "learnscope wrote 0 embedding snapshots, 0 autocorrelation analyses and 0 findings in "
        'this fit; nothing to W&B (disabled by mode="disabled")'
    ]


def test_an_offline_run_is_named_without_reading_its_url(
    tmp_path: Path,
    wandb_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    said: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("WANDB_SILENT", "false")  # wandb says "URL not available" when asked
    save_dir = tmp_path / "wandb dir" / "ü"
    save_dir.mkdir(parents=True)
    offline = WandbLogger(project="t", save_dir=str(save_dir))
    assert fit(tmp_path, [offline]) == 12

    assert warnings_of(said) == []
    (line,) = summaries(said)
    run = offline.experiment
    assert f"the offline W&B run {run.name or run.id} (upload: " in line
    sync = line.split("(upload: ", 1)[1].removesuffix(")")
    program, command, folder = shlex.split(sync)
    assert (program, command) == ("wandb", "sync")
    assert Path(folder) == Path(run.dir).parent and Path(folder).is_dir()
    printed = capfd.readouterr()
    assert "URL not available" not in printed.out + printed.err


def test_a_gone_files_folder_switches_the_wandb_writer_off_with_one_message(
    wandb_dir: Path, lenient: None, learnscope_log: pytest.LogCaptureFixture
) -> None:
    run = wandb.init(project="t", dir=str(wandb_dir))
    writers = BackgroundWriters([WandbWriter(run)])
    shutil.rmtree(run.dir)
    writers.write_run_start(RunStart())
    for step in range(3):
        writers.write_embedding(EmbeddingSnapshot("encoder", step, torch.randn(8, 3)))
        writers.write_scalars({"loss": 1.0}, step)
    writers.write_findings([], 3)
    writers.close()

    (message,) = [r.getMessage() for r in learnscope_log.records]
    assert f"its run directory {run.dir} is gone" in message and "switched off" in message
    assert writers.active == []
