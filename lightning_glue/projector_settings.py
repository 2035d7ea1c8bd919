"""EmbeddingProjector's settings: made once from its arguments, checked, then only read.

The projector holds one :class:`ProjectorSettings` and hands it to the parts that read it (the
:class:`~learnscope.lightning_glue.row_reader.RowReader`, the capture of the module's output,
and :class:`~learnscope.lightning_glue.TrainingHelper` when it checks the projector's module);
none of them keeps a copy. Its fields are the projector's arguments as given (what the run
record shows); what they resolve to (the capture schedule, the aligned views, an import path's
function) is worked out once, when the settings are made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from learnscope.embeddings.aligned_umap import UMAPSettings, require_umap
from learnscope.embeddings.output_layout import DEFAULT_MASK, check_mask_fn, check_spatial
from learnscope.import_path import resolve_function
from learnscope.lightning_glue.capture_schedule import CaptureSchedule
from learnscope.lightning_glue.loaders import DATASET_INDEX
from learnscope.lightning_glue.output_capture import OutputReading

__all__ = ["ProjectorSettings"]

WHO = "EmbeddingProjector"


@dataclass(frozen=True)
class ProjectorSettings:
    """The arguments of an :class:`~learnscope.lightning_glue.EmbeddingProjector`, checked.

    The fields are the projector's arguments, as given (see its description); the rest is
    derived from them when they are made.

    Attributes:
        schedule: When rows are captured (``stages``, ``every_n_epochs``,
            ``every_n_train_steps``).
        reading: How the module's output is read (``module``, ``select``, ``spatial`` and
            ``mask_fn``, an import path resolved).
        ids: ``ids_fn``, an import path resolved.
        umap: The aligned UMAP view's settings, or ``None`` without it.
        pca_view: Whether the aligned PCA view is made (asked for, or needed by UMAP).
        shown_tag: The name shown in the dashboards: ``tag``, else ``module``.

    Raises:
        ValueError: For bad arguments (the message names them); a missing UMAP extra is said
            here, before the fit.

    Example:
        >>> settings = ProjectorSettings("encoder", stages=["validate", "test"])
        >>> settings.schedule.stages, settings.shown_tag, settings.reading.mask_fn
        (('validate', 'test'), 'encoder', 'attention_mask')
        >>> ProjectorSettings(max_points=0)
        Traceback (most recent call last):
        ...
        ValueError: every_n_epochs and max_points must be at least 1
    """

    module: str = "encoder"
    select: Callable[..., Any] | None = None
    metadata_fn: Callable[..., Any] | None = None
    images_fn: Callable[..., Any] | None = None
    stages: Sequence[str] = ("validate",)
    every_n_epochs: int = 1
    every_n_train_steps: int | None = None
    max_points: int = 5000
    tag: str | None = None
    ids_fn: str | Callable[..., Any] | None = None
    aligned_pca: bool = False
    aligned_umap: bool | UMAPSettings = False
    gather: bool = False
    graph_index_fn: Callable[..., Any] | None = None
    spatial: Literal["mean", "max", "pixels"] | None = None
    mask_fn: str | Callable[..., Any] | None = DEFAULT_MASK
    schedule: CaptureSchedule = field(init=False, repr=False, compare=False)
    reading: OutputReading = field(init=False, repr=False, compare=False)
    ids: str | Callable[..., Any] | None = field(init=False, repr=False, compare=False)
    umap: UMAPSettings | None = field(init=False, repr=False, compare=False)
    pca_view: bool = field(init=False, repr=False, compare=False)
    shown_tag: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        derive = object.__setattr__  # a frozen dataclass's own derived fields, set once here
        schedule = CaptureSchedule(self.stages, self.every_n_epochs, self.every_n_train_steps)
        if self.max_points < 1:
            raise ValueError("every_n_epochs and max_points must be at least 1")
        umap = UMAPSettings() if self.aligned_umap is True else self.aligned_umap or None
        if umap is not None:
            require_umap()  # a missing extra is said here, before the fit
        ids = resolve_function(self.ids_fn, "ids_fn")
        if not (ids is None or ids == DATASET_INDEX or callable(ids)):
            raise ValueError(f"ids_fn must be a function or {DATASET_INDEX!r}, got {ids!r}")
        if self.graph_index_fn is not None and not callable(self.graph_index_fn):
            raise ValueError(f"graph_index_fn must be a function, got {self.graph_index_fn!r}")
        spatial, mask_fn = check_spatial(self.spatial), check_mask_fn(self.mask_fn)
        derive(self, "schedule", schedule)
        derive(self, "reading", OutputReading(WHO, self.module, self.select, spatial, mask_fn))
        derive(self, "ids", ids)
        derive(self, "umap", umap)
        derive(self, "pca_view", self.aligned_pca or umap is not None)
        derive(self, "shown_tag", self.tag or self.module)
