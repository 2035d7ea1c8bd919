"""A sweep at a glance (issue 39): a dozen runs' summaries wherever people choose between runs.

The sweep of the test kit (``tests/kit/sweep.py``: healthy runs, one collapsed, one non-finite,
one crashed, one killed mid-fit and so still being written, each with TensorBoard and offline
W&B) holds, in every place a run is chosen from, the same summary values, each equal to the
value recomputed from that run's own files (``tests/kit/summary_reference.py``: the record read
with ``json``, the ranks from the embeddings TensorBoard holds, the silhouettes by
scikit-learn): ``learnscope.read_summaries``, the W&B runs' summaries and tags, TensorBoard's
HParams routes on a real server, the learnscope tab's runs table and the exported page; the
small multiples show the chosen runs on the points they share; nothing of one run is in
another's row.

First, the sweep is what its description says, run by run.

Each run's summary, as ``learnscope.read_summaries`` reads it from the TensorBoard run and from
the offline W&B run, has the status and the finding codes the description gives (none for a
healthy run); the crashed run keeps its error, the killed one has no end; each run's
hyper-parameters are its own, in its run record, Lightning's ``hparams.yaml``, the W&B run's
config and TensorBoard's HParams session (learnscope's: Lightning's loggers write no HParams
experiment, ``default_hp_metric=False``, so every run's columns are learnscope's).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.plugins.hparams import metadata

import learnscope
from learnscope.plugins.views.view_page import export_html
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader
from tests.kit.browser import enter_learnscope_tab, unavailable_reason, wait_view_ready
from tests.kit.readers import page_data, wandb_config, wandb_summary, wandb_tags
from tests.kit.summary_reference import assert_same_summary, expected_summary, record_lines
from tests.kit.sweep import CRASH_STEP, STEPS, SWEEP, Sweep, SweepRun
from tests.kit.tb_server import hparams_routes, learnscope_metrics, tensorboard

pytestmark = pytest.mark.slow


def codes(summary: Any) -> set[str]:
    """The finding codes a summary holds (seen at all)."""
    return {count.code for count in summary.findings}


def wandb_summaries(sweep: Sweep) -> dict[str, Any]:
    """The summary of each run's W&B run record, by run name."""
    by_folder = learnscope.read_summaries(sweep.logdir / "wandb")
    root = sweep.logdir / "wandb"
    return {
        run.name: by_folder[run.wandb_record.relative_to(root).as_posix()] for run in sweep.runs
    }


def test_the_sweep_holds_a_dozen_runs_one_of_each_kind(sweep: Sweep) -> None:
    assert [run.name for run in sweep.runs] == [planned.name for planned in SWEEP]
    assert len(sweep.runs) == 12 and len({run.name for run in sweep.runs}) == 12
    statuses = [run.status for run in sweep.runs]
    assert statuses.count("failed") == statuses.count("running") == 1
    assert sum(run.findings == frozenset() and run.status == "finished" for run in sweep.runs) == 8
    # each TensorBoard run is one folder with one record; W&B runs in their own folder
    assert learnscope.read_summaries(sweep.logdir).keys() == {run.name for run in sweep.runs}
    assert len({run.wandb for run in sweep.runs}) == 12


@pytest.mark.parametrize("place", ["tensorboard", "wandb"])
def test_each_run_has_the_status_and_findings_it_is_meant_to(sweep: Sweep, place: str) -> None:
    if place == "tensorboard":
        summaries = learnscope.read_summaries(sweep.logdir)
    else:
        summaries = wandb_summaries(sweep)
    for run in sweep.runs:
        summary = summaries[run.name]
        assert (summary.status, codes(summary)) == (run.status, set(run.findings)), run.shows
        if not run.findings:
            assert summary.first_finding is None and summary.findings == (), run.shows


