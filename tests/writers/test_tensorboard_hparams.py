"""Every run's summary in TensorBoard's HParams dashboard, read back from a real server.

Real ``Trainer.fit`` runs into one log directory, a real ``tensorboard`` server, its HParams
routes (``POST /data/plugin/hparams/experiment`` and ``/session_groups``): learnscope's columns
are there, each session holds what ``learnscope.read_summaries`` says of its run and the run's
hyper-parameters, nothing of another run; a failed run reads ``failed``, a run still being
written has no row yet. A ``TensorBoardLogger`` with its default ``hp_metric`` writes the
columns itself: the fit says, in one line, what to set.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.plugins.hparams import metadata
from tensorboard.util import tensor_util

import learnscope
from learnscope.lightning_glue.hparams_advice import ADVICE
from learnscope.plugins.tensorboard.hparams import column
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import Finding, RunEnd, RunStart
from learnscope.run_directory.summary import RunSummary
from tests.kit.callbacks import learnscope_callbacks
from tests.kit.models import TinyClassifier, ZeroBranch, loaders, trainer
from tests.kit.tb_server import hparams_routes, learnscope_metrics, tensorboard


class Tuned(TinyClassifier):
    """A classifier that saves its hyper-parameters."""

    def __init__(self, lr: float = 0.05, width: int = 8, optimizer: str = "sgd") -> None:
        super().__init__(hidden=width)
        self.save_hyperparameters()


class TunedZeroBranch(ZeroBranch):
    """A branch that gets zero gradients (a ``zero-gradient`` finding), saving its hparams."""

    def __init__(self, lr: float = 0.05, amp: bool = False, scheduler: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()


class Boom(pl.Callback):
    """Raises ``RuntimeError`` when the training batch of step 5 starts."""

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == 5:
            raise RuntimeError("the loader broke")


def fit(logdir: Path, name: str, model: pl.LightningModule, **logger: Any) -> None:
    """Fit ``model`` with learnscope's callbacks into ``logdir/name``; a failure is kept."""
    callbacks = learnscope_callbacks()
    if name.startswith("failed"):
        callbacks.append(Boom())
    tb = TensorBoardLogger(str(logdir), name=name, version=0, **logger)
    try:
        trainer(logdir, tb, callbacks).fit(model, *loaders())
    except RuntimeError as error:
        assert "the loader broke" in str(error)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A sweep with ``default_hp_metric=False``, and a run still being written (case c)."""
    logdir = tmp_path_factory.mktemp("sweep")
    fit(logdir, "lr_0.01", Tuned(lr=0.01), default_hp_metric=False)
    fit(logdir, "zero_branch", TunedZeroBranch(lr=0.2, amp=True), default_hp_metric=False)
    fit(logdir, "failed_lr_5", Tuned(lr=5.0, width=4), default_hp_metric=False)
    fit(logdir, "no_hparams", TinyClassifier(), default_hp_metric=False)
    (logdir / "running" / "version_0").mkdir(parents=True)
    running = TensorBoardWriter(logdir / "running" / "version_0")
    running.write_run_start(RunStart(hyperparameters={"lr": 0.3}))
    running.write_findings([Finding("zero-gradient", "head", "zero", 2)], step=2)
    yield logdir
    running.close()


@pytest.mark.slow
def test_every_session_holds_its_runs_summary_and_hyperparameters(sweep: Path) -> None:
    summaries = learnscope.read_summaries(sweep)
    assert summaries["running/version_0"].status == "running"
    assert summaries["failed_lr_5/version_0"].status == "failed"
    assert summaries["zero_branch/version_0"].first_finding is not None
    ended = {run: summary for run, summary in summaries.items() if summary.status != "running"}
    assert len(ended) == 4
    with tensorboard(sweep) as server:
        experiment, groups = hparams_routes(server, len(ended))
    hparam_names = {info["name"] for info in experiment["hparamInfos"]}
    assert {"lr", "width", "optimizer", "amp", column("learnscope/status")} <= hparam_names
    assert column("learnscope/first_finding/code") in hparam_names
    metric_names = {info["name"]["tag"] for info in experiment["metricInfos"]}
    assert {column("learnscope/finding_count"), column("learnscope/last_step")} <= metric_names
    assert "val_loss" in metric_names  # the run's own scalars are columns too
    assert set(groups) == set(ended)  # the run still being written has no row yet
    assert_sessions_hold(ended, groups)


@pytest.mark.slow
def test_a_model_without_saved_hyperparameters_needs_no_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lightning.pytorch.learnscope")
    fit(tmp_path, "plain", TinyClassifier())  # (b): Lightning logs no hyper-parameters
    fit(tmp_path, "failed_plain", TinyClassifier())
    assert not [r for r in caplog.records if r.getMessage() == ADVICE]
    summaries = learnscope.read_summaries(tmp_path)
    with tensorboard(tmp_path) as server:
        experiment, groups = hparams_routes(server, len(summaries))
    metric_names = {info["name"]["tag"] for info in experiment["metricInfos"]}
    assert column("learnscope/finding_count") in metric_names and "hp_metric" not in metric_names
    assert set(groups) == set(summaries)
    assert_sessions_hold(summaries, groups)


def assert_sessions_hold(summaries: dict[str, RunSummary], groups: dict[str, Any]) -> None:
    """Each run's one session holds its hyper-parameters, status and summary, and no more."""
    for run, summary in summaries.items():
        (session,) = groups[run]["sessions"]
        assert session["name"] == run
        assert groups[run]["hparams"] == expected_hparams(summary)
        status = {"finished": "STATUS_SUCCESS", "failed": "STATUS_FAILURE"}[summary.status]
        assert session["status"] == status
        assert learnscope_metrics(session) == pytest.approx(expected_metrics(summary), rel=1e-6)


