"""What a scatter picture of a 2-D embedding view shows: its frame, and which label colours a point.

Data helpers only (numpy); :mod:`learnscope.plugins.pipeline.figures` draws the picture. The views
come from :class:`learnscope.embeddings.aligned_pca.AlignedPCA`, centred on the origin and divided
by their spread (root-mean-square distance from the centre), so one fixed frame per tag, chosen by
:func:`frame_limits` from the first snapshot, keeps fitting while the embeddings grow.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from numbers import Real
from typing import Any, Literal

import numpy as np

MAX_CATEGORIES = 10  # labels with a colour of their own; the rest share one "other" entry
MAX_CLASSES = 16  # distinct whole numbers that are still classes, not a colour scale
OTHER = "other"
# never colours
NOT_LABELS = ("id", "position", "node", "row", "pca_x", "pca_y", "pca_z", "umap_x", "umap_y")
FRAME_HALF_WIDTHS = (2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)  # round frames, in spreads

Limits = tuple[float, float, float, float]  # xmin, xmax, ymin, ymax
ColumnKind = Literal["categorical", "numeric"]


def label_column(columns: Iterable[str]) -> str | None:
    """The column that colours the points: the first that is not an id, position or PCA column.

    Example:
        >>> label_column(["id", "label", "pca_x"])
        'label'
        >>> label_column(["pca_x"]) is None
        True
    """
    return next((name for name in columns if name not in NOT_LABELS), None)


def labels_of(metadata: Mapping[str, Sequence[Any]]) -> Sequence[Any] | None:
    """The values of :func:`label_column` in ``metadata``, or ``None`` when there is none.

    Example:
        >>> labels_of({"id": [1, 2], "digit": [7, 3]})
        [7, 3]
    """
    name = label_column(metadata)
    return None if name is None else metadata[name]


def spread(xy: np.ndarray) -> float:
    """A view's spread: the root-mean-square distance of its finite points from the origin.

    The one definition the aligned view, the pictures, the tab and the comparison use; ``0.0``
    without a finite point.

    Example:
        >>> spread(np.array([[3.0, 4.0], [0.0, 0.0], [np.nan, 1.0]]))
        3.5355...
    """
    finite = np.asarray(xy, np.float64)
    finite = finite[np.isfinite(finite).all(1)]
    return float(np.sqrt((finite**2).sum(1).mean())) if len(finite) else 0.0


def frame_limits(xy: np.ndarray, keep: float = 0.995) -> Limits:
    """A square frame centred on the origin that holds ``keep`` of the points, in round units.

    Meant for views in units of their spread, computed once per tag (from its first
    snapshot) and then kept: the half-width is the first of :data:`FRAME_HALF_WIDTHS` that
    holds the ``keep`` quantile of ``max(|x|, |y|)`` with 15% to spare, room for the points
    to spread out a little later (at least 2.5 spreads; beyond 10, the next whole number).

    Args:
        xy: ``[N, 2]`` coordinates centred on the origin; rows with NaN or Inf are ignored.
        keep: The fraction of the points the frame should hold.

    Returns:
        ``(xmin, xmax, ymin, ymax)``, with ``xmin = ymin = -xmax``.

    Example:
        >>> frame_limits(np.array([[0.5, -1.0], [1.2, 0.3], [-0.9, 0.8]]))
        (-2.5, 2.5, -2.5, 2.5)
        >>> frame_limits(np.array([[2.9, 0.0], [0.0, 0.1]]), keep=1.0)
        (-4.0, 4.0, -4.0, 4.0)
    """
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    finite = xy[np.isfinite(xy).all(1)]
    reach = float(np.quantile(np.abs(finite).max(1), keep)) * 1.15 if len(finite) else 0.0
    half = next((h for h in FRAME_HALF_WIDTHS if h >= reach), float(math.ceil(reach)))
    return (-half, half, -half, half)


def clip_to_frame(xy: np.ndarray, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """Move points outside ``limits`` onto its edge, and say which ones were moved.

    Args:
        xy: ``[N, 2]`` coordinates (rows with NaN or Inf stay as they are, and count as inside).
        limits: ``(xmin, xmax, ymin, ymax)``.

    Returns:
        The clipped ``[N, 2]`` coordinates and an ``[N]`` mask of the points that were outside.

    Example:
        >>> clipped, outside = clip_to_frame(np.array([[0.0, 5.0], [1.0, 1.0]]), (-2, 2, -2, 2))
        >>> clipped.tolist(), outside.tolist()
        ([[0.0, 2.0], [1.0, 1.0]], [True, False])
    """
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    low = np.array([limits[0], limits[2]], np.float64)
    high = np.array([limits[1], limits[3]], np.float64)
    with np.errstate(invalid="ignore"):
        outside = ((xy < low) | (xy > high)).any(1)
    return np.clip(xy, low, high), outside


def column_kind(values: Iterable[Any], most: int = MAX_CLASSES) -> ColumnKind:
    """How a metadata column colours points: ``"numeric"`` (a colour bar) or ``"categorical"``.

    The one rule of every learnscope picture and view. A column is numeric when all its
    values are real numbers (not booleans) and either one of the finite ones is not a whole
    number or there are more than ``most`` distinct values; anything else (text, booleans,
    class numbers such as 12 digits) is categorical. NaN and Inf do not make a column numeric
    by themselves.

    Args:
        values: One value per point.
        most: The most distinct whole numbers that are still classes.

    Example:
        >>> column_kind(list(range(12))), column_kind([0.25, 0.5]), column_kind(range(17))
        ('categorical', 'numeric', 'numeric')
        >>> column_kind(["a", "b"]), column_kind([True, False]), column_kind([])
        ('categorical', 'categorical', 'categorical')
    """
    values = list(values)
    if not values or not all(isinstance(v, Real) and not isinstance(v, bool) for v in values):
        return "categorical"
    numbers = np.asarray(values, np.float64)
    finite = numbers[np.isfinite(numbers)]
    if not np.all(finite == np.round(finite)) or len(np.unique(finite)) > most:
        return "numeric"
    return "categorical"


def label_categories(
    labels: Sequence[Any], most: int = MAX_CATEGORIES
) -> tuple[list[str], np.ndarray]:
    """The labels with a colour of their own, and each point's index into them.

    The ``most`` most frequent labels (as text; ties and order by value, numbers first) get an
    entry; the other points get index ``-1`` (shown as :data:`OTHER`). The entries are sorted,
    so the same labels get the same colours in every picture.

    Args:
        labels: One label per point.
        most: The most entries.

    Returns:
        ``(names, index)``.

    Example:
        >>> names, index = label_categories(["b", "a", "c", "a"], most=2)
        >>> names, index.tolist()
        (['a', 'b'], [1, 0, -1, 0])
    """
    text = [label_text(v) for v in labels]
    counts = Counter(text)
    names = sorted(counts, key=_sort_key)
    if len(names) > most:
        frequent = sorted(counts, key=lambda v: (-counts[v], _sort_key(v)))[:most]
        names = sorted(frequent, key=_sort_key)
    position = {name: i for i, name in enumerate(names)}
    return names, np.array([position.get(v, -1) for v in text], np.int64)


def label_text(value: Any) -> str:
    """A label as shown in a legend: whole floats without ``.0``.

    Example:
        >>> label_text(3.0), label_text("cat")
        ('3', 'cat')
    """
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _sort_key(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)
