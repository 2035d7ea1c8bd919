"""Step-time overhead of learnscope's callbacks on a small transformer, side by side.

Each variant is a list of callbacks added to the same Lightning fit. Variants run in
interleaved order (the order rotates in every repeat) so that drift in the machine's speed
falls on all of them alike; each run gives the median step time after a warm-up, and a variant's
figure is the median of its runs' medians. A step is timed from ``on_train_batch_start`` to
``on_train_batch_end`` (forward, backward, optimizer step and every callback hook), with the
device synchronised at both ends on CUDA. The mean step time is shown as well: it includes the
check steps that the median leaves out.

Add a variant by adding an entry to :data:`VARIANTS`.

**Against other tools**: ``wandb_watch`` is ``wandb.watch(model, log="all", log_freq=50)``
(histograms of every parameter and gradient every 50 steps) and ``grad_norm`` Lightning's
``grad_norm`` logged in ``on_before_optimizer_step`` every 50 steps. ``--logger wandb`` gives
every fit a ``WandbLogger`` (offline: set ``WANDB_MODE=offline``), which ``wandb_watch`` needs,
so that learnscope's writers write to W&B as the tools beside them do; the default is no logger
(learnscope's analyses still run, written nowhere)::

    WANDB_MODE=offline python benchmarks/overhead.py --logger wandb --variants none \
        model_autocorrelation training_helper wandb_watch grad_norm --steps 400 --repeats 6

Run (CPU, about two minutes on two cores)::

    python benchmarks/overhead.py --variants none training_helper naive_health --steps 400

On a GPU, ``--device cuda`` uses an 11M-parameter transformer.

**Compiled models**: ``--compile inductor`` (or another backend) fits ``torch.compile(model)``;
the table then also gives the number of graphs torch compiled in each run (torch's own
``counters["stats"]["unique_graphs"]``), which learnscope must not raise::

    python benchmarks/overhead.py --compile inductor --variants none all_three --steps 300

**Against another version of learnscope**, in the same run: ``--baseline DIR`` runs every
variant also with the ``learnscope`` package found in ``DIR`` (every fit then runs in a fresh
process, ``PYTHONPATH=DIR`` for the baseline's), interleaved with the current code's. ``DIR``
holds an assembled package, e.g. for the last commit::

    mkdir -p /tmp/base /tmp/base_pkg && git archive HEAD | tar -x -C /tmp/base
    cp -r /tmp/base/learnscope /tmp/base_pkg/ && cp -r /tmp/base/plugins \
        /tmp/base/lightning_glue /tmp/base_pkg/learnscope/
    python benchmarks/overhead.py --baseline /tmp/base_pkg --variants none training_helper

Only the variants of learnscope's callbacks (:data:`LEARNSCOPE`) run with the baseline too.

The time in hooks is measured per step: its median is what an ordinary step pays (the fixed
per-step cost), its mean includes the check and analysis steps. Work a callback hands to
learnscope's writer thread is not in its hooks: it shows in the step times only, where it slows
the training thread (two threads on a busy CPU, Python's lock between them), so read the mean
step (every step after the warm-up counted) beside the median.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import grad_norm
from naive_autocorrelation import NaiveAutocorrelation
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper


@dataclass(frozen=True)
class ModelSize:
    vocab: int
    d_model: int
    layers: int
    heads: int
    seq: int
    batch: int


SIZES = {
    "cpu": ModelSize(vocab=1000, d_model=128, layers=2, heads=4, seq=32, batch=16),
    "cuda": ModelSize(vocab=1000, d_model=384, layers=6, heads=6, seq=128, batch=32),
}


class Encoder(nn.Module):
    """Token and position embeddings and a transformer: ``[B, T]`` tokens to ``[B, T, D]``."""

    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        self.tokens = nn.Embedding(size.vocab, size.d_model)
        self.positions = nn.Parameter(torch.randn(size.seq, size.d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            size.d_model, size.heads, 4 * size.d_model, dropout=0.0, batch_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, size.layers, enable_nested_tensor=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.transformer(self.tokens(tokens) + self.positions[: tokens.shape[1]])


class SmallTransformer(pl.LightningModule):
    """Next-token prediction on random tokens: an ``encoder`` and a ``head``."""

    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        self.encoder = Encoder(size)
        self.head = nn.Linear(size.d_model, size.vocab)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        logits = self.head(self.encoder(tokens[:, :-1]))
        return nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


class NaiveHealth(Callback):
    """The naive approach: a host sync per parameter on check steps, two per forward."""

    def __init__(self, every_n_steps: int = 50) -> None:
        self.every_n_steps = every_n_steps
        self.grad_norms: dict[str, float] = {}
        self.embedding: tuple[float, float] = (0.0, 0.0)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl_module.encoder.register_forward_hook(self._on_forward)

    def _on_forward(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        detached = output.detach()
        self.embedding = (detached.median().item(), detached.var().item())

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self.grad_norms = {
                name: p.grad.norm().item()
                for name, p in pl_module.named_parameters()
                if p.grad is not None
            }


class WandbWatch(Callback):
    """``wandb.watch(model, log="all", log_freq=50)``: W&B histograms (needs a W&B run)."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        import wandb

        if wandb.run is None:
            raise RuntimeError("wandb_watch needs a W&B run: pass --logger wandb")
        wandb.watch(pl_module, log="all", log_freq=50)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        import wandb

        wandb.unwatch(pl_module)


