"""One step cursor for every panel, charts of one analysis, and a title on every control and
number: the learnscope tab (a real TensorBoard) and the exported page, in headless Chromium,
on the records of real fits. What the page shows is checked against the record's view.

The cursor is a trainer step. Every control that picks a step moves it (the scatter's slider,
the analysis slider, a heatmap cell, a finding's row); each panel then shows its newest snapshot
or analysis at or before it, its first when it has none that early, and says which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from learnscope.plugins.views import run_view
from learnscope.plugins.views.view_page import export_html
from tests.kit.browser import (
    chromium,
    enter_learnscope_tab,
    open_page,
    unavailable_reason,
    wait_view_ready,
)
from tests.kit.models import TinyClassifier, ZeroBranch, loaders, trainer

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

EPOCHS = 4  # 6 steps an epoch: snapshots at steps 6, 12, 18, 24
BROWSER_WINDOW = (1400, 1200)  # the browser fixture's window (its default is 900 high)


def fit(logdir: Path, name: str, model: Any, analyze_every_n_steps: int) -> Path:
    """A real fit with the three callbacks; its run directory."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper

    logger = TensorBoardLogger(str(logdir), name=name)
    callbacks = [
        EmbeddingProjector(
            metadata_fn=lambda b: {"label": b[1]}, ids_fn="dataset_index", aligned_pca=True
        ),
        ModelAutocorrelation(analyze_every_n_steps=analyze_every_n_steps, lags=(1, 2)),
        TrainingHelper(check_every_n_steps=3),
    ]
    trainer(logdir, logger, callbacks, max_epochs=EPOCHS).fit(model, *loaders())
    return Path(logger.log_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``steps``: analyses every 10 steps, between the snapshots (and a finding: the zero
    branch); ``single``: one analysis, at the fit's last step."""
    logdir = tmp_path_factory.mktemp("cursor") / "logs"
    return {
        "steps": fit(logdir, "steps", ZeroBranch(), 10),
        "single": fit(logdir, "single", TinyClassifier(), EPOCHS * 6),
    }


@pytest.fixture(scope="module")
def pages(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run exported alone, as ``learnscope export`` writes it."""
    folder = tmp_path_factory.mktemp("pages")
    for name, run in runs.items():
        assert export_html(run, folder / f"{name}.html").runs == [run.name]
    return {name: folder / f"{name}.html" for name in runs}


# What the page shows: the cursor line, each panel's label, the sliders, the lag-1 values.
_SHOWN = """
const text = (role) => { const e = document.querySelector(`[data-role="${role}"]`);
  return e ? e.textContent : null; };
const value = (label) => { const e = document.querySelector(`input[aria-label="${label}"]`);
  return e ? +e.value : null; };
const lagOne = {};
for (const box of document.querySelectorAll('[data-role^="lag1-values-"]')) {
  lagOne[box.dataset.role.slice('lag1-values-'.length)] = Object.fromEntries(
    [...box.querySelectorAll('[data-group]')].map(
      (g) => [g.dataset.group, g.querySelector('[data-role="lag1-value"]').textContent]));
}
return {cursor: text('cursor-step'), snapshot: text('snapshot-step'), spread: text('spread'),
        analysis: text('analysis-step'), position: window.learnscopeView.state.position,
        analysisIndex: value('analysis step'), lagOne,
        current: [...document.querySelectorAll('tr.ls-current')].map((r) => r.dataset.step)};
"""

_SLIDE = """
const [label, value] = arguments;
const s = document.querySelector(`input[aria-label="${label}"]`);
s.value = value; s.dispatchEvent(new Event('input'));
"""


def newest_at_or_before(steps: list[int], step: int) -> int:
    """The index the view's rule picks: the newest of ``steps`` at or before ``step``, else 0."""
    return max([i for i, s in enumerate(steps) if s <= step], default=0)


def relation(shown: int, cursor: int) -> str:
    if shown == cursor:
        return ""
    if shown < cursor:
        return f", the newest at or before step {cursor}"
    return f", the first (none at or before step {cursor})"


def shown_value(value: float | None) -> str:
    """A correlation as the page writes it: two decimals, or a dash for none."""
    return "–" if value is None else f"{value:.2f}"


def precision(value: float) -> str:
    """``value`` to 3 significant digits as JavaScript's ``toPrecision(3)`` writes it."""
    return f"{value:#.3g}".rstrip(".")


def check_shown(driver: Any, view: dict, cursor: int) -> None:
    """Every panel shows, for the cursor's step, what the view's rule picks from the record."""
    shown = driver.execute_script(_SHOWN)
    embedding = view["embeddings"][0]
    snapshots = embedding["steps"]
    analyses = sorted({s for kind in view["autocorrelation"] for s in kind["steps"]})
    i, a = newest_at_or_before(snapshots, cursor), newest_at_or_before(analyses, cursor)
    assert shown["cursor"] == f"step {cursor}", shown
    assert round(shown["position"]) == i, shown
    assert shown["snapshot"] == (
        f"snapshot of step {snapshots[i]} ({i + 1}/{len(snapshots)})"
        + relation(snapshots[i], cursor)
    ), shown
    assert shown["spread"] == f"spread {precision(embedding['spreads'][i])}", shown
    assert shown["analysisIndex"] == a, shown
    assert shown["analysis"] == f"analysis of step {analyses[a]}" + relation(analyses[a], cursor)
    for kind in view["autocorrelation"]:  # each group's lag-1 value at the analysis shown
        k = kind["steps"].index(analyses[a])
        expected = {g: shown_value(kind["rho1"][r][k]) for r, g in enumerate(kind["groups"])}
        assert shown["lagOne"][kind["kind"]] == expected, (kind["kind"], shown)
    held = [  # the findings that held at the cursor's step: found by then, not yet healthy
        str(f["step"])
        for f in view["findings"]
        if f["first_step"] <= cursor and (f["resolved_step"] is None or cursor < f["resolved_step"])
    ]
    assert shown["current"] == held, shown


def check_cursor_moves(driver: Any, view: dict) -> None:
    """Each control moves the one cursor, and every panel follows it."""
    snapshots = view["embeddings"][0]["steps"]
    analyses = sorted({s for kind in view["autocorrelation"] for s in kind["steps"]})
    assert len(analyses) >= 2 and set(analyses) - set(snapshots), (analyses, snapshots)
    newest = max(snapshots + analyses + [f["step"] for f in view["findings"]])
    check_shown(driver, view, newest)  # it opens on the run's newest step
    between = next(a for a in analyses if a not in snapshots)  # an analysis between snapshots
    driver.execute_script(_SLIDE, "analysis step", analyses.index(between))
    check_shown(driver, view, between)  # the scatter at the newest snapshot before it
    for i, step in enumerate(snapshots):  # the first is before every analysis
        driver.execute_script(_SLIDE, "step", i)
        check_shown(driver, view, step)
    finding = view["findings"][0]
    driver.execute_script(
        "[...document.querySelectorAll('tr.ls-click[title=\"show this step\"]')]"
        ".find((r) => r.dataset.step === String(arguments[0])).click()",
        finding["step"],
    )
    check_shown(driver, view, finding["step"])
    heatmap = 'canvas[data-role="acf-grads"]'  # its first cell (110 + 25, 22 + 11)
    driver.execute_script(_SLIDE, "analysis step", 0)
    driver.execute_script(
        "const c = document.querySelector(arguments[0]), r = c.getBoundingClientRect();"
        "c.dispatchEvent(new MouseEvent('click', {bubbles: true,"
        " clientX: r.left + c.clientLeft + 135, clientY: r.top + c.clientTop + 33}))",
        heatmap,
    )
    check_shown(driver, view, analyses[0])
    selected = driver.execute_script(
        "return document.querySelector('[data-role=\"acf-selected\"]').textContent"
    )
    grads = next(k for k in view["autocorrelation"] if k["kind"] == "grads")
    value = grads["values"][grads["steps"].index(analyses[0])][0][0]
    assert selected == f"grads, {grads['groups'][0]}, lag 1 at step {analyses[0]}: {value:.2f}"


def test_every_panel_of_the_export_follows_one_step_cursor(
    runs: dict[str, Path], pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["steps"])
    check_cursor_moves(browser, run_view.read_view(runs["steps"]))


def test_playing_moves_the_cursor_through_the_snapshots(
    runs: dict[str, Path], pages: dict[str, Path], browser: Any
) -> None:
    view = run_view.read_view(runs["steps"])
    open_page(browser, pages["steps"])
    browser.execute_script(_SLIDE, "step", 0)
    browser.execute_script("window.learnscopeView.play()")
    seen = set()
    for _ in range(40):
        shown = browser.execute_script(_SHOWN)
        seen.add(shown["cursor"])
        if len(seen) >= 3:
            break
        browser.execute_script("return new Promise((done) => setTimeout(done, 100))")
    browser.execute_script("window.learnscopeView.pause()")
    steps = view["embeddings"][0]["steps"]
    assert len(seen) >= 3 and seen <= {f"step {s}" for s in steps}, seen
    position = round(browser.execute_script("return window.learnscopeView.state.position"))
    check_shown(browser, view, steps[position])


# One analysis: its chart's pixels. Per series colour (the legend's swatches), how many pixels
# of exactly that colour lie in the plot, and where; the columns of the step axis's labels.
_ONE_POINT = """
const [kind] = arguments;
const canvas = document.querySelector(`canvas[data-role="lag1-${kind}"]`);
const ratio = window.devicePixelRatio || 1;
const w = canvas.width, h = canvas.height;
const data = canvas.getContext('2d').getImageData(0, 0, w, h).data;
const rgb = (css) => css.match(/\\d+/g).slice(0, 3).map(Number);
const swatches = [...document.querySelectorAll(`[data-role="lag1-values-${kind}"] [data-group]`)];
const series = swatches.map((g) => {
  const [r, gr, b] = rgb(getComputedStyle(g.querySelector('.ls-swatch')).backgroundColor);
  let count = 0, sx = 0, sy = 0;
  for (let y = 0; y < h - 22 * ratio; y++) for (let x = 0; x < w; x++) {
    const o = 4 * (y * w + x);
    if (data[o] === r && data[o + 1] === gr && data[o + 2] === b && data[o + 3] === 255) {
      count++; sx += x; sy += y;
    }
  }
  return {group: g.dataset.group, count, x: sx / count / ratio, y: sy / count / ratio};
});
const ink = [];  // the columns with text in the step axis's row, under the plot
for (let x = 0; x < w; x++) for (let y = h - 18 * ratio; y < h; y++) {
  const o = 4 * (y * w + x);
  if (data[o + 3] > 0 && data[o] < 200) { ink.push(x / ratio); break; }
}
return {width: w / ratio, series, ink};
"""


def test_a_chart_of_one_analysis_shows_a_point_and_its_value(
    runs: dict[str, Path], pages: dict[str, Path], browser: Any
) -> None:
    view = run_view.read_view(runs["single"])
    (step,) = {s for kind in view["autocorrelation"] for s in kind["steps"]}
    open_page(browser, pages["single"])
    shown = browser.execute_script(_SHOWN)
    assert shown["analysis"] == f"analysis of step {step}" and shown["cursor"] == f"step {step}"
    for kind in view["autocorrelation"]:
        values = {g: kind["rho1"][r][0] for r, g in enumerate(kind["groups"])}
        assert shown["lagOne"][kind["kind"]] == {g: f"{v:.2f}" for g, v in values.items()}
        chart = browser.execute_script(_ONE_POINT, kind["kind"])
        dots = {s["group"]: s for s in chart["series"] if s["count"] >= 12}
        distinct = {f"{v:.2f}" for v in values.values()}
        assert len(dots) >= len(distinct), chart  # a dot for each value, of its group's colour
        middle = [d["x"] for d in dots.values()]
        assert max(middle) - min(middle) < 1 and abs(middle[0] - chart["width"] / 2) < 20, chart
        by_height = sorted(dots, key=lambda g: dots[g]["y"])  # higher value, higher dot
        assert [values[g] for g in by_height] == sorted(
            (values[g] for g in by_height), reverse=True
        )
        # The step axis: one label, under the point (not "40 ... 40" at both ends).
        ink = chart["ink"]
        assert ink and min(ink) > middle[0] - 20 and max(ink) < middle[0] + 20, ink


# Every control (select, input, button) with a title, its own or its label's, and a distinct
# name; every element whose own text holds a digit explained by a title (its own or an
# ancestor's; a table cell by its column's header), but the run's messages and the hints;
# every canvas but the scatter's with a title.
_UNTITLED = """
const root = document.querySelector('.ls-root');
const scatter = window.learnscopeView.canvas.parentElement;
const titled = (e) => !!(e.title || (e.closest('label') && e.closest('label').title));
const out = {controls: [], names: [], numbers: [], canvases: []};
for (const c of root.querySelectorAll('select, input, button')) {
  const label = c.closest('label');
  const name = label ? [...label.childNodes].filter((n) => n.nodeType === 3)
    .map((n) => n.textContent).join('').trim() : (c.getAttribute('aria-label') || c.textContent);
  out.names.push(name);
  if (!titled(c)) out.controls.push(name);
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
for (const c of root.querySelectorAll('canvas')) {
  if (!scatter.contains(c) && !c.closest('[title]')) out.canvases.push(c.outerHTML.slice(0, 120));
}
return out;
"""


def check_titles(driver: Any) -> None:
    driver.execute_script("window.learnscopeView.findMovers()")  # the movers' table too
    driver.execute_script("window.learnscopeView.pin(0)")  # the pinned point's card too
    found = driver.execute_script(_UNTITLED)
    assert found["controls"] == [] and found["numbers"] == [], found
    assert found["canvases"] == [], found
    names = [n for n in found["names"] if n]
    assert len(names) == len(set(names)), " | ".join(sorted(names))  # not two called "tag"
    spread = driver.execute_script("return document.querySelector('[data-role=\"spread\"]').title")
    assert "root-mean-square distance" in spread and "units" in spread, spread


def test_every_control_and_number_of_the_export_says_what_it_is(
    pages: dict[str, Path], browser: Any
) -> None:
    open_page(browser, pages["steps"])
    check_titles(browser)


def test_the_tab_in_tensorboard_has_one_cursor_and_titles(runs: dict[str, Path]) -> None:
    from tests.kit.tb_server import tensorboard

    view = run_view.read_view(runs["steps"])
    with tensorboard(runs["steps"].parent.parent) as server:
        server.wait_for("/data/plugin/learnscope/runs", lambda r: len(r) == 2)
        with chromium(width=1400, height=1200) as driver:
            enter_learnscope_tab(driver, server.base)
            wait_view_ready(driver)
            driver.execute_script("return window.learnscopeView.loadRun('steps/version_0')")
            wait_view_ready(driver)
            assert driver.execute_script("return window.learnscopeView.state.run") == (
                "steps/version_0"
            )
            check_cursor_moves(driver, view)
            check_titles(driver)
