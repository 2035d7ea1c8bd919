"""Long runs: the cost of a snapshot, an analysis and a finding, early and late in a run.

Three parts, each selected with ``--parts``:

* ``snapshots``: the time of ``projector_files.write_snapshot`` (files and config) and of its
  config merge alone, after 10, 100 and 1,000 earlier snapshots in the same run directory. The
  old module (``plugins/projector_files.py`` at commit :data:`OLD_COMMIT`, which parses and
  rewrites the whole config on every snapshot) is loaded from git into a temporary module, and
  old and new write in lockstep in one process, so drift in the machine's speed falls on both.
  A snapshot is the demo's: 540 digits, 32 dimensions, label and id columns, 8x8 thumbnails.
* ``epochs``: the demo's digits MLP for ``--epochs`` epochs, timed from one training epoch's
  start to the next, without learnscope and with all three callbacks (``EmbeddingProjector``
  with ids and aligned PCA, one snapshot per epoch; ``ModelAutocorrelation(
  analyze_every_n_steps=50)``; ``TrainingHelper(check_every_n_steps=25)``), with the new config
  merge and with the old one patched in. The figures are the medians of the first and last 20
  epochs, and the event-file records of the Custom Scalars layout and the findings table.
* ``tensorboard``: a real ``tensorboard`` server on 127.0.0.1 over runs of 10, 100 and 1,000
  projector entries: the time of the projector plugin's ``runs`` and ``info?run=`` routes (the
  first request after the server has read the configs, then the median of 5), and, with
  ``--browser``, the time until headless Chromium shows the Projector tab with its first tensor.

Run (CPU, about four minutes on two shared cores)::

    python benchmarks/long_run.py --epochs 300 --browser
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from learnscope import EmbeddingSnapshot
from learnscope.plugins.tensorboard import projector_files

OLD_COMMIT = "31a0b7b"  # the projector config merge that parses and rewrites the whole file
ROOT = Path(__file__).resolve().parents[1]
POINTS = (10, 100, 1000)  # earlier snapshots
WINDOW = 10  # writes timed at each point


def old_projector_files() -> Any:
    """``plugins/projector_files.py`` as it was at :data:`OLD_COMMIT`, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:plugins/projector_files.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_projector_files.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_projector_files", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digits_snapshot(step: int) -> EmbeddingSnapshot:
    """A snapshot the size of the demo's: 540 x 32 with label and id columns and thumbnails."""
    generator = torch.Generator().manual_seed(step)
    return EmbeddingSnapshot(
        "encoder",
        step,
        torch.randn(540, 32, generator=generator),
        {"label": torch.arange(540) % 10, "id": torch.arange(540)},
        torch.rand(540, 1, 8, 8, generator=generator),
        stage="validate",
    )


class MergeTimer:
    """Wraps a module's ``_merge_entry`` and keeps the time of each call."""

    def __init__(self, module: Any) -> None:
        self.times: list[float] = []
        real = module._merge_entry

        def timed(*args: Any) -> None:
            start = time.perf_counter()
            real(*args)
            self.times.append(time.perf_counter() - start)

        module._merge_entry = timed


def bench_snapshots(out: Path) -> None:
    old = old_projector_files()
    modules = {"old": old, "new": projector_files}
    merges = {name: MergeTimer(module) for name, module in modules.items()}
    totals: dict[str, list[float]] = {name: [] for name in modules}
    last = POINTS[-1] + WINDOW
    for step in range(last):
        snapshot = digits_snapshot(step)
        for name in modules if step % 2 else reversed(modules):  # alternate who goes first
            start = time.perf_counter()
            modules[name].write_snapshot(out / name, snapshot)
            totals[name].append(time.perf_counter() - start)
    for name in modules:  # both hold every entry
        assert len(projector_files.read_config(out / name).embeddings) == last

    print("\n| earlier snapshots | write_snapshot old (ms) | new (ms) | config merge old | new |")
    print("|---:|---:|---:|---:|---:|")
    for point in POINTS:
        cells = []
        for series in (totals, {k: v.times for k, v in merges.items()}):
            for name in ("old", "new"):
                window = series[name][point : point + WINDOW]
                cells.append(f"{1000 * statistics.median(window):.2f}")
        print(f"| {point:,} | " + " | ".join(cells) + " |")
    size = (out / "new" / projector_files.CONFIG_NAME).stat().st_size
    print(f"config after {last} snapshots: {size:,} bytes")


class EpochClock:
    """Times from one training epoch's start to the next."""

    def __init__(self) -> None:
        import lightning.pytorch as pl

        class Clock(pl.Callback):
            def __init__(self) -> None:
                self.starts: list[float] = []

            def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
                self.starts.append(time.perf_counter())

            def on_train_end(self, trainer: Any, pl_module: Any) -> None:
                self.starts.append(time.perf_counter())

        self.callback = Clock()

    def epochs_ms(self) -> list[float]:
        return [
            1000 * (b - a)
            for a, b in zip(self.callback.starts[:-1], self.callback.starts[1:], strict=True)
        ]


