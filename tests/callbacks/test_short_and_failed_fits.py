"""Short fits get every section, failed fits say so everywhere, one module name (issue 29).

Real Lightning fits of the tiny models; what they leave is read back as the views read it
(the run record through ``plugins/run_view.py``, the export page's data, real TensorBoard).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins.views.run_view import read_view
from learnscope.plugins.views.view_page import export_html
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader
from tests.kit.callbacks import CtrlC
from tests.kit.models import Backbone, TinyClassifier, ZeroBranch, loaders, trainer

emcee_autocorr = pytest.importorskip("emcee.autocorr")


@pytest.fixture
def lightning_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """learnscope's records and those of Lightning's logger (which does not propagate)."""
    logger = logging.getLogger("lightning.pytorch")
    added = not logger.propagate
    if added:
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    caplog.set_level(logging.INFO, logger="learnscope")
    yield caplog
    if added:
        logger.removeHandler(caplog.handler)


def learnscope_lines(records: list[logging.LogRecord]) -> list[str]:
    """What learnscope said: its own logger's lines and those on Lightning's child logger."""
    return [
        r.getMessage() for r in records if r.name == "learnscope" or r.name.endswith(".learnscope")
    ]


def end_of_fit_line(caplog: pytest.LogCaptureFixture) -> str:
    (line,) = [m for m in learnscope_lines(caplog.records) if m.startswith("learnscope wrote")]
    return line


def record(run_dir: str | Path) -> list[dict[str, Any]]:
    return RecordReader(Path(run_dir) / RECORD_FILE).read()


def scalars(run_dir: str | Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return events


def page_views(page: Path) -> dict[str, dict[str, Any]]:
    data = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert data is not None
    return {r["name"]: r["view"] for r in json.loads(data[1])["runs"]}


# --- short fits ---------------------------------------------------------------------------


class SampledCopy(pl.Callback):
    """A copy, before each optimizer step, of the elements ModelAutocorrelation samples.

    It reads only the slices the callback chose (its checkpoint state) and the model's own
    parameters and gradients, so the history it keeps is independent of learnscope's.
    """

    def __init__(self, autocorrelation: ModelAutocorrelation) -> None:
        self.autocorrelation = autocorrelation
        self.rows: dict[str, list[np.ndarray]] = {"params": [], "grads": []}
        self.groups: list[str] = []

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        state = self.autocorrelation.state_dict()["history"]
        parameters = dict(pl_module.named_parameters())
        slices = list(zip(state["names"], state["starts"], state["lengths"], strict=True))
        for kind in ("params", "grads"):
            row = []
            for name, start, length in slices:
                tensor = parameters[name] if kind == "params" else parameters[name].grad
                row.append(tensor.detach().flatten()[start : start + length].double().numpy())
            self.rows[kind].append(np.concatenate(row))
        self.groups = [name.split(".")[0] for name, _, length in slices for _ in range(length)]


def varies(column: np.ndarray) -> bool:
    """Whether ``column`` is not constant by learnscope's documented rule, in float64 numpy.

    Constant: the RMS of its centred values (over its largest absolute value) at most 16
    float32 epsilons times its mean's magnitude, the rounding residue of centring a constant.
    A column that varies by a few roundings only (a nearly dead unit's gradient) is constant.
    """
    largest = np.abs(column).max()
    if largest == 0:
        return False
    scaled = column / largest
    centred = scaled - scaled.mean()
    floor = len(column) * (16 * np.finfo(np.float32).eps * abs(scaled.mean())) ** 2
    return bool((centred**2).sum() > floor)


def reference(history: np.ndarray, groups: list[str], group: str) -> dict[str, Any]:
    """emcee's normalised ACF of each non-constant column of ``group``; their mean, quartiles."""
    columns = history[:, [g == group for g in groups]]
    columns = columns[:, [varies(column) for column in columns.T]]
    acfs = np.stack([emcee_autocorr.function_1d(column) for column in columns.T])
    q25, median, q75 = np.quantile(acfs[:, 1], [0.25, 0.5, 0.75])
    # learnscope centres float32 columns: a column that moves little against its size (a
    # weight over six steps) keeps about eps * |mean| / std of relative precision in its ACF.
    spread = columns.std(0)
    rounding = float((np.finfo(np.float32).eps * np.abs(columns.mean(0)) / spread).max())
    tolerance = 1e-5 + 10 * rounding
    return {"acf": acfs.mean(0), "q25": q25, "median": median, "q75": q75, "tol": tolerance}


def reference_tau(acf: np.ndarray, steps: int) -> float | None:
    """tau of a group's mean ACF in emcee's window (c = 5), when the documented rule trusts it.

    Trusted: positive, the history at least 50 tau long, the window within the lags computed
    (``5 tau <= max lag``), and the mean lag-1 autocorrelation not negative.
    """
    taus = 2.0 * np.cumsum(acf) - 1.0
    tau = float(taus[emcee_autocorr.auto_window(taus, 5.0)])
    trusted = tau > 0 and 50 * tau <= steps and 5 * tau <= len(acf) - 1 and acf[1] >= 0
    return tau if trusted else None


def test_a_six_step_fit_with_default_settings_is_analysed_and_checked_at_its_end(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    autocorrelation = ModelAutocorrelation()  # analyses every 100 steps, lags up to 50
    copy = SampledCopy(autocorrelation)
    callbacks = [autocorrelation, copy, TrainingHelper(), EmbeddingProjector()]
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, callbacks, max_epochs=1).fit(TinyClassifier(), *loaders())

    view = read_view(tb.log_dir)  # one analysis, at step 6, with the lags 6 steps hold
    kinds = {k["kind"]: k for k in view["autocorrelation"]}
    assert list(kinds) == ["params", "grads"] and view["status"]["autocorrelation"] is None
    entries = [e for e in record(tb.log_dir) if e["kind"] == "autocorrelation"]
    assert [(e["what"], e["step"], e["lags"]) for e in entries] == [
        ("params", 6, [0, 1, 2, 3, 4, 5]),
        ("grads", 6, [0, 1, 2, 3, 4, 5]),
    ]
    events = scalars(tb.log_dir)
    for entry in entries:
        kind = kinds[entry["what"]]
        assert kind["steps"] == [6] and kind["lags"] == [1, 2, 5]
        assert kind["groups"] == entry["groups"] == ["encoder", "head"]
        history = np.stack(copy.rows[entry["what"]])
        assert history.shape[0] == 6
        for g, group in enumerate(kind["groups"]):
            expected = reference(history, copy.groups, group)
            np.testing.assert_allclose(entry["acf"][g], expected["acf"], atol=1e-5)
            np.testing.assert_allclose(kind["values"][0][g], expected["acf"][[1, 2, 5]], atol=2e-4)
            assert kind["rho1"][g] == [pytest.approx(expected["median"], abs=2e-4)]
            for name in ("q25", "median", "q75"):
                want = pytest.approx(expected[name], abs=expected["tol"])
                assert entry[f"rho1_{name}"][g] == want
            tau = reference_tau(expected["acf"], steps=6)  # usually None: six steps are few
            assert entry["tau"][g] == (None if tau is None else pytest.approx(tau, abs=1e-4))
            tag = f"~learnscope/autocorrelation/{entry['what']}/{group}/rho1_median"
            ((event),) = events.Scalars(tag)  # real TensorBoard reading
            assert event.step == 6 and event.value == pytest.approx(expected["median"], abs=1e-5)

    # TrainingHelper (check_every_n_steps=50) checks step 0 and the last step, 5.
    assert [e.step for e in events.Scalars("~learnscope/health/grad_norm/total")] == [0, 5]
    assert "1 autocorrelation analysis" in end_of_fit_line(lightning_log)


def test_a_fit_too_short_for_the_lags_says_the_setting_and_the_value(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    said = (
        "the run ended at step 3, before ModelAutocorrelation's history held 6 steps (its "
        "smallest lag, 5, plus one): lags=(1, 2) would analyse a fit this short"
    )
    tb = TensorBoardLogger(str(tmp_path / "logs"), name="short")
    callbacks = [ModelAutocorrelation(lags=(5, 10), buffer_size=16), TrainingHelper()]
    trainer(tmp_path, tb, callbacks, max_steps=3).fit(TinyClassifier(), *loaders())

    assert not [e for e in record(tb.log_dir) if e["kind"] == "autocorrelation"]
    assert read_view(tb.log_dir)["status"]["autocorrelation"] == said
    page = tmp_path / "view.html"
    export_html(tmp_path / "logs", page)
    assert page_views(page)["short/version_0"]["status"]["autocorrelation"] == said
    line = end_of_fit_line(lightning_log)
    assert "0 autocorrelation analyses" in line
    assert f". No autocorrelation analysis: {said}. Open it with: " in line

    # The lags it names do analyse that fit.
    tb = TensorBoardLogger(str(tmp_path / "logs"), name="fixed")
    callbacks = [ModelAutocorrelation(lags=(1, 2), buffer_size=16), TrainingHelper()]
    trainer(tmp_path, tb, callbacks, max_steps=3).fit(TinyClassifier(), *loaders())
    analyses = [
        (e["step"], e["lags"]) for e in record(tb.log_dir) if e["kind"] == "autocorrelation"
    ]
    assert analyses == [(3, [0, 1, 2])] * 2
    assert read_view(tb.log_dir)["status"]["autocorrelation"] is None


def test_the_end_of_fit_line_names_the_findings_it_counts(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    callbacks = [TrainingHelper(check_every_n_steps=2)]
    trainer(tmp_path, tb, callbacks, max_epochs=1).fit(ZeroBranch(), *loaders())
    line = end_of_fit_line(lightning_log)
    findings = [e for e in record(tb.log_dir) if e["kind"] == "findings"][-1]["rows"]
    counted = int(re.search(r"and (\d+) findings? in this fit", line)[1])
    assert counted == len(findings) >= 1
    holding = [r for r in findings if r["resolved_step"] is None]
    named = [f"{r['code']} on {r['subject']} ({r['severity']}, found at " for r in holding[:3]]
    assert all(name in line for name in named) and ". Findings: " + named[0] in line
    assert ("zero-gradient", "branch") in {(r["code"], r["subject"]) for r in findings}
    assert "zero-gradient on branch (warning, found at steps 2-5; still holds)" in line


# --- failed fits --------------------------------------------------------------------------


class MarksTheFailure:
    """Notes how many log records there were when the failure came, then raises it."""

    def __init__(self, caplog: pytest.LogCaptureFixture, error: Exception) -> None:
        self.caplog, self.error = caplog, error
        self.before: int | None = None

    def fail(self) -> None:
        self.before = len(self.caplog.records)
        raise self.error


class FailsAtStep3(pl.Callback):
    def __init__(self, failure: MarksTheFailure) -> None:
        self.failure = failure

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == 3:
            self.failure.fail()


class FailsInSetup(TinyClassifier):
    def __init__(self, failure: MarksTheFailure) -> None:
        super().__init__()
        self.failure = failure

    def setup(self, stage: str) -> None:
        self.failure.fail()


@pytest.mark.parametrize("where", ["setup", "mid-fit"])
def test_a_failed_fit_says_so_once_and_its_record_and_views_say_failed(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture, where: str
) -> None:
    error = ValueError("no column 'label' in the batch")
    failure = MarksTheFailure(lightning_log, error)
    model: pl.LightningModule = FailsInSetup(failure) if where == "setup" else TinyClassifier()
    extra = [FailsAtStep3(failure)] if where == "mid-fit" else []
    callbacks = [ModelAutocorrelation(), TrainingHelper(), EmbeddingProjector(), *extra]
    tb = TensorBoardLogger(str(tmp_path / "logs"), name="tb")
    with pytest.raises(ValueError, match="no column 'label'"):
        trainer(tmp_path, tb, callbacks, max_epochs=2).fit(model, *loaders())
    step = 0 if where == "setup" else 3

    assert failure.before is not None
    (line,) = learnscope_lines(lightning_log.records[failure.before :])
    assert line.startswith(
        f"learnscope: the fit failed at step {step} (ValueError: no column 'label' in the "
        "batch); what learnscope wrote before it (0 embedding snapshots, 0 autocorrelation "
        "analyses and 0 findings) is in "
    )
    assert tb.log_dir in line and "Open it with" not in line and "tensorboard" not in line
    (said,) = [r for r in lightning_log.records[failure.before :] if r.getMessage() == line]
    assert said.levelno == logging.WARNING

    assert record(tb.log_dir)[-1] == {
        "kind": "end",
        "step": step,
        "status": "failed",
        "error": {"type": "ValueError", "message": "no column 'label' in the batch"},
    }
    failed = f"the run failed at step {step}: ValueError: no column 'label' in the batch"
    view = read_view(tb.log_dir)
    assert view["failed"] == "ValueError: no column 'label' in the batch"
    assert view["messages"][0] == failed and view["has_data"] is False
    assert view["status"]["autocorrelation"] == (
        f"the run failed at step {step} (ValueError: no column 'label' in the batch), before "
        "the first autocorrelation analysis"
    )
    page = tmp_path / "view.html"
    export = export_html(tmp_path / "logs", page)
    assert export.failed_runs == [
        ("tb/version_0", f"failed at step {step}: ValueError: no column 'label' in the batch")
    ]
    shown = page_views(page)["tb/version_0"]
    assert shown["failed"] == view["failed"] and shown["messages"][0] == failed


def test_ctrl_c_stays_interrupted_with_the_command_that_opens_it(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, tb, [TrainingHelper(), CtrlC(step=2)], max_epochs=1)
    with pytest.raises(SystemExit):  # Lightning's graceful shutdown after a Ctrl-C
        run.fit(TinyClassifier(), *loaders())
    assert record(tb.log_dir)[-1] == {"kind": "end", "step": 2, "status": "interrupted"}
    line = end_of_fit_line(lightning_log)
    assert "in this fit (interrupted)" in line and "Open it with: " in line
    assert read_view(tb.log_dir)["failed"] is None


# --- one module name ----------------------------------------------------------------------


def test_training_helper_checks_the_module_of_the_projector_beside_it(
    tmp_path: Path, lightning_log: pytest.LogCaptureFixture
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    helper = TrainingHelper(check_every_n_steps=2)
    callbacks = [helper, EmbeddingProjector("backbone")]  # the projector after the helper
    trainer(tmp_path, tb, callbacks, max_epochs=1).fit(Backbone(), *loaders())

    told = (
        "learnscope: TrainingHelper checks 'backbone', the module of the EmbeddingProjector on "
        "this trainer (read with its select, spatial and mask_fn); pass "
        "TrainingHelper(embedding_module=...) to check another"
    )
    assert [r for r in lightning_log.records if r.levelno >= logging.WARNING] == []
    assert learnscope_lines(lightning_log.records).count(told) == 1
    tags = scalars(tb.log_dir).Tags()["scalars"]
    assert "~learnscope/health/head_weight_ratio/head" in tags  # backbone against its head

    # An explicit embedding_module wins: the model has no 'encoder', so the checks are off.
    lightning_log.clear()
    explicit = TrainingHelper(embedding_module="encoder")
    tb = TensorBoardLogger(str(tmp_path), name="explicit")
    run = trainer(tmp_path, tb, [explicit, EmbeddingProjector("backbone")], max_epochs=1)
    run.fit(Backbone(), *loaders())
    (warning,) = [r.getMessage() for r in lightning_log.records if r.levelno >= logging.WARNING]
    assert "no sub-module 'encoder'" in warning
