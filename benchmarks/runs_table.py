"""The runs table at the scale of a sweep: 200 runs in one log directory, on a disk and on S3.

Each run is written by the run record writer (``RunRecordWriter``, no fit): a ``run`` entry
with its hyper-parameters, ``--snapshots`` snapshots of ``--points`` points (with their aligned
PCA views and a label column), ``--analyses`` autocorrelation analyses, a findings table where
the run collapses (one run in 10), and an end (one run in 20 fails, one in 20 is still running).
Then, on a local disk and on the local S3 server (moto behind the counting proxy of
``tests/kit/s3_server.py``; the sweep written again by the object store's writer, one segment
per append, into ``memory://`` and copied up):

* the tab's first open of the table: the plugin's first search of the log directory, then the
  first ``/table`` request (every record read once, whole), with the requests to the store;
* a refresh with nothing changed, and one after one run appended an entry: the bytes read (the
  table's count) and the requests (the proxy's count);
* ``learnscope export`` of the local log directory: the page's size, how many views it holds;
* on S3, the same sweep again without its summary files (``learnscope_summary.json``, left out
  of the copy: as runs written before the writer kept them), side by side: every record then
  read whole, as before (``--no-fallback`` leaves it out).

Run (CPU, a few minutes on two shared cores)::

    python benchmarks/runs_table.py [--runs 200] [--no-s3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
sys.path.append(str(REPO))

from tests.kit.s3_server import pointed_local_s3  # noqa: E402


def write_run(folder: Any, index: int, snapshots: int, analyses: int, points: int) -> None:
    """One run of the sweep, through the run record writer."""
    import numpy as np
    import torch

    from learnscope.embeddings.aligned_views import AlignedViews
    from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
    from learnscope.records import (
        AutocorrelationSummary,
        EmbeddingSnapshot,
        Finding,
        RunEnd,
        RunStart,
    )
    from learnscope.records.autocorrelation import GroupAutocorrelation
    from learnscope.records.run import RunError

    folder.make()
    writer = RunRecordWriter(folder)
    lr, wd = 10 ** -(1 + index % 4), [0.0, 1e-4, 1e-2][index % 3]
    hyper = {"lr": lr, "weight_decay": wd, "seed": index, "model/width": 64}
    writer.write_run_start(RunStart(time=1_000.0 + index, hyperparameters=hyper))
    rng = np.random.default_rng(index)
    views = AlignedViews()
    labels = [i % 10 for i in range(points)]
    collapses = index % 10 == 3
    last = 10 * max(snapshots, analyses)
    for k in range(snapshots):
        step = (k + 1) * last // snapshots
        x = rng.normal(size=(points, 16)).astype(np.float32)
        if collapses and k > 1:
            x = np.outer(rng.normal(size=points), np.ones(16)).astype(np.float32)
        snapshot = EmbeddingSnapshot("encoder", step, torch.from_numpy(x), {"label": labels})
        writer.write_embedding(views.add(snapshot, ids=range(points)))
    for k in range(analyses):
        step = (k + 1) * last // analyses
        rho = float(rng.uniform(0.5, 1.0))
        groups = tuple(
            GroupAutocorrelation(g, kind, np.array([1.0, rho, rho * rho]), rho, rho, rho, 2.0)
            for g in ("encoder", "head")
            for kind in ("params", "grads")
        )
        writer.write_autocorrelation(AutocorrelationSummary(step, (1, 2), groups))
    if collapses:
        found = Finding("embedding-collapse", "encoder/validate", "collapsed", last, "error", 30)
        writer.write_findings([found], last)
    if index % 20 == 7:
        writer.write_run_end(RunEnd(last, "failed", RunError("FloatingPointError", "nan loss")))
    elif index % 20 != 11:  # one in 20 goes on
        writer.write_run_end(RunEnd(last, "finished"))


def write_sweep(logdir: Path | str, runs: int, snapshots: int, analyses: int, points: int) -> float:
    """The sweep under ``logdir`` (a path or a URL); the seconds it took."""
    from learnscope.storage import open_run_folder

    begin = time.perf_counter()
    for index in range(runs):
        folder = open_run_folder(f"{logdir}/lr_{index % 4}/seed_{index}")
        write_run(folder, index, snapshots, analyses, points)
    return time.perf_counter() - begin


def upload(s3: Any, bucket: str, memory_url: str, summaries: bool = True) -> int:
    """Copy every object of a ``memory://`` log directory into ``bucket`` under ``runs/``.

    The sweep written there by the object store's writer (one segment per append), copied
    straight to moto (not counted): the benchmark measures reading. Without ``summaries``
    the runs' summary files are left out. Returns the objects put.
    """
    import fsspec

    from learnscope.run_directory.file_names import SUMMARY_FILE

    fs = fsspec.filesystem("memory")
    root = memory_url.split("://", 1)[1]
    paths = [p for p in fs.find(root) if summaries or not p.endswith(f"/{SUMMARY_FILE}")]
    puts = [(path, fs.cat_file(path)) for path in paths]
    client = s3.client(through_proxy=False)

    def put(item: tuple[str, bytes]) -> None:
        key = "runs/" + item[0].lstrip("/")[len(root.lstrip("/")) :].lstrip("/")
        client.put_object(Bucket=bucket, Key=key, Body=item[1])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, puts))
    client.close()
    return len(puts)


def plugin_of(logdir: str, interval: float) -> Any:
    from tensorboard.plugins import base_plugin

    from learnscope.plugins.tab.plugin import LearnscopePlugin

    flags = argparse.Namespace(reload_interval=interval)
    return LearnscopePlugin(base_plugin.TBContext(logdir=logdir, flags=flags))


def table_figures(logdir: str, append_to: Any, s3: Any | None) -> dict[str, Any]:
    """The tab's first open of the table, a refresh, a refresh after one run appended."""
    from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
    from learnscope.records import RunEnd

    def requests() -> dict[str, int]:
        return dict(s3.requests.by_method) if s3 is not None else {}

    if s3 is not None:
        s3.requests.reset()
    begin = time.perf_counter()
    plugin = plugin_of(logdir, interval=0.0)  # one search: every later request is the table's
    assert plugin.wait_for_search(600.0)
    searched = time.perf_counter() - begin
    search_requests = requests()
    if s3 is not None:
        s3.requests.reset()
    begin = time.perf_counter()
    rows = plugin.table()
    first = time.perf_counter() - begin
    first_requests = requests()
    size = len(json.dumps({"runs": rows}, separators=(",", ":")))
    read = plugin._table.bytes_read
    if s3 is not None:
        s3.requests.reset()
    begin = time.perf_counter()
    plugin.table()
    again = time.perf_counter() - begin
    again_read = plugin._table.bytes_read - read
    again_requests = requests()
    RunRecordWriter(append_to).write_run_end(RunEnd(999, "finished"))
    plugin._search_loop()  # one more search (reload_interval 0: one, here), as the thread does
    if s3 is not None:
        s3.requests.reset()
    begin = time.perf_counter()
    after = plugin.table()
    appended = time.perf_counter() - begin
    plugin.close()
    return {
        "runs": len(rows),
        "first_search_s": round(searched, 2),
        "first_search_requests": search_requests,
        "first_table_s": round(first, 2),
        "first_open_s": round(searched + first, 2),
        "first_table_requests": first_requests,
        "record_bytes_read": read,
        "table_json_bytes": size,
        "refresh_unchanged_s": round(again, 3),
        "refresh_unchanged_bytes_read": again_read,
        "refresh_unchanged_requests": again_requests,
        "refresh_one_appended_s": round(appended, 3),
        "refresh_one_appended_bytes_read": plugin._table.bytes_read - read - again_read,
        "refresh_one_appended_requests": requests(),
        "finished_after": sum(row["status"] == "finished" for row in after),
    }


