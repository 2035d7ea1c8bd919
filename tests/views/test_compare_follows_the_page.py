"""The comparison of two runs is part of the page: it follows the one step cursor and the
projection menu, has the scatter's legend, says how to read its overlap, and draws every point
inside its frame, in the exported page and in the learnscope tab of a real TensorBoard.

Two runs written by the real ``TensorBoardWriter`` (the run record and the Projector's tensor
files), 60 points in 4 labels drifting to their clusters: A snapshots at steps 10, 20, 30, 40,
B at 10, 25, 40 (so the two sides show different steps at most cursor steps), B's snapshot
at step 25 without an aligned UMAP view, and one of A's points far out at step 40 (a frame that
holds 99.5% of the points would cut it at the edge). What the page shows is checked against
``compare_runs`` at the cursor's step and against the coordinates written.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.embeddings.neighbourhoods import NEIGHBOURS
from learnscope.embeddings.scatter_frame import frame_limits
from learnscope.plugins.views.compare_runs import RunSnapshots, compare_runs, shown_step
from learnscope.plugins.views.compare_steps import cursor_pairs, evenly_spaced, held_comparisons
from learnscope.plugins.views.view_page import export_html

KEY = "enc/validate"
POINTS = 60
LABELS = np.arange(POINTS) % 4
STEPS = {"a": (10, 20, 30, 40), "b": (10, 25, 40)}
WITHOUT_UMAP = {("b", 25)}
OUTLIER = (7, 40)  # A's point 7 at step 40: far out in its PCA view
SIDE = 400  # compare.js COMPARE_SIDE: each picture's CSS pixels
HALF = 2.5  # compare.js COMPARE_POINT: half a drawn point


def write_run(run_dir: Path, name: str) -> None:
    """The run ``name`` ("a" or "b") written by the TensorBoard writer."""
    import torch

    from learnscope.plugins.tensorboard.writer import TensorBoardWriter
    from learnscope.records import AlignedView, EmbeddingSnapshot, ViewFrame

    shared = np.random.default_rng(0)  # the same clusters in both runs
    centres, flat = shared.normal(size=(4, 12)) * 3, shared.normal(size=(4, 2)) * 3
    rng = np.random.default_rng({"a": 1, "b": 2}[name])
    x = rng.normal(size=(POINTS, 12)) * 3
    writer = TensorBoardWriter(run_dir)
    for i, step in enumerate(STEPS[name]):
        x = 0.5 * x + 0.5 * centres[LABELS] + rng.normal(size=x.shape) * 0.5
        centred = x - x.mean(0)
        pca = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
        if (name, step) == ("a", OUTLIER[1]):
            pca[OUTLIER[0]] = pca.std(0) * 25  # far out: 25 standard deviations
        umap = flat[LABELS] * (1 + i) + rng.normal(size=(POINTS, 2)) * 0.4
        views = []
        for xy, projection in ((pca, "pca"), (umap, "umap")):
            spread = float(np.sqrt(((xy - xy.mean(0)) ** 2).sum(1).mean()))
            frame = ViewFrame(spread, frame_limits((xy - xy.mean(0)) / spread))
            views.append(AlignedView(xy.astype(np.float32), frame, projection))
        snapshot = EmbeddingSnapshot(
            "enc",
            step,
            torch.from_numpy(x.astype(np.float32)),
            {"id": [f"p{k}" for k in range(POINTS)], "label": [f"class {v}" for v in LABELS]},
            stage="validate",
            aligned=views[0],
            projections=() if (name, step) in WITHOUT_UMAP else (views[1],),
        )
        writer.write_embedding(snapshot)
    writer.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("follows") / "logs"
    for name in STEPS:
        write_run(root / name, name)
    return root


def expected(logdir: Path, at: int | None) -> dict[str, Any]:
    """``compare_runs`` of A and B at cursor step ``at``, as JSON brings it back."""
    a, b = RunSnapshots(logdir / "a", "a"), RunSnapshots(logdir / "b", "b")
    return json.loads(json.dumps(compare_runs(a, b, KEY, at=at)))


def decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f4").reshape(-1, 2).astype(np.float64)


def screen(xy: np.ndarray, frame: list[float]) -> np.ndarray:
    """Canvas positions of ``xy`` in ``frame`` as the page maps them, nothing moved to the edge."""
    x0, x1, y0, y1 = frame
    scale = min(SIDE / (x1 - x0), SIDE / (y1 - y0))
    left, top = (SIDE - (x1 - x0) * scale) / 2, (SIDE - (y1 - y0) * scale) / 2
    return np.stack([left + (xy[:, 0] - x0) * scale, top + (y1 - xy[:, 1]) * scale], 1)


# ---------------------------------------------------------------------------- in Python


def test_each_side_is_at_its_newest_snapshot_at_or_before_the_cursor(logdir: Path) -> None:
    assert [shown_step([10, 25, 40], at) for at in (5, 10, 24, 25, 39, 40, 99)] == [
        10,
        10,
        10,
        25,
        25,
        40,
        40,
    ]
    for at in (None, 5, 10, 20, 25, 30, 39, 40, 41):
        result = expected(logdir, at)
        newest = {
            n: max([s for s in STEPS[n] if s <= (at or 99)], default=STEPS[n][0]) for n in "ab"
        }
        assert (result["a"]["step"], result["b"]["step"]) == (newest["a"], newest["b"]), at
        assert result["a"]["steps"] == list(STEPS["a"]) and result["b"]["steps"] == list(STEPS["b"])
        assert result["messages"] == [] and result["compared"] == POINTS
        # chance: k of the N - 1 other points, the mean overlap of unrelated neighbourhoods
        assert result["chance"] == pytest.approx(NEIGHBOURS / (POINTS - 1), abs=1e-6)
        assert result["chance"] < result["mean_overlap"] < 1
    assert cursor_pairs(list(STEPS["a"]), list(STEPS["b"])) == [
        (10, 10, 10),
        (20, 20, 10),
        (25, 20, 25),
        (30, 30, 25),
        (40, 40, 40),
    ]


def test_unrelated_embeddings_keep_the_chance_level_on_average(tmp_path: Path) -> None:
    """The chance level the page states, k / (N - 1), is what unrelated embeddings keep."""
    from learnscope.embeddings.neighbourhoods import neighbourhood_overlap

    rng = np.random.default_rng(3)
    means = [
        neighbourhood_overlap(rng.normal(size=(POINTS, 8)), rng.normal(size=(POINTS, 8))).mean()
        for _ in range(40)
    ]
    assert np.mean(means) / NEIGHBOURS == pytest.approx(NEIGHBOURS / (POINTS - 1), rel=0.1)


def test_the_frame_holds_every_point_with_room_in_both_projections(logdir: Path) -> None:
    for at in (10, 20, 25, 30, 40):
        result = expected(logdir, at)
        views = [("pca", result["xy_a"], result["xy_b"], result["frame"])]
        views += [(p["name"], p["xy_a"], p["xy_b"], p["frame"]) for p in result["projections"]]
        assert [v[0] for v in views] == (["pca"] if at in (25, 30) else ["pca", "umap"]), at
        for name, xy_a, xy_b, frame in views:
            both = np.vstack([decode(xy_a), decode(xy_b)])
            x0, x1, y0, y1 = frame
            reach = np.abs(both).max()
            assert reach * 1.1 <= min(x1, y1) and reach * 1.1 <= min(-x0, -y0), (at, name, frame)
    # the planted point: the frame of 99.5% of the points (the Images tab's rule) cuts it
    far = expected(logdir, 40)
    both = np.vstack([decode(far["xy_a"]), decode(far["xy_b"])])
    assert np.abs(both[OUTLIER[0]]).max() > frame_limits(both)[1]


def test_a_page_holds_every_pair_it_can_or_evenly_spaced_ones_and_says_so(logdir: Path) -> None:
    a, b = RunSnapshots(logdir / "a", "a"), RunSnapshots(logdir / "b", "b")
    a.refresh()
    b.refresh()
    every = held_comparisons(a, b, KEY, KEY)
    assert (every["pairs"], every["from"], every["note"]) == (5, [10, 20, 25, 30, 40], None)
    for comparison, at in zip(every["held"], every["from"], strict=True):
        assert comparison == compare_runs(a, b, KEY, at=at, refresh=False)
    size = len(json.dumps(every["held"][-1], separators=(",", ":")))
    some = held_comparisons(a, b, KEY, KEY, budget=3 * size)
    assert some["pairs"] == 5 and some["from"] == [10, 25, 40]
    assert [(c["a"]["step"], c["b"]["step"]) for c in some["held"]] == [
        (10, 10),
        (20, 25),
        (40, 40),
    ]
    assert some["note"].startswith(
        "this page holds the comparison at 3 of the 5 pairs of snapshots the step cursor can show"
    )
    assert "The learnscope tab in TensorBoard compares at every step." in some["note"]
    newest = held_comparisons(a, b, KEY, KEY, budget=1)  # always the newest
    assert [c["a"]["step"] for c in newest["held"]] == [40] and newest["from"] == [40]
    assert evenly_spaced(5, 3) == [0, 2, 4] and evenly_spaced(5, 2) == [0, 4]


def test_the_export_command_sets_how_much_the_page_holds(
    logdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from learnscope.lightning_glue.cli import build_parser, main
    from learnscope.plugins.views.compare_steps import COMPARE_PAGE_BYTES

    argv = ["export", str(logdir), "--html", str(tmp_path / "p.html"), "--compare", "a", "b"]
    assert build_parser().parse_args(argv).compare_mb * 2**20 == COMPARE_PAGE_BYTES
    held = {}
    for mb in ("16", "0"):
        assert main([*argv, "--compare-mb", mb]) == 0
        text = (tmp_path / "p.html").read_text("utf-8")
        held[mb] = json.loads(text.split('id="learnscope-data">', 1)[1].split("</script>", 1)[0])
    assert held["16"]["compare"]["keys"][KEY]["from"] == [10, 20, 25, 30, 40]
    newest = held["0"]["compare"]["keys"][KEY]  # 0: the newest step only, said
    assert newest["from"] == [40] and newest["note"].startswith(
        "this page holds the comparison at 1 of the 5 pairs"
    )
    assert newest["held"] == held["16"]["compare"]["keys"][KEY]["held"][-1:]
    capsys.readouterr()
    assert main([*argv, "--compare-mb", "-1"]) == 2
    assert "--compare-mb must be 0 or more, not -1.0" in capsys.readouterr().err


# --------------------------------------------------------------- in headless Chromium

# What the page shows of the comparison: its state, the positions drawn, the frame, the texts.
_SHOWN = """
const c = window.learnscopeView.compare, v = window.learnscopeView;
const text = (role) => { const e = document.querySelector(`[data-role="${role}"]`);
  return e ? e.textContent : null; };
