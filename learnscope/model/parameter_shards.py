"""Sharded parameters (FSDP2, FSDP1): the original parameters' names and what each rank holds.

Under PyTorch FSDP2 (``fully_shard``) every parameter is a ``DTensor`` of which each rank holds
a block (rows, for the default ``Shard(0)``). Under FSDP1 (``FullyShardedDataParallel``) the
parameters of each wrapped module are flattened into one ``FlatParameter`` of which each rank
holds a contiguous part; ``named_parameters()`` then names either that flat parameter
(``..._fsdp_wrapped_module._flat_param``) or, with ``use_orig_params=True``, the original
parameters, each a 1-D view of its part of the local shard (empty on ranks holding none of it).

:func:`parameter_shards` turns any of these into one :class:`ParameterShard` per original
parameter: its original name (FSDP's ``_fsdp_wrapped_module`` and similar components removed),
its full shape, and which of its elements this rank holds, as runs of flat indices. An ordinary
model gives one shard per parameter that holds everything, so one code path serves both: sums
over the local elements, summed over the ranks (:func:`learnscope.model.ranks.sum_over_ranks`) when
the model is sharded, equal those of the unsharded model. Nothing here communicates.

Every element is held by exactly one rank: a ``DTensor`` replicated over a mesh dimension (HSDP)
counts on the ranks at coordinate 0 of that dimension only.

Wrappers that only rename the parameters are seen through as well, so that module groups are the
user's modules: Lightning Fabric (``_forward_module.``), ``torch.compile`` (``_orig_mod.``,
also of a compiled sub-module), and, given the model, DDP and DataParallel (``module.``); see
:func:`unwrap_model` and :func:`~learnscope.model.parameter_names.clean_parameter_name`.

Example:
    >>> import torch
    >>> model = torch.nn.Linear(3, 2)
    >>> [(s.name, s.shape, s.sharded) for s in parameter_shards(model)]
    [('weight', (2, 3), False), ('bias', (2,), False)]
    >>> is_sharded(model)
    False
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from learnscope.model.parameter_names import clean_parameter_name, common_module

__all__ = ["ParameterShard", "groups_under", "is_sharded", "parameter_shards", "unwrap_model"]

_DATA_PARALLEL = (nn.parallel.DistributedDataParallel, nn.DataParallel)
_FLAT_PARAM = "_flat_param"
_NO_RUNS = np.zeros((0, 3), dtype=np.int64)


def _is_dtensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a DTensor, without importing ``torch.distributed.tensor``.

    A DTensor exists only once that module was imported, so an unimported module means no.
    """
    module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(module, "DTensor", None)
    return dtensor is not None and isinstance(tensor, dtensor)


