"""Oversmoothing judged per graph: ``mad_global`` over all node pairs of each graph.

Unit tests against a float64 numpy all-pairs reference, and real ``Trainer.fit`` runs of PyTorch
Geometric ``GCNConv`` stacks on batches of small molecule-like graphs (some in two fragments).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from learnscope.collapse.metrics import collapse_metrics, per_graph_mad
from learnscope.collapse.row_buffer import EmbeddingRowBuffer
from learnscope.collapse.verdicts import judge_collapse
from learnscope.health import collapse_findings
from learnscope.lightning_glue import TrainingHelper
from tests.kit.models import Gcn, Ring, trainer

# ---------------------------------------------------------------- numpy reference (float64)


def unit_rows(z: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    return np.where(norms > 0, z / np.where(norms > 0, norms, 1.0), 0.0)


def reference_group_mad(z: np.ndarray, labels: np.ndarray) -> dict[int, float]:
    """Per group of rows: the mean over its nodes of the mean ``1 - cos`` to the other nodes.

    O(n^2) over all pairs, a zero row having cosine 0 with every row; groups of one node left out.
    """
    unit = unit_rows(np.asarray(z, dtype=np.float64))
    out = {}
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < 2:
            continue
        cosine = unit[members] @ unit[members].T
        distance = 1.0 - cosine
        np.fill_diagonal(distance, np.nan)
        out[int(label)] = float(np.mean(np.nanmean(distance, axis=1)))
    return out


def reference_components(num_nodes: int, edges: np.ndarray) -> np.ndarray:
    """Each node's connected component, by breadth-first search in Python."""
    neighbours: dict[int, set[int]] = {i: set() for i in range(num_nodes)}
    for a, b in np.asarray(edges).T.tolist():
        neighbours[a].add(b)
        neighbours[b].add(a)
    label = [-1] * num_nodes
    for start in range(num_nodes):
        if label[start] >= 0:
            continue
        label[start], queue = start, [start]
        while queue:
            for other in neighbours[queue.pop()]:
                if label[other] < 0:
                    label[other] = start
                    queue.append(other)
    return np.array(label)


