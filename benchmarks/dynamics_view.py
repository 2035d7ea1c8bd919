"""How fast the training-dynamics view opens and plays, in headless Chromium.

1. A run of 5,000 points x 50 snapshots (aligned PCA columns, ids, a label) written with the
   real TensorBoardWriter (the view reads the run record it keeps); the learnscope tab of a
   real ``tensorboard`` server is opened: time from navigation until the scatter is drawn (the
   first, cold request reads the record; the second is served from the plugin's kept view),
   then frames per second while playing.
2. A run whose snapshots have 100,000 points: the exported page opens with a fixed 5,000-point
   subsample (and says so); the same page with all 100,000 points (``--max-points 100000``) is
   opened too, and its frame rate measured.

Usage: python benchmarks/dynamics_view.py [--screenshot /tmp/shots/learnscope_tab.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser import chromium  # noqa: E402
from tb_server import tensorboard  # noqa: E402

from learnscope.plugins import dynamics_data  # noqa: E402
from learnscope.plugins.tensorboard import TensorBoardWriter  # noqa: E402
from learnscope.records import EmbeddingSnapshot, ViewFrame  # noqa: E402
from learnscope.scatter import frame_limits  # noqa: E402

_FRAMES = """
const out = [];
function walk(n) { if (n.tagName === 'IFRAME') out.push(n); if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) walk(c); }
walk(document.body); return out;
"""


def write_run(run_dir: Path, points: int, snapshots: int, seed: int = 0) -> None:
    """Snapshots of ``points`` drifting points in 10 classes, with pca_x/pca_y/id/label.

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
        metadata = {
            "label": labels.tolist(),
            "id": list(range(points)),
            "pca_x": xy[:, 0].round(5).tolist(),
            "pca_y": xy[:, 1].round(5).tolist(),
        }
        vectors = torch.from_numpy(np.c_[xy, rng.normal(size=(points, 2))].astype(np.float32))
        spread = float(np.sqrt((xy**2).sum(1).mean()))
        limits = limits or frame_limits(xy / spread)
        frame = ViewFrame(spread, limits)
        snapshot = EmbeddingSnapshot("encoder", 10 * (s + 1), vectors, metadata, view_frame=frame)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--screenshot", help="also save a screenshot of the demo-sized tab")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dynamics-view-"))
    results: dict[str, Any] = {}

    start = time.perf_counter()
    write_run(root / "big" / "run", 5_000, 50)
    results["write 5,000 x 50 (s)"] = round(time.perf_counter() - start, 1)
    start = time.perf_counter()
    view = dynamics_data.read_view(root / "big" / "run")
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
    for max_points in (dynamics_data.MAX_POINTS, 100_000):
        page = root / f"huge-{max_points}.html"
        start = time.perf_counter()
        dynamics_data.export_html(root / "huge", page, max_points=max_points)
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
