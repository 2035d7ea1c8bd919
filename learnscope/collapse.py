"""Embedding-collapse and oversmoothing metrics, and a bounded buffer that feeds them.

For an embedding matrix Z with N rows (samples or graph nodes) and D columns (dimensions):

* ``rankme``: RankMe, the exponential of the entropy of the normalised singular values of Z,
  ``p_k = s_k / sum(s) + 1e-7`` and ``exp(-sum_k p_k log p_k)``. It runs from 1 (rank one) to
  ``min(N, D)``, and is only meaningful when N is several times D (see :func:`enough_rows`).
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

Example:
    >>> import torch
    >>> metrics = collapse_metrics(torch.randn(512, 16))
    >>> judge_collapse(metrics, num_rows=512, dim=16)
    []
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "EmbeddingRowBuffer",
    "collapse_metrics",
    "enough_rows",
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
# Graph ids named in an oversmoothing verdict, lowest MAD first.
_IDS_NAMED = 10


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
    rows = _flatten_rows(z, "z")
    if graph_index is not None and edge_index is None:
        raise ValueError(
            "graph_index needs edge_index: mad_global is one of the graph metrics (for the "
            "per-graph values alone, call per_graph_mad(z, graph_index))"
        )
    device = _work_device(rows.device)
    edges = None if edge_index is None else _check_edge_shape(edge_index).to(device, torch.long)
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
    rows = _flatten_rows(z, "z")
    device = _work_device(rows.device)
    labels, count = _graph_labels(graph_index, rows.shape[0], device)
    with torch.no_grad():
        rows = rows.to(device=device, dtype=torch.float64)
        finite = torch.isfinite(rows).all(dim=1)
        return _graph_mads(_unit_rows(rows[finite]), labels[finite], count).cpu()


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
        min_rows_per_dim: Rows per dimension needed before judging the ranks.
        min_rank_fraction: Fraction of ``min(N, D)`` below which a rank is collapsed.
        min_rank: Rank below which one direction dominates, whatever N and D.
        min_normalized_spread: Lowest healthy normalised spread (isotropic: about 1).
        min_cosine_spread: Lowest healthy cosine spread (isotropic: about 1).
        max_dead_dim_fraction: Highest healthy fraction of dead dimensions.
        min_mad: Lowest healthy MAD (random features: about 1).
        min_rayleigh_quotient: Lowest healthy Rayleigh quotient (random features: about 2E/N).
        min_mad_global: Lowest healthy MAD over the node pairs of a graph (random features:
            about 1).
        max_oversmoothed_fraction: Largest fraction of graphs below ``min_mad_global`` that
            gives no verdict (needs ``graph_mad``).

    Returns:
        One message per heuristic that fires, each starting with the metric's key; empty when
        nothing looks wrong.

    Raises:
        ValueError: ``num_rows`` is negative or ``dim`` is below 1, or ``graph_ids`` has not
            one id per value of ``graph_mad``.

    Example:
        >>> import torch
        >>> rank_one = torch.randn(256, 1) * torch.randn(1, 8)
        >>> verdicts = judge_collapse(collapse_metrics(rank_one), num_rows=256, dim=8)
        >>> [verdict.split()[0] for verdict in verdicts]
        ['rankme', 'effective_rank']
        >>> metrics = {"mad_global": 0.5, "mad_global_min": 0.002}
        >>> judge_collapse(metrics, num_rows=40, dim=8, graph_mad=[0.002, 0.9, 0.6, 0.5])
        ['mad_global < 0.01 in 1 of 4 graphs (lowest 0.002, mean over graphs 0.5): ...']
    """
    if num_rows < 0 or dim < 1:
        raise ValueError(f"need num_rows >= 0 and dim >= 1, got num_rows={num_rows}, dim={dim}")
    verdicts = _rank_verdicts(metrics, num_rows, dim, min_rows_per_dim, min_rank_fraction, min_rank)
    lows = {
        "normalized_spread": (min_normalized_spread, "the normalised embeddings barely vary"),
        "cosine_spread": (min_cosine_spread, "the embeddings all point the same way"),
        "mad": (min_mad, "neighbouring nodes point the same way (oversmoothing)"),
        "rayleigh_quotient": (
            min_rayleigh_quotient,
            "embeddings barely change across edges (oversmoothing)",
        ),
    }
    for key, (threshold, meaning) in lows.items():
        value = metrics.get(key, math.nan)
        if value < threshold:
            verdicts.append(f"{key} {value:.3g} < {threshold:.3g}: {meaning}")
    verdicts += _mad_global_verdicts(
        metrics, graph_mad, graph_ids, min_mad_global, max_oversmoothed_fraction
    )
    dead = metrics.get("dead_dim_fraction", math.nan)
    if dead > max_dead_dim_fraction:
        verdicts.append(
            f"dead_dim_fraction {dead:.3g} > {max_dead_dim_fraction:.3g}: "
            "many dimensions are (nearly) constant"
        )
    return verdicts