const visible = (role) => { const e = document.querySelector(`[data-role="${role}"]`);
  return !!e && e.getClientRects().length > 0 && e.textContent !== ''; };
return {state: JSON.parse(JSON.stringify(c.state)), page: JSON.parse(JSON.stringify(v.state)),
        positions: c.positions ? c.positions.map((p) => Array.from(p)) : null, frame: c.frame,
        cursor: text('cursor-step'), steps: text('compare-steps'),
        projectionNote: text('compare-projection-note'), held: text('compare-held'),
        legend: text('compare-legend'), scale: text('compare-overlap-scale'),
        summary: text('compare-summary'), heldVisible: visible('compare-held'),
        scaleVisible: visible('compare-overlap-scale'), legendVisible: visible('compare-legend'),
        stepTitles: [...document.querySelectorAll('select[aria-label^="step "]')]
          .map((s) => [s.getAttribute('aria-label'), s.title, s.disabled, s.value]),
        pageLegend: JSON.parse(JSON.stringify(v.state.legend || []))};
"""

_CHOOSE = """
const [label, value] = arguments;
const s = document.querySelector(`select[aria-label="${label}"]`);
s.value = value; s.dispatchEvent(new Event('change'));
"""

_SLIDE = """
const s = document.querySelector('input[aria-label="step"]');
s.value = arguments[0]; s.dispatchEvent(new Event('input'));
"""

# The colour of the pixel at the centre of each point (CSS pixels) of picture ``side``.
_PIXELS = """
const [side, points] = arguments, c = window.learnscopeView.compare, ctx = c.contexts[side];
const ratio = window.devicePixelRatio || 1;
return points.map(([x, y]) => Array.from(
  ctx.getImageData(Math.round(x * ratio), Math.round(y * ratio), 1, 1).data).slice(0, 3));
