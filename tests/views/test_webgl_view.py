"""The scatter's points drawn by WebGL: 100,000 points in the tab, where the CPU puts them.

The points layer is WebGL where the browser has it (headless Chromium here: SwiftShader, software
GL), else the 2-D canvas; the trails are drawn on it by WebGL, behind the points (by the 2-D
canvas on the back one, else); hover, pin rings and the pinned path are drawn on 2-D canvases
around it, the same for both. Pixels are checked against positions computed here in float64
from the view's own coordinates, not by the front end.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learnscope.plugins.palette import PALETTE
from learnscope.plugins.views import run_view, view_page
from tests.kit.browser import (
    chromium_or_skip,
    enter_learnscope_tab,
    open_page,
    play_until_moved,
    wait_view_ready,
)
from tests.kit.record_entries import ALL_CALLBACKS, categorical, run_entry, snapshot_entry, write

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FRAME = [-1.5, 1.5, -1.5, 1.5]  # in spreads: point 0 leaves it at the second snapshot
_STATE = "return JSON.parse(JSON.stringify(window.learnscopeView.state))"
_LAYER_PIXEL = """
const [layer, x, y] = arguments, r = window.devicePixelRatio || 1;
const ctx = window.learnscopeView.embedding.scatter[layer];
return Array.from(ctx.getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data);
"""


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f2").reshape(-1, 2).astype(np.float64)


def _rgb(hex_colour: str) -> list[int]:
    return [int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]


def expected_positions(embedding: dict, position: float, width: int, height: int) -> np.ndarray:
    """Canvas positions at fractional snapshot ``position``, in float64: interpolated, clamped."""
    frames = [_decode(xy) for xy in embedding["xy"]]
    i = int(np.floor(position))
    a, b = frames[i], frames[min(i + 1, len(frames) - 1)]
    x0, x1, y0, y1 = embedding["frame"]
    xy = a + (b - a) * (position - i)
    x, y = np.clip(xy[:, 0], x0, x1), np.clip(xy[:, 1], y0, y1)
    scale = min(width / (x1 - x0), height / (y1 - y0))
    left, top = (width - (x1 - x0) * scale) / 2, (height - (y1 - y0) * scale) / 2
    return np.stack([left + (x - x0) * scale, top + (y1 - y) * scale], axis=1)


@pytest.fixture(scope="module")
def small_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Eight points on a circle, one label each; they turn and point 0 leaves the frame."""
    root = tmp_path_factory.mktemp("webgl")
    angles = np.arange(8) * np.pi / 4
    circle = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    turned = np.stack([np.cos(angles + 0.4), np.sin(angles + 0.4)], axis=1)
    turned[0] = [3.0, 0.2]  # beyond the frame's right edge (in spreads, too)
    back = np.stack([np.cos(angles + 0.8), np.sin(angles + 0.8)], axis=1)
    back[0] = [0.3, -0.2]  # and back inside
    ids = [f"p{k}" for k in range(8)]
    label = categorical("label", list(range(8)))
    write(
        root / "logs" / "run",
        run_entry(*ALL_CALLBACKS),
        *[
            snapshot_entry("enc", step, xy, ids, frame=FRAME, columns=[label])
            for step, xy in ((10, circle), (20, turned), (30, back))
        ],
    )
    page = root / "view.html"
    view_page.export_html(root / "logs", page)
    return page, run_view.read_view(root / "logs" / "run")


@pytest.fixture(scope="module")
def browser_without_webgl() -> Iterator[Any]:
    yield from chromium_or_skip("--disable-webgl", "--disable-3d-apis")


def _open(
    driver: Any, small_page: tuple[Path, dict], renderer: str, trails: str = "auto"
) -> tuple[dict, int, int]:
    """Open the page with ``renderer`` drawing the points (and ``trails`` the trails); its
    embedding, the scatter's size."""
    page, view = small_page
    open_page(driver, page)
    driver.execute_script(
        "window.learnscopeView.embedding.setRenderer(arguments[0], arguments[1])", renderer, trails
    )
    assert driver.execute_script(_STATE)["renderer"] == renderer
    width, height = driver.execute_script("return [learnscopeView.width, learnscopeView.height]")
    return view["embeddings"][0], width, height


