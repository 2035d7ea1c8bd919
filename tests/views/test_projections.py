"""Every view offers both projections: a key's aligned PCA view and its aligned UMAP view.

Runs are written by today's record writer (``snapshot_entry`` of
:class:`~learnscope.records.EmbeddingSnapshot` objects with a PCA view and a ``umap`` one in
``projections``); the view model, the export, the W&B page, the comparison of two runs and the
page itself (the exported page and the learnscope tab of a real TensorBoard, in headless
Chromium) are checked against the coordinates written, divided by their spread.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.embeddings.neighbourhoods import in_spreads, procrustes_rotation
from learnscope.plugins.pipeline.run_record_writer import snapshot_entry
from learnscope.plugins.views import run_view, view_page
from learnscope.plugins.views.compare_runs import RunSnapshots, compare_runs
from learnscope.plugins.wandb.page_writer import RecordPage
from learnscope.records import AlignedView, EmbeddingSnapshot, ViewFrame
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import append_entries, encode_array
from tests.kit.browser import enter_learnscope_tab, open_page, wait_view_ready
from tests.kit.record_entries import ALL_CALLBACKS, run_entry

KEY = "enc/validate"
STEPS = (10, 20, 30)
POINTS = 40
LABELS = np.arange(POINTS) % 4
IDS = [f"p{i}" for i in range(POINTS)]
PCA_FRAME = (-2.5, 2.5, -2.5, 2.5)
UMAP_FRAME = (-3.0, 3.0, -3.0, 3.0)
FITTED = {30: 25}  # the snapshot at step 30: UMAP fitted on 25 of the 40 points
OLD_RUN = Path(__file__).resolve().parent.parent / "data" / "written_by_37d4c95"


def rms(xy: np.ndarray) -> float:
    """The root-mean-square distance from the origin: a view's spread."""
    return float(np.sqrt((xy**2).sum(1).mean()))


