"""What a sampled history reads of the gradients each step: dense views, sparse ranges, zeros.

A :class:`~learnscope.autocorrelation.sampled_history.SampledParameterHistory` samples contiguous
runs of each parameter's flattened elements. :class:`SampledGradients` reads the same runs of the
current gradients, without any host synchronisation:

* a dense gradient gives a view of the run (a copy when it is not contiguous);
* a sparse COO gradient (``nn.Embedding(sparse=True)``, whose optimizer is ``SparseAdam``,
  ``SGD`` or ``Adagrad``) gives the run of its dense view, computed from the stored values
  without materialising the dense tensor (:func:`sparse_range`);
* a gradient of another layout (sparse CSR, CSC, BSR, BSC, MKL-DNN, nested) records zeros,
  which the analysis reads as "no gradient", with one warning naming the parameter;
* a parameter without a gradient (``.grad`` is None) records zeros.

Example:
    >>> import torch
    >>> from learnscope.autocorrelation.sampled_columns import LocalPiece
    >>> table = torch.nn.Embedding(5, 2, sparse=True)
    >>> table(torch.tensor([3, 3])).sum().backward()
    >>> piece = LocalPiece("table.weight", table.weight, start=5, length=4, column=0)
    >>> SampledGradients([piece], sharded=False, device=torch.device("cpu")).views()
    [tensor([0., 2., 2., 0.])]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from learnscope.autocorrelation.sampled_columns import LocalPiece

__all__ = ["SampledGradients", "local_values", "sparse_range"]

log = logging.getLogger("learnscope")


class GradientPiece(NamedTuple):
    """One sampled run of a parameter's gradient, as :meth:`SampledGradients.views` reads it.

    Attributes:
        holder: The tensor whose ``.grad`` holds the run (the parameter, a DTensor or a flat
            parameter).
        start: Where the run begins in the flattened local gradient.
        length: How many elements.
        zeros: ``length`` float32 zeros on the device, recorded when there is no gradient.
        name: The parameter's name.

    Example:
        >>> import torch
        >>> GradientPiece(torch.zeros(4), 1, 2, torch.zeros(2), "weight").length
        2
    """

    holder: Tensor
    start: int
    length: int
    zeros: Tensor
    name: str


class SampledGradients:
    """The sampled runs of the current gradients, read afresh at every step.

    Gradients are new tensors at every step (``zero_grad(set_to_none=True)``), so nothing is
    cached: each call makes one ``as_strided`` view per run of a contiguous dense gradient, the
    fewest Python calls that can do it. A gradient whose layout cannot be read records zeros,
    with one warning per parameter on the ``learnscope`` logger.

    Args:
        pieces: The local runs, in column order.
        sharded: Whether the holders may be DTensors (their local tensors are read).
        device: Where the zeros of a missing gradient live (the parameters' device).

    Example:
        >>> import torch
        >>> from learnscope.autocorrelation.sampled_columns import LocalPiece
        >>> weight = torch.nn.Parameter(torch.zeros(4))
        >>> gradients = SampledGradients(
        ...     [LocalPiece("weight", weight, 1, 2, 0)], sharded=False, device=torch.device("cpu")
        ... )
        >>> gradients.views()
        [tensor([0., 0.])]
        >>> weight.grad = torch.arange(4.0)
        >>> gradients.views()
        [tensor([1., 2.])]
    """

    __slots__ = ("_pieces", "_sharded", "_unreadable")

    def __init__(self, pieces: Sequence[LocalPiece], sharded: bool, device: torch.device) -> None:
        longest = max((piece.length for piece in pieces), default=0)
        zeros = torch.zeros(longest, dtype=torch.float32, device=device)
        self._pieces = [
            GradientPiece(p.holder, p.start, p.length, zeros[: p.length], p.name) for p in pieces
        ]
        self._sharded = sharded
        self._unreadable: set[str] = set()  # parameters already warned about

    def views(self) -> list[Tensor]:
        """The sampled run of every gradient, in column order; zeros where there is none.

        No host synchronisation: everything is a view or work queued on the device.
        """
        views = []
        for piece in self._pieces:
            gradient = piece.holder.grad
            if gradient is None:
                views.append(piece.zeros)
                continue
            if self._sharded:
                gradient = local_values(gradient)
            if gradient.layout != torch.strided:
                views.append(self._other_layout(piece, gradient))
            elif gradient.is_contiguous():
                offset = gradient.storage_offset() + piece.start
                views.append(gradient.as_strided((piece.length,), (1,), offset))
            else:
                views.append(gradient.reshape(-1)[piece.start : piece.start + piece.length])
        return views

    def to(self, device: torch.device) -> None:
        """Keep the zeros on ``device`` (the parameters moved)."""
        self._pieces = [piece._replace(zeros=piece.zeros.to(device)) for piece in self._pieces]

    def _other_layout(self, piece: GradientPiece, gradient: Tensor) -> Tensor:
        """The run of a sparse COO gradient; zeros, warned once, for other layouts."""
        if gradient.layout == torch.sparse_coo:
            return sparse_range(gradient, piece.start, piece.length)
        if piece.name not in self._unreadable:
            self._unreadable.add(piece.name)
            log.warning(
                "learnscope: the gradient of %r is %s, which the sampled history cannot read "
                "(it reads dense and sparse COO gradients); its sampled elements record zeros, "
                "shown as no gradient, and the other parameters are analysed as usual",
                piece.name,
                gradient.layout,
            )
        return piece.zeros


def sparse_range(tensor: Tensor, start: int, length: int) -> Tensor:
    """``tensor.to_dense().reshape(-1)[start : start + length]`` of a sparse COO tensor, cheaply.

    Only the rows that the range touches are made dense: the stored values are added into a
    block of those rows (duplicates of an uncoalesced tensor sum, as COO means), and the values
    of every other row into a spare row before or after them, which is dropped. A row is one
    index over the sparse dimensions, holding the dense trailing dimensions of a hybrid tensor
    (an embedding's row). It costs ``O(nnz * row size)``, the size of the sparse tensor itself,
    whatever the dense size, and never synchronises with the host (no boolean indexing, no
    ``.item()``).

    Args:
        tensor: A sparse COO tensor, coalesced or not, with any number of dense dimensions.
        start: The first element of the range in the flattened dense tensor.
        length: How many elements; the range must lie within the tensor.

    Returns:
        A dense 1-D tensor of ``length`` elements, of the tensor's dtype and device.

    Example:
        >>> import torch
        >>> indices = torch.tensor([[0, 2, 0], [1, 0, 1]])  # (0, 1) twice: uncoalesced
        >>> values = torch.tensor([1.0, 5.0, 2.0])
        >>> tensor = torch.sparse_coo_tensor(indices, values, (3, 2), check_invariants=True)
        >>> sparse_range(tensor, 1, 4)
        tensor([3., 0., 0., 5.])
    """
    sparse_dims = tensor.sparse_dim()
    row_size = math.prod(tensor.shape[sparse_dims:])
    first_row = start // row_size
    num_rows = (start + length - 1) // row_size - first_row + 1
    values = tensor._values()
    rows = _row_positions(tensor._indices(), tensor.shape[:sparse_dims])
    # Block row 0 takes the values of every row before the range, the last one of every row
    # after it: a clamp, where a mask would be three more operations.
    block_rows = (rows - (first_row - 1)).clamp_(0, num_rows + 1)
    block = values.new_zeros(num_rows + 2, row_size)
    block.index_add_(0, block_rows, values.reshape(-1, row_size))
    offset = start - (first_row - 1) * row_size
    return block.view(-1)[offset : offset + length]


def _row_positions(indices: Tensor, sparse_shape: Sequence[int]) -> Tensor:
    """The row-major position of every stored value over the sparse dimensions (``[nnz]``)."""
    if not sparse_shape:
        return indices.new_zeros(indices.shape[1])
    positions = indices[0]
    for dim, size in enumerate(sparse_shape[1:], start=1):
        positions = positions * size + indices[dim]
    return positions


def local_values(tensor: Tensor) -> Tensor:
    """The local tensor of a DTensor (no communication), else the tensor; detached.

    Called under ``no_grad``, where ``DTensor.to_local()`` returns its local tensor as it is,
    without the DTensor dispatch that ``detach()`` would go through.

    Example:
        >>> import torch
        >>> local_values(torch.nn.Parameter(torch.ones(2))).requires_grad
        False
    """
    to_local = getattr(tensor, "to_local", None)
    return to_local().detach() if to_local is not None else tensor.detach()