def test_what_each_unhealthy_run_shows(sweep: Sweep) -> None:
    summaries = learnscope.read_summaries(sweep.logdir)
    collapsed, non_finite, crashed, killed = (sweep.runs[i].name for i in range(8, 12))
    # collapsed after training began, not at the first check (step 0), and still at the end
    first = summaries[collapsed].first_collapse_step
    assert first is not None and 0 < first < STEPS
    assert [c.holding for c in summaries[collapsed].findings] == [1]
    assert summaries[non_finite].first_non_finite_step is not None
    assert summaries[non_finite].first_collapse_step is None
    # the crash: its exception, at the step it was raised
    assert (
        summaries[crashed].error
        == f"ValueError: a batch the model cannot read, at step {CRASH_STEP}"
    )
    assert summaries[crashed].last_step == CRASH_STEP
    # killed mid-fit: a run entry and what was written before it, no end entry
    entries = RecordReader(sweep.run(killed).tensorboard / RECORD_FILE).read()
    kinds = [entry["kind"] for entry in entries]
    assert kinds[0] == "run" and "end" not in kinds and "snapshot" in kinds
    assert summaries[killed].last_step is not None and summaries[killed].last_step < CRASH_STEP
    assert summaries[killed].error is None
    # the healthy runs went to the end
    assert all(summaries[run.name].last_step == STEPS for run in sweep.runs[:8])


def test_the_tensorboard_and_wandb_records_of_a_run_say_the_same(sweep: Sweep) -> None:
    tensorboard = learnscope.read_summaries(sweep.logdir)
    wandb = wandb_summaries(sweep)
    for run in sweep.runs:
        assert tensorboard[run.name] == wandb[run.name], run.name


def hparams_tags(run: SweepRun) -> dict[str, bytes]:
    """The HParams plugin's tags TensorBoard reads in the run's TensorBoard folder."""
    events = plugin_event_accumulator.EventAccumulator(str(run.tensorboard))
    events.Reload()
    if metadata.PLUGIN_NAME not in events.ActivePlugins():
        return {}
    return dict(events.PluginTagToContent(metadata.PLUGIN_NAME))


def test_each_run_has_its_own_hyperparameters(sweep: Sweep) -> None:
    tensorboard = learnscope.read_summaries(sweep.logdir)
    wandb = wandb_summaries(sweep)
    pairs = set()
    for run in sweep.runs:
        given = {"lr": run.lr, "weight_decay": run.weight_decay}
        assert tensorboard[run.name].hyperparameters == given == wandb[run.name].hyperparameters
        saved = yaml.safe_load((run.tensorboard / "hparams.yaml").read_text())
        assert saved == given, run.name
        pairs.add((run.lr, run.weight_decay))
        if run.status != "running":  # the killed run's W&B file ends where it was killed
            config = wandb_config(run.wandb)
            assert (config["lr"], config["weight_decay"]) == (run.lr, run.weight_decay)
    assert len(pairs) == len(sweep.runs)


def test_the_hparams_sessions_are_learnscope_s_for_every_run_that_ended(sweep: Sweep) -> None:
    for run in sweep.runs:
        tags = hparams_tags(run)
        assert metadata.EXPERIMENT_TAG not in tags, run.name  # none of Lightning's
        if run.status == "running":  # written when a run ends: the killed run has none
            assert metadata.SESSION_START_INFO_TAG not in tags
            continue
        start = metadata.parse_session_start_info_plugin_data(tags[metadata.SESSION_START_INFO_TAG])
        numbers = {name: value.number_value for name, value in start.hparams.items()}
        assert {"lr": run.lr, "weight_decay": run.weight_decay}.items() <= numbers.items()


# Issue 39, done when: every place holds each run's recomputed summary


def recomputed(sweep: Sweep) -> dict[str, dict[str, Any]]:
    """Each run's flat summary, recomputed from its TensorBoard run's own files."""
    return {run.name: expected_summary(run.tensorboard) for run in sweep.runs}


def test_read_summaries_holds_each_runs_recomputed_summary(sweep: Sweep) -> None:
    summaries = learnscope.read_summaries(sweep.logdir)
    for name, expected in recomputed(sweep).items():
        assert_same_summary(summaries[name].flat(), expected)
    collapsed = summaries[sweep.runs[8].name].flat()
    healthy = summaries[sweep.runs[0].name].flat()
    key = "encoder:validate"
    assert collapsed[f"learnscope/rankme/{key}/lowest"] < healthy[f"learnscope/rankme/{key}/lowest"]
    assert f"learnscope/silhouette/{key}/pca" in healthy


def test_the_wandb_runs_hold_each_runs_summary_and_tags(sweep: Sweep) -> None:
    for name, expected in recomputed(sweep).items():
        run = sweep.run(name)
        killed = run.status == "running"  # its .wandb file ends where its process was killed
        given = wandb_summary(run.wandb, finished=not killed)
        ours = {k: v for k, v in given.items() if k.startswith("learnscope/")}
        if killed:  # what wandb's own service had written by then: an earlier state
            assert ours["learnscope/status"] == "running" and ours.keys() <= expected.keys()
        else:
            assert_same_summary(ours, expected)
        tags = {tag for tag in wandb_tags(run.wandb, not killed) if tag.startswith("learnscope:")}
        assert tags == {f"learnscope:{code}" for code in run.findings}, name


