"""The aligned views of embedding snapshots: one call per snapshot, its views and frames done.

**The aligned PCA view.** :meth:`AlignedViews.add` gives a snapshot ``pca_x``, ``pca_y`` and
``pca_z`` columns from a PCA turned to match the previous snapshot of its key
(:class:`learnscope.embeddings.aligned_pca.AlignedPCA`), as the snapshot's typed
:class:`~learnscope.records.AlignedView`: coordinates, their spread (the root-mean-square
distance of the ``(x, y)`` points from the centre) and a frame fixed per key from its first
snapshot (a square of a round number of spreads that holds 99% of its points), so that a step
slider shows the points moving, not the frame. The writers' picture stage
(:mod:`learnscope.plugins.pipeline.pictures`) draws its scatter,
``~learnscope/embeddings/<tag>/<stage>/pca``, from it.

**The aligned UMAP view.** With :class:`~learnscope.embeddings.aligned_umap.UMAPSettings`, every
snapshot also gets its aligned UMAP view (:mod:`learnscope.embeddings.aligned_umap`): ``umap_x``,
``umap_y`` columns and its own picture, ``.../umap``. It is drawn in one unit for all the snapshots
of a key (the spread of its first view), not each in its own spread as the PCA is: a UMAP layout
keeps its scale, and a point that did not move must not seem to.

The same class serves a plain PyTorch loop (one :meth:`~AlignedViews.add` per snapshot, before
the writers get it: ``docs/without_lightning.md``) and ``EmbeddingProjector``, whose views live
on the writers' thread (:mod:`learnscope.plugins.pipeline.snapshot_job`). It is not thread-safe:
one owner calls it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from learnscope.embeddings.aligned_pca import AlignedPCA
from learnscope.embeddings.aligned_umap import UMAPLayout, UMAPSettings, aligned_umap
from learnscope.embeddings.scatter_frame import Limits, frame_limits, spread
from learnscope.records import AlignedView, EmbeddingSnapshot, ViewFrame

Ids = Sequence[Hashable] | torch.Tensor | None


class AlignedViews:
    """The last aligned PCA view (and UMAP layout) and the frame of each snapshot key.

    Args:
        umap: Settings of the aligned UMAP view; ``None``: the PCA view only.

    Example:
        >>> from learnscope import EmbeddingSnapshot
        >>> views = AlignedViews()
        >>> x = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
        >>> first = views.add(EmbeddingSnapshot("encoder", 1, x, stage="validate"), ids=range(40))
        >>> again = views.add(EmbeddingSnapshot("encoder", 2, -3 * x, stage="validate"), range(40))
        >>> first.aligned.columns, first.aligned.frame.limits == again.aligned.frame.limits
        (('pca_x', 'pca_y', 'pca_z'), True)
        >>> round(again.aligned.frame.spread / first.aligned.frame.spread, 3)  # grown, not moved
        3.0
        >>> bool(abs(first.aligned.coords * 3 - again.aligned.coords).max() < 1e-3)
        True
        >>> resumed = AlignedViews()
        >>> resumed.load_state_dict(views.state_dict())
        >>> list(resumed.limits)
        ['encoder/validate']
    """

    def __init__(self, umap: UMAPSettings | None = None) -> None:
        self.umap = umap  # the UMAP view's settings; None: no UMAP view
        self._pca = AlignedPCA(dims=3)
        self._limits: dict[str, Limits] = {}  # scatter frame per key, from its first snapshot
        self._layouts: dict[str, UMAPLayout] = {}  # the last UMAP layout of each key
        self._umap_frames: dict[str, ViewFrame] = {}  # the UMAP unit and frame of each key

    @property
    def limits(self) -> dict[str, Limits]:
        """A copy of the PCA frame of each key."""
        return dict(self._limits)

    def add(self, snapshot: EmbeddingSnapshot, ids: Ids = None) -> EmbeddingSnapshot:
        """``snapshot`` with its aligned PCA view, and its aligned UMAP view with settings.

        Args:
            snapshot: The snapshot; its :attr:`~EmbeddingSnapshot.key` (``tag/stage``) names
                the views it is turned to match.
            ids: One id per row (the same id is the same point in every snapshot), to match
                points with the key's last view; ``None``: match the principal directions
                (and, for UMAP, the row numbers).

        Returns:
            The snapshot with its views; it becomes the key's last view.
        """
        return self.add_umap(self.add_pca(snapshot, ids), ids)

    def add_pca(self, snapshot: EmbeddingSnapshot, ids: Ids = None) -> EmbeddingSnapshot:
        """``snapshot`` with its aligned PCA view (coordinates, spread and frame).

        Example:
            >>> from learnscope import EmbeddingSnapshot
            >>> snapshot = EmbeddingSnapshot("enc", 3, torch.randn(30, 5))
            >>> AlignedViews().add_pca(snapshot).aligned.columns
            ('pca_x', 'pca_y', 'pca_z')
        """
        return snapshot.with_view(self.pca_view(snapshot.key, _points(snapshot), ids))

    def add_umap(self, snapshot: EmbeddingSnapshot, ids: Ids = None) -> EmbeddingSnapshot:
        """``snapshot`` with its aligned UMAP view (as it is without settings or too few points).

        Too few: fewer than :data:`~learnscope.embeddings.aligned_umap.MIN_POINTS`.
        """
        view = self.umap_view(snapshot.key, _points(snapshot), ids)
        return snapshot if view is None else snapshot.with_view(view)

    def pca_view(self, key: str, vectors: torch.Tensor, ids: Ids = None) -> AlignedView:
        """The PCA view of ``vectors``, turned to match ``key``'s last view, which it becomes.

        Args:
            key: The snapshot's key (``"<tag>/<stage>"``).
            vectors: ``[N, D]`` points.
            ids: One id per point, to match points with the last view.

        Returns:
            The view in the key's frame (chosen from its first snapshot so that it holds 99% of
            the points, then kept), in units of this view's spread.
        """
        coords = self._pca.fit_transform(key, vectors, _id_list(ids))
        xy = coords[:, :2].numpy()
        scale = spread(xy)
        limits = self._limits.get(key)
        if limits is None:  # the key's first snapshot chooses its frame
            limits = self._limits[key] = frame_limits(xy / scale if scale > 0 else xy)
        # The view is in units of its spread (the picture's title gives it), so that embeddings
        # that grow during training keep one frame; the snapshot carries coordinates, spread
        # and frame, so the run record, the picture and every view use the same numbers.
        return AlignedView(coords.numpy(), ViewFrame(scale, limits))

    def umap_view(self, key: str, vectors: torch.Tensor, ids: Ids = None) -> AlignedView | None:
        """The UMAP view of ``vectors``, aligned to ``key``'s last layout, which it becomes.

        ``None`` without UMAP settings or for too few points.

        Returns:
            The ``"umap"`` view, in the key's unit and frame (both from its first view).
        """
        if self.umap is None:
            return None
        view = aligned_umap(vectors, _id_list(ids), self._layouts.get(key), self.umap)
        if view is None:
            return None
        frame = self._umap_frames.get(key)
        if frame is None:
            unit = spread(view.coords) or 1.0
            frame = self._umap_frames[key] = ViewFrame(unit, frame_limits(view.coords / unit))
        self._layouts[key] = view.layout
        return AlignedView(view.coords, frame, "umap", view.fitted)

    def state_dict(self) -> dict[str, Any]:
        """The views and frames: ``{"pca": ..., "limits": {key: limits}, "umap": ...}``.

        A new mapping that nothing here changes later; ``"umap"`` holds each key's last layout
        and its unit and frame.
        """
        return {
            "pca": self._pca.state_dict(),
            "limits": dict(self._limits),
            "umap": {
                key: {
                    "layout": layout.state_dict(),
                    "frame": [self._umap_frames[key].spread, *self._umap_frames[key].limits],
                }
                for key, layout in self._layouts.items()
            },
        }

    def load_state_dict(self, state: Mapping[str, Any], keep_held: bool = False) -> None:
        """Restore what :meth:`state_dict` returned.

        Args:
            state: The state.
            keep_held: Keep the views and frames of the keys held now, adding only the others
                (an evaluation of an older checkpoint: the views held are newer).
        """
        pca = dict(state["pca"])
        limits = {key: tuple(lim) for key, lim in state["limits"].items()}
        saved = state.get("umap", {})  # none in checkpoints of learnscope before the view
        layouts = {key: UMAPLayout.from_state(v["layout"]) for key, v in saved.items()}
        frames = {key: ViewFrame(v["frame"][0], v["frame"][1:]) for key, v in saved.items()}
        if keep_held:
            held = self._pca.state_dict()
            pca = {**held, "views": {**pca["views"], **held["views"]}}
            limits = {**limits, **self._limits}
            layouts, frames = {**layouts, **self._layouts}, {**frames, **self._umap_frames}
        self._pca.load_state_dict(pca)
        self._limits = limits  # type: ignore[assignment]
        self._layouts, self._umap_frames = layouts, frames


def _points(snapshot: EmbeddingSnapshot) -> torch.Tensor:
    """The snapshot's vectors as a CPU tensor (a numpy array's or a device tensor's)."""
    return torch.as_tensor(snapshot.vectors).detach().cpu()


def _id_list(ids: Ids) -> list[Hashable] | None:
    """``ids`` as a list (a tensor's values), or ``None``."""
    if ids is None:
        return None
    return ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
