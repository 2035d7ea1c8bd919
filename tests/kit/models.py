"""Tiny Lightning models and data for real ``Trainer.fit`` runs in tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import Logger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def blobs(n: int = 96, dim: int = 6, classes: int = 3, seed: int = 0) -> TensorDataset:
    """Gaussian blobs: ``(x [dim], label)`` pairs, one blob per class."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    centres = torch.randn(classes, dim, generator=g) * 3
    return TensorDataset(centres[labels] + torch.randn(n, dim, generator=g), labels)


def loaders(
    n_train: int = 96, n_val: int = 48, batch_size: int = 16
) -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(blobs(n_train, seed=0), batch_size=batch_size, shuffle=True),
        DataLoader(blobs(n_val, seed=1), batch_size=batch_size),
    )


class TinyClassifier(pl.LightningModule):
    """``encoder`` (6 -> 8) and ``head`` (8 -> 3)."""

    def __init__(self, dim: int = 6, hidden: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 16), nn.ReLU(), nn.Linear(16, hidden))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Backbone(TinyClassifier):
    """A ``backbone`` and a ``head``, no ``encoder``."""

    def __init__(self) -> None:
        super().__init__()
        head = self.head
        del self.encoder, self.head
        self.backbone = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


class ZeroBranch(TinyClassifier):
    """A branch multiplied by zero: its parameters always get a zero gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.branch = nn.Linear(6, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x) + 0 * self.branch(x))


def trainer(tmp_path: Any, loggers: Any, callbacks: list[Any], **kwargs: Any) -> pl.Trainer:
    """A quiet CPU trainer."""
    options: dict[str, Any] = {
        "max_epochs": 2,
        "accelerator": "cpu",
        "devices": 1,
        "logger": loggers,
        "callbacks": callbacks,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "log_every_n_steps": 1,
        "default_root_dir": str(tmp_path),
    }
    options.update(kwargs)
    return pl.Trainer(**options)


class Collect(Logger):
    """A logger that keeps every ``log_metrics`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "collect"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.append((step or 0, dict(metrics)))

    def names(self) -> set[str]:
        return {name for _, metrics in self.metrics for name in metrics}


class AfterFirstEpoch(pl.Callback):
    """Runs ``action(log_dir)`` once, after the first real validation (not the sanity check).

    What learnscope queued until then is written first, so a fault the action makes (a removed
    directory, a full disk) comes after it, as it would if learnscope wrote on the training
    thread.
    """

    def __init__(self, action: Any) -> None:
        self.action = action

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        from learnscope.lightning_glue import session

        if not trainer.sanity_checking and trainer.current_epoch == 0:
            found = session.find(trainer)
            if found is not None:
                found.drain()
            self.action(Path(trainer.logger.log_dir))


class Gcn(nn.Module):
    """``layers`` graph convolutions (PyG ``GCNConv``) with ReLU between them."""

    def __init__(self, layers: int, features: int, dim: int = 16) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.convs = nn.ModuleList(
            [GCNConv(features if i == 0 else dim, dim) for i in range(layers)]
        )

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


class NanProbe(TinyClassifier):
    """Validation also runs ``probe`` on an all-NaN copy of the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.probe = nn.Identity()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.probe(self.encoder(batch[0]) * float("nan"))
        super().validation_step(batch, batch_idx)


class ZeroBranchWithProbe(NanProbe, ZeroBranch):
    """:class:`ZeroBranch` whose validation also runs ``probe`` on an all-NaN embedding."""
