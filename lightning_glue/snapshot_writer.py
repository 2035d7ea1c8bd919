"""What the writers' worker thread does with an epoch's rows: the snapshot, its view, its picture.

Runs on the worker thread of :class:`~learnscope.plugins.background.BackgroundWriters`, so the
training thread waits only when the queue is full. Everything it reads is passed to it; what it
changes is the :class:`~learnscope.lightning_glue.aligned_views.AlignedViews` it is given (which
is safe from both threads) and which parts its ``parts`` switch off after a failure.

**Comparing snapshots.** With ``views``, every snapshot also gets ``pca_x``, ``pca_y`` and
``pca_z`` columns from a PCA turned to match the previous snapshot's view
(:class:`learnscope.projection.AlignedPCA`), and a scatter image of ``pca_x``/``pca_y``
coloured by the first metadata column goes to the writers as
``~learnscope/embeddings/<tag>/<stage>/pca``. The image is drawn in units of the view's spread
(its root-mean-square distance from the centre, given in the title) on axes fixed per tag from
its first snapshot (a square of a round number of spreads that holds 99% of its points), so that
the step slider shows the points moving, not the frame; points that later fall outside are drawn
on the edge as ``×`` and counted in the title. It needs matplotlib; without it the image is
skipped with one warning.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Protocol

import torch

from learnscope.embedding_rows import EmbeddingRows
from learnscope.lightning_glue.aligned_views import AlignedViews
from learnscope.plugins import Writers
from learnscope.plugins.figures import figure_pixels, pictures_available, scatter_figure
from learnscope.records import (
    AlignedView,
    EmbeddingSnapshot,
    Finding,
    RenderedImage,
    ViewFrame,
)
from learnscope.scatter import label_column, labels_of
from learnscope.tags import embedding_picture

log = logging.getLogger("learnscope")

SNAPSHOTS = "embedding projector"  # the parts a failure switches off
COMPARISON = "embedding comparison"


class Parts(Protocol):
    """Runs each part inside a guard that switches it off after a failure (a callback)."""

    def guard(self, part: str, record: str | None = None) -> contextlib.AbstractContextManager:
        """Run part ``part``; on failure log it and switch it off."""
        ...

    def is_on(self, part: str) -> bool:
        """Whether part ``part`` is still switched on."""
        ...


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
        parts: The callback whose :data:`SNAPSHOTS` and :data:`COMPARISON` parts run here.
        tag: The snapshot's tag.
        module: The module's dotted name, for messages.
        views: The aligned views of the callback; ``None``: no PCA columns and no picture.

    Example:
        >>> from learnscope.lightning_glue import EmbeddingProjector
        >>> from learnscope.plugins import Writers
        >>> rows = EmbeddingRows(step=3, stage="validate", max_points=10)
        >>> rows.add(torch.ones(4, 2), {}, None)
        >>> write_snapshot(rows, Writers([]), EmbeddingProjector(), tag="enc", module="enc")
    """
    snapshot, dropped = None, 0
    record = f"{tag}/{rows.stage} step {rows.step}"
    with parts.guard(SNAPSHOTS, record):
        snapshot, dropped = rows.snapshot(tag)
    if dropped:
        report_non_finite(writers, rows, snapshot, dropped, tag=tag, module=module)
    if snapshot is None or not parts.is_on(SNAPSHOTS):
        return
    image = None
    if views is not None and parts.is_on(COMPARISON):
        with parts.guard(COMPARISON, record):
            snapshot, image = compare_snapshot(snapshot, rows.final_keys, views)
    writers.write_embedding(snapshot)
    if image is not None:
        writers.write_image(image)
    writers.flush()


def compare_snapshot(
    snapshot: EmbeddingSnapshot, keys: torch.Tensor | None, views: AlignedViews
) -> tuple[EmbeddingSnapshot, RenderedImage | None]:
    """Add the aligned PCA columns and view frame to ``snapshot``, and draw its scatter image.

    Args:
        snapshot: The snapshot.
        keys: Each row's selection key (the same point has the same key in every snapshot),
            to match points with the previous view; ``None``: match the principal directions.
        views: The last view and the frame of each snapshot key, updated here.

    Returns:
        The snapshot with its aligned view (``pca_x``, ``pca_y``, ``pca_z`` and its frame), and
        the image (``None`` without matplotlib).

    Example:
        >>> snapshot = EmbeddingSnapshot("enc", 3, torch.randn(30, 5), {"label": [0, 1] * 15})
        >>> compared, image = compare_snapshot(snapshot, None, AlignedViews())
        >>> compared.aligned.columns
        ('pca_x', 'pca_y', 'pca_z')
    """
    key = snapshot.key
    ids = keys.tolist() if keys is not None else None
    # The image shows the view in units of its spread (the title gives the spread), so that
    # embeddings that grow during training keep one frame and the slider shows their shape.
    view = views.add(key, torch.as_tensor(snapshot.vectors), ids)
    # The snapshot carries the coordinates, spread and frame, so the run record and every view
    # use the numbers of this picture.
    snapshot = snapshot.with_view(
        AlignedView(view.coords.numpy(), ViewFrame(view.spread, view.limits))
    )
    metadata = snapshot.metadata_columns()
    title = f"{key}  step {snapshot.step}  spread {view.spread:.3g}"
    label = label_column(metadata)
    if not pictures_available():  # no matplotlib (warned once): the PCA columns are still written
        return snapshot, None
    figure = scatter_figure(view.xy, labels_of(metadata), title, view.limits, label)
    return snapshot, RenderedImage(embedding_picture(key), snapshot.step, figure_pixels(figure))


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
