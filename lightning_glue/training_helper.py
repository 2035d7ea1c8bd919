"""TrainingHelper: tell the user, early and once, when training looks unhealthy."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from typing_extensions import override

from learnscope.collapse.row_buffer import EmbeddingRowBuffer
from learnscope.embeddings.batch_axis import layout_module
from learnscope.embeddings.output_layout import DEFAULT_MASK
from learnscope.health import CheckScope
from learnscope.lightning_glue import helper_checks as checks
from learnscope.lightning_glue.base import LearnscopeCallback, setting
from learnscope.lightning_glue.embedding_projector import EmbeddingProjector
from learnscope.lightning_glue.output_capture import OutputReading
from learnscope.lightning_glue.step_clock import StepClock
from learnscope.model.parameter_shards import is_sharded
from learnscope.model.trainable import TrainableWatch
from learnscope.plugins.pipeline.background import BackgroundWriters
from learnscope.records import Finding
from learnscope.run_directory.write_limits import WriteLimits

log = logging.getLogger("learnscope")

_GRADIENTS, _COLLAPSE, _INPUTS = "gradient checks", "embedding collapse", "input checks"
_TRACE = "non-finite output tracing"


class TrainingHelper(LearnscopeCallback):
    """A guide to good practice: findings about unhealthy training, in the logs and dashboards.

    Unused parameters, non-finite, zero and tiny gradients, heads that dwarf the encoder,
    embedding collapse and oversmoothing, non-finite outputs, bad inputs: each check and its
    rules in :mod:`learnscope.lightning_glue.helper_checks`. Checks run on the global steps that
    are multiples of ``check_every_n_steps`` and on the fit's last optimizer step when Lightning
    knows it (``trainer.estimated_stepping_batches``, in automatic optimization; not a fit cut
    short by early stopping or ``max_time``), so a fit of any length is checked at its end (no
    device sync on other steps), on rank zero (with sharded parameters every rank measures its
    shard). Findings go to the ``learnscope`` logger, each (code, subject) at most once per
    ``warn_every_n_steps``, and to the dashboards with ``~learnscope/health/...`` scalars. A
    check that fails is logged once and switched off.

    Args:
        check_every_n_steps: Global steps between checks.
        small_grad_threshold: Ratio to the median gradient per element under which one is tiny.
        embedding_module: Dotted name of the encoder checked for collapse and against the heads
            (``None``: not checked); a missing name fails at ``setup``, unless the default.
            Not given: the module of the ``EmbeddingProjector`` on the same trainer (the first
            of several), read with its ``select``, ``spatial`` and ``mask_fn`` unless those are
            given here, said once at info level; without one, ``"encoder"``, and a model
            without an ``encoder`` turns these checks off with one warning naming the
            candidates (:func:`~learnscope.lightning_glue.helper_checks.modules.missing_encoder`).
        head_modules: The heads' dotted names (default: the encoder's siblings with parameters).
        input_checks: Callables ``batch -> str | None``, run on check steps.
        histograms: Whether to write ``~learnscope/health/grad_norm``, the histogram of the
            gradient norm of each parameter tensor (off: a few unnamed numbers say less than the
            group norms).
        warn_every_n_steps: Fewest steps between two warnings about the same (code, subject).
        edge_index_fn: ``batch -> edge_index`` ``[2, E]`` between the rows: oversmoothing checks.
        select: Picks the embedding tensor from the module's output (tuple, dict, dataclass);
            an output that gives no tensor fails at the first capture, naming what it gave.
        group_depth: Module-name parts that make a group for the per-group norms, counted
            below the module that holds every trainable parameter (a wrapper ``model`` gives
            ``model.encoder``, ``model.head``:
            :func:`~learnscope.model.parameter_names.group_name`).
        max_head_to_encoder_ratio: Largest healthy ratio of head to encoder weights.
        embedding_rows_per_dim: Most rows per embedding dimension kept from a check step.
        max_embedding_rows: Cap on those rows.
        collapse_thresholds: :func:`~learnscope.collapse.metrics.judge_collapse` thresholds to
        override. spatial: Rows of feature maps over 1 x 1 and of channel-first ``[batch, channels,
            length]`` outputs: ``"mean"``, ``"max"`` or ``"pixels"``, as for
            ``EmbeddingProjector``.
        mask_fn: ``batch -> bool tensor`` of the rows that are data, or the batch's key for it
            (one ending in ``padding_mask`` marks padding), as for ``EmbeddingProjector``.
        graph_index_fn: ``batch -> LongTensor[rows]``, each row's graph (needs edge_index_fn).
        ids_fn: ``batch -> ids``, one per graph, named in findings (needs ``edge_index_fn``).
        write_limits: The limits of this fit's writes (a
            :class:`~learnscope.run_directory.write_limits.WriteLimits`: how long the end of the fit
            waits for them, the free-space reserve they leave). The learnscope callbacks of one fit
            share them: give them to one callback, or the same to each (different ones fail at
            ``setup``). ``None``: another callback's, else the defaults.

    Raises:
        ValueError: For bad arguments; unknown module names fail at ``setup``.

    Example:
        >>> from learnscope.health import CoordinateRangeCheck
        >>> helper = TrainingHelper(check_every_n_steps=100, input_checks=[CoordinateRangeCheck()])
        >>> helper.findings
        []
        >>> cnn = TrainingHelper(embedding_module="backbone", spatial="mean")
        >>> TrainingHelper().given("embedding_module")  # the projector's module, if any
        False
    """

    def __init__(
        self,
        check_every_n_steps: int = 50,
        small_grad_threshold: float = 1e-5,
        embedding_module: str | None = checks.DEFAULT_EMBEDDING_MODULE,
        head_modules: Sequence[str] | None = None,
        input_checks: Sequence[Callable[..., Any]] = (),
        histograms: bool = False,
        warn_every_n_steps: int = 1000,
        edge_index_fn: Callable[..., Any] | None = None,
        *,
        select: Callable[..., Any] | None = None,
        group_depth: int = 1,
        max_head_to_encoder_ratio: float = 100.0,
        embedding_rows_per_dim: float = 8.0,
        max_embedding_rows: int = 4096,
        collapse_thresholds: Mapping[str, float] | None = None,
        spatial: Literal["mean", "max", "pixels"] | None = None,
        mask_fn: str | Callable[..., Any] | None = DEFAULT_MASK,
        graph_index_fn: Callable[..., Any] | None = None,
        ids_fn: Callable[..., Any] | None = None,
        write_limits: WriteLimits | None = None,
    ) -> None:
        super().__init__(write_limits)
        self.settings = settings = checks.HelperSettings(
            check_every_n_steps,
            small_grad_threshold,
            embedding_module,
            head_modules,
            input_checks,
            histograms,
            warn_every_n_steps,
            edge_index_fn,
            select,
            group_depth,
            max_head_to_encoder_ratio,
            embedding_rows_per_dim,
            max_embedding_rows,
            collapse_thresholds,
            spatial,
            mask_fn,
            graph_index_fn,
            ids_fn,
        )
        self._report, self._clock = checks.FindingReport(warn_every_n_steps), StepClock()
        self._unused, self._loss = checks.UnusedParameters(), checks.StepLoss()
        self._trace, self._ranks = checks.NonFiniteTrace(), checks.Ranks()
        self._gradients = checks.GradientCheck(settings)
        self._collapse = checks.CollapseCapture(settings)
        self._watch: TrainableWatch | None = None  # notices parameters that start training
        self._loaded = False  # state came from load_state_dict before this fit's setup
        self._first_step = 0  # the fit's first global step: its weights are the starting ones
        self._last_step: int | None = None  # the fit's last optimizer step, when known
        self._ranks_judged = False  # a check of this fit had enough rows to judge the ranks
        self._said_too_few = False  # a check that could not judge the ranks was said
        self._told: str | None = None  # the module taken from a projector, as last said

    check_every_n_steps = setting("check_every_n_steps")
    small_grad_threshold = setting("small_grad_threshold")
    embedding_module = setting("embedding_module")
    histograms = setting("histograms")
    warn_every_n_steps = setting("warn_every_n_steps")
    edge_index_fn = setting("edge_index_fn")
    select = setting("select")
    group_depth = setting("group_depth")
    max_head_to_encoder_ratio = setting("max_head_to_encoder_ratio")
    embedding_rows_per_dim = setting("embedding_rows_per_dim")
    max_embedding_rows = setting("max_embedding_rows")
    spatial = setting("spatial")
    mask_fn = setting("mask", "``mask_fn``, an import path resolved (read-only).")
    graph_index_fn = setting("graph_index_fn")
    ids_fn = setting("ids_fn")

    @property
    def head_modules(self) -> list[str] | None:
        """The heads' dotted names as given, as a list (``None``: the encoder's siblings)."""
        given = self.settings.head_modules
        return None if given is None else list(given)

    @property
    def input_checks(self) -> list[Callable[..., Any]]:
        """The input checks, as a list (read-only: a new list each time)."""
        return list(self.settings.input_checks)

    @property
    def collapse_thresholds(self) -> dict[str, float]:
        """The collapse thresholds given (``{}``: the defaults), as a new dict each time."""
        return dict(self.settings.collapse_thresholds or {})

    @property
    def findings(self) -> list[Finding]:
        """Every finding so far, one per (code, subject), as in the dashboards' table.

        Example:
            >>> TrainingHelper().findings
            []
        """
        return self._report.findings

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Resolve the module names (failing on unknown ones); a new fit starts a new table."""
        super().setup(trainer, pl_module, stage)
        self.release()
        if stage == "fit" and not self._loaded:
            self._report.restart()
            self._unused.restart()
            self._gradients.forget_optimizers()
        self._clock.reset()
        name, taken = self._embedding_module(trainer, pl_module)
        encoder = self._gradients.encoder = checks.resolve_encoder(pl_module, name)
        if encoder is None and name is not None:  # the checks are off: say so
            self._report.warn_once(checks.missing_encoder(pl_module), trainer.is_global_zero)
        heads = self.settings.head_modules
        self._gradients.heads = checks.resolve_heads(pl_module, encoder, heads)
        with self.guard(_TRACE, "setup"):
            self._trace.attach(pl_module)
        if encoder is not None:
            reading = dataclasses.replace(self.settings.reading(encoder), **taken)
            with self.guard(_COLLAPSE, "setup"):
                guard = functools.partial(self.guard, _COLLAPSE)
                module = pl_module.get_submodule(encoder)
                self._collapse.attach(reading, module, guard, layout_module(pl_module, encoder))

    def _embedding_module(self, trainer: Any, pl_module: Any) -> tuple[str | None, dict[str, Any]]:
        """The module checked, and how the projector whose module it is reads it (if any).

        The module given, else the first projector's, read with that projector's ``select``,
        ``spatial`` and ``mask_fn`` (from its settings) where this helper was given none. A
        projector's module the model lacks is not taken (the projector's own ``setup`` names
        the modules there are).
        """
        if self.given("embedding_module"):
            return self.embedding_module, {}
        attached = getattr(trainer, "callbacks", None) or []
        projectors = [c for c in attached if isinstance(c, EmbeddingProjector)]
        names = {name for name, _ in pl_module.named_modules() if name}
        if not projectors or projectors[0].module not in names:
            return self.embedding_module, {}
        projector: OutputReading = projectors[0].settings.reading
        taken = [name for name in ("select", "spatial", "mask_fn") if not self.given(name)]
        message = _taken_from(projectors, taken)
        if message != self._told and trainer.is_global_zero:
            log.info(message)
        self._told = message
        return projector.module, {name: getattr(projector, name) for name in taken}

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Release; name the unused parameters when DDP stopped because of them."""
        super().on_exception(trainer, pl_module, exception)
        if trainer.is_global_zero and (advice := self._unused.advice(exception, pl_module)):
            log.error("learnscope: %s", advice)

    @override
    def release(self) -> None:
        """Remove the hooks and drop what the checks captured."""
        self._collapse.detach()  # no reference to the model is kept after a fit
        self._trace.disarm()
        self._loss.clear()

    @override
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Note whether the strategy sharded the parameters; the next ``setup`` starts afresh."""
        self._loaded, self._watch, self._last_step = False, None, None
        self._ranks = checks.Ranks(zero=trainer.is_global_zero)
        self._report.rank_zero = trainer.is_global_zero
        with self.guard(_GRADIENTS, "fit start"):
            self._ranks = checks.Ranks(trainer.is_global_zero, is_sharded(pl_module))
            if self._ranks.measure:
                self._watch = TrainableWatch(pl_module.named_parameters(), trainer.optimizers)

    @override
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Note the fit's first step; make its last optimizer step a check step, when known."""
        self._first_step = trainer.global_step
        self._ranks_judged = self._said_too_few = False
        with self.guard(_GRADIENTS, "train start"):
            self._last_step = _last_step(trainer, pl_module)

    def _measuring(self) -> bool:  # this rank measures gradients in this batch: a check step
        clock = self._clock
        every = self.settings.check_every_n_steps
        due = clock.is_check_step(every) or clock.batch_step == self._last_step
        return self._ranks.measure and due

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Decide whether this batch belongs to a check step; start the step's checks."""
        self._collapse.batch_started()
        clock = self._clock
        clock.start_batch(trainer.global_step)
        step, measuring = clock.batch_step, self._measuring()
        self._loss.start_batch(keep=measuring)
        if self._trace.requested and self.is_on(_TRACE):
            self._trace.arm_if_requested()
        if clock.ended_unseen:
            self._collapse.drop()  # rows of a step whose end went unseen are never judged
        if measuring and clock.first_micro_batch:
            self._loss.start_step()
            if self._ranks.zero:  # other ranks of a sharded model: gradients only
                self._start_checks(trainer, batch, step)
        self._collapse.start_batch(batch, step)  # captured while a check collects rows

    def _start_checks(self, trainer: Any, batch: Any, step: int) -> None:
        """A check step's first micro-batch: the input checks, and the rows for collapse."""
        input_checks = self.settings.input_checks
        if input_checks and self.is_on(_INPUTS):
            with self.guard(_INPUTS, f"step {step}"):
                found = checks.input_findings(input_checks, batch, step)
                self._report.add(found, step, CheckScope.of(["input-range"]))
        if not self.is_on(_COLLAPSE):
            return
        self._judge_unfinished(trainer, "end" if step == self._last_step else "check")
        needed = self.settings.thresholds.min_rows_per_dim
        trained = step > self._first_step  # no verdict on the starting weights: no need to wait
        self._collapse.start_step(step, needed if trained else 0.0)

    @override
    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Tell the encoder's capture that a batch starts.

        It keeps a compiled model's graphs the same at every step (see
        :mod:`~learnscope.lightning_glue.encoder_capture`).
        """
        self._collapse.batch_started()

    on_test_batch_start = on_validation_batch_start
    on_predict_batch_start = on_validation_batch_start

    @override
    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        """Keep the batch's first loss on check steps; name a non-finite module when tracing."""
        self._finish_trace()
        self._loss.take(loss)  # the batch's first, on check steps

    @override
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """Judge unused parameters after a first round; check gradients on check steps."""
        step = trainer.global_step
        first_call = self._clock.optimizer_call(step)  # later ones: LBFGS closure evaluations
        on = self.is_on(_GRADIENTS)
        change = self._watch.poll() if self._watch is not None and on else None  # about 2 us
        if change is not None:
            with self.guard(_GRADIENTS, f"step {step}"):  # fine-tuning: new ones judged afresh
                self._unused.follow(change.added)
                self._gradients.follow(pl_module, change.added, self.settings.head_modules)
        first_step = self._gradients.note_step(optimizer)
        if self._ranks.measure and not self._unused.complete and self.is_on(_GRADIENTS):
            with self.guard(_GRADIENTS, f"step {step}"):
                found = self._unused.observe(pl_module, optimizer, trainer.optimizers, step)
                self._report.add(found, step)
        if not (first_call and self._measuring() and self.is_on(_GRADIENTS)):
            return
        with self.guard(_GRADIENTS, f"step {step}"):
            loss = self._loss.value(trainer, pl_module)
            found = self._gradients.check(trainer, pl_module, optimizer, loss, not first_step)
            if found is not None and self._ranks.zero:  # other ranks: in the sums only
                if found.non_finite:
                    self._trace.request()
                self._publish(trainer, step, found)

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Name a non-finite module when tracing; judge collapse when a check step is over."""
        step = self._clock.batch_step
        self._finish_trace()
        buffer = self._collapse.end_batch(self._clock.end_batch(trainer.global_step))
        if buffer is not None:
            with self.guard(_COLLAPSE, f"step {step}"):
                self._judge_collapse(trainer, buffer)
        if self._report.take_new():
            self._write_findings(trainer, step)

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Judge rows still waiting for more; write the findings table once more.

        So a healthy run says so in the dashboards, and each finding's life is as of the end.
        """
        if self.is_on(_COLLAPSE):
            self._judge_unfinished(trainer, "end")
            self._report.take_new()
        self._write_findings(trainer, trainer.global_step)

    def _finish_trace(self) -> None:  # after the forward, before the optimizer steps
        if self._trace.armed:
            step = self._clock.batch_step
            with self.guard(_TRACE, f"step {step}"):
                self._report.add(self._trace.finish(step), step)

    def _judge_unfinished(self, trainer: Any, cut_by: Literal["check", "end"]) -> None:
        """Judge rows captured while waiting for enough of them, cut short by a check or the end."""
        buffer = self._collapse.unfinished()
        if buffer is not None:
            with self.guard(_COLLAPSE, f"step {self._collapse.last_step}"):
                self._judge_collapse(trainer, buffer, cut_by)

    def _judge_collapse(
        self,
        trainer: Any,
        buffer: EmbeddingRowBuffer,
        cut_by: Literal["check", "end"] | None = None,
    ) -> None:
        """Judge the rows of a check, at its step; say once when too few to judge the ranks.

        A warning when a buffer was full without enough rows (the caps), or the steps up to the
        next check gave too few; an info line when the fit ended (or reached its last step,
        a check step too) before any check of the fit could judge the ranks.
        """
        module, most_rows = self._collapse.module or "", buffer.max_rows
        num_rows, dim = buffer.num_rows, buffer.rows().shape[1]
        first, last = self._collapse.first_step, self._collapse.last_step
        thresholds = self.settings.collapse_thresholds or {}
        judged = checks.collapse_report(buffer, module, first, thresholds, last)
        if judged is None:
            return
        too_few = checks.too_few_rows(module, num_rows, dim, (first, last), thresholds, most_rows)
        self._ranks_judged |= too_few is None
        if too_few and first > self._first_step and not self._said_too_few:
            ended = cut_by == "end"
            if not (ended and self._ranks_judged) and trainer.is_global_zero:
                self._said_too_few = True
                log.log(logging.INFO if ended else logging.WARNING, too_few)
        self._publish(trainer, first, judged)

    def _dashboards(self, trainer: Any) -> BackgroundWriters:  # names one that cannot show them
        shown = ("write_histogram", "write_findings")
        shown = shown if self.settings.histograms else ("write_findings",)
        return self.writers(trainer, shown, warn_without_logger=False)

    def _write_findings(self, trainer: Any, step: int) -> None:
        """Hand the findings table to the writers, when one reads it."""
        writers = self._dashboards(trainer)
        if not writers.writes_nothing:
            writers.write_findings(self.findings, step)

    def _publish(self, trainer: Any, step: int, found: checks.CheckReport) -> None:
        """Report a check's findings (on the ``learnscope`` logger too); hand its numbers on.

        The findings are reported whether or not a writer reads them; the scalars and the
        histogram only go to writers that do.
        """
        if step <= self._first_step:  # the weights the fit started with: no verdict on them
            found = found.on_starting_weights()
        self._report.add(found.findings, step, found.scope)
        writers = self._dashboards(trainer)
        if writers.writes_nothing:
            return
        writers.write_scalars(found.scalars, step)
        if found.histogram is not None:
            writers.write_histogram(found.histogram)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The findings table and when each finding was last warned about."""
        return {"findings": self._report.state_dict(), **self._unused.state_dict()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the findings, so a resumed run does not warn again too soon."""
        self._report.load_state_dict(state_dict.get("findings", {}))
        self._loaded = True
        self._unused.load_state_dict(state_dict)


