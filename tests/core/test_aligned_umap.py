"""The aligned UMAP view against independent computations.

The neighbour graph is checked against UMAP's formulas written here in float64 numpy, and
against umap-learn's own ``fuzzy_simplicial_set``; the alignment against an independent
``umap.UMAP`` of the same snapshot, turned onto the previous view by orthogonal Procrustes
(scipy); the quality against scikit-learn's ``trustworthiness``.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from sklearn.manifold import trustworthiness

from learnscope.embeddings.aligned_umap import MISSING, UMAPSettings, aligned_umap
from learnscope.embeddings.aligned_views import AlignedViews
from learnscope.embeddings.umap_layout import neighbour_graph, neighbourhood_overlap, place
from learnscope.lightning_glue import EmbeddingProjector

FAST = UMAPSettings(epochs=100)


def clusters(n: int = 240, dims: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points in 4 Gaussian clusters, and their labels."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 4
    centres = rng.normal(scale=6.0, size=(4, dims))
    return centres[labels] + rng.normal(size=(n, dims)), labels


def reference_scales(
    distances: np.ndarray, k: int, connected: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """UMAP's ``rho`` and ``sigma`` of each row of ``distances`` (nearest first), by bisection.

    ``rho`` is the nearest other point's distance (``connected``; else zero, as UMAP's
    ``transform`` has it), and ``sigma`` solves ``sum_j exp(-max(d_j - rho, 0) / sigma) =
    log2(k)`` over the neighbours after the first (the point itself, in a graph).
    """
    rhos = np.array([row[row > 0][0] if (row > 0).any() else 0.0 for row in distances])
    rhos = rhos if connected else np.zeros(len(distances))
    sigmas = np.empty(len(distances))
    for i, row in enumerate(distances):
        low, high = 0.0, 1e6
        for _ in range(200):
            mid = (low + high) / 2
            total = np.exp(-np.maximum(row[1:] - rhos[i], 0.0) / mid).sum()
            low, high = (low, mid) if total > np.log2(k) else (mid, high)
        sigmas[i] = (low + high) / 2
    return rhos, sigmas


def reference_graph(x: np.ndarray, k: int, epochs: int) -> np.ndarray:
    """UMAP's fuzzy graph in float64 numpy: memberships, fuzzy union, weak edges dropped."""
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    distances = np.take_along_axis(d, order, 1)
    rhos, sigmas = reference_scales(distances, k)
    one_way = np.zeros_like(d)
    for i in range(len(x)):
        for j, dist in zip(order[i][1:], distances[i][1:], strict=True):
            one_way[i, j] = np.exp(-max(dist - rhos[i], 0.0) / sigmas[i])
    graph = one_way + one_way.T - one_way * one_way.T
    graph[graph < graph.max() / epochs] = 0.0
    return graph


def test_the_neighbour_graph_is_umaps_fuzzy_graph() -> None:
    from umap.umap_ import fuzzy_simplicial_set

    x, _ = clusters(80, 5)
    graph = neighbour_graph(x, 10, 200).toarray()
    np.testing.assert_allclose(graph, reference_graph(x, 10, 200), atol=2e-4)
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    order = np.argsort(d, axis=1, kind="stable")[:, :10]
    umaps, _, _ = fuzzy_simplicial_set(
        x,
        10,
        np.random.RandomState(0),
        "euclidean",
        knn_indices=order.astype(np.int32),
        knn_dists=np.take_along_axis(d, order, 1).astype(np.float32),
    )
    umaps = umaps.toarray()
    umaps[umaps < umaps.max() / 200] = 0.0
    np.testing.assert_allclose(graph, umaps, atol=1e-6)


def test_the_pull_of_each_point_is_umaps_neighbourhood_overlap() -> None:
    """The Jaccard weights, against umap-learn's own build_neighborhood_similarities."""
    import numba
    from umap.aligned_umap import build_neighborhood_similarities

    x, _ = clusters(200)
    later = x + np.random.default_rng(5).normal(scale=1.0, size=x.shape)
    kept = np.random.default_rng(6).permutation(200)[:150]  # 150 of the points, reordered
    before, after = neighbour_graph(x, 15, 200), neighbour_graph(later[kept], 15, 200)
    relations = np.full((2, 3, 200), -1, dtype=np.int32)
    relations[0, 2, kept] = np.arange(150)
    relations[1, 0, :150] = kept
    graphs = (before, after)
    umaps = build_neighborhood_similarities(
        numba.typed.List([g.indptr.astype(np.int32) for g in graphs]),
        numba.typed.List([g.indices.astype(np.int32) for g in graphs]),
        relations,
    )
    ours = neighbourhood_overlap(before, after, (kept, np.arange(150)))
    np.testing.assert_allclose(ours, umaps[1, 0, :150], atol=1e-6)
    assert 0.2 < ours.mean() < 0.95  # some neighbourhoods kept, not all


def test_an_unchanged_snapshot_moves_no_point() -> None:
    x, _ = clusters()
    ids = [f"p{i}" for i in range(len(x))]
    first = aligned_umap(x, ids, None, FAST)
    assert first is not None and first.fitted is None
    again = aligned_umap(x, ids, first.layout, FAST)
    assert again is not None
    assert np.array_equal(again.coords, first.coords)
    # Turned, scaled, moved and in another row order: the same neighbours, the same picture.
    turn = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]
    order = np.random.default_rng(2).permutation(len(x))
    moved = (3.0 * x @ turn + 5.0)[order]
    turned = aligned_umap(moved, [ids[i] for i in order], first.layout, FAST)
    assert turned is not None
    assert np.array_equal(turned.coords, first.coords[order])


