"""Failed and short runs in the views: the export page and the learnscope tab (issue 29).

A log directory holds a good run (a real fit with snapshots) and, started later, a run that
failed in ``setup`` before writing any data. Every view opens on the good run, marks the failed
one in its run picker and says how it failed when it is shown; ``learnscope export`` names it
on standard error. A fit too short for ModelAutocorrelation's lags says the setting and the
value that would fill its section, on the page as in the record.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from browser import chromium_or_skip, enter_learnscope_tab, ready_view_state, unavailable_reason
from lightning.pytorch.loggers import TensorBoardLogger
from tiny_models import TinyClassifier, ZeroBranch, loaders, trainer

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins.views.run_search import run_outcome
from learnscope.plugins.views.run_view import read_view

pytestmark = [pytest.mark.browser, pytest.mark.slow]

needs_browser = pytest.mark.skipif(
    unavailable_reason() is not None, reason=str(unavailable_reason())
)

FAILURE = "ValueError: the data set has no column 'label'"
SHORT = (
    "The run ended at step 3, before ModelAutocorrelation's history held 6 steps (its "
    "smallest lag, 5, plus one): lags=(1, 2) would analyse a fit this short."
)


class FailsInSetup(TinyClassifier):
    def setup(self, stage: str) -> None:
        raise ValueError("the data set has no column 'label'")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``good/version_0`` (snapshots, a short fit's empty autocorrelation), then ``crashed``."""
    root = tmp_path_factory.mktemp("failed") / "logs"
    projector = EmbeddingProjector(metadata_fn=lambda b: {"label": b[1]}, aligned_pca=True)
    callbacks = [projector, ModelAutocorrelation(lags=(5, 10), buffer_size=16), TrainingHelper()]
    good = TensorBoardLogger(str(root), name="good")
    train, val = loaders(n_train=48)  # an epoch of 3 steps ends with a snapshot
    trainer(root, good, callbacks, max_steps=3).fit(TinyClassifier(), train, val)
    time.sleep(0.05)  # the failed run starts later: it is the newest
    crashed = TensorBoardLogger(str(root), name="crashed")
    run = trainer(root, crashed, [EmbeddingProjector(), TrainingHelper()], max_epochs=1)
    with pytest.raises(ValueError, match="no column 'label'"):
        run.fit(FailsInSetup(), *loaders())
    assert read_view(crashed.log_dir)["time"] > read_view(good.log_dir)["time"]
    return root


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_or_skip()


def _shown(browser: Any) -> dict[str, Any]:
    """The run picker's options, the messages under the header, the autocorrelation status."""
    return browser.execute_script(
        """
        const options = [...document.querySelectorAll('select[aria-label="run"] option')];
        const status = document.querySelector('[data-role="status-autocorrelation"]');
        return {
          options: options.map((o) => [o.value, o.textContent, o.title]),
          messages: [...document.querySelectorAll('.ls-msg')].map((m) => m.textContent),
          autocorrelation: status ? status.textContent : null,
        };
        """
    )


def _check_the_views(browser: Any) -> None:
    """Opened on the good run; the failed run marked, and said failed when it is shown."""
    assert ready_view_state(browser)["run"] == "good/version_0"  # not the newer, failed one
    shown = _shown(browser)
    assert shown["options"] == [
        ["crashed/version_0", "crashed/version_0 (failed)", f"failed: {FAILURE}"],
        ["good/version_0", "good/version_0", "good/version_0"],
    ]
    assert shown["autocorrelation"] == SHORT
    assert not any("failed" in m for m in shown["messages"])
    browser.execute_script("window.learnscopeView.loadRun('crashed/version_0')")
    ready_view_state(browser)
    shown = _shown(browser)
    assert shown["messages"][0] == f"the run failed at step 0: {FAILURE}"


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
        f"learnscope export: crashed/version_0 failed at step 0: {FAILURE} (its page says so)"
    ]
    assert "2 run(s): crashed/version_0, good/version_0" in result.stdout
    data = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert data is not None
    views = {r["name"]: r["view"] for r in json.loads(data[1])["runs"]}
    assert views["crashed/version_0"]["failed"] == FAILURE
    assert views["crashed/version_0"]["has_data"] is False
    assert views["good/version_0"]["failed"] is None and views["good/version_0"]["has_data"]


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
    from tb_server import tensorboard

    with tensorboard(logdir) as server:
        runs = server.wait_for(
            "/data/plugin/learnscope/runs", lambda runs: isinstance(runs, list) and len(runs) == 2
        )
        assert [(r["name"], r["failed"], r["has_data"]) for r in runs] == [
            ("crashed/version_0", FAILURE, False),
            ("good/version_0", None, True),
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
    assert run_outcome(tb.log_dir) == {"failed": "RuntimeError: out of memory", "has_data": True}
    view = read_view(tb.log_dir)
    assert view["failed"] == "RuntimeError: out of memory" and view["has_data"] is True
