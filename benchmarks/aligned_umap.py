"""Aligned UMAP, measured: its cost, the quality of its views, and what it adds to a fit.

1. **Cost** of :func:`learnscope.embeddings.aligned_umap.aligned_umap` with the default settings (at
   most 5,000 points fitted, the rest placed), through ``AlignedViews.umap_view`` as the writers'
   thread calls it, side by side with the aligned PCA (``AlignedViews.pca_view``) on the same data:
   10 Gaussian clusters in 64 dimensions that drift over 3 snapshots (the same ids), then the
   last snapshot again (identical). Seconds per snapshot, and the peak memory of the process
   (``ru_maxrss``) above a baseline taken after the imports and the data. Every size and
   method runs in a process of its own, ``--repeats`` times (medians shown). Numba's compile:
   a process with ``NUMBA_CACHE_DIR`` pointing at an empty folder (cold) against one with the
   cache on disk (warm), for the import of the UMAP module and a first tiny view.
2. **Quality**, for the demo (an MLP on the digits, 3-dim embedding) and a small CNN on the
   digits images (1 x 8 x 8, 64-dim embedding), each trained with Lightning's ``Trainer.fit``,
   ``EmbeddingProjector(aligned_umap=True)`` and the TensorBoard logger (which writes the full
   embedding of each snapshot): per snapshot and projection (PCA, UMAP), scikit-learn's
   ``trustworthiness`` (10 neighbours) of the 2-D view against the full embedding, the labels'
   silhouette score in 2-D, the share of points outside the picture's frame, and the mean
   displacement of the same points since the previous snapshot, in display units (coordinates
   over the spread; also for each snapshot's UMAP laid out alone, without the previous layout,
   to show what the alignment holds still). And the same snapshot twice through
   ``aligned_umap``: the largest move.
3. **Fit cost**: each model's fit with ``aligned_umap=True`` against ``False`` (the aligned PCA
   on in both), warm numba cache, interleaved, each fit in its own process: the wall time of
   ``Trainer.fit``, the training thread's time in the projector's validation-epoch-end hook
   (where a snapshot is handed to the writers' thread), and the wait at the fit's end (from
   ``on_train_end`` to the return of ``fit``: the writers finishing the queued snapshots).

Run: ``python benchmarks/aligned_umap.py [--sizes 1000 10000 50000] [--repeats 2]``
(about 15 minutes on 2 cores; ``--parts cost`` or ``--parts fit`` for one half); ``--quick``
for 1,000 and 10,000 points, one repeat, and one fit of each kind. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DIMS = 64  # the synthetic embedding's width
CLUSTERS = 10
SNAPSHOTS = 3  # drifting snapshots; then the last again, unchanged
KEY = "bench/validate"


# --------------------------------------------------------------------------- 1. cost


def drifting_clusters(points: int, seed: int = 0) -> list[np.ndarray]:
    """``SNAPSHOTS`` snapshots ``[points, DIMS]`` float32 of 10 clusters that drift.

    Each point keeps its cluster and its own offset; the centres move and every point jitters
    a little between snapshots, so neighbourhoods change, as in a model that trains.
    """
    rng = np.random.default_rng(seed)
    labels = np.arange(points) % CLUSTERS
    centres = rng.normal(scale=4.0, size=(CLUSTERS, DIMS))
    offsets = rng.normal(size=(points, DIMS))
    snapshots = []
    for _ in range(SNAPSHOTS):
        jitter = rng.normal(scale=0.3, size=(points, DIMS))
        snapshots.append((centres[labels] + offsets + jitter).astype(np.float32))
        centres = centres + rng.normal(scale=1.0, size=centres.shape)
    return snapshots


def peak_mb() -> float:
    """The process's peak resident memory so far, in MB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cost_worker(method: str, data: str) -> dict[str, Any]:
    """One size and method in this process: seconds per snapshot and the peak memory.

    The snapshots are read from ``data`` (made by the parent, so that making them leaves no
    high-water mark in this process's ``ru_maxrss`` above the baseline).
    """
    import torch

    torch.set_num_threads(1)  # as the writers' thread gives it: one core, the other trains
    from learnscope.embeddings.aligned_umap import UMAPSettings
    from learnscope.embeddings.aligned_views import AlignedViews

    started = time.perf_counter()
    if method.startswith("umap"):
        from learnscope import umap_layout  # noqa: F401  (umap, numba: seconds)

        views = AlignedViews(umap=UMAPSettings())
        warm = AlignedViews(umap=UMAPSettings())  # the kernels loaded from numba's cache
        tiny = drifting_clusters(200, seed=1)
        for x in tiny[:2]:
            warm.umap_view("warm", torch.from_numpy(x), range(len(x)))
    else:
        views = AlignedViews()
    load = time.perf_counter() - started
    with np.load(data) as saved:
        snapshots = [saved[f"s{i}"] for i in range(SNAPSHOTS)]
    points = len(snapshots[0])
    ids = [f"p{i}" for i in range(points)]
    baseline = peak_mb()
    add = views.umap_view if method.startswith("umap") else views.pca_view
    times, coords = [], []
    for x in [*snapshots, snapshots[-1]]:
        vectors = torch.from_numpy(x)
        start = time.perf_counter()
        view = add(KEY, vectors, ids)
        times.append(time.perf_counter() - start)
        xy = view.coords[:, :2] / view.frame.spread if method == "pca" else view.coords
        coords.append(np.asarray(xy))
    return {
        "load_s": load,
        "first_s": times[0],
        "next_s": statistics.mean(times[1:SNAPSHOTS]),
        "identical_s": times[-1],
        "identical_max_move": float(np.abs(coords[-1] - coords[-2]).max()),
        "fitted": getattr(view, "fitted", None),
        "peak_mb": peak_mb() - baseline,
        "baseline_mb": baseline,
    }