@dataclass(frozen=True, eq=False)
class ParameterShard:
    """What this rank holds of one original parameter.

    Attributes:
        name: The original parameter's name, as the unwrapped model's ``named_parameters()``
            gives it.
        shape: The original parameter's full shape.
        holder: The tensor that holds this rank's elements and that the optimizer steps: the
            parameter itself, a ``DTensor``, or FSDP1's ``FlatParameter`` (shared by several
            original parameters).
        local_start: Where this parameter's elements begin in the holder's flattened local
            tensor.
        local_numel: How many of them this rank holds (0: none).
        runs: ``[R, 3]`` int64 rows ``(global start, local start, length)``, sorted by global
            start: element ``g`` of the flattened original parameter, for ``g`` in
            ``global start + range(length)``, is at ``local start + (g - global start)`` in the
            holder's flattened local tensor.
        sharded: Whether the parameter is split over ranks (then every rank must take part in
            the sums over ranks).

    Example:
        >>> import torch
        >>> shard = parameter_shards([("w", torch.nn.Parameter(torch.ones(2, 3)))])[0]
        >>> shard.numel, shard.runs.tolist(), shard.elements().tolist()
        (6, [[0, 0, 6]], [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    """

    name: str
    shape: tuple[int, ...]
    holder: Tensor
    local_start: int
    local_numel: int
    runs: np.ndarray
    sharded: bool

    @property
    def numel(self) -> int:
        """Elements of the whole original parameter."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """Dimensions of the original parameter."""
        return len(self.shape)

    @property
    def requires_grad(self) -> bool:
        """Whether the holder requires a gradient."""
        return bool(self.holder.requires_grad)

    @property
    def device(self) -> torch.device:
        """The device of the local elements."""
        return self.holder.device

    def local_flat(self, grad: bool = False) -> Tensor | None:
        """The holder's flattened local values (or gradient), detached; None without gradient.

        Example:
            >>> import torch
            >>> shard = parameter_shards(torch.nn.Linear(2, 1))[0]
            >>> shard.local_flat().shape, shard.local_flat(grad=True)
            (torch.Size([2]), None)
        """
        tensor = self.holder.grad if grad else self.holder
        if tensor is None:
            return None
        tensor = _local(tensor).detach()
        return tensor.reshape(-1) if tensor.ndim != 1 else tensor

    def elements(self, grad: bool = False) -> Tensor | None:
        """This parameter's local values (or gradient): all of them when not sharded.

        Unsharded, the parameter (or its gradient, sparse included) as it is; sharded, the
        1-D run of the local shard that belongs to this parameter (empty when the rank holds
        none of it). None when there is no gradient.

        Example:
            >>> import torch
            >>> layer = torch.nn.Linear(2, 1)
            >>> parameter_shards(layer)[0].elements().shape
            torch.Size([1, 2])
        """
        if not self.sharded:
            tensor = self.holder.grad if grad else self.holder
            return None if tensor is None else tensor.detach()
        if self.local_numel == 0:
            tensor = self.holder.grad if grad else self.holder
            if tensor is None:
                return None
            return _local(tensor).new_zeros(0)
        flat = self.local_flat(grad)
        if flat is None:
            return None
        return flat[self.local_start : self.local_start + self.local_numel]

    def pieces(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """The local runs of the flat element range ``start:stop`` of the original parameter.

        Returns:
            ``(global start, local start, length)`` per run, in global order; empty when this
            rank holds none of those elements.

        Example:
            >>> import torch
            >>> parameter_shards([("w", torch.nn.Parameter(torch.ones(10)))])[0].pieces(2, 5)
            [(2, 2, 3)]
        """
        runs = self.runs
        if len(runs) == 0:
            return []
        ends = runs[:, 0] + runs[:, 2]
        first = int(np.searchsorted(ends, start, side="right"))
        last = int(np.searchsorted(runs[:, 0], stop, side="left"))
        found = []
        for global_start, local_start, length in runs[first:last].tolist():
            low, high = max(start, global_start), min(stop, global_start + length)
            if high > low:
                found.append((low, local_start + low - global_start, high - low))
        return found


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside the wrappers that rename parameters, each unwrapped in turn.

    Lightning Fabric's ``_FabricModule`` (to the module it runs, recognised by its class name
    and ``_forward_module``, without importing Lightning), ``DistributedDataParallel`` and
    ``DataParallel`` (``.module``) and ``torch.compile``'s ``OptimizedModule``
    (``._orig_mod``). FSDP is kept: its modules tell which part of each parameter a rank holds.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 1)
        >>> unwrap_model(torch.nn.DataParallel(layer)) is layer
        True
    """
    while True:
        inner = _wrapped_module(model)
        if inner is None:
            return model
        model = inner


def _wrapped_module(model: nn.Module) -> nn.Module | None:
    """The module a known wrapper holds, or None when ``model`` is no such wrapper."""
    if isinstance(model, _DATA_PARALLEL):
        return model.module
    if type(model).__name__ == "_FabricModule":
        inner = getattr(model, "_forward_module", None)
        return inner if isinstance(inner, nn.Module) else None
    compiled = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    if compiled is not None and isinstance(model, compiled):
        return model._orig_mod
    return None