class GradNormEvery50(Callback):
    """Lightning's ``grad_norm`` of every parameter, logged every 50 steps."""

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if trainer.global_step % 50 == 0:
            pl_module.log_dict(grad_norm(pl_module, norm_type=2))


VARIANTS: dict[str, Callable[[], list[Callback]]] = {
    "none": lambda: [],
    "training_helper": lambda: [TrainingHelper()],
    "naive_health": lambda: [NaiveHealth()],
    "model_autocorrelation": lambda: [ModelAutocorrelation()],
    "naive_autocorrelation": lambda: [NaiveAutocorrelation()],
    "all_three": lambda: [
        EmbeddingProjector("encoder", stages=("train",), every_n_train_steps=50),
        ModelAutocorrelation(),
        TrainingHelper(),
    ],
    "both_checks": lambda: [ModelAutocorrelation(), TrainingHelper()],
    "wandb_watch": lambda: [WandbWatch()],
    "grad_norm": lambda: [GradNormEvery50()],
}
# The variants of learnscope's callbacks: they run with --baseline too.
LEARNSCOPE = ("training_helper", "model_autocorrelation", "both_checks", "all_three")
LOGGERS = ("none", "wandb", "tensorboard")


class HookClock:
    """Total wall time spent inside the callbacks' hooks (Lightning hooks and forward hooks).

    On the CPU everything a hook does is synchronous, so this is the callbacks' own cost,
    measured inside one run and free of the run-to-run drift of a shared machine. On CUDA it
    misses queued kernels: use the step times there.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, callback: Any) -> Any:
        for name in dir(type(callback)):
            if name.startswith(("on_", "_on_")) and callable(getattr(callback, name)):
                setattr(callback, name, self._timed(getattr(callback, name)))
        return callback

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


class StepTimer(Callback):
    """Wall time of every training step, from batch start to batch end, and the hooks' share.

    ``hooks`` holds, per step, the time the :class:`HookClock` counted since the previous
    step ended (every hook of the step, ``on_train_batch_start`` included). ``cpu`` holds the
    training thread's CPU time of each step (batch start to end: what it computed, not what it
    waited for), ``process`` the CPU time of every thread of the process from the previous
    step's end to this one's (the writer thread's work included). CPU times hardly depend on
    what other processes do with the machine's cores; wall times do.
    """

    def __init__(self, device: str, clock: HookClock) -> None:
        self.cuda = device == "cuda"
        self.clock = clock
        self.times: list[float] = []
        self.hooks: list[float] = []
        self.cpu: list[float] = []
        self.process: list[float] = []
        self._start = self._cpu_start = 0.0
        self._process_at_end: float | None = None
        self._clock_at_end = 0.0

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self._sync()
        if self._process_at_end is None:
            self._process_at_end = time.process_time()
        self._start, self._cpu_start = time.perf_counter(), time.thread_time()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        self._sync()
        self.times.append(time.perf_counter() - self._start)
        self.cpu.append(time.thread_time() - self._cpu_start)
        process = time.process_time()
        self.process.append(process - (self._process_at_end or process))
        self._process_at_end = process
        self.hooks.append(self.clock.seconds - self._clock_at_end)
        self._clock_at_end = self.clock.seconds


@dataclass(frozen=True)
class Fit:
    """What one fit measured, per step (seconds), and the graphs torch compiled."""

    times: list[float]
    hooks: list[float]
    cpu: list[float]
    process: list[float]
    graphs: int


def make_logger(logger: str, folder: str) -> Any:
    """The fit's logger: ``False`` for ``"none"``, else a W&B (offline) or TensorBoard one."""
    if logger == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        return WandbLogger(project="overhead", save_dir=folder, offline=True)
    if logger == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(folder)
    return False


def run_once(
    variant: str,
    size: ModelSize,
    steps: int,
    device: str,
    backend: str | None = None,
    logger: str = "none",
) -> Fit:
    """One fit of ``steps`` steps with the variant's callbacks (compiled with ``backend``).

    Returns:
        The step times, the time inside the variant's hooks, the training thread's and the
        process's CPU time at each step, in seconds, and the number of graphs torch compiled
        (0 in eager mode).
    """
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    torch._dynamo.reset()
    counters.clear()
    model = SmallTransformer(size)
    fitted = model if backend is None else torch.compile(model, backend=backend)
    tokens = torch.randint(0, size.vocab, (steps * size.batch, size.seq + 1))
    loader = DataLoader(TensorDataset(tokens), batch_size=size.batch, shuffle=False)
    # The timer comes last, so that its batch-end time includes the variant's hooks.
    clock = HookClock()
    timer = StepTimer(device, clock)
    with tempfile.TemporaryDirectory(prefix="overhead-") as folder:
        fit_logger = make_logger(logger, folder)
        trainer = pl.Trainer(
            accelerator=device,
            devices=1,
            max_steps=steps,
            max_epochs=-1,
            logger=fit_logger,
            callbacks=[*[clock.wrap(c) for c in VARIANTS[variant]()], timer],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=folder,
        )
        trainer.fit(fitted, loader)
        if logger == "wandb":
            fit_logger.experiment.finish()
    graphs = counters["stats"]["unique_graphs"]
    return Fit(timer.times, timer.hooks, timer.cpu, timer.process, graphs)


@dataclass(frozen=True)
class Result:
    """Step times of one variant over its runs, in seconds."""

    run_medians: list[float]
    run_means: list[float]
    hook_seconds_per_step: list[float]  # per run: mean over all steps
    hook_median_per_step: list[float]  # per run: median over the steps after warm-up
    graphs: list[int]  # per run: graphs torch compiled
    cpu_per_step: list[float]  # per run: the training thread's CPU, mean after warm-up
    process_per_step: list[float]  # per run: every thread's CPU, mean after warm-up
    step_times: list[list[float]]  # per run: every step's time after warm-up

    @property
    def typical_mean(self) -> float:
        """The mean over the steps of each step's median over the runs.

        A burst of the machine's load falls on a step in one run and rarely on the same step
        in most runs, so it drops out; what every run pays at a given step (a check step, an
        analysis step and the steps after it) stays in.
        """
        steps = zip(*self.step_times, strict=True)  # every run has the same steps
        return statistics.fmean(statistics.median(step) for step in steps)

    @property
    def median(self) -> float:
        return statistics.median(self.run_medians)

    @property
    def mean(self) -> float:
        return statistics.median(self.run_means)

    @property
    def hooks(self) -> float:
        return statistics.median(self.hook_seconds_per_step)

    @property
    def hooks_median(self) -> float:
        return statistics.median(self.hook_median_per_step)


def run_in_process(
    variant: str,
    steps: int,
    device: str,
    threads: int,
    package: str | None,
    backend: str | None,
    logger: str = "none",
) -> Fit:
    """:func:`run_once` in a fresh Python, with ``package`` first on its path if given."""
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package, env.get("PYTHONPATH")]))
    command = [sys.executable, str(Path(__file__).resolve()), "--run-one", variant]
    command += ["--steps", str(steps), "--device", device, "--threads", str(threads)]
    command += ["--compile", backend] if backend is not None else []
    command += ["--logger", logger]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} ({package or 'current'}) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if package is not None and not result["learnscope"].startswith(package):
        raise RuntimeError(f"the baseline run imported learnscope from {result['learnscope']}")
    return Fit(**{key: value for key, value in result.items() if key != "learnscope"})


