"""EmbeddingProjector: embeddings of one sub-module, per stage and epoch, to every dashboard."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from typing_extensions import override

from learnscope.embedding_layout import (
    DEFAULT_MASK,
    EmbeddingLayout,
    check_mask_fn,
    check_spatial,
    embedding_layout,
    row_mask,
)
from learnscope.embedding_rows import (
    BatchRows,
    EmbeddingRows,
    RowSamples,
    batch_rows,
    graph_rows,
    pyg_graphs,
    token_rows,
)
from learnscope.import_path import resolve_function
from learnscope.lightning_glue.base import LearnscopeCallback, log
from learnscope.lightning_glue.snapshot_names import SnapshotNames
from learnscope.plugins import Writers
from learnscope.plugins.figures import scatter_image
from learnscope.projection import PCA_COLUMNS, AlignedPCA
from learnscope.records import EmbeddingSnapshot, Finding, RenderedImage, ViewFrame
from learnscope.scatter import Limits, frame_limits, label_column, labels_of

STAGES = ("train", "validate", "test", "predict")
DATASET_INDEX = "dataset_index"
_PART = "embedding projector"
_COMPARE = "embedding comparison"


class EmbeddingProjector(LearnscopeCallback):
    """Capture the output of a sub-module and show it in the TensorBoard Projector and wandb.

    A forward hook on ``module`` does nothing except on capture batches, where it keeps a
    detached copy of the output (never the autograd graph, never anything put into the batch).
    Rows are accumulated over the batches of an evaluation epoch up to ``max_points`` and written
    as one snapshot per stage and epoch; in training, one batch every ``every_n_train_steps``.
    Nothing is captured in Lightning's sanity-check validation, which is used instead to check
    ``select``, ``spatial``, ``mask_fn``, ``metadata_fn`` and ``images_fn`` on real batches, so
    that a mistake fails before the first training step (``select`` and ``spatial`` are checked
    there even when ``"validate"`` is not captured).

    **What a row is** (the rule of :mod:`learnscope.embedding_layout`, shared with
    :class:`~learnscope.lightning_glue.TrainingHelper`): an output ``[batch, dim]`` gives one row
    per sample; ``[batch, tokens, dim]`` one row per token, with per-sample metadata repeated
    for each token and a ``position`` column added; 4 or more dimensions are PyTorch's
    feature-map layout ``[batch, channels, *spatial]`` (also under ``channels_last``; a
    ``[batch, H, W, channels]`` output must be permuted by ``select``). A feature map whose
    spatial sizes are all 1 (after ``AdaptiveAvgPool2d(1)``) gives one ``channels``-dimensional
    row per sample; larger ones need ``spatial``. ``mask_fn`` leaves out rows that are not
    data, such as padding tokens: kept rows keep their ``position`` and their sample's metadata
    and id.

    **Graph batches.** When the rows are the nodes of a batch of several graphs, per-graph values
    (ids, metadata columns with one value per graph, images) are spread over each graph's nodes,
    and a ``node`` column gives each node's number within its graph; with ids, a node's key
    mixes its graph's id with that number, so the same nodes are kept every snapshot.
    PyTorch Geometric batches are recognised by themselves (``batch.batch``, ``batch.ptr``) when
    ``batch.batch`` has one entry per row; a pooled embedding with one row per graph keeps one
    row per graph. Other graph libraries pass ``graph_index_fn``. ``ids_fn="dataset_index"``
    counts graphs, not nodes.

    **Several evaluation loaders.** A stage with several loaders (a list or a dict of them) gives
    one snapshot per stage and epoch that holds every loader's rows, with a ``dataloader``
    column (the loader's index, or its key in the dict) to colour or filter them by in the
    Projector: all loaders are seen in one space, under one PCA, and ``max_points`` is shared
    between them (deterministically: by id, or spread over the epoch). Snapshots per loader
    would give each loader its own Projector entry and its own PCA, so two loaders could never
    be seen in one view. ``ids_fn="dataset_index"`` counts each loader's samples on their own,
    and a row's loader is mixed into its key, so that sample 3 of one loader and sample 3 of
    another are two points.

    **Comparing snapshots.** With ``ids_fn``, every snapshot holds the same points: each point's
    id is hashed, and the ``max_points`` points with the smallest hashes are kept (the choice
    depends on the ids alone, not on the batch order, so shuffled loaders and resumed runs keep
    it), in the same order every time, with an ``id`` column. Without ids a snapshot holds
    ``max_points`` rows spread evenly over the epoch, which are the same points only when
    the loader is not shuffled. With ``aligned_pca=True`` every snapshot also gets ``pca_x``,
    ``pca_y`` and ``pca_z`` columns from a PCA turned to match the previous snapshot's view
    (:class:`learnscope.projection.AlignedPCA`), and a scatter image of ``pca_x``/``pca_y``
    coloured by the first metadata column goes to the writers as ``embeddings/<tag>/<stage>/pca``
    (TensorBoard's Images tab, wandb media). The image is drawn in units of the view's spread
    (its root-mean-square distance from the centre, given in the title) on axes fixed per tag
    from its first snapshot (a square of a round number of spreads that holds 99% of its
    points), so that the step slider shows the points moving, not the frame; points that later
    fall outside are drawn on the edge as ``×`` and counted in the title. It needs matplotlib
    (the ``tensorboard`` and ``wandb`` extras); without it the image is skipped with one
    warning. The projector keeps the full-dimensional vectors.

    Args:
        module: Dotted name of the sub-module of the LightningModule, such as ``"encoder"`` or
            ``"model.gnn.layers.2"``.
        select: Picks the embedding tensor from the module's output (tuple, dict,
            dataclass). Without it the output must be a tensor.
        metadata_fn: ``batch -> {column: values}``, with one value per row (for node-level
            embeddings, one per node) or per sample.
        images_fn: ``batch -> [B, C, H, W]`` thumbnails in ``[0, 1]`` or ``uint8``.
        stages: Which of ``"train"``, ``"validate"``, ``"test"``, ``"predict"`` to capture.
        every_n_epochs: Capture evaluation epochs whose number plus one is a multiple of this.
        every_n_train_steps: Capture a training batch at every multiple of this global step;
            needed when ``"train"`` is in ``stages``.
        max_points: Rows kept per snapshot. Every row of the epoch is looked at; when there are
            more, a deterministic subsample is kept: the same ``max_points`` ids with
            ``ids_fn``, else rows spread evenly over the epoch, in epoch order, with a ``row``
            column giving each one's row number in the epoch. Rows with NaN or Inf are left
            out with one warning; a snapshot with no finite row is skipped with a finding.
        tag: Name shown in the dashboards; defaults to ``module``.
        ids_fn: ``batch -> ids``, one stable id (int or string) per sample or per row, such as
            ``lambda batch: batch["index"]``; or ``"dataset_index"``: the index of each sample
            (each graph, for graph batches) in its loader's data set, for evaluation loaders
            that read it in order (not shuffled; checked when the epoch starts). Another
            string with a dot is the import path of a function, as a LightningCLI config
            gives it (``my_project.data.sample_ids``).
        graph_index_fn: ``batch -> LongTensor[rows]``, each embedding row's graph within the
            batch (0 to the number of graphs minus one), for node embeddings of graph batches
            that are not PyTorch Geometric's, such as
            ``lambda g: torch.arange(g.batch_size).repeat_interleave(g.batch_num_nodes())`` for
            DGL. The number of graphs is taken as the largest index plus one.
        aligned_pca: Add the aligned ``pca_x``, ``pca_y``, ``pca_z`` columns and a scatter
            image per snapshot.
        gather: Under DDP, collect the captured rows (and metadata) of every rank on rank
            zero, so that one snapshot covers the whole evaluation set (up to ``max_points``;
            the same id seen on two ranks is kept once). Without it, rank zero shows its own
            share only.
        spatial: For feature maps ``[batch, channels, H, W]`` (any number of spatial
            dimensions) larger than 1 x 1: ``"mean"`` (one row per sample, averaged over the
            positions), ``"max"`` (the maximum over them) or ``"pixels"`` (one row per
            position, numbered ``h * W + w`` in a ``position`` column). Without it such an
            output fails in the sanity check, naming the shape and the options; set for an
            output of 2 or 3 dimensions it fails too.
        mask_fn: Leaves out rows that are not data: ``batch -> bool tensor`` with one value per
            row (``[B]`` for ``[B, dim]``, ``[B, T]`` for tokens, ``[B, H, W]`` for pixels, or
            flat ``[rows]``; integer masks keep the nonzero rows), or the key or attribute of
            the batch that holds it. The default, ``"attention_mask"`` (Hugging Face's padding
            mask, 1 = real token), is used when the batch has it and the output gives one row
            per token; another key must be in the batch; a string with a dot is the import
            path of a function. ``None`` keeps every row. A mask of
            the wrong shape fails naming both shapes. Without ``ids_fn``, the ``row`` column
            counts the rows kept.

    Raises:
        ValueError: For bad arguments; an unknown ``module`` fails at ``setup`` with the list of
            the available names.

    Example:
        >>> projector = EmbeddingProjector(
        ...     "encoder", metadata_fn=lambda batch: {"label": batch[1]}, max_points=2000
        ... )
        >>> projector.tag
        'encoder'
        >>> compared = EmbeddingProjector("encoder", ids_fn="dataset_index", aligned_pca=True)
        >>> nodes = EmbeddingProjector(
        ...     "gnn", ids_fn="dataset_index", graph_index_fn=lambda batch: batch["graph"]
        ... )
        >>> cnn = EmbeddingProjector("layer4", spatial="mean")  # [B, 512, 7, 7] -> [B, 512]
        >>> tokens = EmbeddingProjector("bert", select=lambda out: out.last_hidden_state)
        >>> tokens.mask_fn  # padding tokens of Hugging Face batches are left out
        'attention_mask'
    """

    def __init__(
        self,
        module: str = "encoder",
        *,
        select: Callable[..., Any] | None = None,
        metadata_fn: Callable[..., Any] | None = None,
        images_fn: Callable[..., Any] | None = None,
        stages: Sequence[str] = ("validate",),
        every_n_epochs: int = 1,
        every_n_train_steps: int | None = None,
        max_points: int = 5000,
        tag: str | None = None,
        ids_fn: str | Callable[..., Any] | None = None,
        aligned_pca: bool = False,
        gather: bool = False,
        graph_index_fn: Callable[..., Any] | None = None,
        spatial: Literal["mean", "max", "pixels"] | None = None,
        mask_fn: str | Callable[..., Any] | None = DEFAULT_MASK,
    ) -> None:
        super().__init__()
        stages = (stages,) if isinstance(stages, str) else tuple(stages)
        unknown = [s for s in stages if s not in STAGES]
        if unknown or not stages:
            raise ValueError(f"stages must be a non-empty subset of {STAGES}, got {stages}")
        if every_n_epochs < 1 or max_points < 1:
            raise ValueError("every_n_epochs and max_points must be at least 1")
        if "train" in stages and (every_n_train_steps is None or every_n_train_steps < 1):
            raise ValueError("capturing the 'train' stage needs every_n_train_steps >= 1")
        ids_fn = resolve_function(ids_fn, "ids_fn")
        if not (ids_fn is None or ids_fn == DATASET_INDEX or callable(ids_fn)):
            raise ValueError(f"ids_fn must be a function or {DATASET_INDEX!r}, got {ids_fn!r}")
        if graph_index_fn is not None and not callable(graph_index_fn):
            raise ValueError(f"graph_index_fn must be a function, got {graph_index_fn!r}")
        self.spatial = check_spatial(spatial)
        self.mask_fn = check_mask_fn(mask_fn)
        self.module = module
        self.select = select
        self.metadata_fn = metadata_fn
        self.images_fn = images_fn
        self.stages = stages
        self.every_n_epochs = every_n_epochs
        self.every_n_train_steps = every_n_train_steps
        self.max_points = max_points
        self.tag = tag or module
        self.ids_fn = ids_fn
        self.graph_index_fn = graph_index_fn
        self.aligned_pca = aligned_pca
        self._pca = AlignedPCA(dims=3)
        self._names = SnapshotNames()  # never two snapshots under one name
        self._limits: dict[str, Limits] = {}  # scatter frame per key, from its first snapshot
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._checking = False  # sanity check: check select and spatial, capture nothing
        self._checking_functions = False  # ... and the other user functions ("validate")
        self._armed = False  # this batch is captured
        self._output: EmbeddingLayout | None = None  # the hooked output of the armed batch
        self.gather = gather
        self._rows: EmbeddingRows | None = None
        self._due = False  # this batch's stage and epoch are captured (the same on every rank)
        self._stage = "validate"  # the stage of the current batch
        self._loader = 0  # the dataloader_idx of the current batch
        self._loaders: list[int | str] | None = None  # the stage's loaders, when several
        # Whether the rows of PyTorch Geometric batches are nodes: decided by the first batch
        # that tells (rows == nodes != graphs, or rows == graphs != nodes) and kept, so that a
        # batch of one-node graphs (rows == nodes == graphs) is read the same way.
        self._node_rows: bool | None = None

    @property
    def state_key(self) -> str:
        """Checkpoint key: one per module and tag, so several projectors can be resumed."""
        return self._generate_state_key(module=self.module, tag=self.tag)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The PCA views and scatter axes, so that a resumed run keeps the same axes.

        It does not wait for a snapshot still being written (that would make every checkpoint
        wait for it): the views are those of the snapshots written so far, and a resumed run
        turns its first view to match the last of them.
        """
        return {"pca": self._pca.state_dict(), "limits": dict(self._limits)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        An evaluation call outside ``fit`` that loads an older checkpoint (``ckpt_path=``) adds
        only the views of tags this callback has not shown yet: the views it holds are newer.
        """
        if self._names.evaluating_checkpoint:
            state_dict = _held_first(state_dict, self.state_dict())
        self._pca.load_state_dict(state_dict["pca"])
        self._limits = {key: tuple(lim) for key, lim in state_dict["limits"].items()}

    @override
    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Note the step of a checkpoint that an evaluation call outside ``fit`` evaluates."""
        self._names.checkpoint_loaded(trainer, checkpoint)

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Find the sub-module and attach the forward hook."""
        super().setup(trainer, pl_module, stage)
        with self.guard(_PART, "setup"):
            self._names.start_call(trainer, pl_module)
        try:
            target = pl_module.get_submodule(self.module)
        except AttributeError:
            names = [name for name, _ in pl_module.named_modules() if name]
            raise ValueError(
                f"EmbeddingProjector: {type(pl_module).__name__} has no sub-module "
                f"{self.module!r}; available: {', '.join(names) or '(none)'}"
            ) from None
        with self.guard(_PART, "setup"):
            self._detach()
            self._hook = target.register_forward_hook(self._on_forward)

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Detach the hook; leaving the writer session flushes the writers (closes them last)."""
        super().teardown(trainer, pl_module, stage)
        self._detach()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Detach the hook, which Lightning's ``teardown`` does not do after an exception."""
        super().on_exception(trainer, pl_module, exception)
        self._detach()

    def _detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._rows = self._output = None

    # -- which batches are captured ------------------------------------------------------

    def _start_batch(
        self, trainer: Any, stage: str, capture: bool, dataloader_idx: int = 0
    ) -> None:
        self._output = None
        self._stage, self._loader = stage, dataloader_idx
        self._checking = trainer.sanity_checking
        self._checking_functions = self._checking and "validate" in self.stages
        if self._checking_functions:
            self._loaders = _loader_names(trainer, stage)
            if self.ids_fn == DATASET_INDEX:
                _dataset_order(trainer, stage, dataloader_idx)  # a shuffled loader fails here
        self._due = capture and not trainer.sanity_checking and stage in self.stages
        self._armed = (
            self._due and self.is_on(_PART) and (trainer.is_global_zero or self._gathering(trainer))
        )
        if not self._armed:
            return
        with self.guard(_PART, self._record(trainer.global_step)):
            if self._rows is None:
                self._loaders = _loader_names(trainer, stage)
                step, label = self._names.choose(trainer, self.tag, stage)
                self._rows = EmbeddingRows(
                    step,
                    label,
                    self.max_points,
                    by_id=self.ids_fn is not None,
                    loaders=self._loaders,
                    rank=trainer.global_rank,
                    world_size=trainer.world_size,
                )
            if self.ids_fn == DATASET_INDEX and dataloader_idx not in self._rows.orders:
                self._rows.orders[dataloader_idx] = _dataset_order(trainer, stage, dataloader_idx)
        self._armed = self.is_on(_PART)

    def _record(self, step: int) -> str:
        """What the projector works on, for a failure's message."""
        loader = f" dataloader {self._loader}" if self._loaders is not None else ""
        return f"{self.tag}/{self._stage} step {step}{loader}"

    def _gathering(self, trainer: Any) -> bool:
        return self.gather and trainer.world_size > 1

    def _eval_epoch_due(self, trainer: Any) -> bool:
        return (trainer.current_epoch + 1) % self.every_n_epochs == 0

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Arm the hook on training steps that are due."""
        n = self.every_n_train_steps
        self._start_batch(trainer, "train", n is not None and trainer.global_step % n == 0)

    @override
    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the hook in validation epochs that are due."""
        self._start_batch(trainer, "validate", self._eval_epoch_due(trainer), dataloader_idx)

    @override
    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the hook on every test batch until ``max_points`` rows are kept."""
        self._start_batch(trainer, "test", True, dataloader_idx)

    @override
    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the hook on every predict batch until ``max_points`` rows are kept."""
        self._start_batch(trainer, "predict", True, dataloader_idx)

    # -- capture -------------------------------------------------------------------------

    def _on_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not (self._armed or self._checking) or self._output is not None:
            return  # the common case: not a capture batch, or a second forward in the batch
        if self._checking:
            self._output = self._embedding(output)
            return
        with self.guard(_PART):
            layout = self._embedding(output)
            self._output = layout._replace(rows=layout.rows.clone())

    def _embedding(self, output: Any) -> EmbeddingLayout:
        """The rows of the module's output (``select`` applied, detached), by the shared rule."""
        value = self.select(output) if self.select is not None else output
        if not isinstance(value, torch.Tensor):
            hint = "" if self.select is not None else "; pass select= to pick the embedding tensor"
            raise TypeError(
                f"EmbeddingProjector: module {self.module!r} gave a {type(value).__name__}, "
                f"not a tensor{hint}"
            )
        owner = f"EmbeddingProjector: module {self.module!r}"
        return embedding_layout(value.detach(), self.spatial, owner)

    def _end_batch(self, batch: Any) -> None:
        output, self._output = self._output, None
        if output is None:
            return
        if self._checking:  # the user's functions on a real batch, outside the guard
            if not self._checking_functions:
                return
            rows = self._batch_rows(output, batch)
            by_id = self.ids_fn is not None
            check = EmbeddingRows(0, self._stage, 1, by_id=by_id, loaders=self._loaders)
            check.add(*rows, loader=self._loader)
            return
        if self._armed and self._rows is not None:
            with self.guard(_PART, self._record(self._rows.step)):
                self._rows.add(*self._batch_rows(output, batch), loader=self._loader)
        self._armed = False

    def _batch_rows(self, layout: EmbeddingLayout, batch: Any) -> BatchRows:
        output = layout.rows
        samples = self._samples(output, batch)
        metadata = self.metadata_fn(batch) if self.metadata_fn is not None else None
        images = self.images_fn(batch) if self.images_fn is not None else None
        count = samples.count if samples is not None else output.shape[0]
        keep = row_mask(self.mask_fn, batch, layout, f"EmbeddingProjector: module {self.module!r}")
        return batch_rows(output, metadata, images, self._ids(batch, count), samples, keep)

    def _samples(self, output: torch.Tensor, batch: Any) -> RowSamples | None:
        """Which sample (graph, sequence) each embedding row of this batch belongs to."""
        rows = output.shape[0]
        if self.graph_index_fn is not None:
            index = self.graph_index_fn(batch)
            length = len(index) if isinstance(index, torch.Tensor) and index.ndim == 1 else None
            if output.ndim != 2 or length != rows:
                given = f"{length} values" if length is not None else _describe(index)
                raise ValueError(
                    f"EmbeddingProjector: graph_index_fn gave {given} but the batch has "
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

    def _ids(self, batch: Any, count: int) -> Sequence[Any] | torch.Tensor | None:
        """This batch's ids: from ``ids_fn``, or the next dataset indices of its loader.

        ``count`` is the number of samples in the batch (graphs, for graph batches).
        """
        if self.ids_fn is None:
            return None
        if self.ids_fn != DATASET_INDEX:
            ids = self.ids_fn(batch)  # type: ignore[operator]
            return ids.detach().reshape(-1) if isinstance(ids, torch.Tensor) else list(ids)
        if self._checking or self._rows is None:
            return torch.arange(count)
        return self._rows.next_dataset_indices(count, self._loader)

    def _write(self, trainer: Any, due: bool) -> None:
        """Write the snapshot; ``due`` (the same on every rank) says whether ranks gather."""
        rows, self._rows = self._rows, None
        if due and self._gathering(trainer):  # every rank takes part, whatever it holds
            rows = self._gathered(trainer, rows)
        if rows is None or not trainer.is_global_zero or not self.is_on(_PART):
            return
        writers = self.writers(trainer, shows_method="write_embedding")
        # Everything after the gather runs on the writers' worker thread, so the training
        # thread only waits for it when the queue is full (the rows are this job's alone).
        writers.submit(lambda w: self._write_rows(w, rows), size=rows.nbytes())

    def _write_rows(self, writers: Writers, rows: EmbeddingRows) -> None:
        """Make the snapshot of ``rows``, add its aligned PCA view, and write them."""
        snapshot, dropped = None, 0
        record = f"{self.tag}/{rows.stage} step {rows.step}"
        with self.guard(_PART, record):
            snapshot, dropped = rows.snapshot(self.tag)
        if dropped:
            self._report_non_finite(writers, rows, snapshot, dropped)
        if snapshot is None or not self.is_on(_PART):
            return
        if dropped:  # the run record says how many rows were left out
            snapshot = dataclasses.replace(snapshot, dropped=dropped)
        image = None
        if self.aligned_pca and self.is_on(_COMPARE):
            with self.guard(_COMPARE, record):
                snapshot, image = self._compare(snapshot, rows.final_keys)
        writers.write_embedding(snapshot)
        if image is not None:
            writers.write_image(image)
        writers.flush()

    def _gathered(self, trainer: Any, rows: EmbeddingRows | None) -> EmbeddingRows | None:
        """All ranks' rows on rank zero (``None`` elsewhere), through one ``gather_object``.

        Every rank sends at most ``max_points`` rows; only rank zero receives them (an
        all-gather would hold every rank's rows on every rank). Rank zero merges them after
        the gather, so a merge that fails (ranks whose metadata columns differ) is reported
        there and switches the projector off without leaving any rank waiting.
        """
        import torch.distributed as dist

        payload = None
        if rows is not None and self.is_on(_PART):
            with self.guard(_PART):
                payload = rows.payload()
        payloads: list[Any] | None = [None] * trainer.world_size if trainer.is_global_zero else None
        dist.gather_object(payload, payloads, dst=0)
        if payloads is None:
            return None
        step, stage = next(((p["step"], p["stage"]) for p in payloads if p), (None, None))
        if step is None:
            return None
        merged = EmbeddingRows(step, stage, self.max_points, by_id=self.ids_fn is not None)
        with self.guard(_PART, f"{self.tag}/{stage} step {step}"):
            merged.merge(payloads)
            return merged
        return None

    def _report_non_finite(
        self,
        writers: Writers,
        rows: EmbeddingRows,
        snapshot: EmbeddingSnapshot | None,
        dropped: int,
    ) -> None:
        subject = f"{self.tag}/{rows.stage}"
        if snapshot is None:
            finding = Finding(
                "non-finite-output",
                subject,
                f"every captured embedding row of {self.module!r} is NaN or Inf; the snapshot at "
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
                self.module,
                rows.step,
                snapshot.num_points,
            )

    def _compare(
        self, snapshot: EmbeddingSnapshot, keys: torch.Tensor | None
    ) -> tuple[EmbeddingSnapshot, RenderedImage | None]:
        """Add the aligned PCA columns, and draw the scatter image of the snapshot."""
        key = snapshot.key
        ids = keys.tolist() if keys is not None else None
        coords = self._pca.fit_transform(key, torch.as_tensor(snapshot.vectors), ids)
        columns = {
            name: [float(f"{v:.6g}") for v in coords[:, i].tolist()]
            for i, name in enumerate(PCA_COLUMNS)
        }
        # The image shows the view in units of its spread (the title gives the spread), so that
        # embeddings that grow during training keep one frame and the slider shows their shape.
        xy = coords[:, :2].numpy()
        spread = float(np.sqrt((xy**2).sum(1).mean())) if len(xy) else 0.0
        xy = xy / spread if spread > 0 else xy
        if key not in self._limits:  # the frame stays the one chosen for the first snapshot
            self._limits[key] = frame_limits(xy)
        # The snapshot carries the spread and frame, so the run record and every view use
        # the numbers of this picture.
        snapshot = dataclasses.replace(
            snapshot,
            metadata={**snapshot.metadata, **columns},
            view_frame=ViewFrame(spread, self._limits[key]),
        )
        metadata = snapshot.metadata_columns()
        title = f"{key}  step {snapshot.step}  spread {spread:.3g}"
        pixels = scatter_image(
            xy, labels_of(metadata), title, self._limits[key], label_column(metadata)
        )
        if pixels is None:  # no matplotlib (warned once): the PCA columns are still written
            return snapshot, None
        return snapshot, RenderedImage(f"embeddings/{key}/pca", snapshot.step, pixels)

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Write the training snapshot when this batch was captured."""
        due = self._due  # decided from the global step at batch start: the same on every rank
        self._end_batch(batch)
        self._write(trainer, due)

    @override
    def on_validation_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Keep the captured rows with their metadata."""
        self._end_batch(batch)

    @override
    def on_test_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Keep the captured rows with their metadata."""
        self._end_batch(batch)

    @override
    def on_predict_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Keep the captured rows with their metadata."""
        self._end_batch(batch)

    @override
    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        due = not trainer.sanity_checking and "validate" in self.stages
        self._write(trainer, due and self._eval_epoch_due(trainer))

    @override
    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, "test" in self.stages)

    @override
    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, "predict" in self.stages)


_LOADERS = {
    "train": "train_dataloader",
    "validate": "val_dataloaders",
    "test": "test_dataloaders",
    "predict": "predict_dataloaders",
}


def _named_loaders(loaders: Any) -> list[tuple[int | str, Any]]:
    """``(name, loader)`` of each loader, in the order of Lightning's ``dataloader_idx``.

    Lightning numbers the loaders of a list, tuple or dict (nested ones too) in the order of
    ``torch.utils._pytree``: list order, and a dict's insertion order. A loader of a list is
    named by its index, one of a dict by its key; nested ones by their path (``"clean/0"``).
    """
    if isinstance(loaders, Mapping):
        items: list[tuple[int | str, Any]] = [(str(k), v) for k, v in loaders.items()]
    elif isinstance(loaders, list | tuple):
        items = list(enumerate(loaders))
    else:
        return [(0, loaders)]
    named: list[tuple[int | str, Any]] = []
    for key, value in items:
        if isinstance(value, Mapping | list | tuple):
            named += [(f"{key}/{sub}", loader) for sub, loader in _named_loaders(value)]
        else:
            named.append((key, value))
    return named


def _loader_names(trainer: Any, stage: str) -> list[int | str] | None:
    """The names of the stage's loaders, or ``None`` when it has one (or training's)."""
    if stage == "train":  # several training loaders give one combined batch
        return None
    named = _named_loaders(getattr(trainer, _LOADERS[stage], None))
    return [name for name, _ in named] if len(named) > 1 else None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _dataset_order(trainer: Any, stage: str, dataloader_idx: int) -> Sequence[int]:
    """The dataset index of each sample of the stage's loader, in the order it reads them."""
    from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

    named = _named_loaders(getattr(trainer, _LOADERS[stage], None))
    loader = named[dataloader_idx][1] if dataloader_idx < len(named) else None
    batch_sampler = getattr(loader, "batch_sampler", None)
    # Lightning wraps a predict loader's batch sampler to record the indices it yields.
    inner = getattr(batch_sampler, "_batch_sampler", None)
    batch_sampler = inner if isinstance(inner, BatchSampler) else batch_sampler
    sampler = batch_sampler.sampler if isinstance(batch_sampler, BatchSampler) else None
    if isinstance(sampler, SequentialSampler):
        return range(len(sampler))
    if isinstance(sampler, DistributedSampler) and not sampler.shuffle:
        return list(sampler)
    raise ValueError(
        f"EmbeddingProjector: ids_fn={DATASET_INDEX!r} needs a {stage} loader that reads the "
        f"data set in order, but it uses {type(sampler or batch_sampler).__name__}; pass "
        "ids_fn=lambda batch: ... that returns a stable id per sample instead"
    )


def _held_first(loaded: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """The ``loaded`` state, with the views and frames that ``held`` has in place of its own."""
    views = {**loaded["pca"]["views"], **held["pca"]["views"]}
    return {
        "pca": {**held["pca"], "views": views},
        "limits": {**loaded["limits"], **held["limits"]},
    }
