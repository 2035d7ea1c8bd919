"""ModelAutocorrelation in real fits: dashboards, checkpoints, and SGD on a noisy quadratic."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.lightning_glue import ModelAutocorrelation
from learnscope.plugins.tensorboard.layout import multiline
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from tests.kit.models import Collect, TinyClassifier, loaders, trainer
from tests.kit.readers import (
    CustomScalarsReader,
    chart_tag_patterns,
    read_events,
    wandb_artifact_tables,
    wandb_history,
    wandb_run_dir,
)


def test_fit_with_tensorboard_wandb_and_csv(
    tmp_path: Path, wandb_dir: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    tensorboard = TensorBoardLogger(str(tmp_path), name="tb")
    wandb_logger = WandbLogger(project="t", save_dir=str(wandb_dir), offline=True)
    csv_logger = CSVLogger(str(tmp_path), name="csv")
    callback = ModelAutocorrelation(
        buffer_size=16, analyze_every_n_steps=10, lags=(1, 2, 5), all_scalars=True
    )
    train, val = loaders()
    fit = trainer(
        tmp_path, [tensorboard, wandb_logger, csv_logger], [callback], max_steps=24, max_epochs=4
    )
    fit.fit(TinyClassifier(), train, val)
    wandb_logger.experiment.finish()

    # TensorBoard: the scalars at the analysis steps, the layout, the ACF images.
    run_dir = Path(tensorboard.log_dir)
    events = read_events(run_dir)
    tags = {t for t in events.Tags()["scalars"] if t.startswith("~learnscope/autocorrelation/")}
    for kind in ("params", "grads"):
        for group in ("encoder", "head"):
            base = f"~learnscope/autocorrelation/{kind}/{group}"
            for name in ("lag_1", "lag_2", "lag_5", "rho1_median", "rho1_q25", "rho1_q75"):
                assert f"{base}/{name}" in tags
    assert [e.step for e in events.Scalars("~learnscope/autocorrelation/grads/head/lag_1")] == [
        10,
        20,
        24,  # the fit's end
    ]
    assert {
        "~learnscope/autocorrelation/params/acf",
        "~learnscope/autocorrelation/grads/acf",
    } <= set(events.Tags()["images"])
    TensorBoardWriter(run_dir).add_charts({"later": {"loss": multiline(["train_loss"])}})
    charts = chart_tag_patterns(CustomScalarsReader(run_dir).layout())
    assert "later: loss" in charts
    band = "lag-1 autocorrelation, median and quartiles"
    assert f"autocorrelation/grads/head: head grads: {band}" in charts
    assert f"autocorrelation/params/encoder: encoder params: {band}" in charts
    all_tags = set(read_events(run_dir).Tags()["scalars"])
    for title, patterns in charts.items():
        for pattern in patterns:
            assert any(re.match(pattern, tag) for tag in all_tags), (title, pattern)

    # wandb: the same scalars against the trainer step, and the line-series tables.
    wandb_run = wandb_run_dir(wandb_dir)
    rows = [
        r
        for r in wandb_history(wandb_run)
        if "~learnscope/autocorrelation/params/encoder/lag_1" in r
    ]
    assert [r["trainer/global_step"] for r in rows] == [10, 20, 24]
    assert {k for k in rows[0] if k.startswith("~learnscope/autocorrelation/")} >= tags
    table = wandb_artifact_tables(wandb_run, "~learnscope/autocorrelation/params/acf_lines_table")[
        -1
    ]
    assert {group for _, group, _ in table["data"]} == {"encoder", "head"}

    # Other loggers get the scalars, with one warning that says so.
    with open(Path(csv_logger.log_dir) / "metrics.csv") as file:
        columns = next(csv.reader(file))
    assert "learnscope/autocorrelation/params/head/lag_1" in columns
    warnings = [r.getMessage() for r in learnscope_log.records]
    assert [w for w in warnings if "CSVLogger" in w] == [
        "learnscope: LoggerMetricsWriter(CSVLogger) cannot show autocorrelation charts; it gets "
        "the autocorrelation scalars only"
    ]


def test_resumed_run_tracks_the_same_elements(tmp_path: Path) -> None:
    first = ModelAutocorrelation(elements_per_tensor=4, seed=3)
    train, val = loaders()
    fit = trainer(tmp_path, False, [first], max_steps=6, limit_val_batches=0)
    fit.fit(TinyClassifier(), train, val)
    checkpoint = tmp_path / "run.ckpt"
    fit.save_checkpoint(checkpoint)
    saved = first.state_dict()["history"]

    resumed = ModelAutocorrelation(elements_per_tensor=4, seed=7)
    other = trainer(tmp_path, False, [resumed], max_steps=12, max_epochs=3, limit_val_batches=0)
    other.fit(TinyClassifier(), train, val, ckpt_path=str(checkpoint))
    assert resumed.state_dict()["history"] == saved

    fresh = ModelAutocorrelation(elements_per_tensor=4, seed=7)
    trainer(tmp_path, False, [fresh], max_steps=1, limit_val_batches=0).fit(TinyClassifier(), train)
    assert fresh.state_dict()["history"]["starts"] != saved["starts"]


class Point(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.x = nn.Parameter(torch.zeros(size))


class NoisyQuadratic(pl.LightningModule):
    """SGD on ``0.5 * c * |x - noise|^2`` for two groups of curvature ``c``: AR(1) parameters."""

    def __init__(self, size: int = 512, lr: float = 0.2, curvatures: tuple[float, float] = (1, 5)):
        super().__init__()
        self.slow, self.fast = Point(size), Point(size)
        self.curvatures = curvatures
        self.lr = lr

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (noise,) = batch
        slow_noise, fast_noise = noise[0].chunk(2)
        slow, fast = self.curvatures
        return 0.5 * (
            slow * (self.slow.x - slow_noise).square().sum()
            + fast * (self.fast.x - fast_noise).square().sum()
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def test_sgd_on_a_noisy_quadratic(tmp_path: Path) -> None:
    """Step size h = lr * curvature: parameters rho_1 = 1 - h, gradients rho_1 = -h/2."""
    torch.manual_seed(0)
    steps = 300
    noise = TensorDataset(torch.randn(steps, 1024))
    sink = Collect()
    callback = ModelAutocorrelation(
        analyze_every_n_steps=steps, lags=(1, 2), seed=1, all_scalars=True
    )
    fit = trainer(tmp_path, [sink], [callback], max_steps=steps, max_epochs=1)
    fit.fit(NoisyQuadratic(), DataLoader(noise, batch_size=1))

    ((step, scalars),) = [
        (s, m) for s, m in sink.metrics if "learnscope/autocorrelation/grads/slow/lag_1" in m
    ]
    assert step == steps  # named by the step after the last optimizer step it holds
    expected = {("params", "slow"): 0.8, ("params", "fast"): 0.0}
    expected |= {("grads", "slow"): -0.1, ("grads", "fast"): -0.5}
    for (kind, group), rho1 in expected.items():
        assert scalars[f"learnscope/autocorrelation/{kind}/{group}/rho1_median"] == pytest.approx(
            rho1, abs=0.06
        ), (kind, group)
        assert scalars[f"learnscope/autocorrelation/{kind}/{group}/lag_1"] == pytest.approx(
            rho1, abs=0.06
        )


def test_bad_arguments_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="below buffer_size=16"):
        ModelAutocorrelation(buffer_size=16, lags=(1, 16))
    with pytest.raises(ValueError, match="analyze_every_n_steps must be a positive int"):
        ModelAutocorrelation(analyze_every_n_steps=0)
    with pytest.raises(ValueError, match="non-empty"):
        ModelAutocorrelation(lags=())
