"""Pictures of the mean autocorrelation against lag, drawn with numpy alone.

Dashboards chart scalars over steps, so the whole curve of an analysis (the mean ACF at every
lag, one curve per module group) is shown as an image instead: one per kind (parameters,
gradients) and analysis, on a fixed ``-1..1`` scale so that the step slider compares like with
like. Hand the images to a writer's ``write_image``.

Example:
    >>> import numpy as np
    >>> from learnscope.records import AutocorrelationSummary, GroupAutocorrelation
    >>> acf = 0.8 ** np.arange(21)
    >>> group = GroupAutocorrelation("encoder", "params", acf, 0.8, 0.7, 0.9, tau=9.0)
    >>> [image.tag for image in acf_images(AutocorrelationSummary(99, (1, 5), (group,)))]
    ['autocorrelation/params/acf']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from learnscope.canvas import BLACK, GREY, Axes, Canvas, palette, text_width
from learnscope.records import AutocorrelationSummary, GroupAutocorrelation, RenderedImage

__all__ = ["acf_chart", "acf_images"]

_PLOT_WIDTH = 400
_PLOT_HEIGHT = 240
_LEFT = 40  # room for the y tick labels
_TOP = 28  # room for the title
_BOTTOM = 30  # room for the x tick labels and the axis name
_LEGEND = 230
_TEXT = 2  # font scale of the title and legend
_ROW = 16  # legend row height
_Y_TICKS = (-1.0, -0.5, 0.0, 0.5, 1.0)
_KIND_WORDS = {"params": "parameters", "grads": "gradients"}


def acf_chart(
    groups: Sequence[GroupAutocorrelation], title: str = "", lags: Sequence[int] = ()
) -> np.ndarray:
    """Draw the mean ACF of each group against lag, with a legend, as an RGB image.

    The y axis always spans -1 to 1, with a line at zero; the x axis spans lag 0 to the
    largest lag of any group. Each group's legend entry shows its integrated
    autocorrelation time (``tau``) when known, else its median lag-1 autocorrelation. A
    group whose elements all stayed constant (an all-NaN ACF) gets a legend entry saying so
    and no curve.

    Args:
        groups: The groups to draw, in legend order (usually one kind's groups).
        title: Written above the plot.
        lags: Lags to mark with faint vertical lines (the ones charted over steps).

    Returns:
        ``uint8 [H, W, 3]`` pixels; the height grows with the number of groups when the
        legend needs it.

    Example:
        >>> import numpy as np
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.4, 0.1]), -0.4, -0.5,
        ...                          -0.3, tau=None)
        >>> acf_chart([g], "gradients").shape
        (298, 670, 3)
    """
    max_lag = max((g.max_lag for g in groups), default=1)
    legend_height = _TOP + len(groups) * _ROW + 8
    height = max(_TOP + _PLOT_HEIGHT + _BOTTOM, legend_height)
    canvas = Canvas(_LEFT + _PLOT_WIDTH + _LEGEND, height)
    box = (_LEFT, _TOP, _LEFT + _PLOT_WIDTH, _TOP + _PLOT_HEIGHT)
    axes = Axes(canvas, box, (0.0, float(max(max_lag, 1))), (-1.0, 1.0))
    for lag in lags:
        if 0 < lag <= max_lag:
            px, py = axes.to_pixels([lag, lag], [-1.0, 1.0])
            canvas.line(px, py, (230, 230, 230))
    axes.hline(0.0, GREY)
    axes.frame(_lag_ticks(max_lag), _Y_TICKS)
    canvas.text(box[0] + _PLOT_WIDTH // 2 - text_width("lag", 1) // 2, box[3] + 16, "lag", BLACK, 1)
    canvas.text(_LEFT, 6, title, BLACK, _TEXT)
    colors = palette(len(groups))
    legend_left = box[2] + 12
    characters = (_LEGEND - 30) // text_width("x", _TEXT)
    for row, (group, color) in enumerate(zip(groups, colors, strict=True)):
        rgb = (int(color[0]), int(color[1]), int(color[2]))
        acf = np.clip(group.mean_acf, -1.0, 1.0)
        px, py = axes.to_pixels(np.arange(acf.size), acf)
        canvas.line(px, py, rgb, width=2)
        y0 = _TOP + row * _ROW
        canvas.fill(legend_left, y0, legend_left + 9, y0 + 9, rgb)
        canvas.text(legend_left + 14, y0, _legend_text(group)[:characters], BLACK, _TEXT)
    return canvas.pixels


def acf_images(
    summary: AutocorrelationSummary, prefix: str = "autocorrelation"
) -> list[RenderedImage]:
    """One :func:`acf_chart` per kind of the summary, tagged ``{prefix}/{kind}/acf``.

    Args:
        summary: One analysis.
        prefix: The first component of every tag.

    Returns:
        The images, in the order the kinds first appear in ``summary.groups``.

    Example:
        >>> import numpy as np
        >>> from learnscope.records import AutocorrelationSummary, GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.5]), -0.5, -0.6, -0.4, None)
        >>> image, = acf_images(AutocorrelationSummary(7, (1,), (g,)))
        >>> image.tag, image.step, image.pixels.dtype
        ('autocorrelation/grads/acf', 7, dtype('uint8'))
    """
    kinds = list(dict.fromkeys(g.kind for g in summary.groups))
    images = []
    for kind in kinds:
        groups = [g for g in summary.groups if g.kind == kind]
        title = f"mean ACF of {_KIND_WORDS.get(kind, kind)}, step {summary.step}"
        pixels = acf_chart(groups, title, summary.lags)
        images.append(RenderedImage(f"{prefix}/{kind}/acf", summary.step, pixels))
    return images


def _legend_text(group: GroupAutocorrelation) -> str:
    if not np.isfinite(group.mean_acf).any():
        return f"{group.group} constant"
    if group.tau is not None:
        return f"{group.group} tau={group.tau:.3g}"
    return f"{group.group} r1={group.rho1_median:.2f}"


def _lag_ticks(max_lag: int) -> list[float]:
    """About five round lags from 0 to ``max_lag``."""
    if max_lag <= 1:
        return [0.0, 1.0]
    raw = max_lag / 5
    magnitude = 10 ** np.floor(np.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [float(t) for t in np.arange(0, max_lag + step / 2, step) if t <= max_lag]
