"""A device-side ring buffer of the last ``capacity`` rows of K values per kind, time last.

Writing one column of a ``[K, capacity]`` tensor per step is a strided write; this buffer
instead hands out a contiguous row of a time-first staging block ``[min(16, capacity), K]``
to write each step, and moves the block into the time-last buffers in one copy every 16 steps
(or at the end of the ring). Reading gives each kind's rows oldest first.

Example:
    >>> import torch
    >>> ring = StagedRingBuffer(("params",), width=2, capacity=3, device=torch.device("cpu"))
    >>> for step in range(4):
    ...     _ = ring.staging_row("params").fill_(step)
    ...     ring.advance()
    >>> ring.rows("params").tolist()
    [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["StagedRingBuffer"]

_BYTES_PER_VALUE = 4  # float32
_BLOCK_ROWS = 16  # steps staged time-first before one copy into the time-last buffers


class StagedRingBuffer:
    """One float32 ``[width, capacity]`` ring buffer per kind, written through a staging block.

    Each step, write the step's values into :meth:`staging_row` of every kind, then call
    :meth:`advance`. Nothing here synchronises with the host.

    Args:
        kinds: The names of the recorded kinds (one buffer each).
        width: K, values per row.
        capacity: How many rows (steps) the buffers hold.
        device: Where the buffers live.

    Attributes:
        count: How many rows were written since construction.

    Example:
        >>> import torch
        >>> ring = StagedRingBuffer(("params", "grads"), 4, 8, torch.device("cpu"))
        >>> ring.nbytes, ring.block_rows
        (256, 8)
    """

    def __init__(
        self, kinds: Sequence[str], width: int, capacity: int, device: torch.device
    ) -> None:
        self.capacity = capacity
        self.width = width
        self.block_rows = min(_BLOCK_ROWS, capacity)
        self.buffers = {
            kind: torch.zeros(width, capacity, dtype=torch.float32, device=device) for kind in kinds
        }
        self._blocks = {
            kind: torch.empty(self.block_rows, width, dtype=torch.float32, device=device)
            for kind in kinds
        }
        self.count = 0
        self._block_start = 0

    @property
    def num_rows(self) -> int:
        """How many rows :meth:`rows` returns: ``min(count, capacity)``."""
        return min(self.count, self.capacity)

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers (the staging block not counted): ``kinds * capacity * K * 4``."""
        return len(self.buffers) * self.capacity * self.width * _BYTES_PER_VALUE

    def staging_row(self, kind: str) -> Tensor:
        """The contiguous ``[width]`` row that holds ``kind``'s values of the current step.

        Example:
            >>> import torch
            >>> ring = StagedRingBuffer(("grads",), 3, 4, torch.device("cpu"))
            >>> ring.staging_row("grads").shape
            torch.Size([3])
        """
        return self._blocks[kind][self.count - self._block_start]

    def advance(self) -> None:
        """End the current step; every ``block_rows`` steps the block goes into the buffers.

        Example:
            >>> import torch
            >>> ring = StagedRingBuffer(("params",), 1, 32, torch.device("cpu"))
            >>> for _ in range(17):
            ...     ring.advance()
            >>> ring.count, ring.num_rows
            (17, 17)
        """
        self.count += 1
        if self.count - self._block_start == self.block_rows or self.count % self.capacity == 0:
            self.flush()

    def flush(self) -> None:
        """Copy the staged rows into their columns of the buffers (one copy per kind).

        Example:
            >>> import torch
            >>> ring = StagedRingBuffer(("params",), 2, 8, torch.device("cpu"))
            >>> _ = ring.staging_row("params").fill_(5.0)
            >>> ring.advance()
            >>> ring.flush()
            >>> ring.buffers["params"][:, 0].tolist()
            [5.0, 5.0]
        """
        rows = self.count - self._block_start
        if rows and self.width:
            column = self._block_start % self.capacity
            for kind, buffer in self.buffers.items():
                buffer[:, column : column + rows].copy_(self._blocks[kind][:rows].T)
        self._block_start = self.count

    def rows(self, kind: str) -> Tensor:
        """``kind``'s last ``num_rows`` rows, oldest first: a new ``[num_rows, width]`` tensor.

        It is the transpose of a contiguous ``[width, num_rows]`` tensor (each column's series
        is contiguous).

        Example:
            >>> import torch
            >>> ring = StagedRingBuffer(("params",), 2, 8, torch.device("cpu"))
            >>> ring.advance()
            >>> ring.rows("params").shape, ring.rows("params").T.is_contiguous()
            (torch.Size([1, 2]), True)
        """
        self.flush()
        buffer = self.buffers[kind]
        if self.count <= self.capacity:
            return buffer[:, : self.count].contiguous().T
        column = self.count % self.capacity
        return torch.cat([buffer[:, column:], buffer[:, :column]], dim=1).T

    def to(self, device: torch.device) -> None:
        """Move the buffers and the staging block to ``device`` (one copy each).

        Example:
            >>> import torch
            >>> ring = StagedRingBuffer(("params",), 2, 8, torch.device("cpu"))
            >>> ring.to(torch.device("meta"))
            >>> ring.buffers["params"].device.type
            'meta'
        """
        self.buffers = {kind: b.to(device) for kind, b in self.buffers.items()}
        self._blocks = {kind: b.to(device) for kind, b in self._blocks.items()}
