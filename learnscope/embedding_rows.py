"""Rows of embeddings captured over the batches of one epoch, bounded, then one snapshot.

Every row has a key: the hash of its id (``ids_fn``), or without ids the hash of its row number
in the epoch. Whenever twice ``max_points`` rows are held only the ``max_points`` smallest keys
are kept, so memory stays bounded, the choice does not depend on the batch order, and a
subsample is spread evenly over the epoch. Rows from several processes merge the same way.

A sample may give several rows: a sequence one per token, a graph one per node. A
:class:`RowSamples` says which sample of the batch each row belongs to; values given per sample
(ids, metadata, images) are spread over the sample's rows with it, and each row's number within
its sample (a ``position`` or ``node`` column) is mixed into its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from learnscope.memory import release_free_memory
from learnscope.records import EmbeddingSnapshot
from learnscope.selection import id_keys, mix_keys, smallest

ROW_COLUMN = "row"  # row number in the epoch, kept when the epoch had more than max_points
POSITION_COLUMN = "position"  # token number within its sample, for [batch, tokens, dim] outputs
NODE_COLUMN = "node"  # node number within its graph, for graph batches
LOADER_COLUMN = "dataloader"  # the loader a row came from, when a stage has several


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
    """One batch's rows, as :func:`batch_rows` gives them and :meth:`EmbeddingRows.add` takes.

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
    into such rows first (:func:`learnscope.embedding_layout.embedding_layout`).

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
            :func:`learnscope.embedding_layout.row_mask`); by default all.

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
        columns = {name: _take(values, index) for name, values in columns.items()}
        images = _take(images, index)
        within = _take(within, index)
    return BatchRows(vectors, columns, images, within)