def parameter_shards(
    source: nn.Module | Iterable[tuple[str, Tensor]] | Iterable[ParameterShard],
) -> list[ParameterShard]:
    """One :class:`ParameterShard` per original parameter (trainable or not), in model order.

    Names are those of the user's modules: a model is first unwrapped (:func:`unwrap_model`:
    Lightning Fabric, DDP, ``torch.compile``), and the components that wrappers insert are
    dropped from every name (:func:`~learnscope.model.parameter_names.clean_parameter_name`), so
    that a compiled sub-module's ``encoder._orig_mod.0.weight`` is ``encoder.0.weight``.

    Args:
        source: A model, ``(name, parameter)`` pairs (its ``named_parameters()``), or shards
            (returned as they are). Pairs suffice for ordinary and FSDP2 models and for FSDP1's
            flat parameters; FSDP1 with ``use_orig_params=True`` needs the model, whose FSDP
            modules tell where each original parameter's part lies, and so does DDP (whose
            ``module.`` is not dropped from names).

    Returns:
        The shards; an FSDP1 flat parameter gives one per original parameter it holds.

    Raises:
        ValueError: On FSDP1 original parameters passed as pairs without the model.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> [s.name for s in parameter_shards(model.named_parameters())]
        ['0.weight', '0.bias']
    """
    if isinstance(source, nn.Module):
        source = unwrap_model(source)
        original = _fsdp1_original_parameters(source)
        named: Iterable[Any] = source.named_parameters()
    else:
        original = {}
        named = source
    shards: list[ParameterShard] = []
    flat = False
    for item in named:
        if isinstance(item, ParameterShard):
            shards.append(item)
            continue
        name, parameter = item
        if id(parameter) in original:
            shape, info = original[id(parameter)]
            shards.append(_fsdp1_shard(clean_parameter_name(name), shape, info, parameter))
        elif hasattr(parameter, "_shard_param_infos") and hasattr(parameter, "_fqns"):
            shards.extend(_flat_parameter_shards(name, parameter))
            flat = True
        elif _is_dtensor(parameter):
            shards.append(_dtensor_shard(clean_parameter_name(name), parameter))
        else:
            if _FSDP1_PART in name.split("."):
                raise ValueError(
                    f"{name!r} is an original parameter of an FSDP1 model with "
                    "use_orig_params=True: pass the model itself, not its named_parameters(), "
                    "so that its FSDP modules tell which part of it this rank holds"
                )
            shards.append(_whole(clean_parameter_name(name), parameter))
    if flat and isinstance(source, nn.Module):
        shards = _in_model_order(source, shards)
    return shards


def groups_under(shards: Iterable[ParameterShard]) -> str:
    """The module the parameter groups are taken below: the deepest holding every trainable one.

    The trainable parameters are the non-empty ones that require a gradient, of the whole
    model (every optimizer's; on every rank the same names, sharded or not). See
    :func:`~learnscope.model.parameter_names.common_module` and
    :func:`~learnscope.model.parameter_names.group_name`.

    Example:
        >>> import torch
        >>> wrapper = torch.nn.ModuleDict({"model": torch.nn.Sequential(torch.nn.Linear(2, 2))})
        >>> groups_under(parameter_shards(wrapper))
        'model.0'
    """
    return common_module(shard.name for shard in shards if shard.requires_grad and shard.numel)


def _in_model_order(model: nn.Module, shards: list[ParameterShard]) -> list[ParameterShard]:
    """Shards in the order the unwrapped model's ``named_parameters()`` would give them.

    FSDP1 flat parameters list the root's parameters before those of nested FSDP modules; the
    unwrapped model lists each module's own parameters in a pre-order walk of its modules.
    """
    position: dict[str, int] = {}
    for index, (name, _) in enumerate(model.named_modules()):
        position.setdefault(clean_parameter_name(name), index)
    last = len(position)
    return sorted(shards, key=lambda shard: position.get(shard.name.rpartition(".")[0], last))


_FSDP1_PART = "_fsdp_wrapped_module"


def is_sharded(source: nn.Module | Iterable[tuple[str, Tensor]] | Iterable[ParameterShard]) -> bool:
    """Whether any parameter is sharded over ranks (FSDP2 ``DTensor`` or FSDP1).

    Example:
        >>> import torch
        >>> is_sharded(torch.nn.Linear(2, 2))
        False
    """
    return any(shard.sharded for shard in parameter_shards(source))


def _local(tensor: Tensor) -> Tensor:
    """A DTensor's local tensor (no communication, no DTensor dispatch), or the tensor itself."""
    if _is_dtensor(tensor):
        with torch.no_grad():
            return tensor.to_local()
    return tensor


def _whole(name: str, parameter: Tensor) -> ParameterShard:
    numel = parameter.numel()
    runs = np.array([[0, 0, numel]], dtype=np.int64) if numel else _NO_RUNS
    return ParameterShard(name, tuple(parameter.shape), parameter, 0, numel, runs, False)


