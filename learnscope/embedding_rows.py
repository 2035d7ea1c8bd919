"""Rows of embeddings captured over the batches of one epoch, bounded, then one snapshot.

Every row has a key: the hash of its id (``ids_fn``), or without ids the hash of its row number
in the epoch. Whenever twice ``max_points`` rows are held only the ``max_points`` smallest keys
are kept, so memory stays bounded, the choice does not depend on the batch order, and a
subsample is spread evenly over the epoch. Rows from several processes merge the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from learnscope.records import EmbeddingSnapshot
from learnscope.selection import id_keys, mix_keys, smallest

ROW_COLUMN = "row"  # row number in the epoch, kept when the epoch had more than max_points


def batch_rows(
    output: torch.Tensor,
    metadata: Mapping[str, Any] | None = None,
    images: torch.Tensor | None = None,
    ids: Sequence[Any] | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor | None]:
    """One batch's rows ``[R, D]``, metadata columns (with ``id``) and images, lengths checked.

    ``output`` of shape ``[B, ..., D]`` gives ``R = B * ...`` rows (one per token, say); values
    given per sample are then repeated for each row of the sample and a ``position`` column is
    added.

    Args:
        output: The module's embedding output, at least 2-D.
        metadata: Column name to one value per row or per sample.
        images: ``[B, C, H, W]`` thumbnails, one per sample.
        ids: One stable id per row or per sample (goes in the ``id`` column).

    Returns:
        The rows, the columns and the images, each with one entry per row.

    Raises:
        ValueError: When a column or the images do not match the number of rows or samples.

    Example:
        >>> vectors, columns, _ = batch_rows(torch.zeros(2, 3, 4), {"label": [7, 8]})
        >>> vectors.shape, columns["label"], columns["position"].tolist()
        (torch.Size([6, 4]), [7, 7, 7, 8, 8, 8], [0, 1, 2, 0, 1, 2])
    """
    vectors = output.reshape(-1, output.shape[-1])
    per_sample = output.shape[0]
    repeat = len(vectors) // per_sample if per_sample else 1
    metadata = dict(metadata or {})
    if ids is not None:
        if "id" in metadata:
            raise ValueError(
                "EmbeddingProjector: metadata_fn gives an 'id' column and ids_fn is set; the "
                "ids go in the 'id' column, rename the other one"
            )
        metadata["id"] = ids
    columns: dict[str, Any] = {}
    for name, values in metadata.items():
        if isinstance(values, torch.Tensor):
            values = values.detach().reshape(-1)
        if len(values) == len(vectors):
            columns[name] = values
        elif repeat > 1 and len(values) == per_sample:
            columns[name] = _repeat(values, repeat)
        else:
            raise ValueError(
                f"EmbeddingProjector: metadata column {name!r} has {len(values)} values but the "
                f"batch has {len(vectors)} embedding rows"
            )
    if repeat > 1:
        columns["position"] = torch.arange(repeat, device=vectors.device).repeat(per_sample)
    if images is not None:
        images = torch.as_tensor(images).detach()
        if images.ndim != 4 or len(images) != per_sample:
            raise ValueError(
                f"EmbeddingProjector: images_fn gave shape {tuple(images.shape)}; expected "
                f"[{per_sample}, C, H, W], one image per sample"
            )
        if repeat > 1:
            images = images.repeat_interleave(repeat, dim=0)
    return vectors, columns, images


class EmbeddingRows:
    """Rows of one stage and epoch, kept on their device until the snapshot.

    Args:
        step: The trainer step of the snapshot.
        stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
        max_points: Rows in the snapshot at most.
        by_id: Rows carry an ``id`` column whose hash is the key (the same points every
            snapshot); otherwise the key is the hash of the row number.
        order: Dataset indices in loader order, for ``ids_fn="dataset_index"``.
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
    """

    def __init__(
        self,
        step: int,
        stage: str,
        max_points: int,
        *,
        by_id: bool = False,
        order: Sequence[int] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.step = step
        self.stage = stage
        self.max_points = max_points
        self.by_id = by_id
        self.order = order
        self.rank = rank
        self.world_size = world_size
        self.seen = 0  # samples of the epoch so far (for dataset indices)
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

    def next_dataset_indices(self, count: int) -> torch.Tensor:
        """The dataset indices of the next ``count`` samples, for ``ids_fn="dataset_index"``."""
        start, self.seen = self.seen, self.seen + count
        if self.order is None:
            return torch.arange(start, start + count)
        return torch.as_tensor(list(self.order[start : start + count]), dtype=torch.int64)

    def add(
        self, vectors: torch.Tensor, columns: dict[str, Any], images: torch.Tensor | None
    ) -> None:
        """Add one batch's rows (as :func:`batch_rows` returns them)."""
        columns = dict(columns)
        if self.by_id:
            keys = id_keys(columns["id"])
            if "position" in columns:
                keys = mix_keys(keys, torch.as_tensor(columns["position"]))
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
        """Replace what is held by the rows of every process's :meth:`payload`."""
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
        self._keep_smallest()
        vectors, keys = self.vectors[0], self.keys[0]
        columns = {name: chunks[0] for name, chunks in self.columns.items()}
        images = self.images[0] if self.images else None
        if not self.by_id:
            order = torch.argsort(torch.as_tensor(columns[ROW_COLUMN]).to(keys.device))
            vectors, keys, images = vectors[order], keys[order], _take(images, order)
            columns = {n: _take(c, order) for n, c in columns.items()}
            if self.rows_seen <= self.max_points:
                del columns[ROW_COLUMN]
        finite = torch.isfinite(vectors.float()).all(dim=1).cpu()
        dropped = int((~finite).sum())
        if dropped:
            keep = finite.nonzero().reshape(-1)
            vectors, images = vectors[keep.to(vectors.device)], _take(images, keep)
            keys = keys[keep.to(keys.device)]
            columns = {n: _take(c, keep) for n, c in columns.items()}
        if len(vectors) == 0:
            return None, dropped
        self.final_keys = keys.cpu()
        snapshot = EmbeddingSnapshot(
            tag=tag,
            step=self.step,
            vectors=vectors.cpu(),
            metadata={n: c.cpu() if isinstance(c, torch.Tensor) else c for n, c in columns.items()},
            images=images.cpu() if images is not None else None,
            stage=self.stage,
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


def _repeat(values: Any, times: int) -> Any:
    if isinstance(values, torch.Tensor):
        return values.repeat_interleave(times)
    return [v for v in values for _ in range(times)]
