"""Faults that Lightning survives alone must not take a fit down when learnscope is there.

learnscope writes its own event file in the run directory; a failure there stays in learnscope
(a run directory that is gone switches that writer off at once, with one message) and never
reaches the ``SummaryWriter`` of Lightning's ``TensorBoardLogger``, which re-raises a stored
failure in ``log_metrics`` and ``finalize``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.kit.callbacks import learnscope_callbacks
from tests.kit.models import AfterFirstEpoch, Quiet, TinyClassifier, loaders, trainer


def remove(log_dir: Path) -> None:
    shutil.rmtree(log_dir)


def replace_by_a_file(log_dir: Path) -> None:
    shutil.rmtree(log_dir)
    log_dir.write_text("not a directory")


@pytest.mark.parametrize("fault", [remove, replace_by_a_file])
def test_a_broken_log_directory_ends_the_fit_as_it_would_without_learnscope(
    tmp_path: Path, fault: Callable[[Path], None], lenient: None
) -> None:
    finished = []
    for name, extra in (("without", []), ("with", learnscope_callbacks())):
        tb = TensorBoardLogger(str(tmp_path), name=name)
        run = trainer(tmp_path, tb, [*extra, AfterFirstEpoch(fault)], max_epochs=3)
        try:
            run.fit(Quiet(), *loaders())
            outcome: tuple[Any, ...] = (run.current_epoch, run.global_step)
        except Exception as error:  # noqa: BLE001 - the outcome is what is compared
            outcome = (type(error).__name__, str(error)[:80])
        finished.append((name, *outcome, Path(tb.log_dir).is_dir()))
    assert finished[1][1:] == finished[0][1:]
    assert finished[0][1:] == (3, 18, False)  # Lightning alone finishes, makes no new run


def test_learnscope_writes_its_own_event_file(tmp_path: Path) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, tb, learnscope_callbacks(), max_epochs=2)
    run.fit(TinyClassifier(), *loaders())
    run_dir = Path(tb.log_dir)
    own = sorted(run_dir.glob("events.out.tfevents.*.learnscope"))
    assert len(own) == 1
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2  # and Lightning's own
    events = EventAccumulator(str(own[0]), size_guidance={"scalars": 0})
    events.Reload()
    assert "~learnscope/health/grad_norm/encoder" in events.Tags()["scalars"]
    assert "train_loss" not in events.Tags()["scalars"]  # Lightning's metrics are not in it
    both = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    both.Reload()  # TensorBoard reads every event file of the run
    assert {"~learnscope/health/grad_norm/encoder", "train_loss"} <= set(both.Tags()["scalars"])


def test_no_learnscope_failure_reaches_lightnings_logger(
    tmp_path: Path, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The run directory replaced by a file: learnscope says so once per writer call site."""
    caplog.set_level(logging.WARNING, logger="learnscope")
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    callbacks = [*learnscope_callbacks(), AfterFirstEpoch(replace_by_a_file)]
    run = trainer(tmp_path, tb, callbacks, max_epochs=3)
    run.fit(Quiet(), *loaders())
    assert run.global_step == 18
    failures = [r for r in caplog.records if "switched off" in r.getMessage()]
    assert failures and all("TensorBoardWriter(" in r.getMessage() for r in failures)
    assert len(failures) == 1  # the one shared writer is switched off once
    assert "its run directory" in failures[0].getMessage()  # a permanent failure: at once
    assert [r for r in caplog.records if "record is skipped" in r.getMessage()] == []
