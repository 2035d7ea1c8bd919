"""Failed, stopped and short runs in the views: the export page and the learnscope tab (issues 29
and 37).

A log directory holds a run stopped with Ctrl-C (a real fit, a ``KeyboardInterrupt`` raised from
a callback: Lightning ends it ``interrupted``), the same run still going (its record without its
``end`` entry), a good run (a real fit with snapshots) and, started last, a run that failed in
``setup`` before writing any data. Every view opens on the good run, marks the failed and the
stopped run with how they ended and at which step, lists them apart from the finished and
running ones, and says how they ended when they are shown; ``learnscope export`` names both on
standard error. A fit too short for ModelAutocorrelation's lags says the setting and the value
that would fill its section, on the page as in the record.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins.views.run_search import run_outcome
from learnscope.plugins.views.run_view import read_view
from learnscope.run_directory.file_names import RECORD_FILE
from tests.kit.browser import (
    enter_learnscope_tab,
    ready_view_state,
    unavailable_reason,
)
from tests.kit.callbacks import CtrlC
from tests.kit.models import TinyClassifier, ZeroBranch, loaders, trainer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

needs_browser = pytest.mark.skipif(
    unavailable_reason() is not None, reason=str(unavailable_reason())
)

FAILURE = "ValueError: the data set has no column 'label'"
STOPPED = "the run was interrupted by Ctrl-C at step 4: what it wrote until then is shown"
# The run menu: the runs that finished or go on, then those stopped or failed, each marked.
MENU = [
    ["finished or running", ["going/version_0", "good/version_0"]],
    ["stopped or failed", ["crashed/version_0", "stopped/version_0"]],
]
OPTIONS = [
    [
        "going/version_0",
        "going/version_0",
        "going/version_0: no end yet (it goes on, or its process was killed)",
    ],
    ["good/version_0", "good/version_0", "good/version_0: finished at step 3"],
    [
        "crashed/version_0",
        "crashed/version_0 (failed at step 0)",
        f"crashed/version_0: failed at step 0: {FAILURE}",
    ],
    [
        "stopped/version_0",
        "stopped/version_0 (interrupted at step 4)",
        "stopped/version_0: interrupted by Ctrl-C at step 4; what it wrote until then is shown",
    ],
]
SHORT = (
    "The run ended at step 3, before ModelAutocorrelation's history held 6 steps (its "
    "smallest lag, 5, plus one): lags=(1, 2) would analyse a fit this short."
)


class FailsInSetup(TinyClassifier):
    def setup(self, stage: str) -> None:
        raise ValueError("the data set has no column 'label'")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``stopped``, ``going`` (it without its end), ``good`` (a short fit), then ``crashed``."""
    root = tmp_path_factory.mktemp("failed") / "logs"
    train, val = loaders(n_train=48)  # an epoch of 3 steps ends with a snapshot

    def callbacks() -> list[Any]:
        projector = EmbeddingProjector(metadata_fn=lambda b: {"label": b[1]}, aligned_pca=True)
        return [projector, ModelAutocorrelation(lags=(5, 10), buffer_size=16), TrainingHelper()]

    stopped = TensorBoardLogger(str(root), name="stopped")
    ctrl_c = CtrlC(step=4)  # in the second epoch, after the first epoch's snapshot
    run = trainer(root, stopped, [*callbacks(), ctrl_c], max_epochs=3)
    with pytest.raises(SystemExit):  # Lightning's graceful shutdown after a Ctrl-C
        run.fit(TinyClassifier(), train, val)
    record = Path(stopped.log_dir) / RECORD_FILE
    lines = record.read_text("utf-8").splitlines(keepends=True)
    assert json.loads(lines[-1]) == {"kind": "end", "step": 4, "status": "interrupted"}
    going = root / "going" / "version_0"  # the same run before it ended: no end entry yet
    going.mkdir(parents=True)
    (going / RECORD_FILE).write_text("".join(lines[:-1]), "utf-8")
    time.sleep(0.05)
    good = TensorBoardLogger(str(root), name="good")
    trainer(root, good, callbacks(), max_steps=3).fit(TinyClassifier(), train, val)
    time.sleep(0.05)  # the failed run starts later: it is the newest
    crashed = TensorBoardLogger(str(root), name="crashed")
    run = trainer(root, crashed, [EmbeddingProjector(), TrainingHelper()], max_epochs=1)
    with pytest.raises(ValueError, match="no column 'label'"):
        run.fit(FailsInSetup(), *loaders())
    assert read_view(crashed.log_dir)["time"] > read_view(good.log_dir)["time"]
    assert read_view(good.log_dir)["time"] > read_view(stopped.log_dir)["time"]
    return root


def _shown(browser: Any) -> dict[str, Any]:
    """The run picker's groups and options, the messages under the header, the
    autocorrelation status."""
    return browser.execute_script(
        """
        const menu = document.querySelector('select[aria-label="run"]');
        const status = document.querySelector('[data-role="status-autocorrelation"]');
        return {
          groups: [...menu.querySelectorAll('optgroup')].map(
            (g) => [g.label, [...g.children].map((o) => o.value)]),
          options: [...menu.querySelectorAll('option')].map(
            (o) => [o.value, o.textContent, o.title]),
          messages: [...document.querySelectorAll('.ls-msg')].map((m) => m.textContent),
          autocorrelation: status ? status.textContent : null,
        };
        """
    )


