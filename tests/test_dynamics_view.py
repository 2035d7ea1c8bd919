"""The training-dynamics view: its view model, the exported page, the TensorBoard tab, W&B.

One short demo fit (3 epochs, 3 snapshots, 2 autocorrelation analyses) is shared by the module;
a findings table is added to it with the real TensorBoard writer.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from browser import chromium, unavailable_reason
from readers import parse_metadata, wandb_run_dir

from learnscope.plugins import dynamics_data
from learnscope.plugins.tensorboard import TensorBoardWriter
from learnscope.records import EmbeddingSnapshot, Finding

needs_browser = pytest.mark.skipif(
    unavailable_reason() is not None, reason=str(unavailable_reason())
)

_FRAMES = """
const out = [];
function walk(n) {
  if (n.tagName === 'IFRAME') out.push(n);
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) walk(c);
}
walk(document.body);
return out;
"""

# An isolated point (no other within 4 px), its page coordinates, its canvas pixel, its tooltip.
_ISOLATED_POINT = """
const v = window.learnscopeView;
const pos = v.pos, n = v.state.points;
for (let k = 0; k < n; k++) {
  let near = Infinity;
  for (let j = 0; j < n; j++) {
    if (j === k) continue;
    near = Math.min(near, Math.hypot(pos[2*j] - pos[2*k], pos[2*j+1] - pos[2*k+1]));
  }
  if (near < 4) continue;
  const r = v.canvas.getBoundingClientRect();
  const ratio = window.devicePixelRatio || 1;
  const pixel = v.ctx.getImageData(Math.round(pos[2*k] * ratio), Math.round(pos[2*k+1] * ratio),
                                   1, 1).data;
  return {k, id: v.current.ids[k], x: pos[2*k], y: pos[2*k+1], width: r.width,
          height: r.height, pixel: Array.from(pixel)};
}
return null;
"""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from learnscope.lightning_glue.demo import run_demo

    logdir = tmp_path_factory.mktemp("view") / "runs"
    run_dir = run_demo(logdir, epochs=3).tensorboard
    writer = TensorBoardWriter(run_dir)
    found = Finding("zero-gradient", "head.bias", "gradient is | exactly zero", 40)
    writer.write_findings([found], step=40)
    writer.write_findings([found], step=60)
    writer.close()
    return run_dir


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    with chromium() as driver:
        yield driver


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f2").reshape(-1, 2)


def _tsv(path: Path) -> dict[str, list[str]]:
    header, rows = parse_metadata(path.read_text(encoding="utf-8"))
    assert header is not None
    return {name: [row[i] for row in rows] for i, name in enumerate(header)}


def test_view_model_holds_what_the_writers_wrote(demo_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    view = dynamics_data.read_view(demo_run)
    json.dumps(view)  # JSON-able
    (embedding,) = view["embeddings"]
    assert embedding["key"] == "encoder/validate"
    folders = sorted((demo_run / "projector" / "encoder" / "validate").iterdir())
    assert embedding["steps"] == [int(f.name.split("_")[1]) for f in folders] == [20, 40, 60]
    assert embedding["points_shown"] == embedding["points_total"] == 540
    for folder, xy in zip(folders, embedding["xy"], strict=True):
        table = _tsv(folder / "metadata.tsv")
        row = {point: r for r, point in enumerate(table["id"])}
        rows = [row[i] for i in embedding["ids"]]  # the same ids in every snapshot
        expected = np.array(
            [[float(table["pca_x"][r]), float(table["pca_y"][r])] for r in rows], np.float16
        )
        np.testing.assert_array_equal(_decode(xy), expected)
    (label,) = embedding["columns"]
    last = _tsv(folders[-1] / "metadata.tsv")
    labels = dict(zip(last["id"], last["label"], strict=True))
    assert [label["categories"][c] for c in label["codes"]] == [labels[i] for i in embedding["ids"]]
    assert embedding["sprite"]["png"].startswith("data:image/png;base64,")

    kinds = {k["kind"]: k for k in view["autocorrelation"]}
    assert list(kinds) == ["params", "grads"]
    events = EventAccumulator(str(demo_run), size_guidance={"scalars": 0})
    events.Reload()  # every event file of the run
    for kind in kinds.values():
        assert kind["groups"] == ["encoder", "head"] and kind["lags"] == [1, 2, 5, 10, 20]
        assert kind["steps"] == sorted(kind["steps"]) and len(kind["steps"]) >= 2
        for s, step in enumerate(kind["steps"]):
            for g, group in enumerate(kind["groups"]):
                scalars = events.Scalars(f"autocorrelation/{kind['kind']}/{group}/lag_5")
                value = next(e.value for e in scalars if e.step == step)
                assert kind["values"][s][g][2] == pytest.approx(value, abs=1e-4)
    assert view["findings"] == [
        {
            "step": 40,
            "severity": "warning",
            "code": "zero-gradient",
            "subject": "head.bias",
            "message": "gradient is | exactly zero",
            "last_seen": 60,
        }
    ]
    assert view["messages"] == []


def test_missing_pca_and_subsampling_are_said(tmp_path: Path) -> None:
    writer = TensorBoardWriter(tmp_path / "plain")
    writer.write_embedding(EmbeddingSnapshot("enc", 1, torch.randn(5, 3), {"label": list("abcde")}))
    writer.close()
    view = dynamics_data.read_view(tmp_path / "plain")
    assert view["embeddings"] == []
    assert any(dynamics_data.PCA_HINT in m for m in view["messages"])

    writer = TensorBoardWriter(tmp_path / "big")
    ids = [f"p{i}" for i in range(300)]
    for step in (1, 2):
        order = np.random.default_rng(step).permutation(300)  # rows in another order each time
        metadata = {
            "id": [ids[i] for i in order],
            "pca_x": [float(i) for i in order],
            "pca_y": [float(-i) for i in order],
        }
        writer.write_embedding(EmbeddingSnapshot("enc", step, torch.randn(300, 2), metadata))
    writer.close()
    view = dynamics_data.read_view(tmp_path / "big", max_points=100)
    (embedding,) = view["embeddings"]
    assert embedding["points_shown"] == 100 and embedding["points_total"] == 300
    assert any("100 of 300 points shown" in m for m in view["messages"])
    shown = embedding["ids"]
    assert (
        shown == dynamics_data.read_view(tmp_path / "big", max_points=100)["embeddings"][0]["ids"]
    )
    for xy in embedding["xy"]:  # matched by id whatever the row order
        np.testing.assert_array_equal(_decode(xy)[:, 0], [float(i[1:]) for i in shown])


@needs_browser
def test_exported_page_plays_offline(demo_run: Path, browser: Any, tmp_path: Path) -> None:
    from learnscope.lightning_glue.cli import main

    page = tmp_path / "view.html"
    assert main(["export", str(demo_run.parent.parent), "--html", str(page)]) == 0
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws*"]})
    try:
        browser.get(page.as_uri())
        state = _wait_ready(browser)
        requests = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    assert [r for r in requests if not r.startswith(("data:", "blob:", "file:"))] == []
    assert state["points"] == state["drawnPoints"] == 540 and state["steps"] == [20, 40, 60]
    _hover_and_pin(browser, demo_run)

    print(f"exported page: {_frames_while_playing(browser)} frames per second, 540 points")

    browser.execute_script("window.learnscopeView.findMovers()")
    movers = browser.execute_script("return window.learnscopeView.state.movers")
    assert len(movers) == 20 and all(0 <= m["change"] <= 1 for m in movers)
    assert movers == sorted(movers, key=lambda m: -m["change"])


@needs_browser
def test_tensorboard_tab_shows_the_run(demo_run: Path, browser: Any) -> None:
    from tb_server import tensorboard

    with tensorboard(demo_run.parent.parent) as server:
        listing = server.json("/data/plugins_listing")
        assert "learnscope" in listing, "the tensorboard_plugins entry point is not installed"
        assert listing["learnscope"]["enabled"] is True
        assert server.json("/data/plugin/learnscope/runs") == ["demo/version_0"]
        browser.get(f"{server.base}/#learnscope")
        deadline = time.monotonic() + 60
        while not browser.execute_script(_FRAMES):
            assert time.monotonic() < deadline, "the learnscope tab never made its iframe"
            time.sleep(0.5)
        browser.switch_to.frame(browser.execute_script(_FRAMES)[0])
        try:
            state = _wait_ready(browser)
            assert state["points"] == state["drawnPoints"] == 540
            assert state["run"] == "demo/version_0"
            _hover_and_pin(browser, demo_run)
            print(f"learnscope tab: {_frames_while_playing(browser)} frames per second")
            text = browser.find_element("tag name", "body").text
            assert "zero-gradient" in text and "head.bias" in text  # the findings timeline
        finally:
            browser.switch_to.default_content()
        shots = os.environ.get("LEARNSCOPE_SCREENSHOT_DIR")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(Path(shots) / "learnscope_tab.png"))


def test_wandb_panel_holds_the_view(demo_run: Path, wandb_dir: Path) -> None:
    import wandb
    from learnscope.plugins.wandb_view import VIEW_KEY, log_view

    run = wandb.init(project="view", dir=str(wandb_dir))
    log_view(run, demo_run, 60, "trainer/global_step")
    run.finish()
    (html_file,) = (wandb_run_dir(wandb_dir) / "files" / "media" / "html").rglob("*.html")
    html = html_file.read_text(encoding="utf-8")
    data = re.search(r'id="learnscope-data">(.*?)</script>', html, re.S)
    assert data is not None and "export async function render()" in html
    (shown,) = json.loads(data[1])["runs"]
    view = dynamics_data.read_view(demo_run, sprites=False)
    assert shown["view"]["embeddings"][0]["xy"] == view["embeddings"][0]["xy"]
    assert "stylesheet" not in html  # nothing injected that loads from the network
    assert VIEW_KEY == "learnscope/view"


def test_a_fit_with_tensorboard_and_wandb_logs_the_view_after_each_snapshot(
    tmp_path: Path, wandb_dir: Path
) -> None:
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
    from readers import wandb_history
    from tiny_models import TinyClassifier, loaders, trainer

    from learnscope.lightning_glue import EmbeddingProjector

    wb = WandbLogger(project="t", save_dir=str(wandb_dir))  # wandb first: the view still waits
    tb = TensorBoardLogger(str(tmp_path), name="tb")  # for the TensorBoard files of the step
    projector = EmbeddingProjector(
        metadata_fn=lambda b: {"label": b[1]}, ids_fn="dataset_index", aligned_pca=True
    )
    trainer(tmp_path, [wb, tb], [projector], max_epochs=2).fit(TinyClassifier(), *loaders())
    wb.experiment.finish()
    views = [h for h in wandb_history(wandb_run_dir(wandb_dir)) if "learnscope/view" in h]
    assert [h["trainer/global_step"] for h in views] == [6, 12]
    pages = sorted((wandb_run_dir(wandb_dir) / "files" / "media" / "html").rglob("*.html"))
    last = re.search(r'id="learnscope-data">(.*?)</script>', pages[-1].read_text("utf-8"), re.S)
    (shown,) = json.loads(last[1])["runs"]
    assert shown["view"]["embeddings"][0]["steps"] == [6, 12]  # both snapshots in the last


def _frames_while_playing(browser: Any) -> int:
    """Press play for one second: the frames drawn (at least 20), and the step moved on."""
    before = browser.execute_script("return window.learnscopeView.state.frames")
    browser.execute_script("window.learnscopeView.play()")
    time.sleep(1.0)
    frames = browser.execute_script("return window.learnscopeView.state.frames") - before
    browser.execute_script("window.learnscopeView.pause()")
    assert frames >= 20
    return frames


def _wait_ready(browser: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state = browser.execute_script(
            "const v = window.learnscopeView; return v ? JSON.parse(JSON.stringify(v.state)) : null"
        )
        if state and state.get("error"):
            raise AssertionError(state["error"])
        if state and state["ready"]:
            return state
        assert time.monotonic() < deadline, f"the view never got ready: {state}"
        time.sleep(0.2)


def _hover_and_pin(browser: Any, run_dir: Path) -> None:
    """Move the mouse onto a point: the tooltip names its id and label; a click pins it."""
    from selenium.webdriver.common.action_chains import ActionChains

    point = browser.execute_script(_ISOLATED_POINT)
    assert point is not None
    assert point["pixel"][3] == 255  # the canvas drew the point there
    canvas = browser.execute_script("return window.learnscopeView.canvas")
    ActionChains(browser).move_to_element_with_offset(
        canvas, round(point["x"] - point["width"] / 2), round(point["y"] - point["height"] / 2)
    ).perform()
    state = browser.execute_script("return JSON.parse(JSON.stringify(window.learnscopeView.state))")
    last = sorted((run_dir / "projector" / "encoder" / "validate").iterdir())[-1]
    table = _tsv(last / "metadata.tsv")
    label = dict(zip(table["id"], table["label"], strict=True))[point["id"]]
    assert state["hovered"] == point["k"]
    assert f"id {point['id']}" in state["tooltip"] and f"label: {label}" in state["tooltip"]
    ActionChains(browser).click().perform()
    assert browser.execute_script("return window.learnscopeView.state.pinned") == point["k"]


def test_export_says_when_there_is_nothing(tmp_path: Path, capsys: Any) -> None:
    from learnscope.lightning_glue.cli import main

    assert main(["export", str(tmp_path), "--html", str(tmp_path / "v.html")]) == 1
    assert "no learnscope run" in capsys.readouterr().err
    assert not (tmp_path / "v.html").exists()
    assert shutil.which("learnscope") is not None