def gaussian(rows: int, dim: int, seed: int) -> torch.Tensor:
    return torch.randn(
        rows, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


def path_edges(nodes: list[int]) -> torch.Tensor:
    """A path through ``nodes``, each edge stored in both directions."""
    a, b = torch.tensor(nodes[:-1]), torch.tensor(nodes[1:])
    return torch.stack([torch.cat([a, b]), torch.cat([b, a])])


# ---------------------------------------------------------------- the metric


def test_mad_global_is_over_all_node_pairs_of_each_graph_not_each_component() -> None:
    # Graph 0: two fragments (0-4 and 5-9), each collapsed onto its own direction, lengths
    # varying; graph 1: one fragment of random rows with a zero row; graph 2: one isolated node.
    z = torch.cat(
        [
            gaussian(1, 8, 1).repeat(5, 1),
            gaussian(1, 8, 2).repeat(5, 1),
            gaussian(6, 8, 3) + 0.3,
            gaussian(1, 8, 4),
        ]
    )
    z[:10] *= torch.linspace(0.5, 2.0, 10, dtype=torch.float64)[:, None]
    z[12] = 0.0
    edges = torch.cat(
        [path_edges([0, 1, 2, 3, 4]), path_edges([5, 6, 7, 8, 9]), path_edges(list(range(10, 16)))],
        dim=1,
    )
    graph = torch.tensor([0] * 10 + [1] * 6 + [2])

    expected = reference_group_mad(z.numpy(), graph.numpy())
    per_graph = per_graph_mad(z, graph)
    assert per_graph.dtype == torch.float64 and per_graph.shape == (3,)
    assert per_graph[0].item() == pytest.approx(expected[0], rel=1e-12)
    assert per_graph[1].item() == pytest.approx(expected[1], rel=1e-12)
    assert math.isnan(per_graph[2].item())  # one node: no pair

    metrics = collapse_metrics(z, edges, graph)
    assert metrics["mad_global"] == pytest.approx(np.mean(list(expected.values())), rel=1e-12)
    assert metrics["mad_global_min"] == pytest.approx(min(expected.values()), rel=1e-12)

    # Per connected component graph 0 would read as oversmoothed (each fragment is one
    # direction); over all its pairs it is not.
    components = reference_components(len(z), edges.numpy())
    by_component = reference_group_mad(z.numpy(), components)
    assert by_component[0] == pytest.approx(0.0, abs=1e-12)
    assert by_component[5] == pytest.approx(0.0, abs=1e-12)
    assert expected[0] > 0.1


def test_per_graph_mad_matches_the_reference_on_many_random_graphs() -> None:
    generator = torch.Generator().manual_seed(5)
    for trial in range(20):
        rows = 3 + trial * 7
        z = gaussian(rows, 5, 100 + trial) + 0.4 * (trial % 3)
        graph = torch.randint(0, 1 + trial, (rows,), generator=generator) * 3 + 7  # sparse labels
        z[torch.randint(0, rows, (2,), generator=generator)] = 0.0
        expected = reference_group_mad(z.numpy(), graph.numpy())
        labels = torch.unique(graph).tolist()
        values = per_graph_mad(z.float(), graph).tolist()  # float32 in, float64 work
        assert len(values) == len(labels)
        for label, value in zip(labels, values, strict=True):
            if label in expected:
                assert value == pytest.approx(expected[label], rel=1e-5, abs=1e-7)
            else:
                assert math.isnan(value)


def test_rows_without_a_graph_index_are_one_graph_and_nonfinite_rows_are_dropped() -> None:
    z = gaussian(12, 4, 6)
    edges = path_edges(list(range(12)))
    one = collapse_metrics(z, edges)
    expected = reference_group_mad(z.numpy(), np.zeros(12, dtype=int))[0]
    assert one["mad_global"] == pytest.approx(expected, rel=1e-12)
    assert one["mad_global_min"] == one["mad_global"]
    dirty = z.clone()
    dirty[3, 1] = math.nan
    graph = torch.tensor([0] * 6 + [1] * 6)
    keep = torch.ones(12, dtype=torch.bool)
    keep[3] = False
    reference = reference_group_mad(z[keep].numpy(), graph[keep].numpy())
    assert per_graph_mad(dirty, graph).tolist() == pytest.approx(
        [reference[0], reference[1]], rel=1e-12
    )


def test_graph_index_is_checked() -> None:
    z = gaussian(6, 3, 7)
    edges = path_edges(list(range(6)))
    with pytest.raises(ValueError, match=r"one value per row of z: got shape \(5,\) for 6 rows"):
        collapse_metrics(z, edges, torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="graph_index must be an integer tensor"):
        per_graph_mad(z, torch.zeros(6))
    with pytest.raises(ValueError, match="graph_index needs edge_index"):
        collapse_metrics(z, graph_index=torch.zeros(6, dtype=torch.long))


# ---------------------------------------------------------------- the buffer


def test_buffer_keeps_graph_numbers_of_micro_batches_apart() -> None:
    buffer = EmbeddingRowBuffer(max_rows=40)
    batches = [gaussian(7, 6, 10 + k) for k in range(3)]
    graph = torch.tensor([0, 0, 0, 1, 1, 2, 2])  # three graphs per micro-batch
    edges = path_edges([0, 1, 2])
    for k, rows in enumerate(batches):
        buffer.append(rows, edges)
        if k < 2:  # the third batch brings no graph index: its rows are one graph
            buffer.append_graphs(graph, ids=[f"b{k}g{i}" for i in range(3)])
    labels = torch.cat([graph, graph + 3, torch.full((7,), 6)])
    assert buffer.graph_index().tolist() == labels.tolist()
    assert buffer.graph_ids() == ["b0g0", "b0g1", "b0g2", "b1g0", "b1g1", "b1g2", None]
    everything = torch.cat(batches)
    expected = reference_group_mad(everything.numpy(), labels.numpy())
    assert buffer.per_graph_mad().tolist() == pytest.approx(
        [expected[i] for i in range(7)], rel=1e-12
    )
    assert buffer.compute()["mad_global"] == pytest.approx(np.mean(list(expected.values())))
    buffer.reset()
    assert buffer.graph_index() is None and buffer.graph_ids() is None


def test_buffer_cuts_the_graph_index_with_the_rows() -> None:
    buffer = EmbeddingRowBuffer(max_rows=10)
    buffer.append(gaussian(6, 3, 20), path_edges([0, 1]))
    buffer.append_graphs(torch.tensor([0, 0, 1, 1, 2, 2]), ids=torch.tensor([10, 11, 12]))
    buffer.append(gaussian(6, 3, 21), path_edges([0, 1]))  # 4 of its 6 rows kept
    buffer.append_graphs(torch.tensor([0, 0, 0, 1, 2, 2]), ids=torch.tensor([20, 21, 22]))
    buffer.append(gaussian(6, 3, 22), path_edges([0, 1]))  # full: ignored
    buffer.append_graphs(torch.tensor([0] * 6), ids=torch.tensor([30]))
    assert buffer.graph_index().tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3, 4]
    assert buffer.graph_ids() == [10, 11, 12, 20, 21]
    with pytest.raises(ValueError, match=r"graph_index has 5 values but the last batch had 6"):
        buffer.reset()
        buffer.append(gaussian(6, 3, 23), path_edges([0, 1]))
        buffer.append_graphs(torch.zeros(5, dtype=torch.long))


