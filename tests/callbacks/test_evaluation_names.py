"""Evaluation calls after ``fit`` never replace a snapshot: real fits, read back as TensorBoard."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector
from tests.kit.models import TinyClassifier, loaders, trainer
from tests.kit.readers import ProjectorReader


def test_validating_an_older_checkpoint_keeps_the_fits_snapshots(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    train, val = loaders()  # 6 training batches a epoch
    projector = EmbeddingProjector("encoder", ids_fn="dataset_index")
    every_epoch = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    fit = trainer(
        tmp_path,
        TensorBoardLogger(str(tmp_path), name="tb", version=0),
        [projector, every_epoch],
        max_epochs=3,
        enable_checkpointing=True,
    )
    model = TinyClassifier()
    fit.fit(model, train, val)
    run = tmp_path / "tb" / "version_0"
    fitted = ProjectorReader(run)
    names = fitted.names(".")
    assert names == [f"encoder/validate/step_{s:09d}" for s in (6, 12, 18)]
    before = {name: fitted.tensor(".", name).copy() for name in names}

    fit.validate(model, val)  # the fitted weights: the fit's last step, 18
    epoch_0 = next((tmp_path / "ckpt").glob("epoch=0-*.ckpt"))
    fit.validate(model, val, ckpt_path=str(epoch_0))  # Lightning keeps global_step at 18
    fit.validate(model, val, ckpt_path=str(epoch_0))  # the same checkpoint once more
    fit.validate(model, val)  # the model still holds the epoch-0 weights

    reader = ProjectorReader(run)
    again = {
        "encoder/validate-2/step_000000018": names[-1],
        "encoder/validate-2/step_000000006": names[0],
        "encoder/validate-3/step_000000006": names[0],
        "encoder/validate-4/step_000000006": names[0],
    }
    assert sorted(reader.names(".")) == sorted([*names, *again])
    for name, tensor in before.items():  # the fit's snapshots are untouched
        np.testing.assert_array_equal(reader.tensor(".", name), tensor)
    # each evaluation's embeddings are the fit's at the step its name gives
    for name, same in again.items():
        np.testing.assert_allclose(reader.tensor(".", name), before[same], atol=1e-6)
    said = [r.getMessage() for r in learnscope_log.records if r.levelno >= logging.WARNING]
    assert any("encoder/validate at step 6 was written before" in m for m in said), said


def test_test_and_predict_calls_after_fit_keep_their_plain_names(tmp_path: Path) -> None:
    torch.manual_seed(0)
    train, val = loaders()
    projector = EmbeddingProjector("encoder", stages=("validate", "test"))
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="tb", version=0), [projector])
    model = TinyClassifier()
    fit.fit(model, train, val)
    fit.test(model, val)
    names = ProjectorReader(tmp_path / "tb" / "version_0").names(".")
    assert "encoder/test/step_000000012" in names
    assert not [n for n in names if "-2/" in n]


def test_a_snapshot_written_again_under_its_name_is_said(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    from learnscope.plugins.tensorboard.projector_files import write_snapshot
    from learnscope.records import EmbeddingSnapshot

    first = EmbeddingSnapshot("enc", 5, np.ones((3, 2), np.float32), stage="validate")
    second = EmbeddingSnapshot("enc", 5, np.zeros((3, 2), np.float32) + 2, stage="validate")
    write_snapshot(tmp_path, first)
    assert not learnscope_log.records
    write_snapshot(tmp_path, second)
    said = [r.getMessage() for r in learnscope_log.records]
    assert len(said) == 1 and "enc/validate/step_000000005 was written again" in said[0]
    np.testing.assert_array_equal(
        ProjectorReader(tmp_path).tensor(".", "enc/validate/step_000000005"), 2
    )
