"""A batch's embedding rows: which sample each row belongs to, its columns, the rows kept.

A sample may give several rows: a sequence one per token, a graph one per node. A
:class:`RowSamples` says which sample of the batch each row belongs to; values given per sample
(ids, metadata, images) are spread over the sample's rows with it, and each row's number within
its sample (a ``position`` or ``node`` column) is mixed into its key
(:class:`~learnscope.embeddings.rows.EmbeddingRows` keeps an epoch's rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

POSITION_COLUMN = "position"  # token number within its sample, for [batch, tokens, dim] outputs
NODE_COLUMN = "node"  # node number within its graph, for graph batches


class RowSamples(NamedTuple):
    """Which sample of the batch each embedding row belongs to, when a sample gives several rows.

    Made by :func:`token_rows` or :func:`graph_rows`.

    Attributes:
        index: ``int64 [R]``: each row's sample within the batch, from 0 to ``count - 1``.
        count: Number of samples in the batch.
        within: ``int64 [R]``: each row's number within its sample (0, 1, ...).
        column: Name of the metadata column that shows ``within``.
        per_sample: Rows per sample when every sample has that many, in sample order (tokens);
            per-sample Python lists are then spread without reading ``index`` on the host.
    """

    index: torch.Tensor
    count: int
    within: torch.Tensor
    column: str
    per_sample: int | None = None

    @property
    def unit(self) -> str:
        """What a sample is called in messages: ``"samples"`` or ``"graphs"``."""
        return "graphs" if self.column == NODE_COLUMN else "samples"


def token_rows(shape: Sequence[int], device: torch.device | str | None = None) -> RowSamples | None:
    """The samples of an output of shape ``[B, ..., D]``: one row per token, in order.

    ``None`` when each sample gives one row (``[B, D]``, or ``[B, 1, D]``).

    Example:
        >>> samples = token_rows((2, 3, 8))
        >>> samples.index.tolist(), samples.within.tolist(), samples.column
        ([0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2], 'position')
    """
    count = int(shape[0])
    per_sample = 1
    for size in shape[1:-1]:
        per_sample *= int(size)
    if count == 0 or per_sample <= 1:
        return None
    index = torch.arange(count, device=device).repeat_interleave(per_sample)
    within = torch.arange(per_sample, device=device).repeat(count)
    return RowSamples(index, count, within, POSITION_COLUMN, per_sample)


def graph_rows(index: torch.Tensor, count: int | None = None) -> RowSamples:
    """The samples of a batch of graphs whose rows are nodes: ``index[i]`` is row ``i``'s graph.

    Each node's number within its graph counts the graph's rows in batch order (PyTorch
    Geometric and DGL keep each graph's nodes together, but they need not be together).

    Args:
        index: Integer tensor ``[R]``: each row's graph within the batch, from 0 to
            ``count - 1``.
        count: Number of graphs in the batch (PyTorch Geometric's ``batch.num_graphs``); then
            nothing is read on the host. By default the largest index plus one, read on the
            host, where the index is also checked.

    Returns:
        The rows' samples, with a ``node`` column.

    Raises:
        ValueError: When ``index`` is not a 1-D integer tensor, or (without ``count``) has a
            negative value.

    Example:
        >>> samples = graph_rows(torch.tensor([0, 0, 1, 2, 2, 2]))
        >>> samples.count, samples.within.tolist(), samples.column
        (3, [0, 1, 0, 0, 1, 2], 'node')
    """
    if not isinstance(index, torch.Tensor) or index.ndim != 1 or index.is_floating_point():
        kind = (
            f"shape {tuple(index.shape)}"
            if isinstance(index, torch.Tensor)
            else type(index).__name__
        )
        raise ValueError(f"a graph index must be a 1-D integer tensor, got {kind}")
    index = index.to(torch.int64)
    rows = len(index)
    if count is None:
        count = 0
        if rows:
            low, high = (int(v) for v in torch.aminmax(index))
            if low < 0:
                raise ValueError(f"a graph index must not be negative, got {low}")
            count = high + 1
    # A node's number is its place among its graph's rows: sort the rows by graph (stable), and
    # subtract from each sorted place the first place of its graph.
    order = torch.argsort(index, stable=True)
    ordered = index[order]
    places = torch.arange(rows, device=index.device)
    first = torch.full((max(count, 1),), rows, dtype=torch.int64, device=index.device)
    first = first.scatter_reduce(0, ordered, places, "amin")
    within = torch.empty_like(index)
    within[order] = places - first[ordered]
    return RowSamples(index, count, within, NODE_COLUMN)


def pyg_graphs(batch: Any) -> tuple[torch.Tensor, int] | None:
    """``(batch.batch, number of graphs)`` of a PyTorch Geometric batch of graphs, else None.

    The number of graphs comes from ``batch.ptr`` (or ``batch.num_graphs``), without reading
    anything on the host. Whether ``batch.batch`` describes the embedding's rows (nodes) is for
    the caller to decide, by its length.

    Example:
        >>> from types import SimpleNamespace
        >>> batch = SimpleNamespace(batch=torch.tensor([0, 0, 1]), ptr=torch.tensor([0, 2, 3]))
        >>> index, count = pyg_graphs(batch)
        >>> index.tolist(), count
        ([0, 0, 1], 2)
        >>> pyg_graphs({"x": torch.zeros(3, 2)}) is None
        True
    """
    index = getattr(batch, "batch", None)
    if not isinstance(index, torch.Tensor) or index.ndim != 1 or index.is_floating_point():
        return None
    ptr = getattr(batch, "ptr", None)
    if isinstance(ptr, torch.Tensor) and ptr.ndim == 1:
        return index, ptr.numel() - 1
    count = getattr(batch, "num_graphs", None)
    return (index, count) if isinstance(count, int) else None


class BatchRows(NamedTuple):
    """One batch's rows, as :func:`batch_rows` gives them and an epoch's rows take them.

    (:meth:`~learnscope.embeddings.rows.EmbeddingRows.add`.)

    Attributes:
        vectors: ``[R, D]``.
        columns: Column name to ``R`` values.
        images: ``[R, C, H, W]`` or ``None``.
        within: Each row's number within its sample, mixed into its key, or ``None``.
    """

    vectors: torch.Tensor
    columns: dict[str, Any]
    images: torch.Tensor | None
    within: torch.Tensor | None = None


def batch_rows(
    output: torch.Tensor,
    metadata: Mapping[str, Any] | None = None,
    images: torch.Tensor | None = None,
    ids: Sequence[Any] | torch.Tensor | None = None,
    samples: RowSamples | None = None,
    keep: torch.Tensor | None = None,
) -> BatchRows:
    """One batch's rows ``[R, D]``, metadata columns (with ``id``) and images, lengths checked.

    ``output`` of shape ``[B, ..., D]`` gives ``R = B * ...`` rows (one per token, say); values
    given per sample are then repeated for each row of the sample and a ``position`` column is
    added. With ``samples`` from :func:`graph_rows` (rows are nodes), values given per graph are
    spread over its nodes the same way, and a ``node`` column is added. Feature maps are made
    into such rows first (:func:`learnscope.embeddings.output_layout.embedding_layout`).

    With ``keep``, only the rows it marks are kept, each with its own values: its ``position``
    or ``node`` number, its sample's metadata, id and image.

    Args:
        output: The module's embedding output, at least 2-D.
        metadata: Column name to one value per row or per sample.
        images: ``[B, C, H, W]`` thumbnails, one per sample (or one per row).
        ids: One stable id per row or per sample (goes in the ``id`` column).
        samples: Each row's sample; by default from the shape of ``output``
            (:func:`token_rows`).
        keep: Bool ``[R]``: the rows to keep (from
            :func:`learnscope.embeddings.output_layout.row_mask`); by default all.

    Returns:
        The rows, the columns and the images, each with one entry per row, and each row's number
        within its sample.

    Raises:
        ValueError: When a column or the images do not match the number of rows or samples, or
            metadata has a column that learnscope adds itself.

    Example:
        >>> rows = batch_rows(torch.zeros(2, 3, 4), {"label": [7, 8]})
        >>> rows.vectors.shape, rows.columns["label"], rows.columns["position"].tolist()
        (torch.Size([6, 4]), [7, 7, 7, 8, 8, 8], [0, 1, 2, 0, 1, 2])
        >>> nodes = batch_rows(
        ...     torch.zeros(3, 4), {"label": [7, 8]}, samples=graph_rows(torch.tensor([0, 0, 1]))
        ... )
        >>> nodes.columns["label"], nodes.columns["node"].tolist()
        ([7, 7, 8], [0, 1, 0])
        >>> real = batch_rows(
        ...     torch.zeros(2, 3, 4), {"label": [7, 8]}, keep=torch.tensor([1, 1, 0, 1, 0, 0]) > 0
        ... )
        >>> real.vectors.shape, real.columns["label"], real.columns["position"].tolist()
        (torch.Size([3, 4]), [7, 7, 8], [0, 1, 0])
    """
    vectors = output.reshape(-1, output.shape[-1])
    if samples is None:
        samples = token_rows(output.shape, vectors.device)
    elif len(samples.index) != len(vectors):
        raise ValueError(
            f"EmbeddingProjector: the batch has {len(vectors)} embedding rows but its "
            f"{samples.unit} cover {len(samples.index)} rows"
        )
    metadata = dict(metadata or {})
    if ids is not None:
        if "id" in metadata:
            raise ValueError(
                "EmbeddingProjector: metadata_fn gives an 'id' column and ids_fn is set; the "
                "ids go in the 'id' column, rename the other one"
            )
        metadata["id"] = ids
    if samples is not None and samples.column in metadata:
        raise ValueError(
            f"EmbeddingProjector: metadata_fn gives a {samples.column!r} column; learnscope adds "
            f"it (each row's number within its {samples.unit[:-1]}), rename yours"
        )
    columns: dict[str, Any] = {}
    for name, values in metadata.items():
        if isinstance(values, torch.Tensor):
            values = values.detach().reshape(-1)
        if len(values) == len(vectors):
            columns[name] = values
        elif samples is not None and len(values) == samples.count:
            columns[name] = _spread(values, samples)
        else:
            per = f" ({samples.count} {samples.unit})" if samples is not None else ""
            given = (
                f"ids_fn gave {len(values)} ids"
                if ids is not None and name == "id"
                else f"metadata column {name!r} has {len(values)} values"
            )
            raise ValueError(
                f"EmbeddingProjector: {given} but the batch has {len(vectors)} embedding "
                f"rows{per}; give one value per row or per sample"
            )
    if samples is not None:
        columns[samples.column] = samples.within.to(vectors.device)
    if images is not None:
        images = torch.as_tensor(images).detach()
        count = samples.count if samples is not None else len(vectors)
        if images.ndim != 4 or len(images) not in (count, len(vectors)):
            unit = samples.unit[:-1] if samples is not None else "sample"
            raise ValueError(
                f"EmbeddingProjector: images_fn gave shape {tuple(images.shape)}; expected "
                f"[{count}, C, H, W], one image per {unit}"
            )
        if samples is not None and len(images) != len(vectors):
            images = _spread(images, samples)
    within = samples.within if samples is not None else None
    if keep is not None:
        if keep.shape != (len(vectors),):
            raise ValueError(
                f"EmbeddingProjector: the mask has shape {tuple(keep.shape)} but the batch has "
                f"{len(vectors)} embedding rows"
            )
        index = keep.to(vectors.device).nonzero().reshape(-1)
        vectors = vectors[index]
        columns = {name: take_rows(values, index) for name, values in columns.items()}
        images = take_rows(images, index)
        within = take_rows(within, index)
    return BatchRows(vectors, columns, images, within)


def take_rows(values: Any, index: torch.Tensor) -> Any:
    """The rows ``index`` of ``values``: a tensor (on its device), a sequence, or ``None``."""
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        return values[index.to(values.device)]
    return [values[i] for i in index.tolist()]


def _spread(values: Any, samples: RowSamples) -> Any:
    """Per-sample ``values`` (a tensor along its first dimension, or a sequence) to every row."""
    if isinstance(values, torch.Tensor):
        return values[samples.index.to(values.device)]
    if samples.per_sample is not None:
        return [v for v in values for _ in range(samples.per_sample)]
    return [values[i] for i in samples.index.tolist()]
