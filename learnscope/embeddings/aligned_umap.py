"""Aligned UMAP: 2-D views that show the clusters a model learned, stable from snapshot to snapshot.

The aligned PCA view (:mod:`learnscope.embeddings.aligned_pca`) keeps the two directions of largest
variance, which in a learned embedding are rarely the ones that separate its classes. UMAP keeps
each point's nearest neighbours together instead, so clusters show; but a UMAP of each snapshot
alone puts the same points somewhere else every time. Here every snapshot of a key is laid out
by UMAP's *aligned* objective (``umap.AlignedUMAP``, Dupuy et al.): UMAP's own, plus a pull of
each point towards where it was in the previous snapshot's layout, as strong as the share of its
neighbourhood that it kept. So:

* a point whose neighbours did not change stays where it was, and one whose neighbours changed
  moves with them;
* **an unchanged snapshot gives the same picture**: when the new neighbour graph is the previous
  one (the same points, the same neighbours, membership strengths within :data:`SAME_GRAPH`),
  the previous layout is kept as it is; an embedding only turned, moved or scaled has that graph;
* **incremental and bounded**: a new snapshot is laid out against the previous layout only (a
  window of one), which does not move; a key keeps one layout and its graph;
* **capped**: the layout is fitted on at most ``max_points`` points (those fitted before first,
  so the alignment keeps its anchors), and the others are placed at the weighted mean of their
  nearest fitted points (as ``umap.UMAP.transform`` starts them); the view says how many were
  fitted.

``umap-learn`` is an optional extra (``pip install "learnscope[umap]"``); :func:`require_umap`
says so before a fit starts. Its kernels (:mod:`learnscope.embeddings.umap_layout`) are compiled by
numba once per machine and loaded from numba's cache by every later process, on the writers' thread.

Example:
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(60, 5))
    >>> first = aligned_umap(x, list(range(60)), None, UMAPSettings(epochs=20))
    >>> again = aligned_umap(2 * x, list(range(60)), first.layout, UMAPSettings(epochs=20))
    >>> bool(np.array_equal(first.coords, again.coords))  # scaled: the same neighbours
    True
"""

from __future__ import annotations

import importlib.util
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

MISSING = 'the aligned UMAP view needs umap-learn: pip install "learnscope[umap]"'
MIN_POINTS = 4  # fewer points have no neighbourhoods worth a layout: no UMAP view
SAME_GRAPH = 1e-5  # largest change of a membership strength that leaves the graph the same


def require_umap() -> None:
    """Raise ``ImportError`` naming the extra when ``umap-learn`` is not installed.

    Only looks for the package (importing it takes seconds): call it where the user asks for
    the view, so a missing extra is said before a fit starts.

    Example:
        >>> require_umap()  # umap-learn is installed here
    """
    if importlib.util.find_spec("umap") is None:
        raise ImportError(MISSING)


def load_umap() -> None:
    """Import umap-learn and load its kernels (compiled once per machine) on a few points.

    Run it on the thread that will lay out the snapshots, before the first one: the first
    view then costs only its layout.

    Example:
        >>> load_umap()
    """
    x = np.random.default_rng(0).normal(size=(24, 3))
    settings = UMAPSettings(epochs=2)
    first = aligned_umap(x, None, None, settings)
    assert first is not None
    aligned_umap(x * np.array([1.0, 2.0, 3.0]), None, first.layout, settings)  # the aligned path


@dataclass(frozen=True)
class UMAPSettings:
    """How the aligned UMAP view is computed.

    Args:
        neighbours: UMAP's ``n_neighbors``: the neighbourhood each point keeps.
        max_points: The most points the layout is fitted on; the others are placed.
        epochs: Optimisation epochs per snapshot (UMAP's default for large data).
        alignment: The pull towards the previous layout (``umap.AlignedUMAP``'s
            ``alignment_regularisation``).
        seed: Seed of the layout: the same snapshots give the same views.

    Example:
        >>> UMAPSettings(max_points=2000).neighbours
        15
    """

    neighbours: int = 15
    max_points: int = 5000
    epochs: int = 200
    alignment: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if self.neighbours < 2 or self.max_points < MIN_POINTS or self.epochs < 1:
            raise ValueError(
                f"UMAP needs neighbours >= 2, max_points >= {MIN_POINTS} and epochs >= 1, got "
                f"{self.neighbours}, {self.max_points} and {self.epochs}"
            )
        if not self.alignment >= 0:
            raise ValueError(f"alignment must be >= 0, got {self.alignment}")


