"""Neighbourhoods and alignment of two embeddings of the same points, in numpy.

* :func:`nearest_neighbours`: each row's ``k`` nearest other rows, exact, in blocks of bounded
  memory; :func:`neighbourhood_overlap`: per point, how many of its ``k`` nearest neighbours
  two embeddings share (the embeddings may differ in dimension).
* :func:`neighbourhood_change`: the one definition of how much a point's neighbourhood changed
  from one embedding to another: the neighbours it kept, and how far its old ones went (its
  ``drift``). Points that changed most have kept fewest, then drifted most. The comparison of
  two runs ranks its points by it; the tab's movers (``plugins/static/movers.js``) apply the
  same definition to two snapshots of the 2-D view.
* :func:`in_spreads` and :func:`procrustes_rotation`: two 2-D views put in one frame, B turned
  onto A by orthogonal Procrustes.

The views compare runs with these (``learnscope.plugins.views.compare_runs``); nothing here imports
torch.

Example:
    >>> a = np.array([[0.0], [1.0], [3.0], [7.0]])
    >>> neighbourhood_overlap(a, 2 * a, 2).tolist()  # a stretched copy: the same neighbours
    [2, 2, 2, 2]
"""

from __future__ import annotations

import math

import numpy as np

from learnscope.embeddings.scatter_frame import spread

NEIGHBOURS = 10  # k: the nearest neighbours a changed neighbourhood is counted over, everywhere
BLOCK_BYTES = 32 << 20  # the distances of one block of rows, at most
_SPARE = 4  # candidates beyond k whose distances are computed again exactly


