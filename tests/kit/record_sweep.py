"""A small sweep written straight by the run record writer, and the tab plugin's runs table.

For the runs table's tests: :data:`TABLE_SWEEP` (finished, collapsed, failed, interrupted, still
running) written by :func:`write_sweep` in a fraction of a second, :func:`start_tab_plugin`
(learnscope's TensorBoard plugin, its first search done), :func:`table_route` (its ``/table``
rows) and :func:`assert_rows_are_the_summaries` (the rows are ``learnscope.read_summaries``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

import learnscope
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
from learnscope.run_directory.summary import RunSummary
from learnscope.storage import RunFolder, open_run_folder

# name: (learning rate, how it ends, step it ends at, whether its embeddings collapse)
TABLE_SWEEP = {
    "lr_0.01/version_0": (0.01, "finished", 40, False),
    "lr_0.1/version_0": (0.1, "finished", 40, True),
    "lr_1.0/version_0": (1.0, "failed", 20, False),
    "lr_0.3/version_0": (0.3, "interrupted", 30, False),
    "lr_0.03/version_0": (0.03, None, 30, False),  # still running: no end
}


def write_run(
    folder: RunFolder | Path,
    lr: float,
    ends: str | None,
    last: int,
    collapse: bool = False,
    points: int = 40,
    key: str = "encoder",
    started: float = 1_000.0,
) -> RunRecordWriter:
    """A run as its record writer writes it: a snapshot and an analysis every 10 steps."""
    folder = folder if isinstance(folder, RunFolder) else open_run_folder(folder)
    folder.make()
    writer = RunRecordWriter(folder)
    writer.write_run_start(RunStart(time=started, hyperparameters={"lr": lr, "model/width": 16}))
    rng = np.random.default_rng(int(lr * 1000))
    views = AlignedViews()
    labels = [i % 4 for i in range(points)]
    for step in range(10, last + 1, 10):
        x = rng.normal(size=(points, 8))
        if collapse and step > 10:
            x = np.outer(rng.normal(size=points), np.ones(8)) + 1e-6 * x
        snapshot = EmbeddingSnapshot(
            key, step, torch.tensor(x, dtype=torch.float32), {"label": labels}, stage="validate"
        )
        writer.write_embedding(views.add(snapshot, ids=range(points)))
        rho = float(np.clip(lr * step / 40, 0, 1))
        group = GroupAutocorrelation(key, "params", np.array([1.0, rho]), rho, rho, rho, None)
        writer.write_autocorrelation(AutocorrelationSummary(step, (1,), (group,)))
        if collapse and step > 10:
            finding = Finding(
                "embedding-collapse", f"{key}/validate", "collapsed", step, "error", 20
            )
            writer.write_findings([finding], step)
    if ends == "failed":
        writer.write_run_end(RunEnd(last, "failed", RunError("ValueError", f"lr {lr} diverged")))
    elif ends is not None:
        writer.write_run_end(RunEnd(last, ends))  # type: ignore[arg-type]
    return writer


def write_sweep(logdir: Path | str) -> None:
    """Write :data:`TABLE_SWEEP` under ``logdir`` (a path or a URL)."""
    for index, (name, (lr, ends, last, collapse)) in enumerate(TABLE_SWEEP.items()):
        folder = open_run_folder(f"{logdir}/{name}")
        write_run(folder, lr, ends, last, collapse, key=f"enc{index}", started=1_000.0 + index)


def start_tab_plugin(logdir: str | Path, interval: float = 0.0) -> Any:
    """learnscope's TensorBoard plugin on ``logdir``, its first search done; close it after."""
    from tensorboard.plugins import base_plugin

    from learnscope.plugins.tab.plugin import LearnscopePlugin

    flags = argparse.Namespace(reload_interval=interval)
    plugin = LearnscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    assert plugin.wait_for_search(60.0)
    return plugin


def table_route(plugin: Any) -> list[dict[str, Any]]:
    """The plugin's ``/table`` rows."""
    from werkzeug.test import Client

    answer = Client(plugin.get_plugin_apps()["/table"]).get("/table")
    assert answer.status_code == 200
    return answer.json["runs"]


def assert_rows_are_the_summaries(rows: list[dict[str, Any]], logdir: Path | str) -> None:
    """Each row is its run's ``learnscope.read_summaries``, in the runs' order."""
    assert_rows_hold(rows, learnscope.read_summaries(logdir))


def assert_rows_hold(rows: list[dict[str, Any]], summaries: Mapping[str, RunSummary]) -> None:
    """Each row is its run's summary (``summaries``, by run name), in the runs' order."""
    assert [row["name"] for row in rows] == sorted(summaries)
    for row in rows:
        summary = summaries[row["name"]]
        assert row["summary"] == json.loads(json.dumps(summary.flat()))
        assert row["hyperparameters"] == dict(summary.hyperparameters)
        assert (row["status"], row["error"], row["last_step"]) == (
            summary.status,
            summary.error,
            summary.last_step,
        )
        assert row["problem"] is None
