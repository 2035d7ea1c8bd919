"""ModelAutocorrelation: how correlated successive optimisation steps are, in every dashboard."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from typing_extensions import override

from learnscope.autocorrelation.optimizer_histories import OptimizerHistories
from learnscope.autocorrelation.sampled_history import SampledParameterHistory
from learnscope.lightning_glue.autocorrelation_settings import AutocorrelationSettings
from learnscope.lightning_glue.base import LearnscopeCallback, setting
from learnscope.lightning_glue.step_clock import StepClock
from learnscope.model.parameter_shards import is_sharded, parameter_shards
from learnscope.model.trainable import TrainableChange, TrainableWatch
from learnscope.run_directory.write_limits import WriteLimits

log = logging.getLogger("learnscope")

_PART = "model autocorrelation"
_SUMMARY = "model autocorrelation summaries"  # rank zero's, of sharded histories
_SHOWS = "write_autocorrelation"


class ModelAutocorrelation(LearnscopeCallback):
    """Autocorrelation of sampled parameters and gradients over training steps, per module group.

    Shows, for each module group (``encoder``, ``head``...), whether successive optimisation
    steps are correlated: parameters that move slowly (lag-1 autocorrelation near 1, long
    integrated autocorrelation time tau) or gradients that flip sign from step to step
    (lag-1 near -1: oscillation, the edge of stability). Groups are those of the health
    checks (:func:`learnscope.health.group_name`): the parameters of the root module are in
    ``root``, a compiled sub-module's are named as its eager ones (``encoder.0``, not
    ``encoder._orig_mod``), and they are taken below the module that holds every trainable
    parameter (a wrapper child ``model`` gives ``model.encoder``, ``model.head``; LoRA
    adapters are grouped by layer), read again when fine-tuning changes what trains. A sparse
    embedding table (``nn.Embedding(sparse=True)`` with ``SparseAdam``, ``SGD`` or ``Adagrad``)
    is sampled like a dense one, its gradient read from the stored values (see
    :mod:`learnscope.autocorrelation.sampled_gradients`).

    **What a step is.** One record per optimizer step, so that lag ``k`` means ``k``
    optimizer steps, taken at the first ``on_before_optimizer_step`` of each
    ``trainer.global_step`` (:class:`~learnscope.lightning_glue.step_clock.StepClock`): an
    ``LBFGS`` step is recorded at the step's starting parameters (SAM, handed Lightning's
    closure, at its perturbed ones), an accumulated one on the micro-batch that steps. In
    manual optimization with several optimizers (a GAN) each ``optimizer.step()`` is a global
    step, and each optimizer has a history of its own parameters, recorded when it steps (see
    :mod:`learnscope.autocorrelation.optimizer_histories`); with one optimizer (or none) there is
    one history of every trainable parameter, recorded on every step.

    **What it costs.** At ``fit`` start one contiguous random slice of ``elements_per_tensor``
    elements is chosen per trainable parameter tensor (at most ``max_elements`` in all, over
    every optimizer's history together; see
    :class:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory`). At each step,
    where gradients are accumulated and unscaled, their values (and gradients) are copied into a
    ring buffer of the last ``buffer_size`` steps on the parameters' device, in one batched
    copy per kind and without synchronising with the host. The buffers hold
    ``2 * buffer_size * K * 4`` bytes for ``K`` sampled elements (``buffer_size * K * 4`` with
    ``analyze_grads=False``, which records no gradients): at most 128 MiB at the defaults
    (``K`` = 65,536; 64 MiB without gradients), whatever the model's size; 49 MiB for a
    12M-parameter transformer with 98 tensors. At an analysis the training thread only copies
    the histories (one copy per kind, on the device, no host sync) and hands the copy to the
    writers' thread, which computes the summary: the copy holds as many bytes as the buffers
    again until the summary is made, and at most one copy is held at a time (an analysis due
    while the previous one is still waiting for the writers waits for it).

    **What it shows.** Every ``analyze_every_n_steps`` optimizer steps (named by the global
    step after the optimizer step it ends: ``n``, ``2n``..., ``trainer.global_step`` once that
    step is done, the steps of the projector's snapshots), once a history holds more
    than ``max(lags)`` steps; and at the end of the fit (``on_train_end``, named by
    ``trainer.global_step``) unless its last step was just analysed, with the lags the history
    holds (those below its number of steps), so a fit shorter than ``analyze_every_n_steps``
    or than ``max(lags)`` still gets one analysis when it holds more steps than its smallest
    lag (a 6-step fit with the default lags: lags 1, 2 and 5). At each, the ACF of every
    sampled element is computed on the device, on the writers' thread (``learnscope-writer``;
    :func:`learnscope.autocorrelation.analysis.prepare_summary` on the training thread, then
    :meth:`~learnscope.autocorrelation.analysis.PendingSummary.finish`; means removed, never
    rescaled, so anti-correlation keeps its sign; on a device other than the CPU or CUDA, on the
    training thread), and only the summary comes to the host, in one transfer: per kind
    (``params``, ``grads``) and group the mean ACF at every lag up to
    ``max(lags)``, the median and quartiles of the lag-1 autocorrelation, and tau when it can
    be trusted. With several optimizers every history that is long enough is in the one
    summary; a group with parameters in two optimizers is split, each part named
    ``{group}-optimizer{i}`` with ``i`` the optimizer's position in ``configure_optimizers``.
    Each writer shows it as its dashboard can (``write_autocorrelation``): TensorBoard as
    scalars ``~learnscope/autocorrelation/{kind}/{group}/rho1_median`` and ``.../tau`` (with
    ``all_scalars=True`` also ``.../lag_{k}``, ``.../rho1_q25``, ``.../rho1_q75``), Custom
    Scalars charts and an ACF image per kind; wandb as the same scalars and a line-series chart
    per kind. Other loggers (CSV, MLflow...) get the scalars, on the training thread, at the
    first step after the writers' thread has made them.

    Only the process of global rank zero records and analyses (nothing here is a collective);
    other ranks allocate nothing. With sharded parameters (FSDP) the slices are chosen by the
    original parameters' names and sizes, every rank records the part its shard holds, and at
    an analysis each group's figures are summed over the ranks in one all-reduce per kind, so
    rank zero writes the summary the unsharded model would give for the same elements. The
    all-reduce needs each rank's power spectra: with sharded parameters they are computed on
    the training thread of every rank, and the all-reduce runs there, in the same order on
    every rank; only the arithmetic after it (the mean ACF, tau, the quartiles) moves to rank
    zero's writers' thread. Should that arithmetic fail there, it switches off rank zero's
    summaries only, so that rank zero still takes its part in every later all-reduce.

    **Fine-tuning.** Parameters that start or stop training during the fit
    (``BackboneFinetuning``'s new param groups, a flipped ``requires_grad``; a fit may even
    start with nothing trainable) change what is sampled, noticed before each optimizer step by
    :class:`~learnscope.model.trainable.TrainableWatch` (about 2 microseconds, nothing on the
    device): it samples the parameters that train now and their history starts again, said once at
    info level; the next analysis comes when it holds more than ``max(lags)`` steps.

    **Resuming.** The seed and the sampled slices (of every history) are saved in
    checkpoints, so a resumed run follows the same elements; the recorded history itself is
    not saved and fills up again.

    Args:
        buffer_size: How many of the last optimizer steps the history holds (T).
        elements_per_tensor: Length of the slice sampled from each parameter tensor.
        max_elements: Cap on the number of sampled elements over all tensors (K).
        analyze_every_n_steps: Analyse every this many optimizer steps.
        analyze_grads: Record and analyse gradients as well as parameters.
        group_depth: How many components of a parameter's module path name its group
            (``encoder.layers.0.weight`` is in ``encoder`` at 1, ``encoder.layers`` at 2),
            counted below the module that holds every trainable parameter.
        lags: The lags charted over steps; each below ``buffer_size``. The mean ACF is
            computed up to the largest.
        seed: Seed for choosing the sampled slices.
        all_scalars: Write every figure as a scalar (each of ``lags``, the lag-1 quartiles);
            by default only the lag-1 median and tau of each group, so that the user's own
            metrics are not buried. The pictures, the Custom Scalars charts of what is logged
            and the run record are the same either way.
        write_limits: The limits of this fit's writes (a
            :class:`~learnscope.run_directory.write_limits.WriteLimits`: how long the end of the fit
            waits for them, the free-space reserve they leave). The learnscope callbacks of one fit
            share them: give them to one callback, or the same to each (different ones fail at
            ``setup``). ``None``: another callback's, else the defaults.

    Raises:
        ValueError: On a non-positive size, an empty ``lags``, or a lag that is negative or
            not below ``buffer_size``.

    Example:
        >>> callback = ModelAutocorrelation(analyze_every_n_steps=50, lags=(1, 2, 5))
        >>> callback.lags, callback.buffer_size, callback.kinds
        ((1, 2, 5), 256, ('params', 'grads'))
    """

    def __init__(
        self,
        buffer_size: int = 256,
        elements_per_tensor: int = 256,
        max_elements: int = 65536,
        analyze_every_n_steps: int = 100,
        analyze_grads: bool = True,
        group_depth: int = 1,
        lags: Sequence[int] = (1, 2, 5, 10, 20, 50),
        seed: int = 0,
        all_scalars: bool = False,
        *,
        write_limits: WriteLimits | None = None,
    ) -> None:
        super().__init__(write_limits)
        self.settings = AutocorrelationSettings(
            buffer_size,
            elements_per_tensor,
            max_elements,
            analyze_every_n_steps,
            analyze_grads,
            group_depth,
            lags,
            seed,
            all_scalars,
        )
        self._histories = OptimizerHistories(self.settings.history)  # one per optimizer, or one
        self._clock = StepClock()  # the first call of each step, for each history
        self._saved_state: dict[str, Any] | None = None  # loaded before the histories exist
        self._watch: TrainableWatch | None = None  # notices parameters that start training
        self._analysed: int | None = None  # the step of this fit's latest analysis
        self._made: Future[Any] | None = None  # that analysis, until the writers have it all

    def __getstate__(self) -> dict[str, Any]:
        """This callback's state without the analysis the writers are making for this fit."""
        state = super().__getstate__()
        state["_made"] = None
        return state

    buffer_size = setting("buffer_size")
    elements_per_tensor = setting("elements_per_tensor")
    max_elements = setting("max_elements")
    analyze_every_n_steps = setting("analyze_every_n_steps")
    analyze_grads = setting("analyze_grads")
    group_depth = setting("group_depth")
    lags = setting("charted_lags", "The lags charted, sorted and each once (read-only).")
    seed = setting("seed")

    @property
    def all_scalars(self) -> bool:
        """Whether every figure is written as a scalar (read-only)."""
        return bool(self.settings.all_scalars)

    @property
    def histories(self) -> tuple[SampledParameterHistory, ...]:
        """The sampled histories: one per optimizer with trainable parameters, or one for all.

        Example:
            >>> ModelAutocorrelation().histories  # before fit
            ()
        """
        return self._histories.histories

    @property
    def history(self) -> SampledParameterHistory | None:
        """The history when there is exactly one (one optimizer), else None: see ``histories``.

        Example:
            >>> ModelAutocorrelation().history is None  # before fit
            True
        """
        return self.histories[0] if len(self.histories) == 1 else None

    kinds = setting(
        "kinds",
        """What is recorded and analysed: ``("params", "grads")``, or ``("params",)``.

        Example:
            >>> ModelAutocorrelation(analyze_grads=False).kinds
            ('params',)
        """,
    )

    @override
    def state_dict(self) -> dict[str, Any]:
        """The seed and the sampled slices (not the recorded values).

        ``{"history": ...}`` with one history, ``{"histories": [...]}`` (one per optimizer
        with trainable parameters, in optimizer order) with several.
        """
        if self.histories:
            return self._histories.state_dict()
        return dict(self._saved_state) if self._saved_state is not None else {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Follow the slices of a checkpoint, now or as soon as the histories exist."""
        saved = {key: state_dict[key] for key in ("history", "histories") if key in state_dict}
        if not saved:
            return
        self._saved_state = saved
        if self.histories:
            self._adopt_saved_slices()

    @override
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Choose the sampled slices and allocate the histories on the parameters' device."""
        self._clock.reset()
        self._histories = OptimizerHistories(self.settings.history)
        self._watch = self._analysed = self._made = None
        with self.guard(_PART, "fit start"):
            shards = parameter_shards(pl_module)
            if not trainer.is_global_zero and not is_sharded(shards):
                return
            self._watch = TrainableWatch(pl_module.named_parameters(), trainer.optimizers)
            self._histories.sample(shards, list(trainer.optimizers))
            if self.histories and self._saved_state is not None:
                self._adopt_saved_slices()
            if not self.histories:
                log.info(
                    "learnscope: ModelAutocorrelation: no parameter of %s trains at fit start; "
                    "sampling starts when some do",
                    type(pl_module).__name__,
                )

    @override
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """Follow the trainable parameters; record once per optimizer step; analyse when due."""
        if self._watch is None or not self.is_on(_PART):
            return
        with self.guard(_PART):
            step = trainer.global_step
            first_call = self._clock.optimizer_call(step)  # later: LBFGS closure evaluations
            change = self._watch.poll()
            if change is not None:
                self._follow(trainer, pl_module, change, step)
            if self._made is not None:
                self._deliver(trainer)
            histories = self._histories
            if not histories.histories:
                return
            index = histories.index_of(optimizer)
            if index is not None and self._clock.optimizer_call(
                step, (histories.generation, index)
            ):
                histories.histories[index].record()
            n = self.analyze_every_n_steps
            due = first_call and self._clock.is_check_step(n, step, offset=n - 1)
            if due and histories.ready(max(self.lags)):
                self._analyse(trainer, step + 1, self.lags)  # the step it ends

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Analyse the end of the fit with the lags the history holds, unless just analysed."""
        if self._watch is None or not self.is_on(_PART):
            return
        with self.guard(_PART, "fit end"):
            step = trainer.global_step
            lags = self._histories.lags_held(self.lags)
            if lags and self._analysed != step:
                self._analyse(trainer, step, lags)

    def _analyse(self, trainer: Any, step: int, lags: Sequence[int]) -> None:
        """Hand every history long enough for ``lags``, named ``step``, to the writers' thread.

        The training thread copies the histories (with sharded parameters: runs the
        reduction over the ranks, on every rank); the writers' thread computes the summary
        and writes it. One analysis at a time is held: the next waits for the one before.
        """
        writers = self.writers(trainer, _SHOWS) if trainer.is_global_zero else None
        if writers is not None and self._made is not None and not self._made.done():
            writers.drain()  # a slow writer: at most one copy of the histories is held
        pending = self._histories.prepare(step, lags)  # every rank: the collectives
        self._analysed = step
        # Sharded, a summary that fails on rank zero's writers' thread switches off the summaries
        # only: rank zero goes on taking its part in the collectives, as the other ranks do.
        part = _SUMMARY if self._histories.sharded else _PART
        if writers is None or writers.writes_nothing:
            return  # another rank's, or no writer reads it
        if not (self.is_on(_PART) and self.is_on(part)):
            return  # the one before failed
        make = functools.partial(pending.finish, all_scalars=self.all_scalars)
        if not pending.finishes_anywhere:  # a device not known to take a second thread
            writers.write_autocorrelation(make())
            return
        self._made = writers.submit_record(  # one that cannot chart it gets its scalars
            _SHOWS,
            make,
            label=f"autocorrelation step {step}",
            size=pending.nbytes,
            guard=functools.partial(self.parts.guard, part, f"step {step}"),
        )

    def _deliver(self, trainer: Any) -> None:
        """Once the writers' thread has written the latest analysis, hand it to the others.

        The writers that write on the training thread (a CSV or MLflow logger's) get it here.
        """
        if self._made is not None and self._made.done():
            self._made = None
            self.writers(trainer).deliver()

    @override
    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """Free the buffers, keeping the slices for checkpoints."""
        self._release()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Free the buffers, keeping the slices for checkpoints."""
        super().on_exception(trainer, pl_module, exception)
        self._release()

    def _release(self) -> None:
        """Drop the buffers and every reference to the optimizers, keeping the slices."""
        state = self._histories.release()
        if state is not None:
            self._saved_state = state
        self._watch = self._made = None  # the end of the fit delivers what it holds

    def _follow(self, trainer: Any, pl_module: Any, change: TrainableChange, step: int) -> None:
        """Sample anew when the parameters that train (or their optimizers) changed."""
        shards = parameter_shards(pl_module)
        optimizers = list(trainer.optimizers)
        if self._histories.samples(shards, optimizers):
            return  # such as a param group of parameters that were sampled already
        self._histories.sample(shards, optimizers)
        if self.histories:
            tensors = sum(len(history.state_dict()["names"]) for history in self.histories)
            what = (
                f"it samples the {tensors} parameter tensors that train now and their history "
                f"starts again (the next analysis when it holds more than {max(self.lags)} "
                "steps)"
            )
        else:
            what = "nothing trains now: it records nothing until some parameter trains"
        log.info(
            "learnscope: ModelAutocorrelation: the trainable parameters changed at step %d "
            "(%s); %s",
            step,
            change.describe(),
            what,
        )

    def _adopt_saved_slices(self) -> None:
        assert self.histories and self._saved_state is not None
        for problem in self._histories.adopt(self._saved_state):
            log.warning("learnscope: %s", problem)
