"""Tests for learnscope.collapse.metrics against an independent float64 numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learnscope.collapse import metrics as collapse
from learnscope.collapse.metrics import collapse_metrics
from learnscope.collapse.row_buffer import EmbeddingRowBuffer
from learnscope.collapse.verdicts import enough_rows, judge_collapse

EMBEDDING_KEYS = {
    "rankme",
    "effective_rank",
    "normalized_spread",
    "cosine_spread",
    "dead_dim_fraction",
}
GRAPH_KEYS = {"dirichlet_energy", "rayleigh_quotient", "mad", "mad_global", "mad_global_min"}


# ---------------------------------------------------------------- numpy reference (float64)


def reference_entropy_rank(z: np.ndarray) -> float:
    s = np.linalg.svd(z, compute_uv=False)
    if s.sum() == 0:
        return 1.0
    p = s / s.sum() + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


def reference_graph_mads(unit: np.ndarray, graph: np.ndarray | None = None) -> list[float]:
    """Chen et al.'s MAD of each graph (of two or more nodes): the mean over its nodes of the
    mean ``1 - cos`` to every other node of the graph, connected or not."""
    label = np.zeros(unit.shape[0], dtype=int) if graph is None else np.asarray(graph)
    out = []
    for g in np.unique(label):
        members = np.flatnonzero(label == g)
        per_node = [
            np.mean([1.0 - float(unit[i] @ unit[j]) for j in members if j != i])
            for i in members
            if len(members) > 1
        ]
        if per_node:
            out.append(float(np.mean(per_node)))
    return out


def reference_global_mad(unit: np.ndarray, graph: np.ndarray | None = None) -> float:
    """The mean over graphs of each graph's MAD."""
    values = reference_graph_mads(unit, graph)
    return float(np.mean(values)) if values else math.nan


def reference_metrics(
    z: np.ndarray, edges: np.ndarray | None = None, graph: np.ndarray | None = None
) -> dict[str, float]:
    z = np.asarray(z, dtype=np.float64)
    n, d = z.shape
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    unit = np.where(norms > 0, z / np.where(norms > 0, norms, 1.0), 0.0)
    pairwise_cosine = unit @ unit.T  # every ordered pair, self-pairs included
    std = z.std(axis=0)
    out = {
        "rankme": reference_entropy_rank(z),
        "effective_rank": reference_entropy_rank(z - z.mean(axis=0)),
        "normalized_spread": float(unit.std(axis=0).mean() * math.sqrt(d)),
        "cosine_spread": float(1.0 - pairwise_cosine.mean()),
        "dead_dim_fraction": float(np.mean(std < 1e-3 * np.median(std))),
    }
    if edges is None:
        return out
    squared = 0.0
    distances: dict[int, list[float]] = {}
    for source, target in np.asarray(edges).T:
        squared += float(np.sum((z[source] - z[target]) ** 2))
        if source == target:
            continue
        a, b = z[source], z[target]
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        cosine = 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))
        distances.setdefault(int(target), []).append(1.0 - cosine)
    out["dirichlet_energy"] = squared / n
    out["rayleigh_quotient"] = squared / float(np.sum(z**2))
    out["mad"] = float(np.mean([np.mean(values) for values in distances.values()]))
    out["mad_global"] = reference_global_mad(unit, graph)  # without graph: all rows one graph
    out["mad_global_min"] = min(reference_graph_mads(unit, graph), default=math.nan)
    return out


def assert_metrics_close(
    actual: dict[str, float], expected: dict[str, float], rtol: float, atol: float = 0.0
) -> None:
    assert set(actual) == set(expected)
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, rel=rtol, abs=atol), key


# ---------------------------------------------------------------- inputs


def random_graph(num_nodes: int, chords: int, seed: int) -> torch.Tensor:
    """A ring plus random chords, each edge stored in both directions (connected)."""
    generator = torch.Generator().manual_seed(seed)
    nodes = torch.arange(num_nodes)
    ring = torch.stack([nodes, (nodes + 1) % num_nodes])
    extra = torch.randint(0, num_nodes, (2, chords), generator=generator)
    edges = torch.cat([ring, extra], dim=1)
    return torch.cat([edges, edges.flip(0)], dim=1)


