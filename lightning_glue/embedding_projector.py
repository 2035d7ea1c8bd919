"""EmbeddingProjector: embeddings of one sub-module, per stage and epoch, to every dashboard."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

from typing_extensions import override

from learnscope.embeddings.aligned_umap import UMAPSettings
from learnscope.embeddings.batch_axis import layout_module
from learnscope.embeddings.output_layout import DEFAULT_MASK, EmbeddingLayout
from learnscope.embeddings.rows import EmbeddingRows
from learnscope.lightning_glue.base import LearnscopeCallback, setting
from learnscope.lightning_glue.capture_schedule import STAGES, BatchPlan
from learnscope.lightning_glue.encoder_capture import CapturedOutput, submodule
from learnscope.lightning_glue.gather_rows import gather_rows
from learnscope.lightning_glue.loaders import DATASET_INDEX, dataset_order, loader_names
from learnscope.lightning_glue.output_capture import OutputCapture
from learnscope.lightning_glue.projector_settings import ProjectorSettings
from learnscope.lightning_glue.row_reader import RowReader
from learnscope.lightning_glue.snapshot_names import SnapshotNames
from learnscope.plugins.pipeline.snapshot_job import SNAPSHOTS, UMAP_VIEW, SnapshotJobs
from learnscope.run_directory.write_limits import WriteLimits

__all__ = ["DATASET_INDEX", "STAGES", "EmbeddingProjector"]

log = logging.getLogger("learnscope")


def _arm_on_batch_start(stage: str, when: str) -> Callable[..., None]:
    """The ``on_<stage>_batch_start`` hook of an evaluation stage: arm the capture ``when``."""

    def hook(
        self: EmbeddingProjector,
        trainer: Any,
        pl_module: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._start_batch(trainer, stage, batch, dataloader_idx)

    hook.__doc__ = f"Arm the capture {when}."
    return hook


class EmbeddingProjector(LearnscopeCallback):
    """Capture the output of a sub-module and show it in the TensorBoard Projector and wandb.

    On capture batches (:mod:`~learnscope.lightning_glue.capture_schedule`) it keeps a detached
    copy of the module's output (through the module's one forward hook, shared with the other
    callbacks on it: :mod:`~learnscope.lightning_glue.encoder_capture`). Rows (what a row is:
    :mod:`~learnscope.lightning_glue.row_reader`) are accumulated over an evaluation epoch up
    to ``max_points`` and written as one snapshot per stage and epoch, with a ``dataloader``
    column when the stage has several loaders; in training, one batch every
    ``every_n_train_steps``. Lightning's sanity check captures nothing: it checks ``select``,
    ``spatial``, ``mask_fn``, ``metadata_fn`` and ``images_fn`` on real batches instead.

    Args:
        module: Dotted name of the sub-module, such as ``"encoder"`` or ``"model.gnn.layers.2"``.
        select: Picks the embedding tensor from an output that is a tuple, dict or dataclass;
            an output (or a ``select``) that gives no tensor fails in the sanity check, naming
            what it gave (:mod:`learnscope.embeddings.module_output`).
        metadata_fn: ``batch -> {column: values}``, one value per row (node) or per sample.
        images_fn: ``batch -> [B, C, H, W]`` thumbnails in ``[0, 1]`` or ``uint8``.
        stages: Which of ``"train"``, ``"validate"``, ``"test"``, ``"predict"`` to capture.
        every_n_epochs: Capture evaluation epochs whose number plus one is a multiple of this.
        every_n_train_steps: Capture a training batch at every multiple of this global step;
            needed when ``"train"`` is in ``stages``.
        max_points: Rows kept per snapshot: with ``ids_fn``, the ids with the smallest hashes
            (the same points every snapshot, whatever the batch order), else rows spread evenly
            over the epoch, with a ``row`` column. Rows with NaN or Inf are left out.
        tag: Name shown in the dashboards; defaults to ``module``.
        ids_fn: ``batch -> ids``, a stable id (int or string) per sample or row; or
            ``"dataset_index"``: each sample's (graph's) index in the data set of a loader that
            reads it in order; or a function's import path (a string with a dot).
        graph_index_fn: ``batch -> LongTensor[rows]``, each embedding row's graph within the
            batch, for node embeddings of graph batches that are not PyTorch Geometric's.
        aligned_pca: Add the aligned ``pca_x``, ``pca_y``, ``pca_z`` columns and a scatter
            image per snapshot (:mod:`learnscope.embeddings.aligned_views`, on the writers' thread).
        aligned_umap: Add the aligned UMAP view beside the aligned PCA (which it turns on):
            ``umap_x``, ``umap_y`` columns, a scatter image per snapshot, and the choice of
            projection in every view (:mod:`learnscope.embeddings.aligned_umap`). ``True`` for the
            default :class:`~learnscope.embeddings.aligned_umap.UMAPSettings` (at most 5,000 points
            fitted per snapshot), or settings of your own. Needs ``pip install "learnscope[umap]"``;
            computed on the writers' thread (umap-learn loaded there when a fit starts).
        gather: Under DDP, one snapshot of every rank's rows (else rank zero's share only).
        spatial: For feature maps ``[batch, channels, *spatial]`` larger than 1 x 1, and the
            ``[batch, channels, length]`` outputs of channel-first modules (``nn.Conv1d``, 1-d
            pooling, ``nn.BatchNorm1d``..., or an ``nn.Sequential`` ending in one:
            :mod:`learnscope.embeddings.batch_axis`): ``"mean"``, ``"max"`` (one row per sample) or
            ``"pixels"`` (one row per position). Without it such an output fails in the sanity
            check, naming the shape and options. Any other 3-D output is read as
            ``[batch, tokens, dim]``, said once at info level.
        mask_fn: Leaves out rows that are not data: ``batch -> bool tensor`` (one per row, true
            keeps it), the batch's key or attribute that holds it (a name ending in
            ``padding_mask``, such as ``src_key_padding_mask``, marks padding with true), or an
            import path; the default, ``"attention_mask"`` (else PyTorch's padding mask), when
            the output gives one row per token. ``None``: every row. A sequence-first output
            (``batch_first=False``) is read with the batch first:
            :mod:`learnscope.embeddings.batch_axis`.
        write_limits: The limits of this fit's writes (a
            :class:`~learnscope.run_directory.write_limits.WriteLimits`: how long the end of the fit
            waits for them, the free-space reserve they leave). The learnscope callbacks of one fit
            share them: give them to one callback, or the same to each (different ones fail at
            ``setup``). ``None``: another callback's, else the defaults.

    Raises:
        ValueError: For bad arguments; an unknown ``module`` fails at ``setup``, naming those.

    Example:
        >>> projector = EmbeddingProjector("encoder", metadata_fn=lambda batch: {"label": batch[1]})
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
        aligned_umap: bool | UMAPSettings = False,
        gather: bool = False,
        graph_index_fn: Callable[..., Any] | None = None,
        spatial: Literal["mean", "max", "pixels"] | None = None,
        mask_fn: str | Callable[..., Any] | None = DEFAULT_MASK,
        write_limits: WriteLimits | None = None,
    ) -> None:
        super().__init__(write_limits)
        self.settings = settings = ProjectorSettings(
            module,
            select,
            metadata_fn,
            images_fn,
            stages,
            every_n_epochs,
            every_n_train_steps,
            max_points,
            tag,
            ids_fn,
            aligned_pca,
            aligned_umap,
            gather,
            graph_index_fn,
            spatial,
            mask_fn,
        )
        self._reader = RowReader(settings)  # the rows of a batch, by these settings
        # the snapshot jobs, run on the writers' thread, where the aligned views live
        self._jobs = SnapshotJobs(
            self.parts,
            tag=settings.shown_tag,
            module=module,
            aligned=settings.pca_view,
            umap=settings.umap,
        )
        self._names = SnapshotNames()  # never two snapshots under one name
        self._capture = OutputCapture()  # the module's output, attached in setup
        self._plan = BatchPlan("validate", 0, False, False, False)  # the current batch's
        self._output: EmbeddingLayout | None = None  # the hooked output of the batch
        self._batch: Any = None  # the batch being captured, which tells its batch axis
        self._rows: EmbeddingRows | None = None  # the rows of the epoch (or step) captured
        self._loaders: list[int | str] | None = None  # the stage's loaders, when several
        self._rank_zero = True  # this process is global rank zero (says the output's reading)

    module = setting("module")
    select = setting("select")
    metadata_fn = setting("metadata_fn")
    images_fn = setting("images_fn")
    stages = setting("schedule.stages", "The stages captured, as a tuple (read-only).")
    every_n_epochs = setting("every_n_epochs")
    every_n_train_steps = setting("every_n_train_steps")
    max_points = setting("max_points")
    tag = setting("shown_tag", "The name shown in the dashboards: ``tag``, else ``module``.")
    ids_fn = setting("ids", "``ids_fn``, an import path resolved (read-only).")
    aligned_pca = setting("pca_view", "Whether the aligned PCA view is made (read-only).")
    aligned_umap = setting("aligned_umap")
    gather = setting("gather")
    graph_index_fn = setting("graph_index_fn")
    spatial = setting("reading.spatial", "How feature maps become rows (read-only).")
    mask_fn = setting("reading.mask_fn", "``mask_fn``, an import path resolved (read-only).")

    @property
    def state_key(self) -> str:
        """Checkpoint key: one per module and tag, so several projectors can be resumed."""
        return self._generate_state_key(module=self.module, tag=self.tag)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The PCA views and scatter axes of the snapshots written so far (never waits for one).

        A resumed run keeps the same axes: its first view is turned to match the last of these.
        """
        return dict(self._jobs.saved())

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; an evaluation outside ``fit`` keeps the newer views held.

        An older checkpoint (``ckpt_path=``) adds only the views of tags not shown yet.
        """
        self._jobs.restore(state_dict, keep_held=self._names.evaluating_checkpoint)

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
        target = submodule(pl_module, self.module, "EmbeddingProjector")
        declared = layout_module(pl_module, self.module)  # whose layout the output has
        with self.guard(SNAPSHOTS, "setup"):
            self.release()
            reading = self.settings.reading
            self._capture.attach(reading, target, declared, receive=self._on_output)
        self._rank_zero = trainer.is_global_zero
        if self._jobs.umap is not None and trainer.is_global_zero and self.is_on(UMAP_VIEW):
            self.writers(trainer).submit(self._jobs.load_umap, label="loading umap-learn")

    @override
    def release(self) -> None:
        """Leave the encoder's capture and drop the rows held."""
        self._capture.detach()  # no reference to the model is kept after a fit
        self._rows = self._output = self._batch = None

    def _start_batch(self, trainer: Any, stage: str, batch: Any, dataloader_idx: int = 0) -> None:
        plan = self._plan = self.settings.schedule.batch(trainer, stage, dataloader_idx)
        self._output, self._batch, by_index = None, batch, self.ids_fn == DATASET_INDEX
        if plan.check_functions:
            self._loaders = loader_names(trainer, stage)
            if by_index:
                dataset_order(trainer, stage, dataloader_idx)  # a shuffled loader fails here
        gathering = self.gather and trainer.world_size > 1
        armed = plan.due and self.is_on(SNAPSHOTS) and (gathering or self._read(trainer))
        if armed:
            with self.guard(SNAPSHOTS, self._record(trainer.global_step)):
                if self._rows is None:
                    loaders = self._loaders = loader_names(trainer, stage)
                    name = self._names.choose(trainer, self.tag, stage)  # step and stage label
                    self._rows = self._reader.epoch_rows(trainer, *name, loaders)
                orders = self._rows.orders
                if by_index and dataloader_idx not in orders:
                    orders[dataloader_idx] = dataset_order(trainer, stage, dataloader_idx)
        if not self._capture.attached:
            return
        self._capture.batch_started()
        if (armed and self.is_on(SNAPSHOTS)) or plan.checking:
            self._capture.arm()

    def _read(self, trainer: Any) -> bool:
        """Whether this process's writers read snapshots: rank zero's, when it has a writer.

        Without one (no logger, a disabled W&B run) no row is captured and no snapshot made;
        that nothing shows them is said once, as when a snapshot is written.
        """
        if not trainer.is_global_zero:
            return False
        return not self.writers(trainer, shows_method="write_embedding").writes_nothing

    def _record(self, step: int) -> str:  # what the projector works on, for a failure
        loader = f" dataloader {self._plan.loader}" if self._loaders is not None else ""
        return f"{self.tag}/{self._plan.stage} step {step}{loader}"

    def _on_output(self, captured: CapturedOutput) -> None:
        if self._plan.checking:  # select and spatial on a real output, outside the guard
            self._output = self._capture.layout(captured, self._batch)
        else:
            with self.guard(SNAPSHOTS):
                self._output = self._capture.layout(captured, self._batch, copy=True)
        note = self._capture.note_once(self._output) if self._output is not None else None
        if note is not None and self._rank_zero:  # a 3-D output read as tokens, said once
            log.info(note)

    def _end_batch(self, batch: Any) -> None:
        self._capture.batch_ended()  # a compiled forward's output reaches _on_output here
        output, self._output, self._batch, plan = self._output, None, None, self._plan
        if output is None or (plan.checking and not plan.check_functions):
            return
        if plan.checking:  # the user's functions on a real batch, outside the guard
            self._reader.check(output, batch, plan.stage, self._loaders, plan.loader)
        elif self._rows is not None:
            with self.guard(SNAPSHOTS, self._record(self._rows.step)):
                self._reader.add(self._rows, output, batch, plan.loader)

    def _write(self, trainer: Any, due: bool) -> None:
        """Write the snapshot; ``due`` (the same on every rank) says whether ranks gather."""
        rows, self._rows = self._rows, None
        if due and self.gather and trainer.world_size > 1:  # every rank takes part
            rows = gather_rows(
                trainer, rows, self.parts, self.tag, self.max_points, self._reader.by_id
            )
        if rows is None or not trainer.is_global_zero or not self.is_on(SNAPSHOTS):
            return
        writers = self.writers(trainer, shows_method="write_embedding")
        # Everything after the gather runs on the writers' worker thread, so the training
        # thread only waits for it when the queue is full (the rows are this job's alone).
        label, size = self._jobs.label(rows), rows.nbytes()
        writers.submit(self._jobs.job(rows), size=size, label=label, record="write_embedding")

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Arm the capture on training steps that are due."""
        self._start_batch(trainer, "train", batch)

    on_validation_batch_start = _arm_on_batch_start("validate", "in validation epochs that are due")
    on_test_batch_start = _arm_on_batch_start("test", "on every test batch")
    on_predict_batch_start = _arm_on_batch_start("predict", "on every predict batch")

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

    on_test_batch_end = on_validation_batch_end
    on_predict_batch_end = on_validation_batch_end

    @override
    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, self.settings.schedule.epoch_due(trainer, "validate"))

    @override
    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, self.settings.schedule.epoch_due(trainer, "test"))

    @override
    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer, self.settings.schedule.epoch_due(trainer, "predict"))
