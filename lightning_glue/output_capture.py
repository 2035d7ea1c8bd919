"""How both callbacks capture a module's output and read it into rows: the steps, written once.

:class:`~learnscope.lightning_glue.EmbeddingProjector` (on the batches it snapshots) and
:class:`~learnscope.lightning_glue.TrainingHelper` (on check steps, for embedding collapse) read
the output of one module the same way, each with its own :class:`OutputCapture`:

1. :meth:`OutputCapture.attach` in ``setup``: join the module's one shared forward hook
   (:class:`~learnscope.lightning_glue.encoder_capture.EncoderCapture`), with the
   :class:`OutputReading` (which module, ``select``, ``spatial``, ``mask_fn``) and the module
   whose declared layout the output has (:func:`learnscope.embeddings.batch_axis.layout_module`);
2. :meth:`OutputCapture.batch_started` at the start of every batch, armed or not (a compiled
   model's graph stays the same at every step);
3. :meth:`OutputCapture.arm` on the batches captured: the first forward's output goes to the
   function given at ``attach``;
4. :meth:`OutputCapture.batch_ended` at the end of every batch: a compiled forward's output is
   handed out there, and the capture is disarmed;
5. :meth:`OutputCapture.detach` when the callback releases what it holds.

The function given the output reads it with :meth:`OutputCapture.layout` (the embedding
tensor by :mod:`learnscope.embeddings.module_output`'s rule, its rows by
:mod:`learnscope.embeddings.output_layout`'s), :meth:`OutputReading.mask` (the rows that are data)
and :meth:`OutputCapture.note_once` (how a 3-D output was read as tokens, once per ``attach``).
What a callback then does with the rows is its own: the projector keeps them with their
metadata for a snapshot (:class:`~learnscope.lightning_glue.row_reader.RowReader`), the helper
in a buffer for the collapse check
(:class:`~learnscope.lightning_glue.helper_checks.CollapseCapture`).

Example:
    >>> encoder = torch.nn.Linear(3, 4)
    >>> taken = []
    >>> capture = OutputCapture()
    >>> capture.attach(OutputReading("Demo", "encoder"), encoder, receive=taken.append)
    >>> capture.batch_started()
    >>> capture.arm()
    >>> _ = encoder(torch.ones(5, 3))
    >>> capture.batch_ended()
    >>> capture.layout(taken[0], batch=None).rows.shape
    torch.Size([5, 4])
    >>> capture.detach()
    >>> capture.attached, len(encoder._forward_hooks)
    (False, 0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from learnscope.embeddings.output_layout import (
    EmbeddingLayout,
    output_layout,
    row_mask,
    tokens_note,
)
from learnscope.lightning_glue.encoder_capture import CapturedOutput, EncoderCapture, Receiver

__all__ = ["OutputCapture", "OutputReading"]


@dataclass(frozen=True)
class OutputReading:
    """Which module's output a callback reads, and how it picks and reads its rows.

    Made from the callback's settings (never copied into the parts that read it).

    Attributes:
        who: The callback, for messages (``"EmbeddingProjector"``).
        module: The module's dotted name.
        select: Picks the embedding tensor from the output; ``None``: the output is one.
        spatial: For feature maps larger than 1 x 1: ``"mean"``, ``"max"`` or ``"pixels"``.
        mask_fn: Which rows are data (see :func:`learnscope.embeddings.output_layout.row_mask`), an
            import path already resolved.

    Example:
        >>> OutputReading("TrainingHelper", "encoder").owner
        "TrainingHelper: module 'encoder'"
    """

    who: str
    module: str
    select: Callable[..., Any] | None = None
    spatial: str | None = None
    mask_fn: str | Callable[..., Any] | None = None

    @property
    def owner(self) -> str:
        """Who reads, for messages: ``"<who>: module '<module>'"``."""
        return f"{self.who}: module {self.module!r}"

    def layout(
        self,
        captured: CapturedOutput,
        batch: Any,
        layout_module: torch.nn.Module | None = None,
        copy: bool = False,
    ) -> EmbeddingLayout:
        """The rows of the captured output (``select`` applied, detached), by the shared rule.

        The output (or what ``select`` picks) must be a tensor
        (:meth:`~learnscope.lightning_glue.encoder_capture.CapturedOutput.embedding`). Its batch
        axis is put first and its axes read
        (:func:`learnscope.embeddings.output_layout.output_layout`) by the declared layout of
        ``layout_module`` (else of the module that gave the output; read only without ``select``:
        sequence-first, channel-first) or by the sizes of ``batch``. With ``copy``, the rows are a
        copy (the model may change its output in place later).

        Raises:
            TypeError: ``select`` (or the output without it) is not a tensor.
            ValueError: The output's shape does not give rows with this ``spatial``, or its
                batch axis is not the batch's.

        Example:
            >>> reading = OutputReading("Demo", "encoder", select=lambda out: out[0])
            >>> reading.layout(CapturedOutput((torch.zeros(2, 5, 8), None)), batch=None).rows.shape
            torch.Size([2, 5, 8])
        """
        value = captured.embedding(self.select, self.who, self.module)
        module = layout_module if layout_module is not None else captured.module
        module = module if self.select is None else None
        layout = output_layout(value, batch, self.spatial, self.owner, module)
        return layout._replace(rows=layout.rows.clone()) if copy else layout

    def mask(self, batch: Any, layout: EmbeddingLayout) -> torch.Tensor | None:
        """The rows of ``layout`` that are data (``None``: all), by ``mask_fn``.

        Raises:
            ValueError: The mask does not fit the rows, or a key other than the default is
                not in the batch (:func:`learnscope.embeddings.output_layout.row_mask`).
        """
        return row_mask(self.mask_fn, batch, layout, self.owner)


class OutputCapture:
    """One callback's capture of one module's output, and its reading (see the module's steps).

    Example:
        >>> OutputCapture().attached
        False
    """

    def __init__(self) -> None:
        self.reading: OutputReading | None = None  # how the attached module is read
        # The module whose declared layout the output has (batch_axis.layout_module), set at
        # attach; None: the module that gave it.
        self.layout_module: torch.nn.Module | None = None
        self._capture: EncoderCapture | None = None  # the module's shared forward hook
        self._noted = False  # the reading of an output was said (note_once)

    @property
    def attached(self) -> bool:
        """Whether a module's output is captured (between :meth:`attach` and :meth:`detach`)."""
        return self._capture is not None

    def attach(
        self,
        reading: OutputReading,
        module: torch.nn.Module,
        layout_module: torch.nn.Module | None = None,
        *,
        receive: Receiver,
    ) -> None:
        """Give the output of ``module`` to ``receive`` on armed batches, read by ``reading``.

        What was attached before is detached; the next output's reading is said again
        (:meth:`note_once`).
        """
        self.detach()
        self.reading, self.layout_module, self._noted = reading, layout_module, False
        self._capture = EncoderCapture.of(module).join(self, receive)

    def detach(self) -> None:
        """Leave the module's capture; no reference to the model is kept."""
        if self._capture is not None:
            self._capture.leave(self)
        self._capture = self.layout_module = None

    def batch_started(self) -> None:
        """Any batch starts, armed or not (see ``EncoderCapture.batch_started``)."""
        if self._capture is not None:
            self._capture.batch_started()

    def arm(self) -> None:
        """Give the output of the module's next forward (in this batch) to ``receive``."""
        if self._capture is not None:
            self._capture.arm(self)

    def batch_ended(self) -> None:
        """The batch ended: a compiled forward's output reaches ``receive`` here; disarm."""
        if self._capture is not None:
            self._capture.batch_ended()
            self._capture.disarm(self)

    def layout(self, captured: CapturedOutput, batch: Any, copy: bool = False) -> EmbeddingLayout:
        """The rows of the captured output, by the attached reading and module's layout.

        See :meth:`OutputReading.layout`.

        Raises:
            TypeError: ``select`` (or the output without it) is not a tensor.
            ValueError: The output's shape does not give rows with this ``spatial``, or its
                batch axis is not the batch's.
        """
        return self._reading().layout(captured, batch, self.layout_module, copy)

    def mask(self, batch: Any, layout: EmbeddingLayout) -> torch.Tensor | None:
        """The rows of ``layout`` that are data, by the attached reading's ``mask_fn``."""
        return self._reading().mask(batch, layout)

    def note_once(self, layout: EmbeddingLayout) -> str | None:
        """How the first output since :meth:`attach` was read, when it was read as tokens.

        The note (:func:`learnscope.embeddings.output_layout.tokens_note`) is given once: ``None``
        for every later layout, and for a first one that is not tokens.
        """
        if self._noted:
            return None
        self._noted = True
        return tokens_note(layout, self._reading().owner)

    def _reading(self) -> OutputReading:
        if self.reading is None:
            raise RuntimeError("OutputCapture: attach() a module before reading its output")
        return self.reading
