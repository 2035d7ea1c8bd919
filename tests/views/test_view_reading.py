"""The tab read by a newcomer: axis titles on the lag-1 charts, a one-line hint per panel (what
a good and a bad value look like), a click on the heatmap or the lag-1 chart that selects that
analysis, a start marker on a pinned point's path. Headless Chromium on an exported page."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.plugins.views import run_view
from learnscope.plugins.views.view_page import export_html
from tests.kit.browser import open_page, unavailable_reason
from tests.kit.record_entries import (
    ALL_CALLBACKS,
    autocorrelation_entry,
    drifting_points,
    findings_entry,
    run_entry,
    snapshot_entry,
    write,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

STEPS = (10, 20, 30)
GROUPS = ["encoder", "head"]


def acf(step: int, kind: str) -> np.ndarray:
    """``[groups, lags 0..2]``, different at every step, kind and group."""
    base = 0.9 if kind == "params" else -0.3
    return np.array([[1.0, base - 0.01 * step - 0.1 * g, 0.5 - 0.01 * step] for g in range(2)])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("reading")
    ids = [f"p{i}" for i in range(40)]
    views = drifting_points(40, len(STEPS))
    entries = [snapshot_entry("enc", s, views[i], ids) for i, s in enumerate(STEPS)]
    for step in STEPS:
        for kind in ("params", "grads"):
            values = acf(step, kind)
            entries.append(autocorrelation_entry(step, kind, GROUPS, values, values[:, 1]))
    entries.append(findings_entry(25, ("dead-units", "encoder.0", "12 of 16 units", 25, "warning")))
    write(root / "logs" / "run", run_entry(*ALL_CALLBACKS), *entries)
    html = root / "view.html"
    assert export_html(root / "logs" / "run", html).runs == ["run"]
    return html, run_view.read_view(root / "logs" / "run")


_BOXES = """
const box = (e) => { if (!e) return null; const r = e.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height,
          text: e.textContent, line: parseFloat(getComputedStyle(e).lineHeight)}; };
const q = (s) => document.querySelector(s);
const out = {};
for (const kind of ['params', 'grads']) {
  out[kind] = {chart: box(q(`canvas[data-role="lag1-${kind}"]`)),
               x: box(q(`[data-role="axis-x-${kind}"]`)), y: box(q(`[data-role="axis-y-${kind}"]`)),
               hint: box(q(`[data-role="hint-acf-${kind}"]`))};
}
for (const panel of ['embeddings', 'autocorrelation', 'findings'])
  out[panel] = box(q(`[data-role="hint-${panel}"]`));
return out;
"""


def test_lag_one_charts_have_axis_titles_and_every_panel_a_one_line_hint(
    page: tuple[Path, dict], browser: Any
) -> None:
    open_page(browser, page[0])
    boxes = browser.execute_script(_BOXES)
    for kind in ("params", "grads"):
        chart, x, y = boxes[kind]["chart"], boxes[kind]["x"], boxes[kind]["y"]
        assert chart is not None and x is not None and y is not None, boxes[kind]
        assert x["text"] == "trainer step" and y["text"] == "lag-1 autocorrelation (median)"
        assert x["top"] >= chart["bottom"] - 1 and x["left"] < chart["right"]  # under the chart
        assert y["right"] <= chart["left"] + 1 and y["bottom"] > chart["top"]  # left of it
    hints = [boxes[k]["hint"] for k in ("params", "grads")]
    hints += [boxes[p] for p in ("embeddings", "autocorrelation", "findings")]
    for hint in hints:
        assert hint is not None and hint["height"] <= 1.5 * hint["line"], hint  # one line
        text = hint["text"].lower()
        assert "good" in text and "bad" in text, text
    assert "good from −0.3 to 0.5" in boxes["grads"]["hint"]["text"]  # a healthy gradient
    assert "good from 0.9 to 1" in boxes["params"]["hint"]["text"]


_STATE = """
const acf = document.querySelector('input[aria-label="analysis step"]');
return {position: window.learnscopeView.state.position, analysis: +acf.value,
        detail: (document.querySelector('[data-role="acf-selected"]') || {}).textContent || ''};
