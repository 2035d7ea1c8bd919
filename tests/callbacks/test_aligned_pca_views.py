"""Comparing embeddings across training: same points, aligned PCA, scatter views, live refresh.

Real ``Trainer.fit`` runs read back from TensorBoard event files, the projector plugin, a wandb
offline run, and a real TensorBoard server.
"""

from __future__ import annotations

import json
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from learnscope.embeddings.batch_rows import batch_rows
from learnscope.embeddings.rows import EmbeddingRows
from learnscope.embeddings.selection import id_keys, smallest
from learnscope.lightning_glue import EmbeddingProjector
from learnscope.plugins import Writers
from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.figures import COLOURS
from learnscope.plugins.pipeline.pictures import snapshot_pictures
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.projector_refresh import MARKER_PREFIX, ProjectorRefresh
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import EmbeddingSnapshot
from learnscope.storage import open_run_folder
from tests.kit.models import IdClassifier, id_loaders, trainer
from tests.kit.readers import (
    ProjectorReader,
    parse_metadata,
    wandb_artifact_tables,
    wandb_history,
    wandb_records,
    wandb_run_dir,
)
from tests.kit.tb_server import tensorboard

KEY = "encoder/validate"
PCA = ["pca_x", "pca_y", "pca_z"]


def decode_png(data: bytes) -> np.ndarray:
    """Decode a PNG of the Images tab into ``uint8 [H, W, 3]``."""
    from PIL import Image

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return np.array(Image.open(BytesIO(data)).convert("RGB"))


