"""Channel-first outputs by rule, 3-D token outputs said: real fits of both embedding callbacks.

A 1-D CNN on synthetic 5-class sequences, ``features`` = Conv1d-ReLU-Conv1d-ReLU-
AdaptiveAvgPool1d-Flatten-Linear beside a ``classifier``: its Conv1d output ``[batch, 32
channels, 24 steps]`` is a 1-d feature map, which needs ``spatial=`` like a 2-D one; a
transformer's ``[batch, tokens, dim]`` is still read as tokens, which is said once. The projector
is read back as TensorBoard's projector plugin serves it, the collapse metrics from the event
file; the references are float64 numpy formulas on the tensors the model itself saw.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper
from tests.kit.models import trainer
from tests.kit.readers import ProjectorReader, parse_metadata

CHANNELS, STEPS, CLASSES = 4, 24, 5


def sequences(n: int, seed: int) -> TensorDataset:
    """``(sequence [4, 24], label)``: a class's pattern plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % CLASSES
    patterns = torch.randn(CLASSES, CHANNELS, STEPS, generator=torch.Generator().manual_seed(7))
    noise = 0.5 * torch.randn(n, CHANNELS, STEPS, generator=g)
    return TensorDataset(patterns[labels] + noise, labels)


def sequence_loaders() -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(sequences(40, seed=0), batch_size=8, shuffle=True),
        DataLoader(sequences(16, seed=1), batch_size=8),
    )


class Conv1dNet(pl.LightningModule):
    """The issue's 1-D CNN: ``features`` (``features.2`` gives ``[B, 32, 24]``), ``classifier``."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(CHANNELS, 16, 5, padding=2),
            nn.ReLU(),
            nn.Conv1d(16, 32, 5, padding=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
            nn.Linear(32, 16),
        )
        self.classifier = nn.Linear(16, CLASSES)
        self.seen: dict[int, torch.Tensor] = {}  # step -> the second Conv1d's output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        maps = self.features[:3](x)  # the same modules: their hooks fire
        self.seen[self.global_step] = maps.detach().clone()
        return nn.functional.cross_entropy(self.classifier(self.features[3:](maps)), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def val_maps(model: Conv1dNet) -> torch.Tensor:
    """The trained model's ``features.2`` output on the validation set, ``[16, 32, 24]``."""
    model.eval()
    with torch.no_grad():
        return model.features[:3](sequences(16, seed=1).tensors[0])


def effective_rank(rows: np.ndarray) -> float:
    """exp(entropy) of the normalised singular values of the column-centred rows (float64)."""
    z = rows.astype(np.float64)
    tol = max(z.shape) * np.finfo(np.float64).eps * np.linalg.svd(z, compute_uv=False)[0]
    s = np.linalg.svd(z - z.mean(axis=0), compute_uv=False)
    s = np.where(s > tol, s, 0.0)
    p = s / s.sum() + 1e-7
    return float(np.exp(-(p * np.log(p)).sum()))


def snapshot(logdir: Path, name: str) -> tuple[np.ndarray, list[str] | None, list[list[str]]]:
    reader = ProjectorReader(logdir)
    (run,) = reader.runs()
    assert name in reader.names(run), reader.names(run)
    header, rows = parse_metadata(reader.metadata(run, name))
    return reader.tensor(run, name), header, rows


def scalars(logdir: str, tag: str) -> dict[int, float]:
    events = EventAccumulator(logdir, size_guidance={"scalars": 0})
    events.Reload()
    return {s.step: s.value for s in events.Scalars(tag)}


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "learnscope"]


