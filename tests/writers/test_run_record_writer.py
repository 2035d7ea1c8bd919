"""Every writer keeps the run record: what learnscope did in a run, as data, for the views.

Real fits write the record; it is checked against what the same fit wrote for TensorBoard's
own tabs (the Projector's metadata, the event files' scalars and Text tab) and against
independent numpy formulas.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learnscope.embeddings.aligned_views import AlignedViews
from learnscope.embeddings.scatter_frame import frame_limits
from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.plugins.pipeline.figures import scatter_figure
from learnscope.plugins.pipeline.pictures import snapshot_pictures
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.records import EmbeddingSnapshot, Finding
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader, decode_array
from tests.kit.models import TinyClassifier, ZeroBranch, ZeroBranchWithProbe, loaders, trainer
from tests.kit.readers import ProjectorReader, parse_metadata, wandb_history, wandb_run_dir


def meta(batch: Any) -> dict[str, Any]:
    return {"label": batch[1], "score": batch[0][:, 0]}


def record(directory: str | Path) -> list[dict[str, Any]]:
    path = Path(directory) / RECORD_FILE
    assert path.is_file(), f"no run record in {directory}"
    return RecordReader(path).read()


def kinds(entries: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in entries]


def qualified(function: Any) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def scalars(run_dir: str) -> dict[tuple[str, int], float]:
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {
        (tag, event.step): event.value
        for tag in events.Tags()["scalars"]
        for event in events.Scalars(tag)
    }


def newest_text_table(run_dir: str) -> str:
    events = EventAccumulator(run_dir, size_guidance={"tensors": 0})
    events.Reload()
    *_, last = events.Tensors("~learnscope/findings/text_summary")
    return last.tensor_proto.string_val[0].decode()


def test_a_tensorboard_fit_with_three_callbacks_keeps_the_whole_run_in_the_record(
    tmp_path: Path,
) -> None:
    callbacks = [
        EmbeddingProjector(metadata_fn=meta, ids_fn="dataset_index", aligned_pca=True),
        ModelAutocorrelation(analyze_every_n_steps=4, buffer_size=8, lags=(1,), all_scalars=True),
        TrainingHelper(check_every_n_steps=3),
    ]
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    run = trainer(tmp_path, tb, callbacks, max_epochs=2)
    run.fit(ZeroBranch(), *loaders())
    entries = record(tb.log_dir)

    # One run entry first, naming the three callbacks with their settings.
    assert kinds(entries)[0] == "run" and kinds(entries).count("run") == 1
    attached = {c["name"]: c["settings"] for c in entries[0]["callbacks"]}
    assert list(attached) == ["EmbeddingProjector", "ModelAutocorrelation", "TrainingHelper"]
    projector = attached["EmbeddingProjector"]
    assert projector["metadata_fn"] == qualified(meta)
    assert (projector["ids_fn"], projector["aligned_pca"], projector["max_points"]) == (
        "dataset_index",
        True,
        5000,
    )
    assert projector["stages"] == ["validate"] and projector["select"] is None
    assert attached["ModelAutocorrelation"]["lags"] == [1]
    assert attached["ModelAutocorrelation"]["buffer_size"] == 8
    assert attached["TrainingHelper"]["check_every_n_steps"] == 3
    assert attached["TrainingHelper"]["warn_every_n_steps"] == 1000  # a default

    # Snapshots: the Projector's aligned PCA, ids and metadata, typed.
    snapshots = [e for e in entries if e["kind"] == "snapshot"]
    assert [(s["key"], s["step"]) for s in snapshots] == [
        ("encoder/validate", 6),
        ("encoder/validate", 12),
    ]
    reader = ProjectorReader(tmp_path / "tb")
    first_frame = None
    for snap in snapshots:
        header, rows = parse_metadata(
            reader.metadata("version_0", f"encoder/validate/step_{snap['step']:09d}")
        )
        assert header is not None
        table = {name: [row[i] for row in rows] for i, name in enumerate(header)}
        assert snap["points"] == len(rows) == 48 and snap["dropped"] == 0
        assert snap["ids"] == table["id"]
        xy = decode_array(snap["xy"])
        assert xy.dtype == np.float32 and xy.shape == (48, 2)
        expected = np.array([table["pca_x"], table["pca_y"]], np.float64).T
        np.testing.assert_allclose(xy, expected.astype(np.float32), rtol=1e-6, atol=0)
        spread = np.sqrt((expected**2).sum(1).mean())  # float64, from the Projector's values
        assert snap["spread"] == pytest.approx(spread, rel=1e-4)
        first_frame = first_frame or frame_limits(expected / spread)
        assert tuple(snap["frame"]) == first_frame  # fixed per key, from the first snapshot
        columns = {c["name"]: c for c in snap["columns"]}
        assert list(columns) == ["label", "score"]  # not id or pca_*
        label = columns["label"]
        assert label["kind"] == "categorical" and label["categories"] == ["0", "1", "2"]
        codes = decode_array(label["codes"])
        assert [label["categories"][c] for c in codes] == table["label"]
        score = columns["score"]
        assert score["kind"] == "numeric"
        values = decode_array(score["values"])
        np.testing.assert_array_equal(values, np.array(table["score"], np.float64))
        assert "sprite" not in snap

    # Autocorrelation: the numbers of the event files' scalars.
    logged = scalars(tb.log_dir)
    analyses = [e for e in entries if e["kind"] == "autocorrelation"]
    assert {e["what"] for e in analyses} == {"params", "grads"}
    assert sorted({e["step"] for e in analyses}) == [4, 8, 12]
    compared = 0
    for entry in analyses:
        assert entry["lags"] == list(range(len(entry["acf"][0])))
        for i, group in enumerate(entry["groups"]):
            base = f"~learnscope/autocorrelation/{entry['what']}/{group}"
            for name, value in (
                ("lag_1", entry["acf"][i][1]),
                ("rho1_median", entry["rho1_median"][i]),
                ("rho1_q25", entry["rho1_q25"][i]),
                ("rho1_q75", entry["rho1_q75"][i]),
                ("tau", entry["tau"][i]),
            ):
                if value is None:
                    assert (f"{base}/{name}", entry["step"]) not in logged
                    continue
                scalar = logged[(f"{base}/{name}", entry["step"])]
                assert scalar == pytest.approx(value, rel=1e-6, abs=1e-7)
                compared += 1
            assert entry["num_steps"][i] == min(entry["step"], 8)  # one per step before it
            assert entry["non_finite_elements"][i] == 0
    assert compared >= 4 * len(analyses)

    # Findings: the whole table; the end.
    findings = [e for e in entries if e["kind"] == "findings"]
    assert findings
    rows = findings[-1]["rows"]
    assert ("zero-gradient", "branch") in {(r["code"], r["subject"]) for r in rows}
    assert set(rows[0]) == {
        "code",
        "subject",
        "message",
        "step",
        "severity",
        "first_step",
        "resolved_step",
        "advice",
    }
    zero = next(r for r in rows if r["code"] == "zero-gradient")
    assert zero["first_step"] <= zero["step"] and zero["resolved_step"] is None
    assert zero["advice"].startswith("Check that this part's output reaches the loss")
    assert entries[-1] == {"kind": "end", "step": 12, "status": "finished"}


def test_a_fit_with_only_a_wandb_logger_keeps_the_record_in_the_wandb_runs_files(
    tmp_path: Path, wandb_dir: Path
) -> None:
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    callbacks = [
        EmbeddingProjector(metadata_fn=meta, ids_fn="dataset_index", aligned_pca=True),
        TrainingHelper(check_every_n_steps=3),
    ]
    run = trainer(tmp_path, wb, callbacks, max_epochs=2)
    run.fit(ZeroBranch(), *loaders())
    files = Path(wb.experiment.dir)
    entries = record(files)
    assert files.parent == wandb_run_dir(wandb_dir) and files.name == "files"
    assert kinds(entries)[0] == "run"
    assert [c["name"] for c in entries[0]["callbacks"]] == ["EmbeddingProjector", "TrainingHelper"]
    snapshots = [e for e in entries if e["kind"] == "snapshot"]
    assert [s["step"] for s in snapshots] == [6, 12]
    assert all(decode_array(s["xy"]).shape == (48, 2) for s in snapshots)
    assert any(e["kind"] == "findings" and e["rows"] for e in entries)
    assert entries[-1] == {"kind": "end", "step": 12, "status": "finished"}
    assert not list(tmp_path.rglob("*.tfevents.*"))  # no TensorBoard anywhere
    wb.experiment.finish()
    history = wandb_history(wandb_run_dir(wandb_dir))
    views = [row["trainer/global_step"] for row in history if "~learnscope/view" in row]
    assert views == [6, 12]  # the view panel, from the wandb run's own record


def test_after_a_nan_snapshot_the_newest_findings_table_has_every_callbacks_findings(
    tmp_path: Path,
) -> None:
    callbacks = [EmbeddingProjector("probe"), TrainingHelper(check_every_n_steps=2)]
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, callbacks, max_epochs=1).fit(ZeroBranchWithProbe(), *loaders())

    text = newest_text_table(tb.log_dir)
    assert "zero-gradient" in text and "`branch`" in text  # TrainingHelper's
    assert "non-finite-output" in text and "`probe/validate`" in text  # the projector's
    findings = [e for e in record(tb.log_dir) if e["kind"] == "findings"]
    codes = [(r["code"], r["subject"]) for r in findings[-1]["rows"]]
    assert ("non-finite-output", "probe/validate") in codes
    assert ("zero-gradient", "branch") in codes
    assert len(codes) == len(set(codes))  # one row per (code, subject)


class FailsAtStep3(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 3:
            raise RuntimeError("the data loader broke")
        return super().training_step(batch, batch_idx)


def test_a_fit_stopped_by_an_exception_ends_the_record_failed(tmp_path: Path) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    callbacks = [TrainingHelper(check_every_n_steps=1), EmbeddingProjector()]
    with pytest.raises(RuntimeError, match="the data loader broke"):
        trainer(tmp_path, tb, callbacks, max_epochs=2).fit(FailsAtStep3(), *loaders())
    entries = record(tb.log_dir)
    assert kinds(entries)[0] == "run" and kinds(entries).count("end") == 1
    assert entries[-1] == {
        "kind": "end",
        "step": 3,
        "status": "failed",
        "error": {"type": "RuntimeError", "message": "the data loader broke"},
    }


def test_twelve_integer_classes_are_categories_in_the_picture_and_the_record(
    tmp_path: Path,
) -> None:
    from learnscope.embeddings.scatter_frame import column_kind
    from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter

    rng = np.random.default_rng(0)
    classes = [int(c) for c in rng.permutation(np.arange(60) % 12)]
    doses = rng.uniform(0.0, 1.0, 60).round(3).tolist()
    assert column_kind(classes) == "categorical" and column_kind(doses) == "numeric"
    vectors = torch.as_tensor(rng.normal(size=(60, 5)), dtype=torch.float32)
    snapshot = EmbeddingSnapshot("enc", 3, vectors, {"cls": classes, "dose": doses})
    projected = AlignedViews().add_pca(snapshot)
    (image,) = snapshot_pictures(projected)
    assert image is not None and projected.view_frame is not None

    assert projected.aligned is not None
    xy = projected.aligned.coords[:, :2] / projected.view_frame.spread
    by_class = scatter_figure(xy, classes, "t", projected.view_frame.limits, "cls")
    assert len(by_class.axes) == 1  # no colour bar
    names = [t.get_text() for t in by_class.axes[0].get_legend().get_texts()]
    assert names == [str(i) for i in range(10)] + ["other"]  # 10 colours and "other"
    by_dose = scatter_figure(xy, doses, "t", projected.view_frame.limits, "dose")
    assert len(by_dose.axes) == 2 and by_dose.axes[0].get_legend() is None  # a colour bar

    writer = RunRecordWriter(tmp_path)
    writer.write_embedding(projected)
    (entry,) = record(tmp_path)
    columns = {c["name"]: c for c in entry["columns"]}
    assert columns["cls"]["kind"] == "categorical"
    assert columns["cls"]["categories"] == [str(i) for i in range(12)]
    assert decode_array(columns["cls"]["codes"]).tolist() == classes
    assert columns["dose"]["kind"] == "numeric"
    assert decode_array(columns["dose"]["values"]).tolist() == doses
    view = projected.view_frame
    assert entry["spread"] == view.spread and entry["frame"] == list(view.limits)
    np.testing.assert_allclose(decode_array(entry["xy"]), xy * view.spread, rtol=1e-6)


def test_the_tensorboard_record_names_the_projectors_sprite(tmp_path: Path) -> None:
    images = torch.rand(5, 3, 8, 6)
    snapshot = EmbeddingSnapshot("enc", 2, torch.randn(5, 4), {"id": list("abcde")}, images)
    writer = TensorBoardWriter(tmp_path)
    writer.write_embedding(snapshot)
    writer.close()
    entries = record(tmp_path)
    assert kinds(entries) == ["snapshot", "end"]
    sprite = entries[0]["sprite"]
    assert sprite["cell"] == [6, 8] and sprite["per_row"] == 3  # 5 thumbnails: a 3 x 3 grid
    png = ProjectorReader(tmp_path).sprite(".", "enc/step_000000002")
    assert (tmp_path / sprite["path"]).read_bytes() == png
    assert entries[0]["ids"] == list("abcde") and "xy" not in entries[0]
    assert entries[1] == {"kind": "end", "step": 2, "status": "finished"}


def test_one_append_per_record_and_a_removed_directory_is_not_made_again(
    tmp_path: Path,
) -> None:
    from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    writer = RunRecordWriter(run_dir)
    found = [Finding("zero-gradient", "head", "zero", 3), Finding("tiny-gradient", "enc", "t", 3)]
    writer.write_findings(found, 3)
    writer.write_findings(found, 3)  # the same table at the same step: not again
    lines = (run_dir / RECORD_FILE).read_text().splitlines()
    assert len(lines) == 1
    shutil.rmtree(run_dir)
    with pytest.raises(FileNotFoundError, match="gone"):
        writer.write_findings(found, 4)
    assert not run_dir.exists()


def test_the_wandb_record_keeps_every_row_of_a_snapshot_its_table_subsamples(
    wandb_dir: Path,
) -> None:
    import wandb

    from learnscope.plugins.wandb.writer import MAX_TABLE_ROWS, WandbWriter

    run = wandb.init(project="t", dir=str(wandb_dir))
    n = MAX_TABLE_ROWS + 50
    snapshot = EmbeddingSnapshot("big", 0, torch.randn(n, 2), {"i": torch.arange(n)})
    writer = WandbWriter(run)
    writer.write_embedding(snapshot)
    writer.close()
    (entry, end) = record(run.dir)
    run.finish()
    assert entry["points"] == n and end["kind"] == "end"
    (column,) = entry["columns"]
    assert column["kind"] == "numeric"  # 10,050 distinct whole numbers: a colour scale
    assert decode_array(column["values"]).tolist() == list(range(n))


def test_the_writers_summary_is_the_summary_of_its_record_file_a_resumed_one_too(
    tmp_path: Path,
) -> None:
    import json

    from learnscope.plugins.pipeline.run_record_writer import RunRecordWriter
    from learnscope.records import RunEnd, RunStart
    from learnscope.run_directory.summary import summarize_record

    def from_file() -> Any:
        lines = (tmp_path / RECORD_FILE).read_text().splitlines()
        return summarize_record(json.loads(line) for line in lines)

    first = RunRecordWriter(tmp_path)
    first.write_run_start(RunStart())
    first.write_embedding(EmbeddingSnapshot("enc/val", 2, torch.randn(5, 3), {"c": [1] * 5}))
    first.write_findings([Finding("zero-gradient", "head", "zero", 3, first_step=2)], 3)
    first.write_run_end(RunEnd(4, status="interrupted"))
    assert first.summary() == from_file()
    assert first.summary().status == "interrupted"

    resumed = RunRecordWriter(tmp_path)  # a resumed run: a new writer on the same folder
    assert resumed.summary() == from_file()
    resumed.write_run_start(RunStart())
    resumed.write_embedding(EmbeddingSnapshot("enc/val", 6, torch.randn(5, 3), {"c": [1] * 5}))
    assert resumed.summary() == from_file()
    summary = resumed.summary()
    assert summary.status == "running" and summary.last_step == 6
    assert summary.snapshots[0].count == 2
    assert summary.first_finding is not None and summary.first_finding.step == 2
