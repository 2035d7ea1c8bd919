"""Proof in the real viewers: ``learnscope demo`` read back by a TensorBoard server, a browser
and from the offline wandb run.

The screenshots are made by ``docs/make_screenshots.py``; the browser test uses its
Projector helper, so the script is tested here too.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.lightning_glue.demo import EMBEDDING_DIMS
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from tests.kit.browser import chromium, unavailable_reason, wait_for_text
from tests.kit.readers import (
    parse_metadata,
    png_size,
    wandb_artifact_tables,
    wandb_history,
    wandb_run_dir,
)
from tests.kit.tb_server import TensorBoardServer, tensorboard

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN = "demo/version_0"
EPOCHS = 8  # the demo's default: the run docs/demo.md describes


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of ``learnscope demo --wandb`` shared by the tests of this file."""
    logdir = tmp_path_factory.mktemp("viewers") / "runs"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    result = subprocess.run(
        [sys.executable, "-m", "learnscope.lightning_glue.cli", "demo", "--logdir", str(logdir)]
        + ["--epochs", str(EPOCHS), "--wandb"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = wandb_run_dir(logdir)
    assert run_dir.parent == logdir / "wandb" and run_dir.name.startswith("offline-run-")
    output = result.stdout + result.stderr  # the end-of-fit line goes to the log (stderr)
    assert f"wandb sync {run_dir}" in output  # the exact command, with the run directory
    assert (run_dir / "files").is_dir()
    return logdir


@pytest.fixture(scope="module")
def server(demo_logdir: Path) -> Any:
    with tensorboard(demo_logdir) as tb:
        tb.wait_for("/data/plugin/projector/runs", lambda runs: RUN in runs)
        yield tb


def run_tags(tb: TensorBoardServer, plugin: str) -> Any:
    return tb.json(f"/data/plugin/{plugin}/tags")[RUN]


def test_projector_serves_every_snapshot_as_written(
    server: TensorBoardServer, demo_logdir: Path
) -> None:
    run_dir = demo_logdir / RUN
    config = projector_files.read_config(run_dir)
    assert len(config.embeddings) == EPOCHS
    info = server.json("/data/plugin/projector/info", run=RUN)
    assert [e["tensorName"] for e in info["embeddings"]] == [
        e.tensor_name for e in config.embeddings
    ]
    for entry in config.embeddings:
        name = entry.tensor_name
        served = server.get("/data/plugin/projector/tensor", run=RUN, name=name)
        assert served == (run_dir / entry.tensor_path).read_bytes()  # raw float32, as written
        n, dim = entry.tensor_shape
        assert np.frombuffer(served, np.float32).shape == (n * dim,)
        header, rows = parse_metadata(
            server.get("/data/plugin/projector/metadata", run=RUN, name=name).decode()
        )
        assert header is not None and header[0] == "label" and len(rows) == n
        sprite = server.get("/data/plugin/projector/sprite_image", run=RUN, name=name)
        assert png_size(sprite) == (24 * 8, 24 * 8)


def test_custom_scalars_layout_lists_every_chart_and_tags_resolve(
    server: TensorBoardServer,
) -> None:
    layout = server.json("/data/plugin/custom_scalars/layout")
    scalar_tags = set(run_tags(server, "scalars"))
    titles = {c["title"]: [ch["title"] for ch in c["chart"]] for c in layout["category"]}
    assert {
        "autocorrelation/params/encoder",
        "autocorrelation/grads/head",
    } <= set(titles)
    for category in layout["category"]:
        for chart in category["chart"]:
            if "multiline" in chart:
                for pattern in chart["multiline"]["tag"]:
                    assert any(re.match(pattern, tag) for tag in scalar_tags), pattern
            else:
                for series in chart["margin"]["series"]:
                    assert {series["value"], series["lower"], series["upper"]} <= scalar_tags
    # each multiline chart's series has points
    tag = next(
        t
        for t in scalar_tags
        if t.startswith("~learnscope/autocorrelation/params/") and "rho1_median" in t
    )
    points = server.json("/data/plugin/scalars/scalars", run=RUN, tag=tag)
    assert len(points) >= 1


def test_histograms_images_and_findings_are_served(server: TensorBoardServer) -> None:
    histograms = server.json("/data/plugin/histograms/tags").get(RUN, {})
    assert (
        "~learnscope/health/grad_norm" not in histograms
    )  # on request only: TrainingHelper(histograms=)

    images = run_tags(server, "images")
    assert "~learnscope/embeddings/encoder/validate/pca" in images
    assert any(tag.startswith("~learnscope/autocorrelation/") for tag in images)
    for tag in (
        "~learnscope/embeddings/encoder/validate/pca",
        next(t for t in images if t.startswith("~learnscope/autocorrelation/")),
    ):
        samples = server.json("/data/plugin/images/images", run=RUN, tag=tag, sample=0)
        assert samples
        png = server.get(f"/data/plugin/images/individualImage?{samples[-1]['query']}")
        assert png[:8] == b"\x89PNG\r\n\x1a\n"

    tag = "~learnscope/findings/text_summary"  # SummaryWriter.add_text appends /text_summary
    assert tag in run_tags(server, "text")
    text = server.json("/data/plugin/text/text", run=RUN, tag=tag)
    assert "No findings" in text[-1]["text"]


def test_wandb_run_holds_tables_charts_histograms_and_findings(demo_logdir: Path) -> None:
    run_dir = wandb_run_dir(demo_logdir)
    history = wandb_history(run_dir)
    tables = wandb_artifact_tables(run_dir, "~learnscope/embeddings/encoder/validate")
    assert len(tables) == EPOCHS
    for table in tables:
        assert table["columns"][:3] == ["embedding", "step", "stage"]
        assert {"label", "id", "pca_x", "pca_y", "image"} <= set(table["columns"])
        assert len(table["data"]) == 540 and len(table["data"][0][0]) == EMBEDDING_DIMS
    chart_keys = [
        k
        for row in history
        for k in row
        if k.startswith("~learnscope/autocorrelation/") and k.endswith("_table")
    ]
    assert chart_keys, "no autocorrelation chart table logged"
    acf = wandb_artifact_tables(run_dir, chart_keys[0])[-1]
    assert sorted(acf["columns"]) == ["lineKey", "lineVal", "step"]
    value = acf["columns"].index("lineVal")
    assert acf["data"] and all(-1.0 <= row[value] <= 1.0 for row in acf["data"])
    assert not any("~learnscope/health/grad_norm" in row for row in history)  # on request only
    assert any(
        "~learnscope/health/grad_norm/encoder" in row for row in history
    )  # the per-group norms
    findings = wandb_artifact_tables(run_dir, "~learnscope/findings")
    assert findings and findings[-1]["columns"] == [
        "step",
        "severity",
        "code",
        "subject",
        "still holds",
        "seen",
        "message",
        "what to try",
    ]
    assert findings[-1]["data"][0][2] == "no-findings"  # the demo is healthy


def readme_demo_tags() -> set[str]:
    """Every tag the demo's page, docs/demo.md, names (``{a,b}`` choices expanded)."""
    section = (Path(__file__).parents[2] / "docs" / "demo.md").read_text()
    prefixes = ("~learnscope/", "autocorrelation/", "encoder/", "val/")  # Custom Scalars: a/...
    return {
        tag
        for quoted in re.findall(r"`([^`\s]+)`", section)
        if quoted.startswith((*prefixes, "train/")) and not quoted.endswith("/")
        for tag in expand(quoted)
    }


def expand(pattern: str) -> set[str]:
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return {pattern}
    pick = [pattern[: match.start()] + c + pattern[match.end() :] for c in match[1].split(",")]
    return set().union(*(expand(p) for p in pick))


def test_readme_names_the_demo_tags_as_stored(server: TensorBoardServer, demo_logdir: Path) -> None:
    tags = readme_demo_tags()
    scalars = set(run_tags(server, "scalars")) - {"epoch"}  # Lightning's own
    assert scalars <= tags, sorted(scalars - tags)  # the page names every scalar stored
    stored = {
        tag
        for plugin in ("scalars", "images", "histograms", "text")
        for tag in server.json(f"/data/plugin/{plugin}/tags").get(RUN, {})  # none: no histogram
    }
    stored |= {c["title"] for c in server.json("/data/plugin/custom_scalars/layout")["category"]}
    names = [
        e["tensorName"] for e in server.json("/data/plugin/projector/info", run=RUN)["embeddings"]
    ]
    wandb_keys = {
        k.removesuffix("_table") for row in wandb_history(wandb_run_dir(demo_logdir)) for k in row
    }
    stored |= {name.rsplit("/", 1)[0] for name in names}  # snapshot keys: tag/stage
    for tag in tags:
        if tag.startswith("encoder/validate/step_"):  # the first and the last of 8 epochs
            assert tag in names, (tag, names)
        else:
            assert tag in stored | wandb_keys, tag


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_browser_shows_projector_and_custom_scalars(
    server: TensorBoardServer, demo_logdir: Path
) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_screenshots", Path(__file__).parents[2] / "docs" / "make_screenshots.py"
    )
    make_screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_screenshots)
    order = demo_logdir / "order"  # snapshots written out of order, across digit counts
    writer = TensorBoardWriter(order)
    for step in (1_000, 5, 120, 20):
        label = {"label": torch.arange(6) % 2}
        writer.write_embedding(EmbeddingSnapshot("enc", step, torch.randn(6, 3), label))
    writer.close()
    server.wait_for("/data/plugin/projector/runs", lambda runs: "order" in runs)

    with chromium(width=1200, height=780) as driver:
        driver.get(f"{server.base}/#projector")
        text = wait_for_text(
            driver, lambda t: "Points: 540" in t and f"Dimension: {EMBEDDING_DIMS}" in t
        )
        assert "encoder/validate/step_0000000" in text

        menu, opened = make_screenshots.projector(driver, server.base, None, run="order")
        assert menu == [f"enc/step_{s:09d}" for s in (5, 20, 120, 1_000)]  # training order
        assert opened == menu[0]  # TensorBoard opens the first name (README, Limitations)

        driver.get(f"{server.base}/#custom_scalars")
        text = wait_for_text(driver, lambda t: "lag-1 autocorrelation, median" in t)
        assert text.index("encoder params: lag-1") < text.index("head params: lag-1")

        driver.get(f"{server.base}/#images")
        wait_for_text(driver, lambda t: "~learnscope/embeddings/encoder/validate/pca" in t)

        # Time Series lists the user's groups first; learnscope's are one group, the last.
        driver.get(f"{server.base}/#timeseries")
        text = wait_for_text(driver, lambda t: re.search(r"~learnscope \d+ cards", t) is not None)
        last = text.index("~learnscope")
        assert 0 < text.index(" train ") < last and 0 < text.index(" val ") < last
