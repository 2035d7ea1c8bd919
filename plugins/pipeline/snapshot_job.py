"""What the writers' thread does with an epoch's rows: the snapshot, its aligned views, the writers.

``EmbeddingProjector`` hands each epoch's rows over to :meth:`SnapshotJobs.job`, submits the job,
named, to its :class:`~learnscope.plugins.pipeline.background.BackgroundWriters`, and is done:
the rows are the job's alone. On the writers' thread the job makes the
:class:`~learnscope.records.EmbeddingSnapshot` once (rows with NaN or Inf left out, and said),
adds its aligned views (:class:`~learnscope.embeddings.aligned_views.AlignedViews`) and hands it to
the :class:`~learnscope.plugins.pipeline.fanout.Writers`, whose picture stage draws its scatters.

**The aligned views live here**, changed by the jobs only, on the writers' thread. What crosses
between the threads is a state, never the views: after each snapshot the job publishes the views'
state (:meth:`SnapshotJobs.saved`, a mapping nothing changes later), which a checkpoint saves
without waiting for a snapshot being made; a checkpoint loaded on the training thread goes the
other way (:meth:`SnapshotJobs.restore`), a state the next job starts from. A lock is held only
to swap these two values.

**Measures**: the job measures each snapshot too, here and never on the training thread: RankMe
and the effective rank of its rows (:func:`~learnscope.collapse.metrics.embedding_ranks`, in
float64, on every row of the snapshot, with at least 2) and the label silhouette of its views
(:func:`~learnscope.embeddings.label_silhouette.label_silhouette`, on at most 2,000 points chosen
by the ids the run record gives them), as the snapshot's ``ranks`` and ``silhouette``.

**Failures** switch off a part of the owner's (:class:`Switches`: ``EmbeddingProjector``'s parts),
each step in its own: :data:`SNAPSHOTS` (the snapshot), :data:`PCA_VIEW` (its aligned PCA view),
:data:`UMAP_VIEW` (its UMAP view), :data:`RANKS` and :data:`SILHOUETTE` (its measures), so a UMAP
that fails leaves the snapshot and its PCA view written, and a measure that fails the snapshot.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from learnscope.collapse.metrics import embedding_ranks
from learnscope.embeddings.aligned_umap import UMAPSettings, load_umap
from learnscope.embeddings.aligned_views import AlignedViews
from learnscope.embeddings.label_silhouette import label_silhouette
from learnscope.embeddings.rows import EmbeddingRows
from learnscope.plugins.pipeline.fanout import Writers
from learnscope.plugins.pipeline.run_record_writer import point_ids
from learnscope.records import EmbeddingRanks, EmbeddingSnapshot, Finding

log = logging.getLogger("learnscope")

SNAPSHOTS = "embedding projector"  # the parts a failure switches off
PCA_VIEW = "aligned PCA view"
UMAP_VIEW = "aligned UMAP view"
RANKS = "snapshot ranks"
SILHOUETTE = "label silhouette"


class Switches(Protocol):
    """The failure isolation of the jobs' owner (``EmbeddingProjector``'s parts)."""

    def is_on(self, part: str) -> bool:
        """Whether ``part`` is still switched on."""
        ...

    def guard(self, part: str, record: str | None = None) -> AbstractContextManager[None]:
        """Run ``part``; a failure is logged once and switches it off."""
        ...


class SnapshotJobs:
    """The snapshot jobs of one projector, and the aligned views they keep.

    Args:
        parts: The owner's failure isolation.
        tag: The snapshots' tag.
        module: The module's dotted name, for messages.
        aligned: Whether each snapshot gets its aligned views.
        umap: Settings of the aligned UMAP view (with ``aligned``); ``None``: PCA only.

    Example:
        >>> import torch
        >>> from learnscope.lightning_glue.parts import Parts
        >>> from learnscope.plugins.pipeline.background import BackgroundWriters
        >>> from learnscope.plugins.pipeline.base import Writer
        >>> class Columns(Writer):
        ...     def write_embedding(self, snapshot):
        ...         print(snapshot.key, snapshot.step, list(snapshot.metadata_columns()))
        >>> jobs = SnapshotJobs(Parts("EmbeddingProjector"), tag="enc", module="enc", aligned=True)
        >>> rows = EmbeddingRows(step=3, stage="validate", max_points=10)
        >>> rows.add(torch.randn(6, 4), {}, None)
        >>> writers = BackgroundWriters([Columns()])
        >>> writers.submit(jobs.job(rows), label=jobs.label(rows))
        >>> writers.close()
        enc/validate 3 ['pca_x', 'pca_y', 'pca_z']
        >>> list(jobs.saved()["limits"])  # published for a checkpoint
        ['enc/validate']
    """

    def __init__(
        self,
        parts: Switches,
        *,
        tag: str,
        module: str,
        aligned: bool = False,
        umap: UMAPSettings | None = None,
    ) -> None:
        self.parts = parts
        self.tag, self.module, self.aligned = tag, module, aligned
        self.umap = umap if aligned else None
        self._views = AlignedViews(self.umap)  # the jobs' alone: changed on the writers' thread
        self._lock = threading.Lock()  # held to swap the two states below, and only for that
        self._saved: Mapping[str, Any] = self._views.state_dict()  # published by the jobs
        self._restored: Mapping[str, Any] | None = None  # for the next job, from a checkpoint

    def __getstate__(self) -> dict[str, Any]:
        """The settings and the published views, without the lock (copies, ``ddp_spawn``)."""
        state = {k: v for k, v in vars(self).items() if k not in ("_lock", "_views", "_restored")}
        return {**state, "_saved": self.saved()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._views, self._lock, self._restored = AlignedViews(self.umap), threading.Lock(), None
        self._views.load_state_dict(self._saved)

    def label(self, rows: EmbeddingRows) -> str:
        """The job's name in messages: ``snapshot <tag> step <step>``."""
        return f"snapshot {self.tag} step {rows.step}"

    def job(self, rows: EmbeddingRows) -> Callable[[Writers], None]:
        """The job that makes the snapshot of ``rows`` and writes it (``rows`` are its own)."""
        return functools.partial(self.write, rows)

    def saved(self) -> Mapping[str, Any]:
        """The aligned views' state after the last snapshot written, or the last restored.

        For a checkpoint, on any thread; never waits for a snapshot being made.
        """
        with self._lock:
            return self._saved

    def restore(self, state: Mapping[str, Any], keep_held: bool = False) -> None:
        """Hand the jobs the views of a checkpoint; :meth:`saved` holds them at once.

        Args:
            state: What :meth:`saved` returned (a checkpoint's).
            keep_held: Keep the views of the keys held now, adding only the others (an
                evaluation of an older checkpoint: the views held are newer).
        """
        with self._lock:
            merged = AlignedViews()
            merged.load_state_dict(self._saved)
            merged.load_state_dict(state, keep_held=keep_held)
            self._saved = self._restored = merged.state_dict()

    def write(self, rows: EmbeddingRows, writers: Writers) -> None:
        """Make the snapshot of ``rows``, add its aligned views and write them (the job).

        Example:
            >>> import torch
            >>> from learnscope.lightning_glue.parts import Parts
            >>> jobs = SnapshotJobs(Parts("EmbeddingProjector"), tag="enc", module="enc")
            >>> rows = EmbeddingRows(step=3, stage="validate", max_points=10)
            >>> rows.add(torch.ones(4, 2), {}, None)
            >>> jobs.write(rows, Writers([]))
        """
        parts, tag = self.parts, self.tag
        with self._lock:
            restored, self._restored = self._restored, None
        if restored is not None:
            self._views.load_state_dict(restored)
        snapshot, dropped = None, 0
        record = f"{tag}/{rows.stage} step {rows.step}"
        with parts.guard(SNAPSHOTS, record):
            snapshot, dropped = rows.snapshot(tag)
        if dropped:
            report_non_finite(writers, rows, snapshot, dropped, tag=tag, module=self.module)
        if snapshot is None or not parts.is_on(SNAPSHOTS):
            return
        if self.aligned:
            snapshot = self._add_views(snapshot, rows, record)
        snapshot = measured(snapshot, parts, record)
        writers.write_embedding(snapshot)  # its pictures are drawn by the writers' picture stage
        writers.flush()

    def load_umap(self, writers: Writers) -> None:
        """Load umap-learn and its kernels on the writers' thread, before the first snapshot.

        Queued when a fit starts, so that the import (seconds) and, on a machine's first fit,
        numba's compile run while the model trains, not when the first snapshot waits for them.

        Example:
            >>> from learnscope.lightning_glue.parts import Parts
            >>> jobs = SnapshotJobs(Parts("EmbeddingProjector"), tag="enc", module="enc")
            >>> jobs.load_umap(Writers([]))
        """
        with self.parts.guard(UMAP_VIEW, "loading umap-learn"):
            load_umap()

    def _add_views(
        self, snapshot: EmbeddingSnapshot, rows: EmbeddingRows, record: str
    ) -> EmbeddingSnapshot:
        """``snapshot`` with the aligned views whose parts are on; publishes the views' state."""
        parts, ids = self.parts, rows.final_keys  # the same point has the same key every time
        if parts.is_on(PCA_VIEW):
            with parts.guard(PCA_VIEW, record):
                snapshot = self._views.add_pca(snapshot, ids)
        if self.umap is not None and parts.is_on(UMAP_VIEW):
            with parts.guard(UMAP_VIEW, record):
                snapshot = self._views.add_umap(snapshot, ids)
        saved = self._views.state_dict()
        with self._lock:
            if self._restored is None:  # a checkpoint loaded meanwhile wins
                self._saved = saved
        return snapshot


