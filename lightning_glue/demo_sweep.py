"""``learnscope demo --sweep``: the demo's model over six learning rates and weight decays.

A sweep as people run one: the demo's model (:func:`~learnscope.lightning_glue.demo.make_model`,
which calls ``save_hyperparameters()``, so each run's ``lr`` and ``weight_decay`` are its
hyper-parameters) trained once per setting of :data:`SWEEP`, from the same initial weights and
batch order, into one folder, ``<logdir>/sweep/version_<n>/<run>`` (the next free ``version_<n>``,
as Lightning numbers its runs, so a second sweep never writes into the first), with learnscope's
three callbacks on each and Lightning's ``EarlyStopping(check_finite=True)``, which ends a fit
whose validation loss is no longer a number, as a sweep's fits are usually ended.

Four runs are healthy and two are not, each in its own way (measured on the default seed):

* ``lr0.02_wd30``: a weight decay of 30 pulls the weights to zero faster than the loss can
  spread them; the embedding, spread in three directions at the start (effective rank 2.9 of
  3), keeps about one: ``embedding-collapse`` at the check of step 30 (RankMe 1.46, effective
  rank 1.25), not at those of steps 0, 10 and 20, and to the end of the fit.
* ``lr1000_wd0.01``: a learning rate of 1e3 where 1e-3 was meant; the loss grows to 1e34 and
  overflows to infinity at step 10: ``non-finite-loss`` at the check of step 10 (the gradients
  still finite), ``non-finite-output`` (the head's output, at step 11) and a ``tiny-gradient``
  of the head beside the others' huge ones; the weights are NaN after it, the validation
  loss too, and ``EarlyStopping`` ends the fit after its first epoch (at step 20: its status is
  ``finished``, as for any fit that EarlyStopping ends). No snapshot: every row is NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from learnscope.lightning_glue.demo import (
    SEED,
    callbacks,
    demo_trainer,
    digits_loaders,
    finish_wandb,
    lightning_quiet,
    make_model,
)
from learnscope.run_directory.summary import RunSummary

SWEEP_FOLDER = "sweep"  # under the log directory: sweep/version_<n>/<run>
PROJECT = "learnscope-demo"  # the W&B project, as the demo's
STEPS_PER_EPOCH = 20  # 1,257 training digits in batches of 64


@dataclass(frozen=True)
class SweepSetting:
    """One run of the sweep: its hyper-parameters and what it is meant to show.

    Example:
        >>> SweepSetting(2e-2, 30.0, "collapses").name
        'lr0.02_wd30'
    """

    lr: float
    weight_decay: float
    meant: str

    @property
    def name(self) -> str:
        """The run's folder and W&B name, from its hyper-parameters."""
        return f"lr{self.lr:g}_wd{self.weight_decay:g}"


SWEEP = (
    SweepSetting(2e-3, 1e-2, "healthy: a small learning rate, learns slowly"),
    SweepSetting(2e-2, 1e-2, "healthy: the demo's own setting"),
    SweepSetting(5e-2, 1e-2, "healthy: a larger learning rate"),
    SweepSetting(2e-2, 1.0, "healthy: a large weight decay"),
    SweepSetting(2e-2, 30.0, "collapses: a huge weight decay squeezes the embedding to one line"),
    SweepSetting(1e3, 1e-2, "diverges: a learning rate of 1e3 where 1e-3 was meant"),
)


@dataclass(frozen=True)
class SweepRun:
    """Where one run of the sweep wrote, and why its fit ended early, if it did.

    Attributes:
        setting: The run's hyper-parameters and what it is meant to show.
        tensorboard: Its TensorBoard run directory, ``<sweep folder>/<name>``.
        wandb: Its offline W&B run directory (what ``wandb sync`` takes), or ``None``.
        stopped: ``EarlyStopping``'s words when it ended the fit early, else ``None``.
    """

    setting: SweepSetting
    tensorboard: Path
    wandb: Path | None
    stopped: str | None


