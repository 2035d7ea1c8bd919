"""TrainingHelper on the whole Lightning surface, in real ``Trainer.fit`` runs.

Gradient accumulation, manual optimization with two optimizers (a GAN), closure optimizers
(LBFGS), reduced and mixed precision, and healthy models of the kinds learnscope's users train
(a tiny BERT, a small CNN, graph convolutions) next to a 32-layer GCN that oversmooths.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.plugins import MixedPrecision
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import learnscope.lightning_glue.helper_checks.gradients as gradient_checks
from learnscope.lightning_glue import TrainingHelper
from tests.kit.models import GraphNodes, TinyClassifier, blobs, trainer


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and r.levelno >= logging.WARNING
    ]


def found(helper: TrainingHelper) -> list[tuple[str, str]]:
    return [(f.code, f.subject) for f in helper.findings]


def scalars(logger: TensorBoardLogger, tag: str) -> dict[int, float]:
    events = EventAccumulator(logger.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {s.step: s.value for s in events.Scalars(tag)}


class RecordsLosses(TinyClassifier):
    """Remembers every loss its ``training_step`` computed, by global step."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: dict[int, list[float]] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.losses.setdefault(self.global_step, []).append(loss.item())
        return loss


# -- the loss under accumulation, closures and loss scaling -------------------------------------


def test_loss_under_gradient_accumulation_is_the_mean_of_the_micro_batch_losses(
    tmp_path: Path,
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    torch.manual_seed(0)
    model = RecordsLosses()
    helper = TrainingHelper(check_every_n_steps=2)
    run = trainer(tmp_path, tb, [helper], max_steps=6, max_epochs=-1, accumulate_grad_batches=4)
    run.fit(model, DataLoader(blobs(960), batch_size=16, shuffle=True))
    reported = scalars(tb, "~learnscope/health/loss")
    assert sorted(reported) == [0, 2, 4, 5]  # 5: the fit's last step
    for step, value in reported.items():
        micro_batches = model.losses[step]
        assert len(micro_batches) == 4
        assert value == pytest.approx(sum(micro_batches) / 4, rel=1e-5)


class Lbfgs(RecordsLosses):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=4)


