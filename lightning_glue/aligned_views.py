"""The aligned PCA view and the picture's frame of each snapshot key, safe from two threads.

The writer thread adds a view each time it writes a snapshot; the training thread reads them
all for a checkpoint (``state_dict``) and puts them back on resume. A lock makes each read a
consistent copy, and the PCA itself is computed outside it, so a checkpoint never waits for a
snapshot being written: it holds the views of the snapshots written so far.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from learnscope.projection import AlignedPCA
from learnscope.scatter import Limits, frame_limits


class AlignedViews:
    """The last aligned PCA view (:class:`~learnscope.projection.AlignedPCA`) and frame per key.

    Example:
        >>> views = AlignedViews()
        >>> x = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
        >>> coords = views.fit(key="encoder/validate", vectors=x, ids=range(40))
        >>> again = views.fit(key="encoder/validate", vectors=-x, ids=range(40))
        >>> torch.allclose(coords, again, atol=1e-6)
        True
        >>> views.frame("encoder/validate", np.ones((3, 2))) == views.frame("t", np.ones((3, 2)))
        True
        >>> state = views.state_dict()
        >>> sorted(state), sorted(state["limits"])
        (['limits', 'pca'], ['encoder/validate', 't'])
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pca = AlignedPCA(dims=3)
        self._limits: dict[str, Limits] = {}  # scatter frame per key, from its first snapshot

    @property
    def limits(self) -> dict[str, Limits]:
        """A copy of the frame of each key."""
        with self._lock:
            return dict(self._limits)

    def fit(
        self, key: str, vectors: torch.Tensor, ids: Sequence[Hashable] | None = None
    ) -> torch.Tensor:
        """The PCA view of ``vectors`` turned to match ``key``'s last view, which it becomes.

        The PCA runs outside the lock, on a copy of ``key``'s last view.

        Returns:
            ``[N, 3]`` float64 coordinates.
        """
        with self._lock:
            state = self._pca.state_dict()
        previous = state["views"].get(key)
        pca = AlignedPCA(dims=self._pca.dims)
        pca.load_state_dict({"dims": state["dims"], "views": {key: previous} if previous else {}})
        coords = pca.fit_transform(key, vectors, ids)
        view = pca.state_dict()["views"][key]
        with self._lock:
            state = self._pca.state_dict()
            state["views"][key] = view
            self._pca.load_state_dict(state)
        return coords

    def frame(self, key: str, xy: np.ndarray) -> Limits:
        """``key``'s frame, chosen from ``xy`` (in units of the spread) for its first snapshot."""
        with self._lock:
            if key not in self._limits:  # the frame stays the one chosen for the first snapshot
                self._limits[key] = frame_limits(xy)
            return self._limits[key]

    def state_dict(self) -> dict[str, Any]:
        """The PCA views and frames: ``{"pca": ..., "limits": {key: limits}}``."""
        with self._lock:
            return {"pca": self._pca.state_dict(), "limits": dict(self._limits)}

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
            if keep_held:
                held = self._pca.state_dict()
                pca = {**held, "views": {**pca["views"], **held["views"]}}
                limits = {**limits, **self._limits}
            self._pca.load_state_dict(pca)
            self._limits = limits  # type: ignore[assignment]
