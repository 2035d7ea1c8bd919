"""Make the README's screenshots from a ``learnscope demo`` log directory.

Usage (after ``learnscope demo``, which fills ``runs/``)::

    python docs/make_screenshots.py runs --out docs

It starts ``tensorboard`` on the demo's run, opens it in headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven by selenium from the ``dev`` extra) and saves:

* ``timeseries.png``: the Time Series tab, TensorBoard's landing page,
* ``scalars.png``: the Scalars tab,
* ``projector.png``: the Projector tab with "Color by: label",
* ``images.png``: the Images tab (the aligned PCA view and the ACF-against-lag pictures),
* ``custom_scalars.png``: the Custom Scalars tab with Smoothing at 0 and "Ignore outliers in
  chart scaling" off, as docs/reading.md says to read learnscope's few-point series,
* ``text.png``: the Text tab (the findings table),
* ``learnscope_tab.png``: the learnscope tab, a point pinned and a heatmap cell selected,
* ``learnscope_umap.png``: the same, in the aligned UMAP view at the first and the last step,
  side by side (the clusters separating over training),
* ``compare.png``: the learnscope tab comparing the last two demo runs, the newest (A) beside
  the one before it (B), the step cursor moved to step 80 by the scatter's slider: the
  comparison follows it (both sides at step 80), the point that differs most pinned;
* ``compare_umap.png``: the same comparison once the page's projection menu picks UMAP and the
  cursor is back at the last step, coloured by label (with the scatter's legend).

Two runs of one seed are identical (the panel says so): run ``learnscope demo --seed 1`` and
then ``learnscope demo``, so that the newest run, which every other picture shows, is the
default one.

The run is served under the name ``demo`` from a relative path, so no temporary folder shows in
the sidebar.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first

sys.path.append(str(Path(__file__).resolve().parents[1]))

from tests.kit import tb_server  # noqa: E402
from tests.kit.browser import DEEP_TEXT, chromium  # noqa: E402

RUN = "demo"

# The first element named ``tag`` in the page, searched through shadow roots (not iframes).
_DEEP_FIND = """
const want = arguments[0];
function find(node) {
  if (node.tagName && node.tagName.toLowerCase() === want) return node;
  for (const child of [node.shadowRoot, ...(node.children || [])]) {
    if (!child) continue;
    const hit = find(child);
    if (hit) return hit;
  }
  return null;
}
return find(document.body);
"""

# Every element named ``tag`` in the page, through shadow roots (not iframes).
_DEEP_FIND_ALL = """
const want = arguments[0], out = [];
function walk(node) {
  if (node.tagName && node.tagName.toLowerCase() === want) out.push(node);
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.children || []) walk(child);
}
walk(document.body);
return out;
"""


def run_dir_of(logdir: Path) -> Path:
    """The newest ``demo/version_<n>`` run under ``logdir`` (or ``logdir`` itself if it is one).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "demo" / "version_0").mkdir(parents=True)
        >>> run_dir_of(root).name
        'version_0'
    """
    if (logdir / "projector_config.pbtxt").exists():
        return logdir
    versions = sorted((logdir / "demo").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if not versions:
        raise SystemExit(f"no demo run under {logdir}: run `learnscope demo --logdir {logdir}`")
    return versions[-1]


@contextlib.contextmanager
def tensorboard(run_dir: Path, timeout: float = 90.0) -> Iterator[str]:
    """Serve a copy of ``run_dir`` as the run ``demo`` on a free port; yield the page's address.

    A copy, not a link: the learnscope tab follows no folder link.
    """
    with tempfile.TemporaryDirectory() as serve:
        shutil.copytree(run_dir, Path(serve) / RUN)  # the sidebar shows "demo" only
        with tb_server.tensorboard(".", timeout, cwd=serve) as server:
            server.wait_for("/data/plugin/projector/runs", lambda runs: RUN in runs, timeout)
            server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) > 0, timeout)
            yield server.base


def wait_until(check: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    """Poll ``check()`` until it returns something true; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        time.sleep(0.5)
    raise TimeoutError(f"the page never showed {what}")


def deep(driver: Any, tag: str) -> Any:
    """The first element ``tag`` of the page, through shadow roots and nested iframes.

    When it is inside an iframe, the driver is left switched into that frame.
    """
    driver.switch_to.default_content()
    found = _find_in_frames(driver, tag, depth=3)
    if found is None:
        driver.switch_to.default_content()
    return found


