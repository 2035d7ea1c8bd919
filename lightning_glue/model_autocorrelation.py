"""ModelAutocorrelation: how correlated successive optimisation steps are, in every dashboard."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from torch import Tensor
from typing_extensions import override

from learnscope.autocorrelation import summarize_several
from learnscope.health.sharded import ParameterShard, is_sharded, parameter_shards
from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.records import AutocorrelationSummary
from learnscope.sampled_history import SampledParameterHistory, SampledSlice, plan_slices
from learnscope.trainable import TrainableChange, TrainableWatch

log = logging.getLogger("learnscope")

_PART = "model autocorrelation"
_SHOWS = "write_autocorrelation"


class ModelAutocorrelation(LearnscopeCallback):
    """Autocorrelation of sampled parameters and gradients over training steps, per module group.

    Shows, for each module group (``encoder``, ``head``...), whether successive optimisation
    steps are correlated: parameters that move slowly (lag-1 autocorrelation near 1, long
    integrated autocorrelation time tau) or gradients that flip sign from step to step
    (lag-1 near -1: oscillation, the edge of stability). Groups are those of the health
    checks (:func:`learnscope.health.group_name`): the parameters of the root module are in
    ``root``.

    **What a step is.** One record per optimizer step, so that lag ``k`` means ``k``
    optimizer steps. It is taken in the first ``on_before_optimizer_step`` of each
    ``trainer.global_step``: with an optimizer that evaluates its closure several times
    (``LBFGS``), the closure's later evaluations are not recorded, and the gradients recorded
    are those at the step's starting parameters (with SAM handed Lightning's closure, the one
    evaluation is at SAM's perturbed parameters, and those are recorded). With
    ``accumulate_grad_batches``, the hook runs only on the micro-batch that steps, where the
    gradients are complete. In manual optimization with several optimizers (a GAN), each
    ``optimizer.step()`` is a global step, and each optimizer has a history of its own
    parameters (those in its ``param_groups``), recorded when that optimizer steps: its
    series never repeat the values it kept while another optimizer stepped, and its
    gradients are its own. Trainable parameters that no optimizer holds are not sampled then;
    a parameter held by two optimizers belongs to the first. With one optimizer (or none)
    there is one history of every trainable parameter, recorded on every step.

    **What it costs.** At ``fit`` start one contiguous random slice of ``elements_per_tensor``
    elements is chosen per trainable parameter tensor (at most ``max_elements`` in all, over
    every optimizer's history together; see
    :class:`~learnscope.sampled_history.SampledParameterHistory`). At each step, where
    gradients are accumulated and unscaled, their values (and gradients) are copied into a
    ring buffer of the last ``buffer_size`` steps on the parameters' device, in one batched
    copy per kind and without synchronising with the host. The buffers hold
    ``2 * buffer_size * K * 4`` bytes for ``K`` sampled elements (``buffer_size * K * 4`` with
    ``analyze_grads=False``, which records no gradients): at most 128 MiB at the defaults
    (``K`` = 65,536; 64 MiB without gradients), whatever the model's size; 49 MiB for a
    12M-parameter transformer with 98 tensors.

    **What it shows.** Every ``analyze_every_n_steps`` optimizer steps (at global steps
    ``n - 1``, ``2n - 1``..., decided from ``trainer.global_step``), once a history holds more
    than ``max(lags)`` steps, the ACF of every sampled element is computed on the device
    (:func:`learnscope.autocorrelation.summarize_several`; means removed, never rescaled, so
    anti-correlation keeps its sign), and only the summary comes to the host, in one
    transfer: per kind (``params``, ``grads``) and group the mean ACF at every lag up to
    ``max(lags)``, the median and quartiles of the lag-1 autocorrelation, and tau when it can
    be trusted. With several optimizers every history that is long enough is in the one
    summary; a group with parameters in two optimizers is split, each part named
    ``{group}-optimizer{i}`` with ``i`` the optimizer's position in ``configure_optimizers``.
    Each writer shows it as its dashboard can (``write_autocorrelation``): TensorBoard as
    scalars ``autocorrelation/{kind}/{group}/lag_{k}`` (and ``tau``, ``rho1_median``,
    ``rho1_q25``, ``rho1_q75``), Custom Scalars charts and an ACF image per kind; wandb as the
    same scalars and a line-series chart per kind. Other loggers (CSV, MLflow...) get the
    scalars.

    Only the process of global rank zero records and analyses (parameters and reduced
    gradients are the same on every rank, and nothing here is a collective); other ranks
    allocate nothing. With sharded parameters (FSDP2's ``ModelParallelStrategy``, FSDP1's
    ``FSDPStrategy``) the slices are chosen by the original parameters' names and sizes, as
    for the unsharded model, and every rank records the part of them its shard holds (views of
    its local tensor, no communication); at an analysis, each group's figures are summed over
    the ranks in one all-reduce per kind (never the histories), and rank zero writes the
    summary the unsharded model would give for the same elements.

    **Fine-tuning.** Parameters that start or stop training during the fit (Lightning's
    ``BackboneFinetuning``, which unfreezes a backbone and adds it to the optimizer as a new
    param group, or any callback that flips ``requires_grad``) change what is sampled: a fit
    may even start with nothing trainable. Before each optimizer step the callback compares
    each optimizer's number of param groups, and the ``requires_grad`` of 32 parameters in
    turn, with what it saw last (:class:`~learnscope.trainable.TrainableWatch`: about 2
    microseconds of Python, nothing on the device), so a new param group is noticed at once
    and a flipped ``requires_grad`` within ``ceil(tensors / 32)`` steps. When the sampled
    parameters change, it samples the parameters that train now and their history starts
    again, said once at info level on the ``learnscope`` logger: the next analysis comes when
    the new history holds more than ``max(lags)`` steps. With nothing trainable it records
    nothing until something trains.

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
            (``encoder.layers.0.weight`` is in ``encoder`` at 1, ``encoder.layers`` at 2).
        lags: The lags charted over steps; each below ``buffer_size``. The mean ACF is
            computed up to the largest.
        seed: Seed for choosing the sampled slices.

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
    ) -> None:
        super().__init__()
        for name, value in (
            ("buffer_size", buffer_size),
            ("elements_per_tensor", elements_per_tensor),
            ("max_elements", max_elements),
            ("analyze_every_n_steps", analyze_every_n_steps),
            ("group_depth", group_depth),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"ModelAutocorrelation: {name} must be a positive int, got {value!r}"
                )
        lags = tuple(lags)
        if not lags or any(isinstance(k, bool) or not isinstance(k, int) for k in lags):
            raise ValueError(
                f"ModelAutocorrelation: lags must be a non-empty list of ints, got {lags}"
            )
        if min(lags) < 0 or max(lags) >= buffer_size:
            raise ValueError(
                f"ModelAutocorrelation: lags must be in 0..{buffer_size - 1} "
                f"(below buffer_size={buffer_size}), got {lags}"
            )
        self.buffer_size = buffer_size
        self.elements_per_tensor = elements_per_tensor
        self.max_elements = max_elements
        self.analyze_every_n_steps = analyze_every_n_steps
        self.analyze_grads = analyze_grads
        self.group_depth = group_depth
        self.lags = tuple(sorted(set(lags)))
        self.seed = seed
        # One history per optimizer with trainable parameters (one for all with one optimizer).
        self.histories: tuple[SampledParameterHistory, ...] = ()
        self._optimizer_indices: tuple[int, ...] = ()  # the optimizer of each history
        self._one_for_all = True  # one history recorded at every optimizer's step
        self._optimizers: list[tuple[Any, int]] = []  # (optimizer, its history) at fit start
        self._parameter_history: dict[int, int] = {}  # id(parameter) -> its history
        self._last_recorded: list[int | None] = []  # global step of each history's last record
        self._saved_state: dict[str, Any] | None = None  # loaded before the histories exist
        self._last_analysis: int | None = None
        self._watch: TrainableWatch | None = None  # notices parameters that start training
        self._sampled: tuple[Any, ...] = ()  # what the histories sample: see _sampled_key

    @property
    def history(self) -> SampledParameterHistory | None:
        """The history when there is exactly one (one optimizer), else None: see ``histories``.

        Example:
            >>> ModelAutocorrelation().history is None  # before fit
            True
        """
        return self.histories[0] if len(self.histories) == 1 else None

    @property
    def kinds(self) -> tuple[str, ...]:
        """What is recorded and analysed: ``("params", "grads")``, or ``("params",)``.

        Example:
            >>> ModelAutocorrelation(analyze_grads=False).kinds
            ('params',)
        """
        return ("params", "grads") if self.analyze_grads else ("params",)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The seed and the sampled slices (not the recorded values).

        ``{"history": ...}`` with one history, ``{"histories": [...]}`` (one per optimizer
        with trainable parameters, in optimizer order) with several.
        """
        if self.histories:
            return _state_of(self.histories, self._one_for_all)
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
        self._last_analysis = None
        self.histories = ()
        self._watch = None
        with self.guard(_PART, "fit start"):
            shards = parameter_shards(pl_module)
            if not trainer.is_global_zero and not is_sharded(shards):
                return
            self._watch = TrainableWatch(pl_module.named_parameters(), trainer.optimizers)
            self._sample(shards, list(trainer.optimizers))
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
            change = self._watch.poll()
            if change is not None:
                self._follow(trainer, pl_module, change, step)
            if not self.histories:
                return
            index = self._history_of(optimizer)
            if index is not None and self._last_recorded[index] != step:
                self.histories[index].record()
                self._last_recorded[index] = step
            if self._due(step):
                self._last_analysis = step
                self._analyse(trainer, step)

    @override
    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """Free the buffers, keeping the slices for checkpoints."""
        self._release()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Free the buffers, keeping the slices for checkpoints."""
        super().on_exception(trainer, pl_module, exception)
        self._release()

    def _new_history(
        self,
        named_parameters: Iterable[tuple[str, Tensor]] | Iterable[ParameterShard],
        slices: Sequence[SampledSlice] | None = None,
    ) -> SampledParameterHistory:
        return SampledParameterHistory(
            named_parameters,
            capacity=self.buffer_size,
            elements_per_tensor=self.elements_per_tensor,
            max_elements=self.max_elements,
            group_depth=self.group_depth,
            seed=self.seed,
            kinds=self.kinds,
            slices=slices,
        )

    def _per_optimizer(self, shards: Sequence[ParameterShard], optimizers: Sequence[Any]) -> None:
        """One history per optimizer, of its own parameters, sharing one element budget."""
        stepped_by = _stepped_by(optimizers)  # id(parameter) -> the first optimizer holding it
        stepped = [
            shard
            for shard in shards
            if shard.requires_grad and shard.numel > 0 and id(shard.holder) in stepped_by
        ]
        if not stepped:  # none yet: fine-tuning may add them to an optimizer later
            return
        plan = plan_slices(
            stepped,
            elements_per_tensor=self.elements_per_tensor,
            max_elements=self.max_elements,
            seed=self.seed,
        )
        histories, indices = [], []
        self._optimizers, self._parameter_history = [], {}
        for index, optimizer in enumerate(optimizers):
            own = [shard for shard in stepped if stepped_by[id(shard.holder)] == index]
            names = {shard.name for shard in own}
            slices = [piece for piece in plan if piece.name in names]
            if not slices:  # no trainable parameter, or none sampled: nothing to record
                continue
            self._optimizers.append((optimizer, len(histories)))
            self._parameter_history.update({id(s.holder): len(histories) for s in own})
            histories.append(self._new_history(own, slices))
            indices.append(index)
        self.histories = tuple(histories)
        self._optimizer_indices = tuple(indices)

    def _history_of(self, optimizer: Any) -> int | None:
        """The history an optimizer's step records into (None: it has none)."""
        if self._one_for_all:
            return 0
        for known, index in self._optimizers:
            if known is optimizer:
                return index
        # A wrapper of one of the optimizers: the history of its first sampled parameter.
        for group in getattr(optimizer, "param_groups", ()):
            for parameter in group["params"]:
                index = self._parameter_history.get(id(parameter))
                if index is not None:
                    return index
        return None

    def _release(self) -> None:
        """Drop the buffers and every reference to the optimizers, keeping the slices."""
        if self.histories:
            self._saved_state = _state_of(self.histories, self._one_for_all)
        self.histories = ()
        self._last_recorded = []
        self._optimizers, self._parameter_history = [], {}
        self._watch = None

    def _sample(self, shards: Sequence[ParameterShard], optimizers: Sequence[Any]) -> None:
        """Sample the parameters that train now (none: no history) in new histories."""
        self._one_for_all = len(optimizers) <= 1
        self._sampled = _sampled_key(shards, optimizers)
        self.histories, self._optimizer_indices = (), ()
        self._optimizers, self._parameter_history = [], {}
        if self._sampled and self._one_for_all:
            self.histories = (self._new_history(shards),)
            self._optimizer_indices = (0,)
        elif self._sampled:
            self._per_optimizer(shards, optimizers)
        self._last_recorded = [None] * len(self.histories)

    def _follow(self, trainer: Any, pl_module: Any, change: TrainableChange, step: int) -> None:
        """Sample anew when the parameters that train (or their optimizers) changed."""
        shards = parameter_shards(pl_module)
        optimizers = list(trainer.optimizers)
        if _sampled_key(shards, optimizers) == self._sampled:
            return  # such as a param group of parameters that were sampled already
        self._sample(shards, optimizers)
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

    def _due(self, step: int) -> bool:
        return (
            (step + 1) % self.analyze_every_n_steps == 0
            and step != self._last_analysis
            and any(history.num_steps > max(self.lags) for history in self.histories)
        )

    def _group_names(self) -> list[list[str]]:
        """Each history's group names; a name two histories share gets ``-optimizer{i}``."""
        count = Counter(name for history in self.histories for name in history.group_names)
        return [
            [f"{name}-optimizer{index}" if count[name] > 1 else name for name in h.group_names]
            for h, index in zip(self.histories, self._optimizer_indices, strict=True)
        ]

    def _analyse(self, trainer: Any, step: int) -> None:
        """Summarise on the device, move the summary to the host, hand it to every writer."""
        ready = [
            (h, names)
            for h, names in zip(self.histories, self._group_names(), strict=True)
            if h.num_steps > max(self.lags)
        ]
        sources = [
            ({kind: h.history(kind) for kind in h.kinds}, h.group_index, n) for h, n in ready
        ]
        sharded = [h.sharded_columns for h, _ in ready]
        summary = summarize_several(sources, step=step, lags=self.lags, sharded=sharded)
        if trainer.is_global_zero:
            self._write(trainer, summary)

    def _write(self, trainer: Any, summary: AutocorrelationSummary) -> None:
        """Hand the summary to every writer; one that cannot chart it gets its scalars."""
        self.writers(trainer, _SHOWS).write_autocorrelation(summary)

    def _adopt_saved_slices(self) -> None:
        assert self.histories and self._saved_state is not None
        saved = self._saved_state
        states = saved["histories"] if "histories" in saved else [saved.get("history")]
        if len(states) != len(self.histories):
            log.warning(
                "learnscope: ModelAutocorrelation cannot follow the elements of the checkpoint "
                "(it has %d sampled histories, this run %d, one per optimizer); it samples new "
                "ones with seed %d",
                len(states),
                len(self.histories),
                self.seed,
            )
            return
        for index, (history, state) in enumerate(zip(self.histories, states, strict=True)):
            try:
                history.load_state_dict(state)
            except ValueError as error:
                log.warning(
                    "learnscope: ModelAutocorrelation cannot follow the elements of the checkpoint"
                    "%s (%s); it samples new ones with seed %d",
                    "" if self._one_for_all else f" for optimizer {self._optimizer_indices[index]}",
                    error,
                    history.seed,
                )


def _stepped_by(optimizers: Sequence[Any]) -> dict[int, int]:
    """``id(parameter)`` -> the position of the first optimizer that holds it."""
    stepped_by: dict[int, int] = {}
    for index, optimizer in enumerate(optimizers):
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                stepped_by.setdefault(id(parameter), index)
    return stepped_by


def _sampled_key(shards: Sequence[ParameterShard], optimizers: Sequence[Any]) -> tuple[Any, ...]:
    """What is sampled: the trainable parameters (with several optimizers, each one's own).

    Empty when nothing is to be sampled.
    """
    trainable = [shard for shard in shards if shard.requires_grad and shard.numel > 0]
    if len(optimizers) <= 1:
        return tuple(shard.name for shard in trainable)
    stepped_by = _stepped_by(optimizers)
    return tuple(
        (shard.name, stepped_by[id(shard.holder)])
        for shard in trainable
        if id(shard.holder) in stepped_by
    )


def _state_of(histories: Sequence[SampledParameterHistory], one_for_all: bool) -> dict[str, Any]:
    """The checkpoint state: ``{"history": ...}`` for one history of every optimizer step."""
    if one_for_all:
        return {"history": histories[0].state_dict()}
    return {"histories": [history.state_dict() for history in histories]}
