"""TrainingHelper's parts on their own: what a part keeps, against what the model gave."""

from __future__ import annotations

import contextlib

import pytest
import torch

from learnscope.lightning_glue.health_checks import CollapseCapture, StepLoss


def test_rows_of_a_step_whose_end_went_unseen_are_never_judged() -> None:
    encoder = torch.nn.Linear(3, 4)
    capture = CollapseCapture(rows_per_dim=8, max_rows=64)
    capture.attach("encoder", encoder, guard=lambda record: contextlib.nullcontext())
    capture.start_step()
    capture.start_batch(None, step=0)
    encoder(torch.randn(5, 3))
    assert capture.end_batch(step_over=False) is None  # accumulation: the step goes on
    capture.drop()  # the next batch is another step's: step 0 ended unseen
    capture.start_step()
    capture.start_batch(None, step=1)
    inputs = torch.randn(6, 3)
    with torch.no_grad():
        expected = encoder(inputs)
    encoder(inputs)
    encoder(torch.randn(7, 3))  # a second forward in the batch is not captured
    buffer = capture.end_batch(step_over=True)
    assert buffer is not None and buffer.num_rows == 6
    assert torch.equal(buffer.rows(), expected)
    capture.detach()
    encoder(inputs)  # no hook any more
    assert buffer.num_rows == 6


def test_the_step_loss_is_the_mean_of_each_micro_batch_first_loss() -> None:
    loss = StepLoss()
    loss.start_step()
    firsts = [0.5, 1.5, 4.0]
    for first in firsts:
        loss.start_batch(keep=True)
        loss.take(torch.tensor(first) / 3)  # Lightning divides by accumulate_grad_batches
        loss.take(torch.tensor(100.0))  # a later closure evaluation
    loss.start_batch(keep=False)  # a batch of another step: nothing kept
    loss.take(torch.tensor(-7.0))
    trainer = type("Accumulating", (), {"accumulate_grad_batches": 3})()
    value = loss.value(trainer, model=None)
    assert value is not None
    assert float(value) == pytest.approx(sum(firsts) / len(firsts), rel=1e-6)
    assert loss.value(trainer, model=None) is None  # emptied
