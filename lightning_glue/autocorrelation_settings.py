"""ModelAutocorrelation's settings: made once from its arguments, checked, then only read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from learnscope.autocorrelation.optimizer_histories import (
    HistorySettings,
    check_lags,
    check_positive_ints,
)

__all__ = ["AutocorrelationSettings"]


@dataclass(frozen=True)
class AutocorrelationSettings:
    """The arguments of a :class:`~learnscope.lightning_glue.ModelAutocorrelation`, checked.

    The fields are the callback's arguments, as given (see its description; what the run
    record shows); the rest is derived from them when they are made.

    Attributes:
        charted_lags: ``lags``, sorted and each once.
        kinds: What is recorded and analysed: ``("params", "grads")``, or ``("params",)``.
        history: How each sampled history samples and how many steps it keeps.

    Raises:
        ValueError: On a non-positive size, an empty ``lags``, or a lag that is negative or
            not below ``buffer_size``.

    Example:
        >>> settings = AutocorrelationSettings(buffer_size=16, lags=[5, 1], analyze_grads=False)
        >>> settings.charted_lags, settings.history.capacity, settings.history.kinds
        ((1, 5), 16, ('params',))
    """

    buffer_size: int = 256
    elements_per_tensor: int = 256
    max_elements: int = 65536
    analyze_every_n_steps: int = 100
    analyze_grads: bool = True
    group_depth: int = 1
    lags: Sequence[int] = (1, 2, 5, 10, 20, 50)
    seed: int = 0
    all_scalars: bool = False
    charted_lags: tuple[int, ...] = field(init=False, repr=False, compare=False)
    kinds: tuple[str, ...] = field(init=False, repr=False, compare=False)
    history: HistorySettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner = "ModelAutocorrelation"
        sizes = {"buffer_size": self.buffer_size, "elements_per_tensor": self.elements_per_tensor}
        sizes |= {"max_elements": self.max_elements}
        sizes |= {"analyze_every_n_steps": self.analyze_every_n_steps}
        check_positive_ints(owner, sizes | {"group_depth": self.group_depth})
        derive = object.__setattr__  # a frozen dataclass's own derived fields, set once here
        derive(self, "charted_lags", check_lags(owner, self.lags, self.buffer_size))
        kinds = ("params", "grads") if self.analyze_grads else ("params",)
        derive(self, "kinds", kinds)
        capacity, per_tensor = self.buffer_size, self.elements_per_tensor
        history = HistorySettings(
            capacity, per_tensor, self.max_elements, self.group_depth, seed=self.seed, kinds=kinds
        )
        derive(self, "history", history)
