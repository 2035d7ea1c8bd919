"""What the writers' worker thread does with an epoch's rows: the snapshot and its aligned view.

Runs on the worker thread of :class:`~learnscope.plugins.pipeline.background.BackgroundWriters`, so
the training thread waits only when the queue is full. Everything it reads is passed to it; what it
changes is the :class:`~learnscope.lightning_glue.aligned_views.AlignedViews` it is given (which
is safe from both threads) and the callback's :class:`~learnscope.lightning_glue.parts.Parts`
(which parts a failure switches off, under its lock).

**Comparing snapshots.** With ``views``, every snapshot also gets ``pca_x``, ``pca_y`` and
``pca_z`` columns from a PCA turned to match the previous snapshot's view
(:class:`learnscope.projection.AlignedPCA`), as the snapshot's typed
:class:`~learnscope.records.AlignedView`: coordinates, their spread (the root-mean-square
distance from the centre) and a frame fixed per tag from its first snapshot (a square of a round
number of spreads that holds 99% of its points), so that the step slider shows the points
moving, not the frame. The writers' picture stage (:mod:`learnscope.plugins.pipeline.pictures`)
draws its scatter, ``~learnscope/embeddings/<tag>/<stage>/pca``, from it.

**The aligned UMAP view.** With UMAP settings in ``views``, every snapshot also gets its aligned
UMAP view (:mod:`learnscope.aligned_umap`): ``umap_x``, ``umap_y`` columns and its own picture,
``.../umap``. It is a part of its own (:data:`UMAP_VIEW`): a UMAP that fails leaves the
snapshot and its PCA view written.
"""

from __future__ import annotations

import logging

import torch

from learnscope.aligned_umap import load_umap
from learnscope.embedding_rows import EmbeddingRows
from learnscope.lightning_glue.aligned_views import AlignedViews
from learnscope.lightning_glue.parts import Parts
from learnscope.plugins import Writers
from learnscope.records import (
    AlignedView,
    EmbeddingSnapshot,
    Finding,
    ViewFrame,
)

log = logging.getLogger("learnscope")

SNAPSHOTS = "embedding projector"  # the parts a failure switches off
COMPARISON = "embedding comparison"
UMAP_VIEW = "aligned UMAP view"


def write_snapshot(
    rows: EmbeddingRows,
    writers: Writers,
    parts: Parts,
    *,
    tag: str,
    module: str,
    views: AlignedViews | None = None,
) -> None:
    """Make the snapshot of ``rows``, add its aligned PCA view (with ``views``), and write them.

    Args:
        rows: The epoch's rows (this job's alone).
        writers: The writers, on their worker thread.
        parts: The callback's parts; :data:`SNAPSHOTS`, :data:`COMPARISON` and
            :data:`UMAP_VIEW` run here.
        tag: The snapshot's tag.
        module: The module's dotted name, for messages.
        views: The aligned views of the callback; ``None``: no PCA columns and no picture.

    Example:
        >>> from learnscope.lightning_glue import EmbeddingProjector
        >>> from learnscope.plugins import Writers
        >>> rows = EmbeddingRows(step=3, stage="validate", max_points=10)
        >>> rows.add(torch.ones(4, 2), {}, None)
        >>> write_snapshot(rows, Writers([]), EmbeddingProjector().parts, tag="enc", module="enc")
    """
    snapshot, dropped = None, 0
    record = f"{tag}/{rows.stage} step {rows.step}"
    with parts.guard(SNAPSHOTS, record):
        snapshot, dropped = rows.snapshot(tag)
    if dropped:
        report_non_finite(writers, rows, snapshot, dropped, tag=tag, module=module)
    if snapshot is None or not parts.is_on(SNAPSHOTS):
        return
    if views is not None and parts.is_on(COMPARISON):
        with parts.guard(COMPARISON, record):
            snapshot = compare_snapshot(snapshot, rows.final_keys, views)
    if views is not None and views.umap is not None and parts.is_on(UMAP_VIEW):
        with parts.guard(UMAP_VIEW, record):
            ids = rows.final_keys.tolist() if rows.final_keys is not None else None
            umap = views.add_umap(snapshot.key, torch.as_tensor(snapshot.vectors), ids)
            snapshot = snapshot.with_view(umap) if umap is not None else snapshot
    writers.write_embedding(snapshot)  # its picture is drawn by the writers' picture stage
    writers.flush()


def load_umap_job(writers: Writers, *, parts: Parts) -> None:
    """Load umap-learn and its kernels on the writers' thread, before the first snapshot.

    Queued when a fit starts, so that the import (seconds) and, on a machine's first fit, numba's
    compile run while the model trains, not when the first snapshot waits for them.

    Example:
        >>> from learnscope.plugins import Writers
        >>> from learnscope.lightning_glue import EmbeddingProjector
        >>> load_umap_job(Writers([]), parts=EmbeddingProjector().parts)
    """
    with parts.guard(UMAP_VIEW, "loading umap-learn"):
        load_umap()


def compare_snapshot(
    snapshot: EmbeddingSnapshot, keys: torch.Tensor | None, views: AlignedViews
) -> EmbeddingSnapshot:
    """``snapshot`` with its aligned PCA view (coordinates, spread and frame).

    Args:
        snapshot: The snapshot.
        keys: Each row's selection key (the same point has the same key in every snapshot),
            to match points with the previous view; ``None``: match the principal directions.
        views: The last view and the frame of each snapshot key, updated here.

    Returns:
        The snapshot with its aligned view (``pca_x``, ``pca_y``, ``pca_z`` and its frame).

    Example:
        >>> snapshot = EmbeddingSnapshot("enc", 3, torch.randn(30, 5), {"label": [0, 1] * 15})
        >>> compare_snapshot(snapshot, None, AlignedViews()).aligned.columns
        ('pca_x', 'pca_y', 'pca_z')
    """
    ids = keys.tolist() if keys is not None else None
    # The view is in units of its spread (the picture's title gives it), so that embeddings
    # that grow during training keep one frame; the snapshot carries coordinates, spread and
    # frame, so the run record, the picture and every view use the same numbers.
    view = views.add(snapshot.key, torch.as_tensor(snapshot.vectors), ids)
    frame = ViewFrame(view.spread, view.limits)
    return snapshot.with_view(AlignedView(view.coords.numpy(), frame))


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
        >>> from learnscope.plugins import Writers
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
