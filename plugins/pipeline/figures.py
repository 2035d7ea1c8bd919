"""learnscope's charts, drawn with matplotlib: the mean ACF against lag, the PCA scatter.

matplotlib (Agg) is imported only when a picture is drawn, and never through ``pyplot``: each
picture is its own ``Figure``, rasterised by :mod:`learnscope.plugins.pipeline.drawing` (on a
run's drawing thread when given its :class:`~learnscope.plugins.pipeline.drawing.Drawing`, else on
the calling thread), so drawing touches no global state.

Functions return ``uint8 [H, W, 3]`` pixels, what :class:`learnscope.records.RenderedImage`
holds; the ``*_figure`` functions return the ``Figure`` itself.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from learnscope.embeddings.scatter_frame import (
    OTHER,
    Limits,
    clip_to_frame,
    column_kind,
    frame_limits,
    label_categories,
)
from learnscope.plugins.palette import PALETTE
from learnscope.plugins.pipeline.drawing import Drawing, figure_pixels, pictures_available
from learnscope.records import AutocorrelationSummary, GroupAutocorrelation, RenderedImage
from learnscope.tags import AUTOCORRELATION

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "acf_chart",
    "acf_figure",
    "acf_images",
    "scatter_figure",
]


DPI = 100
# Pictures are drawn as wide as TensorBoard's image cards: in TensorBoard 2.21's Images tab a
# card (tf-image-loader) is 350 CSS pixels wide at every window width (measured in Chromium at
# 1280, 1400 and 1920 pixels) and shows its picture 100% wide with pixelated scaling, so a
# picture 350 pixels wide is shown pixel for pixel, where one of 400 lost a column in eight. Every
# text at least 11 points (15 pixels), the legend or colour bar under the plot. Sizes below are in
# pixels; a figure's height follows its legend.
WIDTH = 350
FONT = 11.0  # points: tick labels, legend entries
LABEL_FONT = 11.5  # axis labels
TITLE_FONT = 12.0
_EM = DPI / 72  # pixels per point
_CHAR = 0.64  # an upper bound of DejaVu Sans's mean character width, in em
_LINE = 1.2  # matplotlib's line spacing, in em
_RIGHT = 14  # room right of a plot: the last tick label's overhang
ACF_LEFT, ACF_HEIGHT = 72, 220  # the ACF plot: its left edge, its height
ACF_WIDTH = WIDTH - ACF_LEFT - _RIGHT
SCATTER_LEFT = 72  # the PCA scatter: a square
SCATTER_SIDE = WIDTH - SCATTER_LEFT - _RIGHT
_BELOW_AXES = 52  # tick labels and the x label under a plot
_INK = "#222222"  # tick labels and axis labels
MAX_NAME = 18  # characters of a legend name; longer ones are shortened in the middle
# The category colours (matplotlib's "tab10", so that no colour map has to be looked up by
# name) and the "other" grey: static/palette.json, which the tab's colours.js gets too.
COLOURS = PALETTE.categories
OTHER_COLOUR = PALETTE.other
BAND_COLOUR = "#dcdcdc"
_KIND_WORDS = types.MappingProxyType({"params": "parameters", "grads": "gradients"})
_LINE_STYLES = ("-", "--", ":")  # after ten groups the colours repeat with another line style
_MAX_MARKERS = 25  # markers per ACF line


def acf_figure(groups: Sequence[GroupAutocorrelation], title: str = "") -> Figure:
    """The mean ACF of each group against lag, one line with markers per group.

    The y axis spans -1 to 1; the x axis lag 0 to the largest lag of any group. When the
    groups know how many steps their ACF came from (``num_steps``, the smallest when they
    differ), the band ``±1.96/√T`` where 95% of a white-noise ACF falls is shaded: a lag
    whose ACF lies inside cannot be told from noise. The legend lists the groups in their
    order, each with its integrated autocorrelation time (``τ``) when known, else its median
    lag-1 autocorrelation (``r₁``); a group whose elements all stayed constant is listed
    as such, without a line. Where a ``τ`` is shown, a last entry says what it counts, and
    what a ``τ`` below 1 means (:func:`tau_note`).

    Args:
        groups: The groups to draw, in legend order (usually one kind's, in module order).
        title: Written above the plot.

    Returns:
        A ``Figure`` :data:`WIDTH` pixels wide (at 100 dpi), the legend under the plot, as tall
        as its legend needs.

    Example:
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.4, 0.1]), -0.4, -0.5,
        ...                          -0.3, tau=None, num_steps=100)
        >>> figure = acf_figure([g], "gradients")
        >>> [t.get_text().splitlines()[0] for t in figure.axes[0].get_legend().get_texts()]
        ['head  r₁=-0.40', 'white noise 95%']
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    steps = sorted({g.num_steps for g in groups if g.num_steps is not None})
    band = ""
    if steps:
        known = f"T={steps[0]}" if len(steps) == 1 else f"T={steps[0]}..{steps[-1]}"
        band = f"white noise 95%\n±1.96/√T, {known}"
    note = tau_note(groups)
    entries = (
        [_legend_text(g) for g in groups] + ([band] if band else []) + ([note] if note else [])
    )
    title_lines = _wrap(title, TITLE_FONT)
    top = _text_height(len(title_lines), TITLE_FONT) + 10
    ncols, legend_height = _legend_shape(entries, handle_em=2.1, fit_columns=2)
    height = top + ACF_HEIGHT + _BELOW_AXES + legend_height + 8
    figure = Figure(figsize=(WIDTH / DPI, height / DPI), dpi=DPI, facecolor="white")
    ax = figure.add_axes(_box(ACF_LEFT, height - top - ACF_HEIGHT, ACF_WIDTH, ACF_HEIGHT, height))
    ax.set_facecolor("white")
    max_lag = max([g.max_lag for g in groups] + [1])
    for i, group in enumerate(groups):
        colour = COLOURS[i % len(COLOURS)]
        style = _LINE_STYLES[i // len(COLOURS) % len(_LINE_STYLES)]
        acf = group.mean_acf
        finite = np.isfinite(acf)
        if not finite.any():
            ax.plot([], [], color=colour, linestyle=style, label=_legend_text(group))
            continue
        lags = np.arange(acf.size)[finite]
        ax.plot(
            lags,
            np.clip(acf[finite], -1.0, 1.0),
            color=colour,
            linestyle=style,
            linewidth=1.8,
            marker="o",
            markersize=4,
            markevery=max(1, math.ceil(lags.size / _MAX_MARKERS)),
            label=_legend_text(group),
            zorder=3,
        )
    if steps:
        half = 1.96 / math.sqrt(steps[0])
        ax.axhspan(-half, half, color=BAND_COLOUR, linewidth=0, zorder=1, label=band)
    ax.axhline(0.0, color="#555555", linewidth=0.8, zorder=2)
    ax.set_xlim(0, max_lag)
    ax.set_ylim(-1.0, 1.0)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True, steps=[1, 2, 5, 10]))
    ax.yaxis.set_major_locator(MultipleLocator(0.5))
    ax.grid(color="#e8e8e8", linewidth=0.6, zorder=0)
    _label_axes(ax, "lag (steps)", "mean autocorrelation")
    ax.set_title(
        "\n".join(title_lines), fontsize=TITLE_FONT, color="black", x=_centre(ACF_LEFT, ACF_WIDTH)
    )
    handles, labels = ax.get_legend_handles_labels()
    if note:  # text only: an empty handle
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], linestyle="", marker=""))
        labels.append(note)
    _legend_under(
        ax,
        legend_height + 8,
        height,
        handles=handles,
        labels=labels,
        ncols=ncols,
        handlelength=1.6,
        handletextpad=0.5,
    )
    return figure


