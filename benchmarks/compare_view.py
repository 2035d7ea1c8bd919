"""How fast two runs are compared side by side, in the tab, the export and numpy (issue 24).

1. The neighbourhood overlap alone (``learnscope.embeddings.neighbourhoods.neighbourhood_overlap``:
   each point's 10 nearest neighbours in A and in B, exact, in blocks of at most 32 MB of distances)
   at 1,000, 10,000 and 20,000 shared points x 128 dims (10 Gaussian clusters, B a noisy copy of A).
2. Two runs of 50 snapshots of ``--points`` points x 128 dims, written with the real
   ``TensorBoardWriter`` (run record and Projector tensors): the ``/compare`` route of a real
   ``tensorboard`` (first: the plugin reads both records, both newest tensors and computes; again:
   its kept answer), the learnscope tab opened and the comparison picked (time from the pick to
   the panel drawn, and the whole page from navigation), the step cursor moved to another
   snapshot (time to the comparison there drawn: one request to the route), and ``learnscope
   export --compare`` (time to write, the page's size, and from navigation to the panel drawn),
   the page holding the comparison at every step the cursor can show (as it does) beside one
   holding the newest only (``compare_bytes=1``, the work an export did before it followed the
   cursor), side by side.

Usage: python benchmarks/compare_view.py [--points 5000] [--skip-20000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
sys.path.append(str(Path(__file__).resolve().parent.parent))

from dynamics_view import open_tab  # noqa: E402

from learnscope.embeddings.neighbourhoods import neighbourhood_overlap  # noqa: E402
from learnscope.embeddings.scatter_frame import frame_limits  # noqa: E402
from learnscope.lightning_glue.cli import main as learnscope  # noqa: E402
from learnscope.plugins.tensorboard.writer import TensorBoardWriter  # noqa: E402
from learnscope.plugins.views.view_page import export_html  # noqa: E402
from learnscope.records import AlignedView, EmbeddingSnapshot, ViewFrame  # noqa: E402
from tests.kit.browser import chromium  # noqa: E402
from tests.kit.tb_server import tensorboard  # noqa: E402

DIM = 128
SNAPSHOTS = 50
KEY = "encoder/validate"

# Pick run B in the tab's "compare with" and wait until the panel is drawn; ms from the pick.
_PICK = """
const done = arguments[arguments.length - 1];
const v = window.learnscopeView, start = performance.now();
v.openCompare(arguments[0], arguments[1]).then(
  (p) => done({ms: performance.now() - start, state: JSON.parse(JSON.stringify(p.state))}));
"""


# Move the step cursor (the scatter's slider) to the middle snapshot; ms until the comparison
# there is drawn.
_MOVE = """
const done = arguments[arguments.length - 1];
const v = window.learnscopeView, slider = document.querySelector('input[aria-label="step"]');
const index = Math.floor(v.state.steps.length / 2), step = v.state.steps[index];
const start = performance.now();
slider.value = index; slider.dispatchEvent(new Event('input'));
const wait = () => (v.compare.state.stepA === step && !v.compare.state.loading
  ? done(performance.now() - start) : setTimeout(wait, 5));
