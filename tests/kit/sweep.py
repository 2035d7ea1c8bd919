"""A sweep of a dozen short real runs in one log directory, each as the description says.

:func:`write_sweep` fits :class:`SweepModel` (the kit's tiny classifier, with AdamW and
``save_hyperparameters()``: each run's ``lr`` and ``weight_decay`` are its hyper-parameters, no
two runs alike) once per :data:`SWEEP` entry, with learnscope's three callbacks (each snapshot
with its aligned PCA view) and two loggers, TensorBoard (``<logdir>/<name>``) and offline W&B
(``<logdir>/wandb/offline-run-*``), and returns a :class:`SweepRun` per run: its name, what it
is meant to show, the status and the finding codes its summary must hold
(``learnscope.read_summaries``), and its log folders.

The runs, each made the way a user's run gets so:

* healthy: eight learning rates and weight decays; no finding.
* collapsed: a weight decay of 15 pulls the weights to zero faster than the loss spreads them;
  the embedding keeps one direction after a few steps (``embedding-collapse`` from the check of
  step 6, not at step 0).
* non-finite: a learning rate of 1e3; the loss is NaN from step 11 (``non-finite-gradient`` at
  the check of step 12, ``non-finite-output`` after it).
* crashed: :class:`BadBatch` raises a ``ValueError`` at step 7, as a user's broken batch does:
  the fit fails (status ``failed``, the error kept).
* killed: the fit runs in a process of its own, killed (``SIGKILL``, as by a scheduler or the
  out-of-memory killer) at step 7 once learnscope's writers have written what they were given:
  its records hold no ``end`` entry, so its status is ``running``, as a run still being written
  reads (the summary cannot tell the two apart, and says so).

Every run starts from the same initial weights (seed 0) and batch order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from tests.kit.callbacks import learnscope_callbacks
from tests.kit.models import TinyClassifier, loaders, trainer

PROJECT = "learnscope-kit-sweep"  # the W&B project of every run
EPOCHS = 3  # 6 steps each (96 training points in batches of 16): 18 steps
STEPS = 18
CRASH_STEP = 7  # the crashed and the killed runs stop here
REPOSITORY = Path(__file__).resolve().parents[2]  # where ``tests`` imports from


class SweepModel(TinyClassifier):
    """The kit's classifier (``encoder`` 6 -> 16 -> 8, ``head`` 8 -> 3) with AdamW, saving its
    ``lr`` and ``weight_decay``."""

    def __init__(self, lr: float, weight_decay: float) -> None:
        super().__init__()
        self.save_hyperparameters()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )


class BadBatch(pl.Callback):
    """Raises ``ValueError`` when the training batch of ``step`` starts (a broken batch)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise ValueError(f"a batch the model cannot read, at step {self.step}")


class Killed(pl.Callback):
    """Kills its own process (``SIGKILL``) when the training batch of ``step`` starts, once
    learnscope's writers have written what they were given: no teardown, no ``end`` entry."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        from learnscope.lightning_glue import session

        if trainer.global_step == self.step:
            found = session.find(trainer)
            if found is not None:
                found.drain()
            os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Planned:
    """One run of the sweep as planned: hyper-parameters, what it shows, what its summary says.

    ``fault`` is how it ends otherwise than by finishing: ``"crash"`` (:class:`BadBatch`) or
    ``"kill"`` (:class:`Killed`, in a process of its own), else ``None``.
    """

    lr: float
    weight_decay: float
    shows: str
    status: str = "finished"
    findings: frozenset[str] = frozenset()
    fault: str | None = None

    @property
    def name(self) -> str:
        """The run's TensorBoard folder and W&B name, from its hyper-parameters."""
        return f"lr{self.lr:g}_wd{self.weight_decay:g}"


SWEEP = (
    Planned(1e-3, 0.0, "healthy: a small learning rate"),
    Planned(3e-3, 1e-2, "healthy"),
    Planned(1e-2, 1e-2, "healthy"),
    Planned(1e-2, 1e-1, "healthy: some weight decay"),
    Planned(3e-2, 0.0, "healthy"),
    Planned(3e-2, 1e-2, "healthy"),
    Planned(5e-2, 1e-3, "healthy: a large learning rate"),
    Planned(1e-2, 1.0, "healthy: a large weight decay"),
    Planned(
        5e-2,
        15.0,
        "collapsed: a huge weight decay squeezes the embedding to one direction (from step 6)",
        findings=frozenset({"embedding-collapse"}),
    ),
    Planned(
        1e3,
        1e-2,
        "non-finite: a learning rate of 1e3 where 1e-3 was meant; NaN from step 11",
        # the huge steps first kill ReLUs (structural-zero-gradient, info) and dwarf the head's
        # bias gradient (tiny-gradient); then the gradients and the outputs are NaN
        findings=frozenset(
            {
                "structural-zero-gradient",
                "tiny-gradient",
                "non-finite-gradient",
                "non-finite-output",
            }
        ),
    ),
    Planned(
        2e-2,
        1e-2,
        f"crashed: a ValueError at step {CRASH_STEP}",
        status="failed",
        fault="crash",
    ),
    Planned(
        2e-2,
        1e-1,
        f"still being written: its process killed at step {CRASH_STEP}",
        status="running",
        fault="kill",
    ),
)


