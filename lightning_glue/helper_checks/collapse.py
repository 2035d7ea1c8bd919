"""Embedding collapse: the rows a check step's batches give, captured, then judged."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from learnscope.collapse.row_buffer import EmbeddingRowBuffer
from learnscope.collapse.verdicts import CollapseThresholds, enough_rows
from learnscope.embeddings.batch_rows import pyg_graphs
from learnscope.embeddings.output_layout import keep_edges
from learnscope.health import CheckScope, collapse_findings
from learnscope.lightning_glue.encoder_capture import CapturedOutput
from learnscope.lightning_glue.helper_checks.arguments import HelperSettings
from learnscope.lightning_glue.helper_checks.report import CheckReport
from learnscope.lightning_glue.output_capture import OutputCapture, OutputReading
from learnscope.tags import HEALTH
from learnscope.user_functions import calling, describe

log = logging.getLogger("learnscope")

Guard = Callable[[str], contextlib.AbstractContextManager[Any]]


class CollapseCapture:
    """The embedding rows of a check step's training batches, in one buffer.

    The embedding module's output, captured as the projector captures it (the steps of
    :mod:`~learnscope.lightning_glue.output_capture`, through the module's one forward hook),
    goes for each training batch of the step (every micro-batch, the first forward of each)
    into an :class:`~learnscope.collapse.row_buffer.EmbeddingRowBuffer` of at most
    ``embedding_rows_per_dim`` times the dimension rows (and at most ``max_embedding_rows``, of
    the helper's settings). When the step gives fewer rows than the ranks
    need (``rows_needed_per_dim`` times the dimension, :meth:`start_step`), the batches of the
    steps that follow are captured too, until there are enough or the next check step starts
    (then :meth:`unfinished` hands out what there is). A step whose end went unseen drops what
    was captured. The rows are those
    :class:`~learnscope.lightning_glue.EmbeddingProjector` shows, by the same rule
    (:class:`~learnscope.lightning_glue.output_capture.OutputReading`: ``select``, ``spatial``
    and ``mask_fn`` given at :meth:`attach`); the first capture of a fit checks them against
    the real output and raises on a mistake (an output that is not a tensor:
    :mod:`learnscope.embeddings.module_output`), outside ``guard``. With ``edge_index_fn`` each
    row's graph comes from ``graph_index_fn``, else from a PyTorch Geometric batch (``batch.batch``
    with one entry per row); otherwise a batch is one graph.

    Args:
        settings: The helper's settings (``edge_index_fn``, ``graph_index_fn``, ``ids_fn``,
            ``embedding_rows_per_dim``, ``max_embedding_rows`` are read here).

    Example:
        >>> import torch
        >>> encoder = torch.nn.Linear(3, 2)
        >>> settings = HelperSettings(embedding_rows_per_dim=8, max_embedding_rows=64)
        >>> capture = CollapseCapture(settings)
        >>> reading = settings.reading("encoder")
        >>> capture.attach(reading, encoder, guard=lambda record: contextlib.nullcontext())
        >>> capture.start_step(step=0, rows_needed_per_dim=0)
        >>> capture.start_batch({"x": torch.ones(5, 3)}, step=0)
        >>> _ = encoder(torch.randn(5, 3))
        >>> capture.end_batch(step_over=True).num_rows
        5
    """

    def __init__(self, settings: HelperSettings) -> None:
        self.settings = settings
        self._output = OutputCapture()  # the embedding module's output, attached at setup
        self._guard: Guard | None = None  # the callback's guard of this check
        self._buffer: EmbeddingRowBuffer | None = None
        self._collecting = False  # the step's batches are captured
        self._batch: Any = None
        self._step = 0
        self.first_step = 0  # the check step the rows being captured started at
        self._rows_needed_per_dim = 0.0  # rows per dimension to capture before judging
        self._waiting = False  # a step ended with too few rows: the next steps' rows are added
        self._rows_checked = False  # spatial and mask_fn were checked on a real output

    @property
    def module(self) -> str | None:
        """The embedding module's name, while one is attached."""
        output = self._output
        return output.reading.module if output.attached and output.reading is not None else None

    def attach(
        self,
        reading: OutputReading,
        module: nn.Module,
        guard: Guard,
        layout_module: nn.Module | None = None,
    ) -> None:
        """Capture ``module``'s output, read by ``reading``; failures go through ``guard``.

        ``layout_module``: the module whose declared layout the output has (by default
        ``module``). A new fit: ``select``, ``spatial`` and ``mask_fn`` are checked again at
        the first capture.
        """
        self.detach()
        self._guard, self._rows_checked = guard, False
        self._output.attach(reading, module, layout_module, receive=self._on_captured)

    def detach(self) -> None:
        """Leave the module's capture; what was captured is dropped."""
        self._output.detach()  # no reference to the model is kept after a fit
        self._guard = None
        self._collecting = self._waiting = False
        self._batch = None

    def start_step(self, step: int, rows_needed_per_dim: float) -> None:
        """The first micro-batch of a check step: capture its batches, from an empty buffer.

        Args:
            step: The check step.
            rows_needed_per_dim: Rows per embedding dimension to capture before the rows are
                judged, over the steps that follow when this one gives fewer (0: this step's).
        """
        self._collecting, self._waiting = self._output.attached, False
        self.first_step, self._rows_needed_per_dim = step, rows_needed_per_dim
        if self._buffer is not None:
            self._buffer.reset()

    @property
    def last_step(self) -> int:
        """The step of the last batch whose rows were captured."""
        return self._step

    def unfinished(self) -> EmbeddingRowBuffer | None:
        """Stop capturing; the rows captured while waiting for enough of them, if any.

        Example:
            >>> CollapseCapture(HelperSettings()).unfinished() is None
            True
        """
        waiting = self._collecting and self._waiting
        self._collecting = self._waiting = False
        buffer = self._buffer
        return buffer if waiting and buffer is not None else None

    def drop(self) -> None:
        """Stop capturing, dropping the step's rows (its end went unseen)."""
        self._collecting = self._waiting = False

    def batch_started(self) -> None:
        """Any batch starts, of any stage (see ``EncoderCapture.batch_started``)."""
        self._output.batch_started()

    def start_batch(self, batch: Any, step: int) -> None:
        """A training batch of the step starts: its first forward is captured."""
        if self._collecting and self._output.attached:
            self._batch, self._step = batch, step
            self._output.arm()

    def end_batch(self, step_over: bool) -> EmbeddingRowBuffer | None:
        """The batch ended; at a step's last micro-batch, the buffer once it holds enough rows.

        Enough: ``rows_needed_per_dim`` times the dimension, or a full buffer; until then the
        next steps' batches are captured too.
        """
        self._output.batch_ended()  # a compiled forward's output reaches us here
        self._batch = None
        buffer = self._buffer
        if not (self._collecting and step_over) or buffer is None or buffer.num_rows == 0:
            return None
        needed = self._rows_needed_per_dim * buffer.rows().shape[1]
        self._waiting = buffer.num_rows < needed and not buffer.is_full
        if self._waiting:
            return None  # too few rows for the ranks: the next steps' batches too
        self._collecting = False
        return buffer

    def _on_captured(self, captured: CapturedOutput) -> None:
        """The first forward of a batch of the step (the capture calls this only then)."""
        if self._buffer is not None and self._buffer.is_full:
            return
        guard = self._guard or (lambda record: contextlib.nullcontext())
        record = f"step {self._step}"
        rows: tuple[torch.Tensor, torch.Tensor | None] | None = None
        if not self._rows_checked:  # outside the guard: a wrong select, spatial or mask_fn
            rows = self._rows(captured)
            self._rows_checked = True
        else:
            with guard(record):
                rows = self._rows(captured)
        done = False
        if rows is not None:
            with guard(record):
                self._append(*rows)
                self._append_graphs(*rows)
                done = True
        if not done:  # the guard switched the check off
            self._collecting = False

    def _rows(self, captured: CapturedOutput) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The rows ``[R, D]`` of the embedding (the shared rule), and the mask of those kept.

        The first capture of a fit says, at info level, how a 3-D output read as tokens was
        read (:func:`~learnscope.embeddings.output_layout.tokens_note`).
        """
        output = self._output
        layout = output.layout(captured, self._batch)
        keep = output.mask(self._batch, layout)
        note = output.note_once(layout)
        if note is not None:
            log.info(note)
        return layout.rows.reshape(-1, layout.rows.shape[-1]), keep

    def _append(self, rows: torch.Tensor, keep: torch.Tensor | None) -> None:
        """Copy the kept rows, and the edges between them, into the step's buffer."""
        settings = self.settings
        if self._buffer is None:
            wanted = int(settings.embedding_rows_per_dim * rows.shape[-1])
            self._buffer = EmbeddingRowBuffer(max(2, min(wanted, settings.max_embedding_rows)))
        edges = None
        if settings.edge_index_fn is not None:
            with calling("edge_index_fn", "TrainingHelper", self._batch):
                edges = settings.edge_index_fn(self._batch)
            if not isinstance(edges, torch.Tensor) or edges.ndim != 2 or edges.shape[0] != 2:
                raise TypeError(
                    f"TrainingHelper: edge_index_fn got {describe(edges)} from a batch of type "
                    f"{type(self._batch).__name__}; it must return the edges between the rows, "
                    "an integer tensor [2, E] (source rows first)"
                )
        if keep is not None:
            rows = rows[keep]
            if edges is not None:
                edges = keep_edges(edges, keep)
        self._buffer.append(rows, edges)

    def _append_graphs(self, rows: torch.Tensor, keep: torch.Tensor | None) -> None:
        """Tell the buffer the graph of each row just appended, and each graph's id."""
        settings = self.settings
        if settings.edge_index_fn is None or self._buffer is None:
            return
        index, count = _graph_index(settings.graph_index_fn, self._batch, len(rows))
        ids = None
        if settings.ids_fn is not None:
            with calling("ids_fn", "TrainingHelper", self._batch):
                ids = _graph_ids(settings.ids_fn(self._batch))
            if count is None:  # from graph_index_fn: read on the host, on check steps only
                count = int(index.max()) + 1 if len(index) else 0
            if len(ids) != count:
                raise ValueError(
                    f"TrainingHelper: ids_fn gave {len(ids)} ids but the batch has {count} "
                    "graphs; it must give one id per graph, in graph order"
                )
        if keep is not None and index is not None:
            index = index.to(keep.device)[keep]
        self._buffer.append_graphs(index, ids)


