"""The aligned UMAP view in real fits: the run record, the Projector, the Images tab and W&B.

A ``Trainer.fit`` with ``EmbeddingProjector(aligned_umap=True)`` and both loggers, read back
from the run record, the projector files (as the projector plugin reads them), the event file
(``EventAccumulator``) and the offline wandb run; the coordinates every dashboard got are the
ones the record holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from learnscope.embeddings.aligned_umap import UMAPSettings
from learnscope.lightning_glue import EmbeddingProjector
from learnscope.run_directory.record import RecordReader, decode_array
from tests.kit.models import IdClassifier, id_loaders, trainer
from tests.kit.readers import (
    ProjectorReader,
    parse_metadata,
    wandb_artifact_tables,
    wandb_run_dir,
)

KEY = "encoder/validate"


def test_every_dashboard_gets_the_umap_view_the_record_holds(
    tmp_path: Path, wandb_dir: Path
) -> None:
    torch.manual_seed(0)
    train, val, _ = id_loaders(shuffle_val=False)
    projector = EmbeddingProjector(
        "encoder",
        metadata_fn=lambda batch: {"label": batch[1]},
        ids_fn=lambda batch: batch[2],
        aligned_umap=UMAPSettings(epochs=50, max_points=30),
        max_points=40,
    )
    assert projector.aligned_pca  # the UMAP view comes beside the aligned PCA
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    trainer(tmp_path, [tb, wb], [projector], max_epochs=3).fit(IdClassifier(), train, val)
    steps = [len(train) * (epoch + 1) for epoch in range(3)]

    # The run record: each snapshot has its UMAP view, fitted on 30 of its 40 points, in one
    # unit and frame for the key.
    record = tmp_path / "tb" / "version_0" / "learnscope_record.jsonl"
    snapshots = [e for e in RecordReader(record).read() if e["kind"] == "snapshot"]
    assert [e["step"] for e in snapshots] == steps
    umaps = [e["projections"]["umap"] for e in snapshots]
    assert {u["fitted"] for u in umaps} == {30}
    assert len({u["spread"] for u in umaps}) == 1 and len({tuple(u["frame"]) for u in umaps}) == 1
    xy = [decode_array(u["xy"]) for u in umaps]
    assert all(a.shape == (40, 2) and np.isfinite(a).all() for a in xy)
    assert not np.array_equal(xy[0], xy[-1])  # training moved the points

    # The Projector: umap_x, umap_y columns beside the PCA's, the record's numbers.
    reader = ProjectorReader(tmp_path / "tb")
    (run,) = reader.runs()
    header, rows = parse_metadata(reader.metadata(run, reader.names(run)[-1]))
    assert header == ["label", "id", "pca_x", "pca_y", "pca_z", "umap_x", "umap_y"]
    shown = np.array([[float(r[5]), float(r[6])] for r in rows])
    np.testing.assert_allclose(shown, xy[-1], rtol=1e-5, atol=1e-5)

    # The Images tab: a UMAP picture per snapshot beside the PCA's, on the same steps.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "version_0"), size_guidance={"images": 0})
    events.Reload()
    for projection in ("pca", "umap"):
        images = events.Images(f"~learnscope/embeddings/{KEY}/{projection}")
        assert [i.step for i in images] == steps

    # W&B: the table has the columns, and a UMAP scatter chart per snapshot.
    wb.experiment.finish()
    run_dir = wandb_run_dir(wandb_dir)
    (*_, table) = wandb_artifact_tables(run_dir, f"~learnscope/embeddings/{KEY}")
    charts = wandb_artifact_tables(run_dir, f"~learnscope/embeddings/{KEY}/umap_scatter_table")
    assert len(charts) == 3
    assert charts[-1]["columns"] == ["umap_x", "umap_y", "label", "snapshot", "id"]
    column = {name: i for i, name in enumerate(table["columns"])}
    logged = [[r[column["umap_x"]], r[column["umap_y"]]] for r in table["data"]]
    np.testing.assert_allclose(logged, xy[-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose([r[:2] for r in charts[-1]["data"]], logged)


@pytest.mark.usefixtures("lenient")
def test_a_failing_umap_leaves_the_snapshot_and_its_pca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("layout exploded")

    monkeypatch.setattr("learnscope.embeddings.aligned_views.aligned_umap", fails)
    train, val, _ = id_loaders(shuffle_val=False)
    projector = EmbeddingProjector(
        "encoder", ids_fn=lambda batch: batch[2], aligned_umap=True, max_points=20
    )
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [projector], max_epochs=2).fit(IdClassifier(), train, val)
    record = tmp_path / "tb" / "version_0" / "learnscope_record.jsonl"
    snapshots = [e for e in RecordReader(record).read() if e["kind"] == "snapshot"]
    assert len(snapshots) == 2
    assert all("xy" in e and "projections" not in e for e in snapshots)
    assert "aligned UMAP view" in caplog.text and "layout exploded" in caplog.text
