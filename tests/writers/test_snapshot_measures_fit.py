"""A real fit's snapshots carry their ranks and label silhouette in the run record, and the run
summary folds them: each value checked against one recomputed here, the ranks from the tensor
the TensorBoard writer wrote (read back by TensorBoard's projector plugin), the silhouette by
scikit-learn from the record's own 2-D view and labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from sklearn.metrics import silhouette_score
from torch import nn

from learnscope.lightning_glue import EmbeddingProjector
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import decode_array
from learnscope.run_directory.summary import summarize_record
from tests.kit.callbacks import labels
from tests.kit.models import TinyClassifier, loaders, trainer
from tests.kit.readers import ProjectorReader
from tests.kit.references import effective_rank, rankme

pytestmark = pytest.mark.slow


class OneDirection(nn.Module):
    """Every row a multiple of one fixed direction: a collapsed embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("direction", torch.linspace(-1.0, 1.0, 8))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.sum(dim=1, keepdim=True) * self.direction


class WithCollapsed(TinyClassifier):
    """The kit's classifier with a collapsed branch beside its encoder (no part of the loss)."""

    def __init__(self) -> None:
        super().__init__()
        self.collapsed = OneDirection()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        return self.head(h + 0 * self.collapsed(h))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A two-epoch fit with a projector on ``encoder`` (aligned PCA) and one on ``collapsed``."""
    root = tmp_path_factory.mktemp("measures")
    torch.manual_seed(0)
    tb = TensorBoardLogger(str(root), name="tb")
    callbacks = [
        EmbeddingProjector("encoder", metadata_fn=labels, aligned_pca=True),
        EmbeddingProjector("collapsed", metadata_fn=labels),
    ]
    trainer(root, tb, callbacks, max_epochs=2).fit(WithCollapsed(), *loaders())
    text = (Path(tb.log_dir) / RECORD_FILE).read_text("utf-8")
    return root / "tb", [json.loads(line) for line in text.splitlines() if line.strip()]


def snapshots(entries: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["kind"] == "snapshot" and e["key"] == key]


def test_each_snapshots_ranks_are_those_of_the_tensor_tensorboard_holds(
    fitted: tuple[Path, list[dict[str, Any]]],
) -> None:
    logdir, entries = fitted
    reader = ProjectorReader(logdir)
    (run,) = reader.runs()
    checked = 0
    for key in ("encoder/validate", "collapsed/validate"):
        for entry in snapshots(entries, key):
            vectors = reader.tensor(run, f"{key}/step_{entry['step']:09d}")
            assert list(vectors.shape) == entry["tensor"]["shape"] == [entry["points"], 8]
            ranks = entry["ranks"]
            assert (ranks["rows"], ranks["dim"]) == vectors.shape
            assert ranks["rankme"] == pytest.approx(rankme(vectors), rel=1e-9)
            assert ranks["effective_rank"] == pytest.approx(effective_rank(vectors), rel=1e-9)
            checked += 1
    assert checked == 4  # two snapshots of each key


def test_a_collapsed_module_has_a_low_rankme_and_the_encoder_a_higher_one(
    fitted: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, entries = fitted
    for entry in snapshots(entries, "collapsed/validate"):
        assert entry["ranks"]["rankme"] < 1.01 and entry["ranks"]["effective_rank"] < 1.01
    for entry in snapshots(entries, "encoder/validate"):
        assert entry["ranks"]["rankme"] > 2.0


def test_the_silhouette_of_the_pca_view_is_scikit_learns_on_the_records_view_and_labels(
    fitted: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, entries = fitted
    encoder = snapshots(entries, "encoder/validate")
    assert len(encoder) == 2
    for entry in encoder:
        xy = decode_array(entry["xy"]).astype(np.float64)
        (label,) = [c for c in entry["columns"] if c["name"] == "label"]
        codes = decode_array(label["codes"])
        silhouette = entry["silhouette"]
        assert (silhouette["column"], silhouette["points"]) == ("label", entry["points"])
        assert set(silhouette["views"]) == {"pca"}
        expected = silhouette_score(xy, codes)
        assert silhouette["views"]["pca"] == pytest.approx(expected, abs=1e-9)
    for entry in snapshots(entries, "collapsed/validate"):  # no aligned view: no silhouette
        assert "silhouette" not in entry


def test_the_run_summary_holds_the_last_and_lowest_ranks_and_the_newest_silhouette(
    fitted: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, entries = fitted
    flat = summarize_record(entries).flat()
    for key, part in (
        ("encoder/validate", "encoder:validate"),
        ("collapsed/validate", "collapsed:validate"),
    ):
        of_key = snapshots(entries, key)
        newest = max(of_key, key=lambda e: e["step"])
        for field in ("rankme", "effective_rank"):
            assert flat[f"learnscope/{field}/{part}/last"] == newest["ranks"][field]
            lowest = min(e["ranks"][field] for e in of_key)
            assert flat[f"learnscope/{field}/{part}/lowest"] == lowest
    newest = max(snapshots(entries, "encoder/validate"), key=lambda e: e["step"])
    assert (
        flat["learnscope/silhouette/encoder:validate/pca"] == newest["silhouette"]["views"]["pca"]
    )
    assert not any(name.startswith("learnscope/silhouette/collapsed") for name in flat)