@dataclass(frozen=True)
class SweepRuns:
    """Where :func:`run_sweep` wrote: the sweep's folder and each run's."""

    folder: Path
    runs: tuple[SweepRun, ...]


def next_sweep_folder(logdir: str | Path) -> Path:
    """``<logdir>/sweep/version_<n>``, the first ``n`` not taken (Lightning's own numbering).

    Example:
        >>> import tempfile
        >>> next_sweep_folder(Path(tempfile.mkdtemp()) / "runs").name
        'version_0'
    """
    from lightning.pytorch.loggers import TensorBoardLogger

    numbering = TensorBoardLogger(str(logdir), name=SWEEP_FOLDER)
    return Path(logdir) / SWEEP_FOLDER / f"version_{numbering.version}"


def run_sweep(
    logdir: str | Path = "runs",
    epochs: int = 8,
    use_wandb: bool = False,
    seed: int = SEED,
    settings: tuple[SweepSetting, ...] = SWEEP,
    announce: Callable[[str], object] | None = None,
) -> SweepRuns:
    """Train the demo's model once per setting into ``<logdir>/sweep/version_<n>``.

    Every run starts from the same initial weights and batch order (``seed``), so that the
    runs differ by their hyper-parameters alone; the same seed gives the same sweep.

    Args:
        logdir: The log directory; the sweep's folder is made under it.
        epochs: Training epochs of each run (20 steps each).
        use_wandb: Also log each run to an offline W&B run, under ``<sweep folder>/wandb``.
        seed: The seed of the initial weights and of the batch order, the same for every run.
        settings: The runs (:data:`SWEEP` by default).
        announce: Given a line naming each run before it trains (``print``), if given.

    Returns:
        The sweep's folder and, per run, its TensorBoard and W&B run directories.
    """
    folder = next_sweep_folder(logdir)
    runs = []
    if announce is not None:
        announce(f"{len(settings)} runs of {epochs} epochs, seed {seed}, into {folder}")
    for number, setting in enumerate(settings, 1):
        if announce is not None:
            announce(
                f"run {number} of {len(settings)}, {setting.name} (lr {setting.lr:g}, weight "
                f"decay {setting.weight_decay:g}): {setting.meant}"
            )
        runs.append(_fit(folder, setting, epochs, use_wandb, seed))
    return SweepRuns(folder, tuple(runs))


def _fit(folder: Path, setting: SweepSetting, epochs: int, use_wandb: bool, seed: int) -> SweepRun:
    """One run of the sweep, its loggers finished after it."""
    from lightning.pytorch.callbacks import EarlyStopping
    from lightning.pytorch.loggers import TensorBoardLogger

    torch.manual_seed(seed)
    # default_hp_metric=False: Lightning writes no HParams experiment of its own (the saved
    # hyper-parameters and hp_metric only), so TensorBoard's HParams shows learnscope's columns
    board = TensorBoardLogger(str(folder), name="", version=setting.name, default_hp_metric=False)
    loggers: list[Any] = [board]
    if use_wandb:
        loggers.append(_wandb_logger(folder, setting))
    # check_finite ends the fit whose val/loss is NaN; a patience of every epoch ends no other
    stopping = EarlyStopping("val/loss", patience=epochs, check_finite=True)
    train, val = digits_loaders()
    with lightning_quiet():
        attached = [*callbacks(aligned_umap=False, check_every_n_steps=10), stopping]
        trainer = demo_trainer(epochs, loggers, attached, enable_progress_bar=False)
        model = make_model(setting.lr, weight_decay=setting.weight_decay, save_hyperparameters=True)
        trainer.fit(model, train, val)
    wandb_run = finish_wandb(loggers) if use_wandb else None
    return SweepRun(setting, Path(loggers[0].log_dir), wandb_run, _stopped(stopping))


def _stopped(stopping: Any) -> str | None:
    """Why ``EarlyStopping`` ended the fit early, in a few words, or ``None``."""
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    if stopping.stopping_reason == EarlyStoppingReason.NOT_STOPPED:
        return None
    if stopping.stopping_reason == EarlyStoppingReason.NON_FINITE_METRIC:
        return f"EarlyStopping: {stopping.monitor} is not finite"
    return f"EarlyStopping: {stopping.stopping_reason_message}"