def compile_worker() -> dict[str, Any]:
    """The UMAP module's import and a first tiny view (200 points, two snapshots)."""
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    from learnscope import umap_layout  # noqa: F401
    from learnscope.embeddings.aligned_umap import UMAPSettings
    from learnscope.embeddings.aligned_views import AlignedViews

    imported = time.perf_counter()
    views = AlignedViews(umap=UMAPSettings())
    for x in drifting_clusters(200, seed=1)[:2]:
        views.umap_view("tiny", torch.from_numpy(x), range(len(x)))
    return {"import_s": imported - start, "views_s": time.perf_counter() - imported}


def in_process(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this script with ``args`` in a fresh process; the JSON its last line prints."""
    done = subprocess.run(
        [sys.executable, __file__, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"{args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cost(sizes: list[int], repeats: int) -> None:
    """Part 1: the cost table and the compile table."""
    print("\n## 1. Cost per snapshot (64 dims, default settings; medians of", repeats, "runs)\n")
    print(
        "| points | method | first (s) | next, changed (s) | identical (s) | fitted "
        "| peak memory above baseline (MB) | identical: largest move |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    names = {"pca": "PCA", "umap": "UMAP"}
    folder = Path(tempfile.mkdtemp(prefix="aligned_umap_data_"))
    for points in sizes:
        data = folder / f"{points}.npz"
        np.savez(data, **{f"s{i}": x for i, x in enumerate(drifting_clusters(points))})
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for _ in range(repeats):
            for method in runs:  # side by side, interleaved
                runs[method].append(in_process(["--worker", f"cost:{method}:{data}"], {}))
        for method, results in runs.items():
            med = {k: statistics.median(r[k] for r in results) for k in results[0] if k != "fitted"}
            fitted = results[0]["fitted"]
            print(
                f"| {points:,} | {names[method]} | {med['first_s']:.3f} "
                f"| {med['next_s']:.3f} | {med['identical_s']:.3f} "
                f"| {f'{fitted:,}' if fitted else 'all'} | {med['peak_mb']:.0f} "
                f"| {med['identical_max_move']:.3g} |"
            )
    print("\n## 1b. Numba compile: first process on a machine (cold) against the next (warm)\n")
    print("| numba cache | import of the UMAP module (s) | first tiny view, 2 snapshots (s) |")
    print("|---|---:|---:|")
    for name in ("cold (empty NUMBA_CACHE_DIR)", "warm (cache on disk)"):
        results = []
        for _ in range(repeats):
            env = (
                {"NUMBA_CACHE_DIR": tempfile.mkdtemp(prefix="numba_cold_")}
                if "cold" in name
                else {}
            )
            results.append(in_process(["--worker", "compile"], env))
        imp = statistics.median(r["import_s"] for r in results)
        first = statistics.median(r["views_s"] for r in results)
        print(f"| {name} | {imp:.2f} | {first:.2f} |")


# --------------------------------------------------------------------------- 2. quality


def make_cnn(lr: float = 3e-3) -> Any:
    """A small CNN on the 1 x 8 x 8 digits: an ``encoder`` to 64 dims and a linear ``head``."""
    import lightning.pytorch as pl
    import torch
    from torch import nn

    class DigitsCNN(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1),
                nn.GELU(),
                nn.Conv2d(16, 32, 3, padding=1),
                nn.GELU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(32 * 4 * 4, DIMS),
            )
            self.head = nn.Linear(DIMS, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self(x), y)
            self.log("train/loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            logits = self(x)
            self.log("val/accuracy", (logits.argmax(-1) == y).float().mean())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=lr)

    return DigitsCNN()


def fit_worker(model_name: str, umap: bool, logdir: str) -> dict[str, Any]:
    """Fit ``model_name`` (``demo`` or ``cnn``) with the aligned UMAP view on or off; timings."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue import EmbeddingProjector
    from learnscope.lightning_glue.demo import (
        callbacks,
        digits_loaders,
        lightning_quiet,
        make_model,
    )

    torch.manual_seed(0)
    if model_name == "demo":
        attached = callbacks()[:-1]  # the demo's, its projector replaced by the one below
        model = make_model()
    else:
        attached, model = [], make_cnn()
    projector = EmbeddingProjector(
        "encoder",
        metadata_fn=lambda batch: {"label": batch[1]},
        ids_fn="dataset_index",
        aligned_pca=True,
        aligned_umap=umap,
    )
    hook_s: list[float] = []
    hook = projector.on_validation_epoch_end

    def timed_hook(trainer: Any, pl_module: Any) -> None:
        start = time.perf_counter()
        hook(trainer, pl_module)
        hook_s.append(time.perf_counter() - start)

    projector.on_validation_epoch_end = timed_hook  # type: ignore[method-assign]
    ends: dict[str, float] = {}

    class TrainEnd(pl.Callback):
        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            ends["train_end"] = time.perf_counter()

    train, val = digits_loaders()
    with lightning_quiet():
        trainer = pl.Trainer(
            max_epochs=8,
            accelerator="cpu",
            devices=1,
            logger=TensorBoardLogger(logdir, name=model_name),
            callbacks=[*attached, projector, TrainEnd()],
            log_every_n_steps=5,
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=False,
            num_sanity_val_steps=0,
        )
        start = time.perf_counter()
        trainer.fit(model, train, val)
        end = time.perf_counter()
    return {
        "fit_s": end - start,
        "hook_ms": [1000 * s for s in hook_s],
        "end_wait_s": end - ends["train_end"],
        "log_dir": trainer.logger.log_dir,
    }


def read_snapshots(run_dir: Path) -> list[dict[str, Any]]:
    """Each snapshot of a run record: step, ids, labels, full embedding, both views."""
    from learnscope.run_directory.record import RecordReader, decode_array

    snapshots = []
    for entry in RecordReader(run_dir / "learnscope_record.jsonl").read():
        if entry["kind"] != "snapshot":
            continue
        label = next(c for c in entry["columns"] if c["name"] == "label")
        labels = decode_array(label["codes"] if "codes" in label else label["values"])
        tensor = entry["tensor"]
        vectors = np.fromfile(run_dir / tensor["path"], dtype=tensor["dtype"])
        umap = entry["projections"]["umap"]
        snapshots.append(
            {
                "step": entry["step"],
                "ids": entry["ids"],
                "labels": labels,
                "vectors": vectors.reshape(tensor["shape"]),
                "pca": (decode_array(entry["xy"]) / entry["spread"], entry["frame"]),
                "umap": (decode_array(umap["xy"]) / umap["spread"], umap["frame"]),
                "fitted": umap["fitted"],
            }
        )
    return snapshots


def displacement(before: dict[str, Any], after: dict[str, Any], view: str) -> float:
    """Mean distance moved by the points in both snapshots, in display units."""
    row = {key: i for i, key in enumerate(before["ids"])}
    shared = [(row[key], i) for i, key in enumerate(after["ids"]) if key in row]
    old, new = (np.array(side) for side in zip(*shared, strict=True))
    moved = after[view][0][new] - before[view][0][old]
    return float(np.linalg.norm(moved, axis=1).mean())


def outside(xy: np.ndarray, frame: list[float]) -> float:
    """The share of points outside the picture's frame ``[xmin, xmax, ymin, ymax]``, in %."""
    x0, x1, y0, y1 = frame
    out = (xy[:, 0] < x0) | (xy[:, 0] > x1) | (xy[:, 1] < y0) | (xy[:, 1] > y1)
    return 100.0 * float(out.mean())


def quality(model_name: str, run_dir: Path) -> None:
    """Part 2 for one fitted run: the per-snapshot table and the identical-snapshot check."""
    from sklearn.manifold import trustworthiness
    from sklearn.metrics import silhouette_score

    from learnscope.embeddings.aligned_umap import UMAPSettings, aligned_umap
    from learnscope.embeddings.scatter_frame import spread

    snapshots = read_snapshots(run_dir)
    dims = snapshots[0]["vectors"].shape[1]
    print(f"\n### {model_name}: {snapshots[0]['vectors'].shape[0]} points, {dims}-dim embedding\n")
    print(
        "| step | trustworthiness PCA / UMAP | silhouette PCA / UMAP | outside frame % PCA / UMAP "
        "| mean move since previous PCA / UMAP / UMAP unaligned |"
    )
    print("|---:|---|---|---|---|")
    settings = UMAPSettings()
    for snap in snapshots:  # each snapshot's UMAP alone (no previous layout), for comparison
        alone = aligned_umap(snap["vectors"], snap["ids"], None, settings).coords
        snap["alone"] = (alone / spread(alone), None)
    before = None
    for snap in snapshots:
        cells = []
        for measure in ("trust", "silhouette", "outside", "move"):
            pair = []
            for view in ("pca", "umap"):
                xy, frame = snap[view]
                if measure == "trust":
                    pair.append(f"{trustworthiness(snap['vectors'], xy, n_neighbors=10):.3f}")
                elif measure == "silhouette":
                    pair.append(f"{silhouette_score(xy, snap['labels']):.3f}")
                elif measure == "outside":
                    pair.append(f"{outside(xy, frame):.1f}")
                else:
                    pair.append(
                        "-" if before is None else f"{displacement(before, snap, view):.3f}"
                    )
            if measure == "move":
                pair.append("-" if before is None else f"{displacement(before, snap, 'alone'):.3f}")
            cells.append(" / ".join(pair))
        print(f"| {snap['step']} | " + " | ".join(cells) + " |")
        before = snap
    last = snapshots[-1]
    alone = aligned_umap(last["vectors"], last["ids"], None, settings)
    again = aligned_umap(last["vectors"], last["ids"], alone.layout, settings)
    previous = aligned_umap(snapshots[-2]["vectors"], last["ids"], None, settings)
    after = aligned_umap(last["vectors"], last["ids"], previous.layout, settings)
    repeat = aligned_umap(last["vectors"], last["ids"], after.layout, settings)
    print(
        f"\nThe last snapshot twice through `aligned_umap`: largest move "
        f"{np.abs(again.coords - alone.coords).max():.3g} (first layout), "
        f"{np.abs(repeat.coords - after.coords).max():.3g} (after an aligned layout)."
    )


# --------------------------------------------------------------------------- 3. fit cost


def fits(fit_repeats: int) -> dict[str, Path]:
    """Part 3 (and the runs part 2 reads): fits with and without UMAP, interleaved."""
    root = tempfile.mkdtemp(prefix="aligned_umap_bench_")
    results: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for _ in range(fit_repeats):
        for model_name in ("demo", "cnn"):
            for umap in (False, True):
                result = in_process(["--worker", f"fit:{model_name}:{int(umap)}:{root}"])
                results.setdefault((model_name, umap), []).append(result)
    print(f"\n## 3. Fit cost (8 epochs, 8 snapshots; medians of {fit_repeats} fits)\n")
    print(
        "| model | aligned_umap | fit (s) | projector's epoch-end hook per snapshot, median "
        "[max] (ms) | wait at the fit's end (s) |"
    )
    print("|---|---|---:|---:|---:|")
    for (model_name, umap), runs in results.items():
        hooks = [ms for r in runs for ms in r["hook_ms"]]
        fit = statistics.median(r["fit_s"] for r in runs)
        wait = statistics.median(r["end_wait_s"] for r in runs)
        print(
            f"| {model_name} | {umap} | {fit:.1f} | {statistics.median(hooks):.2f} "
            f"[{max(hooks):.1f}] | {wait:.2f} |"
        )
    return {name: Path(results[(name, True)][-1]["log_dir"]) for name in ("demo", "cnn")}


def worker(spec: str) -> None:
    """Run one worker (``cost:<method>:<data file>``, ``compile``, ``fit:<model>:<umap>:<dir>``)."""
    kind, *rest = spec.split(":", 1)
    if kind == "cost":
        method, data = rest[0].split(":", 1)
        result = cost_worker(method, data)
    elif kind == "compile":
        result = compile_worker()
    else:
        model_name, umap, logdir = rest[0].split(":", 2)
        result = fit_worker(model_name, umap == "1", logdir)
    print(json.dumps(result))


def main() -> None:
    """Parse the arguments and print the three parts' tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--repeats", type=int, default=2, help="processes per size and method")
    parser.add_argument("--fit-repeats", type=int, default=2, help="fits of each kind")
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 points, 1 run")
    parser.add_argument("--parts", nargs="+", default=["cost", "fit"], choices=["cost", "fit"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.quick:
        args.sizes, args.repeats, args.fit_repeats = [1_000, 10_000], 1, 1
    import numba
    import torch
    import umap

    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}, umap-learn {umap.__version__}, numba {numba.__version__}; "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )
    if "cost" in args.parts:
        cost(args.sizes, args.repeats)
    if "fit" in args.parts:
        runs = fits(args.fit_repeats)
        print("\n## 2. Quality of the views (the last fit with aligned_umap=True of each model)")
        for model_name, run_dir in runs.items():
            quality(model_name, run_dir)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
