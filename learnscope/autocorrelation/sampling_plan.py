"""Which elements of which parameters a sampled parameter history records.

A :class:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory` samples one
contiguous slice per trainable parameter tensor, at a random start, the lengths shrunk
fairly when their sum would exceed an element budget (see :func:`plan_slices`). Everything is
drawn from a numpy generator seeded with ``seed``: the same parameters and seed always give the
same slices.

Example:
    >>> import torch
    >>> layer = torch.nn.Linear(100, 10)
    >>> [(s.name, s.length) for s in plan_slices(layer.named_parameters(), max_elements=20)]
    [('weight', 10), ('bias', 10)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch
from torch import Tensor

from learnscope.model.parameter_shards import ParameterShard, parameter_shards

__all__ = ["ParameterSource", "SampledSlice", "plan_slices"]

ParameterSource: TypeAlias = (
    torch.nn.Module | Iterable[tuple[str, Tensor]] | Iterable[ParameterShard]
)


@dataclass(frozen=True)
class SampledSlice:
    """One contiguous run of elements sampled from a parameter tensor.

    The elements are ``parameter.reshape(-1)[start : start + length]`` (for a contiguous
    parameter, a view of its memory).

    Attributes:
        name: The parameter's name, as in ``named_parameters()``.
        start: The index of the first element in the flattened tensor.
        length: How many elements.

    Example:
        >>> SampledSlice("encoder.weight", start=10, length=256).stop
        266
    """

    name: str
    start: int
    length: int

    @property
    def stop(self) -> int:
        """One past the last element's index.

        Example:
            >>> SampledSlice("bias", 0, 8).stop
            8
        """
        return self.start + self.length


def plan_slices(
    named_parameters: ParameterSource,
    *,
    elements_per_tensor: int = 256,
    max_elements: int = 65536,
    seed: int = 0,
) -> list[SampledSlice]:
    """Choose the slices a sampled parameter history records.

    The history is a
    :class:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory`.

    The same choice as the history's own (one contiguous slice per trainable tensor, the
    budget spread fairly, drawn from ``seed``), made once over parameters that several
    histories then share out with their ``slices`` argument, so that one ``max_elements``
    bounds them all. The parameters may be on several devices.

    Args:
        named_parameters: ``(name, parameter)`` pairs, a model or parameter shards; those
            without ``requires_grad`` or elements are left out. Sharded parameters are planned
            by their full size.
        elements_per_tensor: Slice length per parameter tensor.
        max_elements: Cap on the total number of sampled elements.
        seed: Seed for choosing the slices.

    Returns:
        The slices, in the order of ``named_parameters``.

    Raises:
        ValueError: On a non-positive size argument, no trainable parameter or a complex one.

    Example:
        >>> import torch
        >>> from learnscope.autocorrelation.sampled_history import SampledParameterHistory
        >>> model = torch.nn.Sequential(torch.nn.Linear(100, 10), torch.nn.Linear(10, 1))
        >>> plan = plan_slices(model.named_parameters(), elements_per_tensor=64, seed=1)
        >>> [(piece.name, piece.length) for piece in plan]
        [('0.weight', 64), ('0.bias', 10), ('1.weight', 10), ('1.bias', 1)]
        >>> history = SampledParameterHistory(model.named_parameters(), slices=plan[2:])
        >>> history.num_elements, history.group_names
        (11, ['1'])
    """
    for argument, value in (
        ("elements_per_tensor", elements_per_tensor),
        ("max_elements", max_elements),
    ):
        check_positive_int(argument, value)
    parameters = trainable_parameters(named_parameters)
    sizes = [(name, p.numel) for name, p in parameters.items()]
    return choose_slices(sizes, elements_per_tensor, max_elements, int(seed))


def choose_slices(
    sizes: Sequence[tuple[str, int]], elements_per_tensor: int, max_elements: int, seed: int
) -> list[SampledSlice]:
    """One contiguous slice per ``(name, numel)`` within the element budget.

    Every tensor keeps ``min(numel, elements_per_tensor)`` elements; when these exceed
    ``max_elements``, ``min(numel, share)`` with ``share`` the largest length that fits, and
    with more tensors than ``max_elements`` one element of a random subset of tensors.

    Example:
        >>> [(s.name, s.length) for s in choose_slices([("a", 100), ("b", 3)], 8, 8, seed=0)]
        [('a', 5), ('b', 3)]
    """
    rng = np.random.default_rng(seed)
    numels = np.array([numel for _, numel in sizes], dtype=np.int64)
    lengths = np.minimum(numels, elements_per_tensor)
    if lengths.sum() > max_elements:
        if len(sizes) > max_elements:
            kept = rng.choice(len(sizes), size=max_elements, replace=False)
            lengths = np.zeros_like(numels)
            lengths[kept] = 1
        else:
            lengths = np.minimum(numels, _fair_share(numels, elements_per_tensor, max_elements))
    starts = rng.integers(0, numels - lengths + 1)
    return [
        SampledSlice(name, int(start), int(length))
        for (name, _), start, length in zip(sizes, starts, lengths, strict=True)
        if length > 0
    ]


def trainable_parameters(named_parameters: ParameterSource) -> dict[str, ParameterShard]:
    """The non-empty ``requires_grad`` parameters by (original) name, none of them complex.

    Raises:
        ValueError: No trainable parameter, or a complex one.

    Example:
        >>> import torch
        >>> list(trainable_parameters(torch.nn.Linear(2, 1)))
        ['weight', 'bias']
    """
    parameters = {
        shard.name: shard
        for shard in parameter_shards(named_parameters)
        if shard.requires_grad and shard.numel > 0
    }
    if not parameters:
        raise ValueError("no trainable parameters (requires_grad=True) to sample")
    complex_names = [name for name, p in parameters.items() if p.holder.is_complex()]
    if complex_names:
        raise ValueError(f"complex parameters cannot be sampled: {complex_names}")
    return parameters


def check_positive_int(argument: str, value: int) -> None:
    """Raise a ValueError naming ``argument`` unless ``value`` is a positive int.

    Example:
        >>> check_positive_int("capacity", 0)
        Traceback (most recent call last):
        ...
        ValueError: capacity must be a positive int, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{argument} must be a positive int, got {value!r}")


def _fair_share(numels: np.ndarray, most: int, budget: int) -> int:
    """The largest ``share <= most`` with ``sum(min(numels, share)) <= budget`` (>= 1)."""
    low, high = 1, most
    while low < high:
        middle = (low + high + 1) // 2
        if np.minimum(numels, middle).sum() <= budget:
            low = middle
        else:
            high = middle - 1
    return low