"""

# Every control of the comparison titled, and every number in it explained by a title.
_UNTITLED = """
const root = document.querySelector('section[data-role="compare"]');
const titled = (e) => !!(e.title || (e.closest('label') && e.closest('label').title));
const out = {controls: [], numbers: []};
for (const c of root.querySelectorAll('select, input, button')) {
  if (!titled(c)) out.controls.push(c.outerHTML.slice(0, 120));
}
for (const e of root.querySelectorAll('*')) {
  if (['OPTION', 'STYLE', 'SCRIPT'].includes(e.tagName)) continue;
  if (e.closest('.ls-msg, .ls-hint, .ls-tip')) continue;
  const own = [...e.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('');
  if (!/\\d/.test(own)) continue;
  if (e.tagName === 'TD') {
    const head = e.closest('table').rows[0].cells[e.cellIndex];
    if (head && head.title) continue;
  }
  if (!e.closest('[title]')) out.numbers.push(e.outerHTML.slice(0, 160));
}
return out;
"""


def shown(driver: Any, step_a: int, timeout: float = 60.0) -> dict[str, Any]:
    """What the page shows once the comparison shows A's snapshot of ``step_a``."""
    deadline = time.monotonic() + timeout
    while True:
        now = driver.execute_script(_SHOWN)
        state = now["state"]
        if state["ready"] and not state["loading"] and state["stepA"] == step_a:
            return now
        assert time.monotonic() < deadline, f"the comparison never came to step {step_a}: {now}"
        time.sleep(0.1)


def relation(step: int, cursor: int) -> str:
    """How a side's step relates to the cursor's, as cursor.js words it."""
    if step == cursor:
        return ""
    if step < cursor:
        return f", the newest at or before step {cursor}"
    return f", the first (none at or before step {cursor})"


def steps_line(step_a: int, step_b: int, cursor: int) -> str:
    if step_a == step_b:
        line = f"A and B at step {step_a}{relation(step_a, cursor)}"
        return line + (", the step cursor's" if step_a == cursor else "")
    sides = (("A", step_a), ("B", step_b))
    return "; ".join(f"{name} at step {step}{relation(step, cursor)}" for name, step in sides)


def check_at(driver: Any, logdir: Path, cursor: int, projection: str) -> dict[str, Any]:
    """The comparison at cursor step ``cursor``: each side's step, the numbers of
    ``compare_runs`` there, the line that says which step each side shows, the projection (the
    page's, or PCA said so), and every point drawn where its coordinates say, inside the
    picture with room to spare (nothing moved onto the frame's edge)."""
    want = expected(logdir, cursor)
    step_a, step_b = want["a"]["step"], want["b"]["step"]
    now = shown(driver, step_a)
    state = now["state"]
    assert (state["stepA"], state["stepB"], state["cursor"]) == (step_a, step_b, cursor)
    assert now["cursor"] == f"step {cursor}"
    assert state["histogram"] == want["histogram"] and state["meanOverlap"] == want["mean_overlap"]
    assert now["steps"] == state["stepsLine"] == steps_line(step_a, step_b, cursor)
    views = {"pca": (want["xy_a"], want["xy_b"], want["frame"])}
    views.update({p["name"]: (p["xy_a"], p["xy_b"], p["frame"]) for p in want["projections"]})
    drawn = projection if projection in views else "pca"
    assert (state["projection"], state["projectionAsked"]) == (drawn, projection)
    if drawn != projection:
        assert now["projectionNote"] == (
            f"The page shows {projection.upper()}; not both snapshots have an aligned "
            f"{projection.upper()} view, so the comparison shows PCA."
        )
    else:
        assert now["projectionNote"] == ""
    xy_a, xy_b, frame = views[drawn]
    assert now["frame"] == frame and state["outside"] == [0, 0] and state["drawn"] == [60, 60]
    for side, xy in enumerate((xy_a, xy_b)):
        positions = np.reshape(now["positions"][side], (-1, 2))
        np.testing.assert_allclose(positions, screen(decode(xy), frame), atol=0.01)
        room = 0.05 * SIDE  # every point lies inside the picture, away from its edge
        assert positions.min() >= room and positions.max() <= SIDE - room, (cursor, side)
    return now


def check_following(driver: Any, logdir: Path) -> None:
    """Open A beside B; move the cursor (the scatter's slider, the comparison's B step menu),
    switch the page's projection, colour by label: the comparison follows each."""
    driver.execute_script("return learnscopeView.openCompare('b', arguments[0])", KEY)
    now = check_at(driver, logdir, 40, "pca")  # the page opens at its newest step
    assert now["state"]["a"] == "a" and now["state"]["b"] == "b"
    for index, step in enumerate(STEPS["a"]):  # the scatter's slider moves the cursor
        driver.execute_script(_SLIDE, index)
        check_at(driver, logdir, step, "pca")
    driver.execute_script(_CHOOSE, "step B", "25")  # B's step menu moves the page's cursor
    now = check_at(driver, logdir, 25, "pca")
    assert now["page"]["position"] == 1  # the scatter at A's snapshot of step 20
    assert [(t[0], t[2], t[3]) for t in now["stepTitles"]] == [
        ("step A", False, "20"),
        ("step B", False, "25"),
    ]

    driver.execute_script("learnscopeView.compare.pin(3)")
    driver.execute_script(_CHOOSE, "projection", "umap")  # the page's one projection menu
    check_at(driver, logdir, 25, "umap")  # B has no UMAP at step 25: PCA, said so
    for index in (3, 0):  # steps 40 and 10: both have UMAP
        driver.execute_script(_SLIDE, index)
        now = check_at(driver, logdir, STEPS["a"][index], "umap")
        assert now["state"]["pinned"] == 3  # the pinned point stays

    # coloured by label: the scatter's legend and colours
    driver.execute_script(_CHOOSE, "compare colour by", "0")
    now = driver.execute_script(_SHOWN)
    legend = now["state"]["legend"]
    assert now["state"]["colourBy"] == "label" and now["legendVisible"]
    assert [e["name"] for e in legend] == [f"class {v}" for v in range(4)]
    assert legend == now["pageLegend"]  # the same names and colours as the scatter's
    assert now["legend"] == "".join(e["name"] for e in legend)
    positions = np.reshape(now["positions"][0], (-1, 2))
    gaps = np.sqrt(((positions[:, None] - positions[None]) ** 2).sum(-1))
    np.fill_diagonal(gaps, np.inf)
    alone = [k for k in range(POINTS) if gaps[k].min() > 3 * HALF and k != 3]  # 3: ringed
    colours = driver.execute_script(_PIXELS, 0, [positions[k].tolist() for k in alone])
    rgb = {e["name"]: e["colour"] for e in legend}
    for k, pixel in zip(alone, colours, strict=True):
        hexed = rgb[f"class {LABELS[k]}"].lstrip("#")
        assert pixel == [int(hexed[i : i + 2], 16) for i in (0, 2, 4)], k
    assert len({LABELS[k] for k in alone}) == 4  # a point of each label was checked
    driver.execute_script(_SLIDE, 2)  # another step: still coloured by label
    assert check_at(driver, logdir, 30, "umap")["state"]["colourBy"] == "label"

    # how to read the overlap: good, bad, chance for k neighbours among N points, 100%, the demo
    now = driver.execute_script(_SHOWN)
    assert now["scaleVisible"]
    chance = f"Chance: 10/{POINTS - 1} = {100 * 10 / (POINTS - 1):.1f}% (10 neighbours among"
    for words in ("Good: far above chance", "Bad: near chance", chance, "100%: the same 10"):
        assert words in now["scale"], (words, now["scale"])
    assert "Two seeds of the learnscope demo (a healthy MLP on digits) keep 19%" in now["scale"]
    times = now["state"]["meanOverlap"] / now["state"]["chance"]
    assert f"({times:.1f} times chance)" in now["summary"]
    assert driver.execute_script(_UNTITLED) == {"controls": [], "numbers": []}


@pytest.mark.browser
@pytest.mark.slow
def test_the_exported_comparison_follows_the_page(
    logdir: Path, browser: Any, tmp_path: Path
) -> None:
    from tests.kit.browser import open_page

    page = tmp_path / "view.html"
    export_html(logdir, page, compare=("a", "b"))
    open_page(browser, page)
    now = shown(browser, 40)
    assert now["held"] is None and now["state"]["heldNote"] is None  # it holds every step
    assert all(not disabled for _, _, disabled, _ in now["stepTitles"])
    check_following(browser, logdir)


@pytest.mark.browser
@pytest.mark.slow
def test_the_tabs_comparison_follows_the_page(logdir: Path, browser: Any) -> None:
    from tests.kit.browser import enter_learnscope_tab, wait_view_ready
    from tests.kit.tb_server import tensorboard

    with tensorboard(logdir) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 2)
        enter_learnscope_tab(browser, server.base)
        try:
            wait_view_ready(browser)
            browser.execute_script("return learnscopeView.loadRun('a')")
            wait_view_ready(browser)
            check_following(browser, logdir)
        finally:
            browser.switch_to.default_content()


