"""The embedding snapshot record: one set of vectors with their per-point metadata."""

from __future__ import annotations

import copy
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from learnscope.records import checks
from learnscope.records.embedding_measures import EmbeddingRanks, LabelSilhouette

ArrayLike = torch.Tensor | np.ndarray


@dataclass(frozen=True)
class ViewFrame:
    """How a snapshot's aligned PCA view (its ``pca_x``, ``pca_y`` columns) is drawn.

    The view is drawn in units of its spread, in a frame kept per key, so every picture and
    view of a run shows the points moving, not the frame.

    Args:
        spread: The view's root-mean-square distance from its centre (the origin): finite,
            at least 0 (0 for a view of one point).
        limits: ``(xmin, xmax, ymin, ymax)`` of the frame, in units of the spread: finite,
            with ``xmin < xmax`` and ``ymin < ymax``.

    Raises:
        TypeError: If a number is complex, text or a bool, or the limits are no sequence.
        ValueError: If a number is not finite, the spread is negative, or the limits are not
            four with ``xmin < xmax`` and ``ymin < ymax``.

    Example:
        >>> ViewFrame(0.5, (-2.5, 2.5, -2.5, 2.5)).limits[1]
        2.5
    """

    spread: float
    limits: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        spread = checks.real_number(self.spread, "ViewFrame spread")
        spread = checks.finite(spread, "ViewFrame spread")
        if spread < 0:
            raise ValueError(f"ViewFrame spread is a distance, at least 0, got {spread}")
        if isinstance(self.limits, str) or not isinstance(self.limits, Iterable):
            raise TypeError(
                f"ViewFrame limits must be (xmin, xmax, ymin, ymax), got {self.limits!r}"
            )
        limits = tuple(
            checks.finite(checks.real_number(v, "each ViewFrame limit"), "each ViewFrame limit")
            for v in self.limits
        )
        if len(limits) != 4 or not (limits[0] < limits[1] and limits[2] < limits[3]):
            raise ValueError(
                f"ViewFrame limits must be (xmin, xmax, ymin, ymax) with xmin < xmax and "
                f"ymin < ymax, got {self.limits!r}"
            )
        object.__setattr__(self, "spread", spread)
        object.__setattr__(self, "limits", limits)


