"""Parameters that become trainable during the fit (fine-tuning) are sampled and checked.

Lightning's ``BackboneFinetuning`` freezes the backbone in ``setup`` and, at the epoch it is
told, makes it trainable again and adds it to the optimizer as a new param group; a callback that
freezes every parameter in ``setup`` and flips ``requires_grad`` back later starts the fit with
nothing to train. Both fits complete with learnscope's three callbacks (strict mode), and what was
frozen is sampled by ModelAutocorrelation and checked by TrainingHelper once it trains.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import BackboneFinetuning
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from tests.kit.models import loaders, trainer
from tests.kit.readers import read_events

STEPS_PER_EPOCH = 6  # 96 samples in batches of 16


class Backbone(nn.Module):
    """Two layers in use, and ``dead``: never in the forward, so it never gets a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.dead = nn.Linear(6, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class FineTuned(pl.LightningModule):
    """``backbone`` and ``head``; the optimizer takes the trainable parameters, or all of them."""

    def __init__(self, only_trainable: bool) -> None:
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Linear(8, 3)
        self.only_trainable = only_trainable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        return loss if loss.requires_grad else None  # nothing trains: skip the step

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = [p for p in self.parameters() if p.requires_grad or not self.only_trainable]
        return torch.optim.SGD(params, lr=0.05)


class FreezeAllUntil(pl.Callback):
    """Freezes every parameter in ``setup``; makes them all trainable at epoch ``epoch``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl_module.requires_grad_(False)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            pl_module.requires_grad_(True)


def _fit(tmp_path: Path, tuner: pl.Callback, only_trainable: bool) -> dict[str, Any]:
    autocorrelation = ModelAutocorrelation(
        buffer_size=8,
        elements_per_tensor=8,
        analyze_every_n_steps=4,
        lags=(1, 2),
        all_scalars=True,
    )
    helper = TrainingHelper(check_every_n_steps=2, embedding_module="backbone")
    projector = EmbeddingProjector("backbone")
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, logger, [tuner, projector, helper, autocorrelation], max_epochs=3)
    fit.fit(FineTuned(only_trainable), *loaders())
    assert fit.global_step == 3 * STEPS_PER_EPOCH
    return {"events": read_events(Path(logger.log_dir)), "helper": helper, "ac": autocorrelation}


def _unused(helper: TrainingHelper) -> dict[str, int]:
    return {f.subject: f.step for f in helper.findings if f.code == "unused-parameter"}


def test_backbone_finetuning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="learnscope")
    tuner = BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    run = _fit(tmp_path, tuner, only_trainable=True)
    events = run["events"]

    # The head is analysed from the start; the history starts again when the backbone trains
    # (step 6), and analyses resume once it holds more than max(lags) steps (step 12), and at
    # the end of the fit (step 18).
    steps = [e.step for e in events.Scalars("~learnscope/autocorrelation/params/head/lag_1")]
    assert steps == [4, 12, 16, 18]
    for kind in ("params", "grads"):
        backbone = [
            e.step for e in events.Scalars(f"~learnscope/autocorrelation/{kind}/backbone/lag_1")
        ]
        assert backbone == [12, 16, 18]
    sampled = run["ac"].state_dict()["history"]["names"]
    assert "backbone.layers.0.weight" in sampled and "head.weight" in sampled

    # TrainingHelper: the backbone's gradients are checked once it trains, and its dead layer,
    # trainable from step 6 on, is reported after its first round.
    grad_steps = [e.step for e in events.Scalars("~learnscope/health/grad_norm/backbone")]
    assert grad_steps == [6, 8, 10, 12, 14, 16, 17]  # 17: the fit's last step
    assert _unused(run["helper"]) == {"backbone.dead": 6}

    said = [r.getMessage() for r in caplog.records if "trainable" in r.getMessage()]
    assert len([m for m in said if "ModelAutocorrelation" in m]) == 1, said
    assert any("backbone.layers.0.weight" in m and "starts again" in m for m in said), said


def test_every_parameter_frozen_at_fit_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="learnscope")
    run = _fit(tmp_path, FreezeAllUntil(epoch=1), only_trainable=False)
    events = run["events"]

    for kind in ("params", "grads"):
        for group in ("backbone", "head"):
            steps = [
                e.step for e in events.Scalars(f"~learnscope/autocorrelation/{kind}/{group}/lag_1")
            ]
            assert steps == [12, 16, 18]  # 18: the end of the fit
    names = run["ac"].state_dict()["history"]["names"]
    assert {name.split(".")[0] for name in names} == {"backbone", "head"}
    assert [e.step for e in events.Scalars("~learnscope/health/grad_norm/head")] == [
        6,
        8,
        10,
        12,
        14,
        16,
        17,  # the fit's last step
    ]
    assert _unused(run["helper"]) == {"backbone.dead": 6}
    messages = [r.getMessage() for r in caplog.records if r.name == "learnscope"]
    assert not [m for m in messages if "failed" in m], messages


def test_watch_notices_flags_and_param_groups() -> None:
    from learnscope.model.trainable import TrainableWatch

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    model[0].requires_grad_(False)
    optimizer = torch.optim.SGD(model[1].parameters(), lr=0.1)
    watch = TrainableWatch(model.named_parameters(), [optimizer])
    assert watch.trainable == ["1.weight", "1.bias"]
    assert watch.poll() is None
    model[0].requires_grad_(True)
    optimizer.add_param_group({"params": list(model[0].parameters())})
    change = watch.poll()
    assert change is not None
    assert (change.added, change.removed, change.regrouped) == (["0.weight", "0.bias"], [], True)
    assert watch.poll() is None
    model[1].bias.requires_grad_(False)
    change = watch.poll()
    assert change is not None and (change.added, change.removed) == ([], ["1.bias"])


class WithComplexParameter(FineTuned):
    """A complex parameter, which ModelAutocorrelation cannot sample."""

    def __init__(self) -> None:
        super().__init__(only_trainable=False)
        self.phase = nn.Parameter(torch.ones(3, dtype=torch.cfloat))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.phase.abs().mean()


def test_start_up_failure_never_ends_a_fit(
    tmp_path: Path, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    callback = ModelAutocorrelation(buffer_size=4, lags=(1,))
    fit = trainer(tmp_path, False, [callback], max_steps=3, limit_val_batches=0)
    fit.fit(WithComplexParameter(), loaders()[0])
    assert fit.global_step == 3
    assert callback.switched_off == {"model autocorrelation"}
    (record,) = [r for r in caplog.records if "failed" in r.getMessage()]
    assert (
        "model autocorrelation of ModelAutocorrelation failed on fit start" in record.getMessage()
    )


def test_start_up_failure_raises_in_strict_mode(tmp_path: Path) -> None:
    callback = ModelAutocorrelation(buffer_size=4, lags=(1,))
    fit = trainer(tmp_path, False, [callback], max_steps=3, limit_val_batches=0)
    with pytest.raises(ValueError, match="complex"):
        fit.fit(WithComplexParameter(), loaders()[0])


def test_watch_reads_a_window_per_call_and_reports_the_whole_change() -> None:
    from learnscope.model.trainable import TrainableWatch

    model = nn.Sequential(*(nn.Linear(2, 2) for _ in range(5)))  # 10 tensors
    model.requires_grad_(False)
    watch = TrainableWatch(model.named_parameters(), window=4)
    model[4].requires_grad_(True)  # tensors 8 and 9: in the third window
    model[0].weight.requires_grad_(True)  # tensor 0: in the first
    change = watch.poll()
    assert change is not None
    assert change.added == ["0.weight", "4.weight", "4.bias"]
    model[4].requires_grad_(False)
    assert watch.poll() is None  # window [4, 8): not seen yet
    change = watch.poll()  # window [8, 10)
    assert change is not None and (change.added, change.removed) == ([], ["4.weight", "4.bias"])
    assert watch.poll() is None  # [0, 4) again
    with pytest.raises(ValueError, match="window"):
        TrainableWatch(model.named_parameters(), window=0)
