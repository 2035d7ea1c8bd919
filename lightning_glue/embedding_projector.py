"""EmbeddingProjector: embeddings of one sub-module, per stage and epoch, to every dashboard."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from typing_extensions import override

from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.projection import PCA_COLUMNS, AlignedPCA
from learnscope.records import EmbeddingSnapshot, RenderedImage
from learnscope.scatter import Limits, grow_limits, labels_of, scatter_image
from learnscope.selection import id_keys, mix_keys, smallest

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
    ``select``, ``metadata_fn`` and ``images_fn`` on real batches, so that a mistake fails before
    the first training step.

    Outputs with more than two dimensions, such as ``[batch, tokens, dim]``, give one row per
    token; per-sample metadata is then repeated for each token and a ``position`` column added.

    **Comparing snapshots.** With ``ids_fn``, every snapshot holds the same points: each point's
    id is hashed, and the ``max_points`` points with the smallest hashes are kept (the choice
    depends on the ids alone, not on the batch order, so shuffled loaders and resumed runs keep
    it), in the same order every time, with an ``id`` column. Without ids a snapshot holds the
    first ``max_points`` rows of the epoch, which are the same points only when the loader is
    not shuffled. With ``aligned_pca=True`` every snapshot also gets ``pca_x``, ``pca_y`` and
    ``pca_z`` columns from a PCA turned to match the previous snapshot's view
    (:class:`learnscope.projection.AlignedPCA`), and a scatter image of ``pca_x``/``pca_y``
    coloured by the first metadata column goes to the writers as ``embeddings/<tag>/<stage>/pca``
    (TensorBoard's Images tab, wandb media). The image is drawn in units of the view's spread
    (its root-mean-square distance from the centre, given in the title) on axes that stay fixed
    per tag, so that the step slider shows the points moving, not the frame. The projector
    keeps the full-dimensional vectors.

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
        max_points: Rows kept per snapshot; without ids, later rows of the epoch are not
            captured; with ids, every row of the epoch is looked at and the same
            ``max_points`` ids are kept.
        tag: Name shown in the dashboards; defaults to ``module``.
        ids_fn: ``batch -> ids``, one stable id (int or string) per sample or per row, such as
            ``lambda batch: batch["index"]``; or ``"dataset_index"``: the index of each sample
            in the data set, for evaluation loaders that read it in order (not shuffled; checked
            when the epoch starts).
        aligned_pca: Add the aligned ``pca_x``, ``pca_y``, ``pca_z`` columns and a scatter
            image per snapshot.

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
    """

    def __init__(
        self,
        module: str = "encoder",
        *,
        select: Callable[[Any], torch.Tensor] | None = None,
        metadata_fn: Callable[[Any], Mapping[str, Sequence[Any] | torch.Tensor]] | None = None,
        images_fn: Callable[[Any], torch.Tensor] | None = None,
        stages: Sequence[str] = ("validate",),
        every_n_epochs: int = 1,
        every_n_train_steps: int | None = None,
        max_points: int = 5000,
        tag: str | None = None,
        ids_fn: Callable[[Any], Sequence[Any] | torch.Tensor]
        | Literal["dataset_index"]
        | None = None,
        aligned_pca: bool = False,
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
        if not (ids_fn is None or ids_fn == DATASET_INDEX or callable(ids_fn)):
            raise ValueError(f"ids_fn must be a function or {DATASET_INDEX!r}, got {ids_fn!r}")
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
        self.aligned_pca = aligned_pca
        self._pca = AlignedPCA(dims=3)
        self._limits: dict[str, Limits] = {}  # scatter axes per snapshot key, only growing
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._checking = False  # sanity check: validate user functions, capture nothing
        self._armed = False  # this batch is captured
        self._output: torch.Tensor | None = None  # the hooked output of the armed batch
        self._rows: _Rows | None = None
        self._step = 0

    @property
    def state_key(self) -> str:
        """Checkpoint key: one per module and tag, so several projectors can be resumed."""
        return self._generate_state_key(module=self.module, tag=self.tag)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The PCA views and scatter axes, so that a resumed run keeps the same axes."""
        return {"pca": self._pca.state_dict(), "limits": dict(self._limits)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._pca.load_state_dict(state_dict["pca"])
        self._limits = {key: tuple(lim) for key, lim in state_dict["limits"].items()}

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Find the sub-module and attach the forward hook."""
        try:
            target = pl_module.get_submodule(self.module)
        except AttributeError:
            names = [name for name, _ in pl_module.named_modules() if name]
            raise ValueError(
                f"EmbeddingProjector: {type(pl_module).__name__} has no sub-module "
                f"{self.module!r}; available: {', '.join(names) or '(none)'}"
            ) from None
        self._detach()
        self._hook = target.register_forward_hook(self._on_forward)

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Detach the hook and flush the writers."""
        self._detach()
        self.writers(trainer).flush()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Detach the hook, which Lightning's ``teardown`` does not do after an exception."""
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
        self._checking = trainer.sanity_checking and "validate" in self.stages
        if self._checking and self.ids_fn == DATASET_INDEX:
            _dataset_order(trainer, stage, dataloader_idx)  # a shuffled loader fails here
        self._armed = (
            capture
            and not trainer.sanity_checking
            and stage in self.stages
            and self.is_on(_PART)
            and trainer.is_global_zero
            and (self._rows is None or self._rows.selecting or self._rows.count < self.max_points)
        )
        if self._armed and self._rows is None:
            with self.guard(_PART):
                order = None
                if self.ids_fn == DATASET_INDEX:
                    order = _dataset_order(trainer, stage, dataloader_idx)
                selecting = self.ids_fn is not None
                self._rows = _Rows(trainer.global_step, stage, self.max_points, selecting, order)
            self._armed = self.is_on(_PART)

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
            self._output = self._embedding(output).detach().clone()

    def _embedding(self, output: Any) -> torch.Tensor:
        value = self.select(output) if self.select is not None else output
        if not isinstance(value, torch.Tensor):
            hint = "" if self.select is not None else "; pass select= to pick the embedding tensor"
            raise TypeError(
                f"EmbeddingProjector: module {self.module!r} gave a {type(value).__name__}, "
                f"not a tensor{hint}"
            )
        if value.ndim < 2:
            raise ValueError(
                f"EmbeddingProjector: the embedding of {self.module!r} has shape "
                f"{tuple(value.shape)}; it needs [rows, dim] or [batch, ..., dim]"
            )
        return value

    def _end_batch(self, batch: Any) -> None:
        output, self._output = self._output, None
        if output is None:
            return
        if self._checking:
            _batch_columns(
                output, batch, self.metadata_fn, self.images_fn, self._ids(batch, output)
            )
            return
        if self._armed and self._rows is not None:
            with self.guard(_PART):
                ids = self._ids(batch, output)
                vectors, columns, images = _batch_columns(
                    output, batch, self.metadata_fn, self.images_fn, ids
                )
                keys = None
                if ids is not None:
                    keys = id_keys(columns["id"])
                    if "position" in columns:
                        keys = mix_keys(keys, torch.as_tensor(columns["position"]))
                self._rows.add(vectors, columns, images, keys)
        self._armed = False

    def _ids(self, batch: Any, output: torch.Tensor) -> Sequence[Any] | torch.Tensor | None:
        """This batch's ids: from ``ids_fn``, or the next dataset indices of the epoch."""
        if self.ids_fn is None:
            return None
        if self.ids_fn != DATASET_INDEX:
            ids = self.ids_fn(batch)  # type: ignore[operator]
            return ids.detach().reshape(-1) if isinstance(ids, torch.Tensor) else list(ids)
        count = output.shape[0]
        rows = self._rows
        if self._checking or rows is None or rows.order is None:
            return torch.arange(count)
        start, rows.seen = rows.seen, rows.seen + count
        return torch.as_tensor(list(rows.order[start : start + count]), dtype=torch.int64)

    def _write(self, trainer: Any) -> None:
        rows, self._rows = self._rows, None
        if rows is None or rows.count == 0 or not self.is_on(_PART):
            return
        with self.guard(_PART):
            snapshot = rows.snapshot(self.tag)
        if not self.is_on(_PART):
            return
        image = None
        if self.aligned_pca and self.is_on(_COMPARE):
            with self.guard(_COMPARE):
                snapshot, image = self._compare(snapshot, rows.final_keys)
        writers = self.writers(trainer, shows_method="write_embedding")
        writers.write_embedding(snapshot)
        if image is not None:
            writers.write_image(image)
        writers.flush()

    def _compare(
        self, snapshot: EmbeddingSnapshot, keys: torch.Tensor | None
    ) -> tuple[EmbeddingSnapshot, RenderedImage]:
        """Add the aligned PCA columns, and draw the scatter image of the snapshot."""
        key = snapshot.key
        ids = keys.tolist() if keys is not None else None
        coords = self._pca.fit_transform(key, torch.as_tensor(snapshot.vectors), ids)
        columns = {
            name: [float(f"{v:.6g}") for v in coords[:, i].tolist()]
            for i, name in enumerate(PCA_COLUMNS)
        }
        snapshot = dataclasses.replace(snapshot, metadata={**snapshot.metadata, **columns})
        # The image shows the view in units of its spread (the title gives the spread), so that
        # embeddings that grow during training keep one frame and the slider shows their shape.
        xy = coords[:, :2].numpy()
        spread = float(np.sqrt((xy**2).sum(1).mean())) if len(xy) else 0.0
        xy = xy / spread if spread > 0 else xy
        self._limits[key] = limits = grow_limits(xy, self._limits.get(key))
        labels = labels_of(snapshot.metadata_columns())
        title = f"{key}  step {snapshot.step}  spread {spread:.3g}"
        pixels = scatter_image(xy, labels, title, limits)
        return snapshot, RenderedImage(f"embeddings/{key}/pca", snapshot.step, pixels)

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Write the training snapshot when this batch was captured."""
        self._end_batch(batch)
        self._write(trainer)

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
        self._write(trainer)

    @override
    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer)

    @override
    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Write the epoch's snapshot."""
        self._write(trainer)


class _Rows:
    """Rows captured in one stage and epoch, kept on their device until the snapshot.

    Without selection the first ``max_points`` rows are kept. With selection (ids), every row
    is added with its key, and whenever twice ``max_points`` rows are held only the
    ``max_points`` smallest keys are kept: memory stays bounded and the result does not depend
    on the batch order.
    """

    def __init__(
        self,
        step: int,
        stage: str,
        max_points: int,
        selecting: bool = False,
        order: Sequence[int] | None = None,
    ) -> None:
        self.step = step
        self.stage = stage
        self.max_points = max_points
        self.selecting = selecting
        self.order = order  # dataset indices in loader order, for ids_fn="dataset_index"
        self.seen = 0  # samples of the epoch so far
        self.count = 0
        self.vectors: list[torch.Tensor] = []
        self.columns: dict[str, list[Any]] = {}
        self.images: list[torch.Tensor] = []
        self.keys: list[torch.Tensor] = []
        self.final_keys: torch.Tensor | None = None

    def add(
        self,
        vectors: torch.Tensor,
        columns: dict[str, Any],
        images: torch.Tensor | None,
        keys: torch.Tensor | None = None,
    ) -> None:
        if self.count and set(columns) != set(self.columns):
            raise ValueError(
                f"metadata_fn returned columns {sorted(columns)} after {sorted(self.columns)}"
            )
        keep = len(vectors) if self.selecting else min(len(vectors), self.max_points - self.count)
        self.vectors.append(vectors[:keep])
        for name, values in columns.items():
            self.columns.setdefault(name, []).append(values[:keep])
        if images is not None:
            self.images.append(torch.as_tensor(images)[:keep])
        if keys is not None:
            self.keys.append(keys)
        self.count += keep
        if self.selecting and self.count >= 2 * self.max_points:
            self._keep_smallest()

    def _keep_smallest(self) -> None:
        """Keep the ``max_points`` rows with the smallest keys, ordered by key."""
        keys = torch.cat(self.keys)
        index = smallest(keys, self.max_points)
        self.keys = [keys[index]]
        self.vectors = [_take(torch.cat(self.vectors), index)]
        self.columns = {n: [_take(_join(c), index)] for n, c in self.columns.items()}
        if self.images:
            self.images = [_take(torch.cat(self.images), index)]
        self.count = len(index)

    def snapshot(self, tag: str) -> EmbeddingSnapshot:
        if self.selecting:
            self._keep_smallest()
            self.final_keys = self.keys[0].cpu()
        return EmbeddingSnapshot(
            tag=tag,
            step=self.step,
            vectors=torch.cat(self.vectors).cpu(),
            metadata={name: _concat(chunks) for name, chunks in self.columns.items()},
            images=torch.cat(self.images).cpu() if self.images else None,
            stage=self.stage,
        )


def _batch_columns(
    output: torch.Tensor,
    batch: Any,
    metadata_fn: Callable[[Any], Mapping[str, Any]] | None,
    images_fn: Callable[[Any], torch.Tensor] | None,
    ids: Sequence[Any] | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor | None]:
    """One batch's rows, metadata columns (with ``id``) and images, with every length checked."""
    vectors = output.reshape(-1, output.shape[-1])
    per_sample = output.shape[0]
    repeat = len(vectors) // per_sample if per_sample else 1
    columns: dict[str, Any] = {}
    metadata = dict(metadata_fn(batch)) if metadata_fn is not None else {}
    if ids is not None:
        if "id" in metadata:
            raise ValueError(
                "EmbeddingProjector: metadata_fn gives an 'id' column and ids_fn is set; the "
                "ids go in the 'id' column, rename the other one"
            )
        metadata["id"] = ids
    for name, values in metadata.items():
        if isinstance(values, torch.Tensor):
            values = values.detach().reshape(-1)
        if len(values) == len(vectors):
            columns[name] = values
        elif repeat > 1 and len(values) == per_sample:
            columns[name] = _repeat(values, repeat)
        else:
            raise ValueError(
                f"EmbeddingProjector: metadata column {name!r} has {len(values)} values but the "
                f"batch has {len(vectors)} embedding rows"
            )
    if repeat > 1:
        columns["position"] = torch.arange(repeat, device=vectors.device).repeat(per_sample)
    images = images_fn(batch) if images_fn is not None else None
    if images is not None:
        images = torch.as_tensor(images).detach()
        if images.ndim != 4 or len(images) != per_sample:
            raise ValueError(
                f"EmbeddingProjector: images_fn gave shape {tuple(images.shape)}; expected "
                f"[{per_sample}, C, H, W], one image per sample"
            )
        if repeat > 1:
            images = images.repeat_interleave(repeat, dim=0)
    return vectors, columns, images


def _dataset_order(trainer: Any, stage: str, dataloader_idx: int) -> Sequence[int]:
    """The dataset index of each sample of the stage's loader, in the order it reads them."""
    from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

    attribute = {
        "train": "train_dataloader",
        "validate": "val_dataloaders",
        "test": "test_dataloaders",
        "predict": "predict_dataloaders",
    }[stage]
    loaders = getattr(trainer, attribute, None)
    loader = loaders[dataloader_idx] if isinstance(loaders, list | tuple) else loaders
    batch_sampler = getattr(loader, "batch_sampler", None)
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


def _join(chunks: list[Any]) -> Any:
    if all(isinstance(c, torch.Tensor) for c in chunks):
        return torch.cat(chunks)
    return [v for chunk in chunks for v in (chunk.tolist() if hasattr(chunk, "tolist") else chunk)]


def _take(values: Any, index: torch.Tensor) -> Any:
    if isinstance(values, torch.Tensor):
        return values[index.to(values.device)]
    return [values[i] for i in index.tolist()]


def _repeat(values: Any, times: int) -> Any:
    if isinstance(values, torch.Tensor):
        return values.repeat_interleave(times)
    return [v for v in values for _ in range(times)]


def _concat(chunks: list[Any]) -> Any:
    if all(isinstance(c, torch.Tensor) for c in chunks):
        return torch.cat(chunks).cpu()
    return [v for chunk in chunks for v in (chunk.tolist() if hasattr(chunk, "tolist") else chunk)]