def expected_hparams(summary: RunSummary) -> dict[str, Any]:
    """The run's hyper-parameters (numbers as floats, ``None`` unset) and its text columns."""
    flat = summary.flat()
    hparams: dict[str, Any] = {
        name: float(value) if isinstance(value, int) and not isinstance(value, bool) else value
        for name, value in summary.hyperparameters.items()
        if value is not None
    }
    hparams[column("learnscope/status")] = summary.status
    if "learnscope/first_finding/code" in flat:
        hparams[column("learnscope/first_finding/code")] = flat["learnscope/first_finding/code"]
    return hparams


def expected_metrics(summary: RunSummary) -> dict[str, float]:
    """Every number of the run's flat summary, by its column."""
    return {
        column(name): float(value)
        for name, value in summary.flat().items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


@pytest.mark.slow
def test_lightnings_own_hp_metric_columns_are_said_once_per_fit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lightning.pytorch.learnscope")
    fit(tmp_path, "lr_0.01", Tuned(lr=0.01))  # (a) save_hyperparameters(), default_hp_metric
    fit(tmp_path, "lr_0.1", Tuned(lr=0.1))
    said = [r for r in caplog.records if r.getMessage() == ADVICE]
    assert len(said) == 2 and all(r.levelno == logging.INFO for r in said)
    with tensorboard(tmp_path) as server:  # why: Lightning's experiment names the columns
        experiment, _ = hparams_routes(server, 2)
    assert [info["name"]["tag"] for info in experiment["metricInfos"]] == ["hp_metric"]
    assert {info["name"] for info in experiment["hparamInfos"]} == {"lr", "width", "optimizer"}


def test_the_session_is_written_once_when_the_run_ends(tmp_path: Path) -> None:
    writer = TensorBoardWriter(tmp_path)
    writer.write_run_start(RunStart(time=100.0, hyperparameters={"lr": 0.5, "note": None}))
    writer.write_scalars({"loss": 1.0}, step=3)
    assert session_start(tmp_path) is None  # still running: no session yet
    writer.write_run_end(RunEnd(4, status="interrupted"))
    writer.write_run_end(RunEnd(6, status="finished"))  # a later end: the session stays
    writer.close()
    start, end = session_start(tmp_path), session_end(tmp_path)
    assert start is not None and end is not None
    assert dict(start.hparams) == {
        "lr": start.hparams["lr"],
        column("learnscope/status"): start.hparams[column("learnscope/status")],
    }
    assert start.hparams["lr"].number_value == 0.5 and start.start_time_secs == 100.0
    assert start.hparams[column("learnscope/status")].string_value == "interrupted"
    assert end.status == 0  # STATUS_UNKNOWN: HParams has no word for a run stopped by hand
    events = plugin_event_accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    (last_step,) = events.Tensors(column("learnscope/last_step"))
    assert last_step.step == 4 and tensor_util.make_ndarray(last_step.tensor_proto).item() == 4


def test_a_writer_closed_without_an_end_writes_the_finished_session(tmp_path: Path) -> None:
    writer = TensorBoardWriter(tmp_path)
    writer.write_run_start(RunStart())
    writer.close()
    start = session_start(tmp_path)
    assert start is not None
    assert start.hparams[column("learnscope/status")].string_value == "finished"


def _hparams_data(run_dir: Path, tag: str) -> bytes | None:
    """The content of the HParams ``tag`` TensorBoard reads in ``run_dir``, if any."""
    events = plugin_event_accumulator.EventAccumulator(str(run_dir))
    events.Reload()
    if metadata.PLUGIN_NAME not in events.ActivePlugins():
        return None
    return events.PluginTagToContent(metadata.PLUGIN_NAME).get(tag)


def session_start(run_dir: Path) -> Any:
    """The session start TensorBoard reads in ``run_dir``, or ``None``."""
    content = _hparams_data(run_dir, metadata.SESSION_START_INFO_TAG)
    return None if content is None else metadata.parse_session_start_info_plugin_data(content)


def session_end(run_dir: Path) -> Any:
    """The session end TensorBoard reads in ``run_dir``, or ``None``."""
    content = _hparams_data(run_dir, metadata.SESSION_END_INFO_TAG)
    return None if content is None else metadata.parse_session_end_info_plugin_data(content)