def shows_colour(pixels: np.ndarray, colour: str, alpha: float = 0.85) -> bool:
    """Whether some pixel has ``colour`` as a lone scatter point shows it (blended over white)."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], np.float64)
    blended = alpha * rgb + (1 - alpha) * 255
    return bool((np.abs(pixels.reshape(-1, 3) - blended).max(1) <= 3).any())


def test_same_points_aligned_views_and_scatter_images_in_tensorboard_and_wandb(
    tmp_path: Path, wandb_dir: Path
) -> None:
    torch.manual_seed(0)
    train, val, val_data = id_loaders(shuffle_val=True)
    projector = EmbeddingProjector(
        "encoder",
        metadata_fn=lambda batch: {"label": batch[1]},
        ids_fn=lambda batch: batch[2],
        aligned_pca=True,
        max_points=20,
    )
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    model = IdClassifier()
    trainer(tmp_path, [tb, wb], [projector], max_epochs=3).fit(model, train, val)
    steps = [len(train) * (epoch + 1) for epoch in range(3)]
    x, labels, ids = val_data.tensors
    expected_ids = ids[smallest(id_keys(ids), 20)].tolist()  # the 20 smallest keys, in order

    # TensorBoard projector: the same ids, in the same order, every snapshot; full vectors.
    reader = ProjectorReader(tmp_path / "tb")
    (run,) = reader.runs()
    names = reader.names(run)
    assert names == [f"{KEY}/step_{s:09d}" for s in steps]
    for name in names:
        header, rows = parse_metadata(reader.metadata(run, name))
        assert header == ["label", "id", "pca_x", "pca_y", "pca_z"]
        assert [int(r[1]) for r in rows] == expected_ids
        assert [int(r[0]) for r in rows] == labels[torch.tensor(expected_ids) - 1000].tolist()
    with torch.no_grad():
        final = model.encoder(x[torch.tensor(expected_ids) - 1000]).numpy()
    np.testing.assert_allclose(reader.tensor(run, names[-1]), final, rtol=1e-5, atol=1e-6)

    # Images tab: one scatter per snapshot, on the trainer steps, coloured by label.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "version_0"), size_guidance={"images": 0})
    events.Reload()
    images = events.Images(f"~learnscope/embeddings/{KEY}/pca")
    assert [i.step for i in images] == steps
    pixels = decode_png(images[-1].encoded_image_string)
    assert pixels.shape == (images[-1].height, images[-1].width, 3)
    assert all(shows_colour(pixels, c) for c in COLOURS[:3])  # the three classes
    assert not shows_colour(pixels, COLOURS[3])  # and no fourth

    # wandb: the table has the projection columns, and a scatter chart per snapshot.
    wb.experiment.finish()
    run_dir = wandb_run_dir(wandb_dir)
    chart_key = f"~learnscope/embeddings/{KEY}/pca_scatter"
    logged = [h for h in wandb_history(run_dir) if f"~learnscope/embeddings/{KEY}" in h]
    assert [h["trainer/global_step"] for h in logged] == steps
    assert all(f"{chart_key}_table" in h for h in logged)
    tables = wandb_artifact_tables(run_dir, f"~learnscope/embeddings/{KEY}")
    charts = wandb_artifact_tables(run_dir, f"{chart_key}_table")
    assert len(tables) == len(charts) == 3
    table, chart = tables[-1], charts[-1]
    assert table["columns"] == ["embedding", "step", "stage", "label", "id", *PCA]
    assert chart["columns"] == ["pca_x", "pca_y", "label", "snapshot", "id"]
    column = {name: i for i, name in enumerate(table["columns"])}
    assert [r[column["id"]] for r in table["data"]] == expected_ids
    assert [r[4] for r in chart["data"]] == [str(i) for i in expected_ids]
    np.testing.assert_allclose(
        [r[:2] for r in chart["data"]],
        [[r[column["pca_x"]], r[column["pca_y"]]] for r in table["data"]],
    )
    assert {r[2] for r in chart["data"]} == {"0", "1", "2"}
    panels = [
        json.loads(item.value_json)
        for record in wandb_records(run_dir)
        if record.WhichOneof("record_type") == "config"
        for item in record.config.update
        if item.key == "_wandb" or list(item.nested_key)[:1] == ["_wandb"]
    ]
    assert any(chart_key in json.dumps(p) and "groupKeys" in json.dumps(p) for p in panels)


def test_dataset_index_ids_and_a_shuffled_loader_is_refused(tmp_path: Path) -> None:
    train, val, _ = id_loaders(shuffle_val=False)
    projector = EmbeddingProjector(
        "encoder", ids_fn="dataset_index", metadata_fn=lambda b: {"label": b[1]}, max_points=48
    )
    fit = trainer(tmp_path, TensorBoardLogger(str(tmp_path), name="di"), [projector], max_epochs=1)
    fit.fit(IdClassifier(), train, val)
    reader = ProjectorReader(tmp_path / "di")
    (run,) = reader.runs()
    (name,) = reader.names(run)
    header, rows = parse_metadata(reader.metadata(run, name))
    assert header == ["label", "id"]
    ids = torch.arange(48)
    assert [int(r[1]) for r in rows] == ids[smallest(id_keys(ids), 48)].tolist()

    _, shuffled, _ = id_loaders(shuffle_val=True)
    fit = trainer(tmp_path, False, [EmbeddingProjector(ids_fn="dataset_index")], max_epochs=1)
    with pytest.raises(ValueError, match="reads the data set in order, but it uses RandomSampler"):
        fit.fit(IdClassifier(), train, shuffled)
    assert fit.global_step == 0


class Kept(Writer):
    """Keeps the snapshots it is given."""

    def __init__(self) -> None:
        self.snapshots: list[EmbeddingSnapshot] = []

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        self.snapshots.append(snapshot)


def job_snapshot(projector: EmbeddingProjector, vectors: torch.Tensor, step: int) -> Any:
    """The snapshot the projector's job writes for ``vectors`` (ids 0..N-1) at ``step``."""
    rows = EmbeddingRows(step, "validate", max_points=100, by_id=True)
    labels = [i % 3 for i in range(len(vectors))]
    rows.add(*batch_rows(vectors, {"label": labels}, ids=torch.arange(len(vectors))))
    kept = Kept()
    projector._jobs.write(rows, Writers([kept]))  # as the writers' thread runs it
    (snapshot,) = kept.snapshots
    return snapshot


