"""EmbeddingProjector: embeddings of one sub-module, per stage and epoch, to every dashboard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from typing_extensions import override

from learnscope.embedding_layout import DEFAULT_MASK, EmbeddingLayout, check_mask_fn, check_spatial
from learnscope.embedding_rows import EmbeddingRows
from learnscope.import_path import resolve_function
from learnscope.lightning_glue.aligned_views import AlignedViews
from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.lightning_glue.capture_schedule import STAGES, BatchPlan, CaptureSchedule
from learnscope.lightning_glue.encoder_capture import CapturedOutput, EncoderCapture
from learnscope.lightning_glue.gather_rows import gather_rows
from learnscope.lightning_glue.loaders import DATASET_INDEX, dataset_order, loader_names
from learnscope.lightning_glue.row_reader import RowReader
from learnscope.lightning_glue.snapshot_names import SnapshotNames
from learnscope.lightning_glue.snapshot_writer import SNAPSHOTS, write_snapshot

__all__ = ["DATASET_INDEX", "STAGES", "EmbeddingProjector"]


class EmbeddingProjector(LearnscopeCallback):
    """Capture the output of a sub-module and show it in the TensorBoard Projector and wandb.

    The forward hook on ``module`` (an
    :class:`~learnscope.lightning_glue.encoder_capture.EncoderCapture`, shared with the other
    callbacks on that module) does nothing except on capture batches,
    where it keeps a detached copy of the output (never the autograd graph, never anything put
    into the batch). Rows are accumulated over the batches of an evaluation epoch up to
    ``max_points`` and written as one snapshot per stage and epoch; in training, one batch every
    ``every_n_train_steps``. Nothing is captured in Lightning's sanity-check validation, which is
    used instead to check ``select``, ``spatial``, ``mask_fn``, ``metadata_fn`` and ``images_fn``
    on real batches, so that a mistake fails before the first training step (``select`` and
    ``spatial`` are checked there even when ``"validate"`` is not captured).

    What a row is (tokens, feature maps, padding, the nodes of graph batches) is said in
    :mod:`learnscope.lightning_glue.row_reader`; a stage with several loaders gives one snapshot
    with a ``dataloader`` column (:mod:`learnscope.lightning_glue.loaders`).

    **Comparing snapshots.** With ``ids_fn``, every snapshot holds the same points: each point's
    id is hashed, and the ``max_points`` points with the smallest hashes are kept (the choice
    depends on the ids alone, not on the batch order, so shuffled loaders and resumed runs keep
    it), in the same order every time, with an ``id`` column. Without ids a snapshot holds
    ``max_points`` rows spread evenly over the epoch, which are the same points only when the
    loader is not shuffled. With ``aligned_pca=True`` every snapshot also gets ``pca_x``,
    ``pca_y`` and ``pca_z`` columns and a scatter image ``embeddings/<tag>/<stage>/pca``
    (:mod:`learnscope.lightning_glue.snapshot_writer`). The projector keeps the
    full-dimensional vectors.

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
        self._schedule = CaptureSchedule(stages, every_n_epochs, every_n_train_steps)  # type: ignore[arg-type]
        if max_points < 1:
            raise ValueError("every_n_epochs and max_points must be at least 1")
        ids_fn = resolve_function(ids_fn, "ids_fn")
        if not (ids_fn is None or ids_fn == DATASET_INDEX or callable(ids_fn)):
            raise ValueError(f"ids_fn must be a function or {DATASET_INDEX!r}, got {ids_fn!r}")
        if graph_index_fn is not None and not callable(graph_index_fn):
            raise ValueError(f"graph_index_fn must be a function, got {graph_index_fn!r}")
        self.spatial, self.mask_fn = check_spatial(spatial), check_mask_fn(mask_fn)
        self.module, self.select, self.tag = module, select, tag or module
        self.metadata_fn, self.images_fn, self.ids_fn = metadata_fn, images_fn, ids_fn
        self.stages, self.every_n_epochs = self._schedule.stages, every_n_epochs
        self.every_n_train_steps, self.max_points = every_n_train_steps, max_points
        self.graph_index_fn, self.aligned_pca, self.gather = graph_index_fn, aligned_pca, gather
        self._reader = RowReader(
            "EmbeddingProjector",
            module,
            **{k: getattr(self, k) for k in ("select", "spatial", "mask_fn", "metadata_fn")},
            **{k: getattr(self, k) for k in ("images_fn", "ids_fn", "graph_index_fn")},
        )
        self._views = AlignedViews()  # PCA views and frames, shared with the writer thread
        self._names = SnapshotNames()  # never two snapshots under one name
        self._capture: EncoderCapture | None = None  # the module's hook, joined in setup
        self._plan = BatchPlan("validate", 0, False, False, False)  # the current batch's
        self._output: EmbeddingLayout | None = None  # the hooked output of the batch
        self._rows: EmbeddingRows | None = None  # the rows of the epoch (or step) captured
        self._loaders: list[int | str] | None = None  # the stage's loaders, when several

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
        return self._views.state_dict()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        An evaluation call outside ``fit`` that loads an older checkpoint (``ckpt_path=``) adds
        only the views of tags this callback has not shown yet: the views it holds are newer.
        """
        self._views.load_state_dict(state_dict, keep_held=self._names.evaluating_checkpoint)

    @override
    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Note the step of a checkpoint that an evaluation call outside ``fit`` evaluates."""
        self._names.checkpoint_loaded(trainer, checkpoint)

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Find the sub-module and join the capture of its output."""
        super().setup(trainer, pl_module, stage)
        with self.guard(SNAPSHOTS, "setup"):
            self._names.start_call(trainer, pl_module)
        try:
            target = pl_module.get_submodule(self.module)
        except AttributeError:
            names = [name for name, _ in pl_module.named_modules() if name]
            raise ValueError(
                f"EmbeddingProjector: {type(pl_module).__name__} has no sub-module "
                f"{self.module!r}; available: {', '.join(names) or '(none)'}"
            ) from None
        with self.guard(SNAPSHOTS, "setup"):
            self._detach()
            self._capture = EncoderCapture.of(target)
            self._capture.join(self, self._on_output)

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Leave the capture; leaving the writer session flushes the writers (closes them last)."""
        super().teardown(trainer, pl_module, stage)
        self._detach()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Leave the capture, which Lightning's ``teardown`` does not do after an exception."""
        super().on_exception(trainer, pl_module, exception)
        self._detach()

    def _detach(self) -> None:
        if self._capture is not None:
            self._capture.leave(self)
            self._capture = None
        self._rows = self._output = None

    def _start_batch(self, trainer: Any, stage: str, dataloader_idx: int = 0) -> None:
        plan = self._plan = self._schedule.batch(trainer, stage, dataloader_idx)
        self._output = None
        if plan.check_functions:
            self._loaders = loader_names(trainer, stage)
            if self.ids_fn == DATASET_INDEX:
                dataset_order(trainer, stage, dataloader_idx)  # a shuffled loader fails here
        gathering = self.gather and trainer.world_size > 1
        armed = plan.due and self.is_on(SNAPSHOTS) and (trainer.is_global_zero or gathering)
        if armed:
            with self.guard(SNAPSHOTS, self._record(trainer.global_step)):
                if self._rows is None:
                    self._loaders = loader_names(trainer, stage)
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
                orders = self._rows.orders
                if self.ids_fn == DATASET_INDEX and dataloader_idx not in orders:
                    orders[dataloader_idx] = dataset_order(trainer, stage, dataloader_idx)
        if self._capture is not None and ((armed and self.is_on(SNAPSHOTS)) or plan.checking):
            self._capture.arm(self)

    def _record(self, step: int) -> str:
        """What the projector works on, for a failure's message."""
        loader = f" dataloader {self._plan.loader}" if self._loaders is not None else ""
        return f"{self.tag}/{self._plan.stage} step {step}{loader}"

    def _on_output(self, captured: CapturedOutput) -> None:
        if self._plan.checking:  # select and spatial on a real output, outside the guard
            self._output = self._reader.layout(captured)
            return
        with self.guard(SNAPSHOTS):
            layout = self._reader.layout(captured)
            self._output = layout._replace(rows=layout.rows.clone())

    def _end_batch(self, batch: Any) -> None:
        output, self._output = self._output, None
        if self._capture is not None:
            self._capture.disarm(self)
        plan = self._plan
        if output is None or (plan.checking and not plan.check_functions):
            return
        if plan.checking:  # the user's functions on a real batch, outside the guard
            check = EmbeddingRows(
                0, plan.stage, 1, by_id=self.ids_fn is not None, loaders=self._loaders
            )
            check.add(*self._reader.rows(output, batch), loader=plan.loader)
        elif (rows := self._rows) is not None:
            with self.guard(SNAPSHOTS, self._record(rows.step)):
                ids = lambda count: rows.next_dataset_indices(count, plan.loader)  # noqa: E731
                rows.add(*self._reader.rows(output, batch, ids), loader=plan.loader)

    def _write(self, trainer: Any, due: bool) -> None:
        """Write the snapshot; ``due`` (the same on every rank) says whether ranks gather."""
        rows, self._rows = self._rows, None
        if due and self.gather and trainer.world_size > 1:  # every rank takes part
            by_id = self.ids_fn is not None
            rows = gather_rows(
                trainer, rows, self, tag=self.tag, max_points=self.max_points, by_id=by_id
            )
        if rows is None or not trainer.is_global_zero or not self.is_on(SNAPSHOTS):
            return
        writers = self.writers(trainer, shows_method="write_embedding")
        views = self._views if self.aligned_pca else None
        # Everything after the gather runs on the writers' worker thread, so the training
        # thread only waits for it when the queue is full (the rows are this job's alone).
        writers.submit(
            lambda w: write_snapshot(rows, w, self, tag=self.tag, module=self.module, views=views),
            size=rows.nbytes(),
        )

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Arm the capture on training steps that are due."""
        self._start_batch(trainer, "train")

    @override
    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the capture in validation epochs that are due."""
        self._start_batch(trainer, "validate", dataloader_idx)

    @override
    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the capture on every test batch."""
        self._start_batch(trainer, "test", dataloader_idx)

    @override
    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the capture on every predict batch."""
        self._start_batch(trainer, "predict", dataloader_idx)

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Write the training snapshot when this batch was captured."""
        due = self._plan.due  # decided from the global step at batch start: alike on every rank
        self._end_batch(batch)
        self._write(trainer, due)

    @override
    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, *_: Any
    ) -> None:
        """Keep the captured rows with their metadata."""
        self._end_batch(batch)

    on_test_batch_end = on_validation_batch_end
    on_predict_batch_end = on_validation_batch_end

    @override
    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, self._schedule.epoch_due(trainer, "validate"))

    @override
    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, self._schedule.epoch_due(trainer, "test"))

    @override
    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, self._schedule.epoch_due(trainer, "predict"))
