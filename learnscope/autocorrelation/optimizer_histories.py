"""OptimizerHistories: sampled parameter histories, one per optimizer, and their summary.

With one optimizer (or none) there is one history of every trainable parameter. With several
(a GAN in manual optimization) each optimizer has a history of its own parameters (those in its
``param_groups``; a parameter two optimizers hold belongs to the first), so that its series
never repeat the values it kept while another optimizer stepped, and the histories share one
element budget. Trainable parameters that no optimizer holds are not sampled then.

Example:
    >>> import torch
    >>> from learnscope.model.parameter_shards import parameter_shards
    >>> model = torch.nn.ModuleDict({"g": torch.nn.Linear(2, 2), "d": torch.nn.Linear(2, 1)})
    >>> optimizers = [torch.optim.SGD(model[name].parameters(), lr=0.1) for name in ("g", "d")]
    >>> histories = OptimizerHistories(HistorySettings(capacity=8))
    >>> histories.sample(parameter_shards(model), optimizers)
    >>> [h.group_names for h in histories.histories], histories.index_of(optimizers[1])
    ([['g'], ['d']], 1)
    >>> sorted(histories.state_dict())
    ['histories']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from learnscope.autocorrelation.analysis import PendingSummary, prepare_summary
from learnscope.autocorrelation.sampled_history import (
    SampledParameterHistory,
    SampledSlice,
    plan_slices,
)
from learnscope.model.parameter_shards import ParameterShard, groups_under
from learnscope.records import AutocorrelationSummary


def check_positive_ints(owner: str, values: Mapping[str, Any]) -> None:
    """Fail on a value that is not a positive int (a bool is not one), naming it.

    Raises:
        ValueError: ``"{owner}: {name} must be a positive int, got {value!r}"``.

    Example:
        >>> check_positive_ints("Callback", {"buffer_size": 0})
        Traceback (most recent call last):
        ...
        ValueError: Callback: buffer_size must be a positive int, got 0
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")


def check_lags(owner: str, lags: Sequence[Any], buffer_size: int) -> tuple[int, ...]:
    """The lags, sorted and distinct, when each is an int from 0 to ``buffer_size - 1``.

    Raises:
        ValueError: An empty ``lags``, one that is not an int, or one out of that range.

    Example:
        >>> check_lags("Callback", [5, 1, 1], buffer_size=8)
        (1, 5)
    """
    lags = tuple(lags)
    if not lags or any(isinstance(k, bool) or not isinstance(k, int) for k in lags):
        raise ValueError(f"{owner}: lags must be a non-empty list of ints, got {lags}")
    if min(lags) < 0 or max(lags) >= buffer_size:
        raise ValueError(
            f"{owner}: lags must be in 0..{buffer_size - 1} (below buffer_size={buffer_size}), "
            f"got {lags}"
        )
    return tuple(sorted(set(lags)))


@dataclass(frozen=True)
class HistorySettings:
    """How each history samples and how many steps it keeps (see SampledParameterHistory).

    Example:
        >>> HistorySettings(capacity=64).kinds
        ('params', 'grads')
    """

    capacity: int = 256
    elements_per_tensor: int = 256
    max_elements: int = 65536
    group_depth: int = 1
    seed: int = 0
    kinds: tuple[str, ...] = ("params", "grads")


