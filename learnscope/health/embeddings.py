"""Findings about embedding collapse and oversmoothing, from ``learnscope.collapse`` metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from learnscope.collapse import judge_collapse
from learnscope.records import Finding

_GRAPH_VERDICT_KEYS = ("mad", "rayleigh_quotient", "mad_global")


def collapse_findings(
    metrics: Mapping[str, float],
    module: str,
    step: int,
    *,
    num_rows: int,
    dim: int,
    graph_mad: Sequence[float] | Tensor | None = None,
    graph_ids: Sequence[Any] | None = None,
    **thresholds: float,
) -> list[Finding]:
    """Turn collapse metrics into an ``embedding-collapse`` and an ``oversmoothing`` finding.

    Args:
        metrics: From :func:`learnscope.collapse.collapse_metrics`.
        module: The embedding module the rows came from (the findings' subject).
        step: The training step.
        num_rows: Rows the metrics were computed on.
        dim: Embedding dimension.
        graph_mad: Each graph's MAD (:func:`learnscope.collapse.per_graph_mad`), so that
            oversmoothing is judged graph by graph.
        graph_ids: One id per value of ``graph_mad``, named in the finding.
        **thresholds: Passed to :func:`learnscope.collapse.judge_collapse`.

    Returns:
        At most one finding per code, each message joining the verdicts that fired.

    Example:
        >>> import torch
        >>> from learnscope.collapse import collapse_metrics
        >>> same = torch.ones(64, 8) + 1e-6 * torch.randn(64, 8)
        >>> findings = collapse_findings(collapse_metrics(same), "encoder", 3, num_rows=64, dim=8)
        >>> [(f.code, f.subject) for f in findings]
        [('embedding-collapse', 'encoder')]
    """
    verdicts = judge_collapse(
        metrics, num_rows=num_rows, dim=dim, graph_mad=graph_mad, graph_ids=graph_ids, **thresholds
    )
    smooth = [v for v in verdicts if v.split()[0] in _GRAPH_VERDICT_KEYS]
    collapse = [v for v in verdicts if v.split()[0] not in _GRAPH_VERDICT_KEYS]
    findings = []
    for code, found in (("embedding-collapse", collapse), ("oversmoothing", smooth)):
        if found:
            text = "; ".join(found)
            findings.append(
                Finding(code, module, f"{text} (over {num_rows} rows of dimension {dim})", step)
            )
    return findings
