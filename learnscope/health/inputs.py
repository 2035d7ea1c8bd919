"""Input checks: callables ``batch -> str | None`` run by TrainingHelper on check steps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class CoordinateRangeCheck:
    """Input check: warn when the coordinates span about 1 (fractional, not Cartesian).

    Crystal structures come with fractional coordinates (in units of the lattice vectors) and
    Cartesian ones (in Å). A model that expects Cartesian positions and gets fractional ones
    trains on squeezed structures without any error. Fractional coordinates lie in ``[0, 1)``,
    or centred in ``[-0.5, 0.5)``, or at another offset, or unwrapped with a few atoms just
    outside the cell (1.02, -0.03): whatever the offset, they span an interval of width about
    1, while the Cartesian positions of a batch span several Å.

    The rule: a batch is flagged when every coordinate of it, over all axes together, lies in
    an interval of width at most ``max_width`` (``max - min <= max_width``), and the batch
    holds two different positions (a single atom, or atoms all at one point, is not judged).
    The positions are the rows of the coordinates flattened to ``[-1, last dimension]`` (a 1-D
    tensor is one axis). Measured on synthetic batches (300 each): small organic molecules
    (5 to 25 atoms, bonds of 1.2-1.5 Å and hydrogens at 1.0-1.1 Å, centred, 2 to 32 per batch)
    span at least 3.0 Å; batches of 2 to 8 water, ammonia or methane molecules at least 1.33 Å;
    crystal cells of 3-10 Å (1 to 8 atoms, 1 to 16 cells per batch, Cartesian) at least 5.5 Å:
    none is flagged. Fractional coordinates of the same cells in ``[0, 1)``, ``[-0.5, 0.5)``,
    shifted, or unwrapped up to 1.02 and down to -0.03 span 0.88 to 1.05: all are flagged.
    A batch of one very small molecule can be flagged: H2 (0.74 Å) always, a lone water
    molecule in 33 of 300 random orientations; a lone ammonia, methane or larger organic
    molecule never (they span at least 1.19, 1.52 and 1.37 Å).

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

    A check is its settings: its ``repr`` gives them (``CoordinateRangeCheck(key='pos',
    max_width=1.1)``), so the run record keeps them, and two checks of the same settings are
    equal.

    Args:
        key: Where the coordinates are (see above).
        max_width: Widest range of coordinates flagged: 1.1, a little above the unit cell's 1,
            so that a few unwrapped atoms still count.

    Raises:
        ValueError: ``max_width`` is not a positive number.

    Example:
        >>> import torch
        >>> check = CoordinateRangeCheck()
        >>> check({"pos": torch.tensor([[0.1, 0.5, 0.9], [0.7, 0.2, 0.4]])})
        "every coordinate in 'pos' lies within a range of 0.8 <= 1.1 over 2 positions ..."
        >>> check({"pos": torch.tensor([[-0.5, 0.25, 0.0], [0.1, 0.45, -0.2]])}) is None
        False
        >>> check({"pos": 5 * torch.randn(10, 3)}) is None
        True
        >>> CoordinateRangeCheck(key=0)((torch.rand(4, 3), "labels")).startswith("every")
        True
        >>> CoordinateRangeCheck("frac_coords", max_width=1)
        CoordinateRangeCheck(key='frac_coords', max_width=1.0)
    """

    key: str | int = "pos"
    max_width: float = 1.1

    def __post_init__(self) -> None:
        max_width = self.max_width
        if (
            isinstance(max_width, bool)
            or not isinstance(max_width, (int, float))
            or not (0 < max_width < float("inf"))
        ):
            raise ValueError(f"max_width must be a positive number, got {max_width!r}")
        object.__setattr__(self, "max_width", float(max_width))  # frozen: set once, here

    @property
    def subject(self) -> str:
        """What findings of this check concern: the key.

        Example:
            >>> CoordinateRangeCheck("frac_coords").subject
            'frac_coords'
        """
        return str(self.key)

    def __call__(self, batch: Any) -> str | None:
        """Return a message when the coordinates span at most ``max_width`` (or all are NaN).

        Returns ``None`` otherwise, and for a batch without two different positions.

        Raises:
            KeyError: The batch holds no coordinates under ``key``.

        Example:
            >>> import torch
            >>> check = CoordinateRangeCheck()
            >>> check({"pos": torch.tensor([[0.0, 9.5, 1.2], [1.5, 8.0, 0.3]])}) is None
            True
            >>> check({"pos": torch.tensor([[0.2, 0.4, 0.3]])}) is None  # one position
            True
        """
        coords = self._find(batch)
        if coords.numel() == 0:
            return None
        positions = coords.reshape(-1, 1) if coords.ndim < 2 else coords.flatten(0, -2)
        if positions.is_floating_point():
            nan = positions.isnan()
            lows = torch.where(nan, torch.inf, positions).amin(dim=0)
            highs = torch.where(nan, -torch.inf, positions).amax(dim=0)
        else:
            lows, highs = positions.amin(dim=0), positions.amax(dim=0)
        lows, highs = torch.stack([lows, highs]).double().tolist()  # one transfer
        low, high = min(lows), max(highs)
        if low > high:  # every coordinate is NaN
            return (
                f"every coordinate in {self.key!r} is NaN ({coords.numel()} values): the "
                "inputs carry no positions; check how the batch is built"
            )
        spans = any(h > lo for lo, h in zip(lows, highs, strict=True))
        width = high - low
        if not spans or width > self.max_width:
            return None
        return (
            f"every coordinate in {self.key!r} lies within a range of {width:.3g} <= "
            f"{self.max_width:.3g} over {len(positions)} positions (from {low:.3g} to "
            f"{high:.3g}): these look like fractional coordinates where Cartesian ones (Å) "
            "were expected; convert them with the lattice (frac @ lattice)"
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
