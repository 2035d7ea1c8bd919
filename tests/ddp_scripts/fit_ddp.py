"""A 2-process CPU DDP fit with learnscope's callbacks, run by ``tests/callbacks/test_ddp.py``.

Lightning's ``ddp`` strategy starts the other rank by running this script again, so it is a
script, not a test. Usage: ``python fit_ddp.py {all|unused|mismatch} OUT_DIR``. Every rank writes
``OUT_DIR/rank<r>.json`` (what its callbacks hold) and ``OUT_DIR/log_rank<r>.txt`` (its
``learnscope`` log).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.lightning_glue import EmbeddingProjector, TrainingHelper

N_VAL = 45  # odd: DistributedSampler pads rank 1 with a repeat of sample 0
BATCH = 8


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    centres = torch.randn(3, 6, generator=torch.Generator().manual_seed(0)) * 3
    return TensorDataset(centres[labels] + torch.randn(n, 6, generator=g), labels, torch.arange(n))


class Model(pl.LightningModule):
    """``encoder``, ``head``, a ``branch`` multiplied by zero (a zero-gradient finding), and in
    ``unused`` mode a ``spare`` layer that never takes part in the loss."""

    def __init__(self, unused: bool) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 3)
        self.branch = nn.Linear(6, 8)
        self.spare = nn.Linear(8, 3) if unused else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x) + 0 * self.branch(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, _ = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


def with_rank(batch: Any) -> dict[str, Any]:
    return {"label": batch[1], "rank": [dist.get_rank()] * len(batch[1])}


CALLS = []


def fails_on_rank_1(batch: Any) -> dict[str, Any]:
    """Fails on rank 1 after the 2 batches of the sanity check: that rank then sends nothing."""
    CALLS.append(1)
    if dist.get_rank() == 1 and len(CALLS) > 2:
        raise RuntimeError("metadata_fn failed on rank 1")
    return with_rank(batch)


def columns_by_rank(batch: Any) -> dict[str, Any]:
    """Rank 0 gives ``label`` and ``rank``, rank 1 ``label`` and ``colour``: not gatherable."""
    second = "rank" if dist.get_rank() == 0 else "colour"
    return {"label": batch[1], second: [dist.get_rank()] * len(batch[1])}


def all_callbacks() -> list[Any]:
    """The callbacks of the ``all`` and ``unused`` modes."""
    callbacks: list[Any] = [
        EmbeddingProjector(
            "encoder", metadata_fn=with_rank, ids_fn=lambda batch: batch[2], gather=True
        ),
        EmbeddingProjector(
            "encoder", tag="rows", metadata_fn=with_rank, max_points=30, gather=True
        ),
        EmbeddingProjector("encoder", tag="local", metadata_fn=with_rank),
        EmbeddingProjector("encoder", tag="rank0", metadata_fn=fails_on_rank_1, gather=True),
        EmbeddingProjector(
            "encoder",
            tag="predicted",
            stages="predict",
            metadata_fn=with_rank,
            ids_fn=lambda batch: batch[2],
            gather=True,
        ),
        TrainingHelper(check_every_n_steps=2),
    ]
    try:
        from learnscope.lightning_glue import ModelAutocorrelation  # type: ignore[attr-defined]
    except ImportError:
        pass
    else:
        callbacks.append(
            ModelAutocorrelation(
                buffer_size=8, analyze_every_n_steps=4, lags=(1, 2), all_scalars=True
            )
        )
    return callbacks


def main(mode: str, out: Path) -> None:
    torch.manual_seed(0)
    if mode == "mismatch":
        callbacks: list[Any] = [
            EmbeddingProjector("encoder", metadata_fn=columns_by_rank, gather=True),
            TrainingHelper(check_every_n_steps=2),
        ]
    else:
        callbacks = all_callbacks()
    loggers = [
        TensorBoardLogger(str(out), name="tb", version=0),
        WandbLogger(project="ddp", save_dir=str(out)),
    ]
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=2,
        logger=loggers,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        default_root_dir=str(out),
    )
    handler = logging.FileHandler(out / f"log_rank{trainer.global_rank}.txt")
    logging.getLogger("learnscope").addHandler(handler)
    train = DataLoader(dataset(64, seed=1), batch_size=BATCH, shuffle=True)
    val = DataLoader(dataset(N_VAL, seed=2), batch_size=BATCH)
    error = None
    model = Model(unused=mode == "unused")
    try:
        trainer.fit(model, train, val)
    except Exception as exc:  # noqa: BLE001 - the unused mode expects DDP's error
        error = f"{type(exc).__name__}: {exc}"
    else:  # predict uses a sampler that does not pad: 23 rows on rank 0, 22 on rank 1
        trainer.predict(model, val)
    helper = next(c for c in callbacks if isinstance(c, TrainingHelper))
    state = {
        "rank": trainer.global_rank,
        "global_step": trainer.global_step,
        "error": error,
        "findings": [[f.code, f.subject] for f in helper.findings],
        "switched_off": sorted(set().union(*(c.switched_off for c in callbacks))),
        "pid": os.getpid(),
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(state))
    if trainer.is_global_zero:
        loggers[1].experiment.finish()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