def test_projector_state_survives_a_checkpoint() -> None:
    projector = EmbeddingProjector(aligned_pca=True, ids_fn=lambda b: b[2])
    vectors = torch.randn(30, 5, generator=torch.Generator().manual_seed(0))
    with_pca = job_snapshot(projector, vectors, 3)
    (image,) = snapshot_pictures(with_pca)
    resumed = EmbeddingProjector(aligned_pca=True, ids_fn=lambda b: b[2])
    saved = BytesIO()
    torch.save(projector.state_dict(), saved)  # as a checkpoint holds it
    saved.seek(0)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    a = job_snapshot(projector, -vectors, 9)
    b = job_snapshot(resumed, -vectors, 9)
    (image_a,), (image_b,) = snapshot_pictures(a), snapshot_pictures(b)
    assert a.aligned is not None and b.aligned is not None and with_pca.aligned is not None
    assert np.array_equal(a.aligned.coords, b.aligned.coords)
    assert np.array_equal(a.aligned.coords, with_pca.aligned.coords)
    assert np.array_equal(image_a.pixels, image_b.pixels)
    assert image.tag == "~learnscope/embeddings/encoder/validate/pca" and image.step == 3


def test_a_running_tensorboard_shows_snapshots_written_after_it_started(tmp_path: Path) -> None:
    writer = TensorBoardWriter(tmp_path / "run")
    writer.write_embedding(EmbeddingSnapshot("enc", 1, torch.randn(6, 3)))
    writer.flush()
    try:
        with tensorboard(tmp_path) as tb:
            tb.wait_for("/data/plugin/projector/runs", lambda runs: runs == ["run"])

            def names() -> list[str]:
                info = tb.json("/data/plugin/projector/info", run="run")
                return [e["tensorName"] for e in info["embeddings"]]

            def wait_for(count: int, seconds: float) -> list[str]:
                end = time.time() + seconds
                while len(current := names()) < count and time.time() < end:
                    time.sleep(0.2)
                return current

            assert names() == ["enc/step_000000001"]
            # Without a change in the run list the server keeps its cached config ...
            projector_files.write_snapshot(
                tmp_path / "run", EmbeddingSnapshot("enc", 2, torch.ones(6, 3))
            )
            assert wait_for(2, 3.0) == ["enc/step_000000001"]
            # ... the writer's marker run changes it, and the new snapshots appear.
            writer.write_embedding(EmbeddingSnapshot("enc", 3, torch.randn(6, 3)))
            assert wait_for(3, 20.0) == [f"enc/step_{s:09d}" for s in (1, 2, 3)]
            assert any(MARKER_PREFIX in r for r in tb.json("/data/runs"))
            writer.write_embedding(EmbeddingSnapshot("enc", 4, torch.randn(6, 3)))
            assert wait_for(4, 20.0)[-1] == "enc/step_000000004"
            tensor = tb.get("/data/plugin/projector/tensor", run="run", name="enc/step_000000002")
            assert np.frombuffer(tensor, np.float32).tolist() == [1.0] * 18

            writer.close()  # the marker run goes away again
            marker_runs = (tmp_path / "run").iterdir()
            assert not [p for p in marker_runs if p.name.startswith(MARKER_PREFIX)]
            tb.wait_for("/data/runs", lambda runs: runs == ["run"], timeout=20)
            assert tb.json("/data/plugin/projector/runs") == ["run"]
    finally:
        writer.close()


def test_marker_runs_are_removed_after_they_linger(tmp_path: Path) -> None:
    refresh = ProjectorRefresh(open_run_folder(tmp_path), linger_s=0.2)
    refresh.announce()
    refresh.announce()  # replaces the first marker
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(MARKER_PREFIX)]) == 1
    end = time.time() + 5
    while any(tmp_path.iterdir()) and time.time() < end:
        time.sleep(0.05)
    assert not any(tmp_path.iterdir())