def test_unchanged_points_stay_where_an_independent_umap_moves_them() -> None:
    import umap

    x, labels = clusters()
    ids = list(range(len(x)))
    first = aligned_umap(x, ids, None, UMAPSettings())
    assert first is not None
    later = x + np.random.default_rng(3).normal(scale=0.3, size=x.shape)  # a little training
    aligned = aligned_umap(later, ids, first.layout, UMAPSettings())
    assert aligned is not None
    fresh = umap.UMAP(n_neighbors=15, random_state=0).fit_transform(later)
    # The independent view, moved, turned and scaled onto the first view as well as it can be.
    centred = fresh - fresh.mean(0)
    target = first.coords - first.coords.mean(0)
    turn, scale = orthogonal_procrustes(centred, target)
    fitted = centred @ turn * (scale / (centred**2).sum()) + first.coords.mean(0)
    unit = np.sqrt((first.coords**2).sum(1).mean())
    moved_aligned = np.linalg.norm(aligned.coords - first.coords, axis=1).mean() / unit
    moved_fresh = np.linalg.norm(fitted - first.coords, axis=1).mean() / unit
    assert moved_aligned < 0.5 * moved_fresh, (moved_aligned, moved_fresh)
    # ... and the aligned view is as faithful to the embedding as the independent one.
    ours = trustworthiness(later, aligned.coords, n_neighbors=10)
    theirs = trustworthiness(later, fresh, n_neighbors=10)
    assert ours >= theirs - 0.02, (ours, theirs)
    assert ours > 0.9


def test_points_beyond_the_cap_are_placed_among_their_nearest_fitted_points() -> None:
    x, _ = clusters(300)
    ids = list(range(300))
    settings = UMAPSettings(max_points=100, epochs=100)
    view = aligned_umap(x, ids, None, settings)
    assert view is not None and view.fitted == 100
    fitted_ids = np.array(view.layout.ids)
    assert len(set(fitted_ids.tolist())) == 100
    rest = np.setdiff1d(np.arange(300), fitted_ids)
    # Each placed point: the weighted mean of its 15 nearest fitted points, with the weights
    # umap.UMAP.transform starts a new point with.
    fit = x[fitted_ids]
    d = np.sqrt(((x[rest][:, None, :] - fit[None, :, :]) ** 2).sum(-1))
    order = np.argsort(d, axis=1, kind="stable")[:, :15]
    distances = np.take_along_axis(d, order, 1)
    _, sigmas = reference_scales(distances, 15, connected=False)
    weights = np.exp(-distances / sigmas[:, None])
    expected = (weights[:, :, None] * view.coords[fitted_ids][order]).sum(1)
    expected /= weights.sum(1, keepdims=True)
    np.testing.assert_allclose(view.coords[rest], expected, rtol=1e-3, atol=1e-3)
    # The next snapshot keeps fitting the points it fitted before (its anchors).
    later = aligned_umap(x[::-1].copy(), ids[::-1], view.layout, settings)
    assert later is not None and set(later.layout.ids) == set(view.layout.ids)


def test_place_matches_umaps_weights_on_a_line() -> None:
    points = np.array([[0.0], [1.0], [2.0], [10.0]])
    layout = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [9.0, 9.0]], np.float32)
    placed = place(np.array([[1.0]]), points, layout, 3)  # on point 1, between 0 and 2
    np.testing.assert_allclose(placed, [[1.0, 0.0]], atol=1e-6)


def test_small_and_odd_inputs() -> None:
    assert aligned_umap(np.zeros((3, 2)), None, None, FAST) is None  # too few points
    view = aligned_umap(clusters(40)[0], None, None, FAST)  # no ids: the row is the id
    assert view is not None and view.layout.ids == tuple(range(40))
    with pytest.raises(ValueError, match="3 ids for 40 points"):
        aligned_umap(clusters(40)[0], [1, 2, 3], None, FAST)
    with pytest.raises(ValueError, match="neighbours >= 2"):
        UMAPSettings(neighbours=1)
    with pytest.raises(ValueError, match="alignment must be >= 0"):
        UMAPSettings(alignment=float("nan"))


def test_the_views_survive_a_checkpoint_loaded_with_weights_only() -> None:
    x, _ = clusters(120)
    ids = list(range(120))
    views = AlignedViews(FAST)
    first = views.umap_view("enc/validate", torch.as_tensor(x), ids)
    saved = io.BytesIO()
    torch.save(views.state_dict(), saved)
    saved.seek(0)
    resumed = AlignedViews(FAST)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    later = torch.as_tensor(x + np.random.default_rng(4).normal(scale=0.3, size=x.shape))
    a = views.umap_view("enc/validate", later, ids)
    b = resumed.umap_view("enc/validate", later, ids)
    assert first is not None and a is not None and b is not None
    assert np.array_equal(a.coords, b.coords) and a.frame == b.frame == first.frame
    assert a.projection == "umap" and a.fitted is None


def test_a_missing_extra_is_said_before_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    EmbeddingProjector("encoder")  # what a projector imports, imported while it can be
    for name in [n for n in sys.modules if n == "umap" or n.startswith("umap.")]:
        monkeypatch.delitem(sys.modules, name)  # as in a process where it was never installed
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "-packages" not in p])
    with pytest.raises(ImportError) as error:
        EmbeddingProjector("encoder", aligned_umap=True)
    assert str(error.value) == MISSING and "learnscope[umap]" in MISSING
    assert EmbeddingProjector("encoder", aligned_pca=True).aligned_umap is False