def numbers(flat: dict[str, Any]) -> dict[str, float]:
    """The numbers of a flat summary, as TensorBoard's HParams columns name them."""
    return {
        f"~{name}": float(value)
        for name, value in flat.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def assert_rows_hold(rows: list[dict[str, Any]], sweep: Sweep) -> None:
    """The runs table's rows: one per run, each its own hyper-parameters and summary."""
    expected = recomputed(sweep)
    assert sorted(row["name"] for row in rows) == sorted(expected)
    for row in rows:
        run = sweep.run(row["name"])
        assert row["hyperparameters"] == {"lr": run.lr, "weight_decay": run.weight_decay}
        assert (row["status"], row["problem"]) == (run.status, None)
        assert_same_summary(row["summary"], expected[run.name])


@pytest.mark.browser
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_hparams_the_tabs_runs_table_and_small_multiples_on_a_real_server(
    sweep: Sweep, browser: Any
) -> None:
    expected = recomputed(sweep)
    ended = [run for run in sweep.runs if run.status != "running"]
    chosen = [sweep.runs[0].name, sweep.runs[8].name, sweep.runs[9].name]
    with tensorboard(sweep.logdir) as server:
        _, groups = hparams_routes(server, len(ended))
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 12)
        assert_rows_hold(server.json("/data/plugin/learnscope/table")["runs"], sweep)
        enter_learnscope_tab(browser, server.base)
        wait_view_ready(browser)
        state = small_multiples(browser, chosen)
    # a run's HParams row is written once, when it ends: the killed run has none
    assert set(groups) == {run.name for run in ended}
    for run in ended:
        (session,) = groups[run.name]["sessions"]
        hparams = groups[run.name]["hparams"]
        assert (hparams["lr"], hparams["weight_decay"]) == (run.lr, run.weight_decay)
        assert hparams["~learnscope/status"] == run.status
        first = expected[run.name].get("learnscope/first_finding/code")
        assert hparams.get("~learnscope/first_finding/code") == first, run.name
        shown = learnscope_metrics(session)
        assert shown == pytest.approx(numbers(expected[run.name]), rel=1e-6), run.name
    assert_small_multiples(state, sweep, chosen)


def small_multiples(driver: Any, chosen: list[str]) -> dict[str, Any]:
    """Choose ``chosen`` in the runs table (in its order); the small multiples' state."""
    from selenium.webdriver.common.by import By

    for name in chosen:
        driver.find_element(By.CSS_SELECTOR, f'input[aria-label="choose {name}"]').click()
    script = (
        "const t = window.learnscopeView.table; "
        "return t ? JSON.parse(JSON.stringify(t.multiples.state)) : null"
    )
    deadline = time.monotonic() + 60
    while True:
        state = driver.execute_script(script)
        if state and state["ready"] and len(state.get("panels", [])) == len(chosen):
            return state
        assert time.monotonic() < deadline, f"the small multiples never showed: {state}"
        time.sleep(0.2)


def assert_small_multiples(state: dict[str, Any], sweep: Sweep, chosen: list[str]) -> None:
    """Each chosen run's panel, at its newest snapshot at or before the page's step cursor, on
    exactly the points all the runs share."""
    assert [p["run"] for p in state["panels"]] == chosen  # in the table's order
    for panel in state["panels"]:
        entries = record_lines(sweep.run(panel["run"]).tensorboard)
        snapshots = [e for e in entries if e["kind"] == "snapshot"]
        assert {e["points"] for e in snapshots} == {48}  # the validation points, by row
        before = [e["step"] for e in snapshots if e["step"] <= state["cursor"]]
        step = max(before) if before else min(e["step"] for e in snapshots)
        assert (panel["message"], panel["drawn"], panel["step"]) == (None, 48, step), panel
    assert len(state["shared"]) == 48


def test_the_exported_page_holds_each_runs_row(sweep: Sweep, tmp_path: Path) -> None:
    page = tmp_path / "sweep.html"
    export = export_html(sweep.logdir, page)
    assert sorted(export.runs) == sorted(run.name for run in sweep.runs)
    assert_rows_hold(page_data(page)["table"], sweep)