"""


def click_at(browser: Any, selector: str, x: float, y: float) -> None:
    """A real mouse click at ``(x, y)`` CSS pixels from the element's top-left content corner."""
    from selenium.webdriver.common.action_chains import ActionChains

    element = browser.find_element("css selector", selector)
    rect = browser.execute_script(
        "const e = arguments[0], r = e.getBoundingClientRect();"
        "return [r.width, r.height, e.clientLeft, e.clientTop];",
        element,
    )
    width, height, border_x, border_y = rect
    dx, dy = border_x + x - width / 2, border_y + y - height / 2  # from the element's centre
    ActionChains(browser).move_to_element_with_offset(
        element, round(dx), round(dy)
    ).click().perform()


def test_a_click_on_the_heatmap_or_the_lag_one_chart_selects_that_analysis(
    page: tuple[Path, dict], browser: Any
) -> None:
    html, view = page
    open_page(browser, html)
    assert browser.execute_script(_STATE)["position"] == 2  # the last snapshot, step 30
    browser.execute_script(
        "const s = document.querySelector('input[aria-label=\"step\"]');"
        "s.value = 1; s.dispatchEvent(new Event('input'));"
    )  # the snapshot of step 20: the step cursor, and the analysis with it, go to step 20
    assert browser.execute_script(_STATE)["analysis"] == 1
    browser.execute_script(
        "const s = document.querySelector('input[aria-label=\"analysis step\"]');"
        "s.value = 0; s.dispatchEvent(new Event('input'));"
    )  # the analysis of step 10: the scatter with it
    assert browser.execute_script(_STATE)["position"] == 0
    # the heatmap's cell of group "head" (row 1), lag 2 (column 1): 110 + 52 + 25, 22 + 24 + 11
    click_at(browser, 'canvas[data-role="acf-grads"]', 187, 57)
    state = browser.execute_script(_STATE)
    kinds = {k["kind"]: k for k in view["autocorrelation"]}
    value = kinds["grads"]["values"][0][1][1]
    assert value == pytest.approx(acf(10, "grads")[1, 2])
    assert state["position"] == 0 and state["analysis"] == 0, state  # the scatter at step 10
    assert state["detail"] == f"grads, head, lag 2 at step 10: {value:.2f}"

    # The lag-1 chart: a click over step 20 selects the analysis of step 20.
    left, right = 40, 340 - 14  # the chart's plot area (see autocorrelation.js)
    x = left + (20 - STEPS[0]) / (STEPS[-1] - STEPS[0]) * (right - left)
    click_at(browser, 'canvas[data-role="lag1-params"]', x + 3, 60)
    state = browser.execute_script(_STATE)
    assert state["position"] == 1 and state["analysis"] == 1, state


_PIXEL = """
const v = window.learnscopeView, ctx = v.ctx, r = window.devicePixelRatio || 1;
const [x, y] = arguments;
return Array.from(ctx.getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data);
"""


def test_a_pinned_point_s_path_has_a_start_marker(page: tuple[Path, dict], browser: Any) -> None:
    html, view = page
    open_page(browser, html)
    embedding = view["embeddings"][0]
    k = 7
    browser.execute_script(f"window.learnscopeView.pin({k})")
    start = browser.execute_script("return window.learnscopeView.state.pathStart")
    # Where the first snapshot put the point: the record's frame, one scale, centred.
    first = np.frombuffer(base64.b64decode(embedding["xy"][0]), "<f2").reshape(-1, 2)
    x, y = first[k]
    x0, x1, y0, y1 = embedding["frame"]
    width, height = browser.execute_script("return [learnscopeView.width, learnscopeView.height]")
    scale = min(width / (x1 - x0), height / (y1 - y0))
    left, top = (width - (x1 - x0) * scale) / 2, (height - (y1 - y0) * scale) / 2
    x, y = min(x1, max(x0, x)), min(y1, max(y0, y))
    assert start == pytest.approx([left + (x - x0) * scale, top + (y1 - y) * scale], abs=0.01)
    assert browser.execute_script(_PIXEL, *start) == [0, 0, 0, 255]  # the marker, drawn there
    browser.execute_script("window.learnscopeView.pin(null)")
    assert browser.execute_script("return window.learnscopeView.state.pathStart") is None
    assert browser.execute_script(_PIXEL, *start) != [0, 0, 0, 255]
