"""A Lightning fit with FSDP2 (``ModelParallelStrategy``) on 2 CPU processes, with learnscope.

Run by ``tests/callbacks/test_sharded.py``:
``python fit_model_parallel.py OUT_DIR`` shards the model with
``fully_shard`` in ``configure_model`` and fits it with ``TrainingHelper`` and
``ModelAutocorrelation``; Lightning starts the second rank by running this script again. Rank 0's
``CSVLogger`` writes ``OUT_DIR/csv/version_0/metrics.csv``; every rank writes
``OUT_DIR/rank<r>.json`` (its findings and what its callbacks recorded). The test fits the same
:class:`ShardedNet` unsharded on one process (``fit(OUT_DIR, devices=1)``) and compares.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from learnscope.lightning_glue import ModelAutocorrelation, TrainingHelper

SAMPLES = 64  # 4 steps per epoch: batches of 8 per rank, 16 per step over both ranks


class ShardedNet(pl.LightningModule):
    """``encoder`` and ``head``, and a ``branch`` multiplied by zero (a zero gradient)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 3)
        self.branch = nn.Linear(6, 8)

    def configure_model(self) -> None:
        if self.device_mesh is None:  # unsharded reference
            return
        from torch.distributed.fsdp import fully_shard

        mesh = self.device_mesh["data_parallel"]
        fully_shard(self.encoder, mesh=mesh)
        fully_shard(self, mesh=mesh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x) + 0 * self.branch(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def fit(out: Path, devices: int) -> dict[str, Any]:
    """Fit :class:`ShardedNet` (FSDP2 over ``devices`` CPU processes, or one unsharded)."""
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(
        torch.randn(SAMPLES, 6, generator=generator),
        torch.randint(0, 3, (SAMPLES,), generator=generator),
    )
    helper = TrainingHelper(check_every_n_steps=2, embedding_module="encoder")
    autocorrelation = ModelAutocorrelation(
        buffer_size=8,
        elements_per_tensor=16,
        analyze_every_n_steps=4,
        lags=(1, 2),
        seed=3,
        all_scalars=True,
    )
    strategy: Any = "auto"
    if devices > 1:
        from lightning.pytorch.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(data_parallel_size=devices, tensor_parallel_size=1)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=2,
        logger=CSVLogger(str(out), name="csv", version=0),
        callbacks=[helper, autocorrelation],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        use_distributed_sampler=False,
    )
    handler = logging.FileHandler(out / f"log_rank{trainer.global_rank}.txt")
    logging.getLogger("learnscope").addHandler(handler)
    model = ShardedNet()
    # rank r takes samples r, r + 2, ...: the ranks' batches of a step make up the single
    # process's batch of that step (Lightning's own sampler would shuffle them)
    sampler = None
    if devices > 1:
        sampler = DistributedSampler(
            data, num_replicas=devices, rank=trainer.global_rank, shuffle=False
        )
    trainer.fit(model, DataLoader(data, batch_size=SAMPLES // 4 // devices, sampler=sampler))
    logging.getLogger("learnscope").removeHandler(handler)
    return {
        "rank": trainer.global_rank,
        "global_step": trainer.global_step,
        "findings": [[f.code, f.subject] for f in helper.findings],
        "switched_off": sorted(helper.switched_off | autocorrelation.switched_off),
        "parameter_types": sorted({type(p).__name__ for p in model.parameters()}),
    }


if __name__ == "__main__":
    target = Path(sys.argv[1])
    state = fit(target, devices=2)
    (target / f"rank{state['rank']}.json").write_text(json.dumps(state))
