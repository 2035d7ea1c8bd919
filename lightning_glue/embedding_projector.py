"""EmbeddingProjector: embeddings of one sub-module, per stage and epoch, to every dashboard."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from typing_extensions import override

from learnscope.lightning_glue.base import LearnscopeCallback
from learnscope.records import EmbeddingSnapshot

STAGES = ("train", "validate", "test", "predict")
_PART = "embedding projector"


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
        max_points: Rows kept per snapshot; later rows of the epoch are not captured.
        tag: Name shown in the dashboards; defaults to ``module``.

    Raises:
        ValueError: For bad arguments; an unknown ``module`` fails at ``setup`` with the list of
            the available names.

    Example:
        >>> projector = EmbeddingProjector(
        ...     "encoder", metadata_fn=lambda batch: {"label": batch[1]}, max_points=2000
        ... )
        >>> projector.tag
        'encoder'
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
        self.module = module
        self.select = select
        self.metadata_fn = metadata_fn
        self.images_fn = images_fn
        self.stages = stages
        self.every_n_epochs = every_n_epochs
        self.every_n_train_steps = every_n_train_steps
        self.max_points = max_points
        self.tag = tag or module
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._checking = False  # sanity check: validate user functions, capture nothing
        self._armed = False  # this batch is captured
        self._output: torch.Tensor | None = None  # the hooked output of the armed batch
        self._rows: _Rows | None = None
        self._step = 0

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

    def _start_batch(self, trainer: Any, stage: str, capture: bool) -> None:
        self._output = None
        self._checking = trainer.sanity_checking and "validate" in self.stages
        self._armed = (
            capture
            and not trainer.sanity_checking
            and stage in self.stages
            and self.is_on(_PART)
            and trainer.is_global_zero
            and (self._rows is None or self._rows.count < self.max_points)
        )
        if self._armed and self._rows is None:
            self._rows = _Rows(trainer.global_step, stage)

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
        self._start_batch(trainer, "validate", self._eval_epoch_due(trainer))

    @override
    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the hook on every test batch until ``max_points`` rows are kept."""
        self._start_batch(trainer, "test", True)

    @override
    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Arm the hook on every predict batch until ``max_points`` rows are kept."""
        self._start_batch(trainer, "predict", True)

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
            _batch_columns(output, batch, self.metadata_fn, self.images_fn)
            return
        if self._armed and self._rows is not None:
            with self.guard(_PART):
                vectors, columns, images = _batch_columns(
                    output, batch, self.metadata_fn, self.images_fn
                )
                self._rows.add(vectors, columns, images, self.max_points)
        self._armed = False

    def _write(self, trainer: Any) -> None:
        rows, self._rows = self._rows, None
        if rows is None or rows.count == 0 or not self.is_on(_PART):
            return
        with self.guard(_PART):
            snapshot = rows.snapshot(self.tag)
        if self.is_on(_PART):
            writers = self.writers(trainer, shows_method="write_embedding")
            writers.write_embedding(snapshot)
            writers.flush()

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
    """Rows captured in one stage and epoch, kept on their device until the snapshot."""

    def __init__(self, step: int, stage: str) -> None:
        self.step = step
        self.stage = stage
        self.count = 0
        self.vectors: list[torch.Tensor] = []
        self.columns: dict[str, list[Any]] = {}
        self.images: list[torch.Tensor] = []

    def add(
        self,
        vectors: torch.Tensor,
        columns: dict[str, Any],
        images: torch.Tensor | None,
        max_points: int,
    ) -> None:
        if self.count and set(columns) != set(self.columns):
            raise ValueError(
                f"metadata_fn returned columns {sorted(columns)} after {sorted(self.columns)}"
            )
        keep = min(len(vectors), max_points - self.count)
        self.vectors.append(vectors[:keep])
        for name, values in columns.items():
            self.columns.setdefault(name, []).append(values[:keep])
        if images is not None:
            self.images.append(torch.as_tensor(images)[:keep])
        self.count += keep

    def snapshot(self, tag: str) -> EmbeddingSnapshot:
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
) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor | None]:
    """One batch's rows, metadata columns and images, with every length checked."""
    vectors = output.reshape(-1, output.shape[-1])
    per_sample = output.shape[0]
    repeat = len(vectors) // per_sample if per_sample else 1
    columns: dict[str, Any] = {}
    for name, values in (metadata_fn(batch) if metadata_fn is not None else {}).items():
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


def _repeat(values: Any, times: int) -> Any:
    if isinstance(values, torch.Tensor):
        return values.repeat_interleave(times)
    return [v for v in values for _ in range(times)]


def _concat(chunks: list[Any]) -> Any:
    if all(isinstance(c, torch.Tensor) for c in chunks):
        return torch.cat(chunks).cpu()
    return [v for chunk in chunks for v in (chunk.tolist() if hasattr(chunk, "tolist") else chunk)]
