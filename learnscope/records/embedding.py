"""The embedding snapshot record: one set of vectors with their per-point metadata."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

ArrayLike = torch.Tensor | np.ndarray


@dataclass(frozen=True)
class EmbeddingSnapshot:
    """Embeddings of ``N`` points at one training step, ready for a writer.

    Args:
        tag: What the vectors are, such as ``"encoder"``. Writers use it in names and paths, after
            making it safe (a tag like ``"../x"`` never writes outside the run directory).
        step: The trainer's global step when the snapshot was taken.
        vectors: ``[N, D]`` tensor or array of any float dtype.
        metadata: Column name to ``N`` values (labels, ids, graph index...). Values are shown as
            text; tabs and newlines are made safe by the writers.
        images: Optional ``[N, C, H, W]`` thumbnails (``C`` in 1, 3 or 4), floats in ``[0, 1]``
            or ``uint8``.
        stage: Where the data came from (``"train"``, ``"validate"``, ``"test"``, ``"predict"``),
            or ``None``.

    Raises:
        ValueError: If a shape or a column length does not match ``N``.

    Example:
        >>> import torch
        >>> snap = EmbeddingSnapshot("encoder", 10, torch.randn(3, 4), {"label": [0, 1, 1]})
        >>> snap.num_points, snap.dim
        (3, 4)
    """

    tag: str
    step: int
    vectors: ArrayLike
    metadata: Mapping[str, Sequence[Any] | ArrayLike] = field(default_factory=dict)
    images: ArrayLike | None = None
    stage: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str) or not self.tag:
            raise ValueError(f"tag must be a non-empty string, got {self.tag!r}")
        if self.vectors.ndim != 2:
            raise ValueError(
                f"vectors must have shape [N, D], got {tuple(self.vectors.shape)} for {self.tag!r}"
            )
        n = self.num_points
        for name, column in self.metadata.items():
            if len(column) != n:
                raise ValueError(
                    f"metadata column {name!r} has {len(column)} values but the embedding "
                    f"{self.tag!r} has {n} rows"
                )
        if self.images is not None:
            shape = tuple(self.images.shape)
            if len(shape) != 4 or shape[0] != n or shape[1] not in (1, 3, 4):
                raise ValueError(
                    f"images must have shape [N={n}, C in (1, 3, 4), H, W], got {shape}"
                )

    @property
    def key(self) -> str:
        """The tag with the stage, such as ``"encoder/validate"``: what writers name it by."""
        return f"{self.tag}/{self.stage}" if self.stage else self.tag

    @property
    def num_points(self) -> int:
        """Number of rows ``N``."""
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        """Embedding dimension ``D``."""
        return int(self.vectors.shape[1])

    def vectors_numpy(self) -> np.ndarray:
        """The vectors as a C-contiguous float32 numpy array on the host."""
        return np.ascontiguousarray(_to_numpy(self.vectors), dtype=np.float32)

    def images_uint8(self) -> np.ndarray | None:
        """The images as ``uint8`` ``[N, H, W, C]`` on the host, or ``None``."""
        if self.images is None:
            return None
        images = _to_numpy(self.images)
        if images.dtype != np.uint8:
            images = np.clip(np.nan_to_num(images.astype(np.float32)), 0.0, 1.0)
            images = np.round(images * 255.0).astype(np.uint8)
        return np.ascontiguousarray(images.transpose(0, 2, 3, 1))

    def metadata_columns(self) -> dict[str, list[Any]]:
        """The metadata as plain Python lists (tensors and arrays converted)."""
        return {
            name: _to_numpy(col).tolist() if isinstance(col, ArrayLike) else list(col)
            for name, col in self.metadata.items()
        }

    def subsample(self, max_points: int, seed: int = 0) -> EmbeddingSnapshot:
        """Keep at most ``max_points`` rows, chosen deterministically, in their original order.

        Args:
            max_points: The number of rows to keep.
            seed: Seed of the choice; the same seed and ``N`` always keep the same rows.

        Returns:
            This snapshot when it is small enough, else a new one with the chosen rows.

        Example:
            >>> import torch
            >>> EmbeddingSnapshot("x", 0, torch.zeros(10, 2)).subsample(4).num_points
            4
        """
        if self.num_points <= max_points:
            return self
        keep = np.sort(np.random.default_rng(seed).choice(self.num_points, max_points, False))
        index = torch.from_numpy(keep)
        return EmbeddingSnapshot(
            tag=self.tag,
            step=self.step,
            vectors=_take(self.vectors, keep, index),
            metadata={name: _take(col, keep, index) for name, col in self.metadata.items()},
            images=None if self.images is None else _take(self.images, keep, index),
            stage=self.stage,
        )


def _to_numpy(value: ArrayLike | Sequence[Any]) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def _take(column: Any, keep: np.ndarray, index: torch.Tensor) -> Any:
    if isinstance(column, torch.Tensor):
        return column[index.to(column.device)]
    if isinstance(column, np.ndarray):
        return column[keep]
    return [column[i] for i in keep]
