"""Every learnscope thread has an owner that stops it; callbacks and trainers pickle and copy.

The threads (the writer thread ``learnscope-writer`` and the drawing thread ``learnscope-draw``)
belong to a trainer's writer session and end with it: none is alive after a fit, after six fits
in a row, or after a callback hook that a hand-driven loop calls once the fit is over. No file
under the run directories is held open after a fit. The callbacks are plain state between
trainer calls: ``pickle``, ``copy.deepcopy`` and ``torch.save(trainer)`` work before and after
``fit``, and what is loaded has its settings and joins the next trainer it is given.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue import session as sessions
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.plugins.pipeline.base import Writer
from tests.kit.models import TinyClassifier, loaders, trainer
from tests.kit.readers import ProjectorReader


def three() -> list[Any]:
    return [
        EmbeddingProjector("encoder"),
        ModelAutocorrelation(buffer_size=8, analyze_every_n_steps=4, lags=(1,)),
        TrainingHelper(check_every_n_steps=2),
    ]


def learnscope_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("learnscope")]


def files_open_under(root: Path) -> list[str]:
    """The files this process holds open under ``root`` (from ``/proc/self/fd``)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(str(root)):
            held.append(target)
    return held


def fit_once(root: Path, callbacks: list[Any], loggers: Any, **options: Any) -> pl.Trainer:
    run = trainer(root, loggers, callbacks, max_epochs=1, **options)
    run.fit(TinyClassifier(), *loaders(n_train=48, n_val=16))
    return run