def benchmark(
    variants: list[str],
    steps: int,
    repeats: int,
    warmup: int,
    device: str,
    baseline: str | None = None,
    threads: int = 1,
    backend: str | None = None,
    logger: str = "none",
) -> dict[str, Result]:
    """Run every variant ``repeats`` times, interleaved; the per-run medians and means.

    With ``baseline`` (a directory holding another ``learnscope`` package), every variant of
    learnscope's callbacks (:data:`LEARNSCOPE`) also runs with that package, as
    ``"<variant> (baseline)"``; every fit then runs in a fresh process.
    """
    size = SIZES[device]
    runs = [(v, None) for v in variants]
    if baseline is not None:
        runs += [(v, baseline) for v in variants if v in LEARNSCOPE]
    label = {run: run[0] if run[1] is None else f"{run[0]} (baseline)" for run in runs}
    fits: dict[str, list[Fit]] = {label[r]: [] for r in runs}
    for repeat in range(repeats):
        shift = repeat % len(runs)
        for run in runs[shift:] + runs[:shift]:
            variant, package = run
            if baseline is None:
                fit = run_once(variant, size, steps, device, backend, logger)
            else:
                fit = run_in_process(variant, steps, device, threads, package, backend, logger)
            fits[label[run]].append(fit)
    return {
        name: Result(
            run_medians=[statistics.median(f.times[warmup:]) for f in done],
            run_means=[statistics.fmean(f.times[warmup:]) for f in done],
            hook_seconds_per_step=[sum(f.hooks) / len(f.hooks) for f in done],
            hook_median_per_step=[statistics.median(f.hooks[warmup:]) for f in done],
            graphs=[f.graphs for f in done],
            cpu_per_step=[statistics.fmean(f.cpu[warmup:]) for f in done],
            process_per_step=[statistics.fmean(f.process[warmup:]) for f in done],
            step_times=[f.times[warmup:] for f in done],
        )
        for name, done in fits.items()
    }


