"""Two CPU processes (gloo) train one model three ways, sharded: FSDP2 and FSDP1 (both kinds).

Run by ``tests/callbacks/test_sharded.py``:
``python sharded_loop.py OUT_DIR``. It starts two ranks with
``torch.multiprocessing``; each trains the same small model in a plain PyTorch loop, sharded
with FSDP2 (``fully_shard``), FSDP1 with ``use_orig_params=True`` and FSDP1 with flat
parameters, each rank on its half of every global batch. Rank 0 also trains an unsharded copy
on the whole batch (the mean loss of 16 rows: the same gradients as the sharded runs, which
average two means of 8). Every rank writes ``OUT_DIR/rank<r>.json``: per strategy and for the
reference, the autocorrelation summary, gradient statistics, health scalars and findings.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from learnscope.autocorrelation.analysis import summarize
from learnscope.autocorrelation.sampled_history import SampledParameterHistory
from learnscope.collapse.row_buffer import EmbeddingRowBuffer
from learnscope.health import (
    GradientRound,
    gradient_findings,
    gradient_statistics,
    health_scalars,
)

STEPS = 40
BATCH = 16  # global; 8 rows per rank
LAGS = (1, 2, 5)


class Net(nn.Module):
    """``encoder`` and ``head``, a ``branch`` multiplied by zero (zero gradient) and a
    ``damped`` branch scaled by 1e-9 (tiny gradient)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 3)
        self.branch = nn.Linear(6, 8)
        self.damped = nn.Linear(6, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x) + 0 * self.branch(x) + 1e-9 * self.damped(x))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS + 1, BATCH, 6, generator=generator)
    y = torch.randint(0, 3, (STEPS + 1, BATCH), generator=generator)
    return x, y


def shard(model: nn.Module, strategy: str) -> nn.Module:
    if strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model.encoder)
        fully_shard(model)
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel

    orig = strategy == "fsdp1_orig"
    cpu = torch.device("cpu")
    model.encoder = FullyShardedDataParallel(model.encoder, use_orig_params=orig, device_id=cpu)
    return FullyShardedDataParallel(model, use_orig_params=orig, device_id=cpu)


def summary_json(summary: Any) -> dict[str, Any]:
    return {
        f"{g.kind}/{g.group}": {
            "mean_acf": [float(v) for v in g.mean_acf],
            "rho1": [g.rho1_q25, g.rho1_median, g.rho1_q75],
            "tau": g.tau,
            "non_finite": g.non_finite_elements,
        }
        for g in summary.groups
    }


def stats_json(stats: Any) -> dict[str, Any]:
    return {
        "names": list(stats.names),
        "numels": stats.numels.tolist(),
        "has_grad": stats.has_grad.tolist(),
        "grad_norms": [None if v != v else float(v) for v in stats.grad_norms],
        "weight_norms": stats.weight_norms.tolist(),
        "loss": stats.loss,
        "nonfinite": dict(stats.nonfinite_counts),
    }


def train(model: nn.Module, rows: slice) -> dict[str, Any]:
    """The loop every variant runs; the learnscope figures it produced."""
    x, y = data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    source = model  # the model itself: FSDP1 with use_orig_params needs it
    history = SampledParameterHistory(source, capacity=STEPS, elements_per_tensor=16, seed=3)
    rounds = GradientRound()
    buffer = EmbeddingRowBuffer(64)
    encoder = model.encoder.module if hasattr(model.encoder, "module") else model.encoder
    # rank 0's rows: all of them when sharded, the first half of the batch for the reference
    hook = encoder.register_forward_hook(
        lambda m, a, out: buffer.append(out.detach()[: BATCH // 2])
    )
    result: dict[str, Any] = {
        "num_elements": history.num_elements,
        "total_elements": history.total_elements,
        "history_sharded": history.sharded,
        "slices": [[s.name, s.start, s.length] for s in history.slices],
    }
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x[step, rows]), y[step, rows])
        loss.backward()
        if step == 0:
            result["unused"] = rounds.observe(source, optimizer, [optimizer])
            hook.remove()
            result["collapse"] = buffer.compute()
        history.record()
        if step in (1, STEPS - 1):
            stats = gradient_statistics(source, loss)
            result[f"stats_{step}"] = stats_json(stats)
            result[f"scalars_{step}"] = health_scalars(stats)
            findings = gradient_findings(stats, step)
            result[f"findings_{step}"] = [[f.code, f.subject, f.message] for f in findings]
        optimizer.step()
    summary = summarize(
        {kind: history.history(kind) for kind in history.kinds},
        history.group_index,
        history.group_names,
        step=STEPS - 1,
        lags=LAGS,
        sharded=history.sharded_columns,
    )
    result["summary"] = summary_json(summary)
    # a non-finite gradient on one element, held by one rank only when sharded
    optimizer.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x[STEPS, rows]), y[STEPS, rows]).backward()
    target = next(s for s in _shards(source) if s.name == "head.weight")
    grad = target.elements(grad=True)
    if grad is not None and target.pieces(5, 6):  # element 5 of head.weight, where it lives
        _, local, _ = target.pieces(5, 6)[0]
        grad.view(-1)[local - target.local_start] = float("nan")
    stats = gradient_statistics(source)
    result["nonfinite"] = [[f.code, f.subject, f.message] for f in gradient_findings(stats, 99)]
    return result


def _shards(source: Any) -> list[Any]:
    from learnscope.model.parameter_shards import parameter_shards

    return parameter_shards(source)


def run(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    base = Net()
    state: dict[str, Any] = {"rank": rank}
    rows = slice(rank * BATCH // 2, (rank + 1) * BATCH // 2)
    for strategy in ("fsdp2", "fsdp1_orig", "fsdp1_flat"):
        model = shard(copy.deepcopy(base), strategy)
        state[strategy] = train(model, rows)
    if rank == 0:
        state["reference"] = train(copy.deepcopy(base), slice(0, BATCH))
    Path(out, f"rank{rank}.json").write_text(json.dumps(state))
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(run, args=(free_port(), sys.argv[1]), nprocs=2)
