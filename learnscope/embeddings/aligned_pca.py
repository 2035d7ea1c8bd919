"""Aligned PCA: 2-D and 3-D views of embeddings whose axes do not flip or spin between snapshots.

A principal-component view computed afresh for each snapshot is the best view of that
snapshot, but its axes are arbitrary: every component may come out with either sign, and the
embedding space itself rotates during training, so consecutive views jump around. Here each
snapshot gets its own PCA, and the new view is then turned to match the previous view of the
same tag as closely as possible:

* with ids (the same points in both snapshots), by orthogonal Procrustes on the shared points:
  the rotation or reflection of the (x, y) plane that best maps the new coordinates onto the
  old ones, and the sign of each further component (z) that best agrees;
* without ids, by the same fit on the principal directions themselves in the embedding space.

Why not fit PCA once on the first snapshot and reuse its axes? Early in training the first
snapshot's principal directions say little about the later ones: a fixed basis can project the
classes that separate later onto directions that carried almost no variance at the start, and
any rotation of the embedding space (which training is free to make) scrambles the view. Fitting
each snapshot and aligning it to the previous one keeps every view the best one for its
snapshot and keeps it steady: a snapshot that is only a rotation or a sign flip of the previous
one gets the same coordinates.

Everything is computed in float64 on the CPU, a block of rows at a time, so that the extra
memory is a D x D matrix and one block, not a float64 copy of the snapshot; what is kept is the
last view of each tag (points x 3 numbers and the principal directions).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import torch

PCA_COLUMNS = ("pca_x", "pca_y", "pca_z")
UMAP_COLUMNS = ("umap_x", "umap_y")  # the aligned UMAP view's (learnscope.embeddings.aligned_umap)


def principal_axes(vectors: torch.Tensor, dims: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and the top ``dims`` principal directions of ``vectors``, with fixed signs.

    Each direction's sign is chosen so that its largest entry (in absolute value) is positive,
    so the same data always gives the same axes. When the data spans fewer than ``dims``
    directions, the missing directions are zero.

    Args:
        vectors: ``[N, D]`` points.
        dims: How many directions.

    Returns:
        ``mean [D]`` and ``basis [D, dims]`` (unit columns, by decreasing variance), float64.

    Example:
        >>> x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0]])
        >>> mean, basis = principal_axes(x, dims=2)
        >>> mean.tolist(), basis[:, 0].tolist()
        ([2.0, 0.0], [1.0, 0.0])
    """
    n, d = vectors.shape
    mean = torch.zeros(d, dtype=torch.float64)
    for chunk in float64_chunks(vectors):
        mean += chunk.sum(0)
    mean /= max(n, 1)
    if n <= 1:
        return mean, torch.zeros(d, dims, dtype=torch.float64)
    if d <= n:  # the D x D scatter matrix, summed over row chunks: memory O(D^2), not O(N D)
        scatter = torch.zeros(d, d, dtype=torch.float64)
        for chunk in float64_chunks(vectors):
            centred = chunk - mean
            scatter.addmm_(centred.T, centred)
        values, vecs = torch.linalg.eigh(scatter)
        order = values.argsort(descending=True)[:dims]
        values, basis = values[order], vecs[:, order]
    else:  # fewer points than dimensions: work with the N x N Gram matrix
        centred = vectors.detach().to("cpu", torch.float64) - mean
        values, vecs = torch.linalg.eigh(centred @ centred.T)
        order = values.argsort(descending=True)[:dims]
        values = values[order]
        basis = centred.T @ vecs[:, order] / values.clamp_min(1e-300).sqrt()
    scale = float(values[0]) if len(values) else 0.0
    basis = basis * (values > max(scale, 1e-300) * 1e-12)  # drop directions with no variance
    biggest = basis.abs().argmax(0)
    signs = torch.sign(basis[biggest, torch.arange(basis.shape[1])])
    basis = basis * torch.where(signs == 0, torch.ones_like(signs), signs)
    if basis.shape[1] < dims:
        basis = torch.cat([basis, torch.zeros(d, dims - basis.shape[1], dtype=basis.dtype)], 1)
    return mean, basis


def float64_chunks(vectors: torch.Tensor, rows: int = 8192) -> Iterator[torch.Tensor]:
    """``vectors`` as float64 CPU blocks of at most ``rows`` rows, one block in memory at a time.

    Example:
        >>> [tuple(c.shape) for c in float64_chunks(torch.ones(5, 2), rows=2)]
        [(2, 2), (2, 2), (1, 2)]
    """
    vectors = vectors.detach()
    for start in range(0, len(vectors), rows):
        yield vectors[start : start + rows].to("cpu", torch.float64)


