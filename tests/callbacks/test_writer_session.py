"""One writer session per trainer: shared by every learnscope callback, made anew per trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from torch import nn

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.lightning_glue import session as sessions
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.plugins.wandb import WandbPageWriter, WandbWriter
from tests.kit.models import TinyClassifier, loaders, trainer
from tests.kit.readers import ProjectorReader, wandb_history, wandb_run_dir


def labels(batch: Any) -> dict[str, Any]:
    return {"label": batch[1]}


class SessionProbe(Callback):
    """Looks at the learnscope callbacks' writers in the middle of training."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = callbacks
        self.seen: list[Any] = []

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.seen = [callback.writers(trainer) for callback in self.callbacks]


def test_a_reused_callback_writes_to_the_new_trainers_loggers(tmp_path: Path) -> None:
    projector = EmbeddingProjector(metadata_fn=labels)
    for name in ("first", "second"):
        tb = TensorBoardLogger(str(tmp_path), name=name)
        trainer(tmp_path, tb, [projector], max_epochs=1).fit(TinyClassifier(), *loaders())

    first = ProjectorReader(tmp_path / "first").names("version_0")
    second = ProjectorReader(tmp_path / "second").names("version_0")
    assert first == ["encoder/validate/step_000000006"]  # before: the second fit's landed here
    assert second == ["encoder/validate/step_000000006"]


def test_every_callback_shares_one_writer_per_logger_and_teardown_closes_them(
    tmp_path: Path, wandb_dir: Path
) -> None:
    callbacks = [
        EmbeddingProjector(metadata_fn=labels),
        ModelAutocorrelation(analyze_every_n_steps=4, buffer_size=8, lags=(1,), all_scalars=True),
        TrainingHelper(check_every_n_steps=3),
    ]
    probe = SessionProbe(callbacks)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    run = trainer(tmp_path, [tb, wb], [*callbacks, probe], max_epochs=2)
    run.fit(TinyClassifier(), *loaders())

    first, *others = probe.seen
    assert all(writers is first for writers in others)
    assert [type(w) for w in first.active] == [TensorBoardWriter, WandbWriter, WandbPageWriter]
    assert sessions.find(run) is None  # the last callback to leave closed the session
    wb.experiment.finish()
    history = wandb_history(wandb_run_dir(wandb_dir))
    assert [
        h["trainer/global_step"] for h in history if "~learnscope/embeddings/encoder/validate" in h
    ] == [
        6,
        12,
    ]
    assert any("~learnscope/autocorrelation/params/encoder/lag_1" in h for h in history)


def test_a_logger_that_cannot_show_a_record_is_named_once_for_all_callbacks(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    callbacks = [
        EmbeddingProjector(metadata_fn=labels),
        EmbeddingProjector(metadata_fn=labels, tag="again"),
    ]
    csv_logger = CSVLogger(str(tmp_path), name="csv")
    trainer(tmp_path, [csv_logger], callbacks, max_epochs=2).fit(TinyClassifier(), *loaders())
    unshown = [r.getMessage() for r in learnscope_log.records if "cannot show" in r.getMessage()]
    assert unshown == [
        "learnscope: LoggerMetricsWriter(CSVLogger) cannot show embedding records; they are not "
        "written there"
    ]


class Explode(Callback):
    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == 2:
            raise RuntimeError("user code failed")


def test_a_fit_that_fails_leaves_no_session_behind(tmp_path: Path) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, tb, [TrainingHelper(check_every_n_steps=1), Explode()])
    with pytest.raises(RuntimeError, match="user code failed"):
        run.fit(TinyClassifier(), *loaders())
    assert sessions.find(run) is None


class WithSpare(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.spare = nn.Linear(8, 8)


def test_a_reused_training_helper_judges_the_new_fit_afresh(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    helper = TrainingHelper(check_every_n_steps=5)
    for name in ("first", "second"):
        learnscope_log.clear()
        tb = TensorBoardLogger(str(tmp_path), name=name)
        trainer(tmp_path, tb, [helper], max_epochs=1).fit(WithSpare(), *loaders())
        warned = [
            r.getMessage() for r in learnscope_log.records if "unused-parameter" in r.getMessage()
        ]
        assert len(warned) == 1, name  # before: the second fit said nothing
        assert [(f.code, f.subject) for f in helper.findings] == [("unused-parameter", "spare")]
