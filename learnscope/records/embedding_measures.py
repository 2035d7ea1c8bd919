"""What a snapshot measures of itself: the ranks of its rows, the label silhouette of its views.

The snapshot job computes both on the writers' thread (never the training thread) and hands
them on as fields of the :class:`~learnscope.records.EmbeddingSnapshot`; the run record keeps
them in the snapshot's entry (``ranks``, ``silhouette``) and the run summary folds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from learnscope.records import checks


@dataclass(frozen=True)
class EmbeddingRanks:
    """RankMe and the effective rank of every row of a snapshot (at least 2 rows).

    The definitions of :mod:`learnscope.collapse.metrics` (RankMe of the rows, the effective
    rank of the centred rows), in float64.

    Args:
        rankme: RankMe, from about 1 (rank one) to ``min(rows, dim)``: finite, above 0.
        effective_rank: The same of the column-centred rows.
        rows: How many rows were measured (at least 2).
        dim: Their dimension (at least 1).

    Raises:
        TypeError: If a rank is no real number or a count no int.
        ValueError: If a rank is not finite or not above 0, or a count is too small.

    Example:
        >>> EmbeddingRanks(3.5, 2.75, 100, 8).rankme
        3.5
    """

    rankme: float
    effective_rank: float
    rows: int
    dim: int

    def __post_init__(self) -> None:
        for name in ("rankme", "effective_rank"):
            value = checks.finite(checks.real_number(getattr(self, name), name), name)
            if value <= 0:
                raise ValueError(f"{name} is a rank, above 0, got {value}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "rows", checks.count(self.rows, "rows of the ranks", 2))
        object.__setattr__(self, "dim", checks.count(self.dim, "dim of the ranks", 1))


@dataclass(frozen=True)
class LabelSilhouette:
    """The mean silhouette of a snapshot's 2-D views, its points grouped by their label.

    Args:
        column: The metadata column the labels are (``label``).
        points: How many points were measured (a fixed subsample by id, at most 2,000).
        views: The mean silhouette of each view, by projection (``pca``, ``umap``): in
            ``[-1, 1]``. A view whose silhouette is undefined is not in it.

    Raises:
        TypeError: If the column is no text, ``points`` no int, or a value no real number.
        ValueError: If a value is not in ``[-1, 1]``, or ``points`` is below 2.

    Example:
        >>> LabelSilhouette("label", 300, {"pca": 0.5}).views
        {'pca': 0.5}
    """

    column: str
    points: int
    views: Mapping[str, float]

    def __post_init__(self) -> None:
        checks.name(self.column, "the silhouette's column")
        object.__setattr__(self, "points", checks.count(self.points, "silhouette points", 2))
        if not isinstance(self.views, Mapping):
            raise TypeError(f"silhouette views must be a mapping, got {type(self.views).__name__}")
        views = {}
        for projection, value in self.views.items():
            checks.name(projection, "a view's projection")
            what = f"the silhouette of the {projection} view"
            number = checks.finite(checks.real_number(value, what), what)
            if not -1.0 <= number <= 1.0:
                raise ValueError(f"{what} is a silhouette, in [-1, 1], got {number}")
            views[projection] = number
        object.__setattr__(self, "views", views)
