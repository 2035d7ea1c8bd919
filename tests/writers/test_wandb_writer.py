"""The wandb writer, read back from a real offline run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from learnscope import EmbeddingSnapshot
from learnscope.plugins import Writers
from learnscope.plugins.wandb.page_writer import WandbPageWriter
from learnscope.plugins.wandb.writer import WandbWriter
from tests.kit.readers import (
    page_views,
    wandb_artifact_tables,
    wandb_history,
    wandb_run_dir,
    wandb_table,
    wandb_view_pages,
)


def test_embedding_table_has_every_column(wandb_dir: Path) -> None:
    import wandb

    run = wandb.init(project="t", dir=str(wandb_dir))
    vectors = torch.randn(6, 3)
    snapshot = EmbeddingSnapshot(
        "encoder",
        7,
        vectors,
        {"label": torch.tensor([0, 1, 2, 0, 1, 2]), "name": list("abcdef")},
        images=torch.rand(6, 1, 4, 4),
        stage="validate",
    )
    WandbWriter(run).write_embedding(snapshot)
    WandbWriter(run).write_scalars({"m": 0.5}, step=9)
    run.finish()

    run_dir = wandb_run_dir(wandb_dir)
    history = wandb_history(run_dir)
    logged = history[0]
    assert logged["trainer/global_step"] == 7
    table = wandb_table(run_dir, logged["~learnscope/embeddings/encoder/validate"])
    assert table["columns"] == ["embedding", "step", "stage", "label", "name", "image"]
    assert len(table["data"]) == 6
    for row, vector in zip(table["data"], vectors.tolist(), strict=True):
        assert row[0] == pytest.approx(vector, rel=1e-6)
        assert row[1:3] == [7, "validate"]
    assert [r[3] for r in table["data"]] == [0, 1, 2, 0, 1, 2]
    (full,) = wandb_artifact_tables(run_dir, "~learnscope/embeddings/encoder/validate")
    images = [row[5] for row in full["data"]]
    assert all(i["_type"] == "image-file" and (i["width"], i["height"]) == (4, 4) for i in images)
    assert all(Path(full["_files"][i["path"]]).stat().st_size > 0 for i in images)
    assert history[1]["m"] == 0.5 and history[1]["trainer/global_step"] == 9


def test_more_than_10k_rows_are_subsampled_deterministically(
    wandb_dir: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    import wandb

    run = wandb.init(project="t", dir=str(wandb_dir))
    n = 10_050
    snapshot = EmbeddingSnapshot("big", 0, torch.randn(n, 2), {"i": torch.arange(n)})
    WandbWriter(run).write_embedding(snapshot)
    run.finish()

    run_dir = wandb_run_dir(wandb_dir)
    table = wandb_table(run_dir, wandb_history(run_dir)[0]["~learnscope/embeddings/big"])
    kept = [row[3] for row in table["data"]]
    assert len(kept) == 10_000
    assert kept == sorted(kept)
    assert kept == snapshot.subsample(10_000).metadata["i"].tolist()
    assert any("10050 rows" in r.getMessage() for r in learnscope_log.records)


def test_a_healthy_run_says_no_findings(wandb_dir: Path) -> None:
    import wandb

    from learnscope import Finding

    run = wandb.init(project="t", dir=str(wandb_dir))
    WandbWriter(run).write_findings([], step=20)
    WandbWriter(run).write_findings([Finding("zero-gradient", "head.bias", "is zero", 40)], 40)
    run.finish()

    first, second = wandb_artifact_tables(wandb_run_dir(wandb_dir), "~learnscope/findings")
    assert first["columns"] == [
        "step",
        "severity",
        "code",
        "subject",
        "still holds",
        "seen",
        "message",
        "what to try",
    ]
    assert first["data"] == [
        [
            20,
            "info",
            "no-findings",
            "",
            False,
            "",
            "No findings: nothing looks wrong so far.",
            "nothing",
        ]
    ]
    (row,) = second["data"]
    assert row[:6] == [
        40,
        "warning",
        "zero-gradient",
        "head.bias",
        True,
        "found at step 40; still holds",
    ]
    assert row[6:] == ["is zero", Finding("zero-gradient", "head.bias", "", 40).advice]


def test_missing_wandb_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'learnscope\[wandb\]'"):
        WandbWriter(object())


class Clock:
    """The writer's clock, set by the test: no test waits for real time to pass."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_view_page_is_logged_at_most_once_a_minute_and_once_final(wandb_dir: Path) -> None:
    """8 snapshots over 105 s: pages after the first (0 s) and the fifth (60 s), then the
    final one, which holds every snapshot and the run's end; the pages are the record's view."""
    import wandb

    from learnscope.plugins.views import run_view
    from learnscope.records import CallbackSettings, RunEnd, RunStart

    run = wandb.init(project="t", dir=str(wandb_dir))
    clock = Clock()
    writer = Writers([WandbWriter(run), WandbPageWriter(run, clock=clock)])
    writer.write_run_start(RunStart((CallbackSettings("EmbeddingProjector"),)))
    steps = list(range(10, 90, 10))
    for i, step in enumerate(steps):
        clock.now = 15.0 * i
        labels = {"label": torch.arange(6) % 2}
        writer.write_embedding(EmbeddingSnapshot("encoder", step, torch.randn(6, 3), labels))
        writer.flush()
    writer.write_run_end(RunEnd(85))
    clock.now += 5.0
    writer.close()
    writer.close()  # a second close logs nothing more
    record = run_view.read_view(Path(run.dir), max_points=2_000, sprites=False)
    run.finish()
    run_dir = wandb_run_dir(wandb_dir)

    pages = [(step, *page_views(html).values()) for step, html in wandb_view_pages(run_dir)]
    assert [step for step, _ in pages] == [10, 50, 85]
    assert [view["ended"] for _, view in pages] == [None, None, record["ended"]]
    assert record["ended"] == {"step": 85, "status": "finished"}
    final = pages[-1][1]
    for field in ("status", "messages", "embeddings", "autocorrelation", "findings"):
        assert final[field] == record[field], field


def test_the_wandb_writers_say_themselves_that_a_finished_run_is_permanent(
    wandb_dir: Path,
) -> None:
    """Each W&B writer answers from what the run raised (no private attribute of the run)."""
    import wandb

    run = wandb.init(project="t", dir=str(wandb_dir))
    writer, page = WandbWriter(run), WandbPageWriter(run)
    writer.write_scalars({"m": 0.5}, step=1)
    run.finish()
    with pytest.raises(wandb.errors.UsageError) as raised:
        writer.write_scalars({"m": 0.25}, step=2)
    assert writer.permanent_failure(raised.value) == "its wandb run has finished"
    assert page.permanent_failure(raised.value) == "its wandb run has finished"
    assert writer.permanent_failure(OSError(28, "No space left on device")) is None
    assert page.permanent_failure(OSError(30, "Read-only file system")) == (
        "the file system is read-only"
    )