def tau_note(groups: Sequence[GroupAutocorrelation]) -> str:
    """What the legend says of ``τ`` when it shows one: what it counts, and what below 1 means.

    ``τ``, the integrated autocorrelation time, is about how many steps one independent value
    spans; below 1 (typical of gradients), successive values are anti-correlated. Nothing when
    no group shows a ``τ``.

    Example:
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.4]), -0.4, -0.5, -0.3,
        ...                          tau=0.4)
        >>> print(tau_note([g]))
        τ: steps per independent value;
        τ < 1: each step partly undoes
        the last (anti-correlated)
    """
    shown = [g.tau for g in groups if g.tau is not None and np.isfinite(g.mean_acf).any()]
    if not shown:
        return ""
    note = "τ: steps per independent value"
    if min(shown) < 1:
        note += ";\nτ < 1: each step partly undoes\nthe last (anti-correlated)"
    return note


def acf_chart(groups: Sequence[GroupAutocorrelation], title: str = "") -> np.ndarray:
    """:func:`acf_figure` as ``uint8 [H, WIDTH, 3]`` pixels.

    Example:
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.4]), -0.4, -0.5, -0.3,
        ...                          None)
        >>> acf_chart([g], "gradients").shape
        (333, 350, 3)
    """
    return figure_pixels(acf_figure(groups, title))


