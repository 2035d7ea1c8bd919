"""Heavy snapshots: how long the training thread waits, and how much memory a snapshot costs.

Old and new code are measured side by side in one run: the old code is taken from git
(``--old`` commit, default the last commit before the background writer) and each measurement
runs in a fresh subprocess for each code, alternating old and new, so that memory figures start
from a clean process and drift in the machine's speed falls on both.

Parts (``--parts``):

* ``block``: a real ``Trainer.fit`` of two epochs with a ``TensorBoardLogger``,
  ``EmbeddingProjector(aligned_pca=True)`` and Lightning's default checkpointing, whose
  validation epochs each give a 100,000 x 1,024 snapshot. Figures: the training thread's pause
  after the first validation epoch (from the end of its last batch to the first batch of the
  next training epoch: the snapshot is made and written, or queued, and the checkpoint saved),
  and the time in the projector's ``teardown`` (where the new code waits for the queue).
* ``wandb``: a 10,000 x 768 snapshot with a label column into a ``WandbWriter`` (offline):
  the time until it is written, and the time the calling thread is blocked (the same for the
  old code, which writes on the calling thread; for the new one, the time to queue it on a
  :class:`~learnscope.plugins.pipeline.background.BackgroundWriters`).
* ``memory``: the fit of ``block`` with one 200,000 x 768 snapshot. Two figures, as multiples
  of the snapshot's own size (N x D x 4 bytes): what making and writing the snapshot costs
  (the peak resident memory from the end of the validation epoch, when its rows are held, to
  the end of ``teardown``, minus the resident memory at that end of epoch), and the whole
  epoch's (the same peak minus the resident memory at the start of the validation epoch, so
  holding the rows counts too). Resident memory is read from ``/proc/self/statm`` every 5 ms
  by a sampling thread.

Run (CPU, about ten minutes on two shared cores)::

    python benchmarks/heavy_writes.py --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

OLD_COMMIT = "277a0fc"  # the last commit that wrote on the training thread
REPO = Path(__file__).resolve().parent.parent


def old_tree(commit: str, into: Path) -> Path:
    """The package tree of ``commit`` laid out for ``PYTHONPATH`` (learnscope.plugins inside)."""
    archive = into / "old.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", commit], cwd=REPO, stdout=out, check=True)
    source = into / "source"
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    package = into / "tree" / "learnscope"
    package.parent.mkdir()
    (source / "learnscope").rename(package)
    (source / "plugins").rename(package / "plugins")
    (source / "lightning_glue").rename(package / "lightning_glue")
    return package.parent


class PeakMemory:
    """The peak resident set size between :meth:`start` and :meth:`stop`, sampled every 5 ms."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.start_bytes = self.peak = 0
        self._running = False
        self._thread: threading.Thread | None = None

    def rss(self) -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * self.page

    def start(self) -> None:
        self.start_bytes = self.mark_bytes = self.peak = self.rss()
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def mark(self) -> None:
        """Measure from here on: the peak starts again from the memory now."""
        self.mark_bytes = self.peak = self.rss()

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def stop(self) -> tuple[int, int]:
        """Stop sampling; the peak's extra bytes over the start and over the mark."""
        self._running = False
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self.rss())
        return self.peak - self.start_bytes, self.peak - self.mark_bytes


