"""Rows of embeddings captured over the batches of one epoch, bounded, then one snapshot.

Every row has a key: the hash of its id (``ids_fn``), or without ids the hash of its row number
in the epoch. Whenever twice ``max_points`` rows are held only the ``max_points`` smallest keys
are kept, so memory stays bounded, the choice does not depend on the batch order, and a
subsample is spread evenly over the epoch. Rows from several processes merge the same way.

A batch's rows come from :func:`~learnscope.embeddings.batch_rows.batch_rows`; each row's number
within its sample (a ``position`` or ``node`` column) is mixed into its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from learnscope.embeddings.batch_rows import take_rows
from learnscope.embeddings.selection import id_keys, mix_keys, smallest
from learnscope.memory import release_free_memory
from learnscope.records import EmbeddingSnapshot

ROW_COLUMN = "row"  # row number in the epoch, kept when the epoch had more than max_points
LOADER_COLUMN = "dataloader"  # the loader a row came from, when a stage has several


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
        >>> from learnscope.embeddings.batch_rows import batch_rows
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
        """Add one batch's rows, from ``loader``.

        The rows are what :func:`~learnscope.embeddings.batch_rows.batch_rows` gives.
        """
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
        columns = {n: take_rows(c, index) for n, c in columns.items()}
        images = None
        if self.images:
            images = take_rows(torch.cat([i.cpu() for i in self.images]), index)
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
        self.columns = {n: [take_rows(_join(c), index)] for n, c in self.columns.items()}
        if self.images:
            self.images = [take_rows(torch.cat([i.to(device) for i in self.images]), index)]


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


def _constant(value: int | str, count: int, device: torch.device) -> Any:
    if isinstance(value, int):
        return torch.full((count,), value, dtype=torch.int64, device=device)
    return [value] * count
