"""The run summary in a W&B run's summary and tags, read back from real offline runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import WandbLogger

from learnscope.lightning_glue import EmbeddingProjector
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.summary import summarize_record
from tests.kit.callbacks import labels, learnscope_callbacks
from tests.kit.models import TinyClassifier, ZeroBranch, loaders, trainer
from tests.kit.readers import wandb_records, wandb_run_dir, wandb_summary, wandb_tags


def learnscope_part(summary: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in summary.items() if name.startswith("learnscope/")}


def record_file_summary(files: Path) -> dict[str, Any]:
    """The summary of the run's own record file, read with ``json``, as flat names."""
    lines = (files / RECORD_FILE).read_text("utf-8").splitlines()
    return summarize_record(json.loads(line) for line in lines if line.strip()).flat()


@pytest.mark.slow
def test_a_fits_wandb_summary_and_tags_are_its_records_summary_beside_the_users(
    tmp_path: Path, wandb_dir: Path
) -> None:
    wb = WandbLogger(project="t", save_dir=str(wandb_dir), tags=["mine"])
    wb.experiment.define_metric("val_loss", summary="min")  # the user's own
    projector = EmbeddingProjector("encoder", metadata_fn=labels, aligned_pca=True)
    callbacks = [projector, *learnscope_callbacks()[1:]]  # with a view for the silhouette
    trainer(tmp_path, wb, callbacks, max_epochs=2).fit(ZeroBranch(), *loaders())
    files = Path(wb.experiment.dir)
    wb.experiment.finish()

    run_dir = wandb_run_dir(wandb_dir)
    expected = record_file_summary(files)
    assert expected["learnscope/status"] == "finished"
    assert expected["learnscope/findings_seen/zero-gradient"] >= 1
    assert any(name.startswith("learnscope/acf/") for name in expected)
    for measure in ("rankme/encoder:validate", "effective_rank/encoder:validate"):
        assert {f"learnscope/{measure}/last", f"learnscope/{measure}/lowest"} <= set(expected)
    assert -1 <= expected["learnscope/silhouette/encoder:validate/pca"] <= 1
    assert learnscope_part(wandb_summary(run_dir)) == expected
    tags = wandb_tags(run_dir)
    assert {"mine", "learnscope:zero-gradient"} <= tags
    assert all(tag == "mine" or tag.startswith("learnscope:") for tag in tags)
    metrics = [r.metric for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "metric"]
    assert any(m.name == "val_loss" and m.summary.min for m in metrics)  # still there
    assert any(m.step_metric == "trainer/global_step" for m in metrics)  # WandbLogger's


class FailsAtStep3(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 3:
            raise RuntimeError("the data loader broke")
        return super().training_step(batch, batch_idx)


def test_a_fit_that_fails_in_a_step_is_failed_in_the_wandb_summary(
    tmp_path: Path, wandb_dir: Path
) -> None:
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    with pytest.raises(RuntimeError, match="the data loader broke"):
        trainer(tmp_path, wb, learnscope_callbacks(), max_epochs=2).fit(FailsAtStep3(), *loaders())
    files = Path(wb.experiment.dir)
    wb.experiment.finish()

    summary = learnscope_part(wandb_summary(wandb_run_dir(wandb_dir)))
    assert summary["learnscope/status"] == "failed"
    assert summary["learnscope/error"] == "RuntimeError: the data loader broke"
    assert summary == record_file_summary(files)
