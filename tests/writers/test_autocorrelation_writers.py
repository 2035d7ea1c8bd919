"""Autocorrelation summaries in TensorBoard and wandb, read back as the dashboards read them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.plugins import Writers
from learnscope.plugins.pipeline.figures import COLOURS, WIDTH, acf_chart
from learnscope.plugins.tensorboard.autocorrelation import TAU_TITLE
from learnscope.plugins.tensorboard.layout import LAYOUT_FILE, margin, multiline
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.plugins.wandb.writer import WandbWriter
from learnscope.records import AutocorrelationSummary, GroupAutocorrelation
from tests.kit.readers import (
    CustomScalarsReader,
    chart_tag_patterns,
    read_events,
    wandb_artifact_tables,
    wandb_history,
    wandb_records,
    wandb_run_dir,
)

LAGS = (1, 2, 5)


def summary(step: int) -> AutocorrelationSummary:
    """Parameters of two groups, gradients of the same, and a group of constant gradients."""
    lag = np.arange(11)
    groups = (
        GroupAutocorrelation("encoder", "params", 0.9**lag, 0.9, 0.85, 0.95, 10.0),
        GroupAutocorrelation("head", "params", 0.5**lag, 0.5, 0.4, 0.6, None),
        GroupAutocorrelation("encoder", "grads", (-0.4) ** lag, -0.4, -0.5, -0.3, None),
        GroupAutocorrelation("head", "grads", (-0.1) ** lag, -0.1, -0.2, 0.0, None),
        GroupAutocorrelation("frozen.norm", "grads", np.full(11, np.nan), *[np.nan] * 3, None),
    )
    return AutocorrelationSummary(step, LAGS, groups)


def test_tensorboard_scalars_layout_and_images(tmp_path: Path) -> None:
    writer = TensorBoardWriter(tmp_path)
    pipeline = Writers([writer])  # draws the pictures for its writers
    pipeline.write_autocorrelation(summary(9))
    pipeline.write_autocorrelation(summary(19))
    writer.add_charts({"losses": {"train": multiline(["train_loss"])}})  # another chart, later
    writer.write_scalars({"train_loss": 0.5}, step=19)
    writer.close()

    events = read_events(tmp_path)
    tags = set(events.Tags()["scalars"])
    assert summary(9).to_scalars().keys() <= tags
    assert "~learnscope/autocorrelation/params/encoder/tau" in tags
    assert not any("frozen.norm" in tag for tag in tags)  # constant: nothing made up
    lag_1 = events.Scalars("~learnscope/autocorrelation/grads/encoder/lag_1")
    assert [(e.step, round(e.value, 6)) for e in lag_1] == [(9, -0.4), (19, -0.4)]

    layout = CustomScalarsReader(tmp_path).layout()
    categories = [c["title"] for c in layout["category"]]
    assert categories == [  # one per kind and group, in module order
        "autocorrelation/params/encoder",
        "autocorrelation/params/head",
        "autocorrelation/grads/encoder",
        "autocorrelation/grads/head",
        "losses",
    ]
    charts = chart_tag_patterns(layout)
    band = "lag-1 autocorrelation, median and quartiles"
    assert list(charts) == [  # one line per chart, titles say what
        f"autocorrelation/params/encoder: encoder params: {band}",
        f"autocorrelation/params/encoder: encoder params: {TAU_TITLE}",
        f"autocorrelation/params/head: head params: {band}",
        f"autocorrelation/grads/encoder: encoder grads: {band}",
        f"autocorrelation/grads/head: head grads: {band}",
        "losses: train",
    ]
    for title, patterns in charts.items():
        for pattern in patterns:  # every pattern matches exactly one logged tag
            assert len([tag for tag in tags if re.match(pattern, tag)]) == 1, (title, pattern)
    for category in layout["category"]:  # at most one margin chart: the page keeps the order
        assert len([chart for chart in category["chart"] if "margin" in chart]) <= 1

    images = {tag: events.Images(tag) for tag in events.Tags()["images"]}
    assert set(images) == {
        "~learnscope/autocorrelation/params/acf",
        "~learnscope/autocorrelation/grads/acf",
    }
    assert [image.step for image in images["~learnscope/autocorrelation/grads/acf"]] == [9, 19]
    first = images["~learnscope/autocorrelation/params/acf"][0]
    assert first.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    assert (first.width, first.height) == (350, 385)  # as wide as an Images-tab card


def test_resumed_run_replaces_the_layout_of_older_versions(tmp_path: Path) -> None:
    old = {  # what earlier versions wrote: several lines of one colour per chart
        "autocorrelation/params": {
            "encoder: ACF at lags 1, 2, 5": multiline(
                [f"autocorrelation/params/encoder/lag_{k}" for k in LAGS]
            ),
            "encoder: lag-1 median and quartiles": margin(
                *(f"autocorrelation/params/encoder/rho1_{s}" for s in ("median", "q25", "q75"))
            ),
            "integrated autocorrelation time (steps)": [
                "Multiline",
                [r"autocorrelation/params/[^/]+/tau$"],
            ],
            "a chart of the user's": multiline(["autocorrelation/params/encoder/lag_2"]),
        },
        "losses": {"train": multiline(["train_loss"])},
        "autocorrelation/params/encoder": {  # before the tau chart's title said what tau is
            "encoder params: integrated autocorrelation time tau (steps)": multiline(
                ["~learnscope/autocorrelation/params/encoder/tau"]
            ),
        },
    }
    (tmp_path / LAYOUT_FILE).write_text(json.dumps({"version": 3, "layout": old}))
    writer = TensorBoardWriter(tmp_path)
    writer.write_autocorrelation(summary(29))
    writer.close()

    layout = CustomScalarsReader(tmp_path).layout()
    charts = list(chart_tag_patterns(layout))
    assert charts[:4] == [
        "autocorrelation/params: a chart of the user's",
        "losses: train",
        "autocorrelation/params/encoder: encoder params: lag-1 autocorrelation, median and "
        "quartiles",
        f"autocorrelation/params/encoder: encoder params: {TAU_TITLE}",
    ]
    assert not any("ACF at lags" in c or c.endswith(": lag-1 median and quartiles") for c in charts)
    assert "autocorrelation/params: integrated autocorrelation time (steps)" not in charts
    assert not any(c.endswith("integrated autocorrelation time tau (steps)") for c in charts)
    assert json.loads((tmp_path / LAYOUT_FILE).read_text())["version"] == 4


def test_acf_chart_draws_one_colour_per_group() -> None:
    groups = summary(0).groups[:2]
    colours = {tuple(c) for c in acf_chart(groups, "params").reshape(-1, 3).tolist()}
    rgb = [tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in COLOURS]
    assert rgb[0] in colours and rgb[1] in colours and rgb[2] not in colours  # two groups


def test_wandb_line_series_and_scalars(wandb_dir: Path) -> None:
    import wandb

    run = wandb.init(project="t", dir=str(wandb_dir))
    Writers([WandbWriter(run)]).write_autocorrelation(summary(9))  # the pipeline draws
    Writers([WandbWriter(run)]).write_autocorrelation(summary(19))
    run.finish()

    run_dir = wandb_run_dir(wandb_dir)
    rows: dict[int, dict[str, Any]] = {}  # the analysis, then its pictures, at one step
    for row in wandb_history(run_dir):
        rows.setdefault(row["trainer/global_step"], {}).update(row)
    assert list(rows) == [9, 19]
    history = list(rows.values())
    for row in history:
        keys = {k for k in row if not k.startswith("_")} - {"trainer/global_step"}
        assert all(key.startswith("~learnscope/autocorrelation/") for key in keys)
        assert summary(9).to_scalars().items() <= row.items()
    charts = [
        json.loads(item.value_json)
        for record in wandb_records(run_dir)
        if record.WhichOneof("record_type") == "config"
        for item in record.config.update
        if list(item.nested_key)[:2] == ["_wandb", "visualize"]
    ]
    assert {c["panel_config"]["panelDefId"] for c in charts} == {"wandb/lineseries/v0"}
    for row in history:  # the pictures TensorBoard shows, under the same tags
        for kind in ("params", "grads"):
            image = row[f"~learnscope/autocorrelation/{kind}/acf"]
            size = (WIDTH, 385)  # params: tau's note; grads: a third legend row
            assert (image["_type"], image["width"], image["height"]) == ("image-file", *size)
    tables = wandb_artifact_tables(run_dir, "~learnscope/autocorrelation/grads/acf_lines_table")
    assert len(tables) == 2
    table = tables[-1]
    assert table["columns"] == ["step", "lineKey", "lineVal"]
    by_group: dict[str, list[tuple[int, float]]] = {}
    for lag, group, value in table["data"]:
        by_group.setdefault(group, []).append((lag, value))
    assert set(by_group) == {"encoder", "head"}  # the constant group has no line
    assert [lag for lag, _ in by_group["encoder"]] == list(range(11))
    assert [v for _, v in by_group["encoder"]] == pytest.approx((-0.4) ** np.arange(11))