def _find_in_frames(driver: Any, tag: str, depth: int) -> Any:
    found = driver.execute_script(_DEEP_FIND, tag)
    if found is not None or depth == 0:
        return found
    for frame in driver.execute_script(_DEEP_FIND_ALL, "iframe"):
        driver.switch_to.frame(frame)
        found = _find_in_frames(driver, tag, depth - 1)
        if found is not None:
            return found
        driver.switch_to.parent_frame()
    return None


def projector(driver: Any, base: str, out: Path | None, run: str = RUN) -> tuple[list[str], str]:
    """Open ``run`` in the Projector coloured by label; save ``projector.png`` in ``out``.

    TensorBoard opens the first snapshot of the menu; the newest (the last) is picked for the
    screenshot. With ``out=None`` nothing is picked or saved.

    Returns:
        The tensor menu's entries in the order the page lists them, and the one it opened.
    """
    driver.get(f"{base}/#projector")
    panel = wait_until(
        lambda: deep(driver, "vz-projector-data-panel"), "the Projector's data panel"
    )
    if driver.execute_script("return arguments[0].selectedRun", panel) != run:
        driver.execute_script("arguments[0].selectedRun = arguments[1]", panel, run)
    wait_until(
        lambda: driver.execute_script(
            "const p = arguments[0]; return p.selectedRun === arguments[1] && p.selectedTensor"
            " && (p.colorOptions || []).some(o => o.name === 'label')",
            panel,
            run,
        ),
        "a label column",
    )
    driver.execute_script("arguments[0].selectedColorOptionName = 'label'", panel)
    menu = driver.execute_script(
        "return Array.from(arguments[0].shadowRoot.querySelectorAll('paper-item'))"
        ".map(item => item.value).filter(v => typeof v === 'string' && v.includes('/step_'))",
        panel,
    )
    opened = driver.execute_script("return arguments[0].selectedTensor", panel)
    if out is not None:
        driver.execute_script("arguments[0].selectedTensor = arguments[1]", panel, menu[-1])
        wait_until(
            lambda: driver.execute_script(
                "const p = arguments[0]; return (p.colorOptions || []).some(o => o.name === "
                "'label') && !p.shadowRoot.querySelector('paper-spinner[active]')",
                panel,
            ),
            "the newest snapshot",
        )
        time.sleep(2)
        driver.execute_script("arguments[0].selectedColorOptionName = 'label'", panel)
        time.sleep(4)  # the points get their colours
        driver.save_screenshot(str(out / "projector.png"))
    return menu, opened


def images(driver: Any, base: str, out: Path) -> None:
    """Save the Images tab once both the PCA view and an ACF picture have loaded.

    The window is made tall enough for both categories while the picture is taken.
    """
    size = driver.get_window_size()
    driver.set_window_size(size["width"], 1500)
    driver.get(f"{base}/#images")
    wait_until(
        lambda: (
            "~learnscope/embeddings/encoder/validate/pca"
            in driver.execute_script(DEEP_TEXT, deep(driver, "tf-image-dashboard"))
        ),
        "the PCA images",
    )
    time.sleep(4)  # the images load
    driver.save_screenshot(str(out / "images.png"))
    driver.set_window_size(size["width"], size["height"])


def custom_scalars(driver: Any, base: str, out: Path) -> None:
    """Save the Custom Scalars tab with Smoothing 0 and "Ignore outliers in chart scaling" off.

    As docs/reading.md says to read learnscope's series of a few points: Smoothing 0 from the
    page address (set later, the y range would stay the smoothed line's), the outliers kept so
    that the first and last points stay on the chart.
    """
    driver.get(f"{base}/#custom_scalars&_smoothingWeight=0")
    dashboard = wait_until(
        lambda: deep(driver, "tf-custom-scalar-dashboard"), "the Custom Scalars dashboard"
    )
    driver.execute_script("arguments[0]._ignoreYOutliers = false", dashboard)
    wait_until(
        lambda: (
            "~learnscope/autocorrelation/params"
            in driver.execute_script(DEEP_TEXT, deep(driver, "tf-custom-scalar-dashboard"))
        ),
        "the autocorrelation charts",
    )
    time.sleep(6)  # the charts draw
    driver.save_screenshot(str(out / "custom_scalars.png"))


