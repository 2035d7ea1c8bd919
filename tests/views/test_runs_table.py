"""The runs table: one row per run in the tab's ``/table`` route and in the exported page.

A log directory of a small sweep written by the run record writer (finished, collapsed, failed,
interrupted, still running): the rows equal ``learnscope.read_summaries`` run by run, nothing of
one run is in another's row, a refresh reads only what was appended (bytes on a disk, requests
on the local S3 server), the export holds the same rows and the views within its budget, and in
Chromium the table sorts, filters, opens a run and chooses runs.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

import learnscope
from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
from learnscope.plugins.views.view_page import export_html
from learnscope.records import (
    RunEnd,
)
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.storage import RunFolder, open_run_folder
from tests.kit.browser import open_page, unavailable_reason
from tests.kit.readers import page_data
from tests.kit.record_sweep import (
    TABLE_SWEEP,
    assert_rows_are_the_summaries,
    table_route,
    write_run,
    write_sweep,
)
from tests.kit.s3_server import LocalS3

pytest_plugins = ["tests.kit.s3_server"]  # s3_env


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("table") / "sweep"
    write_sweep(logdir)
    return logdir


def test_the_route_rows_are_each_runs_summary_and_nothing_of_another(
    tab_plugin: Any, sweep: Path
) -> None:
    rows = table_route(tab_plugin(sweep))
    assert_rows_are_the_summaries(rows, sweep)
    by_name = {row["name"]: row for row in rows}
    assert {name: row["status"] for name, row in by_name.items()} == {
        name: ends or "running" for name, (_, ends, _, _) in TABLE_SWEEP.items()
    }
    assert by_name["lr_1.0/version_0"]["error"] == "ValueError: lr 1.0 diverged"
    collapsed = by_name["lr_0.1/version_0"]["summary"]
    assert collapsed["learnscope/findings/embedding-collapse"] == 1
    assert collapsed["learnscope/first_step/collapse"] == 20
    for index, (name, (lr, _, last, _)) in enumerate(TABLE_SWEEP.items()):
        row = by_name[name]
        assert row["hyperparameters"] == {"lr": lr, "model/width": 16}
        assert row["last_step"] == last
        # its own embedding key only: another run's key would be another run's data
        keys = {re.sub(r"/(count|last_step)$", "", n) for n in row["summary"] if "/snapshots/" in n}
        assert keys == {f"learnscope/snapshots/enc{index}:validate"}
        groups = {n.split("/")[3] for n in row["summary"] if n.startswith("learnscope/acf/")}
        assert groups == {f"enc{index}"}
        others = [r for r in rows if r["name"] != name]
        assert all(f"enc{index}" not in json.dumps(other) for other in others)


def test_a_refresh_reads_only_the_bytes_a_run_appended(tab_plugin: Any, tmp_path: Path) -> None:
    write_sweep(tmp_path)
    plugin = tab_plugin(tmp_path)
    before = plugin.table()
    read = plugin._table.bytes_read
    records = sorted(tmp_path.glob(f"*/*/{RECORD_FILE}"))
    assert read == sum(path.stat().st_size for path in records)  # every record once, whole
    again = plugin.table()
    assert plugin._table.bytes_read == read and all(
        a is b for a, b in zip(before, again, strict=True)
    )

    running = tmp_path / "lr_0.03" / "version_0"
    size = (running / RECORD_FILE).stat().st_size
    RunRecordWriter(running).write_run_end(RunEnd(30, "finished"))
    appended = (running / RECORD_FILE).stat().st_size - size
    after = plugin.table()
    assert plugin._table.bytes_read - read == appended  # the one line appended, nothing else
    changed = [b["name"] for a, b in zip(before, after, strict=True) if a is not b]
    assert changed == ["lr_0.03/version_0"]
    assert after[[r["name"] for r in after].index("lr_0.03/version_0")]["status"] == "finished"
    assert_rows_are_the_summaries(after, tmp_path)


def test_a_refresh_on_s3_asks_only_for_the_new_segment(tab_plugin: Any, s3_env: LocalS3) -> None:
    url = f"s3://{s3_env.bucket()}/runs"
    write_sweep(url)
    plugin = tab_plugin(url)  # reload_interval 0: one search, then each below, in this thread
    rows = table_route(plugin)
    assert_rows_are_the_summaries(rows, url)

    s3_env.requests.reset()
    for _ in range(3):
        assert table_route(plugin) == rows
    assert s3_env.requests.seen == []  # nothing changed since the search: nothing asked

    running = open_run_folder(f"{url}/lr_0.03/version_0")
    RunRecordWriter(running).write_run_end(RunEnd(30, "finished"))
    new = _newest_segment(running)
    plugin._search_loop()  # the next search (the thread's loop, once)
    s3_env.requests.reset()
    now = {row["name"]: row for row in table_route(plugin)}
    assert now["lr_0.03/version_0"]["status"] == "finished"
    seen = s3_env.requests.seen
    reads = [t for m, t in seen if m == "GET" and "list-type=2" not in t]
    assert [t.rsplit("/", 1)[-1] for t in reads] == [new]  # the new segment, once
    listings = [t for _, t in seen if "list-type=2" in t]
    assert len(listings) <= 2 and all("lr_0.03%2Fversion_0" in t for t in listings)
    assert {m for m, _ in seen} == {"GET"}
    unchanged = {r["name"]: r for r in rows}
    assert all(now[name] == unchanged[name] for name in now if name != "lr_0.03/version_0")


def _newest_segment(folder: RunFolder) -> str:
    from learnscope.run_directory.file_names import RECORD_SEGMENTS

    _, files = folder.listing(RECORD_SEGMENTS)
    return sorted(files)[-1]


def test_the_export_holds_the_same_rows(tab_plugin: Any, sweep: Path, tmp_path: Path) -> None:
    page = tmp_path / "sweep.html"
    export = export_html(sweep, page)
    assert export.runs == sorted(TABLE_SWEEP) and export.not_held == []
    data = page_data(page)
    assert data["table"] == table_route(tab_plugin(sweep))
    assert [run["name"] for run in data["runs"]] == sorted(TABLE_SWEEP)
    assert all(run["view"]["embeddings"] for run in data["runs"])  # every view held


def test_the_export_holds_the_newest_views_within_its_budget(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from learnscope.lightning_glue.cli import main

    page = tmp_path / "small.html"
    one = len(json.dumps(_page_data_of_one(sweep, tmp_path)))
    export = export_html(sweep, page, view_bytes=int(2.5 * one))
    data = page_data(page)
    views = {run["name"]: run["view"] for run in data["runs"]}
    held = [name for name, view in views.items() if view.get("held") is not False]
    # the newest runs first (their run entries' times), as many as the budget holds
    newest = sorted(TABLE_SWEEP, key=lambda n: list(TABLE_SWEEP).index(n), reverse=True)
    assert 1 <= len(held) < len(TABLE_SWEEP) and set(held) == set(newest[: len(held)])
    assert sorted(export.not_held) == sorted(set(TABLE_SWEEP) - set(held))
    assert len(data["table"]) == len(TABLE_SWEEP)  # every run's row
    name = export.not_held[0]
    (message,) = views[name]["messages"]
    assert f"learnscope export {sweep}/{name} --html RUN.html" in message
    assert main(["export", str(sweep), "--html", str(page), "--views-mb", "0"]) == 0
    err = capsys.readouterr().err
    assert f"holds the views of the newest 1 of {len(TABLE_SWEEP)} runs (--views-mb 0)" in err


def _page_data_of_one(sweep: Path, tmp_path: Path) -> dict[str, Any]:
    """The biggest view of the sweep's runs, as an exported page holds it."""
    page = tmp_path / "all.html"
    export_html(sweep, page)
    return max((run["view"] for run in page_data(page)["runs"]), key=lambda v: len(json.dumps(v)))