def neighbour_averaged(x: torch.Tensor, edges: torch.Tensor, rounds: int) -> torch.Tensor:
    """Apply ``x <- (x + mean of neighbours) / 2`` ``rounds`` times."""
    source, target = edges
    degree = torch.zeros(x.shape[0], dtype=x.dtype).index_add_(
        0, target, torch.ones(edges.shape[1], dtype=x.dtype)
    )
    for _ in range(rounds):
        neighbour_sum = torch.zeros_like(x).index_add_(0, target, x[source])
        x = (x + neighbour_sum / degree[:, None]) / 2
    return x


def gaussian(rows: int, dim: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, dim, generator=generator, dtype=torch.float64)


def verdict_keys(verdicts: list[str]) -> set[str]:
    return {verdict.split()[0] for verdict in verdicts}


# ---------------------------------------------------------------- agreement with the reference


def test_matches_reference_without_graph() -> None:
    z = gaussian(300, 24) * torch.linspace(0.1, 3.0, 24, dtype=torch.float64) + 0.7
    metrics = collapse_metrics(z)
    assert set(metrics) == EMBEDDING_KEYS
    assert all(isinstance(value, float) for value in metrics.values())
    assert_metrics_close(metrics, reference_metrics(z.numpy()), rtol=1e-5)


def test_matches_reference_with_graph_self_loops_and_repeated_edges() -> None:
    z = gaussian(200, 12, seed=1) + 0.3
    z[5] = 0.0  # a zero row: cosine 0 to everything
    edges = random_graph(200, 150, seed=2)
    extra = torch.tensor([[3, 7, 7, 9], [3, 8, 8, 9]])  # self-loops and a repeated edge
    edges = torch.cat([edges, extra], dim=1)
    metrics = collapse_metrics(z, edges)
    assert set(metrics) == EMBEDDING_KEYS | GRAPH_KEYS
    assert_metrics_close(metrics, reference_metrics(z.numpy(), edges.numpy()), rtol=1e-5)


def test_directed_edges_are_grouped_by_target_for_mad() -> None:
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    edges = torch.tensor([[0, 2], [1, 1]])  # node 1 receives from 0 and 2; nodes 0, 2 from none
    metrics = collapse_metrics(z, edges)
    expected_mad = ((1 - 0.0) + (1 - 1 / math.sqrt(2))) / 2  # only node 1 has neighbours
    assert metrics["mad"] == pytest.approx(expected_mad, rel=1e-12)
    assert metrics["dirichlet_energy"] == pytest.approx((2 + 1) / 3, rel=1e-12)
    assert metrics["rayleigh_quotient"] == pytest.approx(3 / 4, rel=1e-12)
    assert_metrics_close(metrics, reference_metrics(z.numpy(), edges.numpy()), rtol=1e-9)


def test_chunked_edges_give_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    z = gaussian(100, 8, seed=3)
    edges = random_graph(100, 80, seed=4)
    whole = collapse_metrics(z, edges)
    monkeypatch.setattr(collapse, "_EDGE_CHUNK_ELEMENTS", 8 * 7)  # 7 edges per chunk
    assert_metrics_close(collapse_metrics(z, edges), whole, rtol=1e-12)


@pytest.mark.parametrize(
    ("dtype", "rtol", "atol"), [(torch.float16, 2e-2, 2e-2), (torch.bfloat16, 5e-2, 5e-2)]
)
def test_half_precision_inputs_are_accepted(dtype: torch.dtype, rtol: float, atol: float) -> None:
    z = gaussian(256, 16, seed=5) + 0.5
    edges = random_graph(256, 200, seed=6)
    low = z.to(dtype)
    metrics = collapse_metrics(low, edges)
    # Upcast before any arithmetic: exact agreement with the reference on the rounded values...
    rounded = reference_metrics(low.double().numpy(), edges.numpy())
    assert_metrics_close(metrics, rounded, rtol=1e-6)
    # ...and close to the float64 embedding it came from.
    assert_metrics_close(metrics, reference_metrics(z.numpy(), edges.numpy()), rtol, atol)