def search_side_by_side(
    logdir: str, s3: Any, latency_s: float = 0.0, repeats: int = 2
) -> dict[str, Any]:
    """The first search and the first table read 1 run at a time and 16 at once, alternating.

    With ``latency_s``, the proxy waits that long before answering each request (a store
    farther away than this one).
    """
    plugin = plugin_of(logdir, interval=0.0)
    assert plugin.wait_for_search(600.0)
    from learnscope.plugins.views.run_search import run_of
    from learnscope.plugins.views.runs_table import RunsTable

    names = sorted(run["name"] for run in plugin.runs())
    seconds: dict[int, list[float]] = {1: [], 16: []}
    tables: dict[int, list[float]] = {1: [], 16: []}
    asked: dict[int, int] = {}
    asked_table: dict[int, int] = {}
    if latency_s:
        s3.faults.slow(latency_s)
    for _ in range(repeats):
        for readers in seconds:
            plugin._seen = {}  # as the first search: every record read afresh
            plugin.search_readers = readers
            s3.requests.reset()
            begin = time.perf_counter()
            plugin._search()
            seconds[readers].append(round(time.perf_counter() - begin, 2))
            asked[readers] = s3.requests.total
            s3.requests.reset()
            begin = time.perf_counter()
            RunsTable(readers=readers).rows([(n, run_of(plugin.folder, n)) for n in names])
            tables[readers].append(round(time.perf_counter() - begin, 2))
            asked_table[readers] = s3.requests.total
    s3.faults.clear()
    plugin.close()
    return {
        f"readers_{r}": {
            "search_s": seconds[r],
            "search_requests": asked[r],
            "table_s": tables[r],
            "table_requests": asked_table[r],
        }
        for r in seconds
    }