def measured(snapshot: EmbeddingSnapshot, parts: Switches, record: str) -> EmbeddingSnapshot:
    """``snapshot`` with its ranks and label silhouette, each measured when its part is on.

    The ranks need at least 2 rows; the silhouette a categorical ``label`` column and a view
    (see :mod:`learnscope.embeddings.label_silhouette`); without them the field stays ``None``.

    Example:
        >>> from learnscope.lightning_glue.parts import Parts
        >>> snapshot = EmbeddingSnapshot("enc", 3, torch.eye(4), {"label": [0, 0, 1, 1]})
        >>> measured(snapshot, Parts("EmbeddingProjector"), "enc step 3").ranks
        EmbeddingRanks(rankme=4.0..., effective_rank=3.0..., rows=4, dim=4)
    """
    ranks, silhouette = None, None
    if snapshot.num_points >= 2 and parts.is_on(RANKS):
        with parts.guard(RANKS, record):
            vectors = torch.as_tensor(snapshot.vectors).detach().to("cpu", torch.float64)
            values = embedding_ranks(vectors)
            ranks = EmbeddingRanks(**values, rows=snapshot.num_points, dim=snapshot.dim)
    if snapshot.views and parts.is_on(SILHOUETTE):
        with parts.guard(SILHOUETTE, record):
            columns = snapshot.metadata_columns()
            views = {view.projection: view.coords for view in snapshot.views}
            silhouette = label_silhouette(views, columns, point_ids(columns))
    if ranks is None and silhouette is None:
        return snapshot
    return snapshot.with_measures(ranks, silhouette)


def report_non_finite(
    writers: Writers,
    rows: EmbeddingRows,
    snapshot: EmbeddingSnapshot | None,
    dropped: int,
    *,
    tag: str,
    module: str,
) -> None:
    """Say that ``dropped`` rows with NaN or Inf were left out (a finding when all were).

    Example:
        >>> rows = EmbeddingRows(step=3, stage="validate", max_points=10)
        >>> report_non_finite(Writers([]), rows, None, 4, tag="enc", module="enc")
    """
    if snapshot is None:
        finding = Finding(
            "non-finite-output",
            f"{tag}/{rows.stage}",
            f"every captured embedding row of {module!r} is NaN or Inf; the snapshot at "
            f"step {rows.step} is skipped",
            rows.step,
            "error",
        )
        log.warning("learnscope: %s", finding.message)
        writers.write_findings([finding], rows.step)
    else:
        log.warning(
            "learnscope: %d embedding rows of %r with NaN or Inf were left out of the "
            "snapshot at step %d (%d rows kept)",
            dropped,
            module,
            rows.step,
            snapshot.num_points,
        )
