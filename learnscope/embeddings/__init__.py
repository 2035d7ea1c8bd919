"""A module's output as rows, an epoch's snapshot of them, and its 2-D views.

* ``batch_axis``, ``output_layout``, ``module_output``: which axes and rows an output gives, and
  what a module that gives no tensor gave.
* ``batch_rows``, ``selection``, ``rows``: a batch's rows; the same points at every snapshot; an
  epoch's rows, bounded.
* ``aligned_pca``, ``aligned_umap`` (with ``umap_layout``, the only module importing umap-learn):
  2-D and 3-D views that keep their orientation from snapshot to snapshot.
* ``scatter_frame``: the frame of a scatter picture and which label colours a point.
* ``neighbourhoods``: two embeddings of the same points compared (numpy only).
"""
