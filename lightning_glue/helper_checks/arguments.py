"""TrainingHelper's arguments, checked when it is made, and where its checks run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


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