def _check_the_views(browser: Any) -> None:
    """Opened on the good run; the failed and the stopped run marked and listed apart, each
    saying how it ended when it is shown; the running one unmarked, with the finished."""
    assert ready_view_state(browser)["run"] == "good/version_0"  # not the newer, failed one
    shown = _shown(browser)
    assert shown["groups"] == MENU
    assert shown["options"] == OPTIONS
    assert shown["autocorrelation"] == SHORT
    assert not any("failed" in m or "interrupted" in m for m in shown["messages"])
    browser.execute_script("window.learnscopeView.loadRun('crashed/version_0')")
    ready_view_state(browser)
    shown = _shown(browser)
    assert shown["messages"][0] == f"the run failed at step 0: {FAILURE}"
    browser.execute_script("window.learnscopeView.loadRun('stopped/version_0')")
    assert ready_view_state(browser)["points"] > 0  # its snapshot, written before the Ctrl-C
    shown = _shown(browser)
    assert shown["messages"][0] == STOPPED
    assert shown["autocorrelation"] == (
        "The run was interrupted by Ctrl-C at step 4, before the first autocorrelation analysis."
    )
    browser.execute_script("window.learnscopeView.loadRun('going/version_0')")
    ready_view_state(browser)
    shown = _shown(browser)
    assert not any("interrupted" in m or "failed" in m for m in shown["messages"])
    assert shown["autocorrelation"].startswith("Waiting for the first autocorrelation analysis")


def test_the_export_names_failed_runs_and_its_page_opens_on_the_newest_with_data(
    logdir: Path, tmp_path: Path
) -> None:
    page = tmp_path / "view.html"
    result = subprocess.run(
        [shutil.which("learnscope") or "learnscope", "export", str(logdir), "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"learnscope export: crashed/version_0 failed at step 0: {FAILURE} (its page says so)",
        "learnscope export: stopped/version_0 interrupted by Ctrl-C at step 4 (its page says so)",
    ]
    runs = "crashed/version_0, going/version_0, good/version_0, stopped/version_0"
    assert f"4 run(s): {runs}" in result.stdout
    data = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert data is not None
    views = {r["name"]: r["view"] for r in json.loads(data[1])["runs"]}
    assert views["crashed/version_0"]["failed"] == FAILURE
    assert views["crashed/version_0"]["has_data"] is False
    assert views["good/version_0"]["failed"] is None and views["good/version_0"]["has_data"]
    assert views["stopped/version_0"]["ended"] == {"step": 4, "status": "interrupted"}
    assert views["stopped/version_0"]["messages"][0] == STOPPED
    assert views["going/version_0"]["ended"] is None


@needs_browser
def test_the_exported_page_opens_on_the_good_run_and_marks_the_failed_one(
    logdir: Path, browser: Any, tmp_path: Path
) -> None:
    from learnscope.lightning_glue.cli import main

    page = tmp_path / "view.html"
    assert main(["export", str(logdir), "--html", str(page)]) == 0
    browser.get(page.as_uri())
    _check_the_views(browser)


@needs_browser
def test_the_tab_opens_on_the_good_run_and_marks_the_failed_one(logdir: Path, browser: Any) -> None:
    from tests.kit.tb_server import tensorboard

    with tensorboard(logdir) as server:
        runs = server.wait_for(
            "/data/plugin/learnscope/runs", lambda runs: isinstance(runs, list) and len(runs) == 4
        )
        assert [(r["name"], r["failed"], r["has_data"], r["ended"]) for r in runs] == [
            ("crashed/version_0", FAILURE, False, {"step": 0, "status": "failed"}),
            ("going/version_0", None, True, None),
            ("good/version_0", None, True, {"step": 3, "status": "finished"}),
            ("stopped/version_0", None, True, {"step": 4, "status": "interrupted"}),
        ]
        enter_learnscope_tab(browser, server.base)
        try:
            _check_the_views(browser)
        finally:
            browser.switch_to.default_content()


def test_a_run_that_failed_after_writing_data_counts_as_a_run_with_data(tmp_path: Path) -> None:
    """Its findings are data: the views do not pass it over."""

    class FailsAtStep3(pl.Callback):
        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == 3:
                raise RuntimeError("out of memory")

    callbacks = [TrainingHelper(check_every_n_steps=1), FailsAtStep3()]
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    with pytest.raises(RuntimeError):
        trainer(tmp_path, tb, callbacks, max_epochs=1).fit(ZeroBranch(), *loaders())
    assert run_outcome(tb.log_dir) == {
        "failed": "RuntimeError: out of memory",
        "has_data": True,
        "ended": {"step": 3, "status": "failed"},
    }
    view = read_view(tb.log_dir)
    assert view["failed"] == "RuntimeError: out of memory" and view["has_data"] is True


@needs_browser
def test_the_wandb_page_of_a_stopped_run_says_where_it_stopped(
    logdir: Path, browser: Any, tmp_path: Path
) -> None:
    """The W&B page is made from the record the W&B writer keeps, as the export's from its."""
    from learnscope.plugins.wandb.page_writer import wandb_view_html

    page = tmp_path / "wandb.html"
    page.write_text(wandb_view_html(logdir / "stopped" / "version_0", name="stopped"), "utf-8")
    browser.get(page.as_uri())
    assert ready_view_state(browser)["run"] == "stopped"
    shown = _shown(browser)
    assert shown["groups"] == [["stopped or failed", ["stopped"]]]
    assert shown["options"] == [
        [
            "stopped",
            "stopped (interrupted at step 4)",
            "stopped: interrupted by Ctrl-C at step 4; what it wrote until then is shown",
        ]
    ]
    assert shown["messages"][0] == STOPPED