def markdown(results: dict[str, Result], baseline: str = "none") -> str:
    """A Markdown table of step times and overheads against ``baseline``.

    The median step is the median of the runs' median step times (their range in brackets);
    the mean step, the median of the runs' mean step times, includes the check steps; the time
    in hooks is the variant's own cost per step: its median over the steps (what an ordinary
    step pays) and its mean over all steps (check and analysis steps included), each also as a
    share of the median step of ``none``.
    """
    compiled = any(any(result.graphs) for result in results.values())
    lines = [
        "| variant | median step (ms) [run range] | overhead | mean step (ms) | mean overhead "
        "| hooks per step, median (ms) | median hooks / step | hooks per step, mean (ms) "
        "| mean hooks / step |" + (" graphs compiled per run |" if compiled else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if compiled else ""),
    ]
    base = results.get(baseline)
    for variant, result in results.items():
        over = "" if base is None else f"{100 * (result.median / base.median - 1):+.1f}%"
        mean_over = "" if base is None else f"{100 * (result.mean / base.mean - 1):+.1f}%"
        low, high = 1000 * min(result.run_medians), 1000 * max(result.run_medians)
        hooks = "" if base is None else f"{100 * result.hooks / base.median:.2f}%"
        fixed = "" if base is None else f"{100 * result.hooks_median / base.median:.2f}%"
        lines.append(
            f"| {variant} | {1000 * result.median:.2f} [{low:.2f}-{high:.2f}] | {over} "
            f"| {1000 * result.mean:.2f} | {mean_over} | {1000 * result.hooks_median:.3f} "
            f"| {fixed} | {1000 * result.hooks:.3f} | {hooks} |"
            + (f" {', '.join(map(str, result.graphs))} |" if compiled else "")
        )
    if base is not None and len(base.run_means) > 1:
        lines += ["", paired(results, baseline)]
    if base is not None:
        lines += ["", cpu_table(results, baseline)]
    return "\n".join(lines)