def acf_images(
    summary: AutocorrelationSummary,
    prefix: str = AUTOCORRELATION,
    drawing: Drawing | None = None,
) -> list[RenderedImage]:
    """One :func:`acf_chart` per kind of the summary, tagged ``{prefix}/{kind}/acf``.

    With a ``drawing`` (a run's writers') they are drawn on that drawing's thread.

    Args:
        summary: One analysis.
        prefix: The first component of every tag.
        drawing: Where to draw (default: the calling thread).

    Returns:
        The images, in the order the kinds first appear in ``summary.groups``; none without
        matplotlib (see :func:`pictures_available`).

    Example:
        >>> from learnscope.records import AutocorrelationSummary, GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.5]), -0.5, -0.6, -0.4, None)
        >>> image, = acf_images(AutocorrelationSummary(7, (1,), (g,)))
        >>> image.tag, image.step, image.pixels.dtype
        ('~learnscope/autocorrelation/grads/acf', 7, dtype('uint8'))
    """
    return _acf_images(summary, prefix, functools.partial(figure_pixels, drawing=drawing))


def _acf_images(
    summary: AutocorrelationSummary, prefix: str, pixels: Callable[[Figure], np.ndarray]
) -> list[RenderedImage]:
    """The ACF images of ``summary``, each figure rasterised by ``pixels``."""
    if not summary.groups or not pictures_available():
        return []
    images = []
    for kind in dict.fromkeys(g.kind for g in summary.groups):
        groups = [g for g in summary.groups if g.kind == kind]
        title = f"mean ACF of {_KIND_WORDS.get(kind, kind)}, step {summary.step}"
        images.append(
            RenderedImage(f"{prefix}/{kind}/acf", summary.step, pixels(acf_figure(groups, title)))
        )
    return images


