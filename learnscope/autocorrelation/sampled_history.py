"""A ring buffer of sampled parameter and gradient elements, kept on the parameters' device.

Feeding the autocorrelation analysis (:mod:`learnscope.autocorrelation.analysis`) needs each sampled
element's value over the last ``capacity`` steps. Copying a random sample of every tensor to
the host each step costs more than the training step itself; this buffer instead samples one
contiguous slice per parameter tensor (a view, so no gather) and writes all of them into the
device-side buffer with one batched copy per step and kind, without any host
synchronisation.

The parts: :mod:`learnscope.autocorrelation.sampling_plan` chooses the slices,
:mod:`learnscope.autocorrelation.sampled_columns` finds the part of them this rank holds and groups
the columns, :mod:`learnscope.autocorrelation.sampled_gradients` reads their gradients (dense or
sparse), :mod:`learnscope.autocorrelation.ring_buffer` keeps the last steps;
:class:`SampledParameterHistory` composes them and follows the parameters' storage and device.
``SampledSlice``, ``ShardedColumns`` and ``plan_slices`` are importable from here too.

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

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from learnscope.autocorrelation.ring_buffer import StagedRingBuffer
from learnscope.autocorrelation.sampled_columns import LocalPiece, ShardedColumns, column_layout
from learnscope.autocorrelation.sampled_gradients import SampledGradients, local_values
from learnscope.autocorrelation.sampling_plan import (
    ParameterSource,
    SampledSlice,
    check_positive_int,
    choose_slices,
    plan_slices,
    trainable_parameters,
)
from learnscope.model.parameter_names import clean_parameter_name, common_module
from learnscope.model.parameter_shards import ParameterShard

__all__ = [
    "HISTORY_KINDS",
    "HistoryKind",
    "SampledParameterHistory",
    "SampledSlice",
    "ShardedColumns",
    "plan_slices",
]

HistoryKind = Literal["params", "grads"]
HISTORY_KINDS: tuple[str, ...] = ("params", "grads")


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
    A sparse COO gradient (``nn.Embedding(sparse=True)``) records the same elements of its
    dense view, made from its stored values only; one of another layout (sparse CSR...)
    records zeros, with one warning (see :mod:`learnscope.autocorrelation.sampled_gradients`).

    Each element belongs to a module group: the first ``group_depth`` components of its
    parameter's module path (``encoder.layers.0.weight`` is in ``encoder`` at depth 1 and
    ``encoder.layers`` at depth 2; the parameters of the root module are in the group
    ``root``), taken below the deepest module that holds every trainable parameter (a wrapper
    ``model`` gives ``model.encoder``, ``model.head``), the same groups as
    :func:`learnscope.health.group_name`.

    **Sharded parameters** (FSDP2's ``DTensor``, FSDP1; pass the model itself for FSDP1 with
    ``use_orig_params=True``) are sampled by their original names and full sizes, so every rank
    draws the same slices as an unsharded model would, and records the part of them that its
    local shard holds (views of the local tensor, no communication). Its columns are then those
    elements only (``num_elements``; possibly none), and :attr:`sharded_columns` says where they
    sit among all ``total_elements``: :func:`learnscope.autocorrelation.analysis.summarize` with
    ``sharded=`` sums the per-group figures over the ranks, giving the unsharded model's.

    ``slices`` replaces the random choice by given slices, for example a part of a
    :func:`plan_slices` made over the parameters of several optimizers together, so that one
    ``max_elements`` budget bounds all their histories.

    Args:
        named_parameters: ``(name, parameter)`` pairs, e.g. ``model.named_parameters()``,
            the model itself (needed for FSDP1 with ``use_orig_params=True``), or
            :class:`~learnscope.model.parameter_shards.ParameterShard` values. All trainable ones
            must be on one device.
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
        groups_under: The module the groups are taken below
            (:func:`~learnscope.model.parameter_shards.groups_under` of the whole model, when these
            are one optimizer's parameters); ``None``: the deepest module that holds every
            trainable parameter of ``named_parameters``.

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
        groups_under: str | None = None,
    ) -> None:
        for argument, value in (
            ("capacity", capacity),
            ("elements_per_tensor", elements_per_tensor),
            ("max_elements", max_elements),
            ("group_depth", group_depth),
        ):
            check_positive_int(argument, value)
        self._kinds = _check_kinds(kinds)
        self._shards = trainable_parameters(named_parameters)
        _check_same_device(self._shards)
        self._capacity = capacity
        self._group_depth = group_depth
        self._groups_under = common_module(self._shards) if groups_under is None else groups_under
        self._seed = int(seed)
        self._device = next(iter(self._shards.values())).device
        if slices is None:
            sizes = [(name, p.numel) for name, p in self._shards.items()]
            slices = choose_slices(sizes, elements_per_tensor, max_elements, self._seed)
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
        return self._layout.slices

    @property
    def num_elements(self) -> int:
        """K, the number of sampled elements recorded here (columns of a history).

        With sharded parameters, those this rank holds; see :attr:`total_elements`.
        """
        return self._ring.width

    @property
    def total_elements(self) -> int:
        """The number of sampled elements over all ranks (``num_elements`` when not sharded)."""
        return self._layout.total_elements

    @property
    def sharded(self) -> bool:
        """Whether any sampled parameter is sharded over ranks (FSDP)."""
        return self._layout.sharded_columns is not None

    @property
    def sharded_columns(self) -> ShardedColumns | None:
        """Where this rank's columns sit in the whole history; None when nothing is sharded.

        Pass it to :func:`learnscope.autocorrelation.analysis.summarize` (``sharded=``) on every
        rank.
        """
        return self._layout.sharded_columns

    @property
    def num_recorded(self) -> int:
        """How many times :meth:`record` was called since construction or loading."""
        return self._ring.count

    @property
    def num_steps(self) -> int:
        """T, the number of steps :meth:`history` returns: ``min(num_recorded, capacity)``."""
        return self._ring.num_rows

    @property
    def group_names(self) -> list[str]:
        """The module groups, in order of first appearance."""
        return list(self._layout.group_names)

    @property
    def group_index(self) -> Tensor:
        """``[K]`` long tensor on the device: each column's index into ``group_names``."""
        return self._layout.group_index

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers: ``len(kinds) * capacity * K * 4``."""
        return self._ring.nbytes

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
        ring = self._ring
        if ring.width:
            for kind in self._kinds:
                views = self._parameter_views() if kind == "params" else self._gradients.views()
                torch.cat(views, out=ring.staging_row(kind))
        ring.advance()

    def history(self, kind: HistoryKind) -> Tensor:
        """The recorded values, oldest step first.

        Args:
            kind: ``"params"`` or ``"grads"``.

        Returns:
            A new ``[num_steps, K]`` float32 tensor on the device, in chronological order
            also after the ring buffer wrapped around. It is the transpose of a contiguous
            ``[K, num_steps]`` tensor (each element's series is contiguous), which is the
            layout :func:`learnscope.autocorrelation.analysis.summarize` reads fastest.

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
        if kind not in self._kinds:
            raise ValueError(
                f"this history records {self._kinds} only, not {kind!r}; construct it with "
                f"kinds={HISTORY_KINDS} to record {kind} as well"
            )
        return self._ring.rows(kind)

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
            "names": [s.name for s in self.slices],
            "starts": [s.start for s in self.slices],
            "lengths": [s.length for s in self.slices],
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
        slices = [  # a checkpoint saved before names were cleaned of wrappers' parts
            SampledSlice(clean_parameter_name(str(name)), int(start), int(length))
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
        self._layout = column_layout(
            slices, self._shards, self._group_depth, self._device, self._groups_under
        )
        pieces = self._layout.pieces
        self._ring = StagedRingBuffer(
            self._kinds, self._layout.num_elements, self._capacity, self._device
        )
        sharded = self._layout.sharded_columns is not None
        read = pieces if "grads" in self._kinds else ()
        self._gradients = SampledGradients(read, sharded, self._device)
        self._views = _ParameterViews(pieces, sharded)

    def _parameter_views(self) -> list[Tensor]:
        """Views of the sampled slices, cached while the parameters' storage stays put.

        The cache is rebuilt when a parameter's data pointer changes (``p.data = ...``,
        ``model.to(...)``); a device change moves the buffers along (one copy, once).
        """
        views = self._views
        holders = views.holders
        tensors = [local_values(h) for h in holders] if views.sharded else holders
        pointers = tuple(t.data_ptr() for t in tensors)
        if pointers != views.pointers:
            self._follow_device(holders[0].device)
            views.rebuild(tensors, pointers)
        if views.all_cached:
            return views.views  # type: ignore[return-value]
        return views.fill_in(tensors)

    def _follow_device(self, device: torch.device) -> None:
        """Move the buffers to the parameters' device if the model moved."""
        if device == self._device:
            return
        self._device = device
        self._ring.to(device)
        self._layout = self._layout.to(device)
        self._gradients.to(device)


class _ParameterViews:
    """Views of the sampled slices of the parameters, valid while their data pointers hold.

    Args:
        pieces: The local pieces, in column order.
        sharded: Whether the holders may be DTensors (their local tensors are viewed).
    """

    __slots__ = ("all_cached", "holders", "pieces", "pointers", "sharded", "views")

    def __init__(self, pieces: Sequence[LocalPiece], sharded: bool) -> None:
        self.pieces = tuple(pieces)
        self.holders = [piece.holder for piece in pieces]
        self.sharded = sharded
        self.pointers: tuple[int, ...] = ()
        self.views: list[Tensor | None] = []
        self.all_cached = False

    def rebuild(self, tensors: Sequence[Tensor], pointers: tuple[int, ...]) -> None:
        """View each contiguous tensor's piece; None where a tensor is not contiguous."""
        self.views = [
            _flat_slice(t.detach(), p.start, p.length) if t.is_contiguous() else None
            for t, p in zip(tensors, self.pieces, strict=True)
        ]
        self.all_cached = all(view is not None for view in self.views)
        self.pointers = pointers

    def fill_in(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """The cached views, with fresh slices (copies) of the non-contiguous tensors."""
        return [
            _flat_slice(t.detach(), p.start, p.length) if view is None else view
            for view, t, p in zip(self.views, tensors, self.pieces, strict=True)
        ]


def _flat_slice(tensor: Tensor, start: int, length: int) -> Tensor:
    """``tensor.reshape(-1)[start:start + length]``, one cheap view when it is contiguous."""
    if tensor.is_contiguous():
        return tensor.as_strided((length,), (1,), tensor.storage_offset() + start)
    return tensor.reshape(-1)[start : start + length]


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
