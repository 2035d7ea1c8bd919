"""A ring buffer of sampled parameter and gradient elements, kept on the parameters' device.

Feeding the autocorrelation analysis (:mod:`learnscope.autocorrelation`) needs each sampled
element's value over the last ``capacity`` steps. Copying a random sample of every tensor to
the host each step costs more than the training step itself; this buffer instead samples one
contiguous slice per parameter tensor (a view, so no gather) and writes all of them into the
device-side buffer with one batched copy per step and kind, without any host
synchronisation.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    >>> history = SampledParameterHistory(model.named_parameters(), capacity=16)
    >>> history.group_names, history.num_elements
    (['0', '1'], 58)
    >>> for _ in range(3):
    ...     history.record()
    >>> history.history("params").shape
    torch.Size([3, 58])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np
import torch
from torch import Tensor

from learnscope.health.parameters import group_name
from learnscope.health.sharded import ParameterShard, parameter_shards

__all__ = [
    "HISTORY_KINDS",
    "HistoryKind",
    "SampledParameterHistory",
    "SampledSlice",
    "ShardedColumns",
    "plan_slices",
]

ParameterSource: TypeAlias = (
    torch.nn.Module | Iterable[tuple[str, Tensor]] | Iterable[ParameterShard]
)

HistoryKind = Literal["params", "grads"]
HISTORY_KINDS: tuple[str, ...] = ("params", "grads")
_BYTES_PER_VALUE = 4  # float32
_BLOCK_ROWS = 16  # steps staged time-first before one copy into the time-last buffers


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


@dataclass(frozen=True, eq=False)
class ShardedColumns:
    """Where one rank's columns sit among the columns of the whole (unsharded) history.

    With sharded parameters each rank records the sampled elements it holds. Column ``j`` of
    its history is column ``positions[j]`` of the history an unsharded model would record
    (the same slices, in the same order); the analysis sums over the ranks in that layout.

    Attributes:
        positions: ``[K]`` long tensor on the device: the whole-history column of each local
            column.
        group_index: ``[K_total]`` long tensor on the device: the group of every column of the
            whole history.

    Example:
        >>> import torch
        >>> columns = ShardedColumns(torch.tensor([2, 3]), torch.tensor([0, 0, 1, 1]))
        >>> columns.total_elements
        4
    """

    positions: Tensor
    group_index: Tensor

    @property
    def total_elements(self) -> int:
        """Columns of the whole history, over all ranks."""
        return int(self.group_index.shape[0])


class SampledParameterHistory:
    """Ring buffer of sampled parameter and gradient values over the last training steps.

    At construction it picks, for every trainable parameter (``requires_grad``), one
    contiguous slice of ``elements_per_tensor`` elements at a random start (the whole
    tensor if smaller). When the slices would hold more than ``max_elements`` in total,
    the budget is spread fairly by shrinking the slices: every tensor keeps
    ``min(share, numel)`` elements, with ``share`` the largest length that fits, so small
    tensors (biases, norms) stay whole and every module stays represented. Only when there
    are more tensors than ``max_elements`` is a random subset of tensors kept, one element
    each. Everything is drawn from a numpy generator seeded with ``seed``, so the same
    model and seed always sample the same elements.

    One float32 buffer ``[K, capacity]`` per recorded kind (``K = num_elements``; time last,
    so that the analysis reads each element's series contiguously) lives on the parameters'
    device: one for parameter values and one for gradients by default, only the first with
    ``kinds=("params",)``. So ``nbytes = len(kinds) * capacity * K * 4``, bounded by
    ``max_elements`` whatever the model's size: at most 128 MiB at the defaults (256 steps,
    65,536 elements, both kinds; 64 MiB for parameter values only), reached by any model with
    256 or more tensors of 256 or more elements. A time-first staging block of
    ``min(16, capacity)`` steps per kind adds ``1/16`` of that at the defaults.

    Each :meth:`record` gathers the slices' views with a single ``torch.cat`` into one
    contiguous row of the staging block (measured on the CPU: about 3x faster than
    ``torch._foreach_copy_``, and a third of the cost of writing a strided column of the
    buffer every step); every 16 steps the block goes to the buffers in one copy. One kernel
    per kind and step, whatever the number of tensors, with no host synchronisation. The parameter
    views are cached and rebuilt when a parameter's storage changes; gradient views are
    taken afresh each call, since ``zero_grad(set_to_none=True)`` makes new gradient
    tensors every step. A parameter whose ``.grad`` is None records zeros: a column that
    stays zero is constant, which the ACF reports as NaN ("no gradient"), whereas NaN
    values would also poison every ACF window they fall in after the gradient comes back.

    Each element belongs to a module group: the first ``group_depth`` components of its
    parameter's module path (``encoder.layers.0.weight`` is in ``encoder`` at depth 1 and
    ``encoder.layers`` at depth 2; the parameters of the root module are in the group
    ``root``), the same groups as :func:`learnscope.health.group_name`.

    **Sharded parameters** (FSDP2's ``DTensor``, FSDP1; pass the model itself for FSDP1 with
    ``use_orig_params=True``) are sampled by their original names and full sizes, so every rank
    draws the same slices as an unsharded model would, and records the part of them that its
    local shard holds (views of the local tensor, no communication). Its columns are then those
    elements only (``num_elements``; possibly none), and :attr:`sharded_columns` says where they
    sit among all ``total_elements``: :func:`learnscope.autocorrelation.summarize` with
    ``sharded=`` sums the per-group figures over the ranks, giving the unsharded model's.

    ``slices`` replaces the random choice by given slices, for example a part of a
    :func:`plan_slices` made over the parameters of several optimizers together, so that one
    ``max_elements`` budget bounds all their histories.

    Args:
        named_parameters: ``(name, parameter)`` pairs, e.g. ``model.named_parameters()``,
            the model itself (needed for FSDP1 with ``use_orig_params=True``), or
            :class:`~learnscope.health.sharded.ParameterShard` values. All trainable ones must
            be on one device.
        capacity: How many steps the buffers hold.
        elements_per_tensor: Slice length per parameter tensor.
        max_elements: Cap on the total number of sampled elements ``K``.
        group_depth: How many components of the module path name a group.
        seed: Seed for choosing the slices (and the seed :meth:`state_dict` saves).
        kinds: What to record, a non-empty subset of ``HISTORY_KINDS``: ``("params",
            "grads")``, or ``("params",)`` for parameter values only (half the memory).
        slices: The slices to track instead of drawing them (``elements_per_tensor`` and
            ``max_elements`` are then not used); each must lie in a trainable parameter of
            ``named_parameters``.

    Raises:
        ValueError: On a non-positive size argument, no trainable parameter, parameters on
            several devices, a complex parameter, empty or unknown ``kinds``, or a slice that
            is empty, outside its parameter or names a parameter that is not trainable.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(100, 100)
        >>> history = SampledParameterHistory(
        ...     [("encoder.weight", layer.weight), ("encoder.bias", layer.bias)],
        ...     capacity=8, elements_per_tensor=32, seed=1,
        ... )
        >>> [(s.name, s.length) for s in history.slices], history.nbytes
        ([('encoder.weight', 32), ('encoder.bias', 32)], 4096)
        >>> values_only = SampledParameterHistory(
        ...     [("encoder.weight", layer.weight)], capacity=8, elements_per_tensor=32,
        ...     kinds=("params",),
        ... )
        >>> values_only.kinds, values_only.nbytes
        (('params',), 1024)
    """

    def __init__(
        self,
        named_parameters: ParameterSource,
        *,
        capacity: int = 256,
        elements_per_tensor: int = 256,
        max_elements: int = 65536,
        group_depth: int = 1,
        seed: int = 0,
        kinds: Sequence[str] = HISTORY_KINDS,
        slices: Sequence[SampledSlice] | None = None,
    ) -> None:
        for argument, value in (
            ("capacity", capacity),
            ("elements_per_tensor", elements_per_tensor),
            ("max_elements", max_elements),
            ("group_depth", group_depth),
        ):
            _check_positive_int(argument, value)
        self._kinds = _check_kinds(kinds)
        self._shards = _trainable_parameters(named_parameters)
        # name -> the tensor holding the parameter's elements (the parameter itself unsharded)
        self._parameters = {name: shard.holder for name, shard in self._shards.items()}
        _check_same_device(self._shards)
        self._capacity = capacity
        self._group_depth = group_depth
        self._seed = int(seed)
        self._device = next(iter(self._shards.values())).device
        if slices is None:
            sizes = [(name, p.numel) for name, p in self._shards.items()]
            slices = _plan_slices(sizes, elements_per_tensor, max_elements, self._seed)
        else:
            slices = self._checked_slices(slices, "slices")
        self._install(slices)

    @property
    def capacity(self) -> int:
        """How many steps the buffers hold."""
        return self._capacity

    @property
    def seed(self) -> int:
        """The seed the slices were drawn with."""
        return self._seed

    @property
    def kinds(self) -> tuple[str, ...]:
        """What :meth:`record` records: ``("params", "grads")`` or ``("params",)``."""
        return self._kinds

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The names of the trainable parameters that slices may come from."""
        return tuple(self._shards)

    @property
    def device(self) -> torch.device:
        """The device of the parameters and the buffers."""
        return self._device

    @property
    def slices(self) -> tuple[SampledSlice, ...]:
        """The sampled slices, in column order."""
        return self._slices

    @property
    def num_elements(self) -> int:
        """K, the number of sampled elements recorded here (columns of a history).

        With sharded parameters, those this rank holds; see :attr:`total_elements`.
        """
        return self._num_elements

    @property
    def total_elements(self) -> int:
        """The number of sampled elements over all ranks (``num_elements`` when not sharded)."""
        return sum(s.length for s in self._slices)

    @property
    def sharded(self) -> bool:
        """Whether any sampled parameter is sharded over ranks (FSDP)."""
        return self._sharded

    @property
    def sharded_columns(self) -> ShardedColumns | None:
        """Where this rank's columns sit in the whole history; None when nothing is sharded.

        Pass it to :func:`learnscope.autocorrelation.summarize` (``sharded=``) on every rank.
        """
        return self._sharded_columns

    @property
    def num_recorded(self) -> int:
        """How many times :meth:`record` was called since construction or loading."""
        return self._count

    @property
    def num_steps(self) -> int:
        """T, the number of steps :meth:`history` returns: ``min(num_recorded, capacity)``."""
        return min(self._count, self._capacity)

    @property
    def group_names(self) -> list[str]:
        """The module groups, in order of first appearance."""
        return list(self._group_names)

    @property
    def group_index(self) -> Tensor:
        """``[K]`` long tensor on the device: each column's index into ``group_names``."""
        return self._group_index

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers: ``len(kinds) * capacity * K * 4``."""
        return len(self._kinds) * self._capacity * self._num_elements * _BYTES_PER_VALUE

    @torch.no_grad()
    def record(self) -> None:
        """Copy the current values of the sampled parameters (and gradients) into the buffers.

        Gradients are read from ``.grad`` as they are now: call it where they are final for
        the step (in Lightning, ``on_before_optimizer_step``, after accumulation and
        unscaling), once per optimizer step. One ``torch.cat`` per recorded kind (and every
        16 steps one copy of the staging block), no host synchronisation.

        Example:
            >>> import torch
            >>> weight = torch.nn.Parameter(torch.zeros(4))
            >>> history = SampledParameterHistory([("weight", weight)], capacity=2)
            >>> weight.grad = torch.ones(4)
            >>> history.record()
            >>> history.history("grads")
            tensor([[1., 1., 1., 1.]])
        """
        if self._num_elements:
            row = self._count - self._block_start
            for kind, block in self._blocks.items():
                views = self._parameter_views() if kind == "params" else self._gradient_views()
                torch.cat(views, out=block[row])
        self._count += 1
        if self._count - self._block_start == self._block_rows or (
            self._count % self._capacity == 0
        ):
            self._flush()

    def _flush(self) -> None:
        """Copy the rows of the staging block into their columns of the ring buffers.

        A row of the time-first block is contiguous, so each step's ``cat`` writes straight
        into it; the block goes to the time-last buffers in one copy every
        ``min(16, capacity)`` steps (or at the end of the ring), instead of one strided column
        write per step.
        """
        rows = self._count - self._block_start
        if rows and self._num_elements:
            column = self._block_start % self._capacity
            for kind, buffer in self._buffers.items():
                buffer[:, column : column + rows].copy_(self._blocks[kind][:rows].T)
        self._block_start = self._count

    def history(self, kind: HistoryKind) -> Tensor:
        """The recorded values, oldest step first.

        Args:
            kind: ``"params"`` or ``"grads"``.

        Returns:
            A new ``[num_steps, K]`` float32 tensor on the device, in chronological order
            also after the ring buffer wrapped around. It is the transpose of a contiguous
            ``[K, num_steps]`` tensor (each element's series is contiguous), which is the
            layout :func:`learnscope.autocorrelation.summarize` reads fastest.

        Raises:
            ValueError: On an unknown kind, or a kind this history does not record.

        Example:
            >>> import torch
            >>> weight = torch.nn.Parameter(torch.zeros(1))
            >>> history = SampledParameterHistory([("weight", weight)], capacity=2)
            >>> for step in range(3):
            ...     _ = weight.data.fill_(step)
            ...     history.record()
            >>> history.history("params").flatten().tolist()
            [1.0, 2.0]
        """
        if kind not in HISTORY_KINDS:
            raise ValueError(f"kind must be one of {HISTORY_KINDS}, got {kind!r}")
        if kind not in self._buffers:
            raise ValueError(
                f"this history records {self._kinds} only, not {kind!r}; construct it with "
                f"kinds={HISTORY_KINDS} to record {kind} as well"
            )
        self._flush()
        buffer = self._buffers[kind]
        if self._count <= self._capacity:
            return buffer[:, : self._count].contiguous().T
        column = self._count % self._capacity
        return torch.cat([buffer[:, column:], buffer[:, :column]], dim=1).T

    def state_dict(self) -> dict[str, Any]:
        """The seed and the sampled slices, so a resumed run tracks the same elements.

        The recorded history itself is not saved.

        Example:
            >>> import torch
            >>> weight = torch.nn.Parameter(torch.zeros(1000))
            >>> state = SampledParameterHistory([("w", weight)], elements_per_tensor=4).state_dict()
            >>> sorted(state), state["names"], state["lengths"]
            (['lengths', 'names', 'seed', 'starts'], ['w'], [4])
        """
        return {
            "seed": self._seed,
            "names": [s.name for s in self._slices],
            "starts": [s.start for s in self._slices],
            "lengths": [s.length for s in self._slices],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Track the slices of a saved state; the recorded history starts over.

        Args:
            state: A :meth:`state_dict`.

        Raises:
            ValueError: When the state is malformed, or names a parameter that is not a
                trainable parameter here, or a slice beyond a parameter's size.

        Example:
            >>> import torch
            >>> weight = torch.nn.Parameter(torch.zeros(1000))
            >>> saved = SampledParameterHistory([("w", weight)], seed=1).state_dict()
            >>> resumed = SampledParameterHistory([("w", weight)], seed=2)
            >>> resumed.load_state_dict(saved)
            >>> resumed.slices[0].start == saved["starts"][0]
            True
        """
        missing = {"seed", "names", "starts", "lengths"} - set(state)
        if missing:
            raise ValueError(f"state is missing {sorted(missing)}")
        names, starts, lengths = list(state["names"]), state["starts"], state["lengths"]
        if not len(names) == len(starts) == len(lengths) or not names:
            raise ValueError("state needs names, starts and lengths of one non-zero length")
        slices = [
            SampledSlice(str(name), int(start), int(length))
            for name, start, length in zip(names, starts, lengths, strict=True)
        ]
        slices = self._checked_slices(slices, "state")
        self._seed = int(state["seed"])
        self._install(slices)

    def _checked_slices(self, slices: Sequence[SampledSlice], what: str) -> list[SampledSlice]:
        """``slices`` as a list, each checked to lie within a trainable parameter here."""
        checked = list(slices)
        if not checked:
            raise ValueError(f"{what} holds no slice")
        for piece in checked:
            if not isinstance(piece, SampledSlice):
                raise ValueError(f"{what} must hold SampledSlice values, got {piece!r}")
            parameter = self._shards.get(piece.name)
            if parameter is None:
                raise ValueError(
                    f"{what} samples {piece.name!r}, which is not a trainable parameter here"
                )
            if piece.start < 0 or piece.length < 1 or piece.stop > parameter.numel:
                raise ValueError(
                    f"{what} slice {piece.start}:{piece.stop} of {piece.name!r} is outside "
                    f"its {parameter.numel} elements"
                )
        return checked

    def _install(self, slices: Sequence[SampledSlice]) -> None:
        """Adopt ``slices``: find the local pieces, group columns, allocate empty buffers."""
        self._slices = tuple(slices)
        # One piece per local run of a slice: (shard, local start, length, whole-history column).
        pieces: list[tuple[ParameterShard, int, int, int]] = []
        groups: list[str] = []
        column = 0
        for piece in self._slices:
            shard = self._shards[piece.name]
            for global_start, local_start, length in shard.pieces(piece.start, piece.stop):
                pieces.append((shard, local_start, length, column + global_start - piece.start))
                groups.append(group_name(piece.name, self._group_depth))
            column += piece.length
        self._pieces = pieces
        self._sampled = [shard.holder for shard, _, _, _ in pieces]
        self._num_elements = sum(length for _, _, length, _ in pieces)
        all_groups = [group_name(s.name, self._group_depth) for s in self._slices]
        self._group_names = list(dict.fromkeys(all_groups))
        position = {name: index for index, name in enumerate(self._group_names)}
        lengths = torch.tensor([length for _, _, length, _ in pieces], dtype=torch.long)
        per_piece = torch.tensor([position[group] for group in groups], dtype=torch.long)
        self._group_index = per_piece.repeat_interleave(lengths).to(self._device)
        self._sharded = any(shard.sharded for shard in self._shards.values())
        self._sharded_columns: ShardedColumns | None = None
        if self._sharded:
            starts = torch.tensor([first for _, _, _, first in pieces], dtype=torch.long)
            offsets = torch.arange(self._num_elements) - (
                lengths.cumsum(0) - lengths
            ).repeat_interleave(lengths)
            slice_lengths = torch.tensor([s.length for s in self._slices], dtype=torch.long)
            per_slice = torch.tensor([position[group] for group in all_groups], dtype=torch.long)
            self._sharded_columns = ShardedColumns(
                (starts.repeat_interleave(lengths) + offsets).to(self._device),
                per_slice.repeat_interleave(slice_lengths).to(self._device),
            )
        self._buffers = {
            kind: torch.zeros(
                self._num_elements, self._capacity, dtype=torch.float32, device=self._device
            )
            for kind in self._kinds
        }
        # time-first staging block: each record() writes one contiguous row of it
        self._block_rows = min(_BLOCK_ROWS, self._capacity)
        self._blocks = {
            kind: torch.empty(
                self._block_rows, self._num_elements, dtype=torch.float32, device=self._device
            )
            for kind in self._kinds
        }
        self._block_start = 0
        self._no_gradient: list[Tensor] = []
        if "grads" in self._kinds and pieces:
            longest = max(length for _, _, length, _ in pieces)
            zeros = torch.zeros(longest, dtype=torch.float32, device=self._device)
            self._no_gradient = [zeros[:length] for _, _, length, _ in pieces]
        self._gradient_plan = [
            (shard.holder, start, length, zeros)
            for (shard, start, length, _), zeros in zip(pieces, self._no_gradient, strict=False)
        ]
        self._count = 0
        self._pointers: tuple[int, ...] = ()
        self._views: list[Tensor | None] = []
        self._all_cached = False

    def _parameter_views(self) -> list[Tensor]:
        """Views of the sampled slices, cached while the parameters' storage stays put.

        The cache is rebuilt when a parameter's data pointer changes (``p.data = ...``,
        ``model.to(...)``); a device change moves the buffers along (one copy, once).
        """
        tensors = [_local_values(p) for p in self._sampled] if self._sharded else self._sampled
        pointers = tuple(t.data_ptr() for t in tensors)
        if pointers != self._pointers:
            self._follow_device()
            self._views = [
                _flat_slice(t.detach(), start, length) if t.is_contiguous() else None
                for t, (_, start, length, _) in zip(tensors, self._pieces, strict=True)
            ]
            self._all_cached = all(view is not None for view in self._views)
            self._pointers = pointers
        if self._all_cached:
            return self._views  # type: ignore[return-value]
        return [
            _flat_slice(t.detach(), start, length) if view is None else view
            for view, t, (_, start, length, _) in zip(
                self._views, tensors, self._pieces, strict=True
            )
        ]

    def _gradient_views(self) -> list[Tensor]:
        """Views of the sampled slices of the current gradients (zeros for a None grad).

        Gradients are new tensors at every step (``zero_grad(set_to_none=True)``), so their
        views are made afresh: one ``as_strided`` per piece, the fewest Python calls that can
        do it.
        """
        views = []
        sharded = self._sharded
        for parameter, start, length, zeros in self._gradient_plan:
            gradient = parameter.grad
            if gradient is None:
                views.append(zeros)
                continue
            if sharded:
                gradient = _local_values(gradient)
            if gradient.is_contiguous():
                offset = gradient.storage_offset() + start
                views.append(gradient.as_strided((length,), (1,), offset))
            else:
                views.append(self._other_gradient(parameter, gradient, start, length))
        return views

    def _other_gradient(
        self, parameter: Tensor, gradient: Tensor, start: int, length: int
    ) -> Tensor:
        """A slice of a non-contiguous gradient (a copy); sparse ones are an error."""
        if gradient.layout != torch.strided:
            name = next(s.name for s, _, _, _ in self._pieces if s.holder is parameter)
            raise TypeError(
                f"the gradient of {name!r} is {gradient.layout}; only dense gradients can be "
                "sampled"
            )
        return gradient.reshape(-1)[start : start + length]

    def _follow_device(self) -> None:
        """Move the buffers to the parameters' device if the model moved."""
        if not self._sampled:
            return
        device = self._sampled[0].device
        if device != self._device:
            self._device = device
            self._buffers = {kind: b.to(device) for kind, b in self._buffers.items()}
            self._blocks = {kind: b.to(device) for kind, b in self._blocks.items()}
            self._group_index = self._group_index.to(device)
            self._no_gradient = [zeros.to(device) for zeros in self._no_gradient]
            self._gradient_plan = [
                (holder, start, length, zeros)
                for (holder, start, length, _), zeros in zip(
                    self._gradient_plan, self._no_gradient, strict=True
                )
            ]
            if self._sharded_columns is not None:
                self._sharded_columns = ShardedColumns(
                    self._sharded_columns.positions.to(device),
                    self._sharded_columns.group_index.to(device),
                )


def _local_values(tensor: Tensor) -> Tensor:
    """The local tensor of a DTensor (no communication), else the tensor; detached.

    Called under ``no_grad``, where ``DTensor.to_local()`` returns its local tensor as it is,
    without the DTensor dispatch that ``detach()`` would go through.
    """
    to_local = getattr(tensor, "to_local", None)
    return to_local().detach() if to_local is not None else tensor.detach()


def _flat_slice(tensor: Tensor, start: int, length: int) -> Tensor:
    """``tensor.reshape(-1)[start:start + length]``, one cheap view when it is contiguous."""
    if tensor.is_contiguous():
        return tensor.as_strided((length,), (1,), tensor.storage_offset() + start)
    return tensor.reshape(-1)[start : start + length]


def plan_slices(
    named_parameters: ParameterSource,
    *,
    elements_per_tensor: int = 256,
    max_elements: int = 65536,
    seed: int = 0,
) -> list[SampledSlice]:
    """Choose the slices a :class:`SampledParameterHistory` would sample from these parameters.

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
        _check_positive_int(argument, value)
    parameters = _trainable_parameters(named_parameters)
    sizes = [(name, p.numel) for name, p in parameters.items()]
    return _plan_slices(sizes, elements_per_tensor, max_elements, int(seed))


def _trainable_parameters(named_parameters: ParameterSource) -> dict[str, ParameterShard]:
    """The non-empty ``requires_grad`` parameters by (original) name, none of them complex."""
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


def _check_same_device(parameters: Mapping[str, ParameterShard]) -> None:
    devices = {p.device for p in parameters.values()}
    if len(devices) > 1:
        raise ValueError(f"parameters must be on one device, found {sorted(map(str, devices))}")


def _check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds to record, without repeats, in the order of ``HISTORY_KINDS``."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    wanted = set(kinds)
    unknown = sorted(str(kind) for kind in wanted - set(HISTORY_KINDS))
    if unknown or not wanted:
        raise ValueError(f"kinds must be a non-empty subset of {HISTORY_KINDS}, got {kinds!r}")
    return tuple(kind for kind in HISTORY_KINDS if kind in wanted)


def _plan_slices(
    sizes: Sequence[tuple[str, int]], elements_per_tensor: int, max_elements: int, seed: int
) -> list[SampledSlice]:
    """Choose one contiguous slice per tensor within the element budget (see the class)."""
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


def _check_positive_int(argument: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{argument} must be a positive int, got {value!r}")
