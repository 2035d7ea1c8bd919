"""TrainingHelper's parts on their own: what a part keeps, against what the model gave."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from learnscope.lightning_glue import TrainingHelper
from learnscope.lightning_glue.helper_checks import CollapseCapture, HelperSettings, StepLoss
from tests.kit.models import UnusedLayer, blobs, trainer


def test_rows_of_a_step_whose_end_went_unseen_are_never_judged() -> None:
    encoder = torch.nn.Linear(3, 4)
    settings = HelperSettings(embedding_rows_per_dim=8, max_embedding_rows=64)
    capture = CollapseCapture(settings)
    capture.attach(settings.reading("encoder"), encoder, guard=lambda r: contextlib.nullcontext())
    capture.start_step(step=0, rows_needed_per_dim=0)
    capture.start_batch(None, step=0)
    encoder(torch.randn(5, 3))
    assert capture.end_batch(step_over=False) is None  # accumulation: the step goes on
    capture.drop()  # the next batch is another step's: step 0 ended unseen
    capture.start_step(step=1, rows_needed_per_dim=0)
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


def test_a_check_step_with_too_few_rows_for_the_ranks_takes_the_next_steps_rows() -> None:
    encoder = torch.nn.Linear(3, 4)  # 4 dimensions: the ranks need 16 rows
    settings = HelperSettings(embedding_rows_per_dim=8, max_embedding_rows=64)
    capture = CollapseCapture(settings)
    capture.attach(settings.reading("encoder"), encoder, guard=lambda r: contextlib.nullcontext())
    capture.start_step(step=10, rows_needed_per_dim=4)
    for step, rows in ((10, 6), (11, 6)):
        capture.start_batch(None, step=step)
        encoder(torch.randn(rows, 3))
        assert capture.end_batch(step_over=True) is None  # 6, then 12 rows: not yet
    capture.start_batch(None, step=12)
    encoder(torch.randn(6, 3))
    buffer = capture.end_batch(step_over=True)
    assert buffer is not None and buffer.num_rows == 18
    assert (capture.first_step, capture.last_step) == (10, 12)
    capture.start_batch(None, step=13)  # judged: nothing more is captured
    encoder(torch.randn(6, 3))
    assert capture.end_batch(step_over=True) is None and buffer.num_rows == 18
    # the next check cuts a wait short: what there is, is handed out once
    capture.start_step(step=20, rows_needed_per_dim=4)
    capture.start_batch(None, step=20)
    encoder(torch.randn(6, 3))
    assert capture.end_batch(step_over=True) is None
    short = capture.unfinished()
    assert short is not None and short.num_rows == 6 and capture.unfinished() is None
    # a step whose end went unseen drops the wait
    capture.start_step(step=30, rows_needed_per_dim=4)
    capture.start_batch(None, step=30)
    encoder(torch.randn(6, 3))
    assert capture.end_batch(step_over=True) is None
    capture.drop()
    assert capture.unfinished() is None
    capture.detach()


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


def test_checkpoint_state_keeps_its_format(tmp_path: Path) -> None:
    """The keys and values older checkpoints hold, written and read back the same."""
    helper = TrainingHelper(check_every_n_steps=5)
    run = trainer(tmp_path, False, [helper], max_steps=5, max_epochs=-1)
    run.fit(UnusedLayer(), DataLoader(blobs(96), batch_size=16))
    state = helper.state_dict()
    assert list(state) == ["findings", "unused_checked", "unused_names"]
    assert state["unused_checked"] is True
    assert state["unused_names"] == ["unused.weight", "unused.bias"]
    assert [(f.code, f.subject) for f in helper.findings] == [("unused-parameter", "unused")]
    old = {  # a checkpoint of before: the same three keys, plain JSON-like values
        "findings": state["findings"],
        "unused_checked": True,
        "unused_names": ["unused.weight", "unused.bias"],
    }
    resumed = TrainingHelper(check_every_n_steps=5)
    resumed.load_state_dict(old)
    assert resumed.state_dict() == state
    assert resumed.findings == helper.findings
    fresh = TrainingHelper().state_dict()
    assert fresh == {"findings": fresh["findings"], "unused_checked": False, "unused_names": []}