def test_float32_input_matches_reference() -> None:
    z = gaussian(128, 8, seed=7).float()
    assert_metrics_close(collapse_metrics(z), reference_metrics(z.double().numpy()), rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_input_matches_cpu() -> None:
    z = gaussian(500, 32, seed=8) + 0.2
    edges = random_graph(500, 400, seed=9)
    on_device = collapse_metrics(z.float().cuda(), edges.cuda())
    assert_metrics_close(on_device, collapse_metrics(z.float(), edges), rtol=1e-6, atol=1e-12)


# ---------------------------------------------------------------- invariances and conventions


@pytest.mark.parametrize("scale", [37.5, 1e-3, -2.0])
def test_everything_but_energy_is_scale_invariant(scale: float) -> None:
    z = gaussian(200, 16, seed=10) + 0.4
    edges = random_graph(200, 100, seed=11)
    base = collapse_metrics(z, edges)
    scaled = collapse_metrics(scale * z, edges)
    for key in EMBEDDING_KEYS | GRAPH_KEYS - {"dirichlet_energy"}:
        assert scaled[key] == pytest.approx(base[key], rel=1e-9, abs=1e-12), key
    assert scaled["dirichlet_energy"] == pytest.approx(scale**2 * base["dirichlet_energy"])


def test_cosine_spread_is_one_minus_mean_pairwise_cosine() -> None:
    z = gaussian(50, 5, seed=12) + 1.0
    unit = torch.nn.functional.normalize(z, dim=1)
    mean_cosine = (unit @ unit.T).mean().item()
    assert collapse_metrics(z)["cosine_spread"] == pytest.approx(1 - mean_cosine, rel=1e-12)


def test_extra_leading_dimensions_are_flattened_to_rows() -> None:
    z = gaussian(4 * 30, 6, seed=13)
    edges = random_graph(120, 50, seed=14)
    assert collapse_metrics(z.reshape(4, 30, 6), edges) == pytest.approx(
        collapse_metrics(z, edges), rel=1e-12
    )


def test_nonfinite_rows_are_dropped_with_their_edges() -> None:
    z = gaussian(60, 4, seed=15)
    edges = random_graph(60, 40, seed=16)
    bad = torch.tensor([2, 17, 40])
    dirty = z.clone()
    dirty[2, 1] = math.nan
    dirty[17, 0] = math.inf
    dirty[40, 3] = -math.inf
    keep = torch.ones(60, dtype=torch.bool)
    keep[bad] = False
    clean_edges = edges[:, keep[edges].all(dim=0)]
    renumber = torch.cumsum(keep, dim=0) - 1
    expected = reference_metrics(z[keep].numpy(), renumber[clean_edges].numpy())
    assert_metrics_close(collapse_metrics(dirty, edges), expected, rtol=1e-9)


def test_no_edge_between_distinct_nodes_gives_nan_graph_quotients() -> None:
    z = gaussian(10, 3, seed=17)
    for edges in (torch.zeros(2, 0, dtype=torch.long), torch.tensor([[1, 4], [1, 4]])):
        metrics = collapse_metrics(z, edges)
        assert metrics["dirichlet_energy"] == 0.0
        assert math.isnan(metrics["rayleigh_quotient"])
        assert math.isnan(metrics["mad"])
        assert math.isnan(metrics["mad_global"])
        assert math.isnan(metrics["mad_global_min"])
        assert "mad" not in verdict_keys(judge_collapse(metrics, num_rows=10, dim=3))


def test_zero_matrix_is_complete_collapse() -> None:
    metrics = collapse_metrics(torch.zeros(40, 4), torch.tensor([[0, 1], [1, 0]]))
    assert metrics["rankme"] == 1.0
    assert metrics["effective_rank"] == 1.0
    assert metrics["normalized_spread"] == 0.0
    assert metrics["cosine_spread"] == 1.0  # no direction at all: nothing is aligned
    assert metrics["dead_dim_fraction"] == 1.0
    assert metrics["rayleigh_quotient"] == 0.0
    assert metrics["mad"] == 1.0
    assert metrics["mad_global"] == 1.0
    assert metrics["mad_global_min"] == 1.0


# ---------------------------------------------------------------- what the metrics say


def test_isotropic_gaussian_is_healthy() -> None:
    z = gaussian(2000, 32, seed=18)
    metrics = collapse_metrics(z)
    assert metrics["rankme"] > 0.8 * 32
    assert metrics["effective_rank"] > 0.8 * 32
    assert metrics["normalized_spread"] == pytest.approx(1.0, abs=0.05)
    assert metrics["cosine_spread"] == pytest.approx(1.0, abs=0.05)
    assert metrics["dead_dim_fraction"] == 0.0
    assert judge_collapse(metrics, num_rows=2000, dim=32) == []


@pytest.mark.parametrize("dim", [2, 4, 16, 64])
def test_isotropic_gaussian_with_four_rows_per_dimension_gives_no_verdict(dim: int) -> None:
    for seed in range(3):
        z = gaussian(4 * dim, dim, seed=100 + seed)
        assert judge_collapse(collapse_metrics(z), num_rows=4 * dim, dim=dim) == []


def test_rank_one_embedding_is_collapsed() -> None:
    generator = torch.Generator().manual_seed(19)
    z = torch.randn(500, 1, generator=generator) * torch.randn(1, 32, generator=generator)
    metrics = collapse_metrics(z)
    assert metrics["rankme"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["effective_rank"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["normalized_spread"] > 0.5  # blind to low-rank collapse, as documented
    assert {"rankme", "effective_rank"} <= verdict_keys(
        judge_collapse(metrics, num_rows=500, dim=32)
    )


def test_identical_rows_are_collapsed() -> None:
    row = gaussian(1, 16, seed=20)
    z = row.repeat(300, 1)
    metrics = collapse_metrics(z)
    assert metrics["cosine_spread"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["normalized_spread"] == 0.0
    assert metrics["rankme"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["effective_rank"] == 1.0
    assert metrics["dead_dim_fraction"] == 1.0  # every dimension is constant
    verdicts = verdict_keys(judge_collapse(metrics, num_rows=300, dim=16))
    assert {"cosine_spread", "normalized_spread", "rankme", "effective_rank"} <= verdicts


def test_common_offset_separates_rankme_from_effective_rank() -> None:
    noise = gaussian(1000, 16, seed=21)
    offset = 100.0 * gaussian(1, 16, seed=22)
    centred = collapse_metrics(noise)
    shifted = collapse_metrics(noise + offset)
    # The offset dominates the raw singular values: RankMe falls towards 1...
    assert shifted["rankme"] < 2.0 < 0.8 * 16 < centred["rankme"]
    # ...while the effective rank sees the same full-rank variation as before.
    assert shifted["effective_rank"] == pytest.approx(centred["effective_rank"], rel=1e-9)
    assert shifted["effective_rank"] > 0.8 * 16
    verdicts = verdict_keys(judge_collapse(shifted, num_rows=1000, dim=16))
    assert "rankme" in verdicts and "effective_rank" not in verdicts
    assert "cosine_spread" in verdicts  # all rows do point the same way


def test_dead_dimension_fraction_is_exact() -> None:
    z = gaussian(400, 20, seed=23)
    z[:, [1, 5, 6, 19]] = 0.1  # constant
    z[:, 7] = -3.0
    z[:, 11] = 1e-6 * z[:, 11]  # varies, but under 1e-3 of the median spread
    metrics = collapse_metrics(z)
    assert metrics["dead_dim_fraction"] == 6 / 20
    assert verdict_keys(judge_collapse(metrics, num_rows=400, dim=20)) == {"dead_dim_fraction"}


def test_mostly_dead_dimensions_are_counted() -> None:
    z = torch.zeros(100, 10, dtype=torch.float64)
    z[:, :3] = gaussian(100, 3, seed=24)
    z[:, 3:] = 0.3  # the median spread is zero: constant columns still count as dead
    assert collapse_metrics(z)["dead_dim_fraction"] == 7 / 10


def test_neighbour_averaging_oversmooths_and_random_features_do_not() -> None:
    edges = random_graph(300, 600, seed=25)
    features = gaussian(300, 16, seed=26)
    random_metrics = collapse_metrics(features, edges)
    assert random_metrics["mad"] == pytest.approx(1.0, abs=0.1)
    mean_in_degree = edges.shape[1] / 300
    assert random_metrics["rayleigh_quotient"] == pytest.approx(2 * mean_in_degree, rel=0.15)
    assert judge_collapse(random_metrics, num_rows=300, dim=16) == []

    smooth = collapse_metrics(neighbour_averaged(features, edges, rounds=50), edges)
    assert smooth["mad"] < 1e-4
    assert smooth["rayleigh_quotient"] < 1e-3
    assert smooth["mad_global"] < 1e-3
    assert {"mad", "rayleigh_quotient", "mad_global"} <= verdict_keys(
        judge_collapse(smooth, num_rows=300, dim=16)
    )


def symmetric_gcn_limit(
    edges: torch.Tensor, num_nodes: int, dim: int, noise: float
) -> torch.Tensor:
    """Rows proportional to sqrt(degree + 1), where deep GCN layers lead, plus a little noise."""
    degree = torch.zeros(num_nodes, dtype=torch.float64).index_add_(
        0, edges[1], torch.ones(edges.shape[1], dtype=torch.float64)
    )
    direction = gaussian(1, dim, seed=40).abs() + 0.5
    return (degree + 1).sqrt()[:, None] * direction + noise * gaussian(num_nodes, dim, seed=41)


def test_mad_global_matches_reference_on_several_graphs_with_isolated_nodes() -> None:
    first = random_graph(30, 20, seed=30)
    second = random_graph(12, 5, seed=31) + 30
    edges = torch.cat([first, second, torch.tensor([[45], [44]])], dim=1)  # 42..46: 44-45 only
    z = gaussian(47, 6, seed=32) + 0.2
    z[3] = 0.0  # a zero row: cosine 0 with every other row
    # Three graphs: 0-29, 30-41, and 42-46 (edges between 44 and 45 only), and a lone node 47.
    graph = torch.tensor([0] * 30 + [1] * 12 + [2] * 5)
    metrics = collapse_metrics(z, edges, graph)
    unit = torch.nn.functional.normalize(z, dim=1).numpy()
    expected = reference_graph_mads(unit, graph.numpy())
    assert len(expected) == 3
    assert metrics["mad_global"] == pytest.approx(np.mean(expected), rel=1e-10)
    assert metrics["mad_global_min"] == pytest.approx(min(expected), rel=1e-10)


def test_mad_global_compares_nodes_within_each_graph_only() -> None:
    """Two graphs, each collapsed onto its own direction: oversmoothed, though they differ."""
    ring = random_graph(20, 0, seed=33)
    edges = torch.cat([ring, ring + 20], dim=1)
    z = torch.cat([gaussian(1, 8, seed=34).repeat(20, 1), gaussian(1, 8, seed=35).repeat(20, 1)])
    z = z * torch.linspace(0.5, 2.0, 40, dtype=torch.float64)[:, None]  # proportional rows
    metrics = collapse_metrics(z, edges, torch.arange(2).repeat_interleave(20))
    assert metrics["mad_global"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["cosine_spread"] > 0.2  # the two graphs point different ways
    assert "mad_global" in verdict_keys(judge_collapse(metrics, num_rows=40, dim=8))


def test_proportional_rows_are_oversmoothing_that_only_mad_global_sees() -> None:
    """Deep symmetric-normalised graph convolutions: rows proportional, not equal."""
    edges = random_graph(60, 40, seed=36)
    metrics = collapse_metrics(symmetric_gcn_limit(edges, 60, 16, noise=0.2), edges)
    assert metrics["rayleigh_quotient"] > 0.05  # rows differ in length across edges
    assert metrics["mad"] > 0.003
    assert metrics["mad_global"] < 0.01
    verdicts = verdict_keys(judge_collapse(metrics, num_rows=60, dim=16))
    assert verdicts & {"mad", "rayleigh_quotient", "mad_global"} == {"mad_global"}
    healthy = collapse_metrics(gaussian(60, 16, seed=37).abs(), edges)  # non-negative features
    assert healthy["mad_global"] > 0.2
    assert judge_collapse(healthy, num_rows=60, dim=16) == []


# ---------------------------------------------------------------- the judge


def test_enough_rows() -> None:
    assert enough_rows(128, 32)
    assert not enough_rows(127, 32)
    assert enough_rows(64, 32, factor=2)


def test_judge_skips_ranks_with_too_few_rows_and_missing_or_nan_metrics() -> None:
    collapsed = {"rankme": 1.0, "effective_rank": 1.0}
    assert judge_collapse(collapsed, num_rows=100, dim=32) == []  # 100 < 4 * 32
    assert verdict_keys(judge_collapse(collapsed, num_rows=128, dim=32)) == {
        "rankme",
        "effective_rank",
    }
    assert judge_collapse(collapsed, num_rows=100, dim=1) == []  # one dimension: rank 1 is all
    assert judge_collapse({"mad": math.nan, "cosine_spread": math.nan}, num_rows=9, dim=3) == []


def test_judge_thresholds_are_arguments_and_energy_is_never_judged() -> None:
    metrics = {"cosine_spread": 0.3, "dirichlet_energy": 0.0, "rayleigh_quotient": 0.5}
    assert judge_collapse(metrics, num_rows=10, dim=2) == []
    verdicts = judge_collapse(
        metrics, num_rows=10, dim=2, min_cosine_spread=0.5, min_rayleigh_quotient=1.0
    )
    assert verdict_keys(verdicts) == {"cosine_spread", "rayleigh_quotient"}
    assert "0.3 < 0.5" in verdicts[0]
    with pytest.raises(ValueError, match="dim"):
        judge_collapse(metrics, num_rows=10, dim=0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("z", "message"),
    [
        (torch.randn(8), "2-D|shape \\[N, D\\]"),
        (torch.randn(1, 4), "at least 2 finite rows"),
        (torch.randn(0, 4), "at least 2 finite rows"),
        (torch.randn(5, 0), "no dimensions"),
        (torch.full((3, 2), math.nan), "at least 2 finite rows"),
    ],
)
def test_bad_embeddings_raise_value_error(z: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        collapse_metrics(z)


def test_non_float_inputs_raise_type_error() -> None:
    with pytest.raises(TypeError, match="floating-point"):
        collapse_metrics(torch.ones(4, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        collapse_metrics(np.ones((4, 2)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="integer"):
        collapse_metrics(torch.randn(4, 2), torch.zeros(2, 3))


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        (torch.tensor([0, 1, 2]), "\\[2, E\\]"),
        (torch.tensor([[0, 1], [1, 2], [2, 3]]), "\\[2, E\\]"),
        (torch.tensor([[0, 1], [1, 4]]), "outside the 4 rows"),
        (torch.tensor([[0, -1], [1, 2]]), "outside the 4 rows"),
    ],
)
def test_bad_edge_index_raises_value_error(edges: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        collapse_metrics(torch.randn(4, 3), edges)


# ---------------------------------------------------------------- the row buffer


def test_buffer_caps_rows_and_detaches() -> None:
    buffer = EmbeddingRowBuffer(max_rows=10)
    first = torch.randn(2, 3, 4, requires_grad=True)  # flattened to 6 rows
    buffer.append(first * 2)
    buffer.append(torch.ones(7, 4))
    buffer.append(torch.zeros(5, 4))  # ignored: full
    rows = buffer.rows()
    assert rows.shape == (10, 4) and buffer.is_full and buffer.num_rows == 10
    assert not rows.requires_grad
    torch.testing.assert_close(rows[:6], (first * 2).detach().reshape(6, 4))
    torch.testing.assert_close(rows[6:], torch.ones(4, 4))
    assert buffer.edge_index() is None


def test_buffer_offsets_edges_and_drops_edges_into_cut_rows() -> None:
    buffer = EmbeddingRowBuffer(max_rows=7)
    buffer.append(torch.randn(3, 2), torch.tensor([[0, 1, 2], [1, 2, 0]]))
    buffer.append(torch.randn(2, 2))  # a batch without edges: isolated nodes 3, 4
    buffer.append(torch.randn(4, 2), torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]]))
    # Rows 5 and 6 come from the last batch; its rows 2 and 3 were cut off, and their edge.
    assert buffer.edge_index().tolist() == [[0, 1, 2, 5, 6], [1, 2, 0, 6, 5]]
    metrics = buffer.compute()
    batches = np.array([0, 0, 0, 1, 1, 2, 2])  # each batch one graph
    assert_metrics_close(
        metrics,
        reference_metrics(buffer.rows().double().numpy(), buffer.edge_index().numpy(), batches),
        rtol=1e-5,
    )


def test_buffer_reset_and_dimension_mismatch() -> None:
    buffer = EmbeddingRowBuffer(max_rows=4)
    buffer.append(torch.randn(3, 2))
    with pytest.raises(ValueError, match="dimensions"):
        buffer.append(torch.randn(1, 5))
    buffer.reset()
    assert buffer.num_rows == 0 and buffer.edge_index() is None
    with pytest.raises(ValueError, match="no rows"):
        buffer.rows()
    buffer.append(torch.randn(2, 5))  # after a reset another width is fine
    assert buffer.rows().shape == (2, 5)


def test_buffer_fills_under_inference_mode_and_keeps_working_outside() -> None:
    buffer = EmbeddingRowBuffer(max_rows=6)
    with torch.inference_mode():
        buffer.append(torch.randn(3, 2))
    buffer.append(torch.randn(3, 2))
    assert buffer.rows().shape == (6, 2)


@pytest.mark.parametrize("max_rows", [1, 0, 2.5, True])
def test_buffer_rejects_bad_capacity(max_rows: object) -> None:
    with pytest.raises(ValueError, match="max_rows"):
        EmbeddingRowBuffer(max_rows)  # type: ignore[arg-type]
