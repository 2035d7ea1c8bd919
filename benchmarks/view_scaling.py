"""How the views scale: big log directories, W&B pages over many snapshots, the export command.

1. A log directory of 300 runs in 1,200 folders (small files: an event file of a few scalars
   and a run record each). Two real ``tensorboard`` servers on 127.0.0.1 (``--load_fast=false``,
   TensorBoard's default ``--reload_interval 5``), one with the learnscope tab and one with
   every plugin but the learnscope tab, answer the same requests in turn (in alternating
   order): ``/data/plugins_listing`` (which asks every plugin ``is_active``) and the runs lists
   (``/data/runs``, learnscope's ``/runs``); medians over ``--requests`` rounds.
2. The W&B page after each snapshot: a record of N snapshots of 2,000 points (the page's
   points per key); one more snapshot is appended, and timed: folding the new line into the
   kept view, then ``RecordPage.log`` of an offline wandb run (the page made and handed to wandb),
   at N = 10, 100 and 500.
3. ``learnscope export --help`` and ``learnscope export`` of a 3-run log directory, as
   commands (median of 5), and the modules they loaded.

Usage: python benchmarks/view_scaling.py [--requests 40] [--old-code DIR]

``--old-code DIR`` also measures parts 1 and 2 with another copy of the package on
``PYTHONPATH`` (a folder holding ``learnscope/`` with ``plugins/`` and ``lightning_glue/``
inside), for a before/after comparison; for part 2 that copy's page is made from a TensorBoard
run of N snapshots written with its ``TensorBoardWriter`` (its page needed one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
sys.path.append(str(HERE.parent))

from learnscope.run_directory.file_names import RECORD_FILE  # noqa: E402
from learnscope.run_directory.record import append_entries  # noqa: E402
from tests.kit.record_entries import (  # noqa: E402
    ALL_CALLBACKS,
    categorical,
    drifting_points,
    run_entry,
    snapshot_entry,
    write,
)
from tests.kit.tb_server import tensorboard  # noqa: E402


def big_logdir(root: Path, runs: int = 300) -> int:
    """``runs`` runs, four folders each (experiment, version, checkpoints, projector)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    for i in range(runs):
        run_dir = root / f"exp_{i:03d}" / "version_0"
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "projector").mkdir()
        writer = EventFileWriter(str(run_dir), filename_suffix=".learnscope")  # as learnscope's
        for step in range(3):
            value = summary_pb2.Summary.Value(tag="train/loss", simple_value=1.0 / (step + 1))
            writer.add_event(
                event_pb2.Event(
                    step=step, wall_time=time.time(), summary=summary_pb2.Summary(value=[value])
                )
            )
        writer.close()
        xy = np.random.default_rng(i).normal(size=(8, 2))
        write(
            run_dir,
            run_entry(*ALL_CALLBACKS, time=1_000.0 + i),
            snapshot_entry("enc", 1, xy, [str(k) for k in range(8)]),
        )
    return sum(1 for p in root.rglob("*") if p.is_dir())


