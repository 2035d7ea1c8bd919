"""learnscope's core and writers in a hand-written PyTorch loop, with no Lightning at all.

``train`` is the example of docs/without_lightning.md; the test runs it in a fresh interpreter
(so that nothing else has imported Lightning) and reads back what the dashboards get.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.kit.readers import ProjectorReader, parse_metadata, wandb_history

LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")


def train(log_dir: str, wandb_dir: str) -> None:
    """The example of docs/without_lightning.md: a plain loop writing to TensorBoard and wandb."""
    import torch
    import wandb
    from torch import nn

    from learnscope import EmbeddingSnapshot, Histogram
    from learnscope.autocorrelation.analysis import summarize
    from learnscope.autocorrelation.sampled_history import SampledParameterHistory
    from learnscope.collapse.metrics import collapse_metrics
    from learnscope.health import gradient_findings, gradient_statistics, health_scalars
    from learnscope.plugins import Writers
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter
    from learnscope.plugins.wandb.writer import WandbWriter

    torch.manual_seed(0)
    x, y = torch.randn(256, 6), torch.randint(0, 3, (256,))
    encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
    model = nn.Sequential(encoder, nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    run = wandb.init(project="manual", dir=wandb_dir)
    writers = Writers([TensorBoardWriter(log_dir), WandbWriter(run)])  # a failing one is skipped
    history = SampledParameterHistory(model.named_parameters(), capacity=64, seed=0)

    for step in range(100):
        batch = torch.randint(0, 256, (32,))
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        history.record()  # sampled values and gradients, no host sync
        if step % 25 == 0:  # gradient health: norms in one transfer, named findings
            stats = gradient_statistics(model.named_parameters(), loss.detach())
            writers.write_scalars(health_scalars(stats), step)
            writers.write_histogram(
                Histogram("~learnscope/health/grad_norm", step, stats.grad_norms)
            )
            writers.write_findings(gradient_findings(stats, step), step)
        optimizer.step()
        if (step + 1) % 50 == 0:  # autocorrelation of successive steps, per module group
            summary = summarize(
                {"params": history.history("params"), "grads": history.history("grads")},
                history.group_index,
                history.group_names,
                step=step,
                lags=(1, 2, 5),
            )
            writers.write_autocorrelation(summary)

    with torch.no_grad():  # embeddings and their collapse metrics
        z = encoder(x)
    writers.write_embedding(EmbeddingSnapshot("encoder", 99, z, {"label": y}, stage="validate"))
    metrics = collapse_metrics(z)
    writers.write_scalars({f"collapse/encoder/{k}": v for k, v in metrics.items()}, 99)
    writers.close()
    run.finish()


def test_core_and_writers_in_a_plain_pytorch_loop(tmp_path: Path) -> None:
    log_dir, wandb_dir = tmp_path / "tb", tmp_path / "wandb"
    wandb_dir.mkdir()
    script = (
        "import sys, json; from pathlib import Path; here = Path(sys.argv[1]); "
        "sys.path[:0] = [str(here), str(here.parents[1])]; import test_without_lightning as t; "
        "t.train(sys.argv[2], sys.argv[3]); "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in t.LIGHTNING)))"
    )
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(Path(__file__).parent),
            str(log_dir),
            str(wandb_dir),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []  # Lightning was never imported

    reader = ProjectorReader(tmp_path)
    (run,) = reader.runs()
    assert reader.names(run) == ["encoder/validate/step_000000099"]
    header, rows = parse_metadata(reader.metadata(run, "encoder/validate/step_000000099"))
    assert header is None and len(rows) == 256
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert [s.step for s in events.Scalars("~learnscope/health/grad_norm/0")] == [0, 25, 50, 75]
    assert [s.step for s in events.Scalars("~learnscope/autocorrelation/params/0/lag_1")] == [
        49,
        99,
    ]
    assert events.Scalars("collapse/encoder/rankme")
    assert events.Tensors("custom_scalars__config__")

    (run_dir,) = wandb_dir.rglob("offline-run-*")
    history = wandb_history(run_dir)
    assert [
        h["trainer/global_step"]
        for h in history
        if "~learnscope/autocorrelation/params/0/lag_1" in h
    ] == [
        49,
        99,
    ]
    assert any("~learnscope/embeddings/encoder/validate" in h for h in history)