class Order(pl.Callback):
    """Records whether the sanity check and the training batches started."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append("sanity check")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self.seen.append("training batch")


# A Conv1d, and the ReLU after it (an element-wise layer has the layout of the layer before it).
LAYERS = pytest.mark.parametrize("module", ["features.2", "features.3"])


@LAYERS
def test_a_conv1d_layer_without_spatial_fails_the_sanity_check_naming_the_options(
    tmp_path: Path, module: str
) -> None:
    order = Order()
    fit = trainer(tmp_path, False, [EmbeddingProjector(module), order])
    with pytest.raises(ValueError) as raised:
        fit.fit(Conv1dNet(), *sequence_loaders())
    assert order.seen == ["sanity check"]  # it failed there, before the first training batch
    message = str(raised.value)
    assert message.startswith(f"EmbeddingProjector: module {module!r} gave shape (8, 32, 24)")
    assert "read as [batch, channels, length] (Conv1d's layout)" in message
    assert "spatial='mean' (one 32-dim row per sample" in message
    assert "'max'" in message and "'pixels' (one row per position along the length" in message


@LAYERS
def test_training_helper_fails_on_a_conv1d_layer_at_its_first_capture(
    lenient: None, tmp_path: Path, module: str
) -> None:
    helper = TrainingHelper(check_every_n_steps=2, embedding_module=module)
    fit = trainer(tmp_path, False, [helper], max_steps=3, max_epochs=-1)
    with pytest.raises(ValueError, match=r"\(8, 32, 24\), read as \[batch, channels, length\]"):
        fit.fit(Conv1dNet(), sequence_loaders()[0])
    assert fit.global_step == 0  # not switched off, even outside strict mode


def test_spatial_pixels_gives_one_row_per_position_in_both_callbacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="learnscope")
    torch.manual_seed(0)
    model = Conv1dNet()
    labels = {"metadata_fn": lambda batch: {"label": batch[1]}}
    projector = EmbeddingProjector("features.2", spatial="pixels", **labels)
    helper = TrainingHelper(check_every_n_steps=1, embedding_module="features.2", spatial="pixels")
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector, helper], max_epochs=1).fit(model, *sequence_loaders())

    vectors, header, rows = snapshot(tmp_path / "tb", "features.2/validate/step_000000005")
    expected = val_maps(model).double().numpy().transpose(0, 2, 1).reshape(-1, 32)
    assert vectors.shape == (16 * STEPS, 32)  # one 32-channel row per position along L
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    assert header == ["label", "position"]
    assert [int(r[1]) for r in rows] == list(range(STEPS)) * 16  # the position, not a channel
    labels = sequences(16, seed=1).tensors[1]
    assert [int(r[0]) for r in rows] == labels.repeat_interleave(STEPS).tolist()

    ranks = scalars(tb.log_dir, "~learnscope/health/collapse/features.2/effective_rank")
    assert sorted(ranks) == [0, 1, 2, 3, 4]
    for step, value in ranks.items():
        seen = model.seen[step].double().numpy().transpose(0, 2, 1).reshape(-1, 32)
        assert value == pytest.approx(effective_rank(seen), rel=1e-4)  # 192 rows, all kept
    assert not [line for line in info_lines(caplog) if "read as [batch, tokens, dim]" in line]


def test_spatial_mean_gives_one_row_per_sample(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Conv1dNet()
    labels = {"metadata_fn": lambda batch: {"label": batch[1]}}
    projector = EmbeddingProjector("features.3", spatial="mean", **labels)  # the ReLU after it
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector], max_epochs=1).fit(model, *sequence_loaders())
    vectors, header, rows = snapshot(tmp_path / "tb", "features.3/validate/step_000000005")
    expected = val_maps(model).relu().double().numpy().mean(axis=2)
    assert vectors.shape == (16, 32) and header is None  # the single column, label
    assert [int(r[0]) for r in rows] == sequences(16, seed=1).tensors[1].tolist()
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)


# -- a transformer's tokens ----------------------------------------------------------------------


class TinyTransformer(pl.LightningModule):
    """``encoder`` (a batch-first ``nn.TransformerEncoder``: ``[B, 6, 16]``), pooled, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(CHANNELS, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x[..., :6].transpose(1, 2))  # [B, 6 tokens, 16]
        return self.head(self.encoder(tokens).mean(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_a_transformer_token_output_is_still_read_as_tokens_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="learnscope")
    projector = EmbeddingProjector("encoder")
    helper = TrainingHelper(check_every_n_steps=1, embedding_module="encoder")
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, tb, [projector, helper], max_epochs=2)
    fit.fit(TinyTransformer(), *sequence_loaders())

    vectors, header, rows = snapshot(tmp_path / "tb", "encoder/validate/step_000000010")
    assert vectors.shape == (16 * 6, 16) and header is None  # the single column: position
    assert [int(r[0]) for r in rows] == list(range(6)) * 16
    notes = [line for line in info_lines(caplog) if "read as [batch, tokens, dim]" in line]
    expected = {
        "learnscope: EmbeddingProjector: module 'encoder' gave shape (8, 6, 16), read as "
        "[batch, tokens, dim]: 6 rows per sample, one per token (48 in this batch)",
        "learnscope: TrainingHelper: module 'encoder' gave shape (8, 6, 16), read as "
        "[batch, tokens, dim]: 6 rows per sample, one per token (48 in this batch)",
    }
    assert {note.split(", with a position column")[0] for note in notes} == expected
    assert len(notes) == 2  # once per callback and fit, not per batch or epoch
    for note in notes:
        assert "select=lambda out: out.transpose(1, 2)" in note and "spatial=" in note
        assert "mask_fn=" in note
    assert [r.levelname for r in caplog.records if r.getMessage() in notes] == ["INFO"] * 2
    ranks = scalars(tb.log_dir, "~learnscope/health/collapse/encoder/effective_rank")
    assert sorted(ranks) == list(range(10))  # the token rows were judged at every step
