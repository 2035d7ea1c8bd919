"""How fast the training-dynamics view opens and plays, in headless Chromium.

1. A run of 5,000 points x 50 snapshots (aligned PCA columns, ids, a label) written with the
   real TensorBoardWriter (the view reads the run record it keeps); the learnscope tab of a
   real ``tensorboard`` server is opened: time from navigation until the scatter is drawn (the
   first, cold request reads the record; the second is served from the plugin's kept view),
   then frames per second while playing.
2. A run whose snapshots have 100,000 points: the exported page opens with a fixed 5,000-point
   subsample (and says so); the same page with all 100,000 points (``--max-points 100000``) is
   opened too, and its frame rate measured.
3. The tab's load time for a run of 50 snapshots of 100,000 points (all drawn, the tab's
   ``MAX_POINTS``): from the iframe's start to the points drawn
   (``performance.now()`` in the iframe when the view is ready), for the front end as ES
   modules and, side by side, the previous single-module front end
   (``plugins/static/learnscope_view.js`` at ``--previous``, served as ``/index.js`` by the
   same plugin), each in its own ``tensorboard``, both running and opened in turns; the first
   open reads the record, the others are served from the plugin's kept view (median of the
   other ``--opens - 1``); then the ``/view`` response's size and time.
4. The renderers side by side (issue 24): one run of 100,000 points x 8 snapshots exported at
   5,000, 20,000 and 100,000 points; each page opened once and played with the points drawn by
   WebGL and by the 2-D canvas in turns (frames per second over ``--seconds``, without and
   then with trails), and the cost of one mouse move over the scatter (hover picking on the
   CPU) at each size.

Usage: python benchmarks/dynamics_view.py [--screenshot /tmp/shots/learnscope_tab.png]
       python benchmarks/dynamics_view.py --only-tab-load [--previous COMMIT] [--opens 7]
       python benchmarks/dynamics_view.py --only-renderers [--seconds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first

sys.path.append(str(Path(__file__).resolve().parent.parent))

from learnscope.embeddings.scatter_frame import frame_limits  # noqa: E402
from learnscope.plugins.tensorboard.writer import TensorBoardWriter  # noqa: E402
from learnscope.plugins.views import (
    run_view,  # noqa: E402
    view_page,
)
from learnscope.records import AlignedView, EmbeddingSnapshot, ViewFrame  # noqa: E402
from tests.kit.browser import chromium  # noqa: E402
from tests.kit.tb_server import TensorBoardServer, free_port, tensorboard  # noqa: E402

_FRAMES = """
const out = [];
function walk(n) { if (n.tagName === 'IFRAME') out.push(n); if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) walk(c); }
walk(document.body); return out;
"""


def write_run(run_dir: Path, points: int, snapshots: int, seed: int = 0) -> None:
    """Snapshots of ``points`` drifting points in 10 classes, with an aligned view, id, label.

    Each carries the spread and frame of its view, as ``EmbeddingProjector`` sets them, so the
    run record (which the view reads) holds what a real fit's holds.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, points)
    centres = rng.normal(size=(10, 2)) * 4
    xy = rng.normal(size=(points, 2)) * 3
    writer = TensorBoardWriter(run_dir)
    limits = None
    for s in range(snapshots):
        xy = 0.85 * xy + 0.15 * centres[labels] + rng.normal(size=(points, 2)) * 0.1
        metadata = {"label": labels.tolist(), "id": list(range(points))}
        vectors = torch.from_numpy(np.c_[xy, rng.normal(size=(points, 2))].astype(np.float32))
        spread = float(np.sqrt((xy**2).sum(1).mean()))
        limits = limits or frame_limits(xy / spread)
        aligned = AlignedView(xy.round(5), ViewFrame(spread, limits))
        snapshot = EmbeddingSnapshot("encoder", 10 * (s + 1), vectors, metadata, aligned=aligned)
        writer.write_embedding(snapshot)
    writer.close()


