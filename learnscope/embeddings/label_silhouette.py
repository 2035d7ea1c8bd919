"""How well a snapshot's 2-D views keep its labels apart: the mean silhouette by label (numpy).

The rule, explicit rather than guessed: the labels are the snapshot's categorical metadata
column named ``label`` (:data:`LABEL_COLUMN`; categorical by the rule every view colours by,
:func:`~learnscope.embeddings.scatter_frame.column_kind`, each value as its text). A snapshot
without one has no silhouette: the first other column, which the pictures colour by, may be
anything (an index, a loss), and a silhouette of it would mean nothing.

Each view's silhouette is the mean over the points of ``(b - a) / max(a, b)``, Euclidean in the
view's 2-D coordinates: ``a`` the point's mean distance to the other points of its label, ``b``
the smallest mean distance to the points of another label; 0 for a point alone in its label,
and 0 where ``a`` and ``b`` are both 0 (every point in one place), as scikit-learn's
``silhouette_score`` does. It is measured on at most :data:`MAX_POINTS` points, a fixed
subsample by a hash of each point's id (:func:`~learnscope.embeddings.id_subsample.subsample_ids`,
the comparison's), so the same points are measured in every snapshot and every run that shares
the ids. It is undefined, and not given, with fewer than 2 labels among them or every point a
label of its own.

Example:
    >>> xy = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> measured = label_silhouette({"pca": xy}, {"label": ["a", "a", "b", "b"]}, None)
    >>> measured.column, measured.points, round(measured.views["pca"], 3)
    ('label', 4, 0.9)
    >>> label_silhouette({"pca": xy}, {"label": ["a", "b", "c", "d"]}, None) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from learnscope.embeddings.id_subsample import subsample_ids
from learnscope.embeddings.scatter_frame import column_kind, label_categories
from learnscope.records.embedding_measures import LabelSilhouette

LABEL_COLUMN = "label"  # the one column a silhouette groups the points by
MAX_POINTS = 2_000  # points measured per snapshot: a fixed subsample by id beyond
_BLOCK = 256  # points whose distances to all others are held at once


def label_silhouette(
    views: Mapping[str, np.ndarray],
    columns: Mapping[str, Sequence[Any]],
    ids: Sequence[str] | None,
    max_points: int = MAX_POINTS,
) -> LabelSilhouette | None:
    """The label silhouette of each view of one snapshot, or ``None`` when it has none.

    Args:
        views: Each view's coordinates by projection (``pca``, ``umap``), ``[points, 2 or 3]``
            (only x and y are used), the rows in the snapshot's order.
        columns: The snapshot's metadata columns, one value per point.
        ids: Each point's id as the run record writes it (unique in the snapshot), or ``None``
            for points known by their row (their row number is their id).
        max_points: The most points measured.

    Returns:
        ``None`` without a categorical ``label`` column, without a view, or when the silhouette
        is undefined (fewer than 2 labels, or as many labels as points, among those measured).
        A view with a non-finite coordinate among them is left out.
    """
    values = columns.get(LABEL_COLUMN)
    if values is None or not views or column_kind(values) != "categorical":
        return None
    count = len(values)
    names = [str(i) for i in range(count)] if ids is None else [str(i) for i in ids]
    if len(names) != count:
        raise ValueError(f"{len(names)} ids for {count} points")
    rows = np.arange(count)
    if count > max_points:
        keep = set(subsample_ids(names, max_points))
        rows = np.array([row for row, name in enumerate(names) if name in keep], np.int64)
    _, codes = label_categories([values[row] for row in rows], most=max(len(rows), 1))
    labels = len(np.unique(codes))
    if not 2 <= labels < len(rows):
        return None
    measured = {}
    for projection, coords in views.items():
        xy = np.asarray(coords, np.float64)[rows, :2]
        if np.isfinite(xy).all():
            measured[projection] = mean_silhouette(xy, codes)
    return LabelSilhouette(LABEL_COLUMN, len(rows), measured) if measured else None


def mean_silhouette(xy: np.ndarray, labels: np.ndarray) -> float:
    """The mean silhouette of points ``xy`` (Euclidean) grouped by integer ``labels``.

    ``labels`` must hold at least 2 distinct values, fewer than there are points (the
    silhouette is undefined otherwise). Distances are held a block of points at a time.

    Raises:
        ValueError: When the silhouette is undefined for ``labels``.

    Example:
        >>> xy = np.array([[0.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
        >>> round(mean_silhouette(xy, np.array([0, 0, 1])), 4)  # (1/3 + 0.4453 + 0) / 3
        0.2595
    """
    values, inverse, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    points = len(xy)
    if not 2 <= len(values) < points:
        raise ValueError(
            f"a silhouette needs 2 to {points - 1} labels for {points} points, got {len(values)}"
        )
    order = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = 0.0
    for start in range(0, points, _BLOCK):
        block = slice(start, min(start + _BLOCK, points))
        distances = np.sqrt(((xy[block, None, :] - xy[None, :, :]) ** 2).sum(axis=2))
        sums = np.add.reduceat(distances[:, order], starts, axis=1)  # [block, labels]
        own = inverse[block]
        here = np.arange(len(own))
        own_size = sizes[own]
        within = sums[here, own] / np.maximum(own_size - 1, 1)
        means = sums / sizes
        means[here, own] = np.inf
        nearest = means.min(axis=1)
        widest = np.maximum(within, nearest)
        silhouettes = np.where(
            (own_size > 1) & (widest > 0), (nearest - within) / np.where(widest > 0, widest, 1), 0
        )
        total += float(silhouettes.sum())
    return total / points