def _wandb_logger(folder: Path, setting: SweepSetting) -> Any:
    """An offline W&B logger of one run, its run under ``<folder>/wandb``, grouped by sweep."""
    import os

    import wandb
    from lightning.pytorch.loggers import WandbLogger

    from learnscope.storage import open_run_folder

    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    wandb.setup()  # reads WANDB_SILENT now (see run_demo)
    open_run_folder(folder).make()  # wandb needs its save_dir made
    return WandbLogger(
        project=PROJECT,
        name=setting.name,
        group=f"{folder.parent.name}/{folder.name}",
        save_dir=str(folder),
        offline=True,
    )


def run_line(name: str, summary: RunSummary, steps: int, stopped: str | None = None) -> str:
    """One run of the sweep in one line: its status, last step and findings, from its summary.

    Args:
        name: The run's name.
        summary: Its summary (:func:`learnscope.read_summaries`).
        steps: The steps its fit would take to the end.
        stopped: Why its fit ended early, if it did.

    Example:
        >>> from learnscope.run_directory.summary import FindingCount, FirstFinding
        >>> collapsed = RunSummary("finished", last_step=160,
        ...     findings=(FindingCount("embedding-collapse", 1, 1),),
        ...     first_finding=FirstFinding("embedding-collapse", "encoder", 30))
        >>> print(run_line("wd30", collapsed, 160))
        wd30: finished at step 160; findings: embedding-collapse on encoder, first at step 30
        >>> print(run_line("lr1000", RunSummary("finished", last_step=20), 160, "stopped"))
        lr1000: finished at step 20 of 160 (stopped); no findings
    """
    step = "no step" if summary.last_step is None else f"step {summary.last_step}"
    if summary.last_step is not None and summary.last_step < steps:
        step += f" of {steps}"
    if stopped is not None:
        step += f" ({stopped})"
    status = summary.status if summary.error is None else f"{summary.status} ({summary.error})"
    line = f"{name}: {status} at {step}; "
    if not summary.findings:
        return line + "no findings"
    counts = ", ".join(
        count.code if count.seen == 1 else f"{count.code} x{count.seen}"
        for count in summary.findings
    )
    first = summary.first_finding
    if first is None:
        return f"{line}findings: {counts}"
    if len(summary.findings) == 1:
        return f"{line}findings: {counts} on {first.subject}, first at step {first.step}"
    return (
        f"{line}findings: {counts}; the first: {first.code} on {first.subject} at step {first.step}"
    )


def sweep_lines(sweep: SweepRuns, epochs: int, took_s: float) -> list[str]:
    """What ``learnscope demo --sweep`` prints at the end: what it wrote and what opens it.

    Each run's line comes from :func:`learnscope.read_summaries` of the sweep's folder (the
    same values the learnscope tab and ``learnscope export`` show), in the sweep's order.
    """
    from learnscope import read_summaries
    from learnscope.shell import shell_command

    summaries = read_summaries(sweep.folder)
    steps = epochs * STEPS_PER_EPOCH
    lines = [
        f"learnscope demo --sweep: {len(sweep.runs)} runs of {epochs} epochs in {took_s:.0f} s, "
        f"into {sweep.folder}:"
    ]
    for run in sweep.runs:
        name = run.tensorboard.name
        summary = summaries.get(name)
        if summary is None:
            lines.append(f"  {name}: no run record")
        else:
            lines.append("  " + run_line(name, summary, steps, run.stopped))
    lines.append(f"open them: {shell_command('tensorboard', '--logdir', sweep.folder)}")
    export = shell_command("learnscope", "export", sweep.folder, "--html", "sweep.html")
    lines.append(f"or as one page: {export}")
    uploads = [run.wandb for run in sweep.runs if run.wandb is not None]
    if uploads:
        lines.append(f"upload the W&B runs: {shell_command('wandb', 'sync', *uploads)}")
    return lines
