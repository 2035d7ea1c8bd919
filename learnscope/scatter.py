"""Scatter images of 2-D embedding views, coloured by label, drawn with numpy alone.

Used for the TensorBoard Images tab (and wandb media), where the step slider then shows how the
embeddings evolve. Keep the axis limits of a tag fixed between steps with :func:`grow_limits`,
so that the picture only moves when the points do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from learnscope.canvas import BLACK, GREY, Axes, Canvas, palette, text_width

MAX_LEGEND = 20  # legend entries; beyond, the rarest labels share one grey "other" entry
OTHER = "other"
NOT_LABELS = ("id", "position", "node", "row", "pca_x", "pca_y", "pca_z")  # never colours

Limits = tuple[float, float, float, float]  # xmin, xmax, ymin, ymax

_PLOT = 360  # side of the square plotting area, pixels
_MARGIN = 34
_LEGEND = 150
_TEXT = 2  # font scale


def label_column(columns: Iterable[str]) -> str | None:
    """The column that colours the points: the first that is not an id, position or PCA column.

    Example:
        >>> label_column(["id", "label", "pca_x"])
        'label'
        >>> label_column(["pca_x"]) is None
        True
    """
    return next((name for name in columns if name not in NOT_LABELS), None)


def grow_limits(xy: np.ndarray, previous: Limits | None = None, margin: float = 0.08) -> Limits:
    """Square axis limits that hold ``xy`` (a few outliers aside) and ``previous``.

    Limits only grow, so a sequence of images of one tag keeps one frame until the points spread
    beyond it. The range covers the 0.5th to 99.5th percentile of each coordinate (a lone
    outlier does not squash the picture), widened by ``margin``, and x and y get the same span
    so that distances look alike in both directions.

    Args:
        xy: ``[N, 2]`` coordinates.
        previous: The limits used so far, or ``None``.
        margin: Fraction of the span added on each side.

    Returns:
        ``(xmin, xmax, ymin, ymax)``.

    Example:
        >>> grow_limits(np.array([[0.0, 0.0], [1.0, 2.0]]), margin=0.0)
        (-0.5, 1.5, 0.0, 2.0)
    """
    finite = xy[np.isfinite(xy).all(1)] if len(xy) else xy
    if len(finite) == 0:
        return previous or (-1.0, 1.0, -1.0, 1.0)
    low = np.percentile(finite, 0.5, axis=0) if len(finite) > 200 else finite.min(0)
    high = np.percentile(finite, 99.5, axis=0) if len(finite) > 200 else finite.max(0)
    centre = (low + high) / 2
    half = max(float((high - low).max()) / 2 * (1 + 2 * margin), 1e-9)
    xmin, xmax = float(centre[0] - half), float(centre[0] + half)
    ymin, ymax = float(centre[1] - half), float(centre[1] + half)
    if previous is not None:
        if (
            xmin >= previous[0]
            and xmax <= previous[1]
            and ymin >= previous[2]
            and ymax <= previous[3]
        ):
            return previous
        xmin, xmax = min(xmin, previous[0]), max(xmax, previous[1])
        ymin, ymax = min(ymin, previous[2]), max(ymax, previous[3])
        span = max(xmax - xmin, ymax - ymin)
        xmin, xmax = (xmin + xmax - span) / 2, (xmin + xmax + span) / 2
        ymin, ymax = (ymin + ymax - span) / 2, (ymin + ymax + span) / 2
    return (xmin, xmax, ymin, ymax)


def scatter_image(
    xy: np.ndarray,
    labels: Sequence[Any] | None = None,
    title: str = "",
    limits: Limits | None = None,
) -> np.ndarray:
    """Draw points coloured by label, with a legend strip, as an RGB image.

    Args:
        xy: ``[N, 2]`` coordinates.
        labels: One label per point (shown as text); ``None`` draws every point in one colour.
            The 19 most frequent labels get a colour each when there are more than 20, the rest
            are grey and share an ``other`` entry. Colours follow the sorted labels, so the
            same labels keep the same colours from one image to the next.
        title: Written above the plot.
        limits: ``(xmin, xmax, ymin, ymax)``; points outside are drawn on the frame. Defaults
            to :func:`grow_limits` of ``xy``.

    Returns:
        ``uint8 [H, W, 3]`` pixels.

    Example:
        >>> image = scatter_image(np.array([[0.0, 0.0], [1.0, 1.0]]), ["cat", "dog"], "step 5")
        >>> image.shape, image.dtype
        ((420, 554, 3), dtype('uint8'))
    """
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    limits = limits or grow_limits(xy)
    canvas = Canvas(_MARGIN + _PLOT + 10 + _LEGEND, _MARGIN + _PLOT + 26)
    canvas.text(_MARGIN, 8, title[: (canvas.width - _MARGIN) // text_width("x", _TEXT)], BLACK)
    box = (_MARGIN, _MARGIN, _MARGIN + _PLOT, _MARGIN + _PLOT)
    axes = Axes(canvas, box, (limits[0], limits[1]), (limits[2], limits[3]))
    axes.frame(xticks=_ticks(limits[0], limits[1]), yticks=_ticks(limits[2], limits[3]))

    names, colors = _legend(labels, len(xy))
    inside = np.isfinite(xy).all(1)
    x = np.clip(xy[inside, 0], *axes.xlim)
    y = np.clip(xy[inside, 1], *axes.ylim)
    px, py = axes.to_pixels(x, y)
    canvas.points(px, py, colors[inside], radius=1 if len(xy) <= 5000 else 0)

    left, top = box[2] + 12, box[1]
    for row, (name, color) in enumerate(names):
        y0 = top + row * 16
        if y0 + 10 > canvas.height:
            break
        canvas.fill(left, y0, left + 9, y0 + 9, tuple(int(c) for c in color))
        canvas.text(left + 14, y0, name[: (_LEGEND - 16) // text_width("x", _TEXT)], BLACK)
    return canvas.pixels


def _legend(
    labels: Sequence[Any] | None, n: int
) -> tuple[list[tuple[str, np.ndarray]], np.ndarray]:
    """Legend entries ``(text, colour)`` and one colour per point."""
    if labels is None or n == 0:
        return [], np.broadcast_to(palette(1)[0], (n, 3)).copy()
    text = [_label_text(v) for v in labels]
    counts = Counter(text)
    distinct = sorted(counts, key=_sort_key)
    if len(distinct) > MAX_LEGEND:
        frequent = sorted(counts, key=lambda v: (-counts[v], _sort_key(v)))[: MAX_LEGEND - 1]
        distinct = sorted(frequent, key=_sort_key)
    colours = dict(zip(distinct, palette(len(distinct)), strict=True))
    grey = np.array(GREY, np.uint8)
    per_point = np.array([colours.get(v, grey) for v in text], np.uint8)
    entries = [(v, colours[v]) for v in distinct]
    if len(counts) > len(distinct):
        entries.append((OTHER, grey))
    return entries, per_point


def _label_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _sort_key(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _ticks(low: float, high: float) -> list[float]:
    return [low, (low + high) / 2, high]


def labels_of(metadata: Mapping[str, Sequence[Any]]) -> Sequence[Any] | None:
    """The values of :func:`label_column` in ``metadata``, or ``None`` when there is none.

    Example:
        >>> labels_of({"id": [1, 2], "digit": [7, 3]})
        [7, 3]
    """
    name = label_column(metadata)
    return None if name is None else metadata[name]
