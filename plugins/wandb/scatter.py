"""The wandb custom charts of an embedding snapshot's aligned views, coloured by label.

A chart is built from the ``pca_x`` and ``pca_y`` columns that
``EmbeddingProjector(aligned_pca=True)`` adds to a snapshot (and one from ``umap_x``, ``umap_y``
with ``aligned_umap=True``), and logged with the snapshot's table on the trainer step axis.

Which preset: wandb's ``wandb/scatter/v0`` colours points by their y value (a red gradient) and
has no colour-by-category field. ``wandb/area-under-curve/v0`` (the preset behind
``wandb.plot.pr_curve`` and ``roc_curve``) draws a layer of points coloured by the nominal
``groupKeys`` column whenever that field is set (its lines are drawn only when it is not), so
it is the built-in preset that shows a scatter coloured by label. The chart's table also holds
``id`` and the label, so the panel can be switched to any other preset in the W&B editor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from learnscope.embeddings.scatter_frame import label_column

PRESET = "wandb/area-under-curve/v0"
SERIES = "snapshot"  # one constant column, the preset's line-style ("class") field


def scatter_chart(
    wandb: Any,
    metadata: Mapping[str, Sequence[Any]],
    title: str,
    step: int,
    projection: str = "pca",
) -> Any | None:
    """A ``wandb.plot_table`` chart of ``<projection>_x`` against ``_y``, or ``None`` without them.

    Args:
        wandb: The ``wandb`` module.
        metadata: The snapshot's metadata columns as lists (at most 10,000 rows).
        title: Chart title, such as ``"encoder/validate"``.
        step: The trainer step, shown in the chart.
        projection: Which aligned view: ``"pca"`` or ``"umap"``.

    Returns:
        The custom chart to log, or ``None`` when the snapshot has no such columns.

    Example:
        >>> import wandb
        >>> columns = {"label": [1, 2], "umap_x": [0.0, 1.0], "umap_y": [1.0, 0.0]}
        >>> chart = scatter_chart(wandb, columns, "enc", 3, "umap")
        >>> chart.table.columns
        ['umap_x', 'umap_y', 'label', 'snapshot']
    """
    x, y = f"{projection}_x", f"{projection}_y"
    if x not in metadata or y not in metadata:
        return None
    n = len(metadata[x])
    label = label_column(metadata)
    label_name = label or "tag"
    labels = [str(v) for v in metadata[label]] if label else [title] * n
    columns = [x, y, label_name, SERIES]
    data = [metadata[x], metadata[y], labels, [f"step {step}"] * n]
    if "id" in metadata:
        columns.append("id")
        data.append([str(v) for v in metadata["id"]])
    table = wandb.Table(columns=columns, data=[list(row) for row in zip(*data, strict=True)])
    return wandb.plot_table(
        PRESET,
        table,
        {"x": x, "y": y, "groupKeys": label_name, "class": SERIES},
        {
            "title": f"{title} {projection.upper()}, step {step}",
            "x-axis-title": x,
            "y-axis-title": y,
        },
    )