def scatter_figure(
    xy: np.ndarray,
    labels: Sequence[Any] | None = None,
    title: str = "",
    limits: Limits | None = None,
    label_name: str | None = None,
    axes: str = "PCA",
) -> Figure:
    """Points coloured by label on a fixed square frame, with a legend or a colour bar.

    Categories (see :func:`learnscope.embeddings.scatter_frame.column_kind`: text, or up to 16
    distinct whole numbers) get a legend: the 10 most frequent labels a colour each, sorted so that
    the same labels keep the same colours, and the rest share a grey ``other`` entry. Other numbers
    get a colour bar. Points outside
    ``limits`` are drawn on the frame's edge as ``×`` and counted in the legend and title.

    Args:
        xy: ``[N, 2]`` coordinates, in units of the view's spread; rows with NaN or Inf are
            left out.
        labels: One label per point; ``None`` draws every point in one colour.
        title: Written above the plot.
        limits: ``(xmin, xmax, ymin, ymax)``; defaults to
            :func:`learnscope.embeddings.scatter_frame.frame_limits` of ``xy``. Pass the same
            limits for every picture of a tag.
        label_name: The name of the labels, the title of the legend or colour bar.
        axes: The projection that the axes are named by (``"PCA x (spreads)"``).

    Returns:
        A ``Figure`` :data:`WIDTH` pixels wide (at 100 dpi), the legend or colour bar under the
        plot, as tall as they and the title need.

    Example:
        >>> figure = scatter_figure(np.array([[0.0, 0.0], [3.0, 1.0]]), ["cat", "dog"], "t",
        ...                         (-2.0, 2.0, -2.0, 2.0))
        >>> figure.axes[0].get_title().splitlines()
        ['t', '1 point outside: × on the edge']
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    limits = limits or frame_limits(xy)
    finite = np.isfinite(xy).all(1)
    clipped, outside = clip_to_frame(xy, limits)
    size = 14.0 if len(xy) <= 1000 else 6.0 if len(xy) <= 5000 else 2.0
    handles: list[Any] = []
    values = None
    if labels is not None and len(labels) == len(xy) and column_kind(labels) == "numeric":
        values = np.asarray(labels, np.float64)
    if values is not None:
        low, high = _colour_range(values[finite])
        style: dict[str, Any] = {"c": values, "cmap": "viridis", "vmin": low, "vmax": high}
    elif labels is not None and len(labels) == len(xy) and len(xy):
        names, index = label_categories(labels)
        table = np.array(
            [_rgb(COLOURS[i % len(COLOURS)]) for i in range(len(names))] + [_rgb(OTHER_COLOUR)]
        )
        style = {"color": table[index]}  # index -1 is the last row: "other"
        handles = [_dot(_short(n), COLOURS[i % len(COLOURS)]) for i, n in enumerate(names)]
        if (index < 0).any():
            handles.append(_dot(OTHER, OTHER_COLOUR))
    else:
        style = {"color": COLOURS[0]}
    count = int((finite & outside).sum())
    title_lines = _wrap(title, TITLE_FONT)
    names = [str(h.get_label()) for h in handles] + [f"{len(xy)} outside"]
    if count:
        title_lines.append(f"{count} point{'s' if count != 1 else ''} outside: × on the edge")
        if values is None:  # a legend; a colour bar has no room for the entry
            marker = Line2D([], [], color="#333333", marker="X", linestyle="", markersize=8)
            handles.append(marker)
            marker.set_label(f"{count} outside")
    # Room for the line and the legend entry of points outside whether there are any or not:
    # every picture of a tag the same size, its plot in the same place.
    top = _text_height(len(title_lines) + (not count), TITLE_FONT) + 10
    if values is not None:
        under = 72  # a colour bar across the plot, its tick labels and its label
    elif handles:
        ncols, under = _legend_shape(names, handle_em=1.1, fit_columns=6, title=bool(label_name))
        under += 8
    else:
        under = 0
    height = top + SCATTER_SIDE + _BELOW_AXES + under + 6
    figure = Figure(figsize=(WIDTH / DPI, height / DPI), dpi=DPI, facecolor="white")
    bottom = height - top - SCATTER_SIDE
    ax = figure.add_axes(_box(SCATTER_LEFT, bottom, SCATTER_SIDE, SCATTER_SIDE, height))
    ax.set_facecolor("white")
    inside = finite & ~outside
    mapped = None
    for mask, marker, extra in ((inside, "o", 0.0), (finite & outside, "X", 3.0)):
        if not mask.any():
            continue
        chosen = {
            k: (v[mask] if isinstance(v, np.ndarray) and v.ndim >= 1 else v)
            for k, v in style.items()
        }
        mapped = ax.scatter(
            clipped[mask, 0],
            clipped[mask, 1],
            s=size + extra * size,
            marker=marker,
            linewidths=0,
            alpha=0.85,
            clip_on=False,
            zorder=3 if marker == "o" else 4,
            **chosen,
        )
    ax.set_xlim(limits[0], limits[1])
    ax.set_ylim(limits[2], limits[3])
    ax.set_aspect("equal", adjustable="box")
    ax.set_autoscale_on(False)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10]))
    ax.grid(color="#ececec", linewidth=0.6)
    _label_axes(ax, f"{axes} x (spreads)", f"{axes} y (spreads)")
    ax.set_title(  # from the top of the figure down, centred on the figure
        "\n".join(title_lines),
        fontsize=TITLE_FONT,
        x=_centre(SCATTER_LEFT, SCATTER_SIDE),
        y=1 + (top - 6) / SCATTER_SIDE,
        va="top",
        pad=0,
    )
    if values is not None and mapped is not None:
        bar_box = _box(SCATTER_LEFT, bottom - _BELOW_AXES - 14, SCATTER_SIDE, 12, height)
        bar = figure.colorbar(mapped, cax=figure.add_axes(bar_box), orientation="horizontal")
        bar.set_label(label_name or "label", fontsize=LABEL_FONT)
        bar.ax.tick_params(labelsize=FONT)
    if handles:
        _legend_under(
            ax,
            under + 6,
            height,
            handles=handles,
            title=label_name if values is None else None,
            title_fontsize=FONT,
            ncols=ncols,
            alignment="left",
            handlelength=0.8,
            handletextpad=0.3,
        )
    return figure


def _label_axes(ax: Any, xlabel: str, ylabel: str) -> None:
    """A plot's tick labels and axis labels in the pictures' dark grey, the grid behind."""
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=FONT, colors=_INK)
    ax.set_xlabel(xlabel, fontsize=LABEL_FONT, color=_INK)
    ax.set_ylabel(ylabel, fontsize=LABEL_FONT, color=_INK)


def _legend_under(ax: Any, top: float, total: float, **layout: Any) -> None:
    """The legend of ``ax`` under the plot, frameless, in a figure ``total`` pixels tall.

    Its top left corner is ``top`` pixels above the figure's bottom and 8 from its left edge;
    ``layout`` holds the legend's own keywords (entries, columns, handle sizes).
    """
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(8 / WIDTH, top / total),
        bbox_transform=ax.figure.transFigure,
        frameon=False,
        fontsize=FONT,
        columnspacing=1.0,
        borderaxespad=0.0,
        borderpad=0.0,
        **layout,
    )


def _centre(left: float, width: float) -> float:
    """The figure's middle, in the coordinates of a plot ``left`` pixels in and ``width`` wide.

    A title centred there may be as wide as the figure, not only as the plot.
    """
    return (WIDTH / 2 - left) / width


def _box(left: float, bottom: float, width: float, height: float, total: float) -> tuple:
    """A box in pixels (from the bottom left) as a fraction of a figure ``total`` pixels tall."""
    return (left / WIDTH, bottom / total, width / WIDTH, height / total)


def _text_width(text: str, points: float) -> float:
    """An upper bound of the width in pixels of one line of ``text``."""
    return len(text) * _CHAR * points * _EM


def _text_height(lines: int, points: float) -> int:
    return math.ceil(lines * _LINE * points * _EM)


def _wrap(text: str, points: float) -> list[str]:
    """``text`` broken into lines that fit the figure's width (16 pixels spare).

    Fields set apart by two spaces (``"encoder/validate  step 160  spread 18.7"``) stay whole
    where they fit: a line breaks between them first, then at single spaces.

    Example:
        >>> _wrap("encoder/validate  step 160  spread 18.7", TITLE_FONT)
        ['encoder/validate  step 160', 'spread 18.7']
    """
    import textwrap

    fits = max(8, int((WIDTH - 16) / (0.56 * points * _EM)))  # 0.56 em: mixed text's widest
    lines: list[str] = []
    for line in text.splitlines():
        packed: list[str] = []
        for field in line.split("  "):
            joined = f"{packed[-1]}  {field}" if packed else field
            if packed and len(joined) <= fits:
                packed[-1] = joined
            else:
                packed.extend(textwrap.wrap(field, fits) or [""])
        lines.extend(packed or [""])
    return lines


def _legend_shape(
    entries: Sequence[str], handle_em: float, fit_columns: int, title: bool = False
) -> tuple[int, int]:
    """How many columns a legend of ``entries`` under a plot has, and how tall it is (pixels).

    As many columns as fit across the figure, at most ``fit_columns``, each as wide as its
    widest entry; filled column by column, the first ones a row longer, as matplotlib does.
    ``handle_em``: the handle and the space after it, in em.
    """
    if not entries:
        return 1, 0
    widths = [
        max(_text_width(line, FONT) for line in entry.splitlines()) + handle_em * FONT * _EM
        for entry in entries
    ]
    sizes = [entry.count("\n") + 1 for entry in entries]
    for ncols in range(min(fit_columns, len(entries)), 0, -1):
        rows, longer = divmod(len(entries), ncols)  # the first `longer` columns: a row more
        columns, start = [], 0
        for index in range(ncols):
            end = start + rows + (index < longer)
            columns.append(range(start, end))
            start = end
        across = sum(max(widths[i] for i in c) for c in columns) + (ncols - 1) * FONT * _EM
        if across <= WIDTH - 16 or ncols == 1:
            break
    lines = max(sum(sizes[i] for i in c) for c in columns)
    gaps = 0.5 * (max(len(c) for c in columns) - 1) * FONT * _EM  # label spacing, 0.5 em
    return ncols, _text_height(lines + title, FONT) + math.ceil(gaps) + 4


def _legend_text(group: GroupAutocorrelation) -> str:
    name = _short(group.group)
    if not np.isfinite(group.mean_acf).any():
        text = f"{name}  constant"
    elif group.tau is not None:
        text = f"{name}  τ={group.tau:.3g}"
    else:
        text = f"{name}  r₁={group.rho1_median:.2f}"
    if group.non_finite_elements:
        text += f"\n  ({group.non_finite_elements} NaN/Inf left out)"
    return text


def _short(name: str) -> str:
    """``name``, shortened in the middle to :data:`MAX_NAME` characters."""
    if len(name) <= MAX_NAME:
        return name
    keep = MAX_NAME - 1
    return f"{name[: keep - keep // 2]}…{name[-(keep // 2) :]}"


def _colour_range(values: np.ndarray) -> tuple[float, float]:
    if not values.size:
        return 0.0, 1.0
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def _rgb(colour: str) -> tuple[float, float, float]:
    return tuple(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


def _dot(label: str, colour: str) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=colour, marker="o", markersize=7, linestyle="", label=label)