class EmbeddingRowBuffer:
    """Collect detached embedding rows across batches, on their device, up to ``max_rows``.

    RankMe needs several times more rows than dimensions, more than one batch usually holds.
    The buffer copies rows into one tensor allocated at the first :meth:`append` (``max_rows *
    D`` elements in the first batch's dtype and on its device: 4096 x 256 float32 is 4 MiB),
    without a host synchronisation, and ignores rows once full. Graph batches may bring an
    ``edge_index``: its node indices are shifted by the rows held before the batch, as when
    batches of graphs are concatenated. Edges are kept for the batches whose rows were kept
    (edges into rows cut off by the cap are dropped when read), so memory stops growing when
    the buffer is full. Each process fills its own buffer; nothing is gathered across ranks.

    Graphs, for ``mad_global``: the rows of each appended batch are one graph, unless
    :meth:`append_graphs` says which graph of the batch each row belongs to (and, optionally,
    each graph's id). Graphs of different batches are always different graphs, so the graph
    numbers of the micro-batches of one step never collide: :meth:`graph_index` numbers the
    graphs 0, 1, ... in the order of the batches, then of the graph numbers within each batch.

    Args:
        max_rows: Most rows held (at least 2).

    Raises:
        ValueError: ``max_rows`` is not an integer of at least 2.

    Example:
        >>> import torch
        >>> buffer = EmbeddingRowBuffer(max_rows=5)
        >>> buffer.append(torch.randn(3, 2), torch.tensor([[0, 1], [1, 2]]))
        >>> buffer.append(torch.randn(3, 2), torch.tensor([[0, 1], [1, 2]]))
        >>> buffer.rows().shape, buffer.is_full
        (torch.Size([5, 2]), True)
        >>> buffer.edge_index().tolist()
        [[0, 1, 3], [1, 2, 4]]
        >>> buffer.graph_index().tolist()  # two batches: two graphs
        [0, 0, 0, 1, 1]
    """

    def __init__(self, max_rows: int) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 2:
            raise ValueError(f"max_rows must be an integer of at least 2, got {max_rows!r}")
        self.max_rows = max_rows
        self._storage: Tensor | None = None
        self._num_rows = 0
        self._edge_chunks: list[Tensor] = []
        self._last_edges_cut = False
        # Per batch whose rows were kept: [rows kept, graph index of those rows, graph ids].
        self._graph_chunks: list[list[Any]] = []
        self._last_batch: tuple[int, int] | None = None  # (rows offered, rows kept)

    @property
    def num_rows(self) -> int:
        """Number of rows held.

        Example:
            >>> EmbeddingRowBuffer(8).num_rows
            0
        """
        return self._num_rows

    @property
    def is_full(self) -> bool:
        """Whether the buffer holds ``max_rows`` rows and ignores further batches.

        Example:
            >>> EmbeddingRowBuffer(8).is_full
            False
        """
        return self._num_rows >= self.max_rows

    def append(self, rows: Tensor, edge_index: Tensor | None = None) -> None:
        """Copy a batch of rows in (detached), keeping as many as still fit.

        Args:
            rows: Embeddings ``[B, D]`` or ``[..., D]`` (flattened to rows); D must match the
                rows already held.
            edge_index: Optional ``[2, E]`` integer edges between the rows of this batch,
                numbered from 0 within the batch. Only the shape is checked here (the range
                would need a host synchronisation); :func:`collapse_metrics` checks that the
                indices fall inside the rows held.

        Raises:
            TypeError: ``rows`` is not a floating-point tensor or ``edge_index`` not integer.
            ValueError: Bad shapes, or a dimension other than the rows already held.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(4)
            >>> buffer.append(torch.randn(2, 3, 8))
            >>> buffer.num_rows
            4
        """
        flat = _flatten_rows(rows, "rows").detach()
        edges = None if edge_index is None else _check_edge_shape(edge_index)
        self._last_batch = (flat.shape[0], 0)
        if self.is_full:
            return
        storage = self._storage_for(flat)
        start = self._num_rows
        kept = min(flat.shape[0], self.max_rows - start)
        with torch.no_grad():
            storage[start : start + kept].copy_(flat[:kept])
        if edges is not None:
            self._edge_chunks.append(edges.to(storage.device, torch.long) + start)
            self._last_edges_cut = kept < flat.shape[0]
        self._num_rows += kept
        self._last_batch = (flat.shape[0], kept)
        if kept:
            self._graph_chunks.append([kept, None, None])

    def append_graphs(
        self, graph_index: Tensor | None = None, ids: Sequence[Any] | Tensor | None = None
    ) -> None:
        """Say which graph each row of the batch last given to :meth:`append` belongs to.

        Without it (or with ``graph_index=None``) that batch's rows are one graph. Nothing is
        read on the host; rows the cap cut off are left out with their graph numbers.

        Args:
            graph_index: Integer tensor ``[B]``, one value per row of that batch (after
                flattening): each row's graph within the batch, numbered from 0 (PyTorch
                Geometric's ``batch.batch``).
            ids: Optional id of each graph of the batch, indexed by the graph number (a
                sequence or a tensor), named by :meth:`graph_ids`.

        Raises:
            ValueError: Nothing was appended since the last reset, or ``graph_index`` is not a
                1-D integer tensor with one value per row of that batch.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> buffer.append(torch.randn(4, 3), torch.tensor([[0, 2], [1, 3]]))
            >>> buffer.append_graphs(torch.tensor([0, 0, 1, 1]), ids=["water", "ethanol"])
            >>> buffer.graph_index().tolist(), buffer.graph_ids()
            ([0, 0, 1, 1], ['water', 'ethanol'])
        """
        if self._last_batch is None:
            raise ValueError("append_graphs() describes the last append()ed batch; append one")
        offered, kept = self._last_batch
        if graph_index is not None:
            if not isinstance(graph_index, Tensor) or graph_index.ndim != 1:
                shape = tuple(getattr(graph_index, "shape", ()))
                raise ValueError(
                    f"graph_index must be a 1-D integer tensor, got {type(graph_index).__name__} "
                    f"of shape {shape}"
                )
            if graph_index.is_floating_point() or graph_index.dtype == torch.bool:
                raise ValueError(f"graph_index must be an integer tensor, got {graph_index.dtype}")
            if graph_index.shape[0] != offered:
                raise ValueError(
                    f"graph_index has {graph_index.shape[0]} values but the last batch had "
                    f"{offered} rows; give each row's graph"
                )
        if kept == 0:
            return
        device = self._storage.device if self._storage is not None else None
        chunk = self._graph_chunks[-1]
        chunk[1] = None if graph_index is None else graph_index[:kept].to(device, torch.long)
        chunk[2] = ids.detach() if isinstance(ids, Tensor) else ids

    def rows(self) -> Tensor:
        """The rows held, ``[num_rows, D]`` (a view of the buffer, valid until the next reset).

        Raises:
            ValueError: Nothing was appended yet.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(4)
            >>> buffer.append(torch.ones(3, 2))
            >>> buffer.rows().sum().item()
            6.0
        """
        if self._storage is None or self._num_rows == 0:
            raise ValueError("the buffer holds no rows yet; append() a batch first")
        return self._storage[: self._num_rows]

    def edge_index(self) -> Tensor | None:
        """The edges of all kept batches, ``[2, E]`` into :meth:`rows`; None if none came.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(3)
            >>> buffer.append(torch.ones(2, 2), torch.tensor([[0], [1]]))
            >>> buffer.append(torch.ones(2, 2), torch.tensor([[0, 1], [1, 0]]))
            >>> buffer.edge_index().tolist()
            [[0], [1]]
        """
        if not self._edge_chunks:
            return None
        chunks = list(self._edge_chunks)
        if self._last_edges_cut:
            last = chunks[-1]
            chunks[-1] = last[:, (last < self._num_rows).all(dim=0)]
        return torch.cat(chunks, dim=1)

    def graph_index(self) -> Tensor | None:
        """Each row's graph, numbered 0, 1, ... over all batches held; None when none is held.

        Reads the largest graph number on the host (one transfer).

        Raises:
            ValueError: A graph index given to :meth:`append_graphs` is negative.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> for _ in range(2):
            ...     buffer.append(torch.randn(3, 2))
            ...     buffer.append_graphs(torch.tensor([0, 1, 1]))
            >>> buffer.graph_index().tolist()
            [0, 1, 1, 2, 3, 3]
        """
        if self._storage is None or self._num_rows == 0:
            return None
        device = self._storage.device
        parts, batches = [], []
        for number, (kept, index, _) in enumerate(self._graph_chunks):
            parts.append(index if index is not None else torch.zeros(kept, device=device))
            batches.append(torch.full((kept,), number, device=device))
        index = torch.cat(parts).to(torch.long)
        low, high = torch.stack([index.min(), index.max()]).tolist()
        if low < 0:
            raise ValueError(f"a graph index must not be negative, got {low}")
        keys = torch.cat(batches).to(torch.long) * (high + 1) + index
        return torch.unique(keys, return_inverse=True)[1]

    def graph_ids(self) -> list[Any] | None:
        """The id of each graph of :meth:`graph_index` (``None`` where its batch gave none).

        ``None`` when no batch held brought ids. Reads each batch's graph numbers on the host.

        Raises:
            ValueError: A batch holds a graph numbered beyond its ids.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> buffer.append(torch.randn(3, 2))
            >>> buffer.append_graphs(torch.tensor([1, 1, 2]), ids=torch.tensor([7, 8, 9]))
            >>> buffer.append(torch.randn(2, 2))
            >>> buffer.graph_ids()
            [8, 9, None]
        """
        if self._num_rows == 0 or all(ids is None for _, _, ids in self._graph_chunks):
            return None
        out: list[Any] = []
        for _, index, ids in self._graph_chunks:
            present = [0] if index is None else torch.unique(index).tolist()
            if ids is None:
                out += [None] * len(present)
                continue
            values = ids.reshape(-1).tolist() if isinstance(ids, Tensor) else list(ids)
            if present[-1] >= len(values):
                raise ValueError(
                    f"a batch has {len(values)} graph ids but holds graph {present[-1]} "
                    "(graphs are numbered from 0): give one id per graph"
                )
            out += [values[i] for i in present]
        return out

    def per_graph_mad(self) -> Tensor:
        """:func:`per_graph_mad` of the rows held, one value per graph of :meth:`graph_index`.

        Raises:
            ValueError: Nothing was appended yet.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(8)
            >>> buffer.append(torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0]]))
            >>> buffer.append_graphs(torch.tensor([0, 0, 1]))
            >>> buffer.per_graph_mad().tolist()
            [0.0, nan]
        """
        return per_graph_mad(self.rows(), self.graph_index())

    def compute(self) -> dict[str, float]:
        """Run :func:`collapse_metrics` on the rows (and edges and graphs) held.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(64)
            >>> buffer.append(torch.randn(64, 4))
            >>> sorted(buffer.compute())[:2]
            ['cosine_spread', 'dead_dim_fraction']
        """
        edges = self.edge_index()
        graphs = self.graph_index() if edges is not None else None
        return collapse_metrics(self.rows(), edges, graphs)

    def reset(self) -> None:
        """Forget the rows, edges and graphs held; the storage is kept for reuse.

        Example:
            >>> import torch
            >>> buffer = EmbeddingRowBuffer(4)
            >>> buffer.append(torch.ones(4, 2))
            >>> buffer.reset()
            >>> buffer.num_rows, buffer.edge_index()
            (0, None)
        """
        self._num_rows = 0
        self._edge_chunks = []
        self._last_edges_cut = False
        self._graph_chunks = []
        self._last_batch = None

    def _storage_for(self, flat: Tensor) -> Tensor:
        """Return the storage, allocating it for ``flat``'s width, dtype and device if needed."""
        storage = self._storage
        if storage is not None and self._num_rows > 0:
            if storage.shape[1] != flat.shape[1]:
                raise ValueError(
                    f"rows have {flat.shape[1]} dimensions but the buffer holds rows of "
                    f"{storage.shape[1]}; reset() before changing the embedding"
                )
            return storage
        fits = (
            storage is not None
            and storage.shape[1] == flat.shape[1]
            and storage.dtype == flat.dtype
            and storage.device == flat.device
        )
        if not fits:
            # A tensor made under inference mode could not be written to outside it later.
            with torch.inference_mode(False):
                storage = torch.empty(
                    self.max_rows, flat.shape[1], dtype=flat.dtype, device=flat.device
                )
            self._storage = storage
        return storage