def fit_with_snapshot(rows: int, dim: int, log_dir: str, epochs: int) -> dict[str, float]:
    """A fit whose validation epochs give ``rows x dim`` snapshots; timings and memory."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch import nn

    from learnscope.lightning_glue import EmbeddingProjector

    batch = 10_000

    class Batches(torch.utils.data.IterableDataset):
        def __init__(self, count: int) -> None:
            self.count = count

        def __iter__(self) -> Any:
            generator = torch.Generator().manual_seed(0)
            for start in range(0, self.count, batch):
                size = min(batch, self.count - start)
                yield torch.randn(size, dim, generator=generator), torch.arange(size) % 10

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Identity()
            self.head = nn.Linear(dim, 1)

        def training_step(self, b: Any, i: int) -> torch.Tensor:
            return self.head(self.encoder(b[0])).pow(2).mean()

        def validation_step(self, b: Any, i: int) -> None:
            self.head(self.encoder(b[0]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    projector = EmbeddingProjector(
        "encoder",
        metadata_fn=lambda b: {"label": b[1]},
        max_points=rows,
        aligned_pca=True,
    )
    spent: dict[str, float] = {}
    memory = PeakMemory()

    def timed(name: str, method: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - begin

        return run

    projector.teardown = timed("teardown", projector.teardown)

    class Probe(pl.Callback):
        def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == 0:
                memory.start()

        def on_validation_batch_end(self, trainer: Any, *args: Any) -> None:
            spent["last_validation_batch"] = time.perf_counter()

        def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == 0:
                memory.mark()  # before the projector's: this callback comes first

        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            if trainer.current_epoch == 1 and "pause" not in spent:
                spent["pause"] = time.perf_counter() - spent["last_validation_batch"]

    trainer = pl.Trainer(
        max_epochs=epochs,
        limit_train_batches=1,
        num_sanity_val_steps=0,
        logger=TensorBoardLogger(log_dir),
        callbacks=[Probe(), projector],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = torch.utils.data.DataLoader(Batches(rows), batch_size=None)
    trainer.fit(Model(), loader, loader)
    epoch, snapshot = memory.stop()
    size = rows * dim * 4
    del spent["last_validation_batch"]
    return {**spent, "snapshot_over_size": snapshot / size, "epoch_over_size": epoch / size}


def wandb_write(rows: int, dim: int, code: str, log_dir: str) -> dict[str, float]:
    """Write one ``rows x dim`` snapshot into an offline wandb run; blocked and total seconds."""
    import torch
    import wandb

    from learnscope.plugins.pipeline.fanout import Writers
    from learnscope.plugins.wandb.writer import WandbWriter
    from learnscope.records import EmbeddingSnapshot

    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    run = wandb.init(project="heavy", dir=log_dir)
    vectors = torch.randn(rows, dim, generator=torch.Generator().manual_seed(0))
    snapshot = EmbeddingSnapshot("encoder", 0, vectors, {"label": torch.arange(rows) % 10})
    writers = Writers([WandbWriter(run)])
    begin = time.perf_counter()
    if code == "old":
        writers.write_embedding(snapshot)
        blocked = total = time.perf_counter() - begin
    else:
        from learnscope.plugins.pipeline.background import BackgroundWriters

        background = BackgroundWriters(writers.active)
        background.write_embedding(snapshot)
        blocked = time.perf_counter() - begin
        background.drain()
        total = time.perf_counter() - begin
        background.close()
    run.finish()
    return {"blocked": blocked, "written": total}


def child(part: str, code: str) -> None:
    import learnscope

    with tempfile.TemporaryDirectory() as log_dir:
        if part == "block":
            result = fit_with_snapshot(100_000, 1024, log_dir, epochs=2)
            del result["snapshot_over_size"], result["epoch_over_size"]
        elif part == "memory":
            result = fit_with_snapshot(200_000, 768, log_dir, epochs=1)
        else:
            result = wandb_write(10_000, 768, code, log_dir)
    result["module"] = learnscope.__file__
    print("RESULT " + json.dumps(result))


def measure(part: str, code: str, tree: Path) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if code == "old":
        env["PYTHONPATH"] = str(tree)
    done = subprocess.run(
        [sys.executable, __file__, "--child", part, "--code", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    expected = str(tree) if code == "old" else str(REPO)
    if not result["module"].startswith(expected):
        raise RuntimeError(f"{code} code imported from {result['module']}, not {expected}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="block,wandb,memory")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--old", default=OLD_COMMIT)
    parser.add_argument("--child")
    parser.add_argument("--code", default="new")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.code)
        return
    with tempfile.TemporaryDirectory() as scratch:
        tree = old_tree(args.old, Path(scratch))
        for part in args.parts.split(","):
            runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                for code in ("old", "new"):
                    runs[code].append(measure(part, code, tree))
                    print(part, code, runs[code][-1], flush=True)
            for code, results in runs.items():
                keys = [k for k in results[0] if k != "module"]
                medians = {k: statistics.median(r[k] for r in results) for k in keys}
                print(f"SUMMARY {part} {code} " + json.dumps(medians), flush=True)


if __name__ == "__main__":
    main()