class SessionsSeen(pl.Callback):
    """The session each learnscope callback holds, and the trainer's, in the middle of a fit."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = callbacks
        self.held: list[Any] = []
        self.found: Any = None
        self.threads: list[str] = []

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.held = [callback.writer_session(trainer) for callback in self.callbacks]
        self.found = sessions.find(trainer)
        self.found.drain()  # what was queued is written, its pictures drawn
        self.threads = learnscope_threads()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_fit_with_both_loggers_leaves_no_thread_and_no_open_file(
    tmp_path: Path, wandb_dir: Path
) -> None:
    callbacks = three()
    seen = SessionsSeen(callbacks)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="owners", save_dir=str(wandb_dir))
    run = fit_once(tmp_path, [*callbacks, seen], [tb, wb])
    # one session, held by every callback and found through trainer.callbacks
    assert seen.found is not None and all(held is seen.found for held in seen.held)
    assert "learnscope-draw" in seen.threads  # the pictures of the fit, on its session's thread
    assert learnscope_threads() == []
    assert sessions.find(run) is None
    assert all(callback.writer_session(run) is None for callback in callbacks)
    run_dir = Path(wb.experiment.dir)
    assert files_open_under(Path(tb.log_dir)) == []
    assert not [f for f in files_open_under(run_dir) if "learnscope" in f]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_six_fits_in_a_row_leave_no_thread_and_no_open_file(tmp_path: Path) -> None:
    """As an Optuna-style search does: a new Trainer per fit, the same callbacks or new ones."""
    kept = three()
    for n in range(6):
        callbacks = kept if n % 2 == 0 else three()
        tb = TensorBoardLogger(str(tmp_path), name="tb", version=n)
        fit_once(tmp_path, callbacks, tb)
        assert learnscope_threads() == [], f"after fit {n}"
        assert files_open_under(tmp_path) == [], f"after fit {n}"
    assert ProjectorReader(tmp_path / "tb").names("version_5") == [
        "encoder/validate/step_000000003"
    ]


def test_hooks_called_by_hand_after_fit_start_no_thread_and_write_nothing(tmp_path: Path) -> None:
    projector, autocorrelation, helper = callbacks = three()
    model = TinyClassifier()
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, logger, callbacks, max_epochs=1)
    train, val = loaders(n_train=48, n_val=16)
    run.fit(model, train, val)
    run_dir = Path(logger.log_dir)
    files = {p: p.stat().st_size for p in run_dir.rglob("*") if p.is_file()}
    batch = next(iter(val))
    for callback in callbacks:  # as Lightning's own loop tests drive hooks by hand
        callback.on_train_batch_end(run, model, {"loss": torch.tensor(1.0)}, batch, 0)
        callback.on_validation_batch_start(run, model, batch, 0)
        model(batch[0])
        callback.on_validation_batch_end(run, model, None, batch, 0)
        callback.on_validation_epoch_end(run, model)
        callback.on_train_end(run, model)
    assert learnscope_threads() == []
    assert {p: p.stat().st_size for p in run_dir.rglob("*") if p.is_file()} == files
    # a new run of the same trainer is written again: the callbacks leave the session of the
    # run that was over and join the new one
    run.validate(model, val)
    assert learnscope_threads() == []
    names = ProjectorReader(tmp_path / "tb").names("version_0")
    assert names == ["encoder/validate/step_000000003", "encoder/validate-2/step_000000003"]


def settings(callbacks: list[Any]) -> list[Any]:
    return [callback.learnscope_settings() for callback in callbacks]


def test_the_callbacks_pickle_and_copy_before_and_after_fit(tmp_path: Path) -> None:
    callbacks = three()
    before = settings(callbacks)
    for callback in callbacks:
        assert (
            pickle.loads(pickle.dumps(callback)).learnscope_settings()
            == callback.learnscope_settings()
        )
        assert copy.deepcopy(callback).learnscope_settings() == callback.learnscope_settings()
    fit_once(tmp_path, callbacks, TensorBoardLogger(str(tmp_path), name="tb"))
    copies = [copy.deepcopy(callback) for callback in callbacks]
    loaded = [pickle.loads(pickle.dumps(callback)) for callback in callbacks]
    assert settings(copies) == settings(loaded) == before
    assert loaded[2].check_every_n_steps == 2 and loaded[1].lags == (1,)
    # a copy made after a fit is a working callback of the next trainer
    fit_once(tmp_path, copies, TensorBoardLogger(str(tmp_path), name="again"))
    assert ProjectorReader(tmp_path / "again").names("version_0") == [
        "encoder/validate/step_000000003"
    ]
    assert learnscope_threads() == []


def test_torch_save_of_a_trainer_after_fit_loads_with_the_callbacks_settings(
    tmp_path: Path,
) -> None:
    """What Lightning's own ``test_model_torch_save`` asserts, with the three callbacks."""
    callbacks = three()
    run = fit_once(tmp_path, callbacks, TensorBoardLogger(str(tmp_path), name="tb"))
    buffer = io.BytesIO()
    torch.save(run, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    ours = [c for c in loaded.callbacks if hasattr(c, "learnscope_settings")]
    assert [type(c) for c in ours] == [EmbeddingProjector, ModelAutocorrelation, TrainingHelper]
    assert settings(ours) == settings(callbacks)
    assert all(c.writer_session(loaded) is None for c in ours)


class Pictures(Writer):
    """A writer that shows pictures: the picture stage draws them for it, on the drawing thread."""

    def __init__(self) -> None:
        self.drawn_on: list[str] = []

    def write_image(self, image: Any) -> None:
        self.drawn_on.append(threading.current_thread().name)


def test_closing_the_writers_stops_their_writer_and_drawing_threads() -> None:
    import numpy as np

    from learnscope.records import AutocorrelationSummary, GroupAutocorrelation

    group = GroupAutocorrelation("enc", "params", np.array([1.0, 0.5]), 0.5, 0.4, 0.6, None)
    pictures = Pictures()
    background = BackgroundWriters([pictures])
    background.write_autocorrelation(AutocorrelationSummary(8, (1,), (group,)))
    background.drain()
    assert pictures.drawn_on == ["learnscope-writer"]  # handed to the writer on its thread
    assert {"learnscope-writer", "learnscope-draw"} <= set(learnscope_threads())
    assert background.drawing.running
    background.close()
    assert learnscope_threads() == []
    assert not background.drawing.running