def test_lbfgs_checks_gradients_once_per_step_with_the_loss_of_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LBFGS evaluates the closure several times a step; each runs on_before_optimizer_step."""
    checked: list[int] = []
    measure = gradient_checks.gradient_statistics

    def counted(*args: Any, **kwargs: Any) -> Any:
        checked.append(run.global_step)
        return measure(*args, **kwargs)

    monkeypatch.setattr(gradient_checks, "gradient_statistics", counted)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    torch.manual_seed(0)
    model = Lbfgs()
    helper = TrainingHelper(check_every_n_steps=1, embedding_module=None)
    run = trainer(tmp_path, tb, [helper], max_steps=4, max_epochs=-1, accumulate_grad_batches=2)
    run.fit(model, DataLoader(blobs(960), batch_size=16))
    evaluations = {step: len(losses) for step, losses in model.losses.items()}
    assert all(count > 2 for count in evaluations.values())  # 1 + several closure calls
    assert checked == [0, 1, 2, 3]
    # the first micro-batch, and the first closure evaluation of the stepping one
    reported = scalars(tb, "~learnscope/health/loss")
    assert sorted(reported) == [0, 1, 2, 3]
    for step, value in reported.items():
        first, stepping = model.losses[step][:2]
        assert value == pytest.approx((first + stepping) / 2, rel=1e-5)
    assert helper.findings == []


class NanGradientAt3(RecordsLosses):
    def on_after_backward(self) -> None:
        if self.global_step == 3:
            self.encoder[0].weight.grad[0, 0] = float("nan")


@pytest.mark.parametrize("precision", ["16-true", "bf16-mixed"])
def test_nonfinite_gradients_are_reported_without_a_loss_scaler(
    tmp_path: Path, precision: str
) -> None:
    helper = TrainingHelper(check_every_n_steps=3, embedding_module=None)
    run = trainer(tmp_path, False, [helper], max_steps=5, max_epochs=-1, precision=precision)
    run.fit(NanGradientAt3(), DataLoader(blobs(96), batch_size=16))
    (finding,) = [f for f in helper.findings if f.code == "non-finite-gradient"]
    assert (finding.subject, finding.first_step) == ("encoder.0", 3)


def test_gradient_scaler_skips_nonfinite_steps_and_the_loss_is_unscaled(tmp_path: Path) -> None:
    """A real GradScaler (16-mixed, here on the CPU): skipped steps are its business."""
    scaler = torch.amp.GradScaler("cpu")
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    model = NanGradientAt3()
    helper = TrainingHelper(check_every_n_steps=3, embedding_module=None)
    plugin = MixedPrecision("16-mixed", device="cpu", scaler=scaler)
    run = trainer(tmp_path, tb, [helper], max_steps=5, max_epochs=-1, plugins=[plugin])
    run.fit(model, DataLoader(blobs(96), batch_size=16))
    assert helper.findings == []
    assert scaler.get_scale() < 65536  # the scaler did skip the step
    reported = scalars(tb, "~learnscope/health/loss")
    assert sorted(reported) == [0, 3, 4]  # 4: the fit's last step
    for step, value in reported.items():
        assert value == pytest.approx(model.losses[step][0], rel=1e-5)


# -- manual optimization: a GAN ----------------------------------------------------------------


class Gan(pl.LightningModule):
    """Two optimizers in manual optimization; the discriminator steps first."""

    def __init__(self, spare: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
        self.discriminator = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        self.spare = nn.Linear(6, 6) if spare else None

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real = batch[0]
        g_opt, d_opt = self.optimizers()
        fake = self.generator(torch.randn(real.shape[0], 4))
        bce = nn.functional.binary_cross_entropy_with_logits
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
        d_loss = bce(self.discriminator(real), ones) + bce(self.discriminator(fake.detach()), zeros)
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        g_loss = bce(self.discriminator(fake), ones)
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        spare = [] if self.spare is None else list(self.spare.parameters())
        return [
            torch.optim.Adam(self.generator.parameters(), lr=1e-3),
            torch.optim.Adam([*self.discriminator.parameters(), *spare], lr=1e-3),
        ]


@pytest.mark.parametrize("spare", [False, True])
def test_gan_generator_is_used_and_a_spare_module_is_not(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture, spare: bool
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    helper = TrainingHelper(check_every_n_steps=4, embedding_module=None)  # a GAN: no embedding
    run = trainer(tmp_path, tb, [helper], max_steps=16, max_epochs=-1)
    torch.manual_seed(0)
    run.fit(Gan(spare), DataLoader(blobs(256), batch_size=32))
    assert run.global_step == 16  # two optimizer steps per batch
    if spare:
        assert found(helper) == [("unused-parameter", "spare")]
        (warning,) = warnings_of(learnscope_log)
        assert "spare.weight, spare.bias got no gradient" in warning
    else:
        assert helper.findings == [] and warnings_of(learnscope_log) == []
    # each optimizer step of a check batch is checked on its own optimizer's parameters
    assert sorted(scalars(tb, "~learnscope/health/grad_norm/discriminator")) == [0, 4, 8, 12]
    assert sorted(scalars(tb, "~learnscope/health/grad_norm/generator")) == [1, 5, 9, 13]
    assert sorted(scalars(tb, "~learnscope/health/loss")) == [0, 4, 8, 12]  # the first backward's


# -- healthy models stay quiet -----------------------------------------------------------------


class TinyBert(pl.LightningModule):
    """A randomly initialised BERT (hidden 32, 2 layers, 2 heads, vocabulary 100) and a head."""

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
        self.bert = BertModel(config)
        self.head = nn.Linear(32, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, labels = batch
        logits = self.head(self.bert(input_ids=tokens).pooler_output)
        return nn.functional.cross_entropy(logits, labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def token_batches(n: int = 320, length: int = 12) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 100, (n, length), generator=g)
    labels = (tokens == 7).any(dim=1).long()  # does token 7 occur?
    return DataLoader(TensorDataset(tokens, labels), batch_size=16, shuffle=True)


def test_tiny_bert_gives_no_warning(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    helper = TrainingHelper(
        check_every_n_steps=3,
        embedding_module="bert",
        select=lambda output: output.last_hidden_state,
    )
    learnscope_log.set_level(logging.INFO, logger="learnscope")
    run = trainer(tmp_path, False, [helper], max_steps=16, max_epochs=-1)
    run.fit(TinyBert(), token_batches())
    assert run.global_step == 16 and warnings_of(learnscope_log) == []
    # the key bias: a softmax over keys ignores a constant added to every score
    assert {f.severity for f in helper.findings} == {"info"}
    keys = [f"bert.encoder.layer.{i}.attention.self.key" for i in (0, 1)]
    assert found(helper) == [("structural-zero-gradient", key) for key in keys]
    infos = [r for r in learnscope_log.records if "structural-zero-gradient" in r.getMessage()]
    assert len(infos) == 2 and {r.levelno for r in infos} == {logging.INFO}


class SmallCnn(pl.LightningModule):
    """Convolutions with batch normalisation and pooling, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(16, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        return nn.functional.cross_entropy(self.head(self.encoder(images)), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def images(n: int = 384) -> DataLoader:
    """8x8 images of a horizontal bar, a vertical bar or a diagonal, in noise."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 3
    pictures = 0.3 * torch.randn(n, 1, 8, 8, generator=g)
    rows = torch.randint(0, 8, (n,), generator=g)
    for i in range(n):
        if labels[i] == 0:
            pictures[i, 0, rows[i], :] += 1
        elif labels[i] == 1:
            pictures[i, 0, :, rows[i]] += 1
        else:
            pictures[i, 0] += torch.eye(8)
    return DataLoader(TensorDataset(pictures, labels), batch_size=32, shuffle=True)


def test_small_cnn_gives_no_warning(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    helper = TrainingHelper(check_every_n_steps=3)
    run = trainer(tmp_path, False, [helper], max_steps=24, max_epochs=-1)
    run.fit(SmallCnn(), images())
    assert run.global_step == 24 and warnings_of(learnscope_log) == []
    # the convolutions' biases, each right before a BatchNorm
    assert found(helper) == [
        ("structural-zero-gradient", "encoder.0"),
        ("structural-zero-gradient", "encoder.4"),
    ]


def karate(copies: int = 10) -> Any:
    from torch_geometric.datasets import KarateClub
    from torch_geometric.loader import DataLoader as GraphLoader

    return GraphLoader([KarateClub()[0]] * copies, batch_size=1)


def test_two_layer_gcn_gives_no_warning(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    helper = TrainingHelper(check_every_n_steps=5, edge_index_fn=lambda b: b.edge_index)
    run = trainer(tmp_path, tb, [helper], max_steps=60, max_epochs=-1)
    run.fit(GraphNodes(2, features=34, classes=4), karate())
    assert run.global_step == 60 and warnings_of(learnscope_log) == []
    assert helper.findings == []
    # judged on each check step's own 34 nodes, well above the oversmoothing threshold (0.01)
    mad_global = scalars(tb, "~learnscope/health/collapse/encoder/mad_global")
    assert sorted(mad_global) == [*range(0, 60, 5), 59]  # 59: the fit's last step
    assert min(mad_global.values()) > 0.1


def test_thirty_two_layer_gcn_oversmooths_at_every_check_once_training_starts(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    helper = TrainingHelper(
        check_every_n_steps=5, edge_index_fn=lambda b: b.edge_index, warn_every_n_steps=5
    )
    run = trainer(tmp_path, False, [helper], max_steps=20, max_epochs=-1)
    run.fit(GraphNodes(32, features=34, classes=4), karate())
    said = [m for m in warnings_of(learnscope_log) if "oversmoothing encoder" in m]
    # no verdict on the starting weights (step 0): found at the first check after it
    assert [int(re.findall(r"\(step (\d+)\)\. Try: ", m)[0]) for m in said] == [5, 10, 15]
    (finding,) = [f for f in helper.findings if f.code == "oversmoothing"]
    assert finding.life == "found at steps 5-19; still holds"
    assert "PairNorm" in finding.advice
    # proportional rows: after the first steps the neighbour MAD is above its threshold, and the
    # mean cosine distance between all the graph's nodes still says oversmoothing
    assert all(m.startswith("learnscope: oversmoothing encoder: mad_global ") for m in said[1:])