@pytest.mark.browser
@pytest.mark.slow
def test_a_page_that_holds_some_steps_says_why_and_still_moves(
    logdir: Path, browser: Any, tmp_path: Path
) -> None:
    from tests.kit.browser import open_page

    a, b = RunSnapshots(logdir / "a", "a"), RunSnapshots(logdir / "b", "b")
    size = len(json.dumps(compare_runs(a, b, KEY), separators=(",", ":")))
    page = tmp_path / "some.html"
    export_html(logdir, page, compare=("a", "b"), compare_bytes=3 * size)
    open_page(browser, page)
    now = shown(browser, 40)
    note = now["state"]["heldNote"]
    assert (
        note.startswith("this page holds the comparison at 3 of the 5 pairs") and now["heldVisible"]
    )
    assert now["held"] == f"This page: {note}"
    for label, title, disabled, _ in now["stepTitles"]:  # the menus work, and say why
        assert not disabled and note in title, label
    browser.execute_script(_SLIDE, 2)  # step 30: the page holds (20, 25), not (30, 25)
    now = shown(browser, 20)
    assert (now["state"]["stepB"], now["cursor"]) == (25, "step 30")
    assert now["steps"] == (
        "A at step 20, the newest at or before step 30; B at step 25, the newest at or before "
        "step 30: this page holds no comparison of A's step 30 with B's step 25, so it shows "
        "the newest it holds (see the note above)"
    )
    browser.execute_script(_SLIDE, 0)  # step 10: held
    assert shown(browser, 10)["steps"] == "A and B at step 10, the step cursor's"