@pytest.mark.parametrize("renderer", ["webgl", "canvas"])
def test_points_land_where_the_cpu_puts_them_between_snapshots(
    small_page: tuple[Path, dict], browser: Any, renderer: str
) -> None:
    embedding, width, height = _open(browser, small_page, renderer)
    coloured = embedding["columns"][0]["coloured"]
    codes = embedding["columns"][0]["codes"]
    for position in (0.6, 1.25, 2.0):
        browser.execute_script(
            "window.learnscopeView.embedding.setPosition(arguments[0])", position
        )
        state = browser.execute_script(_STATE)
        assert state["drawnPoints"] == 8 and state["position"] == position
        expected = expected_positions(embedding, position, width, height)
        pos = np.array(browser.execute_script("return Array.from(learnscopeView.pos)"))
        np.testing.assert_allclose(pos.reshape(-1, 2), expected, atol=0.01)  # screenPositions
        for k, (x, y) in enumerate(expected):
            pixel = browser.execute_script(
                "return learnscopeView.embedding.scatter.pixel(arguments[0], arguments[1])", x, y
            )
            colour = PALETTE.categories[coloured.index(codes[k])]
            assert pixel == [*_rgb(colour), 255], (position, k)
    # Point 0 is beyond the right edge at the second snapshot: drawn on the edge, not beyond.
    x0, x1, _, _ = embedding["frame"]
    assert _decode(embedding["xy"][1])[0, 0] > x1
    edge = expected_positions(embedding, 1.0, width, height)[0, 0]
    assert edge == pytest.approx((width + min(width, height)) / 2)  # the square frame's right


