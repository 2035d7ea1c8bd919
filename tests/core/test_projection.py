"""Aligned PCA views, id-based point selection and scatter frames (core, no dashboards)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learnscope.embeddings.aligned_pca import AlignedPCA, principal_axes
from learnscope.embeddings.scatter_frame import (
    OTHER,
    clip_to_frame,
    column_kind,
    frame_limits,
    label_categories,
    label_column,
)
from learnscope.embeddings.selection import id_keys, mix_keys, smallest


def clusters(n: int = 120, dim: int = 16, seed: int = 0) -> torch.Tensor:
    """Anisotropic clustered points, so the principal directions are well separated."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, dim, generator=g) * 4
    scales = torch.linspace(3.0, 0.2, dim)
    return (centres[torch.arange(n) % 4] + torch.randn(n, dim, generator=g)) * scales


def rotation(dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    return q


@pytest.mark.parametrize("dims", [2, 3])
def test_rotated_flipped_and_shuffled_snapshot_projects_to_the_same_coordinates(dims: int) -> None:
    x = clusters().double()
    ids = [f"sample-{i}" for i in range(len(x))]
    pca = AlignedPCA(dims)
    first = pca.fit_transform("enc", x, ids)

    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(3))
    flips = torch.tensor([-1.0, 1.0] * 8, dtype=torch.float64)
    moved = (x * flips @ rotation(16, 1) + 5.0)[order]  # flipped, rotated, shifted, reordered
    second = pca.fit_transform("enc", moved, [ids[i] for i in order])
    assert second.shape == (len(x), dims)
    torch.testing.assert_close(second, first[order], atol=1e-9, rtol=1e-9)

    third = pca.fit_transform("enc", -moved, [ids[i] for i in order])  # a global sign flip
    torch.testing.assert_close(third, first[order], atol=1e-9, rtol=1e-9)


def test_without_ids_a_slightly_changed_snapshot_keeps_its_axes() -> None:
    x = clusters().double()
    pca = AlignedPCA(3)
    first = pca.fit_transform("enc", x)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=x.dtype)
    second = pca.fit_transform("enc", x + 0.01 * noise)
    assert torch.allclose(second, first, atol=0.05)  # no axis flipped or swapped


def test_the_x_y_plane_is_the_plane_of_the_two_largest_components() -> None:
    x = clusters().double()
    pca = AlignedPCA(3)
    pca.fit_transform("enc", x, range(len(x)))
    coords = pca.fit_transform("enc", x @ rotation(16, 2), range(len(x)))
    mean, basis = principal_axes(x, 2)
    plane = (x - mean) @ basis
    # Same plane: the 2-D view is the top-2 PCA view up to a rotation or reflection.
    q = torch.linalg.lstsq(plane, coords[:, :2]).solution
    torch.testing.assert_close(q.T @ q, torch.eye(2, dtype=torch.float64), atol=1e-8, rtol=0)


def test_tags_are_aligned_separately_and_results_are_deterministic() -> None:
    x, y = clusters(seed=0), clusters(seed=1)
    a, b = AlignedPCA(), AlignedPCA()
    for pca in (a, b):
        pca.fit_transform("enc/validate", x)
        pca.fit_transform("enc/train", y)
    assert torch.equal(a.fit_transform("enc/validate", y), b.fit_transform("enc/validate", y))
    assert torch.equal(AlignedPCA().fit_transform("t", x), AlignedPCA().fit_transform("t", x))


def test_state_dict_keeps_the_axes_of_a_resumed_run() -> None:
    x = clusters().double()
    ids = list(range(len(x)))
    running = AlignedPCA()
    running.fit_transform("enc", x, ids)
    resumed = AlignedPCA()
    resumed.load_state_dict(running.state_dict())
    turned = -x @ rotation(16, 4)
    torch.testing.assert_close(
        resumed.fit_transform("enc", turned, ids), running.fit_transform("enc", turned, ids)
    )


