"""On a CUDA device: no host synchronisation on ordinary steps, and FSDP on one GPU.

Every test here is skipped without CUDA (``benchmarks/gpu_proof.py`` runs them on a GPU).
``torch.cuda.set_sync_debug_mode("error")`` makes any synchronising call (``.item()``,
``.cpu()``, ``if tensor:``, a blocking copy) raise; it is switched on

* around every hook of the learnscope callbacks (Lightning hooks and forward hooks) on
  ordinary steps, where nothing is checked or analysed: learnscope's own code never syncs there;
* around whole ordinary training steps (forward, backward, optimizer step and every hook),
  when Lightning alone runs such a step without a sync on this machine (checked first).

The FSDP tests fit on one GPU with Lightning's ``FSDPStrategy`` (FSDP1) and
``ModelParallelStrategy`` (FSDP2, ``fully_shard``), with both callbacks, and compare their
figures with the same fit unsharded.

``LEARNSCOPE_CUDA_DRY_RUN=1`` runs the same code on the CPU with the sync checks switched off
(FSDP1, which Lightning refuses on a CPU, is skipped): it proves the tests themselves before
they first meet a GPU, and proves nothing about syncs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.kit.readers import csv_metrics

pl = pytest.importorskip("lightning.pytorch")

from learnscope.lightning_glue import ModelAutocorrelation, TrainingHelper  # noqa: E402

DRY_RUN = os.environ.get("LEARNSCOPE_CUDA_DRY_RUN") == "1"
DEVICE = "cpu" if DRY_RUN else "cuda"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (DRY_RUN or torch.cuda.is_available()), reason="needs a CUDA device"),
]

CHECK_EVERY = 5
ANALYZE_EVERY = 10
STEPS = 30


class Net(pl.LightningModule):
    """A small ``encoder`` / ``head`` model; ``configure_model`` shards it under FSDP2."""

    def __init__(self, fsdp2: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 4)
        self.fsdp2 = fsdp2

    def configure_model(self) -> None:
        if not self.fsdp2:
            return
        from torch.distributed.fsdp import fully_shard

        mesh = self.device_mesh["data_parallel"]
        fully_shard(self.encoder, mesh=mesh)
        fully_shard(self, mesh=mesh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # SGD: Adam(W) without capturable=True reads its step count with .item()
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def set_sync_mode(mode: str) -> None:
    if not DRY_RUN:
        torch.cuda.set_sync_debug_mode(mode)


def synchronize() -> None:
    if not DRY_RUN:
        torch.cuda.synchronize()


def loader() -> DataLoader:
    """Data already on the GPU, so the batch's transfer is no blocking copy."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS * 16, 32, generator=generator).to(DEVICE)
    y = torch.randint(0, 4, (STEPS * 16,), generator=generator).to(DEVICE)
    return DataLoader(TensorDataset(x, y), batch_size=16)


def ordinary(step: int) -> bool:
    """A step where neither callback checks nor analyses anything."""
    return step % CHECK_EVERY != 0 and (step + 1) % ANALYZE_EVERY != 0


def callbacks() -> list[Any]:
    return [
        TrainingHelper(check_every_n_steps=CHECK_EVERY),
        ModelAutocorrelation(buffer_size=32, analyze_every_n_steps=ANALYZE_EVERY, lags=(1, 2)),
    ]


class SyncGuard:
    """Switches sync debug mode to "error" around the wrapped hooks on ordinary steps."""

    def __init__(self) -> None:
        self.step = 0
        self.guarded_calls = 0

    def wrap(self, callback: Any) -> Any:
        for name in dir(type(callback)):
            if name.startswith(("on_", "_on_")) and callable(getattr(callback, name)):
                setattr(callback, name, self._guarded(getattr(callback, name)))
        return callback

    def _guarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if not ordinary(self.step):
                return method(*args, **kwargs)
            self.guarded_calls += 1
            set_sync_mode("error")
            try:
                return method(*args, **kwargs)
            finally:
                set_sync_mode("default")

        return guarded


class StepSync(pl.Callback):
    """First callback: notes the step (for ``SyncGuard``) and, with ``whole_step``, turns the
    "error" mode on for the whole of every ordinary step; ``StepEnd`` turns it off."""

    def __init__(self, guard: SyncGuard, whole_step: bool) -> None:
        self.guard = guard
        self.whole_step = whole_step
        self.guarded_steps = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self.guard.step = trainer.global_step
        if self.whole_step and ordinary(trainer.global_step):
            synchronize()
            self.guarded_steps += 1
            set_sync_mode("error")