@pytest.mark.parametrize("renderer", ["webgl", "canvas"])
def test_hover_names_the_point_and_the_pinned_path_draws(
    small_page: tuple[Path, dict], browser: Any, renderer: str
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    embedding, width, height = _open(browser, small_page, renderer)
    browser.execute_script("window.learnscopeView.embedding.setPosition(1.5)")
    k = 3
    x, y = expected_positions(embedding, 1.5, width, height)[k]
    canvas = browser.execute_script("return window.learnscopeView.canvas")
    rect = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", canvas)
    ActionChains(browser).move_to_element_with_offset(
        canvas, round(x - rect["width"] / 2), round(y - rect["height"] / 2)
    ).perform()
    state = browser.execute_script(_STATE)
    assert state["hovered"] == k and f"id {embedding['ids'][k]}" in state["tooltip"]
    ring = browser.execute_script(_LAYER_PIXEL, "front", x + 6, y)  # the ring's radius: 6
    assert ring[3] > 0  # the hover ring, on the overlay

    ActionChains(browser).click().perform()
    state = browser.execute_script(_STATE)
    assert state["pinned"] == k and state["pathStart"] is not None
    start = expected_positions(embedding, 0.0, width, height)[k]
    assert state["pathStart"] == pytest.approx(start.tolist(), abs=0.01)
    assert browser.execute_script(_LAYER_PIXEL, "front", *start) == [0, 0, 0, 255]  # its marker

    browser.execute_script("window.learnscopeView.pin(null)")
    assert browser.execute_script(_LAYER_PIXEL, "front", *start)[3] == 0


# The 3 x 3 pixels around CSS pixel (x, y) of the layer that draws the trails: the points' layer
# (read back from WebGL, premultiplied) or the back one (2-D, not premultiplied).
_AROUND = """
const [layer, x, y] = arguments, scatter = window.learnscopeView.embedding.scatter;
const r = window.devicePixelRatio || 1, out = [];
for (let dy = -1; dy <= 1; dy++) for (let dx = -1; dx <= 1; dx++) {
  const px = Math.round((x + dx) * r), py = Math.round((y + dy) * r);
  out.push(layer === 'points' ? scatter.pixel(x + dx, y + dy)
    : Array.from(scatter.back.getImageData(px, py, 1, 1).data));
}
return out;
"""
TRAIL_RGB, TRAIL_ALPHA = 120, 0.35  # scatter.js drawTrails's rgba(120,120,120,0.35)


def trail_midpoints(embedding: dict, position: float, width: int, height: int) -> dict:
    """Middles of the trail segments drawn at ``position``, by (point, segment), in float64.

    ``"stored"``: the segment from snapshot i - 1 to i (none at i = 0); ``"last"``: from
    snapshot i to where the point is at ``position``.
    """
    i = int(np.floor(position))
    at, now = (expected_positions(embedding, p, width, height) for p in (i, position))
    middles = {(k, "last"): (at[k] + now[k]) / 2 for k in range(len(at))}
    if i > 0:
        before = expected_positions(embedding, i - 1, width, height)
        middles.update({(k, "stored"): (before[k] + at[k]) / 2 for k in range(len(at))})
    return middles


def trail_pixel(driver: Any, layer: str, middle: np.ndarray) -> tuple[list[float], int]:
    """The most opaque of the 3 x 3 pixels around ``middle`` of ``layer``: (its RGB, its alpha).

    A 1-pixel line lies in the pixel of the segment's middle or one beside it.
    """
    pixels = driver.execute_script(_AROUND, layer, *np.floor(middle).tolist())
    r, g, b, a = max(pixels, key=lambda p: p[3])
    if layer == "points" and a:  # WebGL's canvas holds premultiplied colours
        return [255 * c / a for c in (r, g, b)], a
    return [r, g, b], a


# (position, point, segment): point 0 is clamped to the frame's edge at the second snapshot (its
# last segment at 1.5 lies on that edge, where the 2-D frame is drawn: left out).
TRAIL_CHECKS = [(0.6, k, "last") for k in (0, 2, 5)] + [
    (1.5, k, segment)
    for k in (0, 2, 5)
    for segment in ("stored", "last")
    if (k, segment) != (0, "last")
]


@pytest.mark.parametrize("renderer", ["webgl", "canvas"])
def test_trails_run_from_the_last_snapshots_to_where_the_points_are(
    small_page: tuple[Path, dict], browser: Any, renderer: str
) -> None:
    embedding, width, height = _open(browser, small_page, renderer, trails=renderer)
    assert browser.execute_script(_STATE)["trailsRenderer"] == renderer
    layer = {"webgl": "points", "canvas": "back"}[renderer]
    trails = browser.find_element("css selector", "input[type=checkbox]")
    for position in (0.6, 1.5):
        browser.execute_script(
            "window.learnscopeView.embedding.setPosition(arguments[0])", position
        )
        middles = trail_midpoints(embedding, position, width, height)
        checks = [middles[k, segment] for p, k, segment in TRAIL_CHECKS if p == position]
        assert all(trail_pixel(browser, layer, m)[1] == 0 for m in checks)  # trails off
        trails.click()
        assert browser.execute_script(_STATE)["drawnPoints"] == 8
        for middle in checks:
            rgb, alpha = trail_pixel(browser, layer, middle)
            if renderer == "webgl":  # aliased 1-pixel lines: the whole alpha
                assert alpha == pytest.approx(255 * TRAIL_ALPHA, abs=2), (position, middle)
            else:  # antialiased: a share of it
                assert 0 < alpha <= 255 * TRAIL_ALPHA + 2, (position, middle)
            assert rgb == pytest.approx([TRAIL_RGB] * 3, abs=6), (position, middle)
            if renderer == "webgl":  # drawn by WebGL, behind the points: none on the 2-D back
                assert trail_pixel(browser, "back", middle)[1] == 0
        trails.click()


_GL_RENDERER = """
const gl = document.createElement('canvas').getContext('webgl');
const info = gl && gl.getExtension('WEBGL_debug_renderer_info');
return info ? gl.getParameter(info.UNMASKED_RENDERER_WEBGL) : '';
"""


def test_trails_go_to_the_2d_canvas_where_webgl_runs_on_the_cpu(
    small_page: tuple[Path, dict], browser: Any
) -> None:
    """Software WebGL (SwiftShader here) spends more per line than the 2-D canvas: BENCHMARKS.md."""
    embedding, width, height = _open(browser, small_page, "webgl")  # trails: "auto"
    gl_name = browser.execute_script(_GL_RENDERER)
    software = any(s in gl_name for s in ("SwiftShader", "llvmpipe", "softpipe"))
    state = browser.execute_script(_STATE)
    assert state["renderer"] == "webgl"
    assert state["trailsRenderer"] == ("canvas" if software else "webgl"), gl_name
    browser.execute_script("window.learnscopeView.embedding.setPosition(1.5)")
    browser.find_element("css selector", "input[type=checkbox]").click()
    middle = trail_midpoints(embedding, 1.5, width, height)[2, "stored"]
    layer = "back" if software else "points"
    assert trail_pixel(browser, layer, middle)[1] > 0  # the trail is where it was said to be


def test_without_webgl_the_2d_canvas_draws(
    small_page: tuple[Path, dict], browser_without_webgl: Any, tmp_path: Path
) -> None:
    page, view = small_page
    driver = browser_without_webgl
    assert (
        driver.execute_script("return document.createElement('canvas').getContext('webgl')") is None
    )
    open_page(driver, page)
    state = driver.execute_script(_STATE)
    assert state["renderer"] == "canvas" and state["drawnPoints"] == state["points"] == 8
    (embedding,) = view["embeddings"]
    x, y = expected_positions(embedding, 2.0, 640, 480)[1]
    pixel = driver.execute_script(
        "return learnscopeView.embedding.scatter.pixel(arguments[0], arguments[1])", x, y
    )
    assert pixel[3] == 255
    driver.execute_script("window.learnscopeView.embedding.setRenderer('webgl')")
    assert driver.execute_script(_STATE)["renderer"] == "canvas"  # asked, but there is none
    play_until_moved(driver, frames=1)  # the 2-D canvas draws the animation


def test_the_page_address_can_ask_for_the_2d_canvas(
    small_page: tuple[Path, dict], browser: Any
) -> None:
    page, _ = small_page
    open_page(browser, page.as_uri() + "?renderer=canvas")
    assert browser.execute_script(_STATE)["renderer"] == "canvas"
    open_page(browser, page)
    assert browser.execute_script(_STATE)["renderer"] == "webgl"


@pytest.fixture(scope="module")
def big_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 100,000 points in 10 classes, 3 snapshots, written as the record describes."""
    logdir = tmp_path_factory.mktemp("big") / "logs"
    rng = np.random.default_rng(0)
    points = 100_000
    labels = rng.integers(0, 10, points)
    ids = [str(i) for i in range(points)]
    xy = rng.normal(size=(points, 2))
    label = categorical("label", labels.tolist())
    entries = [run_entry(*ALL_CALLBACKS)]
    for step in (10, 20, 30):
        xy = 0.8 * xy + 0.2 * labels[:, None] + rng.normal(size=(points, 2)) * 0.1
        entries.append(snapshot_entry("enc", step, xy, ids, columns=[label]))
    write(logdir / "run", *entries)
    return logdir


def test_the_tab_plays_100000_points_with_webgl(big_logdir: Path, browser: Any) -> None:
    from tests.kit.tb_server import tensorboard

    with tensorboard(big_logdir) as server:
        server.wait_for("/data/plugins_listing", lambda v: v.get("learnscope", {}).get("enabled"))
        enter_learnscope_tab(browser, server.base)
        try:
            wait_view_ready(browser, timeout=90)
            state = browser.execute_script(_STATE)
            assert state["renderer"] == "webgl"
            assert state["points"] == state["pointsTotal"] == state["drawnPoints"] == 100_000
            assert play_until_moved(browser, frames=3)["playing"]
            assert browser.execute_script(_STATE)["drawnPoints"] == 100_000
            browser.execute_script("learnscopeView.embedding.bar.trails.click()")  # trails on
            play_until_moved(browser, frames=2)
            after = browser.execute_script(_STATE)
            assert browser.execute_script("return learnscopeView.embedding.bar.trailsShown")
            assert after["renderer"] == "webgl" and after["drawnPoints"] == 100_000
        finally:
            browser.switch_to.default_content()
