"""Small multiples of chosen runs: real fits in one log dir, in the tab and in the export.

Four real ``Trainer.fit`` runs into one log dir: three of ``TinyClassifier`` (seeds 1 to 3) with
an ``EmbeddingProjector`` on ``encoder`` whose validation sets overlap (ids 0-47, 8-55 and
16-63 of one set of 64 blobs: 32 shared), one of them snapshotted every second epoch only; and a
fourth with its projector on ``head`` only (no ``encoder`` key). The page's panels are checked
against the records (the shared ids) and against an independent numpy orthogonal Procrustes
(SVD) on the very coordinates the page was given (each run's view, float16 in spreads).
"""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader
from tests.kit.record_entries import categorical, run_entry, snapshot_entry, write

KEY = "encoder/validate"
HEAD = "head/validate"
RUNS = ["sweep/version_0", "sweep/version_1", "sweep/version_2"]
NO_KEY = "heads/version_0"
OFFSETS = (0, 8, 16)  # each run's validation ids: OFFSET .. OFFSET + 47 of the 64 blobs


def _fit(logdir: Path, name: str, seed: int, offset: int, module: str, **options: Any) -> None:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.data import DataLoader, TensorDataset

    from learnscope.lightning_glue import EmbeddingProjector
    from tests.kit.models import TinyClassifier, blobs, loaders, trainer

    class WithIds(TinyClassifier):
        """Its validation batches carry each sample's id (its index in the 64 blobs) third."""

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            super().validation_step(batch[:2], batch_idx)

    pl.seed_everything(seed)
    x, y = blobs(64, seed=1).tensors
    rows = torch.arange(offset, offset + 48)
    val = DataLoader(TensorDataset(x[rows], y[rows], rows), batch_size=16)
    projector = EmbeddingProjector(
        module,
        aligned_pca=True,
        metadata_fn=lambda b: {"label": b[1]},
        ids_fn=lambda b: b[2],
        **options,
    )
    logger = TensorBoardLogger(str(logdir), name=name)
    trainer(logdir, logger, [projector], max_epochs=2).fit(WithIds(), loaders()[0], val)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log dir of the four fits (see the module's description)."""
    logdir = tmp_path_factory.mktemp("multiples")
    _fit(logdir, "sweep", 1, OFFSETS[0], "encoder")
    _fit(logdir, "sweep", 2, OFFSETS[1], "encoder")
    _fit(logdir, "sweep", 3, OFFSETS[2], "encoder", every_n_epochs=2)  # step 12 only
    _fit(logdir, "heads", 4, 0, "head")
    return logdir


def _snapshots(run_dir: Path, key: str = KEY) -> list[dict[str, Any]]:
    entries = RecordReader(run_dir / RECORD_FILE).read()
    return [e for e in entries if e["kind"] == "snapshot" and e["key"] == key]


def test_the_fits_overlap_as_planned(sweep: Path) -> None:
    """The records themselves: the steps and ids each run wrote (what the page must show)."""
    steps = [[e["step"] for e in _snapshots(sweep / run)] for run in RUNS]
    assert steps == [[6, 12], [6, 12], [12]]
    for run, offset in zip(RUNS, OFFSETS, strict=True):
        for entry in _snapshots(sweep / run):
            assert sorted(map(int, entry["ids"])) == list(range(offset, offset + 48))
    assert _snapshots(sweep / NO_KEY) == [] and len(_snapshots(sweep / NO_KEY, HEAD)) == 2


def _shared_ids(sweep: Path, runs: list[str]) -> list[str]:
    """The ids every run's snapshots hold, from the records, in the first run's first order."""
    sets = [set.intersection(*(set(e["ids"]) for e in _snapshots(sweep / r))) for r in runs]
    first = _snapshots(sweep / runs[0])[0]["ids"]
    return [i for i in first if all(i in s for s in sets)]


def _half(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f2").reshape(-1, 2).astype(np.float64)


def _in_spreads(xy: np.ndarray) -> np.ndarray:
    centred = xy - xy.mean(0)
    return centred / np.sqrt((centred**2).sum(1).mean())


def _expected_panels(
    views: dict[str, dict[str, Any]], runs: list[str], shared: list[str], at: int
) -> list[dict[str, Any]]:
    """Per run: its step at cursor ``at``, and the rotation and residual of numpy's SVD."""
    aligned, out = [], []
    for run in runs:
        (embedding,) = [e for e in views[run]["embeddings"] if e["key"] == KEY]
        steps = embedding["steps"]
        step = max((s for s in steps if s <= at), default=steps[0])
        xy = _half(embedding["xy"][steps.index(step)])
        rows = [embedding["ids"].index(i) for i in shared]
        aligned.append(_in_spreads(xy[rows]))
        out.append({"run": run, "step": step})
    for panel, b in zip(out, aligned, strict=True):
        u, _, vt = np.linalg.svd(b.T @ aligned[0])  # orthogonal Procrustes: b @ R nearest a
        rotation = u @ vt
        panel["rotation"] = rotation
        panel["residual"] = np.sqrt(((b @ rotation - aligned[0]) ** 2).sum(1).mean())
    return out


def _state(driver: Any, ready: Any = None) -> dict[str, Any]:
    """The small multiples' state, once shown (and ``ready(state)`` holds, when given)."""
    deadline = time.monotonic() + 60
    script = (
        "const m = window.learnscopeView && learnscopeView.multiples; "
        "return m ? JSON.parse(JSON.stringify(m.state)) : null"
    )
    while True:
        state = driver.execute_script(script)
        if state and state["ready"] and (ready is None or ready(state)):
            return state
        assert time.monotonic() < deadline, f"the small multiples never showed: {state}"
        time.sleep(0.2)


def _check(state: dict[str, Any], expected: list[dict[str, Any]], shared: list[str]) -> None:
    assert state["key"] == KEY and state["shared"] == shared
    assert [p["run"] for p in state["panels"]] == [p["run"] for p in expected]
    for panel, want in zip(state["panels"], expected, strict=True):
        assert panel["step"] == want["step"] and panel["message"] is None
        assert panel["drawn"] == len(shared)  # exactly the shared ids, in every panel
        np.testing.assert_allclose(panel["rotation"], want["rotation"], atol=1e-9)
        assert panel["residual"] == pytest.approx(want["residual"], abs=1e-9)
    assert state["panels"][0]["rotation"] == [[1, 0], [0, 1]]  # the reference stays
    assert all(p["residual"] > 0.01 for p in state["panels"][1:])  # seeds differ: real turns
    assert state["colourBy"] == "label" and {c["name"] for c in state["legend"]} == {"0", "1", "2"}


def _move_cursor(driver: Any, step: int) -> None:
    """Move the page's step cursor, as any of its controls does."""
    driver.execute_script(f"learnscopeView.multiples.cursor.set({step})")


def _panel_texts(driver: Any, role: str) -> dict[str, str]:
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-role=multiples-panel]'), (p) => ["
        "p.getAttribute('data-run'), "
        f"(p.querySelector('[data-role={role}]') || {{}}).textContent])"
    )
    return {run: text for run, text in found}