# --- the page, in Chromium ---------------------------------------------------------------------

_TABLE = """
const view = window.learnscopeView;
const rows = [...document.querySelectorAll('tr[data-run]')].map((tr) => tr.dataset.run);
return { shown: rows, state: view.table && view.table.state, run: view.state.run,
  ready: view.state.ready, open: view.table.state.open,
  select: document.querySelector('select[aria-label="run"]').value };
"""


def _shown(driver: Any) -> dict[str, Any]:
    return driver.execute_script(_TABLE)


@pytest.fixture(scope="module")
def page(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    page = tmp_path_factory.mktemp("page") / "sweep.html"
    export_html(sweep, page)
    return page


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_the_page_sorts_filters_and_opens_a_run(browser: Any, page: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, page)
    shown = _shown(browser)
    assert shown["open"] and shown["shown"] == sorted(TABLE_SWEEP)  # by name, as the rows came
    browser.find_element(By.CSS_SELECTOR, 'th[data-column="last_step"]').click()
    steps = {name: last for name, (_, _, last, _) in TABLE_SWEEP.items()}
    by_step = _shown(browser)["shown"]
    assert [steps[n] for n in by_step] == sorted(steps.values())
    browser.find_element(By.CSS_SELECTOR, 'th[data-column="last_step"]').click()
    assert [steps[n] for n in _shown(browser)["shown"]] == sorted(steps.values(), reverse=True)
    browser.find_element(By.CSS_SELECTOR, 'th[data-column="hp:lr"]').click()
    assert _shown(browser)["shown"] == sorted(TABLE_SWEEP, key=lambda n: TABLE_SWEEP[n][0])

    status = Select(browser.find_element(By.CSS_SELECTOR, 'select[aria-label="status filter"]'))
    status.select_by_value("failed")
    assert _shown(browser)["shown"] == ["lr_1.0/version_0"]
    cell = browser.find_element(By.CSS_SELECTOR, 'tr[data-run] td[data-column="status"]')
    assert cell.text.startswith("failed: ValueError: lr 1.0 diverged")
    status.select_by_value("")
    code = Select(browser.find_element(By.CSS_SELECTOR, 'select[aria-label="finding filter"]'))
    code.select_by_value("embedding-collapse")
    assert _shown(browser)["shown"] == ["lr_0.1/version_0"]
    code.select_by_value("")
    text = browser.find_element(By.CSS_SELECTOR, 'input[aria-label="filter text"]')
    text.send_keys("interrupted")
    assert _shown(browser)["shown"] == ["lr_0.3/version_0"]
    text.clear()
    text.send_keys("0.03")  # a hyper-parameter's text
    assert _shown(browser)["shown"] == ["lr_0.03/version_0"]

    browser.find_element(
        By.CSS_SELECTOR, 'tr[data-run="lr_0.03/version_0"] td[data-column="name"]'
    ).click()
    deadline = time.monotonic() + 30
    while not (_shown(browser)["run"] == "lr_0.03/version_0" and _shown(browser)["ready"]):
        assert time.monotonic() < deadline, "the run never opened"
        time.sleep(0.1)
    assert _shown(browser)["select"] == "lr_0.03/version_0"  # the run picker follows
    assert _shown(browser)["state"]["current"] == "lr_0.03/version_0"
    text.clear()
    text.send_keys(" ")
    for name in ("lr_0.1/version_0", "lr_0.01/version_0"):
        browser.find_element(By.CSS_SELECTOR, f'input[aria-label="choose {name}"]').click()
    state = _shown(browser)["state"]
    assert sorted(state["chosen"]) == ["lr_0.01/version_0", "lr_0.1/version_0"]
    assert _shown(browser)["run"] == "lr_0.03/version_0"  # a check box opens no run


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_the_tab_of_a_real_tensorboard_shows_the_table_and_opens_a_row(
    browser: Any, sweep: Path
) -> None:
    from selenium.webdriver.common.by import By

    from tests.kit.browser import enter_learnscope_tab, wait_view_ready
    from tests.kit.tb_server import tensorboard

    with tensorboard(sweep) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == len(TABLE_SWEEP))
        rows = server.json("/data/plugin/learnscope/table")["runs"]
        assert_rows_are_the_summaries(rows, sweep)
        enter_learnscope_tab(browser, server.base)
        wait_view_ready(browser)
        deadline = time.monotonic() + 30
        while _shown(browser)["shown"] != sorted(TABLE_SWEEP):
            assert time.monotonic() < deadline, f"the table never showed: {_shown(browser)}"
            time.sleep(0.2)
        cell = 'tr[data-run="lr_0.3/version_0"] td[data-column="last_step"]'
        assert browser.find_element(By.CSS_SELECTOR, cell).text == "30"
        browser.find_element(By.CSS_SELECTOR, cell).click()
        while not (_shown(browser)["run"] == "lr_0.3/version_0" and _shown(browser)["ready"]):
            assert time.monotonic() < deadline, "the run never opened"
            time.sleep(0.1)
        assert _shown(browser)["select"] == "lr_0.3/version_0"
        text = browser.execute_script("return document.body.innerText")
        assert "interrupted by Ctrl-C at step 30" in text  # the view below is that run's