def cpu_table(results: dict[str, Result], baseline: str = "none") -> str:
    """CPU time per step (after the warm-up, every step counted), against ``baseline``.

    The training thread's (what it computed in its steps) and the whole process's (the writer
    and drawing threads' work included): medians over the runs, with their ranges.
    """
    base = results[baseline]
    base_cpu = statistics.median(base.cpu_per_step)
    base_process = statistics.median(base.process_per_step)

    def cell(values: list[float], against: float) -> str:
        middle = statistics.median(values)
        low, high = 1000 * min(values), 1000 * max(values)
        return f"{1000 * middle:.2f} [{low:.2f}-{high:.2f}] | {100 * (middle / against - 1):+.1f}%"

    lines = [
        "| variant | training thread CPU per step (ms) [run range] | overhead | process CPU per "
        "step, all threads (ms) [run range] | overhead |",
        "|---|---|---|---|---|",
    ]
    for variant, result in results.items():
        lines.append(
            f"| {variant} | {cell(result.cpu_per_step, base_cpu)} "
            f"| {cell(result.process_per_step, base_process)} |"
        )
    return "\n".join(lines)


def paired(results: dict[str, Result], baseline: str = "none") -> str:
    """Each variant against ``baseline`` in the same repeat: the spread of the overheads.

    Runs of one repeat follow each other within minutes, so the ratio of a variant's step to
    the baseline's in the same repeat is freer of the machine's slow drift than the ratio of
    medians over all runs. The median over the repeats is given with its range; the excess of
    a run's mean step over its median step (the check and analysis steps, and the machine's
    bursts) is given per variant, against the baseline's; and the typical mean step
    (:attr:`Result.typical_mean`: every step counted, each at its median over the runs).
    """
    base = results[baseline]

    def spread(ratios: list[float]) -> str:
        low, middle, high = (
            100 * (r - 1) for r in (min(ratios), statistics.median(ratios), max(ratios))
        )
        return f"{middle:+.1f}% [{low:+.1f}, {high:+.1f}]"

    lines = [
        "| variant | mean step / baseline's, same repeat: median [range] | median step, the "
        "same | mean step over median step, per run: median | typical mean step (ms) | its "
        "overhead |",
        "|---|---|---|---|---|---|",
    ]
    for variant, result in results.items():
        means = [v / b for v, b in zip(result.run_means, base.run_means, strict=True)]
        medians = [v / b for v, b in zip(result.run_medians, base.run_medians, strict=True)]
        excess = statistics.median(
            m / d - 1 for m, d in zip(result.run_means, result.run_medians, strict=True)
        )
        typical = result.typical_mean
        lines.append(
            f"| {variant} | {spread(means)} | {spread(medians)} | {100 * excess:+.1f}% "
            f"| {1000 * typical:.2f} | {100 * (typical / base.typical_mean - 1):+.1f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run every variant with the learnscope package in DIR (see the module help)",
    )
    parser.add_argument(
        "--compile", metavar="BACKEND", help="fit torch.compile(model, backend=BACKEND)"
    )
    parser.add_argument(
        "--logger",
        choices=LOGGERS,
        default="none",
        help="every fit's logger (wandb: offline; wandb_watch needs it); default none",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write every run's step and hook figures here"
    )
    parser.add_argument("--run-one", metavar="VARIANT", help=argparse.SUPPRESS)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: spinning thread pools make step times erratic "
        "on a shared CPU); 0 keeps torch's default",
    )
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.run_one is not None:  # one fit, for --baseline: JSON on the last line
        import learnscope

        fit = run_once(
            args.run_one, SIZES[args.device], args.steps, args.device, args.compile, args.logger
        )
        print(json.dumps(dataclasses.asdict(fit) | {"learnscope": learnscope.__file__}))
        return
    if args.warmup >= args.steps:
        parser.error("--warmup must be below --steps")
    size = SIZES[args.device]
    params = sum(p.numel() for p in SmallTransformer(size).parameters())
    results = benchmark(
        args.variants,
        args.steps,
        args.repeats,
        args.warmup,
        args.device,
        baseline=args.baseline,
        threads=args.threads,
        backend=args.compile,
        logger=args.logger,
    )
    compiled = f", torch.compile(backend={args.compile!r})" if args.compile else ""
    print(
        f"{args.device}{compiled}: {params / 1e6:.1f}M parameters, {size}, {args.steps} steps "
        f"({args.warmup} warm-up) x {args.repeats} repeats, {torch.get_num_threads()} "
        f"threads, torch {torch.__version__}, logger {args.logger}\n"
    )
    print(markdown(results))
    if args.json:
        runs = {name: dataclasses.asdict(result) for name, result in results.items()}
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
