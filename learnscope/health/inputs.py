"""Input checks: callables ``batch -> str | None`` run by TrainingHelper on check steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor


class CoordinateRangeCheck:
    """Input check: warn when every coordinate lies in [0, 1] (fractional, not Cartesian).

    Crystal structures come with fractional coordinates (in units of the lattice vectors, in
    ``[0, 1)``) and Cartesian ones (in Å). A model that expects Cartesian positions and gets
    fractional ones trains on squeezed structures without any error.

    The coordinates are found in the batch by ``key``:

    * a mapping (``dict``): ``batch[key]``;
    * an object with an attribute ``key``, such as a PyTorch Geometric ``Data`` or ``Batch``;
    * a tuple or list: with an integer ``key``, that element; with a string ``key``, the first
      element that is a mapping holding it or has it as an attribute.

    NaN coordinates are ignored: the range is that of the other coordinates, and a batch whose
    coordinates are all NaN gets a message saying so instead (there is no range to judge).

    On a call it brings the minimum and maximum to the host (one transfer):
    :class:`~learnscope.lightning_glue.training_helper.TrainingHelper` runs input checks on
    check steps only.

    Args:
        key: Where the coordinates are (see above).

    Example:
        >>> import torch
        >>> check = CoordinateRangeCheck()
        >>> check({"pos": torch.rand(10, 3)})
        "every coordinate in 'pos' lies in [0, 1] ..."
        >>> check({"pos": 5 * torch.randn(10, 3)}) is None
        True
        >>> CoordinateRangeCheck(key=0)((torch.rand(4, 3), "labels")).startswith("every")
        True
    """

    def __init__(self, key: str | int = "pos") -> None:
        self.key = key

    @property
    def subject(self) -> str:
        """What findings of this check concern: the key.

        Example:
            >>> CoordinateRangeCheck("frac_coords").subject
            'frac_coords'
        """
        return str(self.key)

    def __call__(self, batch: Any) -> str | None:
        """Return a message when every coordinate lies in [0, 1] (or all are NaN), else ``None``.

        Raises:
            KeyError: The batch holds no coordinates under ``key``.

        Example:
            >>> import torch
            >>> CoordinateRangeCheck()({"pos": torch.tensor([[0.0, 9.5, 1.2]])}) is None
            True
        """
        coords = self._find(batch)
        if coords.numel() == 0:
            return None
        values = coords.reshape(-1)
        if values.is_floating_point():
            nan = values.isnan()
            low = torch.where(nan, torch.inf, values).min()
            high = torch.where(nan, -torch.inf, values).max()
        else:
            low, high = values.min(), values.max()
        low, high = torch.stack([low, high]).double().tolist()
        if low > high:  # every coordinate is NaN
            return (
                f"every coordinate in {self.key!r} is NaN ({values.numel()} values): the "
                "inputs carry no positions; check how the batch is built"
            )
        if low < 0 or high > 1:
            return None
        return (
            f"every coordinate in {self.key!r} lies in [0, 1] (from {low:.3g} to {high:.3g}): "
            "these look like fractional coordinates where Cartesian ones were expected; "
            "convert them with the lattice (frac @ lattice)"
        )

    def _find(self, batch: Any) -> Tensor:
        found = _lookup(batch, self.key)
        if found is None and isinstance(batch, (tuple, list)) and isinstance(self.key, str):
            found = next((v for v in map(self._lookup_in, batch) if v is not None), None)
        if found is None:
            raise KeyError(
                f"CoordinateRangeCheck: no coordinates under {self.key!r} in a batch of type "
                f"{type(batch).__name__}"
            )
        return torch.as_tensor(found).detach()

    def _lookup_in(self, item: Any) -> Any:
        return _lookup(item, self.key)


def _lookup(batch: Any, key: str | int) -> Any:
    """``batch[key]`` for mappings and integer keys into sequences, else ``batch.key``."""
    if isinstance(batch, Mapping):
        return batch.get(key)
    if isinstance(key, int):
        return (
            batch[key]
            if isinstance(batch, (tuple, list)) and -len(batch) <= key < len(batch)
            else None
        )
    return getattr(batch, key, None)
