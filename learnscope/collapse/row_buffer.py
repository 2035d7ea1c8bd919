"""A bounded buffer of embedding rows (and their graphs) that feeds the collapse metrics.

Example:
    >>> import torch
    >>> buffer = EmbeddingRowBuffer(max_rows=64)
    >>> for _ in range(4):
    ...     buffer.append(torch.randn(16, 4))
    >>> buffer.is_full, round(buffer.compute()["cosine_spread"], 1) > 0.5
    (True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from learnscope.collapse.metrics import (
    check_edge_shape,
    collapse_metrics,
    flatten_rows,
    per_graph_mad,
)

__all__ = ["EmbeddingRowBuffer"]


class EmbeddingRowBuffer:
    """Collect detached embedding rows across batches, on their device, up to ``max_rows``.

    RankMe needs several times more rows than dimensions, more than one batch usually holds.
    The buffer copies rows into one tensor allocated at the first :meth:`append` (``max_rows *
    D`` elements in the first batch's dtype and on its device: 4096 x 256 float32 is 4 MiB),
    without a host synchronisation, and ignores rows once full. Graph batches may bring an
    ``edge_index``: its node indices are shifted by the rows held before the batch, as when
    batches of graphs are concatenated. Edges are kept for the batches whose rows were kept
    (edges into rows cut off by the cap are dropped when read), so memory stops growing when
    the buffer is full. Each process fills its own buffer; nothing is gathered across ranks.

    Graphs, for ``mad_global``: the rows of each appended batch are one graph, unless
    :meth:`append_graphs` says which graph of the batch each row belongs to (and, optionally,
    each graph's id). Graphs of different batches are always different graphs, so the graph
    numbers of the micro-batches of one step never collide: :meth:`graph_index` numbers the
    graphs 0, 1, ... in the order of the batches, then of the graph numbers within each batch.

    Args:
        max_rows: Most rows held (at least 2).

    Raises:
        ValueError: ``max_rows`` is not an integer of at least 2.

    Example:
        >>> import torch
        >>> buffer = EmbeddingRowBuffer(max_rows=5)
        >>> buffer.append(torch.randn(3, 2), torch.tensor([[0, 1], [1, 2]]))
        >>> buffer.append(torch.randn(3, 2), torch.tensor([[0, 1], [1, 2]]))
        >>> buffer.rows().shape, buffer.is_full
        (torch.Size([5, 2]), True)
        >>> buffer.edge_index().tolist()
        [[0, 1, 3], [1, 2, 4]]
        >>> buffer.graph_index().tolist()  # two batches: two graphs
        [0, 0, 0, 1, 1]
    """

    def __init__(self, max_rows: int) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 2:
            raise ValueError(f"max_rows must be an integer of at least 2, got {max_rows!r}")
        self.max_rows = max_rows
        self._storage: Tensor | None = None
        self._num_rows = 0
        self._edge_chunks: list[Tensor] = []
        self._last_edges_cut = False
        # Per batch whose rows were kept: [rows kept, graph index of those rows, graph ids].
        self._graph_chunks: list[list[Any]] = []
        self._last_batch: tuple[int, int] | None = None  # (rows offered, rows kept)

    @property
    def num_rows(self) -> int:
        """Number of rows held.

        Example:
            >>> EmbeddingRowBuffer(8).num_rows
            0
        """
        return self._num_rows

    @property
    def is_full(self) -> bool:
        """Whether the buffer holds ``max_rows`` rows and ignores further batches.

        Example:
            >>> EmbeddingRowBuffer(8).is_full
            False
        """
        return self._num_rows >= self.max_rows

    def append(self, rows: Tensor, edge_index: Tensor | None = None) -> None:
        """Copy a batch of rows in (detached), keeping as many as still fit.

        Args:
            rows: Embeddings ``[B, D]`` or ``[..., D]`` (flattened to rows); D must match the
                rows already held.
            edge_index: Optional ``[2, E]`` integer edges between the rows of this batch,
                numbered from 0 within the batch. Only the shape is checked here (the range
                would need a host synchronisation); :func:`collapse_metrics` checks that the
                indices fall inside the rows held.

        Raises:
            TypeError: ``rows`` is not a floating-point tensor or ``edge_index`` not integer.
            ValueError: Bad shapes, or a dimension other than the rows already held.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(4)
            >>> buffer.append(torch.randn(2, 3, 8))
            >>> buffer.num_rows
            4
        """
        flat = flatten_rows(rows, "rows").detach()
        edges = None if edge_index is None else check_edge_shape(edge_index)
        self._last_batch = (flat.shape[0], 0)
        if self.is_full:
            return
        storage = self._storage_for(flat)
        start = self._num_rows
        kept = min(flat.shape[0], self.max_rows - start)
        with torch.no_grad():
            storage[start : start + kept].copy_(flat[:kept])
        if edges is not None:
            self._edge_chunks.append(edges.to(storage.device, torch.long) + start)
            self._last_edges_cut = kept < flat.shape[0]
        self._num_rows += kept
        self._last_batch = (flat.shape[0], kept)
        if kept:
            self._graph_chunks.append([kept, None, None])

    def append_graphs(
        self, graph_index: Tensor | None = None, ids: Sequence[Any] | Tensor | None = None
    ) -> None:
        """Say which graph each row of the batch last given to :meth:`append` belongs to.

        Without it (or with ``graph_index=None``) that batch's rows are one graph. Nothing is
        read on the host; rows the cap cut off are left out with their graph numbers.

        Args:
            graph_index: Integer tensor ``[B]``, one value per row of that batch (after
                flattening): each row's graph within the batch, numbered from 0 (PyTorch
                Geometric's ``batch.batch``).
            ids: Optional id of each graph of the batch, indexed by the graph number (a
                sequence or a tensor), named by :meth:`graph_ids`.

        Raises:
            ValueError: Nothing was appended since the last reset, or ``graph_index`` is not a
                1-D integer tensor with one value per row of that batch.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> buffer.append(torch.randn(4, 3), torch.tensor([[0, 2], [1, 3]]))
            >>> buffer.append_graphs(torch.tensor([0, 0, 1, 1]), ids=["water", "ethanol"])
            >>> buffer.graph_index().tolist(), buffer.graph_ids()
            ([0, 0, 1, 1], ['water', 'ethanol'])
        """
        if self._last_batch is None:
            raise ValueError("append_graphs() describes the last append()ed batch; append one")
        offered, kept = self._last_batch
        if graph_index is not None:
            if not isinstance(graph_index, Tensor) or graph_index.ndim != 1:
                shape = tuple(getattr(graph_index, "shape", ()))
                raise ValueError(
                    f"graph_index must be a 1-D integer tensor, got {type(graph_index).__name__} "
                    f"of shape {shape}"
                )
            if graph_index.is_floating_point() or graph_index.dtype == torch.bool:
                raise ValueError(f"graph_index must be an integer tensor, got {graph_index.dtype}")
            if graph_index.shape[0] != offered:
                raise ValueError(
                    f"graph_index has {graph_index.shape[0]} values but the last batch had "
                    f"{offered} rows; give each row's graph"
                )
        if kept == 0:
            return
        device = self._storage.device if self._storage is not None else None
        chunk = self._graph_chunks[-1]
        chunk[1] = None if graph_index is None else graph_index[:kept].to(device, torch.long)
        chunk[2] = ids.detach() if isinstance(ids, Tensor) else ids

    def rows(self) -> Tensor:
        """The rows held, ``[num_rows, D]`` (a view of the buffer, valid until the next reset).

        Raises:
            ValueError: Nothing was appended yet.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(4)
            >>> buffer.append(torch.ones(3, 2))
            >>> buffer.rows().sum().item()
            6.0
        """
        if self._storage is None or self._num_rows == 0:
            raise ValueError("the buffer holds no rows yet; append() a batch first")
        return self._storage[: self._num_rows]

    def edge_index(self) -> Tensor | None:
        """The edges of all kept batches, ``[2, E]`` into :meth:`rows`; None if none came.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(3)
            >>> buffer.append(torch.ones(2, 2), torch.tensor([[0], [1]]))
            >>> buffer.append(torch.ones(2, 2), torch.tensor([[0, 1], [1, 0]]))
            >>> buffer.edge_index().tolist()
            [[0], [1]]
        """
        if not self._edge_chunks:
            return None
        chunks = list(self._edge_chunks)
        if self._last_edges_cut:
            last = chunks[-1]
            chunks[-1] = last[:, (last < self._num_rows).all(dim=0)]
        return torch.cat(chunks, dim=1)

    def graph_index(self) -> Tensor | None:
        """Each row's graph, numbered 0, 1, ... over all batches held; None when none is held.

        Reads the largest graph number on the host (one transfer).

        Raises:
            ValueError: A graph index given to :meth:`append_graphs` is negative.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> for _ in range(2):
            ...     buffer.append(torch.randn(3, 2))
            ...     buffer.append_graphs(torch.tensor([0, 1, 1]))
            >>> buffer.graph_index().tolist()
            [0, 1, 1, 2, 3, 3]
        """
        if self._storage is None or self._num_rows == 0:
            return None
        device = self._storage.device
        parts, batches = [], []
        for number, (kept, index, _) in enumerate(self._graph_chunks):
            parts.append(index if index is not None else torch.zeros(kept, device=device))
            batches.append(torch.full((kept,), number, device=device))
        index = torch.cat(parts).to(torch.long)
        low, high = torch.stack([index.min(), index.max()]).tolist()
        if low < 0:
            raise ValueError(f"a graph index must not be negative, got {low}")
        keys = torch.cat(batches).to(torch.long) * (high + 1) + index
        return torch.unique(keys, return_inverse=True)[1]

    def graph_ids(self) -> list[Any] | None:
        """The id of each graph of :meth:`graph_index` (``None`` where its batch gave none).

        ``None`` when no batch held brought ids. Reads each batch's graph numbers on the host.

        Raises:
            ValueError: A batch holds a graph numbered beyond its ids.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> buffer.append(torch.randn(3, 2))
            >>> buffer.append_graphs(torch.tensor([1, 1, 2]), ids=torch.tensor([7, 8, 9]))
            >>> buffer.append(torch.randn(2, 2))
            >>> buffer.graph_ids()
            [8, 9, None]
        """
        if self._num_rows == 0 or all(ids is None for _, _, ids in self._graph_chunks):
            return None
        out: list[Any] = []
        for _, index, ids in self._graph_chunks:
            present = [0] if index is None else torch.unique(index).tolist()
            if ids is None:
                out += [None] * len(present)
                continue
            values = ids.reshape(-1).tolist() if isinstance(ids, Tensor) else list(ids)
            if present[-1] >= len(values):
                raise ValueError(
                    f"a batch has {len(values)} graph ids but holds graph {present[-1]} "
                    "(graphs are numbered from 0): give one id per graph"
                )
            out += [values[i] for i in present]
        return out

    def per_graph_mad(self) -> Tensor:
        """:func:`per_graph_mad` of the rows held, one value per graph of :meth:`graph_index`.

        Raises:
            ValueError: As :meth:`rows` and :meth:`graph_index` do.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> buffer.append(torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0]]))
            >>> buffer.append_graphs(torch.tensor([0, 0, 1]))
            >>> buffer.per_graph_mad().tolist()
            [0.0, nan]
        """
        return per_graph_mad(self.rows(), self.graph_index())

    def compute(self) -> dict[str, float]:
        """Run :func:`collapse_metrics` on the rows (and edges and graphs) held.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(64)
            >>> buffer.append(torch.randn(64, 4))
            >>> sorted(buffer.compute())[:2]
            ['cosine_spread', 'dead_dim_fraction']
        """
        edges = self.edge_index()
        graphs = self.graph_index() if edges is not None else None
        return collapse_metrics(self.rows(), edges, graphs)

    def reset(self) -> None:
        """Forget the rows, edges and graphs held; the storage is kept for reuse.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(4)
            >>> buffer.append(torch.ones(4, 2))
            >>> buffer.reset()
            >>> buffer.num_rows, buffer.edge_index()
            (0, None)
        """
        self._num_rows = 0
        self._edge_chunks = []
        self._last_edges_cut = False
        self._graph_chunks = []
        self._last_batch = None

    def _storage_for(self, flat: Tensor) -> Tensor:
        """Return the storage, allocating it for ``flat``'s width, dtype and device if needed."""
        storage = self._storage
        if storage is not None and self._num_rows > 0:
            if storage.shape[1] != flat.shape[1]:
                raise ValueError(
                    f"rows have {flat.shape[1]} dimensions but the buffer holds rows of "
                    f"{storage.shape[1]}; reset() before changing the embedding"
                )
            return storage
        fits = (
            storage is not None
            and storage.shape[1] == flat.shape[1]
            and storage.dtype == flat.dtype
            and storage.device == flat.device
        )
        if not fits:
            # A tensor made under inference mode could not be written to outside it later.
            with torch.inference_mode(False):
                storage = torch.empty(
                    self.max_rows, flat.shape[1], dtype=flat.dtype, device=flat.device
                )
            self._storage = storage
        return storage
