"""Where the sampled elements sit: the local pieces a rank holds, their columns and groups.

A :class:`~learnscope.autocorrelation.sampling_plan.SampledSlice` names elements of an original
parameter. An unsharded parameter holds all of them; a sharded one (FSDP) holds, on each rank, some
runs of them in its local shard. :func:`column_layout` turns the slices into the pieces this rank
records (one per local run, in column order), each column's module group and, when anything is
sharded, where this rank's columns sit among the columns of the whole (unsharded) history and
how the analysis sums over the ranks (:class:`ShardedColumns`).

Example:
    >>> import torch
    >>> from learnscope.model.parameter_shards import parameter_shards
    >>> from learnscope.autocorrelation.sampling_plan import SampledSlice
    >>> shards = {s.name: s for s in parameter_shards(torch.nn.Linear(4, 2))}
    >>> layout = column_layout(
    ...     [SampledSlice("weight", 2, 3), SampledSlice("bias", 0, 2)], shards, group_depth=1
    ... )
    >>> layout.num_elements, layout.group_names, layout.group_index.tolist()
    (5, ('root',), [0, 0, 0, 0, 0])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from learnscope.autocorrelation.sampling_plan import SampledSlice
from learnscope.model.parameter_names import group_name
from learnscope.model.parameter_shards import ParameterShard
from learnscope.model.ranks import sum_over_ranks

__all__ = ["ColumnLayout", "LocalPiece", "ShardedColumns", "column_layout"]


@dataclass(frozen=True, eq=False)
class ShardedColumns:
    """Where one rank's columns sit among the columns of the whole (unsharded) history.

    With sharded parameters each rank records the sampled elements it holds. Column ``j`` of
    its history is column ``positions[j]`` of the history an unsharded model would record
    (the same slices, in the same order); the analysis
    (:func:`learnscope.autocorrelation.analysis.summarize`, whose
    :class:`~learnscope.autocorrelation.analysis.ShardedLayout` this is) sums over the ranks in that
    layout with ``reduce``, so that it runs no collective of its own.

    Attributes:
        positions: ``[K]`` long tensor on the device: the whole-history column of each local
            column.
        group_index: ``[K_total]`` long tensor on the device: the group of every column of the
            whole history.
        reduce: Sums a tensor in place over the ranks and returns it; every rank calls it at
            the same point. By default an all-reduce over the default process group
            (:func:`learnscope.model.ranks.sum_over_ranks`).

    Example:
        >>> import torch
        >>> columns = ShardedColumns(torch.tensor([2, 3]), torch.tensor([0, 0, 1, 1]))
        >>> columns.total_elements
        4
    """

    positions: Tensor
    group_index: Tensor
    reduce: Callable[[Tensor], Tensor] = sum_over_ranks

    @property
    def total_elements(self) -> int:
        """Columns of the whole history, over all ranks."""
        return int(self.group_index.shape[0])


@dataclass(frozen=True, eq=False)
class LocalPiece:
    """One local run of a sampled slice: ``length`` elements from ``start`` of its holder.

    Attributes:
        name: The original parameter's name.
        holder: The tensor holding the elements (the parameter, a DTensor or a flat parameter).
        start: Where the run begins in the holder's flattened local tensor.
        length: How many elements.
        column: The whole-history column of its first element.

    Example:
        >>> import torch
        >>> LocalPiece("w", torch.zeros(4), start=1, length=2, column=0).length
        2
    """

    name: str
    holder: Tensor
    start: int
    length: int
    column: int


@dataclass(frozen=True, eq=False)
class ColumnLayout:
    """The pieces a rank records, in column order, with each column's group.

    Attributes:
        slices: The sampled slices (over all ranks), in column order.
        pieces: This rank's local runs of them, in column order.
        group_names: The module groups of the slices, in order of first appearance.
        group_index: ``[K]`` long tensor: each local column's index into ``group_names``.
        sharded_columns: Where the local columns sit in the whole history; None when no
            parameter is sharded.

    Example:
        >>> import torch
        >>> from learnscope.model.parameter_shards import parameter_shards
        >>> from learnscope.autocorrelation.sampling_plan import SampledSlice
        >>> shards = {s.name: s for s in parameter_shards([("a.w", torch.zeros(3))])}
        >>> column_layout([SampledSlice("a.w", 0, 3)], shards, 1).total_elements
        3
    """

    slices: tuple[SampledSlice, ...]
    pieces: tuple[LocalPiece, ...]
    group_names: tuple[str, ...]
    group_index: Tensor
    sharded_columns: ShardedColumns | None

    @property
    def num_elements(self) -> int:
        """The columns this rank records (all of them when nothing is sharded)."""
        return sum(piece.length for piece in self.pieces)

    @property
    def total_elements(self) -> int:
        """The columns of the whole history, over all ranks."""
        return sum(piece.length for piece in self.slices)

    def to(self, device: torch.device) -> ColumnLayout:
        """The same layout with its index tensors on ``device``.

        Example:
            >>> import torch
            >>> from learnscope.model.parameter_shards import parameter_shards
            >>> from learnscope.autocorrelation.sampling_plan import SampledSlice
            >>> shards = {s.name: s for s in parameter_shards([("w", torch.zeros(3))])}
            >>> layout = column_layout([SampledSlice("w", 0, 3)], shards, 1)
            >>> layout.to(torch.device("meta")).group_index.device.type
            'meta'
        """
        columns = self.sharded_columns
        if columns is not None:
            columns = dataclasses.replace(
                columns,
                positions=columns.positions.to(device),
                group_index=columns.group_index.to(device),
            )
        return ColumnLayout(
            self.slices, self.pieces, self.group_names, self.group_index.to(device), columns
        )


def column_layout(
    slices: Sequence[SampledSlice],
    shards: Mapping[str, ParameterShard],
    group_depth: int,
    device: torch.device | None = None,
    under: str = "",
) -> ColumnLayout:
    """Find the local pieces of ``slices`` in ``shards`` and group their columns.

    Args:
        slices: The sampled slices, each naming a key of ``shards``.
        shards: What this rank holds of each parameter, by name.
        group_depth: How many components of the module path name a group.
        device: Where the index tensors go (default: the CPU).
        under: The module the groups are taken below
            (:func:`~learnscope.model.parameter_names.group_name`).

    Returns:
        The layout; with sharded parameters its pieces are those this rank holds (possibly
        none).

    Example:
        >>> import torch
        >>> from learnscope.model.parameter_shards import parameter_shards
        >>> from learnscope.autocorrelation.sampling_plan import SampledSlice
        >>> shards = {s.name: s for s in parameter_shards(torch.nn.Linear(4, 2))}
        >>> [p.length for p in column_layout([SampledSlice("bias", 1, 1)], shards, 1).pieces]
        [1]
    """
    slices = tuple(slices)
    pieces: list[LocalPiece] = []
    groups: list[str] = []
    column = 0
    for piece in slices:
        shard = shards[piece.name]
        for global_start, local_start, length in shard.pieces(piece.start, piece.stop):
            first = column + global_start - piece.start
            pieces.append(LocalPiece(piece.name, shard.holder, local_start, length, first))
            groups.append(group_name(piece.name, group_depth, under))
        column += piece.length
    all_groups = [group_name(s.name, group_depth, under) for s in slices]
    group_names = tuple(dict.fromkeys(all_groups))
    position = {name: index for index, name in enumerate(group_names)}
    lengths = torch.tensor([p.length for p in pieces], dtype=torch.long)
    per_piece = torch.tensor([position[group] for group in groups], dtype=torch.long)
    group_index = per_piece.repeat_interleave(lengths).to(device)
    sharded_columns = None
    if any(shard.sharded for shard in shards.values()):
        starts = torch.tensor([p.column for p in pieces], dtype=torch.long)
        num_elements = int(lengths.sum())
        offsets = torch.arange(num_elements) - (lengths.cumsum(0) - lengths).repeat_interleave(
            lengths
        )
        slice_lengths = torch.tensor([s.length for s in slices], dtype=torch.long)
        per_slice = torch.tensor([position[group] for group in all_groups], dtype=torch.long)
        sharded_columns = ShardedColumns(
            (starts.repeat_interleave(lengths) + offsets).to(device),
            per_slice.repeat_interleave(slice_lengths).to(device),
        )
    return ColumnLayout(slices, tuple(pieces), group_names, group_index, sharded_columns)