def _graph_index(
    graph_index_fn: Callable[..., Any] | None, batch: Any, num_rows: int
) -> tuple[torch.Tensor | None, int | None]:
    """Each row's graph and the number of graphs (``None``: to be read from the index).

    From ``graph_index_fn``, else from a PyTorch Geometric batch whose ``batch.batch`` has one
    entry per row; otherwise the batch is one graph (index ``None``, one graph).
    """
    if graph_index_fn is not None:
        with calling("graph_index_fn", "TrainingHelper", batch):
            index = graph_index_fn(batch)
        is_index = isinstance(index, torch.Tensor) and index.ndim == 1
        if not is_index or index.is_floating_point() or len(index) != num_rows:
            given = f"{len(index)} values" if is_index else _describe(index)
            raise ValueError(
                f"TrainingHelper: graph_index_fn gave {given} but the embedding has "
                f"{num_rows} rows; it must give each row's graph within the batch (a 1-D "
                "integer tensor, 0 to the number of graphs minus one)"
            )
        return index, None
    graphs = pyg_graphs(batch)
    if graphs is not None and len(graphs[0]) == num_rows:
        return graphs
    return None, 1


def _graph_ids(ids: Any) -> Sequence[Any] | torch.Tensor:
    if isinstance(ids, torch.Tensor):
        return ids.detach().reshape(-1)
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        return [ids]  # one id for a batch that is one graph
    return ids


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def collapse_report(
    buffer: EmbeddingRowBuffer,
    module: str,
    step: int,
    thresholds: Mapping[str, float],
    last_step: int | None = None,
) -> CheckReport | None:
    """Judge the rows captured for a check, emptying the buffer: findings, scalars and scope.

    ``step`` is the check's step; ``last_step`` the step of the last rows, when the rows of the
    steps after the check were added. ``None`` with fewer than 2 finite rows (a non-finite
    embedding is reported by the gradient checks). The ranks are judged only with at least
    ``min_rows_per_dim`` (4) rows per dimension; without them the report's scope leaves
    ``embedding-collapse`` out, so an earlier collapse finding is not called resolved by a check
    that could not see it. See
    :func:`~learnscope.collapse.metrics.judge_collapse` for the thresholds.

    Example:
        >>> import torch
        >>> buffer = EmbeddingRowBuffer(64)
        >>> buffer.append(torch.ones(16, 8) + 1e-4 * torch.randn(16, 8))
        >>> found = collapse_report(buffer, "encoder", 0, {})
        >>> [f.code for f in found.findings], buffer.num_rows, sorted(found.scope.codes)
        (['embedding-collapse'], 0, [])
    """
    rows = buffer.rows()
    finite_rows = int(torch.isfinite(rows).all(dim=1).sum())
    if finite_rows < 2:
        buffer.reset()
        return None
    metrics = buffer.compute()
    graph_mad = buffer.per_graph_mad() if buffer.edge_index() is not None else None
    graph_ids = buffer.graph_ids() if graph_mad is not None else None
    num_rows, dim = finite_rows, rows.shape[1]
    buffer.reset()
    findings = collapse_findings(
        metrics,
        module,
        step,
        num_rows=num_rows,
        dim=dim,
        graph_mad=graph_mad,
        graph_ids=graph_ids,
        steps=(step, step if last_step is None else last_step),
        **thresholds,
    )
    scalars = {f"{HEALTH}/collapse/{module}/{key}": value for key, value in metrics.items()}
    factor = CollapseThresholds.from_mapping(thresholds).min_rows_per_dim
    codes = ["embedding-collapse"] if enough_rows(num_rows, dim, factor) else []
    if graph_mad is not None:
        codes.append("oversmoothing")
    return CheckReport(findings, scalars, scope=CheckScope.of(codes, [module]))