@dataclass(frozen=True)
class SweepRun:
    """One run of :func:`write_sweep`: what it shows, what its summary must say, where it is.

    Attributes:
        name: The run's name: its TensorBoard folder under the log directory, its W&B name.
        shows: What it is meant to show, in words.
        lr: Its learning rate (a hyper-parameter).
        weight_decay: Its weight decay (a hyper-parameter).
        status: The status its summary must have.
        findings: The finding codes its summary must hold (seen), no more.
        tensorboard: Its TensorBoard run directory (``<logdir>/<name>``), with its run record.
        wandb: Its offline W&B run directory (``<logdir>/wandb/offline-run-*``).
        wandb_record: The folder of the W&B run's run record (``<wandb>/files``).
    """

    name: str
    shows: str
    lr: float
    weight_decay: float
    status: str
    findings: frozenset[str]
    tensorboard: Path
    wandb: Path
    wandb_record: Path


@dataclass(frozen=True)
class Sweep:
    """What :func:`write_sweep` wrote: the log directory and its runs, in the plan's order."""

    logdir: Path
    runs: tuple[SweepRun, ...]

    def run(self, name: str) -> SweepRun:
        """The run named ``name``."""
        (run,) = [run for run in self.runs if run.name == name]
        return run


def write_sweep(logdir: Path, plan: tuple[Planned, ...] = SWEEP) -> Sweep:
    """Fit every run of ``plan`` into ``logdir`` (TensorBoard and offline W&B), in order.

    The killed run is fitted in a process of its own (about the time of an import of torch and
    Lightning); the others in this one, each in a few seconds (about a minute in all on 2
    cores).
    """
    return Sweep(logdir, tuple(_write(logdir, planned) for planned in plan))


def _write(logdir: Path, planned: Planned) -> SweepRun:
    if planned.fault == "kill":
        wandb_run = _fit_killed(logdir, planned)
    else:
        wandb_run = fit_run(logdir, planned)
    return SweepRun(
        planned.name,
        planned.shows,
        planned.lr,
        planned.weight_decay,
        planned.status,
        planned.findings,
        logdir / planned.name,
        wandb_run,
        wandb_run / "files",
    )


def fit_run(logdir: Path, planned: Planned, kill: bool = False) -> Path:
    """Fit one run with both loggers; its offline W&B run directory.

    A crash (``planned.fault == "crash"``) is the fit's own ``ValueError``, caught here after
    Lightning and learnscope have seen it; ``kill`` kills this process at :data:`CRASH_STEP`.
    """
    import wandb
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    torch.manual_seed(0)
    logdir.mkdir(parents=True, exist_ok=True)
    wandb_logger = WandbLogger(
        project=PROJECT, name=planned.name, save_dir=str(logdir), offline=True
    )
    # no HParams experiment of Lightning's: TensorBoard's HParams shows learnscope's columns
    board = TensorBoardLogger(str(logdir), name="", version=planned.name, default_hp_metric=False)
    loggers = [board, wandb_logger]
    faults: list[Any] = []
    if planned.fault == "crash":
        faults.append(BadBatch(CRASH_STEP))
    if kill:
        faults.append(Killed(CRASH_STEP))
    train, val = loaders()
    callbacks = [*learnscope_callbacks(aligned_pca=True), *faults]
    fit = trainer(logdir, loggers, callbacks, max_epochs=EPOCHS)
    run_dir = Path(wandb_logger.experiment.dir).parent  # .../offline-run-*/files
    try:
        fit.fit(SweepModel(planned.lr, planned.weight_decay), train, val)
    except ValueError:
        if planned.fault != "crash":
            raise
        wandb.finish(exit_code=1)
    else:
        wandb.finish()
    return run_dir


_KILLED_FIT = """
import sys
from pathlib import Path
from tests.kit.sweep import SWEEP, fit_run
(planned,) = [p for p in SWEEP if p.name == sys.argv[2]]
fit_run(Path(sys.argv[1]), planned, kill=True)
"""


def _fit_killed(logdir: Path, planned: Planned) -> Path:
    """Fit ``planned`` in a child process killed mid-fit; its offline W&B run directory."""
    before = set((logdir / "wandb").glob("offline-run-*"))
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_FIT, str(logdir), planned.name],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if child.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the killed fit ended with {child.returncode}: {child.stderr[-2000:]}")
    (run_dir,) = set((logdir / "wandb").glob("offline-run-*")) - before
    return run_dir
