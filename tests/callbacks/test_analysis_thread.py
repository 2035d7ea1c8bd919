"""The autocorrelation analyses run on the writers' thread, with the numbers of the training thread.

At an analysis step the training thread only copies the histories; the writers' thread
(``learnscope-writer``) computes the summary and writes it. These fits check that the written
run-record entries equal (to float32 rounding) the summaries computed on the training thread
from the same histories, as the callback did before, that loggers written on the training
thread (Lightning's own, such as a CSV logger) still get the scalars there, and that training is
bit-identical with and without the callbacks.
"""

from __future__ import annotations

import copy
import json
import pickle
import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.autocorrelation.analysis import PendingSummary, summarize
from learnscope.lightning_glue import ModelAutocorrelation, TrainingHelper
from learnscope.plugins.pipeline.run_record_writer import autocorrelation_entries
from learnscope.records import AutocorrelationSummary
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader, encode_entries
from tests.kit.models import Collect, TinyClassifier, loaders, trainer

STEPS = 24  # analyses at 10 and 20, and at the fit's end


class TrainingThreadSummaries(pl.Callback):
    """Beside a ModelAutocorrelation: its summaries, computed on the training thread as before.

    It comes after the callback on the trainer, so it reads the histories as the analysis did.
    """

    def __init__(self, autocorrelation: ModelAutocorrelation) -> None:
        self.autocorrelation = autocorrelation
        self.summaries: dict[int, AutocorrelationSummary] = {}

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        callback, step = self.autocorrelation, trainer.global_step + 1
        history = callback.history
        assert history is not None
        if step % callback.analyze_every_n_steps == 0 and history.num_steps > max(callback.lags):
            self.summaries[step] = self._summary(step, callback.lags)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        callback, step = self.autocorrelation, trainer.global_step
        history = callback.history
        assert history is not None
        if step not in self.summaries:
            lags = tuple(lag for lag in callback.lags if lag < history.num_steps)
            self.summaries[step] = self._summary(step, lags)

    def _summary(self, step: int, lags: tuple[int, ...]) -> AutocorrelationSummary:
        history = self.autocorrelation.history
        assert history is not None
        kinds = {kind: history.history(kind) for kind in history.kinds}
        return summarize(kinds, history.group_index, history.group_names, step=step, lags=lags)


class ThreadedCollect(Collect):
    """A logger that keeps every ``log_metrics`` call and the thread that made it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        super().log_metrics(metrics, step)
        self.threads.append(threading.current_thread().name)


@pytest.fixture
def finished_on(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads that finish autocorrelation summaries during the test."""
    threads: list[str] = []
    finish = PendingSummary.finish

    def finish_and_note(self: PendingSummary, all_scalars: bool = True) -> AutocorrelationSummary:
        threads.append(threading.current_thread().name)
        return finish(self, all_scalars)

    monkeypatch.setattr(PendingSummary, "finish", finish_and_note)
    return threads


def assert_close(got: Any, wanted: Any) -> None:
    """The same structure and text; numbers within float32 rounding."""
    if isinstance(wanted, dict):
        assert got.keys() == wanted.keys()
        for key in wanted:
            assert_close(got[key], wanted[key])
    elif isinstance(wanted, list):
        assert len(got) == len(wanted)
        for a, b in zip(got, wanted, strict=True):
            assert_close(a, b)
    elif isinstance(wanted, float):
        assert got == pytest.approx(wanted, rel=1e-5, abs=1e-6)
    else:
        assert got == wanted


def test_the_writers_thread_writes_the_summaries_of_the_training_thread(
    tmp_path: Path, finished_on: list[str]
) -> None:
    torch.manual_seed(0)
    callback = ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=10, lags=(1, 2, 5))
    reference = TrainingThreadSummaries(callback)
    tensorboard, collect = TensorBoardLogger(str(tmp_path), name="tb"), ThreadedCollect()
    train, val = loaders()
    fit = trainer(
        tmp_path, [tensorboard, collect], [callback, reference], max_steps=STEPS, max_epochs=4
    )
    fit.fit(TinyClassifier(), train, val)

    assert sorted(reference.summaries) == [10, 20, STEPS]
    # The callback's arithmetic ran off the training thread; the reference's ran on it.
    training = threading.current_thread().name
    assert sorted(finished_on) == sorted(["learnscope-writer"] * 3 + [training] * 3)
    entries = RecordReader(Path(tensorboard.log_dir) / RECORD_FILE).read()
    written = [e for e in entries if e["kind"] == "autocorrelation"]
    made = [
        e
        for step in sorted(reference.summaries)
        for e in autocorrelation_entries(reference.summaries[step])
    ]
    expected = [json.loads(line) for line in encode_entries(made).splitlines()]  # as recorded
    assert len(written) == len(expected) == 6  # params and grads at each step
    for got, wanted in zip(written, expected, strict=True):
        # the same histories, so the same numbers; float32 sums on two threads may round their
        # last bits apart (seen once in CI: 1e-7 of an ACF value), so within float32 rounding
        assert_close({key: got[key] for key in wanted}, wanted)

    # A logger Lightning writes on the training thread gets the scalars there, at each step.
    steps = [
        step
        for step, metrics in collect.metrics
        if "learnscope/autocorrelation/params/encoder/rho1_median" in metrics
    ]
    assert steps == [10, 20, STEPS]
    assert set(collect.threads) == {threading.current_thread().name}