@dataclass(frozen=True)
class UMAPLayout:
    """The layout of one snapshot of a key: what the next snapshot is aligned to.

    Attributes:
        ids: The id of each fitted point, in the layout's order.
        layout: ``[M, 2]`` float32 positions of the fitted points.
        graph: Their UMAP neighbour graph (``scipy.sparse.csr_matrix``, ``[M, M]``).
        origin: ``[2]`` the centre of the key's first layout: views are given around it, so
            a key's views share one origin.
    """

    ids: tuple[Hashable, ...]
    layout: np.ndarray
    graph: Any
    origin: np.ndarray

    def state_dict(self) -> dict[str, Any]:
        """The layout as tensors and a list, for a checkpoint."""
        graph = self.graph
        return {
            "ids": list(self.ids),
            "layout": torch.from_numpy(np.array(self.layout, np.float32)),
            "graph": [torch.from_numpy(np.array(a)) for a in (graph.indptr, graph.indices)]
            + [torch.from_numpy(np.array(graph.data, np.float32))],
            "origin": torch.from_numpy(np.array(self.origin, np.float64)),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> UMAPLayout:
        """The layout :meth:`state_dict` gave."""
        import scipy.sparse

        indptr, indices, data = (t.numpy() for t in state["graph"])
        size = len(indptr) - 1
        graph = scipy.sparse.csr_matrix((data, indices, indptr), shape=(size, size))
        return cls(tuple(state["ids"]), state["layout"].numpy(), graph, state["origin"].numpy())


@dataclass(frozen=True)
class UMAPView:
    """A snapshot's aligned UMAP view.

    Attributes:
        coords: ``[N, 2]`` float64 positions of every point, around the key's origin.
        fitted: How many points the layout was fitted on, or ``None`` when all were.
        layout: What the next snapshot of the key is aligned to.
    """

    coords: np.ndarray
    fitted: int | None
    layout: UMAPLayout


def aligned_umap(
    vectors: np.ndarray | torch.Tensor,
    ids: Sequence[Hashable] | None,
    previous: UMAPLayout | None,
    settings: UMAPSettings,
) -> UMAPView | None:
    """The UMAP view of a snapshot, aligned to the ``previous`` layout of its key.

    Args:
        vectors: ``[N, D]`` points.
        ids: One id per point; the same id is the same point in ``previous``. ``None``: the
            row number.
        previous: The key's last layout (``None`` for its first snapshot).
        settings: How the view is computed.

    Returns:
        The view, or ``None`` for fewer than :data:`MIN_POINTS` points.

    Raises:
        ValueError: If ``ids`` has not one id per point.
    """
    from learnscope.embeddings import umap_layout

    x = np.asarray(torch.as_tensor(vectors).detach().cpu().double().numpy())
    ids = list(range(len(x))) if ids is None else list(ids)
    if len(ids) != len(x):
        raise ValueError(f"{len(ids)} ids for {len(x)} points")
    if len(x) < MIN_POINTS:
        return None
    rows = fitted_rows(ids, previous, settings.max_points)
    points = x[rows]
    fit_ids = tuple(ids[r] for r in rows)
    k = min(settings.neighbours, len(rows))
    graph = umap_layout.neighbour_graph(points, k, settings.epochs)
    pairs = shared_rows(previous, fit_ids)
    if previous is None or not len(pairs[0]):
        layout = umap_layout.first_layout(points, graph, settings.epochs, settings.seed)
    elif same_graph(previous, graph, pairs):
        layout = previous.layout[pairs[0]]
    else:
        start = starting_layout(previous, graph, pairs, settings.seed)
        layout = umap_layout.aligned_layout(
            previous.layout,
            previous.graph,
            graph,
            start,
            pairs,
            settings.epochs,
            settings.alignment,
            settings.seed,
        )
    origin = layout.mean(0).astype(np.float64) if previous is None else previous.origin
    coords = np.empty((len(x), 2))
    coords[rows] = layout
    rest = np.setdiff1d(np.arange(len(x)), rows)
    if len(rest):
        coords[rest] = umap_layout.place(x[rest], points, layout, k)
    fitted = len(rows) if len(rest) else None
    return UMAPView(coords - origin, fitted, UMAPLayout(fit_ids, layout, graph, origin))


def fitted_rows(
    ids: Sequence[Hashable], previous: UMAPLayout | None, max_points: int
) -> np.ndarray:
    """The rows the layout is fitted on: all, or ``max_points`` of them, those fitted before first.

    The others are taken evenly spread over the snapshot's rows, so the choice depends only on
    the ids.

    Example:
        >>> fitted_rows(list("abcdef"), None, 3).tolist()
        [0, 2, 5]
    """
    if len(ids) <= max_points:
        return np.arange(len(ids))
    before = set(previous.ids) if previous is not None else set()
    kept = np.array([r for r, key in enumerate(ids) if key in before], dtype=np.int64)
    kept = kept[:max_points]
    others = np.setdiff1d(np.arange(len(ids)), kept)
    wanted = max_points - len(kept)
    if wanted:
        spaced = np.linspace(0, len(others) - 1, wanted).round().astype(np.int64)
        kept = np.concatenate([kept, others[spaced]])
    return np.unique(kept.astype(np.int64))


def shared_rows(
    previous: UMAPLayout | None, ids: Sequence[Hashable]
) -> tuple[np.ndarray, np.ndarray]:
    """``(previous rows, new rows)`` of the points fitted in both layouts.

    Example:
        >>> layout = UMAPLayout(("a", "b"), np.zeros((2, 2)), None, np.zeros(2))
        >>> [side.tolist() for side in shared_rows(layout, ["b", "c"])]
        [[1], [0]]
    """
    row_of = {key: row for row, key in enumerate(previous.ids)} if previous else {}
    pairs = [(row_of[key], new) for new, key in enumerate(ids) if key in row_of]
    old, new = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    return old, new


def same_graph(previous: UMAPLayout, graph: Any, pairs: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether ``graph`` is the previous graph: the same points, neighbours and strengths.

    Example:
        >>> import scipy.sparse
        >>> g = scipy.sparse.csr_matrix(np.array([[0, 1.0], [1.0, 0]]))
        >>> layout = UMAPLayout(("a", "b"), np.zeros((2, 2)), g, np.zeros(2))
        >>> same_graph(layout, g, (np.array([1, 0]), np.array([1, 0])))
        True
    """
    old, new = pairs
    size = len(previous.ids)
    if len(old) != size or graph.shape[0] != size:
        return False
    to_old = np.empty(size, dtype=np.int64)
    to_old[new] = old
    coo = graph.tocoo()
    import scipy.sparse

    moved = scipy.sparse.csr_matrix((coo.data, (to_old[coo.row], to_old[coo.col])), (size, size))
    difference = abs(moved - previous.graph)
    return difference.nnz == 0 or float(difference.max()) <= SAME_GRAPH


def starting_layout(
    previous: UMAPLayout, graph: Any, pairs: tuple[np.ndarray, np.ndarray], seed: int
) -> np.ndarray:
    """Where the new layout starts: shared points where they were, new ones among their neighbours.

    A new point starts at the mean of its shared neighbours' previous positions, weighted by
    the graph; one with no shared neighbour at a random place in the previous layout's extent.

    Example:
        >>> import scipy.sparse
        >>> g = scipy.sparse.csr_matrix(np.array([[0, 1.0], [1.0, 0]]))
        >>> layout = UMAPLayout(("a",), np.array([[3.0, 4.0]]), None, np.zeros(2))
        >>> starting_layout(layout, g, (np.array([0]), np.array([1])), 0).tolist()
        [[3.0, 4.0], [3.0, 4.0]]
    """
    old, new = pairs
    start = np.zeros((graph.shape[0], 2))
    start[new] = previous.layout[old]
    fresh = np.setdiff1d(np.arange(graph.shape[0]), new)
    if len(fresh):
        weights = graph[fresh][:, new]
        total = np.asarray(weights.sum(1)).ravel()
        placed = np.asarray(weights @ start[new]) / np.maximum(total, 1e-30)[:, None]
        low, high = previous.layout.min(0), previous.layout.max(0)
        guess = np.random.default_rng(seed).uniform(low, high, (len(fresh), 2))
        start[fresh] = np.where(total[:, None] > 0, placed, guess)
    return start.astype(np.float32)