def too_few_rows(
    module: str,
    num_rows: int,
    dim: int,
    steps: tuple[int, int],
    thresholds: Mapping[str, float],
    most_rows: int,
) -> str | None:
    """What to say when the rows of a check could not judge the ranks; ``None`` when they could.

    Args:
        module: The embedding module.
        num_rows: The rows judged.
        dim: Their dimension.
        steps: The first and last step they came from.
        thresholds: The ``collapse_thresholds`` given (``min_rows_per_dim`` among them).
        most_rows: The most rows a check keeps (``embedding_rows_per_dim`` times the
            dimension, at most ``max_embedding_rows``).

    Example:
        >>> print(too_few_rows("model.representation", 300, 128, (50, 99), {}, 1024))
        learnscope: TrainingHelper could not judge the rank of 'model.representation' \
(collapse to a few directions goes unseen): RankMe and the effective rank need 4 rows per \
dimension, 512 rows of dimension 128, and the training batches of steps 50-99 gave 300. \
Larger batches, or a larger check_every_n_steps (the rows of the steps up to the next check \
count), give more rows
    """
    factor = CollapseThresholds.from_mapping(thresholds).min_rows_per_dim
    if enough_rows(num_rows, dim, factor):
        return None
    first, last = steps
    needed = math.ceil(factor * dim)
    where = f"step {first}" if first == last else f"steps {first}-{last}"
    said = (
        f"learnscope: TrainingHelper could not judge the rank of {module!r} (collapse to a few "
        f"directions goes unseen): RankMe and the effective rank need {factor:g} rows per "
        f"dimension, {needed} rows of dimension {dim}, and "
    )
    if most_rows < needed:
        return said + (
            f"a check keeps at most {most_rows} (embedding_rows_per_dim times the dimension, at "
            f"most max_embedding_rows): raise them to keep {needed} ({needed * dim * 4 / 2**20:.3g}"
            " MiB in float32)"
        )
    return said + (
        f"the training batches of {where} gave {num_rows}. Larger batches, or a larger "
        "check_every_n_steps (the rows of the steps up to the next check count), give more rows"
    )