def coordinates(seed: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per step, a PCA view (noise) and a UMAP view (the labels' clusters pulling apart)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])
    views = {}
    for i, step in enumerate(STEPS):
        pca = rng.normal(size=(POINTS, 2)).astype(np.float32)
        umap = centres[LABELS] * (0.5 + i) + rng.normal(size=(POINTS, 2)) * 0.2
        views[step] = (pca, (umap * 7.0).astype(np.float32))  # UMAP in its own units
    return views


def snapshot(step: int, pca: np.ndarray, umap: np.ndarray | None) -> EmbeddingSnapshot:
    """A snapshot as the projector makes it, with its PCA view and (or not) a UMAP view."""
    vectors = np.random.default_rng(step).normal(size=(POINTS, 6)).astype(np.float32)
    projections = ()
    if umap is not None:
        frame = ViewFrame(rms(umap), UMAP_FRAME)
        projections = (AlignedView(umap, frame, "umap", fitted=FITTED.get(step)),)
    return EmbeddingSnapshot(
        "enc",
        step,
        vectors,
        {"id": IDS, "label": [f"class {v}" for v in LABELS]},
        stage="validate",
        aligned=AlignedView(pca, ViewFrame(rms(pca), PCA_FRAME)),
        projections=projections,
    )


def write_run(run: Path, seed: int, without_umap: tuple[int, ...] = ()) -> dict[int, tuple]:
    """A run of three snapshots written by the record writer; its coordinates by step."""
    views = coordinates(seed)
    entries = [run_entry(*ALL_CALLBACKS)]
    for step, (pca, umap) in views.items():
        entries.append(snapshot_entry(snapshot(step, pca, None if step in without_umap else umap)))
    run.mkdir(parents=True, exist_ok=True)
    append_entries(run / RECORD_FILE, entries)
    return views


def decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f2").reshape(-1, 2).astype(np.float64)


def assert_in_spreads(encoded: str, written: np.ndarray) -> None:
    """``encoded`` (float16 in spreads) is ``written`` divided by its spread."""
    np.testing.assert_allclose(decode(encoded), written / rms(written), rtol=2e-3, atol=2e-3)


def test_the_view_carries_both_projections_in_spreads(tmp_path: Path) -> None:
    views = write_run(tmp_path / "run", seed=0)

    view = run_view.read_view(tmp_path / "run")
    (key,) = view["embeddings"]
    assert key["steps"] == list(STEPS) and key["ids"] == IDS
    assert key["frame"] == list(PCA_FRAME)
    (umap,) = key["projections"]
    assert (umap["name"], umap["label"], umap["steps"]) == ("umap", "UMAP", list(STEPS))
    assert umap["frame"] == list(UMAP_FRAME)
    assert umap["fitted"] == [None, None, 25] and umap["points"] == [POINTS] * 3
    for i, step in enumerate(STEPS):
        pca, written = views[step]
        assert_in_spreads(key["xy"][i], pca)
        assert_in_spreads(umap["xy"][i], written)
        assert umap["spreads"][i] == pytest.approx(rms(written), rel=1e-6)
    assert [c["name"] for c in key["columns"]] == ["label"]  # no umap_x, umap_y columns
    assert not any("umap" in m.lower() for m in view["messages"])


def test_snapshots_without_umap_are_said_and_umap_shows_the_others(tmp_path: Path) -> None:
    views = write_run(tmp_path / "run", seed=1, without_umap=(10,))

    view = run_view.read_view(tmp_path / "run")
    (key,) = view["embeddings"]
    (umap,) = key["projections"]
    assert key["steps"] == list(STEPS) and umap["steps"] == [20, 30]
    assert_in_spreads(umap["xy"][0], views[20][1])
    said = "enc/validate: 1 of 3 snapshots without the aligned UMAP view: UMAP shows the other 2"
    assert said in view["messages"]


def test_a_damaged_umap_view_is_said_and_the_rest_shows(tmp_path: Path) -> None:
    views = write_run(tmp_path / "run", seed=2)
    record = tmp_path / "run" / RECORD_FILE
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    entries[2]["projections"]["umap"]["xy"] = encode_array(np.zeros((3, 2), np.float32))
    entries[3]["projections"] = {"umap": {"xy": "not an array"}, "tsne": 7}
    record.write_text("".join(json.dumps(e) + "\n" for e in entries))

    view = run_view.read_view(tmp_path / "run")
    (key,) = view["embeddings"]
    assert key["steps"] == list(STEPS)  # every PCA view still shows
    for i, step in enumerate(STEPS):
        assert_in_spreads(key["xy"][i], views[step][0])
    (umap,) = key["projections"]
    assert umap["steps"] == [10]
    assert_in_spreads(umap["xy"][0], views[10][1])
    messages = view["messages"]
    assert (
        "snapshot enc/validate at step 20: its umap view: xy has 3 points, the snapshot 40; "
        "shown without it" in messages
    )
    assert (
        "snapshot enc/validate at step 30: its umap view: xy is not an array; shown without it"
        in messages
    )
    assert any("step 30: its tsne view: it is not an object" in m for m in messages)
    assert (
        "enc/validate: 2 of 3 snapshots without the aligned UMAP view: UMAP shows the other 1"
        in (messages)
    )


def test_a_run_written_before_projections_still_opens() -> None:
    view = run_view.read_view(OLD_RUN)
    (key,) = view["embeddings"]
    assert key["steps"] == [6, 12] and key["projections"] == []
    assert not any("projection" in m or "UMAP" in m for m in view["messages"])


def test_the_w_and_b_page_thins_both_projections_alike(tmp_path: Path) -> None:
    write_run(tmp_path / "run", seed=3, without_umap=(20,))
    view = run_view.read_view(tmp_path / "run")

    thinned = view_page.thin_snapshots(view, 2)
    (key,) = thinned["embeddings"]
    (umap,) = key["projections"]
    assert key["steps"] == [10, 30] and len(key["xy"]) == 2
    assert umap["steps"] == [10, 30] and umap["fitted"] == [None, 25] and len(umap["xy"]) == 2
    assert umap["xy"] == [view["embeddings"][0]["projections"][0]["xy"][i] for i in (0, 1)]
    page = RecordPage(tmp_path / "run").html("run")
    assert umap["xy"][1] in page and key["xy"][1] in page


def test_two_runs_are_compared_in_each_projection_both_have(tmp_path: Path) -> None:
    views_a = write_run(tmp_path / "a", seed=4)
    views_b = write_run(tmp_path / "b", seed=5)

    result = compare_runs(RunSnapshots(tmp_path / "a", "a"), RunSnapshots(tmp_path / "b", "b"), KEY)
    (umap,) = result["projections"]
    assert (umap["name"], umap["label"]) == ("umap", "UMAP")
    a, b = in_spreads(views_a[30][1].astype(np.float64)), in_spreads(views_b[30][1].astype(float))
    rotation = procrustes_rotation(b, a)
    xy_a = np.frombuffer(base64.b64decode(umap["xy_a"]), "<f4").reshape(-1, 2)
    xy_b = np.frombuffer(base64.b64decode(umap["xy_b"]), "<f4").reshape(-1, 2)
    np.testing.assert_allclose(xy_a, a, atol=1e-5)
    np.testing.assert_allclose(xy_b, b @ rotation, atol=1e-5)
    np.testing.assert_allclose(umap["rotation"], rotation, atol=1e-9)
    residual = np.sqrt(((a - b @ rotation) ** 2).sum(1).mean())
    assert umap["residual"] == pytest.approx(residual, abs=1e-6)
    # the PCA views as before: the same numbers at the top
    pca_a = in_spreads(views_a[30][0].astype(np.float64))
    np.testing.assert_allclose(
        np.frombuffer(base64.b64decode(result["xy_a"]), "<f4").reshape(-1, 2), pca_a, atol=1e-5
    )
    # a run without UMAP: no UMAP pictures, said so
    write_run(tmp_path / "c", seed=6, without_umap=STEPS)
    result = compare_runs(RunSnapshots(tmp_path / "a", "a"), RunSnapshots(tmp_path / "c", "c"), KEY)
    assert result["projections"] == [] and result["xy_a"] is not None
    assert (
        "only one of the snapshots has an aligned UMAP view: no UMAP pictures" in (result["notes"])
    )


# ---- the page: the exported one and the tab of a real TensorBoard, in headless Chromium ----

WIDTH, HEIGHT = 640, 480  # the scatter's CSS pixels (embeddings.js)
_STATE = "return JSON.parse(JSON.stringify(window.learnscopeView.state))"
_CHOOSE = """
const [label, value] = arguments;
const s = document.querySelector(`select[aria-label="${label}"]`);
s.value = value; s.dispatchEvent(new Event('change'));
"""
_SLIDE = """
const s = document.querySelector('input[aria-label="step"]');
s.value = arguments[0]; s.dispatchEvent(new Event('input'));
"""
_SHOWN = """
const text = (role) => { const e = document.querySelector(`[data-role="${role}"]`);
  return e ? e.textContent : null; };
const choice = document.querySelector('[data-role="projection-choice"]');
return {cursor: text('cursor-step'), snapshot: text('snapshot-step'),
        fitted: text('projection-note'), hint: text('hint-embeddings'),
        title: document.querySelector('section h2').textContent,
        choice: choice ? getComputedStyle(choice).display !== 'none' : null,
        options: [...document.querySelectorAll('select[aria-label="projection"] option')]
          .map((o) => o.textContent),
        pos: Array.from(window.learnscopeView.pos)};
"""


def screen(xy: np.ndarray, frame: tuple[float, ...]) -> np.ndarray:
    """Canvas positions of ``xy`` (in spreads) in ``frame``, as the page maps them."""
    x0, x1, y0, y1 = frame
    x, y = np.clip(xy[:, 0], x0, x1), np.clip(xy[:, 1], y0, y1)
    scale = min(WIDTH / (x1 - x0), HEIGHT / (y1 - y0))
    left, top = (WIDTH - (x1 - x0) * scale) / 2, (HEIGHT - (y1 - y0) * scale) / 2
    return np.stack([left + (x - x0) * scale, top + (y1 - y) * scale], axis=1)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """Two runs with both projections; their coordinates by step."""
    root = tmp_path_factory.mktemp("projections") / "logs"
    return root, write_run(root / "run", seed=7), write_run(root / "other", seed=8)


def check_switch(driver: Any, views: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """On the run ``views`` shown: move the cursor to step 20, pin a point, switch to UMAP and
    back; the points drawn are each projection's, the cursor, pin and colours stay."""
    driver.execute_script("learnscopeView.loadRun('run')")
    wait_view_ready(driver)
    shown = driver.execute_script(_SHOWN)
    assert shown["choice"] and shown["options"] == ["PCA", "UMAP"]
    assert "aligned PCA" in shown["title"] and shown["fitted"] == ""
    driver.execute_script(_SLIDE, 1)  # the snapshot of step 20: the cursor goes there
    driver.execute_script("learnscopeView.pin(3)")
    pca = views[20][0] / rms(views[20][0])
    np.testing.assert_allclose(
        np.reshape(driver.execute_script(_SHOWN)["pos"], (-1, 2)), screen(pca, PCA_FRAME), atol=0.3
    )

    driver.execute_script(_CHOOSE, "projection", "umap")
    state, shown = driver.execute_script(_STATE), driver.execute_script(_SHOWN)
    assert state["projection"] == "umap" and state["position"] == 1 and state["pinned"] == 3
    assert state["drawnPoints"] == POINTS and state["colourBy"] == "label"
    assert shown["cursor"] == "step 20" and shown["snapshot"] == "snapshot of step 20 (2/3)"
    assert "aligned UMAP" in shown["title"]
    assert "clusters of each label pull apart over the steps" in shown["hint"]
    umap = views[20][1] / rms(views[20][1])
    np.testing.assert_allclose(
        np.reshape(shown["pos"], (-1, 2)), screen(umap, UMAP_FRAME), atol=0.3
    )
    assert not np.allclose(screen(umap, UMAP_FRAME), screen(pca, PCA_FRAME), atol=5)

    driver.execute_script(_SLIDE, 2)  # step 30: UMAP was fitted on 25 of the 40 points
    shown = driver.execute_script(_SHOWN)
    assert shown["cursor"] == "step 30"
    assert shown["fitted"] == (
        "UMAP fitted on 25 of 40 points; the others placed by their nearest fitted points"
    )
    driver.execute_script("learnscopeView.embedding.bar.trails.click()")  # trails on
    driver.execute_script("learnscopeView.findMovers()")
    assert len(driver.execute_script(_STATE)["movers"]) == 20
    driver.execute_script(_CHOOSE, "projection", "pca")  # back: the same step, trails, movers
    state, shown = driver.execute_script(_STATE), driver.execute_script(_SHOWN)
    assert state["projection"] == "pca" and state["position"] == 2 and state["pinned"] == 3
    assert shown["cursor"] == "step 30" and shown["fitted"] == "" and len(state["movers"]) == 20
    assert driver.execute_script("return learnscopeView.embedding.bar.trailsShown")
    pca = views[30][0] / rms(views[30][0])
    np.testing.assert_allclose(np.reshape(shown["pos"], (-1, 2)), screen(pca, PCA_FRAME), atol=0.3)


def wait_for_comparison(driver: Any, step: int, timeout: float = 60.0) -> dict[str, Any]:
    """The comparison's state once it shows A's snapshot of ``step`` (the tab asks its server)."""
    deadline = time.monotonic() + timeout
    while True:
        state = driver.execute_script(
            "return JSON.parse(JSON.stringify(learnscopeView.compare.state))"
        )
        if state["stepA"] == step and not state["loading"]:
            return state
        assert time.monotonic() < deadline, f"the comparison never came to step {step}: {state}"
        time.sleep(0.1)


def check_compare(driver: Any, views: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """Compare run ``run`` with ``other`` and switch the page's projection menu to UMAP: the
    comparison follows it (and the step cursor); A's drawn points are its UMAP view in spreads
    (centred on the shared points), in the comparison's UMAP frame."""
    driver.execute_script("return learnscopeView.openCompare('other', arguments[0])", KEY)
    state = "return JSON.parse(JSON.stringify(learnscopeView.compare.state))"
    assert driver.execute_script(state)["projection"] == "pca"
    shown = driver.find_element("css selector", '[data-role="compare-projection"]')
    assert shown.is_displayed() and shown.text == "projection PCA"
    assert not driver.find_elements("css selector", 'select[aria-label="compare projection"]')
    driver.execute_script("learnscopeView.compare.pin(5)")
    driver.execute_script(_CHOOSE, "projection", "umap")  # the page's one projection menu
    compared = driver.execute_script(state)
    assert compared["projection"] == compared["projectionAsked"] == "umap"
    assert compared["drawn"] == [POINTS, POINTS] and compared["pinned"] == 5
    assert driver.execute_script(_STATE)["projection"] == "umap"  # the scatter too
    for step in (30, 20):  # the cursor's step: the comparison follows the slider
        driver.execute_script(_SLIDE, STEPS.index(step))
        compared = wait_for_comparison(driver, step)
        assert (compared["stepB"], compared["projection"]) == (step, "umap")
        drawn, frame = driver.execute_script(
            "const c = learnscopeView.compare; return [Array.from(c.positions[0]), c.frame]"
        )
        umap = in_spreads(views[step][1].astype(np.float64))
        side = 400  # compare.js COMPARE_SIDE
        x0, x1, y0, y1 = frame
        scale = min(side / (x1 - x0), side / (y1 - y0))
        left, top = (side - (x1 - x0) * scale) / 2, (side - (y1 - y0) * scale) / 2
        expected = np.stack([left + (umap[:, 0] - x0) * scale, top + (y1 - umap[:, 1]) * scale], 1)
        np.testing.assert_allclose(np.reshape(drawn, (-1, 2)), expected, atol=0.01)
        assert compared["pinned"] == 5  # the pinned point stays from step to step


@pytest.mark.browser
def test_the_exported_page_switches_projection_and_compares_in_both(
    logdir: tuple[Path, dict, dict], browser: Any, tmp_path: Path
) -> None:
    root, views, _ = logdir
    page = tmp_path / "view.html"
    view_page.export_html(root, page, compare=("run", "other"))
    open_page(browser, page)
    check_switch(browser, views)

    check_compare(browser, views)


@pytest.mark.browser
@pytest.mark.slow
def test_the_tab_switches_projection_keeps_the_cursor_and_compares_in_both(
    logdir: tuple[Path, dict, dict], browser: Any
) -> None:
    from tests.kit.tb_server import tensorboard

    root, views, _ = logdir
    with tensorboard(root) as server:
        server.wait_for("/data/plugins_listing", lambda v: v.get("learnscope", {}).get("enabled"))
        enter_learnscope_tab(browser, server.base)
        try:
            wait_view_ready(browser)
            check_switch(browser, views)
            check_compare(browser, views)
        finally:
            browser.switch_to.default_content()


@pytest.mark.browser
def test_a_key_with_one_projection_offers_no_choice(browser: Any, tmp_path: Path) -> None:
    write_run(tmp_path / "logs" / "run", seed=9, without_umap=STEPS)
    page = tmp_path / "view.html"
    view_page.export_html(tmp_path / "logs", page)
    open_page(browser, page)
    shown = browser.execute_script(_SHOWN)
    assert shown["choice"] is False and shown["options"] == ["PCA"]
    assert browser.execute_script(_STATE)["projection"] == "pca"


def test_the_view_with_projections_is_plain_json(tmp_path: Path) -> None:
    """What the tab's /view route sends: JSON that reads back equal (no tuples, no arrays)."""
    write_run(tmp_path / "run", seed=10)
    view = run_view.read_view(tmp_path / "run")
    assert json.loads(json.dumps(view)) == view
