"""Findings about embedding collapse and oversmoothing, from the metrics of learnscope.collapse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from learnscope.collapse.verdicts import CollapseThresholds, collapse_verdicts
from learnscope.records import Finding


def collapse_findings(
    metrics: Mapping[str, float],
    module: str,
    step: int,
    *,
    num_rows: int,
    dim: int,
    graph_mad: Sequence[float] | Tensor | None = None,
    graph_ids: Sequence[Any] | None = None,
    steps: tuple[int, int] | None = None,
    **thresholds: float,
) -> list[Finding]:
    """Turn collapse metrics into an ``embedding-collapse`` and an ``oversmoothing`` finding.

    Args:
        metrics: From :func:`learnscope.collapse.metrics.collapse_metrics`.
        module: The embedding module the rows came from (the findings' subject).
        step: The training step.
        num_rows: Rows the metrics were computed on.
        dim: Embedding dimension.
        graph_mad: Each graph's MAD (:func:`learnscope.collapse.metrics.per_graph_mad`), so that
            oversmoothing is judged graph by graph.
        graph_ids: One id per value of ``graph_mad``, named in the finding.
        steps: The first and last training step the rows came from, when they span several
            (named in the message).
        **thresholds: Thresholds of :class:`~learnscope.collapse.verdicts.CollapseThresholds`
            (the keywords of :func:`learnscope.collapse.metrics.judge_collapse`).

    Returns:
        At most one finding per code (each verdict's kind), each message joining the verdicts
        of that kind.

    Raises:
        ValueError: An unknown threshold name or a bad threshold value.

    Example:
        >>> import torch
        >>> from learnscope.collapse.metrics import collapse_metrics
        >>> same = torch.ones(64, 8) + 1e-6 * torch.randn(64, 8)
        >>> findings = collapse_findings(collapse_metrics(same), "encoder", 3, num_rows=64, dim=8)
        >>> [(f.code, f.subject) for f in findings]
        [('embedding-collapse', 'encoder')]
    """
    verdicts = collapse_verdicts(
        metrics,
        num_rows=num_rows,
        dim=dim,
        graph_mad=graph_mad,
        graph_ids=graph_ids,
        thresholds=CollapseThresholds.from_mapping(thresholds),
    )
    rows = f"over {num_rows} rows of dimension {dim}"
    if steps is not None and steps[0] != steps[1]:
        rows += f", from steps {steps[0]}-{steps[1]}"
    findings = []
    for code, kind in (("embedding-collapse", "collapse"), ("oversmoothing", "oversmoothing")):
        found = [verdict.message for verdict in verdicts if verdict.kind == kind]
        if found:
            findings.append(Finding(code, module, f"{'; '.join(found)} ({rows})", step))
    return findings
