"""The embedding evolution of one key, folded from the record's ``snapshot`` entries.

Each snapshot's aligned PCA view is kept in units of its spread (root-mean-square distance
from the centre) as float16; the points shown are those present in every snapshot, matched by
id, at most ``max_points`` of them (a fixed subsample by a hash of the id). A snapshot's
coordinates are base64-encoded once for the shown ids and kept, so a view refreshed after a new
snapshot encodes only that one. Nothing here imports torch.

A snapshot's further aligned views (its ``projections``: ``umap``) are kept the same way, beside
its PCA view, which stays the key's base: the snapshots of a key are those with a PCA view, and
a projection is offered for the key when at least one of them has it; the snapshots without it
are said (``2 of 5 snapshots without the aligned UMAP view``) and the projection shows the
others. A damaged view of a projection leaves that snapshot without it (and is said); the
snapshot's PCA view still shows.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from learnscope.embeddings.id_subsample import subsample_ids
from learnscope.embeddings.neighbourhoods import NEIGHBOURS
from learnscope.embeddings.scatter_frame import spread as view_spread
from learnscope.plugins.views.record_checks import (
    DamagedEntry,
    array_field,
    is_number,
    list_field,
    rounded,
    sprite_fields,
    typed_column,
    whole_number,
)


def snapshot_fields(entry: Mapping[str, Any]) -> tuple[str, np.ndarray | None, list[str] | None]:
    """The key, aligned PCA view (``None`` without one) and ids of a ``snapshot`` entry, checked.

    Raises:
        DamagedEntry: Naming what is wrong with the entry.

    Example:
        >>> from learnscope.run_directory.record import encode_array
        >>> entry = {"kind": "snapshot", "key": "enc", "step": 1,
        ...          "xy": encode_array(np.ones((2, 2))), "ids": ["a", 7]}
        >>> key, xy, ids = snapshot_fields(entry)
        >>> key, xy.shape, ids
        ('enc', (2, 2), ['a', '7'])
    """
    key = entry.get("key")
    if not isinstance(key, str) or not key:
        raise DamagedEntry("it has no key")
    whole_number(entry, "step")
    if entry.get("xy") is None:
        return key, None, None
    xy = array_field(entry, "xy")
    if xy.ndim != 2 or xy.shape[1] != 2 or not np.issubdtype(xy.dtype, np.floating):
        raise DamagedEntry(f"xy has shape {list(xy.shape)} ({xy.dtype}), not [points, 2]")
    points = entry.get("points")
    if points is not None and points != len(xy):
        raise DamagedEntry(f"xy has {len(xy)} points, the entry says {points!r}")
    ids = entry.get("ids")
    if ids is not None:
        if not isinstance(ids, list) or len(ids) != len(xy):
            raise DamagedEntry(f"ids is not a list of {len(xy)} ids")
        ids = [i if isinstance(i, str) else json.dumps(i) for i in ids]
    check_frame(entry.get("frame"))
    for column in list_field(entry, "columns", required=False):
        typed_column(column, len(xy), [])  # checked now: a damaged one skips the snapshot
    sprite = entry.get("sprite")
    if sprite is not None:
        sprite_fields(sprite)
    return key, xy, ids


def check_frame(frame: Any) -> None:
    """Check a view's ``frame``: ``None``, or ``[xmin, xmax, ymin, ymax]``, finite and ordered.

    Raises:
        DamagedEntry: Naming what is wrong.

    Example:
        >>> check_frame([-1, 1, -2, 2]), check_frame(None)
        (None, None)
    """
    if frame is not None and not (
        isinstance(frame, list)
        and len(frame) == 4
        and all(is_number(v) and math.isfinite(v) for v in frame)
        and frame[0] < frame[1]
        and frame[2] < frame[3]
    ):
        raise DamagedEntry(f"frame {frame!r} is not [xmin, xmax, ymin, ymax]")


@dataclass(frozen=True)
class ProjectionView:
    """One further aligned view of a snapshot entry (an entry of its ``projections``), checked.

    ``xy`` in the embedding's own units, ``spread`` (``None`` when the entry gives none),
    ``frame`` (in spreads, or ``None``) and ``fitted`` (the points the projection was fitted
    on, when fewer than all; else ``None``).
    """

    xy: np.ndarray
    spread: float | None
    frame: list[float] | None
    fitted: int | None


def projection_views(
    entry: Mapping[str, Any], points: int
) -> tuple[dict[str, ProjectionView], list[str]]:
    """The views of a ``snapshot`` entry's ``projections`` that are sound, and what is wrong.

    Each view is checked as the entry's own ``xy`` is, against the entry's ``points`` rows; a
    damaged one is left out and named in the second list, the others are kept.

    Example:
        >>> from learnscope.run_directory.record import encode_array
        >>> good = {"xy": encode_array(np.ones((2, 2), np.float32)), "spread": 2.0,
        ...         "frame": [-1, 1, -1, 1], "fitted": None}
        >>> views, problems = projection_views(
        ...     {"projections": {"umap": good, "tsne": {"xy": "?"}}}, 2)
        >>> list(views), views["umap"].spread, problems
        (['umap'], 2.0, ['its tsne view: xy is not an array'])
    """
    projections = entry.get("projections")
    if projections is None:
        return {}, []
    if not isinstance(projections, Mapping):
        return {}, [f"projections is {type(projections).__name__}, not an object of views"]
    views, problems = {}, []
    for name, view in projections.items():
        try:
            views[name] = _projection_view(name, view, points)
        except DamagedEntry as error:
            problems.append(f"its {name} view: {error}")
    return views, problems


def _projection_view(name: Any, view: Any, points: int) -> ProjectionView:
    if not isinstance(name, str) or not name.isidentifier() or name == "pca":
        raise DamagedEntry(f"{name!r} is not the name of a projection other than PCA")
    if not isinstance(view, Mapping):
        raise DamagedEntry("it is not an object with xy, spread, frame and fitted")
    xy = array_field(view, "xy")
    if xy.ndim != 2 or xy.shape[1] != 2 or not np.issubdtype(xy.dtype, np.floating):
        raise DamagedEntry(f"xy has shape {list(xy.shape)} ({xy.dtype}), not [points, 2]")
    if len(xy) != points:
        raise DamagedEntry(f"xy has {len(xy)} points, the snapshot {points}")
    spread = view.get("spread")
    if spread is not None and not (is_number(spread) and math.isfinite(spread) and spread > 0):
        raise DamagedEntry(f"spread {spread!r} is not a positive number")
    frame = view.get("frame")
    check_frame(frame)
    fitted = view.get("fitted")
    if fitted is not None and not (
        isinstance(fitted, int) and not isinstance(fitted, bool) and 0 < fitted <= points
    ):
        raise DamagedEntry(f"fitted {fitted!r} is not a number of points from 1 to {points}")
    return ProjectionView(
        xy,
        None if spread is None else float(spread),
        None if frame is None else [float(v) for v in frame],
        fitted,
    )


NO_PROJECTIONS: Mapping[str, ProjectionView] = MappingProxyType({})


def projection_label(name: str) -> str:
    """How the page names projection ``name``.

    Example:
        >>> projection_label("umap"), projection_label("pca")
        ('UMAP', 'PCA')
    """
    return name.upper()


def in_spread_units(xy: np.ndarray, spread: Any) -> tuple[np.ndarray, float]:
    """``xy`` in units of ``spread`` (its own when ``spread`` is no positive number), float16.

    Example:
        >>> scaled, spread = in_spread_units(np.array([[3.0, 4.0], [-3.0, -4.0]]), None)
        >>> scaled.astype(float).round(3).tolist(), spread
        ([[0.6, 0.8], [-0.6, -0.8]], 5.0)
    """
    if not (is_number(spread) and math.isfinite(spread) and spread > 0):
        spread = view_spread(xy) or 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (xy.astype(np.float64) / spread).astype("<f2")
    return scaled, float(spread)


@dataclass
class ScaledView:
    """A further aligned view of one snapshot in units of its spread, and its encoding."""

    xy: np.ndarray  # [n, 2] float16, in units of the view's spread, rows in snapshot order
    spread: float
    fitted: int | None
    encoded: tuple[int, str] | None = None  # (version of the shown ids, base64 of their xy)


@dataclass
class RowOrder:
    """The ids of a snapshot in row order, shared by consecutive snapshots with the same ids."""

    ids: list[str]
    index: dict[str, int]
    rows: tuple[int, np.ndarray] | None = None  # (version of the shown ids, their rows)

    def rows_of(self, shown: list[str], version: int) -> np.ndarray:
        """The rows of the ``shown`` ids (kept while ``version`` is the same)."""
        if self.rows is None or self.rows[0] != version:
            self.rows = (version, np.fromiter((self.index[i] for i in shown), np.int64, len(shown)))
        return self.rows[1]


@dataclass
class ScaledSnapshot:
    """One snapshot's view in units of its spread, and its encoding for the shown ids."""

    step: int
    order: RowOrder
    xy: np.ndarray  # [n, 2] float16, in units of the snapshot's spread, rows in snapshot order
    spread: float
    encoded: tuple[int, str] | None = None  # (version of the shown ids, base64 of their xy)
    projections: dict[str, ScaledView] = field(default_factory=dict)  # further views, by name

    def encode(self, view: ScaledSnapshot | ScaledView, ids: list[str], version: int) -> bool:
        """Encode ``view`` (this snapshot or one of its projections) for the shown ``ids``.

        Nothing is done when it already is for ``version``; whether it was done.
        """
        if view.encoded is not None and view.encoded[0] == version:
            return False
        rows = self.order.rows_of(ids, version)
        data = np.ascontiguousarray(view.xy[rows], "<f2").tobytes()
        view.encoded = (version, base64.b64encode(data).decode("ascii"))
        return True


