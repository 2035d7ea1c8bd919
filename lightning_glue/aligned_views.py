"""The aligned views and the pictures' frames of each snapshot key, safe from two threads.

The writer thread adds a view each time it writes a snapshot: the aligned PCA view, and with
:class:`~learnscope.aligned_umap.UMAPSettings` the aligned UMAP view too. The training thread
reads them all for a checkpoint (``state_dict``) and puts them back on resume. A lock makes each
read a consistent copy, and the PCA and the UMAP are computed outside it, so a checkpoint never
waits for a snapshot being written: it holds the views of the snapshots written so far.

The UMAP view of a key is drawn in one unit for all its snapshots (the spread of its first
view), not each in its own spread as the PCA is: a UMAP layout keeps its scale, and a point
that did not move must not seem to.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from learnscope.aligned_umap import UMAPLayout, UMAPSettings, aligned_umap
from learnscope.projection import AlignedPCA
from learnscope.records import AlignedView, ViewFrame
from learnscope.scatter import Limits, frame_limits, spread


class View(NamedTuple):
    """A snapshot's aligned view, as :meth:`AlignedViews.add` gives it.

    Attributes:
        coords: ``[N, 3]`` float64 coordinates (``pca_x``, ``pca_y``, ``pca_z``).
        spread: Root-mean-square distance of the ``(x, y)`` points from the centre.
        xy: ``[N, 2]`` the ``(x, y)`` points in units of the spread.
        limits: The frame of the picture, in units of the spread.
    """

    coords: torch.Tensor
    spread: float
    xy: np.ndarray
    limits: Limits


class AlignedViews:
    """The last aligned PCA view (:class:`~learnscope.projection.AlignedPCA`) and frame per key.

    Example:
        >>> views = AlignedViews()
        >>> x = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
        >>> first = views.add("encoder/validate", x, ids=range(40))
        >>> again = views.add("encoder/validate", -3 * x, ids=range(40))  # flipped and grown
        >>> np.allclose(first.xy, again.xy), first.limits == again.limits
        (True, True)
        >>> state = views.state_dict()
        >>> list(state["pca"]["views"]), list(state["limits"])
        (['encoder/validate'], ['encoder/validate'])
        >>> import copy, pickle
        >>> list(pickle.loads(pickle.dumps(copy.deepcopy(views))).limits)
        ['encoder/validate']
    """

    def __init__(self, umap: UMAPSettings | None = None) -> None:
        self._lock = threading.Lock()
        self._pca = AlignedPCA(dims=3)
        self._limits: dict[str, Limits] = {}  # scatter frame per key, from its first snapshot
        self.umap = umap  # the UMAP view's settings; None: no UMAP view
        self._layouts: dict[str, UMAPLayout] = {}  # the last UMAP layout of each key
        self._umap_frames: dict[str, ViewFrame] = {}  # the UMAP unit and frame of each key

    def __getstate__(self) -> dict[str, Any]:
        """The views and frames, without the lock (so copies and ``ddp_spawn`` work)."""
        return {**self.state_dict(), "settings": self.umap}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state.get("settings"))  # type: ignore[misc]
        self.load_state_dict(state)

    @property
    def limits(self) -> dict[str, Limits]:
        """A copy of the frame of each key."""
        with self._lock:
            return dict(self._limits)

    def add(self, key: str, vectors: torch.Tensor, ids: Sequence[Hashable] | None = None) -> View:
        """The PCA view of ``vectors``, turned to match ``key``'s last view, which it becomes.

        The PCA runs outside the lock, from a copy of ``key``'s last view; the new view and
        (for ``key``'s first snapshot) its frame are then stored together, so a
        :meth:`state_dict` taken meanwhile holds both or neither, and does not wait.

        Args:
            key: The snapshot's key (``"<tag>/<stage>"``).
            vectors: ``[N, D]`` points.
            ids: One id per point, to match points with the last view.

        Returns:
            The view, with its spread and the key's frame (chosen from its first snapshot so
            that it holds 99% of the points, then kept).
        """
        with self._lock:
            state = self._pca.state_dict()
            limits = self._limits.get(key)
        previous = state["views"].get(key)
        pca = AlignedPCA(dims=state["dims"])
        pca.load_state_dict({"dims": state["dims"], "views": {key: previous} if previous else {}})
        coords = pca.fit_transform(key, vectors, ids)
        xy = coords[:, :2].numpy()
        scale = spread(xy)
        xy = xy / scale if scale > 0 else xy
        limits = limits or frame_limits(xy)
        with self._lock:
            state = self._pca.state_dict()
            state["views"][key] = pca.state_dict()["views"][key]
            self._pca.load_state_dict(state)
            limits = self._limits.setdefault(key, limits)
        return View(coords, scale, xy, limits)

    def add_umap(
        self, key: str, vectors: torch.Tensor, ids: Sequence[Hashable] | None = None
    ) -> AlignedView | None:
        """The UMAP view of ``vectors``, aligned to ``key``'s last layout, which it becomes.

        ``None`` without UMAP settings or for too few points
        (:data:`~learnscope.aligned_umap.MIN_POINTS`). The layout is computed outside the lock,
        as :meth:`add` computes the PCA.

        Args:
            key: The snapshot's key (``"<tag>/<stage>"``).
            vectors: ``[N, D]`` points.
            ids: One id per point, to match points with the last layout.

        Returns:
            The ``"umap"`` view, in the key's unit and frame (both from its first view).
        """
        if self.umap is None:
            return None
        with self._lock:
            previous, frame = self._layouts.get(key), self._umap_frames.get(key)
        view = aligned_umap(vectors, ids, previous, self.umap)
        if view is None:
            return None
        if frame is None:
            unit = spread(view.coords) or 1.0
            frame = ViewFrame(unit, frame_limits(view.coords / unit))
        with self._lock:
            self._layouts[key] = view.layout
            frame = self._umap_frames.setdefault(key, frame)
        return AlignedView(view.coords, frame, "umap", view.fitted)

    def state_dict(self) -> dict[str, Any]:
        """The views and frames: ``{"pca": ..., "limits": {key: limits}, "umap": ...}``.

        ``"umap"`` holds each key's last layout and its unit and frame.
        """
        with self._lock:
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
        with self._lock:
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