def page(driver: Any, base: str, out: Path, tab: str, element: str, shows: str) -> None:
    """Save TensorBoard's ``tab`` as ``{tab}.png`` once its ``element`` shows ``shows``."""
    driver.get(f"{base}/#{tab}")
    wait_until(
        lambda: shows in driver.execute_script(DEEP_TEXT, deep(driver, element)),
        f"{shows!r} in the {tab} tab",
    )
    time.sleep(5)  # the charts draw
    driver.switch_to.default_content()
    driver.save_screenshot(str(out / f"{tab}.png"))


# In the learnscope tab's iframe: pin a point near the middle of the scatter and select the
# heatmap cell of the last group at lag 1 for the gradients (see autocorrelation.js).
_LEARNSCOPE_SHOW = """
const v = window.learnscopeView;
if (!v || !v.state.ready || !v.state.run) return false;
if (v.current) v.pin(Math.floor(v.current.ids.length / 3));
const heat = document.querySelector('canvas[data-role="acf-grads"]');
if (heat) {
  const r = heat.getBoundingClientRect(), rows = v.view.autocorrelation[0].groups.length;
  const x = r.left + heat.clientLeft + 135, y = r.top + heat.clientTop + 22 + 24 * rows - 13;
  heat.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: x, clientY: y}));
}
return true;
"""


def learnscope_tab(driver: Any, base: str, out: Path) -> None:
    """Save the learnscope tab, a point pinned (its path) and a heatmap cell selected."""
    driver.get(f"{base}/#learnscope")

    def shown() -> bool:  # in the tab's iframe
        driver.switch_to.default_content()
        for frame in driver.execute_script(_DEEP_FIND_ALL, "iframe"):
            driver.switch_to.frame(frame)
            if driver.execute_script(_LEARNSCOPE_SHOW):
                return True
            driver.switch_to.default_content()
        return False

    wait_until(shown, "the learnscope view ready")
    time.sleep(1)
    driver.switch_to.default_content()
    driver.save_screenshot(str(out / "learnscope_tab.png"))
    umap_steps(driver, out)


# In the learnscope tab's iframe: the aligned UMAP view, the step cursor at ``arguments[0]``.
_UMAP_AT = """
const choose = document.querySelector('select[aria-label="projection"]');
if (!choose) return false;
choose.value = 'umap'; choose.dispatchEvent(new Event('change'));
const slide = document.querySelector('input[aria-label="step"]');
slide.value = arguments[0] < 0 ? slide.max : arguments[0];
slide.dispatchEvent(new Event('input'));
const scatter = document.querySelector('section canvas');
return scatter ? scatter.getBoundingClientRect().toJSON() : false;
"""


def umap_steps(driver: Any, out: Path) -> None:
    """Save ``learnscope_umap.png``: the tab's UMAP scatter at the first and the last step."""
    from PIL import Image

    shots = []
    for position in (0, -1):
        driver.switch_to.default_content()
        box = None
        for frame in driver.execute_script(_DEEP_FIND_ALL, "iframe"):
            frame_box = frame.rect
            driver.switch_to.frame(frame)
            box = driver.execute_script(_UMAP_AT, position)
            if box:
                break
            driver.switch_to.default_content()
        if not box:
            raise SystemExit("the learnscope tab offers no UMAP view: run the demo again")
        time.sleep(1)
        driver.switch_to.default_content()
        path = out / f"_umap_{position}.png"
        driver.save_screenshot(str(path))
        left, top = frame_box["x"] + box["left"], frame_box["y"] + box["top"]
        shots.append(
            Image.open(path).crop(
                (int(left), int(top) - 30, int(left + box["width"]), int(top + box["height"]))
            )
        )
        path.unlink()
    width = sum(shot.width for shot in shots) + 16
    joined = Image.new("RGB", (width, max(shot.height for shot in shots)), "white")
    joined.paste(shots[0], (0, 0))
    joined.paste(shots[1], (shots[0].width + 16, 0))
    joined.save(out / "learnscope_umap.png")


# In the learnscope tab's iframe: move the step cursor with the scatter's slider to snapshot
# ``arguments[0]`` (-1: the last), pick projection ``arguments[1]`` in the page's menu and colour
# the comparison by ``arguments[2]`` (-1: the neighbourhood overlap).
_COMPARE_MOVE = """
const [index, projection, colour] = arguments;
const choose = (label, value) => {
  const s = document.querySelector(`select[aria-label="${label}"]`);
  s.value = value; s.dispatchEvent(new Event('change'));
};
choose('projection', projection);
const slide = document.querySelector('input[aria-label="step"]');
slide.value = index < 0 ? slide.max : index;
slide.dispatchEvent(new Event('input'));
choose('compare colour by', colour);
"""

