"""The rows of one batch's embedding, with their metadata, ids, images and graphs.

A module's output becomes rows by the rule of :mod:`learnscope.embeddings.output_layout` (shared
with :class:`~learnscope.lightning_glue.TrainingHelper`): ``[batch, dim]`` gives one row per sample;
``[batch, tokens, dim]`` one row per token, with per-sample metadata repeated for each token
and a ``position`` column added (said once per fit, at info level: :meth:`RowReader.note_once`);
4 or more dimensions are PyTorch's feature-map layout ``[batch, channels, *spatial]``, which
gives one ``channels``-dimensional row per sample when its spatial sizes are all 1 and needs
``spatial`` otherwise, and so is the 3-D output of a channel-first module (``nn.Conv1d``...:
:mod:`learnscope.embeddings.batch_axis`), ``[batch, channels, length]``. An output that is not a
tensor fails, naming what it gave (:mod:`learnscope.embeddings.module_output`). ``mask_fn`` leaves
out rows that are not data, such as padding tokens: kept rows keep their ``position`` and their
sample's metadata and id.

**Graph batches.** When the rows are the nodes of a batch of several graphs, per-graph values
(ids, metadata columns with one value per graph, images) are spread over each graph's nodes, and
a ``node`` column gives each node's number within its graph; with ids, a node's key mixes its
graph's id with that number, so the same nodes are kept every snapshot. PyTorch Geometric
batches are recognised by themselves (``batch.batch``, ``batch.ptr``) when ``batch.batch`` has
one entry per row; a pooled embedding with one row per graph keeps one row per graph. Other
graph libraries pass ``graph_index_fn``, such as
``lambda g: torch.arange(g.batch_size).repeat_interleave(g.batch_num_nodes())`` for DGL (the
number of graphs is taken as the largest index plus one). ``ids_fn="dataset_index"`` counts
graphs, not nodes.

**Feature maps and masks.** ``spatial="mean"`` or ``"max"`` gives one row per sample (the mean
or maximum over the positions), ``"pixels"`` one row per position, numbered ``h * W + w`` in a
``position`` column; set for an output of 2 or 3 dimensions it fails too. A mask has one value
per row (``[B]`` for ``[B, dim]``, ``[B, T]`` for tokens, ``[B, H, W]`` for pixels, or flat
``[rows]``; integer masks keep the nonzero rows); one of the wrong shape fails naming both
shapes. A ``mask_fn`` key other than the default must be in the batch. Without ``ids_fn``, the
``row`` column counts the rows kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from learnscope.embeddings.batch_rows import (
    BatchRows,
    RowSamples,
    batch_rows,
    graph_rows,
    pyg_graphs,
    token_rows,
)
from learnscope.embeddings.output_layout import EmbeddingLayout
from learnscope.embeddings.rows import EmbeddingRows
from learnscope.lightning_glue.loaders import DATASET_INDEX
from learnscope.lightning_glue.projector_settings import ProjectorSettings
from learnscope.user_functions import calling, describe

Loaders = list[int | str] | None  # the names of a stage's loaders, when it has several
DatasetIds = Callable[[int], torch.Tensor]  # the dataset indices of the batch's next samples


class RowReader:
    """Reads the rows of a captured output and its batch, by the projector's settings.

    The output's rows come from the projector's capture
    (:meth:`~learnscope.lightning_glue.output_capture.OutputCapture.layout`); this adds what
    the settings' functions give for the batch (``metadata_fn``, ``images_fn``, ``ids_fn``,
    ``graph_index_fn``) and keeps the rows ``mask_fn`` marks as data. It reads the settings
    it is given and keeps no copy of them.

    Args:
        settings: The projector's settings.

    Example:
        >>> from learnscope.lightning_glue.encoder_capture import CapturedOutput
        >>> settings = ProjectorSettings("encoder", metadata_fn=lambda b: {"label": b})
        >>> reader = RowReader(settings)
        >>> layout = settings.reading.layout(CapturedOutput(torch.zeros(2, 3, 4)), batch=[7, 8])
        >>> rows = reader.rows(layout, [7, 8])
        >>> rows.vectors.shape, rows.columns["label"], rows.columns["position"].tolist()
        (torch.Size([6, 4]), [7, 7, 7, 8, 8, 8], [0, 1, 2, 0, 1, 2])
    """

    def __init__(self, settings: ProjectorSettings) -> None:
        self.settings = settings
        # Whether the rows of PyTorch Geometric batches are nodes: decided by the first batch
        # that tells (rows == nodes != graphs, or rows == graphs != nodes) and kept, so that a
        # batch of one-node graphs (rows == nodes == graphs) is read the same way.
        self._node_rows: bool | None = None

    @property
    def who(self) -> str:
        """The callback, for messages (``"EmbeddingProjector"``)."""
        return self.settings.reading.who

    def rows(
        self, layout: EmbeddingLayout, batch: Any, dataset_ids: DatasetIds | None = None
    ) -> BatchRows:
        """The batch's rows: vectors, metadata columns (with ``id``), images, kept rows only.

        Args:
            layout: The output's rows, from :meth:`layout`.
            batch: The batch the output was computed from.
            dataset_ids: With ``ids_fn="dataset_index"``, the dataset indices of the batch's
                samples, given their number; by default ``0, 1, ...``.

        Raises:
            ValueError: A function's values do not match the rows or samples of the batch.
        """
        settings, output = self.settings, layout.rows
        samples = self.samples(output, batch)
        metadata = images = None
        if settings.metadata_fn is not None:
            with calling("metadata_fn", self.who, batch):
                metadata = check_metadata(settings.metadata_fn(batch), self.who, batch)
        if settings.images_fn is not None:
            with calling("images_fn", self.who, batch):
                images = settings.images_fn(batch)
            if not isinstance(images, torch.Tensor) or images.ndim != 4:
                raise TypeError(
                    f"{self.who}: images_fn got {describe(images)} from a batch of type "
                    f"{type(batch).__name__}; it must return a tensor [B, C, H, W] of "
                    "thumbnails (C in 1, 3 or 4), one per sample"
                )
        count = samples.count if samples is not None else output.shape[0]
        keep = settings.reading.mask(batch, layout)
        ids = self._ids(batch, count, dataset_ids)
        return batch_rows(output, metadata, images, ids, samples, keep)

    def epoch_rows(self, trainer: Any, step: int, stage: str, loaders: Loaders) -> EmbeddingRows:
        """An empty snapshot of this rank's rows, chosen by id when there are ids."""
        by_id, rank, world_size = self.by_id, trainer.global_rank, trainer.world_size
        return EmbeddingRows(
            step,
            stage,
            self.settings.max_points,
            by_id=by_id,
            loaders=loaders,
            rank=rank,
            world_size=world_size,
        )

    @property
    def by_id(self) -> bool:
        """Whether rows are chosen by their id (there is an ``ids_fn``)."""
        return self.settings.ids is not None

    def add(self, rows: EmbeddingRows, layout: EmbeddingLayout, batch: Any, loader: int) -> None:
        """Add the batch's rows to ``rows``; ``"dataset_index"`` ids count on from its last."""
        ids = lambda count: rows.next_dataset_indices(count, loader)  # noqa: E731
        rows.add(*self.rows(layout, batch, ids), loader=loader)

    def check(
        self, layout: EmbeddingLayout, batch: Any, stage: str, loaders: Loaders, loader: int
    ) -> None:
        """Call the user's functions on a real batch and check what they give, keeping nothing.

        Raises:
            ValueError: A function gives values that do not match the batch's rows.
        """
        check = EmbeddingRows(0, stage, 1, by_id=self.by_id, loaders=loaders)
        check.add(*self.rows(layout, batch), loader=loader)

    def samples(self, output: torch.Tensor, batch: Any) -> RowSamples | None:
        """Which sample (graph, sequence) each embedding row of this batch belongs to."""
        rows, graph_index_fn = output.shape[0], self.settings.graph_index_fn
        if graph_index_fn is not None:
            with calling("graph_index_fn", self.who, batch):
                index = graph_index_fn(batch)
            length = len(index) if isinstance(index, torch.Tensor) and index.ndim == 1 else None
            if output.ndim != 2 or length != rows:
                given = f"{length} values" if length is not None else _describe(index)
                raise ValueError(
                    f"{self.who}: graph_index_fn gave {given} but the batch has "
                    f"{output.shape[:-1].numel()} embedding rows of shape "
                    f"{tuple(output.shape)}; it must give each row's graph within the batch "
                    "for a [nodes, dim] embedding"
                )
            return graph_rows(index)
        if output.ndim > 2:
            return token_rows(output.shape, output.device)
        graphs = pyg_graphs(batch)
        if graphs is None:
            return None
        index, count = graphs
        if len(index) != rows:  # pooled (one row per graph), or rows of something else
            self._node_rows = False if rows == count else self._node_rows
            return None
        if rows != count:
            self._node_rows = True
        elif self._node_rows is False:  # one-node graphs: read as the earlier batches were
            return None
        return graph_rows(index, count)

    def _ids(
        self, batch: Any, count: int, dataset_ids: DatasetIds | None
    ) -> Sequence[Any] | torch.Tensor | None:
        """This batch's ids: from ``ids_fn``, or the dataset indices of its ``count`` samples."""
        ids_fn = self.settings.ids
        if ids_fn is None:
            return None
        if ids_fn != DATASET_INDEX:
            with calling("ids_fn", self.who, batch):
                ids = ids_fn(batch)  # type: ignore[operator]
            if not _is_column(ids, iterable=True):
                raise TypeError(
                    f"{self.who}: ids_fn got {describe(ids)} from a batch of type "
                    f"{type(batch).__name__}; it must return one id per sample or per row "
                    "(a list, a 1-D tensor or array)"
                )
            return ids.detach().reshape(-1) if isinstance(ids, torch.Tensor) else list(ids)
        return dataset_ids(count) if dataset_ids is not None else torch.arange(count)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _is_column(values: Any, iterable: bool = False) -> bool:
    """Whether ``values`` is a column of values, one per sample or row.

    A tensor or array of at least one dimension, or else a sized collection (with ``iterable``:
    any iterable) that is not a string or a mapping.
    """
    if isinstance(values, (torch.Tensor, np.ndarray)):
        return values.ndim >= 1
    if isinstance(values, (str, bytes, Mapping)):
        return False
    return isinstance(values, Iterable) if iterable else hasattr(values, "__len__")


def check_metadata(metadata: Any, who: str, batch: Any) -> Mapping[str, Any]:
    """What ``metadata_fn`` returned, checked: a mapping of column name to a column of values.

    Raises:
        TypeError: Naming ``metadata_fn``, the batch's type, what it returned and what it must.

    Example:
        >>> check_metadata([1, 2], "Demo", batch=(1, 2))
        Traceback (most recent call last):
        ...
        TypeError: Demo: metadata_fn got a list of 2 items from a batch of type tuple; it must \
return a dict of column name to values, one value per sample or per row (a list, a 1-D tensor or \
array), such as {"label": batch[1]}
    """
    must = (
        "it must return a dict of column name to values, one value per sample or per row (a "
        'list, a 1-D tensor or array), such as {"label": batch[1]}'
    )
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"{who}: metadata_fn got {describe(metadata)} from a batch of type "
            f"{type(batch).__name__}; {must}"
        )
    for name, values in metadata.items():
        if not isinstance(name, str) or not _is_column(values):
            raise TypeError(
                f"{who}: metadata_fn gave column {name!r} as {describe(values)}, from a batch "
                f"of type {type(batch).__name__}; {must}"
            )
    return metadata