def export_figures(logdir: Path) -> dict[str, Any]:
    from learnscope.plugins.views.view_page import export_html

    out = Path(tempfile.mkdtemp(prefix="learnscope-bench-")) / "sweep.html"
    begin = time.perf_counter()
    export = export_html(logdir, out)
    took = time.perf_counter() - begin
    return {
        "export_s": round(took, 2),
        "page_bytes": out.stat().st_size,
        "views_held": len(export.runs) - len(export.not_held),
        "runs_in_table": len(export.runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--snapshots", type=int, default=8)
    parser.add_argument("--analyses", type=int, default=10)
    parser.add_argument("--points", type=int, default=540)
    parser.add_argument("--no-s3", action="store_true", help="the local disk only")
    parser.add_argument(
        "--no-fallback", action="store_true", help="on S3 only the sweep with summary files"
    )
    parser.add_argument(
        "--search-runs",
        type=int,
        default=20,
        help="runs of the S3 search read 1 and 16 at a time, side by side (0: not measured)",
    )
    args = parser.parse_args()
    from learnscope.storage import open_run_folder

    logdir = Path(tempfile.mkdtemp(prefix="learnscope-bench-")) / "sweep"
    running = 11 if args.runs > 11 else args.runs - 1  # a run that goes on (one in 20)
    run = f"lr_{running % 4}/seed_{running}"  # where one entry is appended, to refresh
    wrote = write_sweep(logdir, args.runs, args.snapshots, args.analyses, args.points)
    record_bytes = sum(p.stat().st_size for p in logdir.rglob("learnscope_record.jsonl"))
    results: dict[str, Any] = {
        "setup": vars(args),
        "write_s": round(wrote, 1),
        "record_bytes": record_bytes,
        "local": table_figures(str(logdir), open_run_folder(f"{logdir}/{run}"), None),
        "export": export_figures(logdir),
    }
    if not args.no_s3:
        with pointed_local_s3() as s3:
            bucket = s3.bucket()
            memory = "memory://learnscope-bench/sweep"
            write_sweep(memory, args.runs, args.snapshots, args.analyses, args.points)
            results["s3_objects"] = upload(s3, bucket, memory)
            url = f"s3://{bucket}/runs"
            results["s3"] = table_figures(url, open_run_folder(f"{url}/{run}"), s3)
            if not args.no_fallback:
                bare = s3.bucket()
                results["s3_objects_without_summary_files"] = upload(s3, bare, memory, False)
                url = f"s3://{bare}/runs"
                folder = open_run_folder(f"{url}/{run}")
                results["s3_without_summary_files"] = table_figures(url, folder, s3)
            if args.search_runs:
                small = s3.bucket()
                memory = "memory://learnscope-bench/search"
                write_sweep(memory, args.search_runs, args.snapshots, args.analyses, args.points)
                upload(s3, small, memory)
                searched = f"s3://{small}/runs"
                results["s3_search"] = search_side_by_side(searched, s3)
                results["s3_search_30ms"] = search_side_by_side(searched, s3, latency_s=0.03)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