def _flatten_rows(z: Tensor, name: str) -> Tensor:
    """Check that ``z`` is a floating tensor ``[..., D]`` and view it as rows ``[-1, D]``."""
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


def _check_edge_shape(edge_index: Tensor) -> Tensor:
    """Check that ``edge_index`` is an integer tensor of shape ``[2, E]``."""
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


def _embedding_values(rows: Tensor, directions: Tensor) -> list[Tensor]:
    """The graph-free metrics, as 0-d float64 tensors in the order of ``_EMBEDDING_KEYS``."""
    num_rows, dim = rows.shape
    singular_values = torch.linalg.svdvals(rows)
    tol = max(num_rows, dim) * torch.finfo(torch.float64).eps * singular_values[0]
    shifted = rows - rows[0]
    centred_values = torch.linalg.svdvals(shifted - shifted.mean(dim=0))
    mean_direction = directions.mean(dim=0)
    return [
        _entropy_rank(singular_values, tol),
        _entropy_rank(centred_values, tol),
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


def _mad_global_verdicts(
    metrics: Mapping[str, float],
    graph_mad: Sequence[float] | Tensor | None,
    graph_ids: Sequence[Any] | None,
    threshold: float,
    max_fraction: float,
) -> list[str]:
    """The ``mad_global`` verdict: graph by graph with ``graph_mad``, else the lowest graph."""
    meaning = (
        "the nodes of each of these graphs all point the same way (oversmoothing: too many "
        "message-passing layers, or too little to tell nodes apart)"
    )
    if graph_mad is None:
        mean = metrics.get("mad_global", math.nan)
        lowest = metrics.get("mad_global_min", math.nan)
        if math.isnan(lowest):  # metrics without per-graph figures: the one value there is
            return (
                [f"mad_global {mean:.3g} < {threshold:.3g}: {meaning}"] if mean < threshold else []
            )
        if not lowest < threshold:
            return []
        return [
            f"mad_global < {threshold:.3g} in at least one graph (lowest {lowest:.3g}, mean "
            f"over graphs {mean:.3g}): {meaning}"
        ]
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
    if total == 0 or len(low) == 0 or len(low) / total <= max_fraction:
        return []
    low = low[values[low].argsort(stable=True)].tolist()
    plural = "s" if total != 1 else ""
    mean = float(values[judged].mean())
    details = f"lowest {float(values[low[0]]):.3g}, mean over graphs {mean:.3g}"
    if graph_ids is not None:
        named = [graph_ids[i] for i in low if graph_ids[i] is not None]
        if named:
            more = f" and {len(named) - _IDS_NAMED} more" if len(named) > _IDS_NAMED else ""
            details += "; ids " + ", ".join(str(i) for i in named[:_IDS_NAMED]) + more
    return [
        f"mad_global < {threshold:.3g} in {len(low)} of {total} graph{plural} ({details}): "
        f"{meaning}"
    ]


def _rank_verdicts(
    metrics: Mapping[str, float],
    num_rows: int,
    dim: int,
    min_rows_per_dim: float,
    min_rank_fraction: float,
    min_rank: float,
) -> list[str]:
    """Verdicts on ``rankme`` and ``effective_rank`` (none when the rows are too few)."""
    largest = min(num_rows, dim)
    threshold = max(min_rank_fraction * largest, min_rank)
    if not enough_rows(num_rows, dim, min_rows_per_dim) or threshold >= largest:
        return []
    meanings = {
        "rankme": "the embeddings span few directions (dimensional collapse)",
        "effective_rank": "the differences between embeddings span few directions "
        "(dimensional collapse)",
    }
    verdicts = []
    for key, meaning in meanings.items():
        value = metrics.get(key, math.nan)
        if value < threshold:
            verdicts.append(
                f"{key} {value:.3g} < {threshold:.3g} (of at most min(N, D) = {largest}): {meaning}"
            )
    return verdicts
