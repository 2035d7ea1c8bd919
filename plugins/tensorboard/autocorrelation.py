"""How TensorBoard shows an autocorrelation analysis: scalars and Custom Scalars charts.

* Scalars ``~learnscope/autocorrelation/{kind}/{group}/rho1_median`` and ``.../tau``, and with
  ``all_scalars`` also ``.../lag_{k}``, ``.../rho1_q25``, ``.../rho1_q75`` (see
  ``AutocorrelationSummary.to_scalars``); the Scalars tab shows each in a chart of its own.
* Custom Scalars, one line per chart, one category per kind and module group,
  ``~learnscope/autocorrelation/{kind}/{group}``, in module order: a margin chart of the lag-1
  autocorrelation (the median over the sampled elements, with their inter-quartile band; the
  median alone when the quartiles are not logged) and, once one has been logged, a chart of
  the group's integrated autocorrelation time tau, titled with what it counts and what a value
  below 1 means.
  Custom Scalars colours lines by run and tells the lines of one run apart only by marker
  shape, so a chart of several lines cannot be read without hovering. A chart's y range is
  its own line's (and band's), so TensorBoard's default "Ignore outliers in chart scaling"
  does not cut one group's line to fit another's (it still cuts the first and last of a few
  points, and Smoothing 0.6 bends them: no setting of a writer's changes either, so the views
  and ``docs/reading.md`` say to set Smoothing to 0 and untick it). One margin chart per
  category, because TensorBoard's ``tf-dom-repeat`` shows the margin charts of a category in
  reverse order.
  Charts are made from the scalars actually logged, so every chart's tags match logged
  scalars; the layout is merged with every other chart of the run
  (``TensorBoardWriter.add_charts``), and the charts of older versions are replaced.

The picture per kind of the mean ACF against lag, one curve per group, reaches the Images tab as
an image record drawn by the writers' picture stage (:mod:`learnscope.plugins.pipeline.pictures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from learnscope.plugins.tensorboard.layout import Chart, margin, multiline
from learnscope.records import AutocorrelationSummary
from learnscope.tags import AUTOCORRELATION, ROOT

if TYPE_CHECKING:
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter

# The title of a group's tau chart: what tau counts, and what a value below 1 means (successive
# values anti-correlated: each step partly undoes the last, typical of gradients).
TAU_TITLE = "tau, steps per independent value (below 1: anti-correlated)"


def autocorrelation_charts(
    summary: AutocorrelationSummary, scalars: Mapping[str, float], prefix: str = AUTOCORRELATION
) -> dict[str, dict[str, Chart]]:
    """The Custom Scalars charts (category -> title -> chart) for the logged ``scalars``.

    A group gets its charts only when its scalars were logged (a group whose elements all
    stayed constant has none), so the same charts are asked for at every analysis and the
    layout is written again only when a chart is new. Every chart has one line, and its title
    names the group, the quantity and, for a band, what the band is.

    Args:
        summary: The analysis.
        scalars: What was logged for it, ``summary.to_scalars(prefix)``.
        prefix: The first component of the tags.

    Returns:
        Charts for :meth:`TensorBoardWriter.add_charts`, groups in the summary's (module) order.

    Example:
        >>> import numpy as np
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.4]), -0.4, -0.5, -0.3,
        ...                          2.5)
        >>> summary = AutocorrelationSummary(9, (1,), (g,))
        >>> for category, charts in autocorrelation_charts(summary, summary.to_scalars()).items():
        ...     for title, (kind, tags) in charts.items():
        ...         print(f"{category} | {title} | {kind} {len(tags)}")
        autocorrelation/grads/head | head grads: lag-1 autocorrelation, median and quartiles \
| Margin 3
        autocorrelation/grads/head | head grads: tau, steps per independent value (below 1: \
anti-correlated) | Multiline 1
    """
    charts: dict[str, dict[str, Chart]] = {}
    for group in summary.groups:
        base = f"{prefix}/{group.kind}/{group.group}"
        name = f"{group.group} {group.kind}"
        category: dict[str, Chart] = {}
        band = [f"{base}/rho1_median", f"{base}/rho1_q25", f"{base}/rho1_q75"]
        if all(tag in scalars for tag in band):
            category[f"{name}: lag-1 autocorrelation, median and quartiles"] = margin(*band)
        elif band[0] in scalars:  # few scalars (the default): the median's line
            category[f"{name}: lag-1 autocorrelation, median"] = multiline(band[:1])
        if f"{base}/tau" in scalars:
            tau = multiline([f"{base}/tau"])
            category[f"{name}: {TAU_TITLE}"] = tau
        if category:
            charts[base.removeprefix(f"{ROOT}/")] = category
    return charts


def write_autocorrelation(writer: TensorBoardWriter, summary: AutocorrelationSummary) -> None:
    """Write ``summary`` as scalars and Custom Scalars charts.

    Args:
        writer: The run's writer.
        summary: The analysis.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from learnscope.plugins.tensorboard.writer import TensorBoardWriter
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "params", 0.9 ** np.arange(3), 0.9, 0.8, 0.95, None)
        >>> writer = TensorBoardWriter(tempfile.mkdtemp())
        >>> write_autocorrelation(writer, AutocorrelationSummary(5, (1, 2), (g,)))
        >>> writer.close()
    """
    scalars = summary.to_scalars()
    writer.write_scalars(scalars, summary.step)
    charts = autocorrelation_charts(summary, scalars)
    if charts:
        writer.add_charts(charts)
