"""Aligned PCA views, id-based point selection and scatter images (core, no dashboards)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learnscope.canvas import palette
from learnscope.projection import AlignedPCA, principal_axes
from learnscope.scatter import grow_limits, label_column, scatter_image
from learnscope.selection import id_keys, mix_keys, smallest


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


def test_scatter_limits_only_grow_and_labels_keep_their_colours() -> None:
    small = np.array([[0.0, 0.0], [1.0, 1.0]])
    limits = grow_limits(small)
    assert grow_limits(small * 0.1, limits) == limits
    wider = grow_limits(small * 10, limits)
    assert wider[0] <= limits[0] and wider[1] >= limits[1] and wider[1] - wider[0] > 5

    xy = np.array([[0.0, 0.0], [1.0, 1.0]])
    image = scatter_image(xy, ["b", "a"], "t", limits=(-1.0, 2.0, -1.0, 2.0))
    colours = {tuple(c) for c in image.reshape(-1, 3).tolist()}
    a_colour, b_colour = (tuple(c) for c in palette(2).tolist())  # sorted labels: a, b
    assert a_colour in colours and b_colour in colours
    again = scatter_image(xy[::-1], ["a", "b"], "t", limits=(-1.0, 2.0, -1.0, 2.0))
    assert np.array_equal(image, again)  # same points and labels, same picture

    many = scatter_image(np.random.default_rng(0).normal(size=(300, 2)), list(range(300)) * 1)
    assert many.shape == image.shape
    assert label_column(["id", "position", "pca_x", "digit"]) == "digit"