def _get(base: str, path: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(base + path, timeout=60) as response:
        response.read()
    return time.perf_counter() - start


def serve_times(logdir: Path, requests: int, old_code: str | None) -> dict[str, Any]:
    """Median seconds of each route on TensorBoard with and without the learnscope tab."""
    args = ("--load_fast=false", "--reload_interval", "5")
    environ = dict(os.environ)
    if old_code:
        os.environ["PYTHONPATH"] = old_code
    cwd = logdir.parent  # not the repository: ``python -m`` puts the working directory first
    try:
        with (
            tensorboard(logdir, args=args, cwd=cwd) as tab,
            tensorboard(logdir, args=args, cwd=cwd, learnscope=False) as plain,
        ):
            plain.wait_for("/data/runs", lambda r: len(r) == 300, timeout=300)
            tab.wait_for("/data/runs", lambda r: len(r) == 300, timeout=300)
            tab.wait_for("/data/plugins_listing", lambda v: v["learnscope"]["enabled"], timeout=300)
            times: dict[str, list[float]] = {k: [] for k in ("with", "without", "runs", "tab_runs")}
            for i in range(requests):  # in turn, so that both see the same load
                calls = [
                    ("with", tab, "/data/plugins_listing"),
                    ("without", plain, "/data/plugins_listing"),
                    ("runs", plain, "/data/runs"),
                    ("tab_runs", tab, "/data/plugin/learnscope/runs"),
                ]
                for name, server, path in calls if i % 2 else reversed(calls):
                    times[name].append(_get(server.base, path))
    finally:
        os.environ.clear()
        os.environ.update(environ)
    return {k: statistics.median(v) for k, v in times.items()}


def wandb_page_times(
    root: Path, sizes: tuple[int, ...] = (10, 100, 500)
) -> dict[int, tuple[float, float, float]]:
    """Seconds to fold a new snapshot and of the ``RecordPage.log`` after it; page MB; per size."""
    import wandb

    from learnscope.plugins.wandb.page_writer import RecordPage, wandb_view_html

    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    points = 2_000
    ids = [str(i) for i in range(points)]
    labels = categorical("label", [i % 10 for i in range(points)])
    views = drifting_points(points, 2)
    out = {}
    for size in sizes:
        run = wandb.init(project="view-scaling", dir=str(root))
        record_dir = Path(run.dir)
        entries = [
            snapshot_entry("enc", s, views[s % 2] * (1 + s / size), ids, columns=[labels])
            for s in range(size)
        ]
        write(record_dir, run_entry(*ALL_CALLBACKS), *entries)
        view_page = RecordPage(record_dir)  # as the W&B writer keeps it
        view_page.log(run, size - 1, "trainer/global_step")  # the view as it stands
        fold, page = [], []
        for extra in range(3):
            step = size + extra
            new = snapshot_entry("enc", step, views[step % 2], ids, columns=[labels])
            append_entries(record_dir / RECORD_FILE, [new])
            start = time.perf_counter()
            view_page.run_view.view()
            fold.append(time.perf_counter() - start)
            start = time.perf_counter()
            view_page.log(run, step, "trainer/global_step")
            page.append(time.perf_counter() - start)
        megabytes = len(wandb_view_html(record_dir).encode("utf-8")) / 1e6
        run.finish()
        out[size] = (statistics.median(fold), statistics.median(page), megabytes)
    return out


_OLD_WANDB_PAGE = """
import statistics, sys, time
from pathlib import Path
import numpy as np, torch
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.plugins.wandb.page_writer import wandb_view_html
from learnscope.records import EmbeddingSnapshot
run_dir, size = Path(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
writer = TensorBoardWriter(run_dir)
for s in range(size + 3):
    xy = rng.normal(size=(2000, 2))
    metadata = {"label": [i % 10 for i in range(2000)], "id": list(range(2000)),
                "pca_x": xy[:, 0].tolist(), "pca_y": xy[:, 1].tolist()}
    writer.write_embedding(EmbeddingSnapshot("enc", s, torch.from_numpy(xy).float(), metadata))
    if s >= size:  # time the page after each of the last three snapshots
        start = time.perf_counter()
        wandb_view_html(run_dir)
        print(time.perf_counter() - start)
"""


def old_wandb_page_times(root: Path, old_code: str, sizes: tuple[int, ...]) -> dict[int, float]:
    """Seconds of the old page (read again from the TensorBoard run) after a new snapshot."""
    out = {}
    for size in sizes:
        result = subprocess.run(
            [sys.executable, "-c", _OLD_WANDB_PAGE, str(root / f"old-{size}"), str(size)],
            check=True,
            capture_output=True,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": old_code},
        )
        out[size] = statistics.median(float(t) for t in result.stdout.split())
    return out


def command_times(root: Path) -> dict[str, str]:
    script = shutil.which("learnscope") or "learnscope"
    logdir = root / "export"
    for i in range(3):
        xy = drifting_points(500, 20, seed=i)
        write(
            logdir / f"run_{i}",
            run_entry(*ALL_CALLBACKS),
            *[snapshot_entry("enc", s, v, [str(k) for k in range(500)]) for s, v in enumerate(xy)],
        )
    out = {}
    for name, args in (
        ("learnscope export --help", ["export", "--help"]),
        (
            "learnscope export (3 runs x 20 snapshots x 500 points)",
            ["export", str(logdir), "--html", str(root / "v.html")],
        ),
    ):
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([script, *args], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
        out[name] = f"{statistics.median(times):.2f} s"
    code = (
        "import sys; from learnscope.lightning_glue.cli import main; "
        f"main(['export', {str(logdir)!r}, '--html', {str(root / 'w.html')!r}]); "
        "print(sorted(m for m in ('torch', 'lightning', 'tensorboard', 'wandb') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    )
    out["heavy modules loaded by the export"] = loaded.stdout.strip().splitlines()[-1]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=40, help="rounds of requests (40)")
    parser.add_argument("--old-code", help="PYTHONPATH of another copy of the package")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="view-scaling-"))
    folders = big_logdir(root / "logs")
    print(f"log directory: 300 runs, {folders:,} folders")
    codes = [("this code", None)] + ([("old code", args.old_code)] if args.old_code else [])
    for label, code in codes:
        times = serve_times(root / "logs", args.requests, code)
        print(
            f"| {label}: /data/plugins_listing with / without the tab | "
            f"{times['with'] * 1e3:.1f} ms / {times['without'] * 1e3:.1f} ms "
            f"({times['with'] / times['without']:.2f}x) |"
        )
        print(
            f"| {label}: learnscope /runs / TensorBoard /data/runs | "
            f"{times['tab_runs'] * 1e3:.1f} ms / {times['runs'] * 1e3:.1f} ms "
            f"({times['tab_runs'] / times['runs']:.2f}x) |"
        )
    for size, (fold, page, megabytes) in wandb_page_times(root / "wandb").items():
        print(
            f"| W&B, record of {size} snapshots: new snapshot folded / log_view | "
            f"{fold * 1e3:.1f} ms / {page * 1e3:.0f} ms ({megabytes:.1f} MB page) |"
        )
    if args.old_code:
        for size, seconds in old_wandb_page_times(root, args.old_code, (10, 100, 500)).items():
            print(
                f"| old code: W&B page after a new snapshot, {size} snapshots (re-read) | "
                f"{seconds:.2f} s |"
            )
    for name, value in command_times(root).items():
        print(f"| {name} | {value} |")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