def nearest_neighbours(x: np.ndarray, k: int, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """The ``k`` nearest other rows of each row of ``x`` (Euclidean), exact, nearest first.

    Distances are found a block of rows at a time (``block_bytes`` of float64 distances at
    most) by ``|x|^2 + |y|^2 - 2 x.y`` on the centred rows; the ``k`` + 4 nearest of each row
    (chosen in float32) are then measured
    again as ``|x - y|`` in float64 and sorted by distance, then by row, so that the result is
    that of a full distance matrix sorted row by row.

    Example:
        >>> nearest_neighbours(np.array([[0.0], [1.0], [3.0], [7.0]]), 2).tolist()
        [[1, 2], [0, 2], [1, 0], [2, 1]]
    """
    x = np.asarray(x, np.float64)
    x = x - x.mean(0)  # distances stay; |x|^2 + |y|^2 - 2 x.y cancels less
    m = len(x)
    if not 0 < k < m:
        raise ValueError(f"k = {k} needs between 1 and {m - 1} other rows")
    squares = (x**2).sum(1)
    wide = min(k + _SPARE, m - 1)
    block = max(1, block_bytes // (8 * m))
    out = np.empty((m, k), np.int64)
    for start in range(0, m, block):
        stop = min(m, start + block)
        distances = squares[start:stop, None] + squares[None, :] - 2.0 * (x[start:stop] @ x.T)
        distances[np.arange(stop - start), np.arange(start, stop)] = np.inf  # not its own
        # float32 only to choose candidates (argpartition is ~10x faster on it); the spare ones
        # cover its rounding, and the candidates are measured again in float64 below
        candidates = np.argpartition(distances.astype(np.float32), wide - 1, axis=1)[:, :wide]
        exact = np.sqrt(((x[start:stop, None, :] - x[candidates]) ** 2).sum(-1))
        order = np.lexsort((candidates, exact), axis=1)[:, :k]
        out[start:stop] = np.take_along_axis(candidates, order, axis=1)
    return out


def neighbourhood_overlap(
    a: np.ndarray, b: np.ndarray, k: int = 10, block_bytes: int = BLOCK_BYTES
) -> np.ndarray:
    """Per row, how many of its ``k`` nearest neighbours in ``a`` are among those in ``b``.

    Rows are the same points in both (``a`` and ``b`` may have different dimensions); the
    overlap of a point is this count divided by ``k``.

    Example:
        >>> a = np.array([[0.0], [1.0], [3.0], [7.0]])
        >>> neighbourhood_overlap(a, 2 * a, 2).tolist()
        [2, 2, 2, 2]
        >>> neighbourhood_overlap(a, np.array([[0.0], [5.0], [1.0], [2.0]]), 1).tolist()
        [0, 0, 0, 1]
    """
    near_a = nearest_neighbours(a, k, block_bytes)
    near_b = nearest_neighbours(b, k, block_bytes)
    return _kept(near_a, near_b)


def neighbourhood_change(
    a: np.ndarray, b: np.ndarray, k: int = 10, block_bytes: int = BLOCK_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the neighbours it kept from ``a`` to ``b`` and how far its old ones went.

    * ``kept``: how many of its ``k`` nearest neighbours in ``a`` are among those in ``b``
      (:func:`neighbourhood_overlap`);
    * ``drift``: in ``b``, the mean distance from the point to its ``k`` neighbours of ``a``
      over the mean distance to its ``k`` neighbours of ``b``: 1 when they are the same, more
      the farther its old neighbours went (``inf`` when its new ones lie on it and the old do
      not). Of two points that kept as many, the one of larger drift changed more.

    Example:
        >>> a, b = np.array([[0.0], [1.0], [3.0], [7.0]]), np.array([[0.0], [1.0], [9.0], [3.0]])
        >>> kept, drift = neighbourhood_change(a, b, 1)  # the last two lost their neighbour
        >>> kept.tolist(), drift.round(2).tolist()  # the last one's went farther
        ([1, 1, 0, 0], [1.0, 1.0, 1.33, 3.0])
    """
    near_a = nearest_neighbours(a, k, block_bytes)
    near_b = nearest_neighbours(b, k, block_bytes)
    kept = _kept(near_a, near_b)
    old = _mean_distances(b, near_a, block_bytes)
    new = _mean_distances(b, near_b, block_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        drift = np.where(old == new, 1.0, old / new)
    return kept, drift


def _kept(near_a: np.ndarray, near_b: np.ndarray) -> np.ndarray:
    """Per row, how many of its neighbours in ``near_a`` are also in ``near_b``."""
    return (near_a[:, :, None] == near_b[:, None, :]).any(-1).sum(-1).astype(np.int64)


def _mean_distances(x: np.ndarray, neighbours: np.ndarray, block_bytes: int) -> np.ndarray:
    """Per row of ``x``, its mean distance to the rows ``neighbours`` names, a block at a time."""
    x = np.asarray(x, np.float64)
    m, k = neighbours.shape
    block = max(1, block_bytes // (8 * k * max(1, x.shape[1])))
    out = np.empty(m, np.float64)
    for start in range(0, m, block):
        stop = min(m, start + block)
        gaps = x[start:stop, None, :] - x[neighbours[start:stop]]
        out[start:stop] = np.sqrt((gaps**2).sum(-1)).mean(1)
    return out


def in_spreads(xy: np.ndarray) -> np.ndarray:
    """``xy`` centred (non-finite rows left out of the centre) and in units of its spread.

    The spread is the root-mean-square distance from the centre.

    Example:
        >>> in_spreads(np.array([[1.0, 1.0], [3.0, 1.0]])).tolist()
        [[-1.0, 0.0], [1.0, 0.0]]
    """
    finite = np.isfinite(xy).all(1)
    centred = xy - (xy[finite].mean(0) if finite.any() else 0.0)
    scale = spread(centred)
    return centred / (scale if scale > 0 and math.isfinite(scale) else 1.0)


def procrustes_rotation(b: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The orthogonal matrix ``R`` (rotation or reflection) that brings ``b @ R`` nearest ``a``.

    Orthogonal Procrustes: ``R = U V^T`` for the SVD ``b^T a = U S V^T``, over the rows where
    both are finite.

    Example:
        >>> a = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, -2.0]])
        >>> b = a @ np.array([[0.0, 1.0], [-1.0, 0.0]])  # a turned by 90 degrees
        >>> np.allclose(b @ procrustes_rotation(b, a), a)
        True
    """
    finite = np.isfinite(a).all(1) & np.isfinite(b).all(1)
    u, _, vt = np.linalg.svd(b[finite].T @ a[finite])
    return u @ vt