def _dtensor_shard(name: str, parameter: Tensor) -> ParameterShard:
    """The block of a DTensor this rank holds, as runs of the flattened full tensor."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape = tuple(parameter.shape)
    mesh, placements = parameter.device_mesh, parameter.placements
    coordinate = mesh.get_coordinate()
    owner = coordinate is not None and all(
        place.is_shard() or index == 0 for place, index in zip(placements, coordinate, strict=True)
    )
    local_shape, offset = compute_local_shape_and_global_offset(shape, mesh, placements)
    local_numel = math.prod(local_shape)
    if not owner or local_numel == 0:
        return ParameterShard(name, shape, parameter, 0, 0, _NO_RUNS, True)
    return ParameterShard(
        name, shape, parameter, 0, local_numel, _box_runs(shape, local_shape, offset), True
    )


def _box_runs(
    shape: Sequence[int], local_shape: Sequence[int], offset: Sequence[int]
) -> np.ndarray:
    """Runs ``(global start, local start, length)`` of a block of a row-major tensor."""
    partial = [d for d in range(len(shape)) if local_shape[d] != shape[d]]
    if not partial:
        return np.array([[0, 0, math.prod(shape)]], dtype=np.int64)
    last = partial[-1]
    length = math.prod(local_shape[last:])  # local_shape equals shape after ``last``
    leading = local_shape[:last]
    count = math.prod(leading)
    index = np.indices(leading, dtype=np.int64).reshape(last, count) if last else None
    global_index = np.zeros((len(shape), count), dtype=np.int64)
    if index is not None:
        global_index[:last] = index + np.asarray(offset[:last], dtype=np.int64)[:, None]
    global_index[last] = offset[last]
    starts = np.ravel_multi_index(tuple(global_index), tuple(shape))
    local = np.arange(count, dtype=np.int64) * length
    runs = np.stack([starts, local, np.full(count, length, dtype=np.int64)], axis=1)
    return runs[np.argsort(runs[:, 0], kind="stable")]


def _fsdp1_shard(name: str, shape: tuple[int, ...], info: Any, holder: Tensor) -> ParameterShard:
    """An FSDP1 original parameter (``use_orig_params=True``): a 1-D view of its local part."""
    if not info.in_shard or not info.numel_in_shard:
        return ParameterShard(name, shape, holder, 0, 0, _NO_RUNS, True)
    runs = np.array([[info.intra_param_start_idx, 0, info.numel_in_shard]], np.int64)
    return ParameterShard(name, shape, holder, 0, info.numel_in_shard, runs, True)


def _flat_parameter_shards(name: str, flat: Tensor) -> list[ParameterShard]:
    """The original parameters inside an FSDP1 ``FlatParameter`` (``use_orig_params=False``)."""
    prefix = clean_parameter_name(name.removesuffix(_FLAT_PARAM).rstrip("."))
    shards = []
    for fqn, shape, info in zip(flat._fqns, flat._shapes, flat._shard_param_infos, strict=True):
        full = f"{prefix}.{fqn}" if prefix else fqn
        if not info.in_shard or not info.numel_in_shard:
            shards.append(ParameterShard(full, tuple(shape), flat, 0, 0, _NO_RUNS, True))
            continue
        start = info.offset_in_shard
        runs = np.array([[info.intra_param_start_idx, start, info.numel_in_shard]], np.int64)
        shards.append(
            ParameterShard(full, tuple(shape), flat, start, info.numel_in_shard, runs, True)
        )
    return shards


def _fsdp1_original_parameters(model: nn.Module) -> dict[int, tuple[tuple[int, ...], Any]]:
    """``id(original parameter) -> (full shape, shard info)`` for FSDP1 ``use_orig_params``."""
    found: dict[int, tuple[tuple[int, ...], Any]] = {}
    for module in model.modules():
        handle = getattr(module, "_handle", None)
        flat = getattr(handle, "flat_param", None)
        originals = getattr(flat, "_params", None)
        if flat is None or not originals or not getattr(handle, "_use_orig_params", False):
            continue
        for parameter, shape, info in zip(
            originals, flat._shapes, flat._shard_param_infos, strict=True
        ):
            found[id(parameter)] = (tuple(shape), info)
    return found
