"""Which parameters train: fine-tuning changes that during a fit, and diagnostics must follow.

Lightning's ``BackboneFinetuning`` freezes a backbone in ``setup`` and, at a later epoch, makes
it trainable again and adds it to the optimizer as a new param group; progressive unfreezing
flips ``requires_grad`` module by module. :class:`TrainableWatch` notices such a change at the
next steps, for about two microseconds of Python per step whatever the model's size, and
without touching the device.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from torch import Tensor

from learnscope.model.parameter_names import clean_parameter_name

_REQUIRES_GRAD = attrgetter("requires_grad")


@dataclass(frozen=True)
class TrainableChange:
    """How the trainable parameters changed since the last look.

    Args:
        added: Names of the parameters that train now and did not before.
        removed: Names of the parameters that trained before and are frozen now.
        regrouped: Whether the number of param groups of an optimizer changed (such as
            ``add_param_group``, which fine-tuning callbacks call when they unfreeze).

    Example:
        >>> TrainableChange(["backbone.weight", "backbone.bias"], [], True).describe()
        'now training: backbone.weight, backbone.bias'
    """

    added: list[str]
    removed: list[str]
    regrouped: bool

    def describe(self, most: int = 3) -> str:
        """The change in words, naming at most ``most`` parameters of each kind."""
        parts = [
            f"{what}: {_names(names, most)}"
            for what, names in (("now training", self.added), ("now frozen", self.removed))
            if names
        ]
        return "; ".join(parts) or "an optimizer's param groups changed"


class TrainableWatch:
    """Notices when a parameter starts or stops training, or an optimizer gets param groups.

    Call :meth:`poll` once per step. It compares the number of param groups of each optimizer
    with what it saw last, and the ``requires_grad`` of ``window`` parameters (a Python
    attribute, no device work; about 40 ns each), the next ``window`` at the next call, in
    turn; when one of them differs, or the param groups do, it reads every parameter and
    reports the whole change at once. So a change of param groups is noticed at once, and a
    flipped ``requires_grad`` within ``ceil(parameters / window)`` calls: at once for models of
    up to ``window`` parameter tensors, within 4 calls for 100. Parameters added to the model
    after the watch was made are not seen. Parameters are named as the health checks and the
    sampled histories name them, without the parts that wrappers insert
    (:func:`~learnscope.model.parameter_names.clean_parameter_name`: a compiled sub-module's
    ``_orig_mod``...).

    Args:
        named_parameters: The model's ``(name, parameter)`` pairs, such as
            ``model.named_parameters()``.
        optimizers: The optimizers whose param groups are watched.
        window: How many parameters' ``requires_grad`` a call reads when nothing changed.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
        >>> model[0].requires_grad_(False)  # doctest: +ELLIPSIS
        Linear(...)
        >>> watch = TrainableWatch(model.named_parameters())
        >>> watch.poll() is None, watch.trainable
        (True, ['1.weight', '1.bias'])
        >>> model[0].requires_grad_(True)  # doctest: +ELLIPSIS
        Linear(...)
        >>> watch.poll().describe()
        'now training: 0.weight, 0.bias'
    """

    def __init__(
        self,
        named_parameters: Iterable[tuple[str, Tensor]],
        optimizers: Sequence[Any] = (),
        window: int = 32,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"TrainableWatch: window must be a positive int, got {window!r}")
        self._window = window
        self._next = 0  # the first parameter of the next window
        pairs = list(named_parameters)
        self._names = [clean_parameter_name(name) for name, _ in pairs]
        self._parameters = [parameter for _, parameter in pairs]
        self._optimizers = list(optimizers)
        self._flags = list(map(_REQUIRES_GRAD, self._parameters))
        self._groups = self._group_counts()

    @property
    def trainable(self) -> list[str]:
        """Names of the parameters that trained at the last look."""
        return [name for name, flag in zip(self._names, self._flags, strict=True) if flag]

    def poll(self) -> TrainableChange | None:
        """What changed since the last call (or since the watch was made); ``None``: nothing."""
        groups = self._group_counts()
        if groups == self._groups and not self._window_changed():
            return None
        flags = list(map(_REQUIRES_GRAD, self._parameters))
        if flags == self._flags and groups == self._groups:
            return None
        before = self._flags
        regrouped = groups != self._groups
        self._flags, self._groups = flags, groups
        pairs = list(zip(self._names, before, flags, strict=True))
        return TrainableChange(
            added=[name for name, old, new in pairs if new and not old],
            removed=[name for name, old, new in pairs if old and not new],
            regrouped=regrouped,
        )

    def _window_changed(self) -> bool:
        """Whether a parameter of this call's window started or stopped training."""
        count = len(self._parameters)
        if count <= self._window:
            return list(map(_REQUIRES_GRAD, self._parameters)) != self._flags
        start = self._next
        stop = start + self._window
        self._next = stop if stop < count else 0
        window = self._parameters[start:stop]
        return list(map(_REQUIRES_GRAD, window)) != self._flags[start:stop]

    def _group_counts(self) -> list[int]:
        return [len(optimizer.param_groups) for optimizer in self._optimizers]


def _names(names: Sequence[str], most: int) -> str:
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"
