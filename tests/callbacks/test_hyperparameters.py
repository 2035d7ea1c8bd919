"""A run's hyper-parameters in its record: what the model and the datamodule saved, flat.

Real fits: a model that saves nested hyper-parameters, beside a datamodule that saves its own;
a model that saves none. The record's ``run`` entry and the run summary hold them, read back
with ``json`` and ``learnscope.read_summaries``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader

import learnscope
from learnscope.run_directory.file_names import RECORD_FILE
from tests.kit.callbacks import learnscope_callbacks
from tests.kit.models import TinyClassifier, blobs, loaders, trainer

pytestmark = pytest.mark.slow


class Saves(TinyClassifier):
    def __init__(self, lr: float, optimizer: dict[str, Any], widths: tuple[int, ...]) -> None:
        super().__init__()
        self.save_hyperparameters()


class Blobs(pl.LightningDataModule):
    def __init__(self, batch_size: int) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(blobs(96), batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(blobs(48, seed=1), batch_size=self.hparams.batch_size)


def run_entry(logdir: Path, run: str) -> dict[str, Any]:
    lines = (logdir / run / RECORD_FILE).read_text("utf-8").splitlines()
    return next(e for e in map(json.loads, lines) if e["kind"] == "run")


def test_the_saved_hyperparameters_are_in_the_record_flat(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    model = Saves(0.05, {"name": "sgd", "momentum": 0.9}, (16, 8))
    fit = trainer(tmp_path, TensorBoardLogger(str(logdir), name="saves"), learnscope_callbacks())
    fit.fit(model, datamodule=Blobs(batch_size=16))
    wanted = {
        "batch_size": 16,
        "lr": 0.05,
        "optimizer/name": "sgd",
        "optimizer/momentum": 0.9,
        "widths": "[16, 8]",
    }
    assert run_entry(logdir, "saves/version_0")["hyperparameters"] == wanted
    assert learnscope.read_summaries(logdir)["saves/version_0"].hyperparameters == wanted


def test_a_model_that_saves_none_has_none(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    fit = trainer(tmp_path, TensorBoardLogger(str(logdir), name="plain"), learnscope_callbacks())
    fit.fit(TinyClassifier(), datamodule=Blobs(batch_size=16))
    assert run_entry(logdir, "plain/version_0")["hyperparameters"] == {"batch_size": 16}
    fit = trainer(tmp_path, TensorBoardLogger(str(logdir), name="bare"), learnscope_callbacks())
    fit.fit(TinyClassifier(), *loaders())
    assert run_entry(logdir, "bare/version_0")["hyperparameters"] == {}
    assert learnscope.read_summaries(logdir)["bare/version_0"].hyperparameters == {}


class Unlogged(TinyClassifier):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)


def test_hyperparameters_saved_for_no_logger_are_left_out(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    fit = trainer(tmp_path, TensorBoardLogger(str(logdir), name="quiet"), learnscope_callbacks())
    fit.fit(Unlogged(0.1), datamodule=Blobs(batch_size=16))
    assert run_entry(logdir, "quiet/version_0")["hyperparameters"] == {"batch_size": 16}
