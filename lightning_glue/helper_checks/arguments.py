"""TrainingHelper's settings, checked when it is made, and where its checks run.

The helper holds one :class:`HelperSettings` and hands it to the checks that read it (the
gradient check, the collapse capture); none of them keeps a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from learnscope.collapse.verdicts import CollapseThresholds
from learnscope.embeddings.output_layout import DEFAULT_MASK, check_mask_fn, check_spatial
from learnscope.lightning_glue.helper_checks.modules import DEFAULT_EMBEDDING_MODULE
from learnscope.lightning_glue.output_capture import OutputReading

WHO = "TrainingHelper"


def check_arguments(
    check_every_n_steps: int,
    group_depth: int,
    small_grad_threshold: float,
    max_head_to_encoder_ratio: float,
    embedding_rows_per_dim: float,
    max_embedding_rows: int,
    edge_index_fn: Callable[..., Any] | None,
    graph_index_fn: Callable[..., Any] | None,
    ids_fn: Callable[..., Any] | None,
    *,
    functions: Sequence[Callable[..., Any] | None],
) -> None:
    """Fail early and clearly on an argument of TrainingHelper that cannot work.

    Args:
        check_every_n_steps: At least 1.
        group_depth: At least 1.
        small_grad_threshold: In (0, 1).
        max_head_to_encoder_ratio: Above 1.
        embedding_rows_per_dim: At least 1.
        max_embedding_rows: At least 2.
        edge_index_fn: Needed by ``graph_index_fn`` and ``ids_fn``.
        graph_index_fn: ``None`` without ``edge_index_fn``.
        ids_fn: ``None`` without ``edge_index_fn``.
        functions: Each callable or ``None``.

    Raises:
        ValueError: Naming the arguments and the values they need.

    Example:
        >>> check_arguments(0, 1, 1e-5, 100.0, 8.0, 4096, None, None, None, functions=())
        Traceback (most recent call last):
        ...
        ValueError: check_every_n_steps and group_depth must be at least 1
    """
    if check_every_n_steps < 1 or group_depth < 1:
        raise ValueError("check_every_n_steps and group_depth must be at least 1")
    if not 0 < small_grad_threshold < 1:
        raise ValueError(f"small_grad_threshold must be in (0, 1), got {small_grad_threshold}")
    if max_head_to_encoder_ratio <= 1 or embedding_rows_per_dim < 1 or max_embedding_rows < 2:
        raise ValueError(
            "need max_head_to_encoder_ratio > 1, embedding_rows_per_dim >= 1 and "
            "max_embedding_rows >= 2"
        )
    not_callable = [c for c in functions if c is not None and not callable(c)]
    if not_callable:
        raise ValueError(
            "input_checks, edge_index_fn, select, graph_index_fn and ids_fn must be "
            f"callables: {not_callable}"
        )
    if edge_index_fn is None and (graph_index_fn is not None or ids_fn is not None):
        raise ValueError(
            "graph_index_fn and ids_fn need edge_index_fn: they describe the graphs whose "
            "oversmoothing it turns on"
        )


@dataclass(frozen=True)
class HelperSettings:
    """The arguments of a :class:`~learnscope.lightning_glue.TrainingHelper`, checked.

    The fields are the helper's arguments, as given (see its description; what the run record
    shows); the rest is derived from them when they are made.

    Attributes:
        thresholds: The collapse thresholds, defaults overridden by ``collapse_thresholds``.
        mask: ``mask_fn``, an import path resolved.

    Raises:
        ValueError: For bad arguments, naming them and the values they need.

    Example:
        >>> settings = HelperSettings(check_every_n_steps=10, collapse_thresholds={"min_rank": 2})
        >>> settings.thresholds.min_rank, settings.reading("backbone").owner
        (2.0, "TrainingHelper: module 'backbone'")
        >>> HelperSettings(spatial="avg")
        Traceback (most recent call last):
        ...
        ValueError: spatial must be None, 'mean', 'max' or 'pixels', got 'avg'
    """

    check_every_n_steps: int = 50
    small_grad_threshold: float = 1e-5
    embedding_module: str | None = DEFAULT_EMBEDDING_MODULE
    head_modules: Sequence[str] | None = None
    input_checks: Sequence[Callable[..., Any]] = ()
    histograms: bool = False
    warn_every_n_steps: int = 1000
    edge_index_fn: Callable[..., Any] | None = None
    select: Callable[..., Any] | None = None
    group_depth: int = 1
    max_head_to_encoder_ratio: float = 100.0
    embedding_rows_per_dim: float = 8.0
    max_embedding_rows: int = 4096
    collapse_thresholds: Mapping[str, float] | None = None
    spatial: Literal["mean", "max", "pixels"] | None = None
    mask_fn: str | Callable[..., Any] | None = DEFAULT_MASK
    graph_index_fn: Callable[..., Any] | None = None
    ids_fn: Callable[..., Any] | None = None
    thresholds: CollapseThresholds = field(init=False, repr=False, compare=False)
    mask: str | Callable[..., Any] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        derive = object.__setattr__  # a frozen dataclass's own fields, set once here
        derive(self, "input_checks", tuple(self.input_checks))  # kept as given, unchangeable
        if self.head_modules is not None:
            derive(self, "head_modules", tuple(self.head_modules))
        check_arguments(
            self.check_every_n_steps,
            self.group_depth,
            self.small_grad_threshold,
            self.max_head_to_encoder_ratio,
            self.embedding_rows_per_dim,
            self.max_embedding_rows,
            self.edge_index_fn,
            self.graph_index_fn,
            self.ids_fn,
            functions=(
                *self.input_checks,
                self.edge_index_fn,
                self.select,
                self.graph_index_fn,
                self.ids_fn,
            ),
        )
        thresholds = CollapseThresholds.from_mapping(dict(self.collapse_thresholds or {}))
        check_spatial(self.spatial)
        derive(self, "thresholds", thresholds)  # unknown or bad ones failed above
        derive(self, "mask", check_mask_fn(self.mask_fn))

    def reading(self, module: str) -> OutputReading:
        """How the helper reads ``module``'s output: with its own ``select``, ``spatial``, mask."""
        return OutputReading(WHO, module, self.select, self.spatial, self.mask)


@dataclass(frozen=True)
class Ranks:
    """Where the checks run: rank zero reports; with sharded parameters every rank measures.

    ``measure``: whether this rank measures gradients on check steps (a field, read each step).

    Example:
        >>> Ranks(zero=False, sharded=True).measure
        True
    """

    zero: bool = True
    sharded: bool = False
    measure: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "measure", self.zero or self.sharded)
