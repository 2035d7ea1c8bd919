"""The snapshot jobs: the aligned views live on the writers' side, and only states cross over."""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import numpy as np
import pytest
import torch

from learnscope.embeddings.aligned_pca import AlignedPCA
from learnscope.embeddings.aligned_views import AlignedViews
from learnscope.embeddings.batch_rows import batch_rows
from learnscope.embeddings.rows import EmbeddingRows
from learnscope.lightning_glue.parts import Parts
from learnscope.plugins import Writers
from learnscope.plugins.pipeline.base import Writer
from learnscope.plugins.pipeline.snapshot_job import SnapshotJobs
from learnscope.records import EmbeddingSnapshot

POINTS = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))


class Kept(Writer):
    """Keeps the snapshots it is given."""

    def __init__(self) -> None:
        self.snapshots: list[EmbeddingSnapshot] = []

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        self.snapshots.append(snapshot)


def jobs() -> SnapshotJobs:
    return SnapshotJobs(Parts("EmbeddingProjector"), tag="enc", module="enc", aligned=True)


def run_job(jobs: SnapshotJobs, vectors: torch.Tensor, step: int, stage: str = "validate") -> Any:
    """The snapshot the job writes for ``vectors`` (ids 0..N-1), as the writers' thread runs it."""
    rows = EmbeddingRows(step, stage, max_points=100, by_id=True)
    rows.add(*batch_rows(vectors, {}, ids=torch.arange(len(vectors))))
    kept = Kept()
    jobs.write(rows, Writers([kept]))
    (snapshot,) = kept.snapshots
    return snapshot


def test_a_restored_state_is_saved_at_once_and_the_next_job_starts_from_it() -> None:
    first = jobs()
    run_job(first, POINTS, 1)
    resumed = jobs()
    resumed.restore(first.saved())
    assert list(resumed.saved()["limits"]) == ["enc/validate"]  # before any job ran
    a, b = run_job(first, -2 * POINTS, 2), run_job(resumed, -2 * POINTS, 2)
    assert np.array_equal(a.aligned.coords, b.aligned.coords)
    assert a.aligned.frame == b.aligned.frame


def test_the_saved_state_is_a_copy_that_later_snapshots_leave_alone() -> None:
    job = jobs()
    run_job(job, POINTS, 1)
    saved = job.saved()
    run_job(job, POINTS, 2, stage="test")
    assert list(saved["limits"]) == ["enc/validate"]
    assert list(job.saved()["limits"]) == ["enc/validate", "enc/test"]


def test_an_older_checkpoint_of_an_evaluation_adds_only_the_keys_not_held() -> None:
    older, job = jobs(), jobs()
    run_job(older, POINTS, 1, stage="test")
    run_job(older, POINTS, 1)
    run_job(job, 5 * POINTS, 9)
    held = job.saved()["pca"]["views"]["enc/validate"]
    job.restore(older.saved(), keep_held=True)
    views = job.saved()["pca"]["views"]
    assert sorted(views) == ["enc/test", "enc/validate"]
    assert torch.equal(views["enc/validate"]["coords"], held["coords"])  # the newer view kept
    assert not torch.equal(held["coords"], older.saved()["pca"]["views"]["enc/validate"]["coords"])


def test_a_checkpoint_loaded_while_a_job_runs_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job in flight does not publish over it; the next job starts from it."""
    computing, release = threading.Event(), threading.Event()
    fit_transform = AlignedPCA.fit_transform

    def slow_fit(self: AlignedPCA, *args: Any, **kwargs: Any) -> torch.Tensor:
        coords = fit_transform(self, *args, **kwargs)
        computing.set()
        assert release.wait(10)
        return coords

    other = jobs()
    run_job(other, POINTS, 1, stage="test")
    job = jobs()
    monkeypatch.setattr(AlignedPCA, "fit_transform", slow_fit)
    writer = threading.Thread(target=run_job, args=(job, POINTS, 1))
    writer.start()
    try:
        assert computing.wait(10)
        job.restore(other.saved())  # on the training thread, while the view is computed
    finally:
        release.set()
        writer.join(10)
    monkeypatch.setattr(AlignedPCA, "fit_transform", fit_transform)
    assert list(job.saved()["limits"]) == ["enc/test"]  # the restored state, not the job's
    run_job(job, POINTS, 2)
    assert sorted(job.saved()["limits"]) == ["enc/test", "enc/validate"]


def test_copies_and_pickles_carry_the_published_views() -> None:
    job = jobs()
    run_job(job, POINTS, 1)
    for copied in (copy.deepcopy(job), pickle.loads(pickle.dumps(job))):
        assert list(copied.saved()["limits"]) == ["enc/validate"]
        a, b = run_job(copied, -POINTS, 2), run_job(copy.deepcopy(job), -POINTS, 2)
        assert np.array_equal(a.aligned.coords, b.aligned.coords)


def test_the_plain_loops_views_are_the_jobs_views() -> None:
    """``AlignedViews.add`` in a loop gives the numbers the projector's job gives."""
    job, views = jobs(), AlignedViews()
    for step, scale in ((1, 1.0), (2, -3.0)):
        made = run_job(job, scale * POINTS, step)
        rows = EmbeddingRows(step, "validate", max_points=100, by_id=True)
        rows.add(*batch_rows(scale * POINTS, {}, ids=torch.arange(40)))
        snapshot, _ = rows.snapshot("enc")
        assert snapshot is not None
        looped = views.add(snapshot, ids=rows.final_keys)
        assert np.array_equal(made.aligned.coords, looped.aligned.coords)
        assert made.aligned.frame == looped.aligned.frame