# ---------------------------------------------------------------- the verdict


def eight_graphs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """8 graphs of 10 nodes: graphs 2 and 5 have identical node rows (MAD 0), the rest random."""
    z = gaussian(80, 16, 30)
    for collapsed in (2, 5):
        z[collapsed * 10 : collapsed * 10 + 10] = gaussian(1, 16, 31 + collapsed)
    graph = torch.arange(8).repeat_interleave(10)
    edges = torch.cat([path_edges(list(range(g * 10, g * 10 + 10))) for g in range(8)], dim=1)
    return z, edges, graph


def test_two_oversmoothed_graphs_of_eight_are_found_though_the_mean_is_healthy() -> None:
    z, edges, graph = eight_graphs()
    metrics = collapse_metrics(z, edges, graph)
    per_graph = per_graph_mad(z, graph)
    assert metrics["mad_global"] > 0.5  # the mean over graphs alone would say nothing
    assert metrics["mad_global_min"] == pytest.approx(0.0, abs=1e-12)
    ids = [f"mol-{i}" for i in range(8)]
    findings = collapse_findings(
        metrics, "gnn", 7, num_rows=80, dim=16, graph_mad=per_graph, graph_ids=ids
    )
    (over,) = [f for f in findings if f.code == "oversmoothing"]
    assert over.message.startswith("mad_global < 0.01 in 2 of 8 graphs (lowest ")
    assert "mol-2" in over.message and "mol-5" in over.message
    assert "mol-0" not in over.message
    # Without ids the count is still given; without per-graph values the lowest graph is judged.
    verdicts = judge_collapse(metrics, num_rows=80, dim=16, graph_mad=per_graph)
    assert any("2 of 8 graphs" in v and "mol-" not in v for v in verdicts)
    assert any(v.startswith("mad_global ") for v in judge_collapse(metrics, num_rows=80, dim=16))
    # A tolerated fraction of oversmoothed graphs (say, symmetric crystals) silences it.
    quiet = judge_collapse(
        metrics, num_rows=80, dim=16, graph_mad=per_graph, max_oversmoothed_fraction=0.25
    )
    assert not any(v.startswith("mad_global") for v in quiet)


def test_graphs_without_edges_are_not_judged() -> None:
    z, _, graph = eight_graphs()
    metrics = collapse_metrics(z, torch.zeros(2, 0, dtype=torch.long), graph)
    assert math.isnan(metrics["mad_global"])  # nothing to measure without an edge
    per_graph = per_graph_mad(z, graph)
    assert judge_collapse(metrics, num_rows=80, dim=16, graph_mad=per_graph) == []


def test_healthy_graphs_give_no_verdict() -> None:
    z, edges, graph = eight_graphs()
    z = gaussian(80, 16, 40)
    metrics = collapse_metrics(z, edges, graph)
    assert judge_collapse(metrics, num_rows=80, dim=16, graph_mad=per_graph_mad(z, graph)) == []


# ---------------------------------------------------------------- real fits on PyG graphs


