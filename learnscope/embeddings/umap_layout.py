"""UMAP's own pieces, for the aligned UMAP view (:mod:`~learnscope.embeddings.aligned_umap`).

This module imports ``umap-learn`` and numba, so it is imported only where the aligned UMAP view
is computed (on the writers' thread), never by ``import learnscope``. What it adds to UMAP:

* **exact neighbours** (:func:`nearest`): the points a projection is fitted on are capped (a few
  thousand), so the exact ``k`` nearest neighbours cost less than approximate ones, need no
  index to be compiled (pynndescent's first call compiles for about a minute) and are the same
  for the same points;
* **one alignment step at a time** (:func:`aligned_layout`): the layout of a new snapshot is
  optimised by UMAP's aligned objective against the previous snapshot's layout, which stays
  fixed, so a snapshot costs the same at step 100 as at step 1 and memory holds one layout per
  key (``umap.AlignedUMAP.update`` keeps every slice and re-reads them all);
* **one kernel, compiled once per machine** (:func:`optimise`): UMAP's epoch with the aligned
  objective's pull, for two dimensions and plain arrays. ``umap.layouts``' aligned epoch reads
  every edge through numba typed lists of slices (about 7 times the time of UMAP's own epoch)
  and is compiled anew at every call; this one runs all epochs in one call, on one thread (the
  layout leaves the cores to training, and is reproducible), releasing the GIL, and is kept in
  numba's cache on disk with the other kernels: the first process on a machine compiles them
  (about 20 s), the next ones load them (about 2 s).

Every function is deterministic: the same points, graph and seed give the same layout.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse
import torch
from umap.layouts import clip
from umap.spectral import spectral_layout
from umap.umap_ import (
    compute_membership_strengths,
    find_ab_params,
    make_epochs_per_sample,
    smooth_knn_dist,
)
from umap.utils import tau_rand_int

MIN_DIST = 0.1  # UMAP's defaults: how tightly points may pack, and the scale of the layout
A, B = find_ab_params(1.0, MIN_DIST)
NEGATIVES = 5  # UMAP's negative samples per edge sample
# umap's kernels, compiled as :func:`optimise` is (one thread, the GIL released, numba's cache)
NEIGHBOUR_SCALES = numba.njit(smooth_knn_dist.py_func, fastmath=True, nogil=True, cache=True)
MEMBERSHIPS = numba.njit(
    compute_membership_strengths.py_func, fastmath=True, nogil=True, cache=True
)
INIT_SCALE = 10.0  # UMAP scales its first layout to this half-width


def nearest(
    queries: np.ndarray, points: np.ndarray, k: int, rows: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``k`` nearest ``points`` of each query, a block of queries at a time.

    Args:
        queries: ``[Q, D]`` points.
        points: ``[P, D]`` points (``P >= k``).
        k: Neighbours per query (a query that is also a point finds itself first).
        rows: Queries per block (memory: ``rows x P`` distances).

    Returns:
        ``indices [Q, k]`` (int32) and ``distances [Q, k]`` (float32), nearest first.

    Example:
        >>> x = np.array([[0.0], [1.0], [3.0]])
        >>> nearest(x, x, 2)[0].tolist()
        [[0, 1], [1, 0], [2, 1]]
    """
    target = torch.as_tensor(points, dtype=torch.float64)
    indices, distances = [], []
    for start in range(0, len(queries), rows):
        block = torch.as_tensor(queries[start : start + rows], dtype=torch.float64)
        # Chosen by matrix products (fast), then measured exactly: a point is at distance 0
        # from itself, and the same points give the same distances whatever their order.
        chosen = torch.topk(torch.cdist(block, target), k, dim=1, largest=False).indices
        exact = (block[:, None, :] - target[chosen]).square().sum(-1).sqrt()
        exact, order = exact.sort(dim=1, stable=True)
        indices.append(chosen.gather(1, order).numpy().astype(np.int32))
        distances.append(exact.numpy().astype(np.float32))
    return np.concatenate(indices), np.concatenate(distances)


