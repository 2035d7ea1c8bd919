"""EmbeddingProjector with several evaluation loaders and with graph batches, in real fits.

Every test reads the projector back the way TensorBoard's projector plugin serves it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from learnscope.embeddings.batch_rows import batch_rows, graph_rows
from learnscope.lightning_glue import EmbeddingProjector
from tests.kit.models import TinyClassifier, blobs, trainer
from tests.kit.readers import ProjectorReader, parse_metadata

# -- helpers: data sets that carry their own index, so that every row's id can be checked -----


def indexed(n: int, seed: int) -> TensorDataset:
    """``(x, label, index)`` triples: blobs whose third field is the sample's index."""
    x, y = blobs(n, seed=seed).tensors
    return TensorDataset(x, y, torch.arange(n))


class IndexedClassifier(TinyClassifier):
    """Batches are ``(x, label, index)``; takes any number of validation loaders."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return super().training_step(batch[:2], batch_idx)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y, _ = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y), add_dataloader_idx=True)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.validation_step(batch, batch_idx, dataloader_idx)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0])


def snapshots(logdir: Path) -> list[tuple[str, np.ndarray, list[str] | None, list[list[str]]]]:
    """``(name, vectors, header, rows)`` of every snapshot of the single run in ``logdir``.

    ``header`` is ``None`` for a single column (the projector's metadata has no header then).
    """
    reader = ProjectorReader(logdir)
    (run,) = reader.runs()
    found = []
    for name in reader.names(run):
        header, rows = parse_metadata(reader.metadata(run, name))
        found.append((name, reader.tensor(run, name), header, rows))
    return found


def column(header: list[str] | None, rows: list[list[str]], name: str) -> list[str]:
    assert header is not None, "a single metadata column has no header"
    return [row[header.index(name)] for row in rows]


VAL_SIZES = {"clean": (24, 1), "noisy": (36, 2)}  # name: (samples, seed)


def val_loaders(as_dict: bool) -> dict[str, DataLoader] | list[DataLoader]:
    loaders = {k: DataLoader(indexed(n, s), batch_size=8) for k, (n, s) in VAL_SIZES.items()}
    return loaders if as_dict else list(loaders.values())


def train_loader() -> DataLoader:
    return DataLoader(indexed(32, seed=0), batch_size=16, shuffle=True)


# -- several evaluation loaders ---------------------------------------------------------------


@pytest.mark.parametrize("as_dict", [False, True], ids=["list", "dict"])
def test_several_validation_loaders_with_dataset_index(tmp_path: Path, as_dict: bool) -> None:
    torch.manual_seed(0)
    projector = EmbeddingProjector(
        "encoder",
        ids_fn="dataset_index",
        metadata_fn=lambda b: {"label": b[1], "index": b[2]},
    )
    model = IndexedClassifier()
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, tb, [projector], max_epochs=2)
    fit.fit(model, train_loader(), val_loaders(as_dict))
    assert not projector.switched_off

    names = list(VAL_SIZES) if as_dict else ["0", "1"]
    datasets = {name: indexed(n, s) for name, (n, s) in zip(names, VAL_SIZES.values(), strict=True)}
    found = snapshots(tmp_path / "tb")
    assert [name for name, *_ in found] == [f"encoder/validate/step_{s:09d}" for s in (2, 4)]
    pairs_per_epoch = []
    for _, vectors, header, rows in found:
        assert header == ["label", "index", "id", "dataloader"]
        assert len(rows) == len(vectors) == 24 + 36  # every row of both loaders, one snapshot
        loader, ids = column(header, rows, "dataloader"), column(header, rows, "id")
        assert sorted(set(loader)) == sorted(names)
        assert column(header, rows, "index") == ids  # each row's id is its own loader's index
        for name in names:
            mine = sorted(int(i) for i, d in zip(ids, loader, strict=True) if d == name)
            assert mine == list(range(len(datasets[name])))
        pairs_per_epoch.append(set(zip(loader, ids, strict=True)))
    assert pairs_per_epoch[0] == pairs_per_epoch[1]
    # The last snapshot holds the final encoder's vector of each loader's own sample.
    _, vectors, header, rows = found[-1]
    with torch.no_grad():
        for vector, loader, index, label in zip(
            vectors,
            column(header, rows, "dataloader"),
            column(header, rows, "id"),
            column(header, rows, "label"),
            strict=True,
        ):
            x, y, _ = datasets[loader][int(index)]
            assert int(label) == int(y)
            np.testing.assert_allclose(vector, model.encoder(x).numpy(), rtol=1e-5, atol=1e-6)


def test_several_loaders_share_max_points_and_keep_the_same_points(tmp_path: Path) -> None:
    projector = EmbeddingProjector("encoder", ids_fn="dataset_index", max_points=20)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, tb, [projector], max_epochs=2)
    fit.fit(IndexedClassifier(), train_loader(), val_loaders(as_dict=True))

    chosen = []
    for _, vectors, header, rows in snapshots(tmp_path / "tb"):
        assert header == ["id", "dataloader"] and len(rows) == len(vectors) == 20
        chosen.append([(r[1], r[0]) for r in rows])  # (dataloader, id), in snapshot order
    assert chosen[0] == chosen[1] and len(set(chosen[0])) == 20
    assert {loader for loader, _ in chosen[0]} == {"clean", "noisy"}


def test_several_loaders_without_ids_have_a_dataloader_column(tmp_path: Path) -> None:
    projector = EmbeddingProjector("encoder", metadata_fn=lambda b: {"label": b[1]})
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, tb, [projector], max_epochs=1)
    model = IndexedClassifier()
    fit.fit(model, train_loader(), val_loaders(as_dict=False))

    ((_, vectors, header, rows),) = snapshots(tmp_path / "tb")
    assert header == ["label", "dataloader"]
    assert column(header, rows, "dataloader") == ["0"] * 24 + ["1"] * 36  # epoch order
    x = torch.cat([indexed(n, s).tensors[0] for n, s in VAL_SIZES.values()])
    with torch.no_grad():
        np.testing.assert_allclose(vectors, model.encoder(x).numpy(), rtol=1e-5, atol=1e-6)

    # One test loader: no dataloader column.
    tb = TensorBoardLogger(str(tmp_path), name="one")
    projector = EmbeddingProjector("encoder", stages="test", ids_fn="dataset_index")
    trainer(tmp_path, tb, [projector]).test(model, val_loaders(as_dict=False)[1])
    ((_, vectors, header, rows),) = snapshots(tmp_path / "one")
    assert header is None and sorted(int(r[0]) for r in rows) == list(range(36))  # only "id"


@pytest.mark.parametrize("stage", ["test", "predict"])
def test_several_test_and_predict_loaders(tmp_path: Path, stage: str) -> None:
    projector = EmbeddingProjector("encoder", stages=stage, ids_fn="dataset_index")
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, tb, [projector])
    getattr(run, stage)(IndexedClassifier(), val_loaders(as_dict=True))
    ((_, vectors, header, rows),) = snapshots(tmp_path / "tb")
    assert len(vectors) == 60 and header == ["id", "dataloader"]
    pairs = {(r[1], int(r[0])) for r in rows}
    assert pairs == {("clean", i) for i in range(24)} | {("noisy", i) for i in range(36)}


# -- graph batches ---------------------------------------------------------------------------

NODE_FEATURES, GRAPHS = 4, 30


def random_graphs(n: int = GRAPHS, seed: int = 0) -> list[Any]:
    """``n`` random graphs of 2 to 9 nodes; ``y`` is a graph label, ``idx`` the graph's index and
    ``nid`` each node's number within its graph (both only to check what the projector wrote)."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(n):
        size = int(torch.randint(2, 10, (1,), generator=g))
        ring = torch.arange(size)
        edges = torch.stack(
            [torch.cat([ring, (ring + 1) % size]), torch.cat([(ring + 1) % size, ring])]
        )
        graphs.append(
            Data(
                x=torch.randn(size, NODE_FEATURES, generator=g),
                edge_index=edges,
                y=torch.tensor([i % 3]),
                idx=torch.tensor([i]),
                nid=torch.arange(size),
            )
        )
    return graphs


class GraphEncoder(nn.Module):
    """Two GCN layers: one embedding per node."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1 = GCNConv(NODE_FEATURES, 16)
        self.conv2 = GCNConv(16, hidden)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class MeanPool(nn.Module):
    """One embedding per graph: the mean of its nodes'."""

    def forward(self, nodes: torch.Tensor, graph: torch.Tensor, count: int) -> torch.Tensor:
        total = torch.zeros(count, nodes.shape[1]).index_add_(0, graph, nodes)
        sizes = torch.zeros(count).index_add_(0, graph, torch.ones(len(graph)))
        return total / sizes[:, None]


class GraphClassifier(pl.LightningModule):
    """GCN ``encoder`` (node embeddings), ``pool`` (graph embeddings) and a ``head``."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = GraphEncoder()
        self.pool = MeanPool()
        self.head = nn.Linear(8, 3)

    def forward(self, batch: Any) -> torch.Tensor:
        nodes = self.encoder(batch.x, batch.edge_index)
        return self.head(self.pool(nodes, batch.batch, batch.num_graphs))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self(batch), batch.y)
        self.log("train_loss", loss, batch_size=batch.num_graphs)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = nn.functional.cross_entropy(self(batch), batch.y)
        self.log("val_loss", loss, batch_size=batch.num_graphs)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def graph_loaders(graphs: list[Any] | None = None) -> tuple[Any, Any, list[Any]]:
    from torch_geometric.loader import DataLoader as GraphLoader

    graphs = random_graphs() if graphs is None else graphs
    return (
        GraphLoader(graphs, batch_size=6, shuffle=True),
        GraphLoader(graphs, batch_size=6),
        graphs,
    )


def check_node_rows(
    header: list[str] | None, rows: list[list[str]], graphs: list[Any]
) -> set[tuple[int, int]]:
    """Check each node row against its graph; return its (id, node) pairs."""
    assert header == ["label", "graph", "node_number", "id", "node"]
    ids = [int(i) for i in column(header, rows, "id")]
    nodes = [int(n) for n in column(header, rows, "node")]
    assert ids == [int(i) for i in column(header, rows, "graph")]  # the graph's dataset index
    assert nodes == [int(n) for n in column(header, rows, "node_number")]
    for i, node, label in zip(ids, nodes, column(header, rows, "label"), strict=True):
        assert int(label) == int(graphs[i].y) and 0 <= node < graphs[i].num_nodes
    pairs = set(zip(ids, nodes, strict=True))
    assert len(pairs) == len(rows)  # unique
    return pairs


def node_metadata(batch: Any) -> dict[str, Any]:
    return {"label": batch.y, "graph": batch.idx, "node_number": batch.nid}


@pytest.mark.parametrize("max_points", [5000, 40])
def test_pyg_node_embeddings_get_graph_ids_and_node_numbers(
    tmp_path: Path, max_points: int
) -> None:
    torch.manual_seed(0)
    train, val, graphs = graph_loaders()
    total_nodes = sum(g.num_nodes for g in graphs)
    projector = EmbeddingProjector(
        "encoder", ids_fn="dataset_index", metadata_fn=node_metadata, max_points=max_points
    )
    model = GraphClassifier()
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector], max_epochs=2).fit(model, train, val)
    assert not projector.switched_off

    found = snapshots(tmp_path / "tb")
    assert len(found) == 2
    expected = min(total_nodes, max_points)
    pairs = []
    for _, vectors, header, rows in found:
        assert len(vectors) == len(rows) == expected
        pairs.append(check_node_rows(header, rows, graphs))
    assert pairs[0] == pairs[1]
    if max_points >= total_nodes:
        assert pairs[0] == {(i, n) for i, g in enumerate(graphs) for n in range(g.num_nodes)}
        # the vectors are the final encoder's node embeddings of those graphs
        _, vectors, header, rows = found[-1]
        with torch.no_grad():
            per_graph = [model.encoder(g.x, g.edge_index).numpy() for g in graphs]
        ids, nodes = column(header, rows, "id"), column(header, rows, "node")
        expected_vectors = np.stack(
            [per_graph[int(i)][int(n)] for i, n in zip(ids, nodes, strict=True)]
        )
        np.testing.assert_allclose(vectors, expected_vectors, rtol=1e-5, atol=1e-5)


def test_pooled_graph_embeddings_keep_one_row_per_graph(tmp_path: Path) -> None:
    # 31 graphs: the last validation batch is one graph of one node, which alone cannot tell
    # nodes from graphs (rows == nodes == graphs); it is read as the earlier batches were.
    one_node = random_graphs(1, seed=1)[0].subgraph(torch.tensor([0]))
    one_node.idx, one_node.nid = torch.tensor([GRAPHS]), torch.tensor([0])
    train, val, graphs = graph_loaders(random_graphs() + [one_node])
    pooled = EmbeddingProjector(
        "pool", ids_fn="dataset_index", metadata_fn=lambda b: {"label": b.y, "graph": b.idx}
    )
    nodes = EmbeddingProjector("encoder", ids_fn="dataset_index", metadata_fn=node_metadata)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [pooled, nodes], max_epochs=1).fit(GraphClassifier(), train, val)

    found = {name: (header, rows) for name, _, header, rows in snapshots(tmp_path / "tb")}
    assert sorted(found) == ["encoder/validate/step_000000006", "pool/validate/step_000000006"]
    header, rows = found["pool/validate/step_000000006"]
    assert header == ["label", "graph", "id"] and len(rows) == GRAPHS + 1
    assert column(header, rows, "id") == column(header, rows, "graph")
    assert sorted(int(i) for i in column(header, rows, "id")) == list(range(GRAPHS + 1))
    assert all(int(r[0]) == int(graphs[int(r[2])].y) for r in rows)
    header, rows = found["encoder/validate/step_000000006"]
    pairs = check_node_rows(header, rows, graphs)
    assert len(pairs) == sum(g.num_nodes for g in graphs) and (GRAPHS, 0) in pairs


# A graph library other than PyG: batches are dicts, with each node's graph in "graph".


def collate_dicts(graphs: list[Any]) -> dict[str, torch.Tensor]:
    sizes = torch.tensor([g.num_nodes for g in graphs])
    return {
        "x": torch.cat([g.x for g in graphs]),
        "graph": torch.repeat_interleave(torch.arange(len(graphs)), sizes),
        "y": torch.cat([g.y for g in graphs]),
        "nid": torch.cat([g.nid for g in graphs]),
        "idx": torch.cat([g.idx for g in graphs]),
    }


class DictGraphClassifier(GraphClassifier):
    """Node MLP ``encoder`` on dict batches (no edges), mean pool, head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(NODE_FEATURES, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, batch: Any) -> torch.Tensor:
        count = len(batch["y"])
        return self.head(self.pool(self.encoder(batch["x"]), batch["graph"], count))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self(batch), batch["y"])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = nn.functional.cross_entropy(self(batch), batch["y"])
        self.log("val_loss", loss, batch_size=len(batch["y"]))


