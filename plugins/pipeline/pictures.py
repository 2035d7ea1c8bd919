"""The picture stage: every picture learnscope shows, drawn once per record for every writer.

The write pipeline (:class:`~learnscope.plugins.pipeline.fanout.Writers`) asks here for the
pictures of a record it hands on, and gives them to its writers as :class:`~learnscope.records.
RenderedImage` records, so the writers only write what they are handed and a picture shown by
two dashboards is drawn once:

* a snapshot with aligned views: the scatter of each, ``~learnscope/embeddings/<tag>/<stage>/pca``
  and ``.../umap``, in units of the view's spread (given in the title) on the key's fixed frame,
  coloured by the first metadata column (:func:`snapshot_pictures`);
* an autocorrelation analysis: one mean-ACF picture per kind, ``~learnscope/autocorrelation/
  <kind>/acf`` (:func:`analysis_pictures`).

Without matplotlib there is no picture (said once per run by the fan-out, in the words of
:func:`~learnscope.plugins.pipeline.drawing.missing_pictures`); everything else is written. Given
a :class:`~learnscope.plugins.pipeline.drawing.Drawing` (``drawing=``), the pictures are drawn on
its thread; else on the calling thread.
"""

from __future__ import annotations

from learnscope.embeddings.scatter_frame import label_column, labels_of
from learnscope.plugins.pipeline.drawing import Drawing, figure_pixels, pictures_available
from learnscope.plugins.pipeline.figures import acf_images, scatter_figure
from learnscope.records import AlignedView, AutocorrelationSummary, EmbeddingSnapshot, RenderedImage
from learnscope.tags import embedding_picture


def snapshot_pictures(
    snapshot: EmbeddingSnapshot, drawing: Drawing | None = None
) -> list[RenderedImage]:
    """The scatter of each of ``snapshot``'s aligned views (none without matplotlib).

    Example:
        >>> import numpy as np
        >>> from learnscope.records import ViewFrame
        >>> xy = np.random.default_rng(0).normal(size=(20, 2))
        >>> frame = ViewFrame(1.0, (-3, 3, -3, 3))
        >>> snapshot = EmbeddingSnapshot("enc", 4, np.zeros((20, 3)), stage="validate",
        ...     aligned=AlignedView(xy, frame), projections=(AlignedView(xy, frame, "umap"),))
        >>> [picture.tag for picture in snapshot_pictures(snapshot)]
        ['~learnscope/embeddings/enc/validate/pca', '~learnscope/embeddings/enc/validate/umap']
    """
    if not pictures_available():
        return []
    return [view_picture(snapshot, view, drawing) for view in snapshot.views]


def view_picture(
    snapshot: EmbeddingSnapshot, view: AlignedView, drawing: Drawing | None = None
) -> RenderedImage:
    """The scatter of one aligned ``view`` of ``snapshot``, on the view's frame.

    A view fitted on some of the points says how many in its title (the others were placed).
    """
    name = view.projection.upper()  # "PCA", "UMAP": how the title and the axes name it
    spread = view.frame.spread
    xy = view.coords[:, :2].astype("float64")
    xy = xy / spread if spread > 0 else xy
    metadata = snapshot.metadata_columns()
    title = f"{snapshot.key}  step {snapshot.step}  spread {spread:.3g}"
    if view.fitted is not None:
        title += f"  ({name} fitted on {view.fitted} of "
        title += f"{snapshot.num_points} points, the others placed)"
    figure = scatter_figure(
        xy,
        labels_of(metadata),
        title,
        view.frame.limits,
        label_column(metadata),
        axes=name,
    )
    tag = embedding_picture(snapshot.key, view.projection)
    return RenderedImage(tag, snapshot.step, figure_pixels(figure, drawing))


def analysis_pictures(
    summary: AutocorrelationSummary, drawing: Drawing | None = None
) -> list[RenderedImage]:
    """The mean-ACF pictures of an analysis, one per kind (none without matplotlib).

    Example:
        >>> import numpy as np
        >>> from learnscope.records import GroupAutocorrelation
        >>> g = GroupAutocorrelation("enc", "params", np.array([1.0, 0.5]), 0.5, 0.4, 0.6, None)
        >>> [p.tag for p in analysis_pictures(AutocorrelationSummary(8, (1,), (g,)))]
        ['~learnscope/autocorrelation/params/acf']
    """
    return acf_images(summary, drawing=drawing)
