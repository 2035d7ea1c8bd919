"""The picture stage: every picture learnscope shows, drawn once per record for every writer.

The write pipeline (:class:`~learnscope.plugins.pipeline.fanout.Writers`) asks here for the
pictures of a record it hands on, and gives them to its writers as :class:`~learnscope.records.
RenderedImage` records, so the writers only write what they are handed and a picture shown by
two dashboards is drawn once:

* a snapshot with an aligned view: its scatter, ``~learnscope/embeddings/<tag>/<stage>/pca``,
  in units of the view's spread (given in the title) on the key's fixed frame, coloured by the
  first metadata column (:func:`snapshot_picture`);
* an autocorrelation analysis: one mean-ACF picture per kind, ``~learnscope/autocorrelation/
  <kind>/acf`` (:func:`analysis_pictures`).

Without matplotlib there is no picture (said once, by :func:`~learnscope.plugins.pipeline.figures.
pictures_available`); everything else is written.
"""

from __future__ import annotations

from learnscope.plugins.pipeline.figures import (
    acf_images,
    figure_pixels,
    pictures_available,
    scatter_figure,
)
from learnscope.records import AutocorrelationSummary, EmbeddingSnapshot, RenderedImage
from learnscope.scatter import label_column, labels_of
from learnscope.tags import embedding_picture


def snapshot_picture(snapshot: EmbeddingSnapshot) -> RenderedImage | None:
    """The scatter of ``snapshot``'s aligned view; ``None`` without a view or matplotlib.

    Example:
        >>> import numpy as np
        >>> from learnscope.records import AlignedView, ViewFrame
        >>> xy = np.random.default_rng(0).normal(size=(20, 2))
        >>> view = AlignedView(xy, ViewFrame(1.0, (-3, 3, -3, 3)))
        >>> snapshot = EmbeddingSnapshot("enc", 4, np.zeros((20, 3)), {"label": [0, 1] * 10},
        ...                              stage="validate", aligned=view)
        >>> picture = snapshot_picture(snapshot)
        >>> picture.tag, picture.step
        ('~learnscope/embeddings/enc/validate/pca', 4)
    """
    aligned = snapshot.aligned
    if aligned is None or not pictures_available():
        return None
    spread = aligned.frame.spread
    xy = aligned.coords[:, :2].astype("float64")
    xy = xy / spread if spread > 0 else xy
    metadata = snapshot.metadata_columns()
    title = f"{snapshot.key}  step {snapshot.step}  spread {spread:.3g}"
    figure = scatter_figure(
        xy, labels_of(metadata), title, aligned.frame.limits, label_column(metadata)
    )
    return RenderedImage(embedding_picture(snapshot.key), snapshot.step, figure_pixels(figure))


def analysis_pictures(summary: AutocorrelationSummary) -> list[RenderedImage]:
    """The mean-ACF pictures of an analysis, one per kind (none without matplotlib).

    Example:
        >>> import numpy as np
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("enc", "params", np.array([1.0, 0.5]), 0.5, 0.4, 0.6, None)
        >>> [p.tag for p in analysis_pictures(AutocorrelationSummary(8, (1,), (g,)))]
        ['~learnscope/autocorrelation/params/acf']
    """
    return acf_images(summary)