@dataclass(frozen=True)
class AlignedView:
    """A snapshot's aligned view: each point's coordinates, and how the view is drawn.

    The coordinates are a typed field of the snapshot (never text in its metadata): the run
    record stores them as float32, and the writers that show tables (the Projector's metadata,
    the W&B table) get them as the columns :attr:`columns` names.

    Args:
        coords: ``[N, k]`` coordinates (``k >= 2``: x, y, and z when there is one), one row per
            point of the snapshot, as float32.
        frame: The view's spread and frame.
        projection: What made the view (``"pca"`` or ``"umap"``): the columns are
            ``<projection>_x``, ...
        fitted: How many of the points the projection was fitted on, when it was fitted on
            fewer than all (the others were placed by the fitted view); ``None``: all.

    Raises:
        TypeError: If the coordinates are not real numbers (complex, bool, text), the frame
            is no :class:`ViewFrame` or ``fitted`` no int.
        ValueError: If the coordinates are not ``[N, 2 or 3]``, the projection is not a word
            or ``fitted`` is below 1.

    Example:
        >>> view = AlignedView(np.zeros((4, 3)), ViewFrame(1.0, (-2, 2, -2, 2)))
        >>> view.columns, view.coords.dtype
        (('pca_x', 'pca_y', 'pca_z'), dtype('float32'))
    """

    coords: np.ndarray
    frame: ViewFrame
    projection: str = "pca"
    fitted: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.projection, str) or not self.projection.isidentifier():
            raise ValueError(
                f"a projection is named by a word, such as 'umap', not {self.projection!r}"
            )
        what = f"coordinates of the aligned {self.projection} view"
        coords = self.coords
        if isinstance(coords, torch.Tensor):
            coords = _to_numpy(coords)
        coords = np.ascontiguousarray(checks.real_array(coords, what), dtype=np.float32)
        if coords.ndim != 2 or not 2 <= coords.shape[1] <= 3:
            raise ValueError(f"{what} must be [N, 2 or 3], got {coords.shape}")
        if not isinstance(self.frame, ViewFrame):
            raise TypeError(
                f"the frame of the aligned {self.projection} view must be a ViewFrame, got "
                f"{type(self.frame).__name__}"
            )
        if self.fitted is not None:
            fitted = checks.count(self.fitted, f"fitted of the aligned {self.projection} view", 1)
            object.__setattr__(self, "fitted", fitted)
        coords.setflags(write=False)
        object.__setattr__(self, "coords", coords)

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of the coordinate columns, such as ``("pca_x", "pca_y", "pca_z")``."""
        return tuple(f"{self.projection}_{axis}" for axis in "xyz"[: self.coords.shape[1]])

    def take(self, rows: np.ndarray) -> AlignedView:
        """The view of the points ``rows`` only (same frame)."""
        return AlignedView(self.coords[rows], self.frame, self.projection, self.fitted)


@dataclass(frozen=True)
class EmbeddingSnapshot:
    """Embeddings of ``N`` points at one training step, ready for a writer.

    Args:
        tag: What the vectors are, such as ``"encoder"``. Writers use it in names and paths, after
            making it safe (a tag like ``"../x"`` never writes outside the run directory).
        step: The trainer's global step when the snapshot was taken.
        vectors: ``[N, D]`` tensor or array of real numbers (floats or integers), with
            ``N >= 1`` and ``D >= 1``. A list of lists of numbers is converted to a numpy
            array. Every value must be finite: rows with NaN or Inf are rejected (the
            ``EmbeddingProjector`` callback leaves them out, with one warning, before it
            builds a snapshot; do the same, e.g. keep ``vectors[vectors.isfinite().all(1)]``).
        metadata: Column name to ``N`` values (labels, ids, graph index...). Values are shown as
            text; tabs and newlines are made safe by the writers. A column given as a
            generator or other iterator without a length is read into a list.
        images: Optional ``[N, C, H, W]`` thumbnails (``C`` in 1, 3 or 4), floats in ``[0, 1]``
            or ``uint8``. Floats outside ``[0, 1]`` (such as 0-255 values) or NaN are rejected,
            never clipped.
        stage: Where the data came from (``"train"``, ``"validate"``, ``"test"``, ``"predict"``),
            or ``None``.
        aligned: The aligned view of the points (:class:`AlignedView`), when there is one
            (``EmbeddingProjector(aligned_pca=True)`` sets it); its coordinates reach the
            writers as the ``pca_x``, ``pca_y``, ``pca_z`` columns of
            :meth:`metadata_columns`.
        projections: Further aligned views of the points, one per projection other than PCA
            (``EmbeddingProjector(aligned_umap=True)`` adds the ``"umap"`` one); their
            coordinates reach the writers as ``<projection>_x``, ``<projection>_y`` columns.
        dropped: How many rows were left out before this snapshot for NaN or Inf (an int,
            at least 0).
        ranks: RankMe and the effective rank of its rows (:class:`EmbeddingRanks`), when
            measured (the ``EmbeddingProjector``'s snapshot job measures every snapshot of at
            least 2 rows).
        silhouette: The label silhouette of its views (:class:`LabelSilhouette`), when
            measured and defined.

    Raises:
        ValueError: If a shape or a column length does not match ``N``, there is no row or no
            dimension, an image has no pixel, the vectors are complex or hold NaN or Inf,
            the images are floats outside ``[0, 1]`` (the message names the range found), the
            step or ``dropped`` is negative, or the stage is empty.
        TypeError: If the vectors or images are not numbers (or are booleans), ``metadata`` is
            no mapping, a column is text or a mapping (one value, not one per row), a view is
            no :class:`AlignedView`, or the step, stage, ``dropped``, ``ranks`` or
            ``silhouette`` has the wrong type.

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
    aligned: AlignedView | None = None
    projections: tuple[AlignedView, ...] = ()
    dropped: int = 0
    ranks: EmbeddingRanks | None = None
    silhouette: LabelSilhouette | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str) or not self.tag:
            raise ValueError(f"tag must be a non-empty string, got {self.tag!r}")
        if isinstance(self.step, bool) or not isinstance(self.step, numbers.Integral):
            raise TypeError(
                f"step must be an int (the trainer's global step), got "
                f"{type(self.step).__name__} {self.step!r} for {self.tag!r}"
            )
        if self.step < 0:
            raise ValueError(
                f"step must be at least 0 (the trainer's global step), got {self.step} for "
                f"{self.tag!r}"
            )
        object.__setattr__(self, "step", int(self.step))
        if self.stage is not None:
            checks.name(self.stage, f"stage of {self.tag!r} (or None)")
        dropped = checks.count(self.dropped, f"dropped of {self.tag!r}")
        object.__setattr__(self, "dropped", dropped)
        self._check_measures()
        vectors = _as_numbers(self.vectors, f"vectors of {self.tag!r}")
        object.__setattr__(self, "vectors", vectors)
        if vectors.ndim != 2 or vectors.shape[0] == 0 or vectors.shape[1] == 0:
            raise ValueError(
                f"vectors must have shape [N, D] with N >= 1 and D >= 1, got "
                f"{tuple(vectors.shape)} for {self.tag!r}"
            )
        _check_finite_rows(vectors, self.tag)
        if not isinstance(self.metadata, Mapping):
            raise TypeError(
                f"metadata must be a mapping of column name to values, got "
                f"{type(self.metadata).__name__} for {self.tag!r}"
            )
        object.__setattr__(
            self,
            "metadata",
            {name: _as_column(col, name) for name, col in self.metadata.items()},
        )
        n = self.num_points
        for name, column in self.metadata.items():
            if len(column) != n:
                raise ValueError(
                    f"metadata column {name!r} has {len(column)} values but the embedding "
                    f"{self.tag!r} has {n} rows"
                )
        if self.images is not None:
            images = _as_numbers(self.images, f"images of {self.tag!r}")
            object.__setattr__(self, "images", images)
            shape = tuple(images.shape)
            if len(shape) != 4 or shape[0] != n or shape[1] not in (1, 3, 4) or 0 in shape[2:]:
                raise ValueError(
                    f"images must have shape [N={n}, C in (1, 3, 4), H >= 1, W >= 1], got {shape}"
                )
            _check_image_range(images, self.tag)
        object.__setattr__(self, "projections", tuple(self.projections))
        given = ([] if self.aligned is None else [self.aligned]) + list(self.projections)
        for view in given:
            if not isinstance(view, AlignedView):
                raise TypeError(
                    f"aligned and projections of {self.tag!r} are AlignedView (coordinates with "
                    f"their ViewFrame), got {type(view).__name__}"
                )
        names = [view.projection for view in self.views]
        if len(set(names)) != len(names):
            raise ValueError(f"one aligned view per projection, got {names} for {self.tag!r}")
        if self.aligned is not None and self.aligned.projection != "pca":
            raise ValueError(
                f"aligned is the PCA view; give the {self.aligned.projection!r} view in projections"
            )
        for view in self.views:
            self._check_view(view)

    def _check_view(self, view: AlignedView) -> None:
        if view.coords.shape[0] != self.num_points:
            raise ValueError(
                f"the aligned {view.projection} view has {view.coords.shape[0]} points but the "
                f"embedding {self.tag!r} has {self.num_points} rows"
            )

    @property
    def views(self) -> tuple[AlignedView, ...]:
        """Every aligned view: the PCA one (when there is one) first, then :attr:`projections`.

        Example:
            >>> frame = ViewFrame(1.0, (-1, 1, -1, 1))
            >>> snap = EmbeddingSnapshot("x", 0, np.zeros((2, 3)))
            >>> snap = snap.with_view(AlignedView(np.zeros((2, 2)), frame, "umap"))
            >>> snap = snap.with_view(AlignedView(np.zeros((2, 3)), frame))
            >>> [view.projection for view in snap.views]
            ['pca', 'umap']
        """
        return (self.aligned, *self.projections) if self.aligned else self.projections

    def with_view(self, view: AlignedView) -> EmbeddingSnapshot:
        """This snapshot with the aligned view ``view``, its rows not checked again.

        A PCA view becomes :attr:`aligned`; any other takes the place of the view of its
        projection in :attr:`projections`.

        Example:
            >>> snap = EmbeddingSnapshot("x", 0, np.zeros((2, 3)))
            >>> view = AlignedView(np.zeros((2, 2)), ViewFrame(1.0, (-1, 1, -1, 1)))
            >>> snap.with_view(view).metadata_columns()
            {'pca_x': [0.0, 0.0], 'pca_y': [0.0, 0.0]}
        """
        self._check_view(view)
        copied = copy.copy(self)
        if view.projection == "pca":
            object.__setattr__(copied, "aligned", view)
        else:
            others = tuple(v for v in self.projections if v.projection != view.projection)
            object.__setattr__(copied, "projections", (*others, view))
        return copied

    def with_measures(
        self, ranks: EmbeddingRanks | None, silhouette: LabelSilhouette | None
    ) -> EmbeddingSnapshot:
        """This snapshot with its ``ranks`` and ``silhouette``, its rows not checked again.

        Example:
            >>> snap = EmbeddingSnapshot("x", 0, np.eye(3))
            >>> snap.with_measures(EmbeddingRanks(3.0, 2.0, 3, 3), None).ranks.rankme
            3.0
        """
        copied = copy.copy(self)
        object.__setattr__(copied, "ranks", ranks)
        object.__setattr__(copied, "silhouette", silhouette)
        copied._check_measures()
        return copied

    def _check_measures(self) -> None:
        for name, kind in (("ranks", EmbeddingRanks), ("silhouette", LabelSilhouette)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(
                    f"{name} of {self.tag!r} must be {kind.__name__} or None, got "
                    f"{type(value).__name__}"
                )

    @property
    def view_frame(self) -> ViewFrame | None:
        """The spread and frame of the aligned view, or ``None`` without one."""
        return None if self.aligned is None else self.aligned.frame

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
        """The metadata as plain Python lists, then the aligned views' coordinate columns.

        Example:
            >>> view = AlignedView(np.array([[0.5, 1.0], [0.0, -1.0]]), ViewFrame(1, (-1, 1) * 2))
            >>> EmbeddingSnapshot("x", 0, np.zeros((2, 2)), {"a": [1, 2]}, aligned=view
            ...     ).metadata_columns()
            {'a': [1, 2], 'pca_x': [0.5, 0.0], 'pca_y': [1.0, -1.0]}
        """
        columns = {
            name: _to_numpy(col).tolist() if isinstance(col, ArrayLike) else list(col)
            for name, col in self.metadata.items()
        }
        for view in self.views:
            for name, values in zip(view.columns, view.coords.T, strict=True):
                columns[name] = values.tolist()
        return columns

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
            aligned=None if self.aligned is None else self.aligned.take(keep),
            projections=tuple(view.take(keep) for view in self.projections),
            dropped=self.dropped,
            ranks=self.ranks,  # of the whole snapshot, as it was measured
            silhouette=self.silhouette,
        )