def _check_page(driver: Any, sweep: Path, views: dict[str, dict[str, Any]]) -> None:
    """The small multiples of the page the driver is in, against the records and numpy."""
    shared = _shared_ids(sweep, RUNS)
    assert len(shared) == 32 and sorted(map(int, shared)) == list(range(16, 48))
    driver.execute_script(f"learnscopeView.openSideBySide({json.dumps(RUNS[1:])})")
    state = _state(driver, lambda s: len(s["panels"]) == 3)
    assert state["runs"] == RUNS and state["cursor"] == 12 and state["messages"] == []
    _check(state, _expected_panels(views, RUNS, shared, 12), shared)
    captions = _panel_texts(driver, "multiples-caption")
    assert captions[RUNS[0]] == f"{RUNS[0]} (reference), step 12"

    _move_cursor(driver, 6)  # every panel follows; the run without a snapshot that early says so
    state = _state(driver, lambda s: s["cursor"] == 6)
    assert [p["step"] for p in state["panels"]] == [6, 6, 12]
    _check(state, _expected_panels(views, RUNS, shared, 6), shared)
    assert state["messages"] == [
        f"run {RUNS[2]} has no snapshot of {KEY} at or before step 6: its first, step 12, is shown"
    ]
    assert _panel_texts(driver, "multiples-caption")[RUNS[2]] == (
        f"{RUNS[2]}, step 12, the first (none at or before step 6)"
    )
    assert driver.find_element("css selector", "[data-role=cursor-step]").text == "step 6"

    # a run without the key: named in its panel, the others still drawn
    driver.execute_script(f"learnscopeView.openSideBySide({json.dumps([*RUNS[1:], NO_KEY])})")
    state = _state(driver, lambda s: len(s["panels"]) == 4)
    assert state["runs"] == [*RUNS, NO_KEY]
    assert state["keys"] == [KEY, HEAD]  # the reference's keys first
    why = f"run {NO_KEY} has no snapshot of {KEY} (keys: {HEAD})"
    assert state["panels"][3]["message"] == why and why in state["messages"]
    assert _panel_texts(driver, "multiples-empty")[NO_KEY] == why
    assert [p["drawn"] for p in state["panels"]] == [32, 32, 32, 0]
    options = driver.execute_script(
        'return Array.from(document.querySelectorAll(\'select[aria-label="multiples key"] '
        "option'), (o) => o.textContent)"
    )
    assert options == [f"{KEY} (not in every run)", f"{HEAD} (not in every run)"]

    # the page's projection menu: UMAP where every run has it; none has here, said so
    driver.execute_script("learnscopeView.multiples.projection.set('umap')")
    state = _state(driver, lambda s: s["projectionAsked"] == "umap")
    assert state["projection"] == "pca" and [p["drawn"] for p in state["panels"]] == [32] * 3 + [0]
    assert (
        f"the page shows UMAP; {RUNS[0]}, {RUNS[1]} and {RUNS[2]} have no aligned UMAP view at "
        "the step shown, so the panels show PCA"
    ) in state["messages"]
    driver.execute_script("learnscopeView.multiples.projection.set('pca')")


