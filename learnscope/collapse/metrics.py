"""Embedding-collapse and oversmoothing metrics: pure functions of the embeddings (and graph).

For an embedding matrix Z with N rows (samples or graph nodes) and D columns (dimensions):

* ``rankme``: RankMe, the exponential of the entropy of the normalised singular values of Z,
  ``p_k = s_k / sum(s) + 1e-7`` and ``exp(-sum_k p_k log p_k)``. It runs from 1 (rank one) to
  ``min(N, D)``, and is only meaningful when N is several times D (see
  :func:`~learnscope.collapse.verdicts.enough_rows`).
* ``effective_rank``: the same on the column-centred Z, so a large offset shared by all rows
  does not hide (or fake) low-rank variation.
* ``normalized_spread``: ``sqrt(D)`` times the mean over dimensions of the standard deviation
  (population, ``ddof=0``) of the l2-normalised rows. About 1 for isotropic embeddings, 0 when
  all rows point the same way, and never above ``sqrt(cosine_spread)``. Blind to low-rank
  collapse (a rank-one embedding with rows ``+v`` and ``-v`` scores about 0.8).
* ``cosine_spread``: ``1 - |m|^2`` with ``m`` the mean of the l2-normalised rows. This is
  exactly one minus the mean cosine similarity over all N^2 ordered pairs of rows, self-pairs
  included. 1 when the directions cancel out, 0 when all rows point the same way.
* ``dead_dim_fraction``: the fraction of dimensions whose standard deviation is under 1e-3
  times the median standard deviation (the median as in numpy, the mean of the two middle
  values for even D), or exactly zero.

With a graph, ``edge_index`` of shape ``[2, E]`` (PyTorch Geometric's layout: an edge
``(edge_index[0, e], edge_index[1, e])`` goes from a source to a target node, both row
indices of Z; an undirected graph stores each edge once in each direction), and optionally
``graph_index``, each row's graph when the rows are the nodes of several graphs (PyTorch
Geometric's ``batch.batch``; rows with the same value are one graph; without it all rows are
one graph):

* ``dirichlet_energy``: ``sum_e |z_source - z_target|^2 / N``, over the stored edges (an
  undirected edge stored both ways counts twice). Scales with Z squared: never warn on it.
* ``rayleigh_quotient``: ``sum_e |z_source - z_target|^2 / |Z|_F^2``, that is
  ``N * dirichlet_energy / |Z|_F^2``. 0 when every node holds the same vector; about ``2E/N``
  (twice the mean in-degree) for features unrelated to the graph.
* ``mad``: mean average (cosine) distance. For each node with at least one neighbour (a source
  of an edge into it, self-loops ignored, repeated edges counted repeatedly), the mean of
  ``1 - cos`` to its neighbours; then the mean over those nodes. 0 when neighbours point the
  same way, about 1 for random features.
* ``mad_global``: Chen et al.'s MAD^global ("Measuring and Relieving the Over-smoothing Problem
  for Graph Neural Networks from the Topological View", AAAI 2020) of each graph, averaged
  over the graphs. A graph's MAD (:func:`per_graph_mad`) is the mean over its nodes of each
  node's mean ``1 - cos`` to every other node of the graph, connected to it or not (a graph in
  several fragments, a molecule of several parts or a crystal graph cut off at a radius, is
  still one graph), which is the mean over all its ordered pairs of distinct nodes; nodes of
  different graphs are never compared. ``mad_global`` is the plain mean of those values over
  the graphs of two or more nodes (each graph counts once, whatever its size), and
  ``mad_global_min`` the lowest of them. Computed in O(N D) from the per-graph sums of the
  l2-normalised rows. 0 when every node of a graph points the same way, whatever the lengths
  of the rows: graph convolutions with symmetric normalisation, stacked deep, make the rows
  proportional (to the square root of the degree, in the limit) rather than equal, which
  leaves the Rayleigh quotient large and the neighbour ``mad`` above its threshold while
  ``mad_global`` falls towards 0. About 1 for random features; the cosine of non-negative
  features (after a ReLU) is positive, which lowers it for healthy embeddings too.

Conventions:

* Inputs with more than two dimensions ``[..., D]`` are flattened to rows ``[-1, D]``; graph
  node indices refer to the flattened rows.
* Rows holding a NaN or an infinity are dropped first; edges touching them are dropped too and
  the remaining rows renumbered. With fewer than two finite rows a ``ValueError`` is raised.
* A zero row has cosine similarity 0 with every row (its l2-normalised form is the zero vector).
* Singular values below ``max(N, D) * eps(float64) * s_max`` count as zero. A matrix with no
  nonzero singular value (an all-zero Z, or identical rows for ``effective_rank``) has rank 1.0:
  complete collapse, the bottom of the range.
* Without an edge between two distinct nodes, ``rayleigh_quotient``, ``mad``, ``mad_global``
  and ``mad_global_min`` are NaN (there is nothing to measure); with ``Z == 0`` the Rayleigh
  quotient is 0. ``mad_global`` is NaN too when no graph has two finite rows.
* All metrics but ``dirichlet_energy`` are unchanged when Z is multiplied by a nonzero constant.

Everything is computed in float64 on the device of Z (on the CPU for Apple's MPS, which has no
float64), whatever Z's floating dtype, and reaches the host in one transfer; with a graph index,
numbering the graphs (``torch.unique``) takes one more.

What the metrics say is judged in :mod:`learnscope.collapse.verdicts` (:class:`Verdict`,
:class:`CollapseThresholds`, :func:`collapse_verdicts`, :func:`judge_collapse`, importable from
here too), which imports nothing from here; :mod:`learnscope.collapse.row_buffer`
(:class:`~learnscope.collapse.row_buffer.EmbeddingRowBuffer`) collects rows over batches and
measures them with these functions.

Example:
    >>> import torch
    >>> from learnscope.collapse.metrics import judge_collapse
    >>> metrics = collapse_metrics(torch.randn(512, 16))
    >>> judge_collapse(metrics, num_rows=512, dim=16)
    []
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# The verdicts, importable from here as the pages name them
# (learnscope.collapse.metrics.judge_collapse).
from learnscope.collapse.verdicts import (
    CollapseThresholds,
    Verdict,
    collapse_verdicts,
    judge_collapse,
)

__all__ = [
    "CollapseThresholds",
    "Verdict",
    "collapse_metrics",
    "collapse_verdicts",
    "embedding_ranks",
    "judge_collapse",
    "per_graph_mad",
]

_EMBEDDING_KEYS = (
    "rankme",
    "effective_rank",
    "normalized_spread",
    "cosine_spread",
    "dead_dim_fraction",
)
_GRAPH_KEYS = ("dirichlet_energy", "rayleigh_quotient", "mad", "mad_global", "mad_global_min")
_PROBABILITY_FLOOR = 1e-7
_DEAD_DIM_RATIO = 1e-3
# Edges are processed in chunks so that a gathered chunk holds about this many float64 values
# (32 MiB), whatever the number of edges.
_EDGE_CHUNK_ELEMENTS = 1 << 22


def collapse_metrics(
    z: Tensor, edge_index: Tensor | None = None, graph_index: Tensor | None = None
) -> dict[str, float]:
    """Measure how collapsed an embedding is, and how smooth it is over a graph.

    The formulas and conventions are in this module's docstring.

    Args:
        z: Embeddings ``[N, D]``, or ``[..., D]`` flattened to rows; any floating dtype, any
            device. Rows with a NaN or an infinity are dropped.
        edge_index: Optional graph, an integer tensor ``[2, E]`` of row indices of ``z``
            (source row first). Adds ``dirichlet_energy``, ``rayleigh_quotient``, ``mad``,
            ``mad_global`` and ``mad_global_min``.
        graph_index: Optional integer tensor ``[N]``, each row's graph (rows with the same
            value are one graph, such as PyTorch Geometric's ``batch.batch``), for
            ``mad_global``; without it all rows are one graph. Needs ``edge_index``.

    Returns:
        Python floats under the keys ``rankme``, ``effective_rank``, ``normalized_spread``,
        ``cosine_spread``, ``dead_dim_fraction``, and with a graph also
        ``dirichlet_energy``, ``rayleigh_quotient``, ``mad``, ``mad_global`` (the mean over
        graphs of each graph's MAD) and ``mad_global_min`` (the lowest graph's).

    Raises:
        TypeError: ``z`` is not a floating-point tensor, or ``edge_index`` or ``graph_index``
            not an integer one.
        ValueError: ``z`` has fewer than two dimensions, no columns or fewer than two finite
            rows; ``edge_index`` is not ``[2, E]`` or indexes outside the rows;
            ``graph_index`` is not one value per row, or comes without ``edge_index``.

    Example:
        >>> import torch
        >>> metrics = collapse_metrics(torch.eye(4))
        >>> round(metrics["rankme"], 3), round(metrics["effective_rank"], 3)
        (4.0, 3.0)
        >>> round(metrics["cosine_spread"], 3)
        0.75
        >>> ring = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> round(collapse_metrics(torch.eye(4), ring)["mad"], 3)
        1.0
        >>> proportional = torch.arange(1.0, 5.0)[:, None] * torch.randn(1, 8)
        >>> abs(round(collapse_metrics(proportional, ring)["mad_global"], 6))  # never -0.0
        0.0
        >>> two = torch.tensor([0, 0, 1, 1])  # nodes 0, 1 and 2, 3 are two graphs
        >>> round(collapse_metrics(torch.eye(4), ring, two)["mad_global"], 3)
        1.0
    """
    rows = flatten_rows(z, "z")
    if graph_index is not None and edge_index is None:
        raise ValueError(
            "graph_index needs edge_index: mad_global is one of the graph metrics (for the "
            "per-graph values alone, call per_graph_mad(z, graph_index))"
        )
    device = _work_device(rows.device)
    edges = None if edge_index is None else check_edge_shape(edge_index).to(device, torch.long)
    labels, count = _graph_labels(graph_index, rows.shape[0], device)
    with torch.no_grad():
        rows = rows.to(device=device, dtype=torch.float64)
        rows, edges, labels = _drop_nonfinite_rows(rows, edges, labels)
        directions = _unit_rows(rows)
        names = list(_EMBEDDING_KEYS)
        values = _embedding_values(rows, directions)
        if edges is not None:
            names += _GRAPH_KEYS
            values += _graph_values(rows, directions, edges, labels, count)
        return dict(zip(names, torch.stack(values).tolist(), strict=True))


def embedding_ranks(z: Tensor) -> dict[str, float]:
    """RankMe and the effective rank of ``z``: those two of :func:`collapse_metrics` alone.

    The same definitions and conventions (this module's docstring): float64 on the device of
    ``z`` (the CPU for MPS), rows with a NaN or an infinity dropped, one transfer.

    Args:
        z: Embeddings ``[N, D]``, or ``[..., D]`` flattened to rows; any floating dtype.

    Returns:
        Python floats under the keys ``rankme`` and ``effective_rank``.

    Raises:
        TypeError: ``z`` is not a floating-point tensor.
        ValueError: ``z`` has fewer than two dimensions, no columns or fewer than two finite
            rows.

    Example:
        >>> import torch
        >>> ranks = embedding_ranks(torch.eye(4))
        >>> round(ranks["rankme"], 3), round(ranks["effective_rank"], 3)
        (4.0, 3.0)
    """
    rows = flatten_rows(z, "z")
    device = _work_device(rows.device)
    labels = torch.zeros(rows.shape[0], dtype=torch.long, device=device)
    with torch.no_grad():
        rows = rows.to(device=device, dtype=torch.float64)
        rows, _, _ = _drop_nonfinite_rows(rows, None, labels)
        values = torch.stack(_ranks(rows)).tolist()
        return dict(zip(_EMBEDDING_KEYS[:2], values, strict=True))


def per_graph_mad(z: Tensor, graph_index: Tensor | None = None) -> Tensor:
    """Each graph's MAD: the mean over its nodes of the mean ``1 - cos`` to its other nodes.

    That is the mean of ``1 - cos`` over all ordered pairs of distinct nodes of the graph,
    whether they are connected or not, computed in O(N D) as
    ``sum_i |u_i - mean(u)|^2 / (n - 1) + zeros / n`` over the graph's ``n`` l2-normalised rows
    ``u_i`` (``zeros`` of which are zero rows, with cosine 0 to every row). Rows with a NaN or an
    infinity are left out. :func:`collapse_metrics` reports the mean and the lowest of these
    values as ``mad_global`` and ``mad_global_min``.

    Args:
        z: Embeddings ``[N, D]`` (or ``[..., D]``, flattened to rows), any floating dtype.
        graph_index: Integer tensor ``[N]``, each row's graph; rows with the same value are one
            graph. Without it all rows are one graph.

    Returns:
        A float64 tensor on the CPU, one value per distinct value of ``graph_index`` in
        increasing order; NaN for a graph with fewer than two finite rows.

    Raises:
        TypeError: ``z`` is not a floating-point tensor, or ``graph_index`` not an integer one.
        ValueError: ``z`` has fewer than two dimensions, or ``graph_index`` is not one value
            per row.

    Example:
        >>> import torch
        >>> z = torch.tensor([[1.0, 0.0], [2.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> per_graph_mad(z, torch.tensor([5, 5, 9, 9])).tolist()
        [0.0, 1.0]
    """
    rows = flatten_rows(z, "z")
    device = _work_device(rows.device)
    labels, count = _graph_labels(graph_index, rows.shape[0], device)
    with torch.no_grad():
        rows = rows.to(device=device, dtype=torch.float64)
        finite = torch.isfinite(rows).all(dim=1)
        return _graph_mads(_unit_rows(rows[finite]), labels[finite], count).cpu()


def flatten_rows(z: Tensor, name: str) -> Tensor:
    """Check that ``z`` is a floating tensor ``[..., D]`` and view it as rows ``[-1, D]``.

    Example:
        >>> import torch
        >>> flatten_rows(torch.zeros(2, 3, 4), "z").shape
        torch.Size([6, 4])
    """
    if not isinstance(z, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if not z.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {z.dtype}")
    if z.ndim < 2:
        raise ValueError(
            f"{name} must have shape [N, D] (or [..., D]); got a {z.ndim}-D tensor of shape "
            f"{tuple(z.shape)}; use {name}.unsqueeze(-1) for one-dimensional embeddings"
        )
    if z.shape[-1] == 0:
        raise ValueError(f"{name} has no dimensions (shape {tuple(z.shape)})")
    return z.reshape(-1, z.shape[-1])


def check_edge_shape(edge_index: Tensor) -> Tensor:
    """Check that ``edge_index`` is an integer tensor of shape ``[2, E]``; return it.

    Example:
        >>> import torch
        >>> check_edge_shape(torch.zeros(3, 2, dtype=torch.long))
        Traceback (most recent call last):
        ...
        ValueError: edge_index must have shape [2, E], got (3, 2)
    """
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.is_floating_point() or edge_index.is_complex() or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must be an integer tensor, got dtype {edge_index.dtype}")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    return edge_index


def _work_device(device: torch.device) -> torch.device:
    """Return where float64 work can run: ``device``, or the CPU for MPS (no float64)."""
    return torch.device("cpu") if device.type == "mps" else device


def _drop_nonfinite_rows(
    rows: Tensor, edges: Tensor | None, labels: Tensor
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Validate edge indices and drop non-finite rows (with their edges and graph labels).

    One transfer.
    """
    finite = torch.isfinite(rows).all(dim=1)
    checks = [finite.sum()]
    if edges is not None and edges.numel() > 0:
        checks += [edges.min(), edges.max()]
    counts = torch.stack(checks).tolist()
    total = rows.shape[0]
    if len(counts) == 3 and (counts[1] < 0 or counts[2] >= total):
        raise ValueError(
            f"edge_index holds node indices from {counts[1]} to {counts[2]}, "
            f"outside the {total} rows of z"
        )
    if counts[0] < 2:
        raise ValueError(
            f"need at least 2 finite rows, got {counts[0]} of {total} "
            "(rows with a NaN or an infinity are dropped)"
        )
    if counts[0] == total:
        return rows, edges, labels
    if edges is not None:
        new_index = torch.cumsum(finite, dim=0) - 1
        edges = new_index[edges[:, finite[edges].all(dim=0)]]
    return rows[finite], edges, labels[finite]


def _graph_labels(
    graph_index: Tensor | None, num_rows: int, device: torch.device
) -> tuple[Tensor, int]:
    """Number each row's graph 0, 1, ... in the order of ``graph_index``'s values.

    Returns the labels and the number of graphs; without ``graph_index`` all rows are graph 0.
    """
    if graph_index is None:
        return torch.zeros(num_rows, dtype=torch.long, device=device), 1
    if not isinstance(graph_index, Tensor):
        raise TypeError(f"graph_index must be a torch.Tensor, got {type(graph_index).__name__}")
    if (
        graph_index.is_floating_point()
        or graph_index.is_complex()
        or graph_index.dtype == torch.bool
    ):
        raise TypeError(f"graph_index must be an integer tensor, got dtype {graph_index.dtype}")
    if graph_index.ndim != 1 or graph_index.shape[0] != num_rows:
        raise ValueError(
            "graph_index must have one value per row of z: got shape "
            f"{tuple(graph_index.shape)} for {num_rows} rows"
        )
    values, labels = torch.unique(graph_index.to(device), return_inverse=True)
    return labels, values.numel()


def _graph_mads(directions: Tensor, labels: Tensor, count: int) -> Tensor:
    """Each graph's mean ``1 - cos`` over its ordered pairs of distinct rows; NaN under 2 rows.

    The sum over the pairs of a graph of ``n`` unit rows ``u_i``, ``z`` of them zero, is
    ``n * sum_i |u_i - mean(u)|^2 + z (n - 1)``: ``1 - cos = |u_i - u_j|^2 / 2`` between unit
    rows, and 1 (not the 1/2 or 0 of the squared distance) for a pair with a zero row. The
    centred form has no cancellation when the rows (nearly) agree.
    """
    dim = directions.shape[1]
    sizes = directions.new_zeros(count).index_add_(0, labels, directions.new_ones(len(labels)))
    sums = directions.new_zeros(count, dim).index_add_(0, labels, directions)
    means = sums / sizes.clamp_min(1)[:, None]
    deviations = (directions - means[labels]).square().sum(dim=1)
    spread = directions.new_zeros(count).index_add_(0, labels, deviations)
    zero_rows = (directions == 0).all(dim=1).to(directions.dtype)
    zeros = directions.new_zeros(count).index_add_(0, labels, zero_rows)
    mad = spread / (sizes - 1).clamp_min(1) + zeros / sizes.clamp_min(1)
    return torch.where(sizes > 1, mad, torch.full_like(mad, math.nan))


def _unit_rows(rows: Tensor) -> Tensor:
    """Return the l2-normalised rows; a zero row stays zero."""
    norms = torch.linalg.vector_norm(rows, dim=1, keepdim=True)
    return rows / torch.where(norms > 0, norms, torch.ones_like(norms))


def _column_std(x: Tensor) -> Tensor:
    """Population standard deviation of each column; a constant column gives exactly 0.

    The columns are shifted by the first row first, so rounding in the mean cannot leave a
    tiny nonzero deviation.
    """
    return (x - x[0]).std(dim=0, correction=0)


def _entropy_rank(singular_values: Tensor, tol: Tensor) -> Tensor:
    """RankMe's ``exp(entropy)`` of the singular values; 1.0 when none exceeds ``tol``."""
    s = torch.where(singular_values > tol, singular_values, torch.zeros_like(singular_values))
    total = s.sum()
    p = s / torch.where(total > 0, total, torch.ones_like(total)) + _PROBABILITY_FLOOR
    rank = torch.exp(-(p * torch.log(p)).sum())
    return torch.where(total > 0, rank, torch.ones_like(rank))


def _ranks(rows: Tensor) -> list[Tensor]:
    """RankMe and the effective rank of finite float64 ``rows``, as 0-d tensors."""
    num_rows, dim = rows.shape
    singular_values = torch.linalg.svdvals(rows)
    tol = max(num_rows, dim) * torch.finfo(torch.float64).eps * singular_values[0]
    shifted = rows - rows[0]
    centred_values = torch.linalg.svdvals(shifted - shifted.mean(dim=0))
    return [_entropy_rank(singular_values, tol), _entropy_rank(centred_values, tol)]


def _embedding_values(rows: Tensor, directions: Tensor) -> list[Tensor]:
    """The graph-free metrics, as 0-d float64 tensors in the order of ``_EMBEDDING_KEYS``."""
    dim = rows.shape[1]
    mean_direction = directions.mean(dim=0)
    return [
        *_ranks(rows),
        _column_std(directions).mean() * math.sqrt(dim),
        (1 - mean_direction.square().sum()).clamp(0, 1),
        _dead_dim_fraction(rows),
    ]


def _dead_dim_fraction(rows: Tensor) -> Tensor:
    """Fraction of columns with std under 1e-3 times the median std, or exactly 0."""
    std = _column_std(rows)
    median = torch.quantile(std, 0.5)
    dead = (std < _DEAD_DIM_RATIO * median) | (std == 0)
    return dead.to(torch.float64).mean()


def _edge_sums(rows: Tensor, directions: Tensor, edges: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Sum the squared edge differences, and the cosine distances into each target node.

    Returns the sum of ``|z_source - z_target|^2`` over all edges, and per node the summed
    cosine distance to its sources and their number (self-loops left out). Edges go in chunks
    so memory stays bounded.
    """
    num_rows, dim = rows.shape
    is_unit = (directions != 0).any(dim=1).to(torch.float64)
    squared_sum = rows.new_zeros(())
    distance_sum = rows.new_zeros(num_rows)
    neighbours = rows.new_zeros(num_rows)
    chunk = max(1, _EDGE_CHUNK_ELEMENTS // dim)
    for start in range(0, edges.shape[1], chunk):
        source, target = edges[:, start : start + chunk]
        squared_sum += (rows[source] - rows[target]).square().sum()
        # 1 - cos, written as |u - v|^2 / 2 for unit rows (no cancellation near 0) and as 1
        # when either row is zero.
        half_squared = (directions[source] - directions[target]).square().sum(dim=1) / 2
        distance = half_squared + 1 - (is_unit[source] + is_unit[target]) / 2
        distinct = (source != target).to(torch.float64)
        distance_sum.index_add_(0, target, distance * distinct)
        neighbours.index_add_(0, target, distinct)
    return squared_sum, distance_sum, neighbours


def _graph_values(
    rows: Tensor, directions: Tensor, edges: Tensor, labels: Tensor, count: int
) -> list[Tensor]:
    """The graph metrics, as 0-d float64 tensors in the order of ``_GRAPH_KEYS``."""
    squared_sum, distance_sum, neighbours = _edge_sums(rows, directions, edges)
    nan = torch.full_like(squared_sum, math.nan)
    nodes_with_neighbours = (neighbours > 0).sum()
    has_edges = nodes_with_neighbours > 0
    node_mad = distance_sum / neighbours.clamp_min(1)
    mad = node_mad.sum() / nodes_with_neighbours.clamp_min(1)
    norm_squared = rows.square().sum()
    quotient = torch.where(
        norm_squared > 0, squared_sum / norm_squared.clamp_min(1e-300), torch.zeros_like(nan)
    )
    per_graph = _graph_mads(directions, labels, count)
    judged = ~per_graph.isnan()
    graphs = judged.sum()
    has_pairs = has_edges & (graphs > 0)
    mean = torch.where(judged, per_graph, torch.zeros_like(per_graph)).sum() / graphs.clamp_min(1)
    lowest = torch.where(judged, per_graph, torch.full_like(per_graph, math.inf)).min()
    return [
        squared_sum / rows.shape[0],
        torch.where(has_edges, quotient, nan),
        torch.where(has_edges, mad, nan),
        torch.where(has_pairs, mean, nan),
        torch.where(has_pairs, lowest, nan),
    ]
