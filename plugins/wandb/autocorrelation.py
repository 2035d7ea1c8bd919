"""How wandb shows an autocorrelation analysis: per kind a line chart; scalars.

One ``run.log`` call per analysis holds the scalars
``~learnscope/autocorrelation/{kind}/{group}/...`` (see ``AutocorrelationSummary.to_scalars``);
per kind the mean ACF against lag as an interactive ``wandb.plot.line_series`` chart
``~learnscope/autocorrelation/{kind}/acf_lines``; and the trainer step under
``trainer/global_step``, the x axis Lightning's ``WandbLogger`` uses. The picture TensorBoard
shows, the mean ACF with its white-noise band, comes as an image record drawn by the writers'
picture stage (:mod:`learnscope.plugins.pipeline.pictures`), logged under the same tag
``~learnscope/autocorrelation/{kind}/acf`` at the same step.
"""

from __future__ import annotations

import math
from typing import Any

from learnscope.records import AutocorrelationSummary
from learnscope.tags import AUTOCORRELATION

_KIND_WORDS = {"params": "parameters", "grads": "gradients"}


def acf_series(
    summary: AutocorrelationSummary, kind: str
) -> tuple[list[list[int]], list[list[float]], list[str]]:
    """The lines of one kind's chart: per group the lags, the mean ACF there, and the group.

    Non-finite points are left out (a group whose elements all stayed constant has no
    line), and every line's lags and values have the same length, because
    ``wandb.plot.line_series`` silently truncates the longer of the two.

    Args:
        summary: The analysis.
        kind: ``"params"`` or ``"grads"``.

    Returns:
        ``(xs, ys, keys)`` for ``wandb.plot.line_series``.

    Example:
        >>> import numpy as np
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.5]), -0.5, -0.6, -0.4, None)
        >>> acf_series(AutocorrelationSummary(3, (1,), (g,)), "grads")
        ([[0, 1]], [[1.0, -0.5]], ['head'])
    """
    xs: list[list[int]] = []
    ys: list[list[float]] = []
    keys: list[str] = []
    for group in summary.groups:
        if group.kind != kind:
            continue
        points = [(lag, float(v)) for lag, v in enumerate(group.mean_acf) if math.isfinite(v)]
        if not points:
            continue
        xs.append([lag for lag, _ in points])
        ys.append([value for _, value in points])
        keys.append(group.group)
    return xs, ys, keys


def autocorrelation_log(
    wandb: Any, summary: AutocorrelationSummary, step_key: str
) -> dict[str, Any]:
    """The dict to ``run.log`` for one analysis: scalars, pictures, charts and the trainer step.

    Args:
        wandb: The ``wandb`` module.
        summary: The analysis.
        step_key: The key of the trainer step, ``"trainer/global_step"``.

    Returns:
        Key to value, every key but ``step_key`` starting with ``~learnscope/autocorrelation/``.

    Example:
        >>> import numpy as np, wandb
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("head", "grads", np.array([1.0, -0.5]), -0.5, -0.6, -0.4, None)
        >>> logged = autocorrelation_log(wandb, AutocorrelationSummary(3, (1,), (g,)), "step")
        >>> sorted(logged)[1]
        '~learnscope/autocorrelation/grads/acf_lines'
        >>> logged["step"]
        3
    """
    logged: dict[str, Any] = dict(summary.to_scalars())
    for kind in dict.fromkeys(g.kind for g in summary.groups):
        xs, ys, keys = acf_series(summary, kind)
        if not keys:
            continue
        if any(len(x) != len(y) for x, y in zip(xs, ys, strict=True)):
            raise ValueError(f"{kind}: line lengths differ; line_series would truncate them")
        logged[f"{AUTOCORRELATION}/{kind}/acf_lines"] = wandb.plot.line_series(
            xs,
            ys,
            keys=keys,
            title=f"mean ACF of {_KIND_WORDS.get(kind, kind)} (step {summary.step})",
            xname="lag",
        )
    logged[step_key] = summary.step
    return logged
