"""The runs table on an object store starts from each run's summary file, read in few requests."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import learnscope
from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
from learnscope.plugins.views.runs_table import RunsTable
from learnscope.records import RunEnd
from learnscope.run_directory.file_names import RECORD_FILE, SUMMARY_FILE
from learnscope.run_directory.record import RecordReader
from learnscope.run_directory.run_search import find_runs, run_of
from learnscope.run_directory.summary import summarize_record
from learnscope.storage import open_run_folder
from tests.kit.record_sweep import (
    TABLE_SWEEP,
    assert_rows_are_the_summaries,
    assert_rows_hold,
    table_route,
    write_run,
    write_sweep,
)
from tests.kit.s3_server import LocalS3

pytest_plugins = ["tests.kit.s3_server"]  # s3_env


def _runs(url: str) -> list[tuple[str, object]]:
    root = open_run_folder(url)
    return [(name, run_of(root, name)) for name in sorted(find_runs(root))]


def _rows(url: str) -> list[dict]:
    return RunsTable().rows(_runs(url))  # type: ignore[arg-type]


def _read_whole(url: str) -> dict[str, Any]:
    """Each run's summary folded from its whole record (no summary file)."""
    summaries = {}
    for name, folder in _runs(url):
        reader = RecordReader(folder.record_source())  # type: ignore[attr-defined]
        entries = []
        while batch := reader.read():
            entries += batch
        summaries[name] = summarize_record(entries)
    return summaries


def _assert_rows_are_the_whole_records(rows: list[dict[str, Any]], url: str) -> None:
    whole = _read_whole(url)
    assert_rows_hold(rows, whole)
    assert learnscope.read_summaries(url) == whole


def test_the_first_table_on_s3_asks_few_requests_per_run(tab_plugin: Any, s3_env: LocalS3) -> None:
    url = f"s3://{s3_env.bucket()}/runs"
    write_sweep(url)
    plugin = tab_plugin(url)
    searched = s3_env.requests.total
    s3_env.requests.reset()
    rows = table_route(plugin)
    assert s3_env.requests.total == 0  # the search's summary files cover every record
    assert_rows_are_the_summaries(rows, url)
    runs = _runs(url)
    s3_env.requests.reset()
    table = RunsTable().rows(runs)  # type: ignore[arg-type]
    # without a search: per run one GET of its summary file, one listing of its segments
    asked = s3_env.requests.total
    assert asked <= 2 * len(TABLE_SWEEP), (asked, searched)
    _assert_rows_are_the_whole_records(table, url)
    assert [{**r, "problem": None} for r in table] == [{**r, "problem": None} for r in rows]


def test_a_missing_damaged_or_behind_summary_file_still_gives_the_right_row() -> None:
    url = f"memory://summary/{uuid.uuid4().hex}"
    write_sweep(url)
    missing = open_run_folder(f"{url}/lr_0.01/version_0")
    missing.remove(SUMMARY_FILE)
    damaged = open_run_folder(f"{url}/lr_0.1/version_0")
    damaged.write(SUMMARY_FILE, b'{"format": 1, "covers": [2, "x"')
    behind = open_run_folder(f"{url}/lr_0.03/version_0")
    kept = behind.read(SUMMARY_FILE, 1 << 24)
    RunRecordWriter(behind).write_run_end(RunEnd(30, "finished"))
    behind.write(SUMMARY_FILE, kept)  # the summary as it was before the end
    other = open_run_folder(f"{url}/lr_1.0/version_0")  # another record's summary file
    other.write(SUMMARY_FILE, kept)
    rows = _rows(url)
    _assert_rows_are_the_whole_records(rows, url)
    statuses = {row["name"]: row["status"] for row in rows}
    assert statuses["lr_0.03/version_0"] == "finished"
    assert statuses["lr_1.0/version_0"] == "failed"


def test_a_resumed_writer_keeps_a_summary_file_that_covers_the_record() -> None:
    url = f"memory://summary/{uuid.uuid4().hex}"
    folder = open_run_folder(f"{url}/run")
    write_run(folder, 0.1, None, 20)
    RunRecordWriter(folder).write_run_end(RunEnd(20, "interrupted"))  # a second writer
    from learnscope.run_directory.summary_file import read_glance

    glance = read_glance(folder)
    assert glance is not None and glance.current(folder.record_stamp())
    (row,) = _rows(url)
    assert row["status"] == "interrupted"
    assert row["summary"] == learnscope.read_summaries(url)["run"].flat()


def test_a_table_refresh_after_one_run_appended_reads_only_its_new_segment(
    s3_env: LocalS3,
) -> None:
    url = f"s3://{s3_env.bucket()}/runs"
    write_sweep(url)
    runs = _runs(url)
    table = RunsTable()
    before = {row["name"]: row for row in table.rows(runs)}  # type: ignore[arg-type]
    running = open_run_folder(f"{url}/lr_0.03/version_0")
    RunRecordWriter(running).write_run_end(RunEnd(30, "finished"))
    s3_env.requests.reset()
    read = table.bytes_read
    after = {row["name"]: row for row in table.rows(runs)}  # type: ignore[arg-type]
    gets = [t for m, t in s3_env.requests.seen if m == "GET" and "list-type=2" not in t]
    assert len(gets) == 1 and "lr_0.03" in gets[0]  # the one new segment (a listing per run)
    assert 0 < table.bytes_read - read < 200
    assert after["lr_0.03/version_0"]["status"] == "finished"
    assert all(after[n] == before[n] for n in after if n != "lr_0.03/version_0")
    _assert_rows_are_the_whole_records(list(after.values()), url)


def test_a_local_disk_keeps_no_summary_file(tmp_path: Path) -> None:
    folder = open_run_folder(tmp_path / "run")
    write_run(folder, 0.1, "finished", 20)
    assert not (tmp_path / "run" / SUMMARY_FILE).exists()
    assert (tmp_path / "run" / RECORD_FILE).exists()
    (row,) = _rows(str(tmp_path))
    assert row["status"] == "finished" and row["last_step"] == 20