@pytest.mark.browser
@pytest.mark.slow
def test_the_tab_shows_the_chosen_runs_on_their_shared_ids_turned_as_numpy(
    sweep: Path, browser: Any
) -> None:
    from selenium.webdriver.support.ui import Select

    from tests.kit.browser import enter_learnscope_tab, ready_view_state
    from tests.kit.tb_server import tensorboard

    with tensorboard(sweep) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 4)
        views = {r: server.json("/data/plugin/learnscope/view", run=r) for r in RUNS}
        enter_learnscope_tab(browser, server.base)
        try:
            ready_view_state(browser)
            run = browser.execute_script("return learnscopeView.state.run")
            if run != RUNS[0]:  # the newest opens first: show the reference
                menu = browser.find_element("css selector", "select[aria-label='run']")
                Select(menu).select_by_value(RUNS[0])
                deadline = time.monotonic() + 60
                while ready_view_state(browser)["run"] != RUNS[0]:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            # the header's "side by side" choice: two runs ticked
            browser.find_element("css selector", "summary[aria-label='side by side']").click()
            for run in RUNS[1:]:
                tick = f"input[aria-label='side by side {run}']"
                browser.find_element("css selector", tick).click()
            state = _state(browser, lambda s: len(s["panels"]) == 3)
            shared = _shared_ids(sweep, RUNS)
            _check(state, _expected_panels(views, RUNS, shared, 12), shared)
            _check_page(browser, sweep, views)
            _check_alignment_rule(browser)
        finally:
            browser.switch_to.default_content()


# The tab's own module, imported in its iframe: inSpreads and procrustesRotation of arguments[0]
# (B) onto arguments[1] (A), flat [x0, y0, ...] arrays (null for NaN).
_ALIGN = """
const done = arguments[arguments.length - 1];
const flat = (rows) => rows.flat().map((v) => (v === null ? NaN : v));
import('./multiples.js').then((m) => {
  const b = m.inSpreads(flat(arguments[0])), a = m.inSpreads(flat(arguments[1]));
  done({rotation: m.procrustesRotation(b, a), b: Array.from(b), a: Array.from(a)});
}, (error) => done({error: String(error)}));
"""


