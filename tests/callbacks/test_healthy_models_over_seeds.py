"""Healthy models over seeds get no finding; planted faults are still found at the first check.

The models are those users train, each small: a 1-D CNN on sequences (whose embeddings at
random initialisation are all-but-parallel, a false collapse before training), a 2-D CNN with
pooling on scikit-learn's digits, an MLP, a BERT built from a config with padded batches, and a
two-layer GCN on graph batches. Each trains over several initial seeds with ``TrainingHelper``
at its defaults but for ``check_every_n_steps``; none may give a warning or a finding other
than an ``info`` one. The same 1-D CNN with its last layer frozen at rank one is found collapsed
at its first check after training starts.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.collapse.metrics import collapse_metrics
from learnscope.lightning_glue import TrainingHelper
from tests.kit.models import GraphNodes, TinyClassifier, blobs, trainer

pytestmark = pytest.mark.slow


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and r.levelno >= logging.WARNING
    ]


def not_info(helper: TrainingHelper) -> list[tuple[str, str, int]]:
    return [(f.code, f.subject, f.first_seen) for f in helper.findings if f.severity != "info"]


class Classifier(pl.LightningModule):
    """``features`` then ``classifier``, trained with Adam on ``(x, y)`` batches."""

    def __init__(self, features: nn.Module, dim: int, classes: int, lr: float = 1e-3) -> None:
        super().__init__()
        self.features = features
        self.classifier = nn.Linear(dim, classes)
        self.lr = lr
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        return loss

    def learnt(self) -> bool:
        """Whether the loss of the last ten steps is well under that of the first ten."""
        return sum(self.losses[-10:]) < 0.8 * sum(self.losses[:10])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        trainable = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.Adam(trainable, lr=self.lr)


def sequences(n: int = 640, length: int = 64, classes: int = 5) -> TensorDataset:
    """Noisy sines, one frequency per class, at random phases: ``[n, 1, length]``."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, classes, (n,), generator=g)
    t = torch.arange(length).float()
    phase = torch.rand(n, generator=g) * 2 * math.pi
    waves = torch.sin(2 * math.pi * (0.05 + 0.04 * y.float())[:, None] * t + phase[:, None])
    return TensorDataset((waves + 0.5 * torch.randn(n, length, generator=g))[:, None], y)


def conv1d_features() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv1d(1, 16, 5, padding=2),
        nn.ReLU(),
        nn.Conv1d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(32, 16),
    )