def plane_alignment(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The orthogonal matrix that best turns ``source`` columns into ``target`` columns.

    The first two columns (the x-y plane) get a 2-D rotation or reflection (orthogonal
    Procrustes: ``Q = U V^T`` from the SVD of ``source^T target``); every further column only a
    sign. The plane stays the plane of the two largest components, so a 2-D view drawn from the
    first two columns is the best 2-D view of the new data, turned to match the old one.

    Args:
        source: ``[M, k]`` new coordinates (or directions) of matched rows.
        target: ``[M, k]`` previous ones.

    Returns:
        ``[k, k]`` orthogonal matrix ``Q``; use ``source @ Q``.

    Example:
        >>> a = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]], dtype=torch.float64)
        >>> flipped = a * torch.tensor([-1.0, 1.0], dtype=torch.float64)
        >>> torch.allclose(flipped @ plane_alignment(flipped, a), a)
        True
    """
    k = source.shape[1]
    q = torch.eye(k, dtype=torch.float64)
    plane = min(k, 2)
    u, _, vh = torch.linalg.svd(source[:, :plane].T @ target[:, :plane])
    q[:plane, :plane] = u @ vh
    for j in range(plane, k):
        agreement = float((source[:, j] * target[:, j]).sum())
        q[j, j] = -1.0 if agreement < 0 else 1.0
    return q


class AlignedPCA:
    """PCA views of successive snapshots of each tag, aligned to the previous view of the tag.

    Args:
        dims: Components per view: 2 or 3.

    Raises:
        ValueError: If ``dims`` is not 2 or 3.

    Example:
        >>> pca = AlignedPCA(dims=2)
        >>> x = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
        >>> first = pca.fit_transform("encoder", x, ids=range(50))
        >>> turn = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(1)))[0]
        >>> again = pca.fit_transform("encoder", -x @ turn, ids=range(50))  # turned and flipped
        >>> torch.allclose(first, again, atol=1e-4)
        True
    """

    def __init__(self, dims: int = 3) -> None:
        if dims not in (2, 3):
            raise ValueError(f"dims must be 2 or 3, got {dims}")
        self.dims = dims
        self._views: dict[str, dict[str, Any]] = {}

    def fit_transform(
        self, tag: str, vectors: torch.Tensor, ids: Sequence[Hashable] | None = None
    ) -> torch.Tensor:
        """Project ``vectors`` onto their principal plane, turned to match the previous view.

        Args:
            tag: Which series of snapshots this belongs to (such as ``"encoder/validate"``).
            vectors: ``[N, D]`` points.
            ids: One hashable id per point; points with the same id in the previous snapshot
                of ``tag`` are matched. Without ids (or with fewer than ``dims + 1`` shared),
                the principal directions are matched instead, which needs the same ``D``.

        Returns:
            ``[N, dims]`` float64 coordinates, centred on the snapshot's mean.

        Example:
            >>> AlignedPCA(dims=2).fit_transform("t", torch.eye(3), ids=["a", "b", "c"]).shape
            torch.Size([3, 2])
        """
        mean, basis = principal_axes(vectors, self.dims)
        coords = torch.cat([(chunk - mean) @ basis for chunk in float64_chunks(vectors)])
        id_list = list(ids) if ids is not None else None
        if id_list is not None and len(id_list) != len(coords):
            raise ValueError(f"{len(id_list)} ids for {len(coords)} points")
        previous = self._views.get(tag)
        q = self._alignment(previous, coords, basis, id_list) if previous else None
        if q is not None:
            coords, basis = coords @ q, basis @ q
        self._views[tag] = {"ids": id_list, "coords": coords.clone(), "basis": basis}
        return coords

    def _alignment(
        self,
        previous: dict[str, Any],
        coords: torch.Tensor,
        basis: torch.Tensor,
        ids: list[Hashable] | None,
    ) -> torch.Tensor | None:
        if ids is not None and previous["ids"] is not None:
            row_of = {key: row for row, key in enumerate(previous["ids"])}
            pairs = [(new, row_of[key]) for new, key in enumerate(ids) if key in row_of]
            if len(pairs) > self.dims:
                new_rows, old_rows = (torch.tensor(side) for side in zip(*pairs, strict=True))
                return plane_alignment(coords[new_rows], previous["coords"][old_rows])
        if previous["basis"].shape == basis.shape:
            return plane_alignment(basis, previous["basis"])
        return None

    def state_dict(self) -> dict[str, Any]:
        """The last view of every tag, so that a resumed run keeps the same axes.

        Example:
            >>> pca = AlignedPCA()
            >>> _ = pca.fit_transform("t", torch.randn(10, 4))
            >>> restored = AlignedPCA()
            >>> restored.load_state_dict(pca.state_dict())
            >>> list(restored.state_dict()["views"])
            ['t']
        """
        # dict() first: a copy in one step, safe while a writer thread adds a view
        return {"dims": self.dims, "views": {t: dict(v) for t, v in dict(self._views).items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.dims = int(state["dims"])
        self._views = {tag: dict(view) for tag, view in state["views"].items()}