def _as_numbers(value: Any, what: str) -> ArrayLike:
    """A tensor or array of real numbers; lists and tuples of numbers become a numpy array."""
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value)
        except ValueError as error:  # ragged nesting
            raise ValueError(f"{what} must be a rectangular array of numbers: {error}") from None
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise ValueError(f"{what} must be real, got a complex tensor ({value.dtype})")
        if value.dtype == torch.bool:
            raise TypeError(f"{what} must be numbers, got a bool tensor")
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "c":
            raise ValueError(f"{what} must be real, got a complex array ({value.dtype})")
        if value.dtype.kind not in "iuf":
            raise TypeError(f"{what} must be real numbers, got an array of dtype {value.dtype}")
        return value
    raise TypeError(
        f"{what} must be a torch.Tensor, a numpy array or a list of lists of numbers, got "
        f"{type(value).__name__}"
    )


_BLOCK = 8192  # rows checked at once


def _check_finite_rows(vectors: ArrayLike, tag: str) -> None:
    """Raise when a row holds NaN or Inf, naming how many and the first few.

    Checked a block of rows at a time: ``isfinite`` of a whole float tensor makes temporaries
    of about twice its size (its absolute values and two masks).
    """
    if isinstance(vectors, torch.Tensor):
        if not vectors.is_floating_point():
            return
        finite = torch.cat([torch.isfinite(b).all(dim=1).cpu() for b in vectors.split(_BLOCK)])
        bad = (~finite).nonzero().reshape(-1).numpy()
    else:
        if vectors.dtype.kind != "f":
            return
        blocks = range(0, len(vectors), _BLOCK)
        finite = np.concatenate([np.isfinite(vectors[i : i + _BLOCK]).all(axis=1) for i in blocks])
        bad = np.flatnonzero(~finite)
    if bad.size:
        raise ValueError(
            f"vectors of {tag!r} have NaN or Inf in {bad.size} of {len(vectors)} rows (first: "
            f"{bad[:5].tolist()}); leave those rows out first, e.g. "
            "vectors[vectors.isfinite().all(1)], with their metadata and images"
        )