wait();
"""


def clustered(points: int, seed: int, noise: float = 0.0, base: np.ndarray | None = None) -> Any:
    """``points`` x 128 vectors in 10 clusters (or ``base`` with Gaussian ``noise`` added)."""
    rng = np.random.default_rng(seed)
    if base is None:
        centres = rng.normal(size=(10, DIM)) * 3
        base = centres[rng.integers(0, 10, points)] + rng.normal(size=(points, DIM))
    return (base + rng.normal(size=base.shape) * noise).astype(np.float32)


def overlap_figures(sizes: list[int]) -> dict[int, tuple[float, float]]:
    """Seconds of ``neighbourhood_overlap`` and the mean overlap, per number of points."""
    out = {}
    for points in sizes:
        a = clustered(points, 0)
        b = clustered(points, 1, noise=0.5, base=a)
        start = time.perf_counter()
        overlap = neighbourhood_overlap(a, b, 10)
        out[points] = (time.perf_counter() - start, float(overlap.mean()) / 10)
        print(f"overlap, {points:,} points x {DIM}: {out[points][0]:.2f} s", flush=True)
    return out


def write_run(run_dir: Path, points: int, seed: int) -> None:
    """50 snapshots of ``points`` x 128 vectors drifting to the same 10 clusters in every run
    (from a start and with noise of the run's ``seed``), with ids, a label and aligned PCA."""
    shared = np.random.default_rng(0)  # the same data in both runs: labels, clusters
    labels = shared.integers(0, 10, points)
    centres = shared.normal(size=(10, DIM)) * 3
    rng = np.random.default_rng(seed)  # the run's own start and noise
    x = rng.normal(size=(points, DIM)) * 3
    writer = TensorBoardWriter(run_dir)
    limits = None
    for s in range(SNAPSHOTS):
        x = 0.9 * x + 0.1 * centres[labels] + rng.normal(size=(points, DIM)) * 0.1
        xy = (x - x.mean(0)) @ np.linalg.svd(x - x.mean(0), full_matrices=False)[2][:2].T
        spread = float(np.sqrt((xy**2).sum(1).mean()))
        limits = limits or frame_limits(xy / spread)
        metadata = {"label": labels.tolist(), "id": list(range(points))}
        vectors = torch.from_numpy(x.astype(np.float32))
        snapshot = EmbeddingSnapshot(
            "encoder",
            10 * (s + 1),
            vectors,
            metadata,
            stage="validate",
            aligned=AlignedView(xy, ViewFrame(spread, limits)),
        )
        writer.write_embedding(snapshot)
    writer.close()


def tab_figures(root: Path) -> dict[str, Any]:
    """The route's times, and the tab's: the page opened, B picked, the panel drawn."""
    out: dict[str, Any] = {}
    with tensorboard(root) as server, chromium(1440, 1000) as driver:
        server.wait_for("/data/plugin/learnscope/runs", lambda runs: len(runs) == 2)
        for when in ("first", "again"):
            start = time.perf_counter()
            body = server.get("/data/plugin/learnscope/compare", a="b", b="a", key=KEY)
            out[f"route {when}"] = time.perf_counter() - start
        out["route bytes"] = len(body)
        opened, _ = open_tab(driver, server.base)
        driver.set_script_timeout(120)
        picked = driver.execute_async_script(_PICK, "a", KEY)
        out["tab open"] = opened
        out["tab pick to drawn"] = picked["ms"] / 1000
        out["mean overlap"] = picked["state"]["meanOverlap"]
        out["tab cursor moved to drawn (first request)"] = driver.execute_async_script(_MOVE) / 1000
        driver.switch_to.default_content()
    return out


def export_figures(root: Path) -> dict[str, Any]:
    """``learnscope export --compare``: time to write, size, navigation to the panel drawn."""
    page = root.parent / "compare.html"
    start = time.perf_counter()
    assert learnscope(["export", str(root), "--html", str(page), "--compare", "a", "b"]) == 0
    out: dict[str, Any] = {"export write": time.perf_counter() - start}
    out["export bytes"] = page.stat().st_size
    with chromium(1440, 1000) as driver:
        start = time.perf_counter()
        driver.get(page.as_uri())
        ready = (
            "const p = window.learnscopeView && learnscopeView.compare; return p && p.state.ready"
        )
        while not driver.execute_script(ready):
            time.sleep(0.01)
        out["export page open"] = time.perf_counter() - start
    newest = root.parent / "newest.html"
    start = time.perf_counter()
    export_html(root, newest, compare=("a", "b"), compare_bytes=1)
    out["export write, the newest step only"] = time.perf_counter() - start
    out["export bytes, the newest step only"] = newest.stat().st_size
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=5_000, help="points per snapshot")
    parser.add_argument("--skip-20000", action="store_true", help="no 20,000-point overlap")
    args = parser.parse_args()
    sizes = [1_000, 10_000] + ([] if args.skip_20000 else [20_000])
    overlaps = overlap_figures(sizes)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "logs"
        start = time.perf_counter()
        for name, seed in (("a", 0), ("b", 1)):
            write_run(root / name, args.points, seed)
        print(
            f"two runs of {SNAPSHOTS} x {args.points:,} points written in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
        figures = {**tab_figures(root), **export_figures(root)}
    print(f"\n| measurement ({args.points:,} points x {DIM}, {SNAPSHOTS} snapshots) | figure |")
    print("|---|---:|")
    for points, (seconds, mean) in overlaps.items():
        print(f"| overlap, {points:,} shared points x {DIM} (mean {mean:.2f}) | {seconds:.2f} s |")
    for name, value in figures.items():
        shown = f"{value / 1e6:.2f} MB" if name.endswith("bytes") else f"{value:.3f}"
        print(f"| {name} | {shown} |")


if __name__ == "__main__":
    main()
