"""Snapshots to object storage beside the same on a local disk, measured side by side in one run.

A local S3 server (moto, behind the counting proxy of ``tests/kit/s3_server.py``) stands in for S3.
Parts (``--parts``):

* ``writes``: ``--snapshots`` snapshots of ``--rows`` x ``--dim`` (a label column and the
  aligned view's two columns) written by one ``TensorBoardWriter`` into a local folder and into
  ``s3://``, alternating: the writer thread's seconds per snapshot, and on S3 the requests and
  the bytes sent per snapshot (counted at the proxy, by method).
* ``fit``: a real ``Trainer.fit`` of ``--epochs`` epochs with a ``TensorBoardLogger`` and
  ``EmbeddingProjector(aligned_pca=True)``, whose validation epochs give ``--rows`` x ``--dim``
  snapshots, to a local folder and to ``s3://``: the training thread's pause after each
  validation epoch (from its last batch to the next epoch's first), and the end of the fit
  (``teardown``, which waits for what is still queued).
* ``tab``: the learnscope tab's first open of that fit's run (a new ``RunModel`` over the run's
  folder: the search, the record read, the view built), local and on S3, with its requests.

Run (CPU, a few minutes on two shared cores)::

    python benchmarks/object_storage.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# the tests' kit (tests.kit), last: a learnscope on PYTHONPATH stays first
sys.path.append(str(REPO))

from tests.kit.s3_server import pointed_local_s3  # noqa: E402


def snapshot(step: int, rows: int, dim: int) -> Any:
    """A ``rows x dim`` snapshot with a label column and the aligned view's columns."""
    import torch

    from learnscope.records import EmbeddingSnapshot

    generator = torch.Generator().manual_seed(step)
    xy = torch.randn(rows, 2, generator=generator)
    metadata = {
        "id": list(range(rows)),
        "label": [i % 10 for i in range(rows)],
        "pca_x": xy[:, 0].tolist(),
        "pca_y": xy[:, 1].tolist(),
    }
    return EmbeddingSnapshot("encoder", step, torch.randn(rows, dim, generator=generator), metadata)


def writes(s3: Any, rows: int, dim: int, count: int) -> dict[str, Any]:
    """Seconds per snapshot into a local folder and into S3; S3 requests and bytes each."""
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

    bucket = s3.bucket()
    snapshots = [snapshot(step, rows, dim) for step in range(count)]
    local = TensorBoardWriter(tempfile.mkdtemp(prefix="learnscope-bench-"))
    remote = TensorBoardWriter(f"s3://{bucket}/tb/version_0")
    seconds: dict[str, list[float]] = {"local": [], "s3": []}
    requests: list[dict[str, int]] = []
    sent: list[int] = []
    for each in snapshots:
        for name, writer in (("local", local), ("s3", remote)):
            s3.requests.reset()
            begin = time.perf_counter()
            writer.write_embedding(each)
            writer.flush()
            seconds[name].append(time.perf_counter() - begin)
            if name == "s3":
                requests.append(dict(s3.requests.by_method))
                sent.append(s3.requests.bytes_in)
    local.close()
    remote.close()
    later = requests[1:] or requests  # the first also lists the record's segments
    return {
        "seconds_per_snapshot": {k: statistics.median(v) for k, v in seconds.items()},
        "s3_requests_first": requests[0],
        "s3_requests_later": {
            method: statistics.median(r.get(method, 0) for r in later)
            for method in sorted({m for r in later for m in r})
        },
        "s3_bytes_per_snapshot": statistics.median(sent),
        "tensor_bytes": rows * dim * 4,
    }


def fit(log_dir: str, rows: int, dim: int, epochs: int) -> dict[str, Any]:
    """A fit whose validation epochs give ``rows x dim`` snapshots; the pauses and the end."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch import nn

    from learnscope.lightning_glue import EmbeddingProjector

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Linear(dim, dim)
            self.head = nn.Linear(dim, 1)

        def training_step(self, b: Any, i: int) -> torch.Tensor:
            return self.head(self.encoder(b[0])).pow(2).mean()

        def validation_step(self, b: Any, i: int) -> None:
            self.head(self.encoder(b[0]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(rows, dim, generator=generator), torch.arange(rows) % 10
    )
    loader = torch.utils.data.DataLoader(data, batch_size=2_000)
    projector = EmbeddingProjector(
        "encoder", metadata_fn=lambda b: {"label": b[1]}, max_points=rows, aligned_pca=True
    )
    marks: dict[str, Any] = {"pauses": []}

    class Probe(pl.Callback):
        def on_validation_batch_end(self, trainer: Any, *args: Any) -> None:
            marks["last_validation_batch"] = time.perf_counter()

        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            last = marks.pop("last_validation_batch", None)
            if last is not None:
                marks["pauses"].append(time.perf_counter() - last)

    teardown = projector.teardown

    def timed_teardown(*args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return teardown(*args, **kwargs)
        finally:
            marks["teardown"] = time.perf_counter() - begin

    projector.teardown = timed_teardown  # type: ignore[method-assign]
    logger = TensorBoardLogger(log_dir)
    trainer = pl.Trainer(
        max_epochs=epochs,
        limit_train_batches=2,
        num_sanity_val_steps=0,
        logger=logger,
        callbacks=[Probe(), projector],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    begin = time.perf_counter()
    trainer.fit(Model(), loader, loader)
    return {
        "run": logger.log_dir,
        "pause_median_s": statistics.median(marks["pauses"]),
        "pause_max_s": max(marks["pauses"]),
        "teardown_s": marks["teardown"],
        "fit_s": time.perf_counter() - begin,
    }


def tab_open(logdir: str, s3: Any) -> dict[str, Any]:
    """The tab's first open of the runs under ``logdir``: the search and each run's view."""
    from learnscope.plugins.views.run_search import find_runs
    from learnscope.plugins.views.run_view import read_view
    from learnscope.storage import open_run_folder

    s3.requests.reset()
    begin = time.perf_counter()
    root = open_run_folder(logdir)
    runs = find_runs(root)
    views = [read_view(root.child(run) if run != "." else root) for run in runs]
    seconds = time.perf_counter() - begin
    snapshots = sum(len(key["steps"]) for view in views for key in view["embeddings"])
    return {
        "seconds": seconds,
        "runs": len(runs),
        "snapshot_steps": snapshots,
        "requests": dict(s3.requests.by_method),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--snapshots", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--parts", default="writes,fit,tab")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    parts = args.parts.split(",")
    results: dict[str, Any] = {}
    with pointed_local_s3() as s3:
        if "writes" in parts:
            results["writes"] = writes(s3, args.rows, args.dim, args.snapshots)
        if "fit" in parts or "tab" in parts:
            bucket = s3.bucket()
            local_root = tempfile.mkdtemp(prefix="learnscope-bench-fit-")
            roots = {"local": local_root, "s3": f"s3://{bucket}/tb"}
            fits = {}
            for name, root in roots.items():
                s3.requests.reset()
                fits[name] = fit(root, args.rows, args.dim, args.epochs)
                fits[name]["requests"] = dict(s3.requests.by_method)
            results["fit"] = fits
            if "tab" in parts:
                results["tab"] = {name: tab_open(root, s3) for name, root in roots.items()}
    print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
