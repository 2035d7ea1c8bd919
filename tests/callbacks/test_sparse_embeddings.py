"""ModelAutocorrelation on a model with a sparse embedding table, in real fits.

``nn.Embedding(sparse=True)`` gives ``torch.sparse_coo`` gradients. Users train it with
``SparseAdam`` for the table and a dense optimizer for the rest (two optimizers: manual
optimization in Lightning 2.x), or with one optimizer that takes sparse and dense gradients
alike (``SGD``, ``Adagrad``) in automatic optimization. Either way both module groups are
analysed, and the table's gradient autocorrelation is that of its dense gradients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.lightning_glue import ModelAutocorrelation
from tests.kit.models import Collect, trainer

USERS, DIM, BATCHES, BATCH_SIZE = 40, 4, 30, 8
LAGS = (1, 2, 5)


class Recommender(pl.LightningModule):
    """A rating per user: a sparse user table and a dense head."""

    def __init__(self, manual: bool) -> None:
        super().__init__()
        self.user_emb = nn.Embedding(USERS, DIM, sparse=True)
        self.head = nn.Linear(DIM, 1)
        self.automatic_optimization = not manual

    def loss(self, batch: Any) -> torch.Tensor:
        users, ratings = batch
        return nn.functional.mse_loss(self.head(self.user_emb(users)).squeeze(-1), ratings)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if self.automatic_optimization:
            return self.loss(batch)
        table, dense = self.optimizers()
        table.zero_grad()
        dense.zero_grad()
        self.manual_backward(self.loss(batch))
        table.step()
        dense.step()
        return None

    def configure_optimizers(self) -> Any:
        if self.automatic_optimization:  # one optimizer that takes sparse gradients
            return torch.optim.SGD(self.parameters(), lr=0.1)
        return [
            torch.optim.SparseAdam(self.user_emb.parameters(), lr=0.05),
            torch.optim.Adam(self.head.parameters(), lr=0.05),
        ]


class TableGradients(pl.Callback):
    """The dense view of the table's gradient at every step of an optimizer that holds it."""

    def __init__(self) -> None:
        self.steps: list[np.ndarray] = []

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        table = pl_module.user_emb.weight
        if any(p is table for group in optimizer.param_groups for p in group["params"]):
            assert table.grad.layout == torch.sparse_coo
            self.steps.append(table.grad.to_dense().double().reshape(-1).numpy().copy())


def ratings() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    users = torch.randint(0, USERS, (BATCHES * BATCH_SIZE,), generator=generator)
    values = torch.randn(USERS, generator=generator)[users]
    return DataLoader(TensorDataset(users, values), batch_size=BATCH_SIZE)


def numpy_acf(series: np.ndarray, lags: tuple[int, ...]) -> tuple[np.ndarray, float]:
    """Mean ACF over the non-constant columns of ``[T, K]`` at ``lags``, median lag-1 ACF."""
    centred = series - series.mean(axis=0)
    energy = (centred**2).sum(axis=0)
    varying = energy > 1e-12 * max(1.0, float(np.abs(series).max()) ** 2)
    centred, energy = centred[:, varying], energy[varying]
    rho = {lag: (centred[:-lag] * centred[lag:]).sum(axis=0) / energy for lag in (1, *lags)}
    return np.array([rho[lag].mean() for lag in lags]), float(np.median(rho[1]))


@pytest.mark.parametrize("manual", [True, False], ids=["sparseadam-and-adam", "one-sgd"])
def test_a_sparse_embedding_table_is_analysed_with_the_dense_layers(
    tmp_path: Path, manual: bool, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    steps = BATCHES * (2 if manual else 1)  # each optimizer.step() is a global step
    sink = Collect()
    callback = ModelAutocorrelation(
        buffer_size=BATCHES + 2, analyze_every_n_steps=steps, lags=LAGS, all_scalars=True
    )
    table = TableGradients()
    fit = trainer(tmp_path, [sink], [callback, table], max_epochs=1, limit_val_batches=0)
    fit.fit(Recommender(manual), ratings())

    assert fit.global_step == steps and len(table.steps) == BATCHES
    ((step, scalars),) = [
        (s, m) for s, m in sink.metrics if "learnscope/autocorrelation/grads/head/lag_1" in m
    ]
    assert step == steps
    for kind in ("params", "grads"):
        for group in ("user_emb", "head"):
            value = scalars[f"learnscope/autocorrelation/{kind}/{group}/lag_1"]
            assert np.isfinite(value), (kind, group)
    warnings = [r.getMessage() for r in learnscope_log.records]
    assert not [w for w in warnings if "ModelAutocorrelation" in w or "gradient" in w]

    state = callback.state_dict()
    histories = state["histories"] if manual else [state["history"]]
    ((start, length),) = [
        (start, length)
        for history in histories
        for name, start, length in zip(
            history["names"], history["starts"], history["lengths"], strict=True
        )
        if name == "user_emb.weight"
    ]
    assert length == USERS * DIM  # the whole table is sampled
    sampled = np.stack(table.steps)[:, start : start + length]
    mean_acf, median = numpy_acf(sampled, LAGS)
    for lag, expected in zip(LAGS, mean_acf, strict=True):
        assert scalars[f"learnscope/autocorrelation/grads/user_emb/lag_{lag}"] == pytest.approx(
            expected, abs=1e-4
        ), lag
    assert scalars["learnscope/autocorrelation/grads/user_emb/rho1_median"] == pytest.approx(
        median, abs=1e-4
    )