def _check_image_range(images: ArrayLike, tag: str) -> None:
    """uint8 images pass; float images must be finite and in ``[0, 1]``."""
    pixels = _to_numpy(images)
    if pixels.dtype == np.uint8:
        return
    if pixels.dtype.kind != "f":
        raise TypeError(
            f"images of {tag!r} must be floats in [0, 1] or uint8, got {pixels.dtype}; "
            "convert 0-255 integers to uint8"
        )
    if pixels.size == 0:
        return
    known = pixels[~np.isnan(pixels)]
    nan = pixels.size - known.size
    low, high = (float(known.min()), float(known.max())) if known.size else (np.nan, np.nan)
    if nan or not (low >= 0.0 and high <= 1.0):
        found = f"values from {low:.4g} to {high:.4g}" if known.size else "only NaN"
        if nan and known.size:
            found += f" and {nan} NaN"
        hint = " (0-255 values: divide by 255 or pass uint8)" if high > 1.0 else ""
        raise ValueError(f"images of {tag!r} must be floats in [0, 1], got {found}{hint}")


def _as_column(column: Any, name: str = "") -> Any:
    """A metadata column with a length: an iterator (such as a generator) is read into a list."""
    if isinstance(column, (torch.Tensor, np.ndarray)) and column.ndim == 0:
        kind = "tensor" if isinstance(column, torch.Tensor) else "array"
        raise TypeError(
            f"metadata column {name!r} is a 0-d {kind} (one value); a column holds one value "
            "per row (a list, a 1-D tensor or array)"
        )
    if isinstance(column, str | bytes | Mapping):
        raise TypeError(
            f"metadata column {name!r} is {type(column).__name__} {_short(column)}: a column holds "
            "one value per row (a list, a 1-D tensor or array); [value] * N repeats one"
        )
    if isinstance(column, (torch.Tensor, np.ndarray)) or hasattr(column, "__len__"):
        return column
    if isinstance(column, Iterable):
        return list(column)
    raise TypeError(f"a metadata column must be a sequence of values, got {type(column).__name__}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
