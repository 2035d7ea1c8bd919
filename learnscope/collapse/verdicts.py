"""Verdicts on collapse metrics: which heuristics fire, as objects and in words.

:func:`collapse_verdicts` compares the metrics of
:func:`learnscope.collapse.metrics.collapse_metrics` with the thresholds of a
:class:`CollapseThresholds` and returns one :class:`Verdict` per heuristic that fires: the metric,
its value, the threshold, what it means and its kind (``"collapse"`` or ``"oversmoothing"``).
:func:`judge_collapse` gives the same verdicts as text, with the thresholds as keyword arguments.

Example:
    >>> import torch
    >>> from learnscope.collapse.metrics import collapse_metrics
    >>> rank_one = torch.randn(256, 1) * torch.randn(1, 8)
    >>> verdicts = collapse_verdicts(collapse_metrics(rank_one), num_rows=256, dim=8)
    >>> [(verdict.metric, verdict.kind) for verdict in verdicts]
    [('rankme', 'collapse'), ('effective_rank', 'collapse')]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any, Literal, TypeAlias

import torch
from torch import Tensor

__all__ = [
    "CollapseThresholds",
    "Verdict",
    "VerdictKind",
    "collapse_verdicts",
    "enough_rows",
    "judge_collapse",
]

VerdictKind: TypeAlias = Literal["collapse", "oversmoothing"]

# Graph ids named in an oversmoothing verdict, lowest MAD first.
_IDS_NAMED = 10
_FRACTIONS = frozenset({"min_rank_fraction", "max_dead_dim_fraction", "max_oversmoothed_fraction"})
_MAD_GLOBAL_MEANING = (
    "the nodes of each of these graphs all point the same way (oversmoothing: too many "
    "message-passing layers, or too little to tell nodes apart)"
)


def enough_rows(num_rows: int, dim: int, factor: float = 4.0) -> bool:
    """Say whether there are enough rows for RankMe and the effective rank to mean something.

    With few rows the singular values of even isotropic noise spread out, and the ranks read
    low. They need N several times D; the default asks for four times.

    Args:
        num_rows: Number of embedding rows N.
        dim: Embedding dimension D.
        factor: Rows needed per dimension.

    Returns:
        Whether ``num_rows >= factor * dim``.

    Example:
        >>> enough_rows(512, 128), enough_rows(256, 128)
        (True, False)
    """
    return num_rows >= factor * dim


@dataclass(frozen=True)
class Verdict:
    """One heuristic that fired on a collapse metric.

    Attributes:
        metric: The metric's key, as in :func:`~learnscope.collapse.metrics.collapse_metrics`.
        value: Its value; for a verdict on graphs one by one (``per_graph``), the lowest
            graph's.
        threshold: The threshold it crossed.
        meaning: What that says about the embeddings, in words.
        kind: ``"collapse"`` (the embeddings lost their spread) or ``"oversmoothing"`` (node
            embeddings of a graph point the same way).
        above: Whether it fires above the threshold (dead dimensions) rather than below.
        detail: What the comparison is over, said after the threshold, e.g. ``"in 2 of 8
            graphs (lowest 0.002, ...)"``.
        per_graph: Whether it judges graphs one by one (``detail`` then says which and the
            lowest value, so the message does not repeat ``value``).

    Example:
        >>> verdict = Verdict("cosine_spread", 0.002, 0.01, "the embeddings all point the same way")
        >>> str(verdict), verdict.kind
        ('cosine_spread 0.002 < 0.01: the embeddings all point the same way', 'collapse')
    """

    metric: str
    value: float
    threshold: float
    meaning: str
    kind: VerdictKind = "collapse"
    above: bool = False
    detail: str = ""
    per_graph: bool = False

    @property
    def message(self) -> str:
        """The verdict in words, starting with the metric's key (as :func:`judge_collapse`).

        Example:
            >>> Verdict("dead_dim_fraction", 0.5, 0.25, "many are constant", above=True).message
            'dead_dim_fraction 0.5 > 0.25: many are constant'
        """
        value = "" if self.per_graph else f" {self.value:.3g}"
        comparison = ">" if self.above else "<"
        detail = f" {self.detail}" if self.detail else ""
        return f"{self.metric}{value} {comparison} {self.threshold:.3g}{detail}: {self.meaning}"

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class CollapseThresholds:
    """The thresholds of the collapse and oversmoothing heuristics, checked when made.

    The defaults are heuristics chosen so that healthy embeddings stay quiet; what each one
    judges, and the measurements behind the defaults, are in :func:`judge_collapse`.

    Attributes:
        min_rows_per_dim: Rows per dimension needed before judging the ranks.
        min_rank_fraction: Fraction of ``min(N, D)`` below which a rank is collapsed.
        min_rank: Rank below which one direction dominates, whatever N and D.
        min_normalized_spread: Lowest healthy normalised spread (isotropic: about 1).
        min_cosine_spread: Lowest healthy cosine spread (isotropic: about 1).
        max_dead_dim_fraction: Highest healthy fraction of dead dimensions.
        min_mad: Lowest healthy MAD (random features: about 1).
        min_rayleigh_quotient: Lowest healthy Rayleigh quotient (random features: about 2E/N).
        min_mad_global: Lowest healthy MAD over the node pairs of a graph.
        max_oversmoothed_fraction: Largest fraction of graphs below ``min_mad_global`` that
            gives no verdict.

    Raises:
        ValueError: A threshold is not a finite number >= 0, or a fraction
            (``min_rank_fraction``, ``max_dead_dim_fraction``, ``max_oversmoothed_fraction``)
            is above 1.

    Example:
        >>> CollapseThresholds(min_mad_global=0.02).min_mad_global
        0.02
        >>> CollapseThresholds(max_oversmoothed_fraction=2)
        Traceback (most recent call last):
        ...
        ValueError: max_oversmoothed_fraction must be a fraction in [0, 1], got 2
    """

    min_rows_per_dim: float = 4.0
    min_rank_fraction: float = 0.1
    min_rank: float = 1.5
    min_normalized_spread: float = 0.1
    min_cosine_spread: float = 0.01
    max_dead_dim_fraction: float = 0.25
    min_mad: float = 0.001
    min_rayleigh_quotient: float = 0.01
    min_mad_global: float = 0.01
    max_oversmoothed_fraction: float = 0.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            number = isinstance(value, Real) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value < 0:
                raise ValueError(f"{field.name} must be a finite number >= 0, got {value!r}")
            if field.name in _FRACTIONS and value > 1:
                raise ValueError(f"{field.name} must be a fraction in [0, 1], got {value!r}")
            object.__setattr__(self, field.name, float(value))

    @classmethod
    def from_mapping(cls, thresholds: Mapping[str, Any]) -> CollapseThresholds:
        """The thresholds named in ``thresholds`` (such as ``collapse_thresholds={...}``).

        Args:
            thresholds: Threshold names and values; the others keep their defaults.

        Raises:
            ValueError: A name is not a threshold (the message lists them), or a value is bad.

        Example:
            >>> CollapseThresholds.from_mapping({"min_mad": 0.01}).min_mad
            0.01
        """
        known = sorted(field.name for field in dataclasses.fields(cls))
        unknown = sorted(set(thresholds) - set(known))
        if unknown:
            raise ValueError(f"unknown collapse_thresholds {unknown}; known: {known}")
        return cls(**thresholds)


# judge_collapse's keywords that are thresholds (its signature spells them out for users).
_THRESHOLD_NAMES = tuple(field.name for field in dataclasses.fields(CollapseThresholds))


def collapse_verdicts(
    metrics: Mapping[str, float],
    *,
    num_rows: int,
    dim: int,
    graph_mad: Sequence[float] | Tensor | None = None,
    graph_ids: Sequence[Any] | None = None,
    thresholds: CollapseThresholds | None = None,
) -> list[Verdict]:
    """The heuristics that fire on ``metrics``, as :class:`Verdict` objects.

    The heuristics are those of :func:`judge_collapse`, in the same order; a metric that is
    missing or NaN is skipped.

    Args:
        metrics: The output of :func:`~learnscope.collapse.metrics.collapse_metrics`.
        num_rows: Number of rows N the metrics were computed on.
        dim: Embedding dimension D.
        graph_mad: Each graph's MAD, from :func:`~learnscope.collapse.metrics.per_graph_mad`, to
            judge oversmoothing graph by graph.
        graph_ids: One id per value of ``graph_mad`` (``None`` for an unknown one).
        thresholds: The thresholds (default: :class:`CollapseThresholds`' defaults).

    Returns:
        One verdict per heuristic that fires; empty when nothing looks wrong.

    Raises:
        ValueError: ``num_rows`` is negative or ``dim`` is below 1, or ``graph_ids`` has not
            one id per value of ``graph_mad``.

    Example:
        >>> metrics = {"cosine_spread": 0.3, "rayleigh_quotient": 0.5}
        >>> strict = CollapseThresholds(min_cosine_spread=0.5, min_rayleigh_quotient=1.0)
        >>> verdicts = collapse_verdicts(metrics, num_rows=9, dim=2, thresholds=strict)
        >>> [(verdict.metric, verdict.kind) for verdict in verdicts]
        [('cosine_spread', 'collapse'), ('rayleigh_quotient', 'oversmoothing')]
    """
    if num_rows < 0 or dim < 1:
        raise ValueError(f"need num_rows >= 0 and dim >= 1, got num_rows={num_rows}, dim={dim}")
    limits = thresholds if thresholds is not None else CollapseThresholds()
    verdicts = _rank_verdicts(metrics, num_rows, dim, limits)
    lows: dict[str, tuple[float, str, VerdictKind]] = {
        "normalized_spread": (
            limits.min_normalized_spread,
            "the normalised embeddings barely vary",
            "collapse",
        ),
        "cosine_spread": (
            limits.min_cosine_spread,
            "the embeddings all point the same way",
            "collapse",
        ),
        "mad": (
            limits.min_mad,
            "neighbouring nodes point the same way (oversmoothing)",
            "oversmoothing",
        ),
        "rayleigh_quotient": (
            limits.min_rayleigh_quotient,
            "embeddings barely change across edges (oversmoothing)",
            "oversmoothing",
        ),
    }
    for key, (threshold, meaning, kind) in lows.items():
        value = metrics.get(key, math.nan)
        if value < threshold:
            verdicts.append(Verdict(key, value, threshold, meaning, kind))
    verdicts += _mad_global_verdicts(metrics, graph_mad, graph_ids, limits)
    dead = metrics.get("dead_dim_fraction", math.nan)
    if dead > limits.max_dead_dim_fraction:
        verdicts.append(
            Verdict(
                "dead_dim_fraction",
                dead,
                limits.max_dead_dim_fraction,
                "many dimensions are (nearly) constant",
                above=True,
            )
        )
    return verdicts


def judge_collapse(
    metrics: Mapping[str, float],
    *,
    num_rows: int,
    dim: int,
    graph_mad: Sequence[float] | Tensor | None = None,
    graph_ids: Sequence[Any] | None = None,
    min_rows_per_dim: float = 4.0,
    min_rank_fraction: float = 0.1,
    min_rank: float = 1.5,
    min_normalized_spread: float = 0.1,
    min_cosine_spread: float = 0.01,
    max_dead_dim_fraction: float = 0.25,
    min_mad: float = 0.001,
    min_rayleigh_quotient: float = 0.01,
    min_mad_global: float = 0.01,
    max_oversmoothed_fraction: float = 0.0,
) -> list[str]:
    """Turn collapse metrics into verdicts: which heuristics fire, in words.

    Thresholds are heuristics chosen so that healthy embeddings stay quiet (a false alarm costs
    more than a miss); tune them per model. A metric that is missing or NaN is skipped, and so
    are the graph heuristics without graph metrics. Raw Dirichlet energy is never judged.

    * ``rankme`` and ``effective_rank`` fire below ``max(min_rank_fraction * min(N, D),
      min_rank)``, only when :func:`enough_rows` holds with ``min_rows_per_dim`` and that
      threshold is below ``min(N, D)``.
    * ``normalized_spread`` fires below ``min_normalized_spread``, ``cosine_spread`` below
      ``min_cosine_spread``, ``dead_dim_fraction`` above ``max_dead_dim_fraction``. Healthy
      embeddings measured per training step: a small CNN's pooled features after ReLU reach a
      cosine spread of 0.08, a tiny BERT's token states 0.24, and the node embeddings of a
      healthy 2-layer GCN (below) 0.02, as low as the nodes' ``mad_global``; hence the
      default ``min_cosine_spread`` of 0.01.
    * ``mad`` fires below ``min_mad`` and ``rayleigh_quotient`` below ``min_rayleigh_quotient``,
      both over the whole batch (oversmoothing).
    * ``mad_global`` (oversmoothing) is judged per graph: with ``graph_mad`` (from
      :func:`per_graph_mad`) it fires when the graphs whose MAD is below ``min_mad_global`` are
      more than ``max_oversmoothed_fraction`` (by default 0: any one) of the graphs of two or
      more nodes, and says how many of how many, the lowest value, the mean over graphs and,
      with ``graph_ids``, those graphs' ids (lowest first, at most 10). The mean over graphs
      is not what is judged: a batch whose mean is healthy can hold oversmoothed graphs.
      Without ``graph_mad`` the lowest graph's value, ``mad_global_min``, is judged
      (``mad_global`` when the metrics have no ``mad_global_min``); ``max_oversmoothed_fraction``
      then cannot apply. Per-graph values are not judged when the metrics' ``mad_global`` is
      NaN (no edge between distinct nodes). ``mad_global`` is the metric that catches deep
      graph convolutions, whose rows become proportional rather than equal. Measured on PyG
      ``GCNConv`` stacks (ReLU between layers) on Zachary's karate club, one graph of 34
      nodes, at every step (hidden dimension 16 or 64, Adam at 0.01 or SGD at 0.05; 20 seeds
      each for 2 layers, 10 for 32): 32 layers gave at most 9.3e-4 at initialisation and
      0.014 over the first 15 steps; 2 layers gave 0.19 to 0.73 at initialisation, 0.37 to
      0.94 after 600 steps, and never less than 0.021 (SGD, around step 130, when a shared
      offset briefly points every node the same way: a mean pairwise cosine of 0.98). The
      default ``min_mad_global``, 0.01, keeps a factor of 2 from that healthy minimum and
      catches the deep stack at initialisation with a factor of 10 or more. The neighbour
      ``mad`` is small in healthy models too, since training pulls neighbours of the same class
      together (down to 0.011 above); its default ``min_mad`` is 0.001. On batches of 8
      molecule-like graphs of 5 to 24 nodes (random trees, every third in two fragments;
      hidden dimension 16, Adam at 0.01, 5 seeds, 6 steps each), 16 layers left 5 to 8 of the 8
      graphs below 0.01 at every step (lowest 0 to 0.0035) while the mean over graphs reached
      0.014 at initialisation; 2 layers never gave a graph below 0.14. Graphs whose nodes are
      all equivalent by symmetry (an elemental crystal with identical atoms) rightly give 0:
      where a data set holds such graphs, raise ``max_oversmoothed_fraction`` or look at the
      named ids.

    Args:
        metrics: The output of :func:`collapse_metrics`.
        num_rows: Number of rows N the metrics were computed on.
        dim: Embedding dimension D.
        graph_mad: Each graph's MAD, from :func:`per_graph_mad` (NaN for a graph of one node),
            to judge oversmoothing graph by graph.
        graph_ids: One id per value of ``graph_mad`` (``None`` for an unknown one), named in
            the verdict.
        min_rows_per_dim: The thresholds, from here to ``max_oversmoothed_fraction``: each is
            the :class:`CollapseThresholds` field of that name, with its default and meaning.
        min_rank_fraction: See ``min_rows_per_dim``.
        min_rank: See ``min_rows_per_dim``.
        min_normalized_spread: See ``min_rows_per_dim``.
        min_cosine_spread: See ``min_rows_per_dim``.
        max_dead_dim_fraction: See ``min_rows_per_dim``.
        min_mad: See ``min_rows_per_dim``.
        min_rayleigh_quotient: See ``min_rows_per_dim``.
        min_mad_global: See ``min_rows_per_dim``.
        max_oversmoothed_fraction: See ``min_rows_per_dim`` (needs ``graph_mad``).

    Returns:
        One message per heuristic that fires, each starting with the metric's key; empty when
        nothing looks wrong. They are the texts of :func:`collapse_verdicts`' verdicts.

    Raises:
        ValueError: ``num_rows`` is negative or ``dim`` is below 1, ``graph_ids`` has not
            one id per value of ``graph_mad``, or a threshold is not a finite number >= 0 (or
            a fraction above 1): see :class:`CollapseThresholds`.

    Example:
        >>> import torch
        >>> from learnscope.collapse.metrics import collapse_metrics
        >>> rank_one = torch.randn(256, 1) * torch.randn(1, 8)
        >>> verdicts = judge_collapse(collapse_metrics(rank_one), num_rows=256, dim=8)
        >>> [verdict.split()[0] for verdict in verdicts]
        ['rankme', 'effective_rank']
        >>> metrics = {"mad_global": 0.5, "mad_global_min": 0.002}
        >>> judge_collapse(metrics, num_rows=40, dim=8, graph_mad=[0.002, 0.9, 0.6, 0.5])
        ['mad_global < 0.01 in 1 of 4 graphs (lowest 0.002, mean over graphs 0.5): ...']
    """
    judged = dict(locals())  # the arguments by name: the thresholds go into one dataclass
    thresholds = CollapseThresholds(**{name: judged.pop(name) for name in _THRESHOLD_NAMES})
    verdicts = collapse_verdicts(**judged, thresholds=thresholds)
    return [verdict.message for verdict in verdicts]


def _rank_verdicts(
    metrics: Mapping[str, float], num_rows: int, dim: int, limits: CollapseThresholds
) -> list[Verdict]:
    """Verdicts on ``rankme`` and ``effective_rank`` (none when the rows are too few)."""
    largest = min(num_rows, dim)
    threshold = max(limits.min_rank_fraction * largest, limits.min_rank)
    if not enough_rows(num_rows, dim, limits.min_rows_per_dim) or threshold >= largest:
        return []
    meanings = {
        "rankme": "the embeddings span few directions (dimensional collapse)",
        "effective_rank": "the differences between embeddings span few directions "
        "(dimensional collapse)",
    }
    detail = f"(of at most min(N, D) = {largest})"
    verdicts = []
    for key, meaning in meanings.items():
        value = metrics.get(key, math.nan)
        if value < threshold:
            verdicts.append(Verdict(key, value, threshold, meaning, detail=detail))
    return verdicts


def _mad_global_verdicts(
    metrics: Mapping[str, float],
    graph_mad: Sequence[float] | Tensor | None,
    graph_ids: Sequence[Any] | None,
    limits: CollapseThresholds,
) -> list[Verdict]:
    """The ``mad_global`` verdict: graph by graph with ``graph_mad``, else the lowest graph."""
    threshold = limits.min_mad_global
    if graph_mad is None:
        mean = metrics.get("mad_global", math.nan)
        lowest = metrics.get("mad_global_min", math.nan)
        if math.isnan(lowest):  # metrics without per-graph figures: the one value there is
            if not mean < threshold:
                return []
            return [Verdict("mad_global", mean, threshold, _MAD_GLOBAL_MEANING, "oversmoothing")]
        if not lowest < threshold:
            return []
        detail = f"in at least one graph (lowest {lowest:.3g}, mean over graphs {mean:.3g})"
        return [_graph_verdict(lowest, threshold, detail)]
    if math.isnan(metrics.get("mad_global", 0.0)):
        return []  # the metrics found nothing to measure (no edge between distinct nodes)
    values = torch.as_tensor(graph_mad, dtype=torch.float64).reshape(-1).cpu()
    if graph_ids is not None and len(graph_ids) != len(values):
        raise ValueError(
            f"graph_ids has {len(graph_ids)} ids but graph_mad has {len(values)} values; "
            "give one id per graph"
        )
    judged = ~values.isnan()
    total = int(judged.sum())
    low = (judged & (values < threshold)).nonzero().reshape(-1)
    if total == 0 or len(low) == 0 or len(low) / total <= limits.max_oversmoothed_fraction:
        return []
    low = low[values[low].argsort(stable=True)].tolist()
    plural = "s" if total != 1 else ""
    mean = float(values[judged].mean())
    lowest = float(values[low[0]])
    details = f"lowest {lowest:.3g}, mean over graphs {mean:.3g}"
    if graph_ids is not None:
        named = [graph_ids[i] for i in low if graph_ids[i] is not None]
        if named:
            more = f" and {len(named) - _IDS_NAMED} more" if len(named) > _IDS_NAMED else ""
            details += "; ids " + ", ".join(str(i) for i in named[:_IDS_NAMED]) + more
    detail = f"in {len(low)} of {total} graph{plural} ({details})"
    return [_graph_verdict(lowest, threshold, detail)]


def _graph_verdict(lowest: float, threshold: float, detail: str) -> Verdict:
    """An oversmoothing verdict on graphs one by one, the lowest graph's MAD as its value."""
    return Verdict(
        "mad_global",
        lowest,
        threshold,
        _MAD_GLOBAL_MEANING,
        "oversmoothing",
        detail=detail,
        per_graph=True,
    )