def _last_step(trainer: Any, pl_module: Any) -> int | None:
    """The global step of the fit's last optimizer step, or ``None`` when it is not known.

    Known in automatic optimization (one global step per optimizer step) from
    ``trainer.estimated_stepping_batches`` when that is a finite count: not under ``max_time``
    without ``max_steps`` or ``max_epochs``, nor for an iterable data set without a length and
    without ``max_steps``. A fit that early stopping cuts short ends before it.

    Example:
        >>> class Trainer:
        ...     estimated_stepping_batches = 6
        >>> class Model:
        ...     automatic_optimization = True
        >>> _last_step(Trainer(), Model())
        5
    """
    if not getattr(pl_module, "automatic_optimization", True):
        return None  # several optimizers may step in one batch: steps are not batches
    total = trainer.estimated_stepping_batches
    if isinstance(total, bool) or not isinstance(total, int | float) or not 1 <= total < math.inf:
        return None
    return int(total) - 1


def _taken_from(projectors: Sequence[EmbeddingProjector], taken: Sequence[str]) -> str:
    """What TrainingHelper says when it checks the module of the first of ``projectors``.

    Example:
        >>> print(_taken_from([EmbeddingProjector("backbone")], ["select", "spatial"]))
        learnscope: TrainingHelper checks 'backbone', the module of the EmbeddingProjector on \
this trainer (read with its select and spatial); pass TrainingHelper(embedding_module=...) to \
check another
    """
    module = projectors[0].module
    which = "the EmbeddingProjector"
    if len(projectors) > 1:
        modules = ", ".join(repr(p.module) for p in projectors)
        which = f"the first of {len(projectors)} EmbeddingProjectors ({modules})"
    listed = ", ".join(taken[:-1]) + " and " + taken[-1] if len(taken) > 1 else "".join(taken)
    read = f" (read with its {listed})" if taken else ""
    return (
        f"learnscope: TrainingHelper checks {module!r}, the module of {which} on this "
        f"trainer{read}; pass TrainingHelper(embedding_module=...) to check another"
    )
