"""How TensorBoard shows an autocorrelation analysis: scalars, Custom Scalars charts, images.

* Scalars ``autocorrelation/{kind}/{group}/lag_{k}``, ``.../tau``, ``.../rho1_median``,
  ``.../rho1_q25``, ``.../rho1_q75`` (see ``AutocorrelationSummary.to_scalars``).
* A Custom Scalars category per kind, ``autocorrelation/{kind}``, with per group a multiline
  chart of the chosen lags over steps and a margin chart of the lag-1 median with its
  inter-quartile band, plus one chart of every group's tau once a tau has been logged. Charts
  are made from the scalars actually logged, so every chart's tags match logged scalars; the
  layout is merged with every other chart of the run (``TensorBoardWriter.add_charts``).
* An image per kind of the mean ACF against lag, one curve per group
  (:func:`learnscope.acf_chart.acf_images`), in the Images tab.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from learnscope.acf_chart import acf_images
from learnscope.plugins.tensorboard_layout import Chart, margin, multiline
from learnscope.records import AutocorrelationSummary

if TYPE_CHECKING:
    from learnscope.plugins.tensorboard import TensorBoardWriter

PREFIX = "autocorrelation"


def autocorrelation_charts(
    summary: AutocorrelationSummary, scalars: Mapping[str, float], prefix: str = PREFIX
) -> dict[str, dict[str, Chart]]:
    """The Custom Scalars charts (category -> title -> chart) for the logged ``scalars``.

    A group gets its charts only when its scalars were logged (a group whose elements all
    stayed constant has none), and always with every lag of ``summary.lags``, so the same
    chart is asked for at every analysis and the layout is written again only when a chart
    is new.

    Args:
        summary: The analysis.
        scalars: What was logged for it, ``summary.to_scalars(prefix)``.
        prefix: The first component of the tags.

    Returns:
        Charts for :meth:`TensorBoardWriter.add_charts`.

    Example:
        >>> import numpy as np
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.4]), -0.4, -0.5, -0.3,
        ...                          None)
        >>> summary = AutocorrelationSummary(9, (1,), (g,))
        >>> charts = autocorrelation_charts(summary, summary.to_scalars())
        >>> for title, chart in charts["autocorrelation/grads"].items():
        ...     print(title, chart)
        head: ACF at lags 1 ['Multiline', ['autocorrelation/grads/head/lag_1$']]
        head: lag-1 median and quartiles ['Margin', ['autocorrelation/grads/head/rho1_median', \
'autocorrelation/grads/head/rho1_q25', 'autocorrelation/grads/head/rho1_q75']]
    """
    charts: dict[str, dict[str, Chart]] = {}
    lag_words = ", ".join(str(lag) for lag in summary.lags)
    for group in summary.groups:
        base = f"{prefix}/{group.kind}/{group.group}"
        category = charts.setdefault(f"{prefix}/{group.kind}", {})
        lag_tags = [f"{base}/lag_{lag}" for lag in summary.lags]
        if all(tag in scalars for tag in lag_tags):
            category[f"{group.group}: ACF at lags {lag_words}"] = multiline(lag_tags)
        band = [f"{base}/rho1_median", f"{base}/rho1_q25", f"{base}/rho1_q75"]
        if all(tag in scalars for tag in band):
            category[f"{group.group}: lag-1 median and quartiles"] = margin(*band)
        if f"{base}/tau" in scalars:
            any_tau = re.escape(f"{prefix}/{group.kind}/") + r"[^/]+/tau$"
            category["integrated autocorrelation time (steps)"] = ["Multiline", [any_tau]]
    return {name: titled for name, titled in charts.items() if titled}


def write_autocorrelation(writer: TensorBoardWriter, summary: AutocorrelationSummary) -> None:
    """Write ``summary`` as scalars, Custom Scalars charts and one ACF image per kind.

    Args:
        writer: The run's writer.
        summary: The analysis.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from learnscope.plugins.tensorboard import TensorBoardWriter
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "params", 0.9 ** np.arange(3), 0.9, 0.8, 0.95, None)
        >>> writer = TensorBoardWriter(tempfile.mkdtemp())
        >>> write_autocorrelation(writer, AutocorrelationSummary(5, (1, 2), (g,)))
        >>> writer.close()
    """
    scalars = summary.to_scalars(PREFIX)
    writer.write_scalars(scalars, summary.step)
    charts = autocorrelation_charts(summary, scalars)
    if charts:
        writer.add_charts(charts)
    for image in acf_images(summary, PREFIX):
        writer.write_image(image)