def neighbour_graph(points: np.ndarray, k: int, epochs: int) -> scipy.sparse.csr_matrix:
    """UMAP's fuzzy neighbour graph of ``points`` (symmetric, float32), from exact neighbours.

    ``umap.umap_.fuzzy_simplicial_set``'s: each point's membership strengths to its ``k``
    nearest (``exp(-(d - rho) / sigma)``), joined by the fuzzy union ``A + A^T - A * A^T``.
    Edges too weak to be sampled in ``epochs`` are dropped, as ``umap.UMAP`` drops them.

    Example:
        >>> x = np.random.default_rng(0).normal(size=(30, 4))
        >>> graph = neighbour_graph(x, 5, 200)
        >>> graph.shape, bool((graph != graph.T).nnz == 0)
        ((30, 30), True)
    """
    indices, distances = nearest(points, points, k)
    sigmas, rhos = NEIGHBOUR_SCALES(distances, float(k), 64, 1.0, 1.0)
    rows, cols, values, _ = MEMBERSHIPS(indices, distances, sigmas, rhos, False, False)
    size = len(points)
    one_way = scipy.sparse.coo_matrix((values, (rows, cols)), shape=(size, size)).tocsr()
    one_way.eliminate_zeros()
    graph = (one_way + one_way.T - one_way.multiply(one_way.T)).tocsr().astype(np.float32)
    graph.data[graph.data < graph.data.max() / float(epochs)] = 0.0
    graph.eliminate_zeros()
    graph.sort_indices()
    return graph


def first_layout(
    points: np.ndarray, graph: scipy.sparse.csr_matrix, epochs: int, seed: int
) -> np.ndarray:
    """The UMAP layout of a first snapshot: UMAP's spectral start, then its optimisation.

    Example:
        >>> x = np.random.default_rng(0).normal(size=(40, 4))
        >>> first_layout(x, neighbour_graph(x, 5, 50), 50, seed=0).shape
        (40, 2)
    """
    random = np.random.RandomState(seed)
    start = spectral_layout(points, graph, 2, random)
    start = np.nan_to_num(start)
    scale = np.abs(start).max()
    start = start * (INIT_SCALE / scale) if scale > 0 else random.uniform(-10, 10, start.shape)
    nothing = np.zeros(len(points), dtype=np.float32)  # no previous layout: no pull
    return optimise(start, graph, start, nothing, epochs, seed, move_other=True)


def aligned_layout(
    previous: np.ndarray,
    previous_graph: scipy.sparse.csr_matrix,
    graph: scipy.sparse.csr_matrix,
    start: np.ndarray,
    pairs: tuple[np.ndarray, np.ndarray],
    epochs: int,
    alignment: float,
    seed: int,
) -> np.ndarray:
    """UMAP's aligned layout of a new snapshot, against the fixed layout of the previous one.

    The objective is ``umap.AlignedUMAP``'s with a window of one: UMAP's own on the new graph,
    plus a pull of each shared point towards its previous position, weighted by ``alignment``
    and by how much of its neighbourhood it kept (the Jaccard index of its neighbours in the
    two graphs). The previous layout does not move.

    Args:
        previous: ``[P, 2]`` the previous snapshot's layout.
        previous_graph: Its neighbour graph (``[P, P]``).
        graph: The new snapshot's (``[N, N]``).
        start: ``[N, 2]`` where the new points start (shared points at their previous place).
        pairs: ``(previous rows, new rows)`` of the shared points.
        epochs: Optimisation epochs.
        alignment: The weight of the pull (``umap.AlignedUMAP``'s ``alignment_regularisation``).
        seed: Seed of the negative samples.

    Returns:
        ``[N, 2]`` float32 layout.
    """
    old_rows, new_rows = pairs
    anchors = np.zeros((len(start), 2), dtype=np.float32)
    anchors[new_rows] = previous[old_rows]
    pulls = np.zeros(len(start), dtype=np.float32)
    pulls[new_rows] = alignment * neighbourhood_overlap(previous_graph, graph, pairs)
    return optimise(start, graph, anchors, pulls, epochs, seed, move_other=False)