# In the learnscope tab's iframe: once the comparison shows A's snapshot of step ``arguments[0]``,
# pin the point that differs most; the top of the comparison's section, to scroll to.
_COMPARE_SHOWN = """
const p = window.learnscopeView && window.learnscopeView.compare;
if (!p || !p.state.ready || p.state.loading || p.state.stepA !== arguments[0]) return false;
if (p.data.differ.length) p.pin(p.data.differ[0].index);
return true;
"""


def compare_shot(logdir: Path, out: Path) -> None:
    """Save ``compare.png`` and ``compare_umap.png``: the newest demo run beside the one before.

    The newest (A) beside the one before it (B), following the step cursor (the scatter's
    slider, shown below the comparison in ``compare.png``) and the projection menu.
    """
    versions = sorted((logdir / "demo").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if len(versions) < 2:
        raise SystemExit(f"compare.png needs two demo runs under {logdir}: run the demo twice")
    a, b = (f"{RUN}/{v.name}" for v in versions[-1:-3:-1])
    with tempfile.TemporaryDirectory() as serve:
        for version in versions[-2:]:
            shutil.copytree(version, Path(serve) / RUN / version.name)
        with tb_server.tensorboard(".", cwd=serve) as server, chromium(1440, 1000) as driver:
            server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 2)
            driver.get(f"{server.base}/#learnscope")
            wait_until(in_view_frame(driver), "the learnscope tab")
            driver.execute_script(
                "learnscopeView.loadRun(arguments[0]).then("
                "() => learnscopeView.openCompare(arguments[1], 'encoder/validate'))",
                a,
                b,
            )
            wait_until(
                lambda: driver.execute_script(
                    "const p = window.learnscopeView.compare; return p && p.state.ready"
                ),
                "the comparison",
            )
            for name, (index, projection, colour, height) in (
                ("compare", (3, "pca", -1, 1720)),  # tall: the scatter and its slider show too
                ("compare_umap", (-1, "umap", 0, 1000)),
            ):
                driver.switch_to.default_content()
                driver.set_window_size(1440, height)
                wait_until(in_view_frame(driver), "the tab's iframe")
                driver.execute_script(_COMPARE_MOVE, index, projection, colour)
                step = driver.execute_script("return learnscopeView.compare.cursor.step")
                wait_until(
                    lambda at=step: driver.execute_script(_COMPARE_SHOWN, at),
                    f"the comparison at {step}",
                )
                time.sleep(1)
                driver.switch_to.default_content()
                driver.save_screenshot(str(out / f"{name}.png"))


def in_view_frame(driver: Any) -> Callable[[], bool]:
    """A check that switches the driver into the frame whose learnscope view is ready."""

    def check() -> bool:
        driver.switch_to.default_content()
        for frame in driver.execute_script(_DEEP_FIND_ALL, "iframe"):
            driver.switch_to.frame(frame)
            if driver.execute_script(
                "return !!(window.learnscopeView && learnscopeView.state.ready)"
            ):
                return True
            driver.switch_to.default_content()
        return False

    return check


SHOTS = (
    "time_series",
    "scalars",
    "projector",
    "images",
    "custom_scalars",
    "text",
    "learnscope",
    "compare",
)


def main(argv: list[str] | None = None) -> int:
    """Make the screenshots; print the Projector's tensor menu."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logdir", type=Path, help="the demo's log directory (runs)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where the PNGs go")
    parser.add_argument("--only", choices=SHOTS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.only != "compare":  # the one-run shots
        with tensorboard(run_dir_of(args.logdir)) as base, chromium(1440, 1000) as driver:
            if args.only in (None, "time_series"):
                page(driver, base, args.out, "timeseries", "metrics-dashboard", "val")
            if args.only in (None, "scalars"):
                page(driver, base, args.out, "scalars", "tf-scalar-dashboard", "val")
            if args.only in (None, "projector"):
                menu, opened = projector(driver, base, args.out)
                print(f"Projector: opened {opened}; tensor menu: {', '.join(menu)}; saved the last")
            if args.only in (None, "images"):
                images(driver, base, args.out)
            if args.only in (None, "custom_scalars"):
                custom_scalars(driver, base, args.out)
            if args.only in (None, "text"):
                page(driver, base, args.out, "text", "tf-text-dashboard", "findings")
            if args.only in (None, "learnscope"):
                learnscope_tab(driver, base, args.out)
    if args.only in (None, "compare"):
        compare_shot(args.logdir, args.out)
    print(f"screenshots saved in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