def molecules(count: int, seed: int) -> list[Any]:
    """Molecule-like graphs of 5 to 24 nodes (random trees), every third one in two fragments."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    graphs = []
    for k in range(count):
        n = int(torch.randint(5, 25, (1,), generator=g))
        source, target = [], []
        for i in range(1, n):
            if k % 3 == 0 and i == n // 2:
                continue  # no bond between the two halves: two fragments
            j = int(torch.randint(0, i, (1,), generator=g))
            source += [i, j]
            target += [j, i]
        graphs.append(
            Data(
                x=torch.randn(n, 8, generator=g),
                edge_index=torch.tensor([source, target]),
                y=torch.randint(0, 3, (n,), generator=g),
                gid=torch.tensor([1000 + k]),
            )
        )
    return graphs


class AtomClassifier(pl.LightningModule):
    """Node classification; keeps the encoder's output and graph index of every step."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.encoder = Gcn(layers, features=8)
        self.head = nn.Linear(16, 3)
        self.seen: dict[int, list[tuple[np.ndarray, np.ndarray, list[int]]]] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        z = self.encoder(batch.x, batch.edge_index)
        kept = (z.detach().double().numpy(), batch.batch.numpy(), batch.gid.tolist())
        self.seen.setdefault(self.global_step, []).append(kept)
        return nn.functional.cross_entropy(self.head(z), batch.y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def graph_loader(batch_size: int = 8) -> Any:
    from torch_geometric.loader import DataLoader as GraphLoader

    return GraphLoader(molecules(32, seed=100), batch_size=batch_size, shuffle=False)


def step_reference(parts: list[tuple[np.ndarray, np.ndarray, list[int]]]) -> dict[Any, float]:
    """Every graph of a step's micro-batches, by id: its MAD over all node pairs."""
    out: dict[Any, float] = {}
    for z, graph, ids in parts:
        for label, value in reference_group_mad(z, graph).items():
            out[ids[label]] = value
    return out


def tb_scalars(logger: TensorBoardLogger, tag: str) -> dict[int, float]:
    events = EventAccumulator(logger.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {s.step: s.value for s in events.Scalars(tag)}


def oversmoothing_messages(helper: TrainingHelper) -> list[str]:
    return [f.message for f in helper.findings if f.code == "oversmoothing"]


def test_sixteen_layer_gcn_oversmooths_per_graph_and_two_layers_do_not(tmp_path: Path) -> None:
    torch.manual_seed(0)
    tb = TensorBoardLogger(str(tmp_path), name="deep")
    deep = AtomClassifier(layers=16)
    helper = TrainingHelper(
        check_every_n_steps=2,
        edge_index_fn=lambda b: b.edge_index,
        ids_fn=lambda b: b.gid,
        warn_every_n_steps=1,
    )
    trainer(tmp_path, tb, [helper], max_steps=4, max_epochs=-1).fit(deep, graph_loader())
    (message,) = oversmoothing_messages(helper)  # one finding per (code, subject): the last
    step = helper.findings[[f.code for f in helper.findings].index("oversmoothing")].step
    reference = step_reference(deep.seen[step])
    low = sorted((v, k) for k, v in reference.items() if v < 0.01)
    assert low, "the 16-layer GCN should oversmooth some graphs"
    verdict = message[message.index("mad_global") :]
    assert verdict.startswith(f"mad_global < 0.01 in {len(low)} of 8 graphs (lowest ")
    assert f"lowest {low[0][0]:.3g}" in verdict
    named = [int(i) for i in re.findall(r"\b1\d{3}\b", verdict)]
    assert sorted(named) == sorted(k for _, k in low)
    # The scalars: the mean over graphs of each graph's MAD, and the lowest graph's.
    for s in (0, 2):
        expected = step_reference(deep.seen[s])
        assert tb_scalars(tb, "~learnscope/health/collapse/encoder/mad_global")[s] == pytest.approx(
            np.mean(list(expected.values())), rel=1e-4
        )
        assert tb_scalars(tb, "~learnscope/health/collapse/encoder/mad_global_min")[
            s
        ] == pytest.approx(min(expected.values()), rel=1e-4, abs=1e-7)

    torch.manual_seed(0)
    shallow = TrainingHelper(
        check_every_n_steps=2, edge_index_fn=lambda b: b.edge_index, ids_fn=lambda b: b.gid
    )
    run = trainer(tmp_path, False, [shallow], max_steps=4, max_epochs=-1)
    run.fit(AtomClassifier(layers=2), graph_loader())
    assert run.global_step == 4 and shallow.findings == []


def test_micro_batches_of_a_check_step_are_graphs_of_their_own(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = AtomClassifier(layers=16)
    helper = TrainingHelper(check_every_n_steps=2, edge_index_fn=lambda b: b.edge_index)
    run = trainer(tmp_path, False, [helper], max_steps=3, max_epochs=-1, accumulate_grad_batches=2)
    run.fit(model, graph_loader(batch_size=4))
    (finding,) = [f for f in helper.findings if f.code == "oversmoothing"]
    # the check at step 2 (none on the starting weights of step 0), whose message is kept
    assert finding.first_step == 2
    low = [v for v in step_reference(model.seen[2]).values() if v < 0.01]
    message = finding.message
    assert f"mad_global < 0.01 in {len(low)} of 8 graphs" in message


def test_tolerated_fraction_through_collapse_thresholds(tmp_path: Path) -> None:
    torch.manual_seed(0)
    helper = TrainingHelper(
        check_every_n_steps=2,
        edge_index_fn=lambda b: b.edge_index,
        collapse_thresholds={"max_oversmoothed_fraction": 1.0},
    )
    run = trainer(tmp_path, False, [helper], max_steps=4, max_epochs=-1)
    run.fit(AtomClassifier(layers=16), graph_loader())
    assert not any("mad_global" in m for m in oversmoothing_messages(helper))


class RingNodes(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Ring(300)
        self.head = nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits = self.head(self.encoder(batch["x"], batch["edge_index"]))
        return nn.functional.cross_entropy(logits, batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def ring_batches() -> Any:
    """Dict batches of four rings of 16 nodes each, with a ``graph`` entry per node."""
    from torch.utils.data import DataLoader

    nodes = torch.arange(16)
    ring = torch.cat(
        [torch.stack([nodes, (nodes + 1) % 16]), torch.stack([(nodes + 1) % 16, nodes])], 1
    )
    edges = torch.cat([ring + 16 * g for g in range(4)], dim=1)
    g = torch.Generator().manual_seed(3)
    data = [
        {
            "x": torch.randn(64, 6, generator=g),
            "y": torch.randint(0, 3, (64,), generator=g),
            "edge_index": edges,
            "graph": torch.arange(4).repeat_interleave(16),
            "names": ["ring-a", "ring-b", "ring-c", "ring-d"],
        }
        for _ in range(4)
    ]
    return DataLoader(data, batch_size=None)


def test_graph_index_fn_for_batches_that_are_not_pyg(tmp_path: Path) -> None:
    helper = TrainingHelper(
        check_every_n_steps=2,
        edge_index_fn=lambda b: b["edge_index"],
        graph_index_fn=lambda b: b["graph"],
        ids_fn=lambda b: b["names"],
    )
    run = trainer(tmp_path, False, [helper], max_steps=2, max_epochs=-1)
    run.fit(RingNodes(), ring_batches())
    (message,) = oversmoothing_messages(helper)
    assert "mad_global < 0.01 in 4 of 4 graphs" in message
    assert all(name in message for name in ("ring-a", "ring-b", "ring-c", "ring-d"))

    # Without graph_index_fn a dict batch is one graph: the four rings, each smoothed onto its
    # own direction, differ from each other, so that graph's MAD is not low (the neighbour
    # metrics still see the smoothing).
    helper = TrainingHelper(check_every_n_steps=2, edge_index_fn=lambda b: b["edge_index"])
    trainer(tmp_path, False, [helper], max_steps=2, max_epochs=-1).fit(RingNodes(), ring_batches())
    (message,) = oversmoothing_messages(helper)
    assert message.startswith("mad ") and "mad_global" not in message


def test_graph_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="graph_index_fn and ids_fn need edge_index_fn"):
        TrainingHelper(ids_fn=lambda b: b.gid)
    with pytest.raises(ValueError, match="must be callables"):
        TrainingHelper(edge_index_fn=lambda b: b.edge_index, graph_index_fn="batch")
    helper = TrainingHelper(
        check_every_n_steps=2,
        edge_index_fn=lambda b: b["edge_index"],
        graph_index_fn=lambda b: b["graph"][:-1],
    )
    with pytest.raises(ValueError, match=r"graph_index_fn gave 63 values but the embedding has 64"):
        trainer(tmp_path, False, [helper], max_steps=2, max_epochs=-1).fit(
            RingNodes(), ring_batches()
        )
    helper = TrainingHelper(
        check_every_n_steps=2,
        edge_index_fn=lambda b: b["edge_index"],
        graph_index_fn=lambda b: b["graph"],
        ids_fn=lambda b: b["names"][:3],
    )
    with pytest.raises(ValueError, match=r"ids_fn gave 3 ids but the batch has 4 graphs"):
        trainer(tmp_path, False, [helper], max_steps=2, max_epochs=-1).fit(
            RingNodes(), ring_batches()
        )