def fit(tmp_path: Path, model: pl.LightningModule, loader: Any, steps: int) -> TrainingHelper:
    helper = TrainingHelper(check_every_n_steps=50, embedding_module="features")
    run = trainer(tmp_path, False, [helper], max_steps=steps, max_epochs=-1)
    run.fit(model, loader)
    assert run.global_step == steps
    return helper


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_1d_cnn_that_starts_all_but_collapsed_gets_no_finding(
    tmp_path: Path, seed: int, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(seed)
    model = Classifier(conv1d_features(), 16, 5)
    with torch.no_grad():  # the starting weights look collapsed: a false alarm, were it judged
        x = sequences().tensors[0][:128]
        start = collapse_metrics(model.features(x).double())
    assert start["normalized_spread"] < 0.1  # under the threshold that calls collapse
    loader = DataLoader(sequences(), batch_size=32, shuffle=True)
    helper = fit(tmp_path, model, loader, steps=110)
    assert model.learnt()
    assert not_info(helper) == [] and warnings_of(learnscope_log) == []


def test_the_same_1d_cnn_with_its_last_layer_frozen_at_rank_one_is_found_collapsed(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = Classifier(conv1d_features(), 16, 5)
    last = model.features[-1]
    with torch.no_grad():
        last.weight.copy_(torch.randn(16, 1) @ torch.randn(1, 32))
    last.requires_grad_(False)
    loader = DataLoader(sequences(), batch_size=32, shuffle=True)
    helper = fit(tmp_path, model, loader, steps=110)
    (collapse,) = [f for f in helper.findings if f.code == "embedding-collapse"]
    # the first check after training starts (step 50: its batch of 32 rows and the next
    # step's, as the ranks need 4 x 16), and not before
    assert collapse.first_step == 50 and collapse.holds
    assert "rankme" in collapse.message and "from steps 50-51" in collapse.message
    assert collapse.advice.startswith("Look for a trivial solution")


def digits() -> TensorDataset:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32)[:, None] / 16
    return TensorDataset(images, torch.tensor(data.target))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cnn_with_pooling_gets_no_finding(
    tmp_path: Path, seed: int, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(seed)
    features = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 16),
    )
    model = Classifier(features, 16, 10, lr=3e-3)
    helper = fit(tmp_path, model, DataLoader(digits(), batch_size=32, shuffle=True), steps=110)
    assert model.learnt()
    assert not_info(helper) == [] and warnings_of(learnscope_log) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_mlp_gets_no_finding(
    tmp_path: Path, seed: int, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(seed)
    model = TinyClassifier()
    helper = TrainingHelper(check_every_n_steps=50)
    run = trainer(tmp_path, False, [helper], max_steps=110, max_epochs=-1)
    run.fit(model, DataLoader(blobs(960, seed=seed), batch_size=32, shuffle=True))
    assert not_info(helper) == [] and warnings_of(learnscope_log) == []


class PaddedBert(pl.LightningModule):
    """A BERT from a config (no download) on padded batches; ``head`` on the mean real token."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=16,
        )
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.head = nn.Linear(32, 2)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        mask = batch["attention_mask"]
        out = self.encoder(input_ids=batch["input_ids"], attention_mask=mask)
        states = out.last_hidden_state * mask[..., None]
        pooled = states.sum(1) / mask.sum(1, keepdim=True)
        return nn.functional.cross_entropy(self.head(pooled), batch["label"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def padded_token_batches(n: int = 640, length: int = 12) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, 100, (n, length), generator=g)
    lengths = torch.randint(4, length + 1, (n,), generator=g)
    mask = (torch.arange(length) < lengths[:, None]).long()
    tokens = tokens * mask  # 0: padding
    labels = ((tokens == 7) & (mask == 1)).any(dim=1).long()
    rows = [
        {"input_ids": t, "attention_mask": m, "label": y}
        for t, m, y in zip(tokens, mask, labels, strict=True)
    ]
    return DataLoader(rows, batch_size=16, shuffle=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bert_on_padded_batches_gets_no_finding(
    tmp_path: Path, seed: int, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(seed)
    helper = TrainingHelper(check_every_n_steps=50, select=lambda out: out.last_hidden_state)
    run = trainer(tmp_path, False, [helper], max_steps=110, max_epochs=-1)
    run.fit(PaddedBert(), padded_token_batches())
    assert not_info(helper) == [] and warnings_of(learnscope_log) == []


def graph_batches(graphs: int = 160, nodes: int = 12) -> Any:
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader as GraphLoader
    from torch_geometric.utils import to_undirected

    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(graphs):
        x = torch.randn(nodes, 8, generator=g)
        ring = torch.stack([torch.arange(nodes), (torch.arange(nodes) + 1) % nodes])
        extra = torch.randint(0, nodes, (2, nodes), generator=g)
        edges = to_undirected(torch.cat([ring, extra], dim=1))
        data.append(Data(x=x, edge_index=edges, y=(x[:, 0] > 0).long()))
    return GraphLoader(data, batch_size=8, shuffle=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_two_layer_gcn_gets_no_finding(
    tmp_path: Path, seed: int, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(seed)
    helper = TrainingHelper(check_every_n_steps=50, edge_index_fn=lambda b: b.edge_index)
    run = trainer(tmp_path, False, [helper], max_steps=110, max_epochs=-1)
    run.fit(GraphNodes(2, features=8, classes=2), graph_batches())
    assert not_info(helper) == [] and warnings_of(learnscope_log) == []
