"""Tiny Lightning models and data for real ``Trainer.fit`` runs in tests.

:class:`TinyClassifier` (``encoder`` and ``head`` on Gaussian :func:`blobs`) is the kit's model,
as Lightning's ``BoringModel`` is Lightning's; the other models here are variants more than one
test file fits. A model that exists for one test file's case stays in that file.
"""

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


class UnusedLayer(TinyClassifier):
    """:class:`TinyClassifier` with a layer, ``unused``, that never takes part in the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Linear(8, 8)


class Tokens(TinyClassifier):
    """``encoder`` outputs ``tokens`` rows per sample (``[B, tokens, 8]``); the head their mean."""

    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.tokens = tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x[:, None, :].expand(-1, self.tokens, -1)).mean(1))


class Quiet(TinyClassifier):
    """Logs nothing through Lightning, so only learnscope uses the loggers after setup (and
    Lightning alone survives faults of the log directory)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self(batch[0])


class QuietZeroBranch(Quiet, ZeroBranch):
    """:class:`ZeroBranch` that logs nothing through Lightning (:class:`Quiet`)."""


class IdClassifier(TinyClassifier):
    """Batches are ``(x, label, id)``: :func:`id_loaders`."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return super().training_step(batch[:2], batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        super().validation_step(batch[:2], batch_idx)


def id_loaders(shuffle_val: bool) -> tuple[DataLoader, DataLoader, TensorDataset]:
    """Blobs with a third column, a sample id; validation ids unrelated to positions."""
    train = blobs(96, seed=0)
    val = blobs(48, seed=1)
    ids = torch.arange(1000, 1048)  # ids unrelated to positions
    val_ids = TensorDataset(*val.tensors, ids)
    train_ids = TensorDataset(*train.tensors, torch.arange(96))
    return (
        DataLoader(train_ids, batch_size=16, shuffle=True),
        DataLoader(val_ids, batch_size=8, shuffle=shuffle_val),
        val_ids,
    )


class Ring(nn.Module):
    """Averages each node with its ring neighbours ``rounds`` times: oversmoothing by
    construction (batches of ``x`` [N, 6] and ``edge_index``)."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.lift = nn.Linear(6, 8)
        self.rounds = rounds

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        h = self.lift(x)
        source, target = edge_index
        for _ in range(self.rounds):
            h = (h + torch.zeros_like(h).index_add(0, target, h[source]) / 2) / 2
        return h


class GraphNodes(pl.LightningModule):
    """A GCN ``encoder`` (:class:`Gcn`: ``layers`` of 16) and a ``head`` classifying the nodes of
    PyG ``Data`` batches (``x`` of ``features`` columns, ``y`` of ``classes``), with Adam."""

    def __init__(self, layers: int, features: int, classes: int) -> None:
        super().__init__()
        self.encoder = Gcn(layers, features=features)
        self.head = nn.Linear(16, classes)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits = self.head(self.encoder(batch.x, batch.edge_index))
        return nn.functional.cross_entropy(logits, batch.y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)