def _check_alignment_rule(driver: Any) -> None:
    """The page's rule on random points (turned, reflected, one row not finite) equals numpy's."""
    rng = np.random.default_rng(7)
    for reflect in (False, True):
        a = rng.normal(size=(30, 2)) * [3.0, 1.0] + [5.0, -2.0]
        angle = rng.uniform(0, 2 * np.pi)
        turn = np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
        b = (a @ turn) * (np.array([1.0, -1.0]) if reflect else 1.0) * 7.0 - 1.0
        b = b + rng.normal(size=b.shape) * 0.3
        b_rows: list[list[float | None]] = b.tolist()
        b_rows[4] = [None, 1.0]  # a non-finite point: left out of the centre, spread and turn
        answer = driver.execute_async_script(_ALIGN, b_rows, a.tolist())
        assert "error" not in answer, answer
        keep = np.arange(30) != 4
        centred = b[keep] - b[keep].mean(0)
        scaled_b = centred / np.sqrt((centred**2).sum(1).mean())
        scaled_a = _in_spreads(a)
        np.testing.assert_allclose(np.array(answer["a"]).reshape(-1, 2), scaled_a, atol=1e-12)
        page_b = np.array(answer["b"], dtype=float).reshape(-1, 2)
        assert np.isnan(page_b[4, 0])  # still not finite, and left out
        np.testing.assert_allclose(page_b[keep], scaled_b, atol=1e-12)
        u, _, vt = np.linalg.svd(scaled_b.T @ scaled_a[keep])
        np.testing.assert_allclose(answer["rotation"], u @ vt, atol=1e-12)
        assert np.linalg.det(answer["rotation"]) == pytest.approx(-1.0 if reflect else 1.0)


def _page_views(page: Path) -> dict[str, dict[str, Any]]:
    found = re.search(r'id="learnscope-data">(.*?)</script>', page.read_text("utf-8"), re.S)
    assert found is not None
    return {r["name"]: r["view"] for r in json.loads(found.group(1))["runs"]}


@pytest.mark.browser
@pytest.mark.slow
def test_the_export_shows_the_same_small_multiples_without_a_server(
    sweep: Path, browser: Any, tmp_path: Path
) -> None:
    from learnscope.lightning_glue.cli import main
    from tests.kit.browser import open_page

    page = tmp_path / "sweep.html"
    assert main(["export", str(sweep), "--html", str(page)]) == 0
    open_page(browser, page)
    if browser.execute_script("return learnscopeView.state.run") != RUNS[0]:
        browser.execute_script(f"return learnscopeView.loadRun({json.dumps(RUNS[0])})")
    _check_page(browser, sweep, _page_views(page))


def _few(logdir: Path) -> None:
    """Three runs that share 3 ids of ``enc`` (of 40 each), two without snapshots."""
    rng = np.random.default_rng(5)
    for name, own in (("a", "x"), ("b", "y"), ("c", "z")):
        ids = [f"s{i}" for i in range(3)] + [f"{own}{i}" for i in range(37)]
        columns = [categorical("label", [1] * len(ids))]
        entry = snapshot_entry("enc", 4, rng.normal(size=(len(ids), 2)), ids, columns=columns)
        write(logdir / name, run_entry("EmbeddingProjector"), entry)
    for name in ("d", "e"):  # runs without any snapshot
        write(logdir / name, run_entry("EmbeddingProjector"))


@pytest.mark.browser
@pytest.mark.slow
def test_too_few_shared_ids_are_said_plainly(browser: Any, tmp_path: Path) -> None:
    from learnscope.lightning_glue.cli import main
    from tests.kit.browser import open_page

    _few(tmp_path / "few")
    page = tmp_path / "few.html"
    assert main(["export", str(tmp_path / "few"), "--html", str(page)]) == 0
    open_page(browser, page)
    browser.execute_script("return learnscopeView.loadRun('a')")
    browser.execute_script("learnscopeView.openSideBySide(['b', 'c'])")
    state = _state(browser, lambda s: len(s["panels"]) == 3)
    message = "runs a, b and c share 3 of 40/40/40 ids of key enc: need at least 11"
    assert state["messages"] == [message] and state["shared"] == []
    assert [p["drawn"] for p in state["panels"]] == [0, 0, 0]
    shown = browser.find_element("css selector", "[data-role=multiples-message]").text
    assert shown == message

    browser.execute_script("return learnscopeView.loadRun('d')")
    browser.execute_script("learnscopeView.openSideBySide(['e'])")
    state = _state(browser, lambda s: s["runs"] == ["d", "e"])
    assert state["messages"] == ["none of runs d and e has a snapshot of an embedding"]
    assert [p["message"] for p in state["panels"]] == [
        "run d has no snapshot (keys: none)",
        "run e has no snapshot (keys: none)",
    ]
