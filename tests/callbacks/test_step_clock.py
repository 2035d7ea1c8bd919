"""StepClock on real fits: accumulation, a closure optimizer and two optimizers stepping by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from learnscope.lightning_glue.step_clock import StepClock
from tests.kit.models import TinyClassifier, blobs, trainer


class Clocked(pl.Callback):
    """Feeds a StepClock from the hooks and writes down its answers."""

    def __init__(self) -> None:
        self.clock = StepClock()
        self.batches: list[tuple[int, int, bool]] = []  # (batch_idx, batch_step, first)
        self.ends: list[tuple[int, bool]] = []  # (batch_idx, last micro-batch)
        self.calls: list[tuple[int, bool, bool]] = []  # (step, first of step, first for opt)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self.clock.start_batch(trainer.global_step)
        self.batches.append((idx, self.clock.batch_step, self.clock.first_micro_batch))

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        step = trainer.global_step
        index = [id(o) for o in trainer.optimizers].index(id(optimizer))
        whole = self.clock.optimizer_call(step)
        self.calls.append((step, whole, self.clock.optimizer_call(step, index)))

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        self.ends.append((idx, self.clock.end_batch(trainer.global_step)))


def test_micro_batches_of_accumulated_steps(tmp_path: Path) -> None:
    """7 batches an epoch, 3 per step: steps of 3, 3 and 1 (Lightning steps at epoch end)."""
    clocked = Clocked()
    run = trainer(tmp_path, False, [clocked], max_epochs=2, accumulate_grad_batches=3)
    run.fit(TinyClassifier(), DataLoader(blobs(7 * 16), batch_size=16))
    per_epoch = [(0, True), (0, False), (0, False), (1, True), (1, False), (1, False), (2, True)]
    expected = [
        (idx, step + 3 * epoch, first)
        for epoch in range(2)
        for idx, (step, first) in enumerate(per_epoch)
    ]
    assert clocked.batches == expected
    last = [False, False, True, False, False, True, True]
    assert clocked.ends == [(idx, is_last) for _ in range(2) for idx, is_last in enumerate(last)]
    assert [call[0] for call in clocked.calls] == [0, 1, 2, 3, 4, 5]
    assert all(whole and own for _, whole, own in clocked.calls)


class Lbfgs(TinyClassifier):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=4)


def test_closure_evaluations_after_the_first_are_not_first_calls(tmp_path: Path) -> None:
    clocked = Clocked()
    run = trainer(tmp_path, False, [clocked], max_steps=3, max_epochs=-1)
    run.fit(Lbfgs(), DataLoader(blobs(96), batch_size=16))
    steps = [step for step, _, _ in clocked.calls]
    assert len(steps) > 3 and sorted(set(steps)) == [0, 1, 2]  # several evaluations a step
    firsts = [step for step, whole, _ in clocked.calls if whole]
    assert firsts == [0, 1, 2]
    assert [(s, w) for s, w, _ in clocked.calls] == [(s, w) for s, _, w in clocked.calls]
    assert [first for _, _, first in clocked.batches] == [True, True, True]


class TwoOptimizers(TinyClassifier):
    """Manual optimization: the encoder's optimizer, then the head's, every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        for optimizer in self.optimizers():
            optimizer.zero_grad()
            self.manual_backward(nn.functional.cross_entropy(self(x), y))
            optimizer.step()

    def configure_optimizers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        return (
            torch.optim.SGD(self.encoder.parameters(), lr=0.05),
            torch.optim.SGD(self.head.parameters(), lr=0.05),
        )


def test_each_optimizer_step_of_a_manual_batch_is_a_step(tmp_path: Path) -> None:
    """Each optimizer.step() moves global_step: a batch spans two steps, each a first call."""
    clocked = Clocked()
    run = trainer(tmp_path, False, [clocked], max_steps=6, max_epochs=-1)
    run.fit(TwoOptimizers(), DataLoader(blobs(96), batch_size=16))
    assert [(step, whole, own) for step, whole, own in clocked.calls] == [
        (step, True, True) for step in range(6)
    ]
    assert [(idx, step, first) for idx, step, first in clocked.batches] == [
        (0, 0, True),
        (1, 2, True),
        (2, 4, True),
    ]
    assert clocked.ends == [(0, True), (1, True), (2, True)]