class OptimizerHistories:
    """The sampled histories of a fit: one for all optimizers, or one per optimizer.

    Args:
        settings: How every history samples.
    """

    def __init__(self, settings: HistorySettings) -> None:
        self.settings = settings
        self.histories: tuple[SampledParameterHistory, ...] = ()
        self.optimizer_indices: tuple[int, ...] = ()  # the optimizer of each history
        self.one_for_all = True  # one history recorded at every optimizer's step
        self.generation = 0  # counts the samplings: a new one starts new histories
        self._optimizers: list[tuple[Any, int]] = []  # (optimizer, its history)
        self._parameter_history: dict[int, int] = {}  # id(parameter) -> its history
        self._sampled: tuple[Any, ...] = ()  # what the histories sample: see _sampled_key
        self._under = ""  # the module the groups are taken below (groups_under)

    def samples(self, shards: Sequence[ParameterShard], optimizers: Sequence[Any]) -> bool:
        """Whether the histories sample what these parameters and optimizers would give."""
        return _sampled_key(shards, optimizers) == self._sampled

    def sample(self, shards: Sequence[ParameterShard], optimizers: Sequence[Any]) -> None:
        """Sample the parameters that train now (none: no history) in new histories."""
        self.generation += 1
        self.one_for_all = len(optimizers) <= 1
        self._sampled = _sampled_key(shards, optimizers)
        self._under = groups_under(shards)  # of every trainable parameter, whichever optimizer
        self.histories, self.optimizer_indices = (), ()
        self._optimizers, self._parameter_history = [], {}
        if self._sampled and self.one_for_all:
            self.histories = (self._new_history(shards),)
            self.optimizer_indices = (0,)
        elif self._sampled:
            self._per_optimizer(shards, optimizers)

    def release(self) -> dict[str, Any] | None:
        """Drop the buffers and every reference to the optimizers; the state of the slices."""
        state = self.state_dict() if self.histories else None
        self.histories = ()
        self._optimizers, self._parameter_history = [], {}
        return state

    def index_of(self, optimizer: Any) -> int | None:
        """The history an optimizer's step records into (None: it has none)."""
        if self.one_for_all:
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

    @property
    def sharded(self) -> bool:
        """Whether a history samples sharded parameters (its analysis runs a collective)."""
        return any(history.sharded for history in self.histories)

    def ready(self, max_lag: int) -> bool:
        """Whether a history holds more than ``max_lag`` steps."""
        return any(history.num_steps > max_lag for history in self.histories)

    def lags_held(self, lags: Sequence[int]) -> tuple[int, ...]:
        """The ``lags`` the longest history holds (each below its number of steps).

        Empty when that leaves no positive lag: a lag ``k`` needs ``k + 1`` recorded steps.
        """
        longest = max((history.num_steps for history in self.histories), default=0)
        held = tuple(lag for lag in lags if lag < longest)
        return held if any(lag > 0 for lag in held) else ()

    def group_names(self) -> list[list[str]]:
        """Each history's group names; a name two histories share gets ``-optimizer{i}``."""
        count = Counter(name for history in self.histories for name in history.group_names)
        return [
            [f"{name}-optimizer{index}" if count[name] > 1 else name for name in h.group_names]
            for h, index in zip(self.histories, self.optimizer_indices, strict=True)
        ]

    def summarize(self, step: int, lags: Sequence[int]) -> AutocorrelationSummary:
        """The summary of every history holding more than ``max(lags)`` steps, on the device.

        :meth:`prepare` and its :meth:`~learnscope.autocorrelation.analysis.PendingSummary.finish`
        in one call. With sharded histories every rank calls it (one all-reduce per kind).
        """
        return self.prepare(step, lags).finish()

    def prepare(self, step: int, lags: Sequence[int]) -> PendingSummary:
        """The summary of every history holding more than ``max(lags)`` steps, to be finished.

        It holds a copy of each such history (``len(kinds) * T * K * 4`` bytes, as many as
        their ring buffers: see :attr:`~learnscope.autocorrelation.analysis.PendingSummary.nbytes`),
        which later steps do not change, so it may be finished on another thread
        (:func:`~learnscope.autocorrelation.analysis.prepare_summary`). With sharded histories every
        rank calls it (one all-reduce per kind, here) and it holds their figures summed over
        the ranks instead. Nothing here synchronises with the host.
        """
        ready = [
            (h, names)
            for h, names in zip(self.histories, self.group_names(), strict=True)
            if h.num_steps > max(lags)
        ]
        sources = [
            ({kind: h.history(kind) for kind in h.kinds}, h.group_index, n) for h, n in ready
        ]
        sharded = [h.sharded_columns for h, _ in ready]
        return prepare_summary(sources, step=step, lags=lags, sharded=sharded)

    def state_dict(self) -> dict[str, Any]:
        """``{"history": ...}`` for one history of every optimizer step, else ``{"histories"}``."""
        if self.one_for_all:
            return {"history": self.histories[0].state_dict()}
        return {"histories": [history.state_dict() for history in self.histories]}

    def adopt(self, saved: dict[str, Any]) -> list[str]:
        """Follow the slices of a checkpoint's :meth:`state_dict`; what could not be followed.

        Returns:
            One message per history that samples new slices instead (or one for all when the
            number of histories differs), to be logged as a warning.
        """
        states = saved["histories"] if "histories" in saved else [saved.get("history")]
        if len(states) != len(self.histories):
            return [
                "ModelAutocorrelation cannot follow the elements of the checkpoint (it has "
                f"{len(states)} sampled histories, this run {len(self.histories)}, one per "
                f"optimizer); it samples new ones with seed {self.settings.seed}"
            ]
        problems = []
        for index, (history, state) in enumerate(zip(self.histories, states, strict=True)):
            try:
                history.load_state_dict(state)
            except ValueError as error:
                which = (
                    "" if self.one_for_all else f" for optimizer {self.optimizer_indices[index]}"
                )
                problems.append(
                    "ModelAutocorrelation cannot follow the elements of the checkpoint"
                    f"{which} ({error}); it samples new ones with seed {history.seed}"
                )
        return problems

    def _new_history(
        self,
        named_parameters: Sequence[ParameterShard],
        slices: Sequence[SampledSlice] | None = None,
    ) -> SampledParameterHistory:
        settings = self.settings
        return SampledParameterHistory(
            named_parameters,
            capacity=settings.capacity,
            elements_per_tensor=settings.elements_per_tensor,
            max_elements=settings.max_elements,
            group_depth=settings.group_depth,
            seed=settings.seed,
            kinds=settings.kinds,
            slices=slices,
            groups_under=self._under,
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
            elements_per_tensor=self.settings.elements_per_tensor,
            max_elements=self.settings.max_elements,
            seed=self.settings.seed,
        )
        histories, indices = [], []
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
        self.optimizer_indices = tuple(indices)


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