class EmbeddingRows:
    """Rows of one stage and epoch, kept on their device until the snapshot.

    Args:
        step: The trainer step of the snapshot.
        stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
        max_points: Rows in the snapshot at most.
        by_id: Rows carry an ``id`` column whose hash is the key (the same points every
            snapshot); otherwise the key is the hash of the row number.
        loaders: The names of the stage's loaders (their index, or their key when the loaders
            come as a dict), when there are several: each row then gets a ``dataloader``
            column, and its loader is mixed into its key, so that sample 3 of one loader and
            sample 3 of another are two points.
        rank: This process's rank; row numbers are ``local_row * world_size + rank``, which is
            the dataset index under an unshuffled ``DistributedSampler``.
        world_size: Number of processes.

    Example:
        >>> rows = EmbeddingRows(step=5, stage="validate", max_points=3)
        >>> for _ in range(4):
        ...     rows.add(*batch_rows(torch.randn(2, 4), {"label": [0, 1]}))
        >>> snapshot, dropped = rows.snapshot("encoder")
        >>> snapshot.num_points, dropped, sorted(snapshot.metadata)
        (3, 0, ['label', 'row'])
        >>> two = EmbeddingRows(5, "test", max_points=9, by_id=True, loaders=["a", "b"])
        >>> for loader in (0, 1):
        ...     ids = two.next_dataset_indices(2, loader)
        ...     two.add(*batch_rows(torch.randn(2, 4), ids=ids), loader=loader)
        >>> snapshot, _ = two.snapshot("encoder")
        >>> sorted(zip(snapshot.metadata["dataloader"], snapshot.metadata["id"].tolist()))
        [('a', 0), ('a', 1), ('b', 0), ('b', 1)]
    """

    def __init__(
        self,
        step: int,
        stage: str,
        max_points: int,
        *,
        by_id: bool = False,
        loaders: Sequence[int | str] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.step = step
        self.stage = stage
        self.max_points = max_points
        self.by_id = by_id
        self.loaders = list(loaders) if loaders is not None else None
        # Salts hashed from the loader's name, not its index, so a dict of loaders keeps its
        # points when reordered; prefixed, since a salt hashed the way ids are would make id 0
        # of loader 1 and id 1 of loader 0 one key (``mix_keys`` XORs before hashing).
        self._loader_salts = (
            id_keys([f"{LOADER_COLUMN}:{name}" for name in self.loaders]) if self.loaders else None
        )
        self.rank = rank
        self.world_size = world_size
        self.orders: dict[int, Sequence[int]] = {}  # per loader: dataset indices in loader order
        self.seen: dict[int, int] = {}  # per loader: samples of the epoch so far
        self.rows_seen = 0  # rows of the epoch so far, kept or not
        self.vectors: list[torch.Tensor] = []
        self.columns: dict[str, list[Any]] = {}
        self.images: list[torch.Tensor] = []
        self.keys: list[torch.Tensor] = []
        self.final_keys: torch.Tensor | None = None

    @property
    def count(self) -> int:
        """Rows held now."""
        return sum(len(v) for v in self.vectors)

    def nbytes(self) -> int:
        """Bytes of the embedding rows held now (what a queued snapshot keeps in memory)."""
        return sum(v.numel() * v.element_size() for v in self.vectors)

    def next_dataset_indices(self, count: int, loader: int = 0) -> torch.Tensor:
        """The dataset indices of the next ``count`` samples of ``loader`` (its index).

        For ``ids_fn="dataset_index"``: each loader counts its own samples, in the order of
        ``orders[loader]`` when set (an unshuffled ``DistributedSampler``'s share), else
        ``0, 1, 2, ...``.
        """
        start = self.seen.get(loader, 0)
        self.seen[loader] = start + count
        order = self.orders.get(loader)
        if order is None:
            return torch.arange(start, start + count)
        return torch.as_tensor(list(order[start : start + count]), dtype=torch.int64)

    def add(
        self,
        vectors: torch.Tensor,
        columns: dict[str, Any],
        images: torch.Tensor | None,
        within: torch.Tensor | None = None,
        *,
        loader: int = 0,
    ) -> None:
        """Add one batch's rows (as :func:`batch_rows` returns them) from ``loader``."""
        columns = dict(columns)
        if self.loaders is not None:
            if LOADER_COLUMN in columns:
                raise ValueError(
                    f"EmbeddingProjector: metadata_fn gives a {LOADER_COLUMN!r} column; "
                    "learnscope adds it when a stage has several loaders, rename yours"
                )
            columns[LOADER_COLUMN] = _constant(self.loaders[loader], len(vectors), vectors.device)
        if self.by_id:
            keys = id_keys(columns["id"])
            if within is not None:
                keys = mix_keys(keys, within)
            if self._loader_salts is not None:
                keys = mix_keys(keys, self._loader_salts[loader])
        else:
            local = torch.arange(self.rows_seen, self.rows_seen + len(vectors))
            columns[ROW_COLUMN] = local * self.world_size + self.rank
            keys = id_keys(columns[ROW_COLUMN])
        self.rows_seen += len(vectors)
        if self.count and set(columns) != set(self.columns):
            raise ValueError(
                f"metadata_fn returned columns {sorted(columns)} after {sorted(self.columns)}"
            )
        self.vectors.append(vectors)
        for name, values in columns.items():
            self.columns.setdefault(name, []).append(values)
        if images is not None:
            self.images.append(torch.as_tensor(images))
        self.keys.append(keys.to(vectors.device))
        if self.count >= 2 * self.max_points:
            self._keep_smallest()

    def payload(self) -> dict[str, Any]:
        """Everything held, on the CPU, to send to rank zero (see :meth:`merge`)."""
        self._keep_smallest()
        return {
            "step": self.step,
            "stage": self.stage,
            "rows_seen": self.rows_seen,
            "vectors": self.vectors[0].cpu() if self.vectors else None,
            "columns": {n: _cpu(c[0]) for n, c in self.columns.items()},
            "images": self.images[0].cpu() if self.images else None,
            "keys": self.keys[0].cpu() if self.keys else None,
        }

    def merge(self, payloads: Sequence[Mapping[str, Any] | None]) -> None:
        """Replace what is held by the rows of every process's :meth:`payload`.

        ``payloads`` is indexed by rank (as ``gather_object`` fills it); ``None`` stands for a
        rank that sent nothing.

        Raises:
            ValueError: When the ranks holding rows have different metadata columns (such as
                a ``metadata_fn`` that returns other keys on another rank), or some have
                images and others not; the message names the columns of every rank.
        """
        held = {r: p for r, p in enumerate(payloads) if p is not None and p["vectors"] is not None}
        layouts = {
            r: (tuple(sorted(p["columns"])), p["images"] is not None) for r, p in held.items()
        }
        if len(set(layouts.values())) > 1:
            ranks = "; ".join(
                f"rank {r}: columns {list(names)}" + (" with images" if images else "")
                for r, (names, images) in layouts.items()
            )
            raise ValueError(
                "the ranks' embedding rows cannot be gathered into one snapshot: their metadata "
                f"differs ({ranks}); metadata_fn (and images_fn) must give the same columns "
                "on every rank"
            )
        self.vectors, self.columns, self.images, self.keys = [], {}, [], []
        self.rows_seen = 0
        for payload in payloads:
            if payload is None:
                continue
            self.rows_seen += payload["rows_seen"]
            if payload["vectors"] is None:
                continue
            self.vectors.append(payload["vectors"])
            for name, values in payload["columns"].items():
                self.columns.setdefault(name, []).append(values)
            if payload["images"] is not None:
                self.images.append(payload["images"])
            self.keys.append(payload["keys"])

    def snapshot(self, tag: str) -> tuple[EmbeddingSnapshot | None, int]:
        """The snapshot of the kept rows, and how many rows with NaN or Inf were left out.

        Without ids the rows are in epoch order, and the ``row`` column is kept only when the
        epoch had more rows than ``max_points``; with ids they are in key order, the same order
        every snapshot. The snapshot is ``None`` when no finite row is left.
        """
        if not self.vectors:
            return None, 0
        # Which rows, in which order, is decided on the small columns first; the vectors are
        # then copied once, chunk by chunk (see _gather_rows), never concatenated whole.
        keys = torch.cat([k.to(self.keys[0].device) for k in self.keys]).cpu()
        index = smallest(keys, self.max_points)  # by key; an id seen twice counts once
        columns = {n: _join(c) for n, c in self.columns.items()}
        if not self.by_id:
            index = index[torch.argsort(torch.as_tensor(columns[ROW_COLUMN])[index])]
            if self.rows_seen <= self.max_points:
                del columns[ROW_COLUMN]
        finite = torch.cat([torch.isfinite(v).all(dim=1).cpu() for v in self.vectors])
        dropped = int((~finite[index]).sum())
        index = index[finite[index]]
        if len(index) == 0:
            return None, dropped
        vectors = _gather_rows(self.vectors, index)
        keys = keys[index]
        columns = {n: _take(c, index) for n, c in columns.items()}
        images = _take(torch.cat([i.cpu() for i in self.images]), index) if self.images else None
        self.keys, self.columns, self.images = [], {}, []
        self.final_keys = keys.cpu()
        snapshot = EmbeddingSnapshot(
            tag=tag,
            step=self.step,
            vectors=vectors.cpu(),
            metadata={n: c.cpu() if isinstance(c, torch.Tensor) else c for n, c in columns.items()},
            images=images.cpu() if images is not None else None,
            stage=self.stage,
            dropped=dropped,
        )
        return snapshot, dropped

    def _keep_smallest(self) -> None:
        """Keep the ``max_points`` rows with the smallest distinct keys, ordered by key."""
        if not self.keys:
            return
        keys = torch.cat([k.to(self.keys[0].device) for k in self.keys])
        index = smallest(keys, self.max_points)  # an id seen by two processes counts once
        device = self.vectors[0].device
        self.keys = [keys[index]]
        self.vectors = [torch.cat([v.to(device) for v in self.vectors])[index.to(device)]]
        self.columns = {n: [_take(_join(c), index)] for n, c in self.columns.items()}
        if self.images:
            self.images = [_take(torch.cat([i.to(device) for i in self.images]), index)]


def _gather_rows(chunks: list[torch.Tensor], index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of the chunks' concatenation, emptying ``chunks`` as they are copied.

    Each chunk is released (and its memory given back, see :mod:`learnscope.memory`) once its
    rows are copied, so the memory held is the result plus one chunk, not the chunks, their
    concatenation and the result.

    Example:
        >>> chunks = [torch.tensor([[0.0], [1.0]]), torch.tensor([[2.0]])]
        >>> _gather_rows(chunks, torch.tensor([2, 0])).tolist(), chunks
        ([[2.0], [0.0]], [])
    """
    first = chunks[0]
    out = torch.empty((len(index), *first.shape[1:]), dtype=first.dtype, device=first.device)
    ends = torch.tensor([len(c) for c in chunks]).cumsum(0)
    source = torch.bucketize(index, ends, right=True)  # the chunk of each wanted row
    starts = torch.cat([torch.zeros(1, dtype=ends.dtype), ends[:-1]])
    for number in range(len(chunks)):
        chunk, chunks[number] = chunks[number], None  # type: ignore[call-overload]
        hit = (source == number).nonzero().reshape(-1)
        if len(hit):
            rows = (index[hit] - starts[number]).to(chunk.device)
            out[hit.to(out.device)] = chunk[rows].to(out.device)
        del chunk
        release_free_memory()  # else the freed chunk stays resident beside its copy
    chunks.clear()
    return out


def _cpu(values: Any) -> Any:
    return values.cpu() if isinstance(values, torch.Tensor) else values


def _join(chunks: list[Any]) -> Any:
    if all(isinstance(c, torch.Tensor) for c in chunks):
        return torch.cat([c.to(chunks[0].device) for c in chunks])
    return [v for chunk in chunks for v in (chunk.tolist() if hasattr(chunk, "tolist") else chunk)]


def _take(values: Any, index: torch.Tensor) -> Any:
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


def _constant(value: int | str, count: int, device: torch.device) -> Any:
    if isinstance(value, int):
        return torch.full((count,), value, dtype=torch.int64, device=device)
    return [value] * count