def neighbourhood_overlap(
    previous_graph: scipy.sparse.csr_matrix,
    graph: scipy.sparse.csr_matrix,
    pairs: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """How much of its neighbourhood each shared point kept: the Jaccard index of its neighbours.

    ``umap.aligned_umap.build_neighborhood_similarities``' measure, from sparse products in
    ``O(edges)`` (umap's builds a set of every point for each point): of each shared point, its
    neighbours among the shared points in the new graph and in the previous one, compared;
    ``1`` when it has none in either.

    Args:
        previous_graph: ``[P, P]`` the previous neighbour graph.
        graph: ``[N, N]`` the new one.
        pairs: ``(previous rows, new rows)`` of the shared points.

    Returns:
        ``[len(pairs[0])]`` float32, in the order of ``pairs``.

    Example:
        >>> import scipy.sparse
        >>> ring = scipy.sparse.csr_matrix(np.roll(np.eye(4), 1, 1) + np.roll(np.eye(4), -1, 1))
        >>> same = (np.arange(4), np.arange(4))
        >>> neighbourhood_overlap(ring, ring, same).tolist()
        [1.0, 1.0, 1.0, 1.0]
    """
    old_rows, new_rows = pairs
    to_old = scipy.sparse.csr_matrix(
        (np.ones(len(new_rows)), (new_rows, old_rows)),
        shape=(graph.shape[0], previous_graph.shape[0]),
    )
    shared = np.zeros(to_old.shape[1])
    shared[old_rows] = 1.0
    now = ((graph[new_rows] != 0).astype(np.float64) @ to_old) != 0  # in previous rows' numbers
    before = (previous_graph[old_rows] != 0).multiply(shared[None, :]).tocsr() != 0
    both = np.asarray(now.multiply(before).sum(1)).ravel()
    either = np.asarray(now.sum(1)).ravel() + np.asarray(before.sum(1)).ravel() - both
    return np.where(either > 0, both / np.maximum(either, 1), 1.0).astype(np.float32)


def optimise(
    start: np.ndarray,
    graph: scipy.sparse.csr_matrix,
    anchors: np.ndarray,
    pulls: np.ndarray,
    epochs: int,
    seed: int,
    move_other: bool,
) -> np.ndarray:
    """UMAP's optimisation of a layout, each point pulled towards its anchor.

    UMAP's stochastic gradient descent (``umap.layouts``' epoch: each edge sampled in
    proportion to its strength, :data:`NEGATIVES` negative samples per sample, the learning rate
    falling from 1 to 0), with ``umap.AlignedUMAP``'s pull added to every step of a point:
    ``-pull * (position - anchor)``.

    Args:
        start: ``[N, 2]`` where the points start.
        graph: ``[N, N]`` their neighbour graph.
        anchors: ``[N, 2]`` where each point is pulled to.
        pulls: ``[N]`` how hard (zero: not at all).
        epochs: Epochs.
        seed: Seed of the negative samples.
        move_other: Whether an edge moves its tail too (UMAP's own layout), or its head only.

    Returns:
        ``[N, 2]`` float32 layout.
    """
    edges = graph.tocoo()
    per_sample = make_epochs_per_sample(edges.data, epochs)
    layout = np.array(start, dtype=np.float32, order="C")
    state = np.random.RandomState(seed).randint(-(2**31) + 1, 2**31 - 1, 3).astype(np.int64)
    _optimise(
        layout,
        np.ascontiguousarray(anchors, dtype=np.float32),
        np.ascontiguousarray(pulls, dtype=np.float32),
        edges.row.astype(np.int32),
        edges.col.astype(np.int32),
        per_sample,
        epochs,
        state,
        move_other,
    )
    return layout


@numba.njit(fastmath=True, nogil=True, cache=True)
def _optimise(
    layout: np.ndarray,
    anchors: np.ndarray,
    pulls: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    per_sample: np.ndarray,
    epochs: int,
    state: np.ndarray,
    move_other: bool,
) -> None:  # pragma: no cover - compiled by numba
    per_negative = per_sample / NEGATIVES
    next_sample = per_sample.copy()
    next_negative = per_negative.copy()
    size = layout.shape[0]
    for epoch in range(epochs):
        alpha = 1.0 - epoch / epochs
        for i in range(heads.shape[0]):
            if next_sample[i] > epoch:
                continue
            j, k = heads[i], tails[i]
            dx, dy = layout[j, 0] - layout[k, 0], layout[j, 1] - layout[k, 1]
            near = dx * dx + dy * dy
            coeff = 0.0
            if near > 0.0:
                coeff = -2.0 * A * B * near ** (B - 1.0) / (A * near**B + 1.0)
            gx, gy = clip(coeff * dx), clip(coeff * dy)
            _step(layout, j, gx, gy, anchors, pulls, alpha)
            if move_other:
                layout[k, 0] -= gx * alpha
                layout[k, 1] -= gy * alpha
            next_sample[i] += per_sample[i]
            negatives = int((epoch - next_negative[i]) / per_negative[i])
            for _ in range(negatives):
                k = tau_rand_int(state) % size
                dx, dy = layout[j, 0] - layout[k, 0], layout[j, 1] - layout[k, 1]
                near = dx * dx + dy * dy
                if near > 0.0:
                    coeff = 2.0 * B / ((0.001 + near) * (A * near**B + 1.0))
                    gx, gy = clip(coeff * dx), clip(coeff * dy)
                elif j == k:
                    continue
                else:
                    gx, gy = 0.0, 0.0
                _step(layout, j, gx, gy, anchors, pulls, alpha)
            next_negative[i] += negatives * per_negative[i]


@numba.njit(fastmath=True, nogil=True, cache=True, inline="always")
def _step(
    layout: np.ndarray,
    j: int,
    gx: float,
    gy: float,
    anchors: np.ndarray,
    pulls: np.ndarray,
    alpha: float,
) -> None:  # pragma: no cover - compiled by numba
    """Move point ``j`` by the gradient ``(gx, gy)`` and its pull towards its anchor."""
    layout[j, 0] += clip(gx - clip(pulls[j] * (layout[j, 0] - anchors[j, 0]))) * alpha
    layout[j, 1] += clip(gy - clip(pulls[j] * (layout[j, 1] - anchors[j, 1]))) * alpha


def place(queries: np.ndarray, points: np.ndarray, layout: np.ndarray, k: int) -> np.ndarray:
    """Each query placed at the mean layout position of its ``k`` nearest ``points``.

    Where ``umap.UMAP.transform`` starts a new point: the neighbours weighted
    ``exp(-d / sigma)``, each query's ``sigma`` found as UMAP finds it (with a local
    connectivity of zero, as ``transform`` uses).

    Example:
        >>> points = np.array([[0.0], [1.0], [2.0], [10.0]])
        >>> layout = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [9.0, 9.0]])
        >>> place(np.array([[1.0]]), points, layout, 3).round(3).tolist()
        [[1.0, 0.0]]
    """
    indices, distances = nearest(queries, points, k)
    sigmas, _ = NEIGHBOUR_SCALES(distances, float(k), 64, 0.0, 1.0)
    weights = np.exp(-distances / sigmas[:, None])
    weights /= weights.sum(1, keepdims=True)
    return np.einsum("qk,qkd->qd", weights, layout[indices]).astype(np.float32)