def test_graph_index_fn_for_other_graph_batches(tmp_path: Path) -> None:
    graphs = random_graphs()
    train = DataLoader(graphs, batch_size=6, shuffle=True, collate_fn=collate_dicts)
    val = DataLoader(graphs, batch_size=6, collate_fn=collate_dicts)
    projector = EmbeddingProjector(
        "encoder",
        ids_fn="dataset_index",
        graph_index_fn=lambda batch: batch["graph"],
        metadata_fn=lambda b: {"label": b["y"], "graph": b["idx"], "node_number": b["nid"]},
        max_points=50,
    )
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector], max_epochs=2).fit(DictGraphClassifier(), train, val)

    pairs = [
        check_node_rows(header, rows, graphs) for *_, header, rows in snapshots(tmp_path / "tb")
    ]
    assert len(pairs) == 2 and pairs[0] == pairs[1] and len(pairs[0]) == 50


def test_graph_index_fn_of_the_wrong_length_fails_in_the_sanity_check(tmp_path: Path) -> None:
    graphs = random_graphs()
    val = DataLoader(graphs, batch_size=6, collate_fn=collate_dicts)
    projector = EmbeddingProjector("encoder", graph_index_fn=lambda b: b["graph"][:-1])
    fit = trainer(tmp_path, False, [projector])
    with pytest.raises(ValueError, match=r"graph_index_fn gave 2\d values but the batch has"):
        fit.fit(DictGraphClassifier(), val, val)
    assert fit.global_step == 0


def test_graph_rows_expand_per_graph_values_and_images() -> None:
    samples = graph_rows(torch.tensor([0, 0, 0, 1, 2, 2]), count=3)
    rows = batch_rows(
        torch.zeros(6, 4),
        {"label": ["a", "b", "c"], "charge": torch.arange(6)},
        images=torch.arange(3.0).reshape(3, 1, 1, 1),
        ids=torch.tensor([10, 11, 12]),
        samples=samples,
    )
    assert rows.columns["label"] == ["a", "a", "a", "b", "c", "c"]
    assert rows.columns["charge"].tolist() == list(range(6))
    assert rows.columns["id"].tolist() == [10, 10, 10, 11, 12, 12]
    assert rows.columns["node"].tolist() == [0, 1, 2, 0, 0, 1]
    assert rows.images is not None and rows.images.reshape(-1).tolist() == [0, 0, 0, 1, 2, 2]
    with pytest.raises(ValueError, match="'node' column"):
        batch_rows(torch.zeros(6, 4), {"node": torch.arange(6)}, samples=samples)