def wait_ready(driver: Any, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = driver.execute_script(
            "const v = window.learnscopeView;"
            "return v && v.state.ready ? JSON.parse(JSON.stringify(v.state)) : null"
        )
        if state:
            return state
        time.sleep(0.02)
    raise TimeoutError("the view never got ready")


def frames_per_second(driver: Any, seconds: float = 2.0) -> float:
    driver.execute_script("window.learnscopeView.play()")
    start = driver.execute_script("return window.learnscopeView.state.frames")
    time.sleep(seconds)
    frames = driver.execute_script("return window.learnscopeView.state.frames") - start
    driver.execute_script("window.learnscopeView.pause()")
    return frames / seconds


# Mean ms of one mouse move over the paused scatter (the point found, its tooltip, the picture
# drawn again) and of the picking alone, at a new position each time (no positions kept).
_HOVER_MS = """
const panel = window.learnscopeView.embedding, canvas = panel.canvas;
const r = canvas.getBoundingClientRect(), moves = 20;
const move = (i) => new MouseEvent('mousemove',
  {clientX: r.left + 100 + 20 * i, clientY: r.top + 240, bubbles: true});
let start = performance.now();
for (let i = 0; i < moves; i++) {
  panel.state.position = 0.5 + i / (2 * moves);
  canvas.dispatchEvent(move(i));
}
const whole = (performance.now() - start) / moves;
start = performance.now();
for (let i = 0; i < moves; i++) {
  panel.state.position = 0.25 + i / (2 * moves);
  panel.pointAt(move(i));
}
return [whole, (performance.now() - start) / moves];
"""


# The trails checkbox set to arguments[0] (as a click would).
_TRAILS = """
const box = window.learnscopeView.embedding.bar.trails;
if (box.checked !== arguments[0]) box.click();
"""


def renderer_figures(root: Path, seconds: float) -> dict[str, str]:
    """Frames per second, WebGL and 2-D canvas in turns, at 5,000, 20,000 and 100,000 points,
    without and with trails."""
    write_run(root / "renderers" / "run", 100_000, 8, seed=3)
    results = {}
    with chromium() as driver:
        for points in (5_000, 20_000, 100_000):
            page = root / f"renderers-{points}.html"
            view_page.export_html(root / "renderers", page, max_points=points)
            driver.get(page.as_uri())
            assert wait_ready(driver)["points"] == points
            row = []
            # points by WebGL with the trails by WebGL, then by the 2-D canvas (what a software
            # renderer gets), then all on the 2-D canvas
            for renderer, trails_by in (
                ("webgl", "webgl"),
                ("webgl", "canvas"),
                ("canvas", "canvas"),
            ):
                driver.execute_script(
                    "window.learnscopeView.embedding.setRenderer(arguments[0], arguments[1])",
                    renderer,
                    trails_by,
                )
                state = wait_ready(driver)
                assert state["renderer"] == renderer and state["drawnPoints"] == points, state
                assert state["trailsRenderer"] == trails_by, state
                fps = frames_per_second(driver, seconds)
                move, pick = driver.execute_script(_HOVER_MS)
                driver.execute_script(_TRAILS, True)
                trails = frames_per_second(driver, seconds)
                driver.execute_script(_TRAILS, False)
                row.append(
                    f"{renderer} {fps:.1f} fps, with trails by {trails_by} {trails:.1f} fps, "
                    f"mouse move {move:.1f} ms (pick {pick:.1f})"
                )
            results[f"playing {points:,} points x 8 snapshots"] = "; ".join(row)
    shutil.rmtree(root / "renderers", ignore_errors=True)
    return results


def open_tab(driver: Any, base: str) -> tuple[float, dict[str, Any]]:
    driver.switch_to.default_content()
    driver.get("about:blank")
    start = time.perf_counter()
    driver.get(f"{base}/#learnscope")
    while not driver.execute_script(_FRAMES):
        time.sleep(0.02)
    driver.switch_to.frame(driver.execute_script(_FRAMES)[0])
    state = wait_ready(driver)
    return time.perf_counter() - start, state


# TensorBoard whose learnscope tab serves the modules of another folder (sys.argv[1]).
_OTHER_FRONT_END = (
    "import sys; from pathlib import Path; from learnscope.plugins.views import view_modules; "
    "folder = Path(sys.argv.pop(1)); shipped = view_modules.module_sources; "
    "view_modules.module_sources = lambda f=folder: shipped(f); "
    "from tensorboard import main; sys.argv[0] = 'tensorboard'; main.run_main()"
)


@contextlib.contextmanager
def tensorboard_with_front_end(logdir: Path, folder: Path) -> Iterator[TensorBoardServer]:
    """``tensorboard --logdir logdir`` whose learnscope tab serves the modules in ``folder``."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _OTHER_FRONT_END,
            str(folder),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        server = TensorBoardServer(f"http://127.0.0.1:{port}")
        server.wait_for("/data/plugins_listing", lambda v: "learnscope" in v, timeout=90)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)


def previous_front_end(commit: str, folder: Path) -> Path:
    """The single-module front end at ``commit``, written as ``folder/index.js``."""
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(
        ["git", "show", f"{commit}:plugins/static/learnscope_view.js"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.js").write_text(text, encoding="utf-8")
    return folder


def tab_load(servers: dict[str, TensorBoardServer], opens: int) -> dict[str, dict[str, Any]]:
    """Open each server's tab ``opens`` times, taking turns: iframe start to points drawn."""
    ready: dict[str, list[float]] = {label: [] for label in servers}
    whole: dict[str, list[float]] = {label: [] for label in servers}
    for server in servers.values():
        server.wait_for("/data/plugins_listing", lambda v: v.get("learnscope", {}).get("enabled"))
    with chromium() as driver:
        for _ in range(opens):
            for label, server in servers.items():
                took, state = open_tab(driver, server.base)
                assert state["drawnPoints"] == state["points"] == run_view.MAX_POINTS, state
                ready[label].append(state["readyMs"] / 1000)
                whole[label].append(took)
    return {
        label: {
            "first": ready[label][0],
            "again": statistics.median(ready[label][1:]),
            "spread": (min(ready[label][1:]), max(ready[label][1:])),
            "page again": statistics.median(whole[label][1:]),
        }
        for label in servers
    }


def tab_load_figures(root: Path, previous: str, opens: int) -> dict[str, Any]:
    """Issue 20's figure: the tab on 50 snapshots of 100,000 points, new and previous front end,
    and the size and time of its ``/view`` response.

    Both front ends are served at once (two ``tensorboard`` processes on the same log
    directory) and opened in turns, so both see the same load of the machine.
    """
    results: dict[str, Any] = {}
    start = time.perf_counter()
    write_run(root / "tab" / "run", 100_000, 50, seed=2)
    results["write 100,000 x 50 (s)"] = round(time.perf_counter() - start, 1)
    record = root / "tab" / "run" / "learnscope_record.jsonl"
    results["run record (MB)"] = round(record.stat().st_size / 1e6, 1)
    old = previous_front_end(previous, root / "previous_front_end")
    with contextlib.ExitStack() as stack:
        servers = {
            "ES modules": stack.enter_context(tensorboard(root / "tab")),
            f"previous single module ({previous})": stack.enter_context(
                tensorboard_with_front_end(root / "tab", old)
            ),
        }
        figures = tab_load(servers, opens)  # the first open reads the record
        start = time.perf_counter()
        body = servers["ES modules"].get("/data/plugin/learnscope/view", run="run")
        results["100,000 x 50, /view response (the plugin's kept view)"] = (
            f"{time.perf_counter() - start:.2f} s, {len(body) / 1e6:.1f} MB"
        )
    shutil.rmtree(root / "tab", ignore_errors=True)  # 0.3 GB
    for label, figure in figures.items():
        low, high = figure["spread"]
        results[f"100,000 x 50, tab iframe start to points drawn, {label}"] = (
            f"first open {figure['first']:.2f} s (reads the record), again {figure['again']:.2f}"
            f" s (median of {opens - 1}: {low:.2f}-{high:.2f}), whole page again "
            f"{figure['page again']:.2f} s"
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--screenshot", help="also save a screenshot of the demo-sized tab")
    parser.add_argument("--only-tab-load", action="store_true", help="only the 100,000 x 50 tab")
    parser.add_argument("--previous", default="ea9ab0b", help="commit of the previous front end")
    parser.add_argument("--opens", type=int, default=11, help="tab opens per front end")
    parser.add_argument("--only-renderers", action="store_true", help="only WebGL against 2-D")
    parser.add_argument("--seconds", type=float, default=3.0, help="playing time per figure")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dynamics-view-"))
    results: dict[str, Any] = {}
    if args.only_tab_load or args.only_renderers:
        if args.only_renderers:
            results.update(renderer_figures(root, args.seconds))
        if args.only_tab_load:
            results.update(tab_load_figures(root, args.previous, args.opens))
        for name, value in results.items():
            print(f"| {name} | {value} |")
        return

    start = time.perf_counter()
    write_run(root / "big" / "run", 5_000, 50)
    results["write 5,000 x 50 (s)"] = round(time.perf_counter() - start, 1)
    start = time.perf_counter()
    view = run_view.read_view(root / "big" / "run")
    results["read_view 5,000 x 50, from the record (s)"] = round(time.perf_counter() - start, 2)
    results["view JSON 5,000 x 50 (MB)"] = round(len(json.dumps(view)) / 1e6, 2)

    with tensorboard(root / "big") as server, chromium() as driver:
        cold, state = open_tab(driver, server.base)
        assert state["points"] == 5_000 and len(state["steps"]) == 50, state
        warm, again = open_tab(driver, server.base)
        server.get("/data/plugin/learnscope/view", run="run")  # cached: time the route alone
        start = time.perf_counter()
        server.get("/data/plugin/learnscope/view", run="run")
        results["/view route, cached (s)"] = round(time.perf_counter() - start, 3)
        results["TensorBoard page + tab, first open (s)"] = round(cold, 2)
        results["TensorBoard page + tab, again (s)"] = round(warm, 2)
        results["tab iframe start to drawn, again (s)"] = round(again["readyMs"] / 1000, 2)
        results["playing 5,000 points (fps)"] = round(frames_per_second(driver), 1)

    write_run(root / "huge" / "run", 100_000, 3, seed=1)
    for max_points in (5_000, 100_000):  # the export command's default, and all
        page = root / f"huge-{max_points}.html"
        start = time.perf_counter()
        view_page.export_html(root / "huge", page, max_points=max_points)
        export_s = time.perf_counter() - start
        with chromium() as driver:
            start = time.perf_counter()
            driver.get(page.as_uri())
            state = wait_ready(driver)
            opened = time.perf_counter() - start
            fps = frames_per_second(driver)
        label = f"100,000-point snapshots, max_points={max_points:,}"
        results[label] = (
            f"export {export_s:.1f} s, page {page.stat().st_size / 1e6:.1f} MB, opens in "
            f"{opened:.2f} s with {state['points']:,} of {state['pointsTotal']:,} points, "
            f"{fps:.0f} fps"
        )

    results.update(renderer_figures(root, args.seconds))
    results.update(tab_load_figures(root, args.previous, args.opens))

    if args.screenshot:
        from learnscope.lightning_glue.demo import run_demo

        run_demo(root / "demo", epochs=8)
        with tensorboard(root / "demo") as server, chromium() as driver:
            open_tab(driver, server.base)
            time.sleep(0.5)
            driver.switch_to.default_content()
            Path(args.screenshot).parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(args.screenshot)
        results["screenshot"] = args.screenshot

    for name, value in results.items():
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