@dataclass
class EmbeddingEvolution:
    """The snapshots of one key (``tag/stage``) with aligned PCA coordinates, in step order.

    Example:
        >>> evolution = EmbeddingEvolution("enc")
        >>> evolution.add({"step": 1}, np.array([[3.0, 4.0], [-3.0, -4.0]]), ["a", "b"])
        >>> view, encoded = evolution.view(max_points=10)
        >>> view["steps"], view["spreads"], view["notes"], encoded
        ([1], [5.0], ['one snapshot only: nothing moves yet'], 1)
    """

    key: str
    snapshots: list[ScaledSnapshot] = field(default_factory=list)
    has_ids: bool | None = None
    common: set[str] | None = None  # ids present in every snapshot
    seen: set[str] = field(default_factory=set)  # ids present in some snapshot
    frame: list[float] | None = None
    last: Mapping[str, Any] | None = None  # the newest snapshot's entry (columns, sprite)
    version: int = 0  # changes whenever the shown ids may have changed
    shown: tuple[int, list[str], int] | None = None  # (version, ids shown, ids in common)
    projection_frames: dict[str, list[float]] = field(default_factory=dict)  # newest, by name

    def add(
        self,
        entry: Mapping[str, Any],
        xy: np.ndarray,
        ids: list[str] | None,
        projections: Mapping[str, ProjectionView] = NO_PROJECTIONS,
    ) -> None:
        """Fold one snapshot in: ``entry`` with its checked ``xy``, ``ids`` and ``projections``.

        ``projections`` are its further views, as :func:`projection_views` checks them.

        Raises:
            DamagedEntry: When its ids do not fit the key's other snapshots.
        """
        step = int(entry["step"])
        previous = self.snapshots[-1].order if self.snapshots else None
        given = ids is not None
        if self.has_ids is not None and self.has_ids != given:
            had = "ids" if self.has_ids else "no ids"
            raise DamagedEntry(f"it has {'ids' if given else 'no ids'}, the key's snapshots {had}")
        if ids is None:
            if previous is not None and len(previous.ids) != len(xy):
                raise DamagedEntry(
                    f"it has {len(xy)} points without ids, the earlier snapshots "
                    f"{len(previous.ids)} (without ids, points are matched by row)"
                )
            ids = [str(i) for i in range(len(xy))]
        if previous is not None and previous.ids == ids:
            order = previous
        else:
            index = {point: row for row, point in enumerate(ids)}
            if len(index) != len(ids):
                raise DamagedEntry("its ids are not unique")
            order = RowOrder(ids, index)
        scaled, spread = in_spread_units(xy, entry.get("spread"))
        snapshot = ScaledSnapshot(step, order, scaled, spread)
        for name, view in projections.items():
            coords, units = in_spread_units(view.xy, view.spread)
            snapshot.projections[name] = ScaledView(coords, units, view.fitted)
        steps = [s.step for s in self.snapshots]
        if not steps or step > steps[-1]:
            self.snapshots.append(snapshot)
            self.last = entry
            keys = set(order.index) if order is not previous or self.common is None else None
            if self.common is None:
                self.common = set(keys or ())
            elif keys is not None and not self.common <= keys:
                self.common &= keys
                self.version += 1
            if keys is not None:
                self.seen |= keys
        else:  # a snapshot written again (or late): replace or insert it, and start over
            position = int(np.searchsorted(steps, step))
            if steps[position] == step:
                self.snapshots[position] = snapshot
            else:
                self.snapshots.insert(position, snapshot)
            if position == len(self.snapshots) - 1:
                self.last = entry
            orders = {id(s.order): s.order for s in self.snapshots}.values()
            self.common = set.intersection(*(set(x.index) for x in orders))
            self.seen = set().union(*(set(x.index) for x in orders))
            self.version += 1
        self.has_ids = given
        frame = entry.get("frame")
        if frame is not None:
            self.frame = [float(v) for v in frame]
        for name, view in projections.items():
            if view.frame is not None:
                self.projection_frames[name] = view.frame

    def shown_ids(self, max_points: int) -> tuple[list[str], int]:
        """The ids drawn (in the first snapshot's order) and how many are in every snapshot."""
        if self.shown is None or self.shown[0] != self.version:
            common = self.common or set()
            ids = [i for i in self.snapshots[0].order.ids if i in common]
            total = len(ids)
            if total > max_points:
                ids = subsample_ids(ids, max_points)
            self.shown = (self.version, ids, total)
        return self.shown[1], self.shown[2]

    def view(
        self,
        max_points: int,
        sprite: Mapping[str, Any] | None = None,
        more_notes: tuple[str, ...] = (),
    ) -> tuple[dict[str, Any], int]:
        """The key's part of the view model, and how many snapshots were encoded for it.

        Args:
            max_points: The most points drawn.
            sprite: The newest snapshot's thumbnails (``png``, ``width``, ``height``,
                ``per_row``), or ``None``.
            more_notes: Notes said after the key's own (a sprite that is not shown, say).
        """
        ids, total = self.shown_ids(max_points)
        version = self.version
        notes = []
        if not self.has_ids:
            notes.append("no ids: points matched by row")
        if len(self.common or ()) < len(self.seen):
            notes.append("only points present in every snapshot are shown")
        if total > len(ids):
            notes.append(f"{len(ids):,} of {total:,} points shown (a fixed subsample by id)")
        if len(self.snapshots) == 1:
            notes.append("one snapshot only: nothing moves yet")
        xy, encoded = [], 0
        for snapshot in self.snapshots:
            encoded += snapshot.encode(snapshot, ids, version)
            xy.append(snapshot.encoded[1])  # type: ignore[index]
        projections = []
        for name in dict.fromkeys(n for s in self.snapshots for n in s.projections):
            projection, count = self._projection(name, ids, version)
            encoded += count
            projections.append(projection)
            missing = len(self.snapshots) - len(projection["steps"])
            if missing:
                label = projection["label"]
                notes.append(
                    f"{missing} of {len(self.snapshots)} snapshots without the aligned {label} "
                    f"view: {label} shows the other {len(projection['steps'])}"
                )
        notes.extend(more_notes)
        last = self.snapshots[-1]
        rows = last.order.rows_of(ids, version)
        entry = self.last or {}
        columns = [
            typed_column(c, len(last.order.ids), rows)
            for c in list_field(entry, "columns", required=False)
        ]
        views = ("pca", *(p["name"] for p in projections))
        coordinates = {"id", *(f"{v}_{axis}" for v in views for axis in "xyz")}
        columns = [c for c in columns if c["name"] not in coordinates]
        view = {
            "key": self.key,
            "steps": [s.step for s in self.snapshots],
            "ids": ids,
            "xy": xy,
            "encoding": "float16-le-base64",
            "units": "spread",
            "spreads": [rounded(s.spread, 6) for s in self.snapshots],
            "frame": self.frame,
            "projections": projections,
            "columns": columns,
            "points_total": total,
            "points_shown": len(ids),
            "neighbours": NEIGHBOURS,  # the k of the movers, as for two runs compared
            "sprite": None if sprite is None else {**sprite, "rows": rows.tolist()},
            "notes": notes,
        }
        return view, encoded

    def _projection(self, name: str, ids: list[str], version: int) -> tuple[dict[str, Any], int]:
        """Projection ``name``'s part of the key's view, and how many snapshots were encoded.

        Its snapshots are those of the key that have it.
        """
        steps, xy, spreads, fitted, points, encoded = [], [], [], [], [], 0
        for snapshot in self.snapshots:
            view = snapshot.projections.get(name)
            if view is None:
                continue
            encoded += snapshot.encode(view, ids, version)
            steps.append(snapshot.step)
            xy.append(view.encoded[1])  # type: ignore[index]
            spreads.append(rounded(view.spread, 6))
            fitted.append(view.fitted)
            points.append(len(snapshot.order.ids))
        projection = {
            "name": name,
            "label": projection_label(name),
            "steps": steps,
            "xy": xy,
            "spreads": spreads,
            "frame": self.projection_frames.get(name),
            "fitted": fitted,
            "points": points,
        }
        return projection, encoded
