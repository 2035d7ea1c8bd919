"""No thread and no job where no writer reads.

A fit without a logger (``logger=False``), or whose loggers all got no writer (a disabled W&B
run), has nothing that would read learnscope's records: its session starts no writer or drawing
thread, queues no job, and the callbacks make no record for it (no row is captured, no snapshot
made). The findings still reach the ``learnscope`` Python logger, which is a reader.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import wandb
from lightning.pytorch.loggers import WandbLogger

from learnscope.embeddings.rows import EmbeddingRows
from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue.row_reader import RowReader
from learnscope.plugins.pipeline.background import BackgroundWriters
from tests.kit.models import Collect, ZeroBranch, loaders, trainer

OURS = ("learnscope-writer", "learnscope-draw")


class Threads(pl.Callback):
    """The names of the threads alive at every training and validation batch's end."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def sample(self) -> None:
        self.seen |= {thread.name for thread in threading.enumerate()}

    def on_train_batch_end(self, *args: Any) -> None:
        self.sample()

    def on_validation_batch_end(self, *args: Any) -> None:
        self.sample()


class Spies:
    """Every thread started, every job given to the writers, every batch's rows kept, every
    snapshot made (the check of the user's functions on a stage's first batch keeps nothing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[str] = []
        self.jobs: list[str | None] = []
        self.rows = self.snapshots = 0
        start, submit = threading.Thread.start, BackgroundWriters.submit
        add, snapshot = RowReader.add, EmbeddingRows.snapshot

        def spy_start(thread: threading.Thread) -> None:
            self.started.append(thread.name)
            start(thread)

        def spy_submit(writers: BackgroundWriters, job: Any, *args: Any, **kwargs: Any) -> None:
            self.jobs.append(kwargs.get("label"))
            submit(writers, job, *args, **kwargs)

        def spy_add(reader: RowReader, *args: Any, **kwargs: Any) -> None:
            self.rows += 1
            add(reader, *args, **kwargs)

        def spy_snapshot(rows: EmbeddingRows, *args: Any, **kwargs: Any) -> Any:
            self.snapshots += 1
            return snapshot(rows, *args, **kwargs)

        monkeypatch.setattr(threading.Thread, "start", spy_start)
        monkeypatch.setattr(BackgroundWriters, "submit", spy_submit)
        monkeypatch.setattr(RowReader, "add", spy_add)
        monkeypatch.setattr(EmbeddingRows, "snapshot", spy_snapshot)

    def ours(self) -> list[str]:
        return [name for name in self.started if name in OURS]


def fit_with(tmp_path: Path, loggers: Any) -> tuple[pl.Trainer, Threads]:
    """A fit with the three callbacks (and a zero-gradient branch that TrainingHelper finds)."""
    threads = Threads()
    callbacks = [
        EmbeddingProjector("encoder", metadata_fn=lambda batch: {"label": batch[1]}),
        TrainingHelper(check_every_n_steps=5),
        ModelAutocorrelation(buffer_size=8, analyze_every_n_steps=4, lags=(1, 2)),
        threads,
    ]
    fit = trainer(tmp_path, loggers, callbacks, max_epochs=2)
    fit.fit(ZeroBranch(), *loaders())
    return fit, threads


def zero_gradient_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and "zero-gradient" in r.getMessage()
    ]


@pytest.fixture
def said(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="learnscope")
    return caplog


@pytest.fixture
def wandb_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``WANDB_MODE=disabled``, with wandb's process-wide settings fresh before and after."""
    wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    yield
    wandb.finish()
    wandb.teardown()


def test_a_logger_that_reads_gets_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spies see the thread, the jobs and the rows when a writer reads them."""
    spies = Spies(monkeypatch)
    fit, threads = fit_with(tmp_path, Collect())
    assert fit.global_step == 12
    assert "learnscope-writer" in spies.ours() and "learnscope-writer" in threads.seen
    assert spies.jobs and spies.rows and spies.snapshots == 2


def test_without_a_logger_no_thread_no_job_and_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: pytest.LogCaptureFixture
) -> None:
    spies = Spies(monkeypatch)
    fit, threads = fit_with(tmp_path, False)
    assert fit.global_step == 12
    assert spies.ours() == [] and not set(OURS) & threads.seen
    assert spies.jobs == []
    assert spies.rows == 0 and spies.snapshots == 0  # no snapshot made for nobody
    assert len(zero_gradient_warnings(said)) == 1  # the findings reach the Python logger
    messages = [r.getMessage() for r in said.records]
    assert "learnscope: no logger to show embedding; add a TensorBoardLogger or WandbLogger" in (
        messages
    )


def test_a_disabled_wandb_run_alone_gets_no_thread_and_no_job(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wandb_disabled: None,
    said: pytest.LogCaptureFixture,
) -> None:
    spies = Spies(monkeypatch)
    disabled = WandbLogger(project="t")
    fit, threads = fit_with(tmp_path, [disabled])
    assert fit.global_step == 12 and disabled.experiment.disabled
    assert spies.ours() == [] and not set(OURS) & threads.seen
    assert spies.jobs == []
    assert spies.rows == 0 and spies.snapshots == 0
    assert len(zero_gradient_warnings(said)) == 1
    assert [m for m in (r.getMessage() for r in said.records) if "W&B is disabled" in m] == [
        "learnscope: W&B is disabled (WANDB_MODE=disabled), so learnscope writes nothing to "
        "WandbLogger's run"
    ]