def test_a_record_begun_again_or_unreadable_keeps_its_row_honest(
    tab_plugin: Any, tmp_path: Path
) -> None:
    import os

    write_run(tmp_path / "a" / "version_0", 0.1, "finished", 30, key="a")
    write_run(tmp_path / "b" / "version_0", 0.2, "failed", 20, key="b")
    fifo = tmp_path / "c" / "version_0"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / RECORD_FILE)
    plugin = tab_plugin(tmp_path)
    rows = {row["name"]: row for row in plugin.table()}
    assert "not a regular file" in rows["c/version_0"]["problem"]
    assert rows["c/version_0"]["summary"]["learnscope/status"] == "running"  # nothing read
    assert rows["a/version_0"]["problem"] is None and rows["a/version_0"]["last_step"] == 30

    # another run started over in a/version_0: its record replaced, shorter
    record = tmp_path / "a" / "version_0" / RECORD_FILE
    record.unlink()
    write_run(tmp_path / "a" / "version_0", 0.5, None, 10, key="again")
    rows = {row["name"]: row for row in plugin.table()}
    again = rows["a/version_0"]
    assert (again["status"], again["last_step"]) == ("running", 10)
    assert again["hyperparameters"]["lr"] == 0.5
    # nothing of the record it replaced: neither its group "a" nor its key "a/validate"
    assert not any("/a/" in name or "/a:validate/" in name for name in again["summary"])
    assert "learnscope/acf/params/again/rho1_median" in again["summary"]
    assert "learnscope/snapshots/again:validate/count" in again["summary"]
    assert rows["b/version_0"]["error"] == "ValueError: lr 0.2 diverged"


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_a_pair_of_runs_keeps_the_table_out_of_the_way(browser: Any, tmp_path: Path) -> None:

    for name, lr in (("a", 0.1), ("b", 0.2)):
        write_run(tmp_path / "logs" / name, lr, "finished", 20, key=name)
    page = tmp_path / "pair.html"
    export_html(tmp_path / "logs", page)
    open_page(browser, page)
    made = browser.execute_script(
        "return [learnscopeView.table, document.querySelector('[data-role^=runs-table]')]"
    )
    assert made == [None, None]  # no table, no button: the page as it was
    assert learnscope.read_summaries(tmp_path / "logs").keys() == {"a", "b"}
    assert len(page_data(page)["table"]) == 2  # the rows are in the page all the same
