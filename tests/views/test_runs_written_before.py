"""A run written by an earlier learnscope (commit 37d4c95, before object storage) still opens.

``tests/data/written_by_37d4c95`` is what that commit wrote for a two-epoch fit with the three
callbacks (its run record, Projector files, config and Custom Scalars layout; the event files
are left out: the views read only the record). Today's views read it, the export writes it,
and today's writer resumes it without losing what was there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from learnscope.lightning_glue.cli import main
from learnscope.plugins.tensorboard import projector_files
from learnscope.plugins.tensorboard.layout import multiline
from learnscope.plugins.tensorboard.writer import TensorBoardWriter
from learnscope.plugins.views.run_view import read_view
from learnscope.records import EmbeddingSnapshot, RunStart
from learnscope.run_directory.file_names import LAYOUT_FILE

OLD_RUN = Path(__file__).resolve().parent.parent / "data" / "written_by_37d4c95"


def test_the_tab_reads_a_run_written_before() -> None:
    view = read_view(OLD_RUN)

    assert view["has_data"] and view["failed"] is None
    assert view["ended"]["status"] == "finished"
    (key,) = view["embeddings"]
    assert key["key"] == "encoder/validate"
    assert key["steps"] == [6, 12] and key["points_total"] == 48
    assert [column["name"] for column in key["columns"]] == ["label"]
    assert view["autocorrelation"] and len(view["findings"]) == 1


def test_the_export_writes_a_run_written_before(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    shutil.copytree(OLD_RUN, logdir / OLD_RUN.name)
    page = tmp_path / "view.html"

    assert main(["export", str(logdir), "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert OLD_RUN.name in html and "encoder/validate" in html


def test_todays_writer_resumes_a_run_written_before(tmp_path: Path) -> None:
    run = tmp_path / OLD_RUN.name
    shutil.copytree(OLD_RUN, run)
    old_layout = json.loads((run / LAYOUT_FILE).read_text(encoding="utf-8"))

    writer = TensorBoardWriter(run)
    writer.write_run_start(RunStart())  # a resumed fit starts a new run in the record
    xy = torch.randn(48, 2).tolist()
    ids = {"id": list(range(48)), "label": [i % 3 for i in range(48)]}
    ids |= {"pca_x": [x for x, _ in xy], "pca_y": [y for _, y in xy]}  # the aligned view
    writer.write_embedding(
        EmbeddingSnapshot("encoder", 18, torch.randn(48, 3), ids, stage="validate")
    )
    writer.add_charts({"loss": {"all": multiline(["loss"])}})
    writer.close()

    names = [e.tensor_name for e in projector_files.read_config(run).embeddings]
    assert names == [f"encoder/validate/step_{s:09d}" for s in (6, 12, 18)]
    layout = json.loads((run / LAYOUT_FILE).read_text(encoding="utf-8"))
    assert layout["version"] == old_layout["version"] + 1
    assert set(old_layout["layout"]) < set(layout["layout"])
    assert read_view(run)["embeddings"][0]["steps"] == [6, 12, 18]