def test_principal_axes_with_more_dimensions_than_points_and_with_flat_data() -> None:
    x = clusters(n=10, dim=40).double()
    mean, basis = principal_axes(x, 3)
    _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
    torch.testing.assert_close(basis.abs(), vh[:3].T.abs(), atol=1e-8, rtol=0)
    torch.testing.assert_close(basis.T @ basis, torch.eye(3, dtype=torch.float64))

    line = torch.tensor([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]])  # one direction of variance
    coords = AlignedPCA(3).fit_transform("line", line)
    assert coords[:, 1:].abs().max() == 0 and coords[:, 0].tolist() == [-1.0, 0.0, 1.0]
    assert AlignedPCA().fit_transform("one", torch.ones(1, 5)).tolist() == [[0.0, 0.0, 0.0]]


def test_id_keys_are_stable_and_the_selection_ignores_order_and_partial_data() -> None:
    ids = torch.arange(1000)
    keys = id_keys(ids)
    assert torch.equal(keys, id_keys(list(range(1000))))
    assert len(set(keys.tolist())) == 1000 and int(keys.min()) >= 0 and int(keys.max()) < 2**62
    assert torch.equal(id_keys(["a", "b"]), id_keys(["a", "b"]))
    assert not torch.equal(mix_keys(keys[:2], torch.tensor([0, 0])), keys[:2])
    with pytest.raises(TypeError, match="integers or strings"):
        id_keys(torch.tensor([1.0]))

    chosen = set(ids[smallest(keys, 50)].tolist())
    shuffled = torch.randperm(1000, generator=torch.Generator().manual_seed(0))
    assert set(shuffled[smallest(id_keys(shuffled), 50)].tolist()) == chosen
    seen = shuffled[:600]  # a partial snapshot keeps every chosen id it saw
    kept = set(seen[smallest(id_keys(seen), 50)].tolist())
    assert chosen & set(seen.tolist()) <= kept


def test_scatter_frame_is_round_and_holds_the_points_and_labels_keep_their_entries() -> None:
    rng = np.random.default_rng(0)
    gaussian = rng.normal(size=(2000, 2))
    gaussian /= np.sqrt((gaussian**2).sum(1).mean())  # in units of the spread, as drawn
    limits = frame_limits(gaussian)
    assert limits == (-2.5, 2.5, -2.5, 2.5)  # 99.5% of max(|x|, |y|): 2.1 spreads, and 15%
    assert (np.abs(gaussian) <= 2.5).all(1).mean() >= 0.995
    assert frame_limits(gaussian * 0.1) == (-2.5, 2.5, -2.5, 2.5)  # never under 2.5 spreads
    assert frame_limits(gaussian * 1.15)[1] == 3.0  # the next round width
    wide = frame_limits(gaussian * 10)[1]
    assert wide == round(wide) and 24 < wide <= 25  # beyond 10 spreads: whole numbers
    assert frame_limits(np.full((3, 2), np.nan)) == (-2.5, 2.5, -2.5, 2.5)

    xy = np.array([[0.0, 0.0], [3.0, -1.0], [np.nan, 0.0], [-2.0, 9.0]])
    clipped, outside = clip_to_frame(xy, limits)
    assert outside.tolist() == [False, True, False, True]
    assert clipped[[1, 3]].tolist() == [[2.5, -1.0], [-2.0, 2.5]]

    names, index = label_categories(["b", "a", "b"])
    assert names == ["a", "b"] and index.tolist() == [1, 0, 1]  # sorted: same colours each time
    names, index = label_categories([str(i % 12) for i in range(120)] + ["0"] * 5)
    assert names == [str(i) for i in range(10)] and index[10:12].tolist() == [-1, -1]
    assert OTHER == "other"
    assert column_kind(list(range(10))) == "categorical"  # digits are categories
    assert column_kind([0.5, 1.5]) == "numeric" and column_kind(["a"]) == "categorical"
    assert column_kind([True, False]) == "categorical"
    assert label_column(["id", "position", "pca_x", "digit"]) == "digit"