class StepEnd(pl.Callback):
    def on_train_batch_end(self, *args: Any) -> None:
        set_sync_mode("default")

    def on_exception(self, *args: Any) -> None:
        set_sync_mode("default")


def fit(
    tmp_path: Path,
    with_callbacks: bool,
    whole_step: bool,
    strategy: Any = "auto",
    fsdp2: bool = False,
) -> dict[str, Any]:
    guard = SyncGuard()
    steps = StepSync(guard, whole_step)
    ours = [guard.wrap(c) for c in callbacks()] if with_callbacks else []
    trainer = pl.Trainer(
        accelerator=DEVICE,
        devices=1,
        strategy=strategy,
        max_steps=STEPS,
        logger=pl.loggers.CSVLogger(str(tmp_path), name="csv", version=0),
        callbacks=[steps, *ours, StepEnd()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        use_distributed_sampler=False,  # the same batches in the same order for every strategy
    )
    model = Net(fsdp2=fsdp2)
    trainer.fit(model, loader())
    return {
        "trainer": trainer,
        "model": model,
        "callbacks": ours,
        "guarded_calls": guard.guarded_calls,
        "guarded_steps": steps.guarded_steps,
    }


def lightning_alone_syncs(tmp_path: Path) -> str | None:
    """Why Lightning itself synchronises on an ordinary step here, or None when it does not."""
    try:
        fit(tmp_path / "alone", with_callbacks=False, whole_step=True)
    except RuntimeError as error:
        return str(error).splitlines()[0]
    return None


def test_callback_hooks_never_sync_on_ordinary_steps(tmp_path: Path) -> None:
    result = fit(tmp_path, with_callbacks=True, whole_step=False)
    assert result["trainer"].global_step == STEPS
    assert result["guarded_calls"] > 5 * 20  # several hooks on each of ~20 ordinary steps
    helper, autocorrelation = result["callbacks"]
    assert helper.switched_off == set() and autocorrelation.switched_off == set()


def test_whole_ordinary_steps_never_sync(tmp_path: Path) -> None:
    reason = lightning_alone_syncs(tmp_path)
    if reason is not None:
        pytest.skip(f"Lightning alone synchronises on an ordinary step here: {reason}")
    result = fit(tmp_path / "with", with_callbacks=True, whole_step=True)
    assert result["guarded_steps"] >= 20 and result["trainer"].global_step == STEPS


@pytest.mark.parametrize("strategy_name", ["fsdp1", "fsdp2"])
def test_fsdp_on_one_gpu_gives_the_unsharded_figures(tmp_path: Path, strategy_name: str) -> None:
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

    if strategy_name == "fsdp1":
        if DRY_RUN:
            pytest.skip("Lightning's FSDPStrategy refuses a CPU accelerator")
        strategy: Any = FSDPStrategy()
    else:
        strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1)
    sharded = fit(
        tmp_path / "sharded",
        with_callbacks=True,
        whole_step=False,
        strategy=strategy,
        fsdp2=strategy_name == "fsdp2",
    )
    names = [name for name, _ in sharded["trainer"].model.named_parameters()]
    assert sharded["guarded_calls"] > 5 * 20  # ordinary steps: still no sync in our hooks
    helper, autocorrelation = sharded["callbacks"]
    assert helper.switched_off == set() and autocorrelation.switched_off == set()
    fit(tmp_path / "single", with_callbacks=True, whole_step=False)
    compared = (
        "~learnscope/health/grad_norm",
        "~learnscope/health/weight_norm",
        "~learnscope/autocorrelation/",
    )
    got = csv_metrics(tmp_path / "sharded" / "csv" / "version_0" / "metrics.csv", compared)
    expected = csv_metrics(tmp_path / "single" / "csv" / "version_0" / "metrics.csv", compared)
    assert got.keys() == expected.keys(), names
    assert any(key.startswith("~learnscope/autocorrelation/") for _, key in expected)
    for entry, value in expected.items():
        assert got[entry] == pytest.approx(value, rel=1e-3, abs=1e-5, nan_ok=True), entry