def learnscope_callbacks() -> list[Any]:
    from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper

    return [
        EmbeddingProjector(
            "encoder",
            metadata_fn=lambda batch: {"label": batch[1]},
            images_fn=lambda batch: batch[0],
            ids_fn="dataset_index",
            aligned_pca=True,
        ),
        ModelAutocorrelation(analyze_every_n_steps=50),
        TrainingHelper(check_every_n_steps=25),
    ]


def fit(logdir: Path, epochs: int, with_learnscope: bool) -> tuple[list[float], Path]:
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from learnscope.lightning_glue.demo import digits_loaders, make_model

    torch.manual_seed(0)
    clock = EpochClock()
    logger = TensorBoardLogger(str(logdir), name="run")
    extra = learnscope_callbacks() if with_learnscope else []
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=[clock.callback, *extra],
        log_every_n_steps=5,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    train, val = digits_loaders()
    trainer.fit(make_model(), train, val)
    return clock.epochs_ms(), Path(logger.log_dir)


def records(run_dir: Path, tag: str) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    events.Reload()
    return len(events.Tensors(tag)) if tag in events.Tags()["tensors"] else 0


def bench_epochs(out: Path, epochs: int) -> None:
    old = old_projector_files()
    new_merge = projector_files._merge_entry
    variants: dict[str, tuple[bool, Callable[..., None]]] = {
        "without learnscope": (False, new_merge),
        "learnscope, new config merge": (True, new_merge),
        "learnscope, old config merge": (True, old._merge_entry),
    }
    print(f"\n{epochs} epochs, 21 training steps and one 540-row snapshot per epoch")
    print("| variant | first 20 epochs, median (ms) | last 20 (ms) | last / first | fit (s) |")
    print("|---|---:|---:|---:|---:|")
    for index, (name, (with_learnscope, merge)) in enumerate(variants.items()):
        projector_files._merge_entry = merge
        try:
            start = time.perf_counter()
            times, run_dir = fit(out / f"v{index}", epochs, with_learnscope)
            wall = time.perf_counter() - start
        finally:
            projector_files._merge_entry = new_merge
        first, last = statistics.median(times[:20]), statistics.median(times[-20:])
        print(f"| {name} | {first:.1f} | {last:.1f} | {last / first - 1:+.0%} | {wall:.1f} |")
        if with_learnscope:
            entries = len(projector_files.read_config(run_dir).embeddings)
            layouts = records(run_dir, "custom_scalars__config__")
            tables = records(run_dir, "~learnscope/findings/text_summary")
            print(f"  ({entries} projector entries, {layouts} layouts, {tables} findings tables)")


def fill_run(run_dir: Path, entries: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    SummaryWriter(str(run_dir)).close()  # the event file that makes the run listed
    for step in range(entries):
        projector_files.write_snapshot(run_dir, digits_snapshot(step))


def timed_ms(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - start)


def bench_tensorboard(out: Path, browser: bool) -> None:
    # the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
    sys.path.append(str(ROOT))
    from tests.kit.tb_server import tensorboard

    print(
        "\n| projector entries | runs first / median (ms) | info first / median (ms) | info bytes "
        "| tab shows the first tensor (s) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for entries in POINTS:
        logdir = out / f"tb{entries}"
        fill_run(logdir / "run", entries)
        with tensorboard(logdir) as server:
            server.wait_for("/data/runs", lambda runs: "run" in runs)
            runs_first = timed_ms(lambda: server.json("/data/plugin/projector/runs"))
            info_first = timed_ms(lambda: server.get("/data/plugin/projector/info", run="run"))
            size = len(server.get("/data/plugin/projector/info", run="run"))
            runs = [timed_ms(lambda: server.json("/data/plugin/projector/runs")) for _ in range(5)]
            info = [
                timed_ms(lambda: server.get("/data/plugin/projector/info", run="run"))
                for _ in range(5)
            ]
            tab = f"{open_projector_tab(server.base):.1f}" if browser else "not run"
        print(
            f"| {entries:,} | {runs_first:.1f} / {statistics.median(runs):.1f} | "
            f"{info_first:.1f} / {statistics.median(info):.1f} | {size:,} | {tab} |"
        )


def open_projector_tab(base: str) -> float:
    """Seconds from opening ``#projector`` until it shows a tensor's points (polled each second)."""
    from tests.kit.browser import chromium, wait_for_text

    with chromium() as driver:
        start = time.perf_counter()
        driver.get(f"{base}/#projector")
        wait_for_text(driver, lambda text: "Points: 540" in text and "Dimension: 32" in text, 300)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["snapshots", "epochs", "tensorboard"])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--browser", action="store_true", help="also time the Projector tab")
    args = parser.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0)
    import lightning
    import tensorboard

    print(
        f"torch {torch.__version__}, lightning {lightning.__version__}, tensorboard "
        f"{tensorboard.__version__}, {torch.get_num_threads()} torch thread"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if "snapshots" in args.parts:
            bench_snapshots(out)
        if "epochs" in args.parts:
            bench_epochs(out, args.epochs)
        if "tensorboard" in args.parts:
            bench_tensorboard(out, args.browser)


if __name__ == "__main__":
    main()