def test_training_is_bit_identical_with_and_without_the_callbacks(tmp_path: Path) -> None:
    def fitted(callbacks: list[Any], folder: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = TinyClassifier()
        train, val = loaders()
        loggers = [TensorBoardLogger(str(tmp_path / folder))]
        trainer(tmp_path / folder, loggers, callbacks, max_steps=STEPS, max_epochs=4).fit(
            model, train, val
        )
        return {name: value.detach().clone() for name, value in model.state_dict().items()}

    watched = fitted(
        [
            ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=10, lags=(1, 2, 5)),
            TrainingHelper(check_every_n_steps=5),
        ],
        "watched",
    )
    plain = fitted([], "plain")
    assert watched.keys() == plain.keys()
    assert all(torch.equal(watched[name], plain[name]) for name in plain)


def broken_finish(self: PendingSummary, all_scalars: bool = True) -> AutocorrelationSummary:
    raise FloatingPointError(f"the summary of step {self.step} broke")


def test_in_strict_mode_an_analysis_that_fails_on_the_writers_thread_fails_the_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PendingSummary, "finish", broken_finish)
    callback = ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=10, lags=(1, 2, 5))
    train, val = loaders()
    fit = trainer(tmp_path, [TensorBoardLogger(str(tmp_path))], [callback], max_steps=STEPS)
    with pytest.raises(FloatingPointError, match="the summary of step 10 broke"):
        fit.fit(TinyClassifier(), train, val)


def test_leniently_an_analysis_that_fails_switches_the_analyses_off_and_training_goes_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lenient: None,
    learnscope_log: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(PendingSummary, "finish", broken_finish)
    callback = ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=10, lags=(1, 2, 5))
    tensorboard = TensorBoardLogger(str(tmp_path))
    train, val = loaders()
    fit = trainer(tmp_path, [tensorboard], [callback], max_steps=STEPS, max_epochs=4)
    fit.fit(TinyClassifier(), train, val)
    assert fit.global_step == STEPS
    assert callback.switched_off == {"model autocorrelation"}
    failed = [r.getMessage() for r in learnscope_log.records if "failed on step" in r.getMessage()]
    assert len(failed) == 1 and "FloatingPointError: the summary of step 10 broke" in failed[0]
    entries = RecordReader(Path(tensorboard.log_dir) / RECORD_FILE).read()
    assert not [e for e in entries if e["kind"] == "autocorrelation"]


class CopiesAfterAnalyses(pl.Callback):
    """Pickles and copies a callback at the end of every step, analysis steps included."""

    def __init__(self, callback: ModelAutocorrelation) -> None:
        self.callback = callback
        self.copies: list[ModelAutocorrelation] = []
        self.in_flight = 0  # steps that ended with an analysis still to reach every writer

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.in_flight += self.callback._made is not None
        self.copies.append(pickle.loads(pickle.dumps(self.callback)))
        self.copies.append(copy.deepcopy(self.callback))


def test_the_callback_pickles_and_copies_while_its_analysis_is_being_made(tmp_path: Path) -> None:
    callback = ModelAutocorrelation(buffer_size=16, analyze_every_n_steps=10, lags=(1, 2, 5))
    copies = CopiesAfterAnalyses(callback)
    train, val = loaders()
    fit = trainer(tmp_path, [Collect()], [callback, copies], max_steps=12, max_epochs=2)
    fit.fit(TinyClassifier(), train, val)
    assert copies.in_flight >= 1  # the step-10 analysis, handed to the writers
    assert len(copies.copies) == 24
    assert all(c.lags == (1, 2, 5) and c._made is None for c in copies.copies)
