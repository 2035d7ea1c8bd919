"""The writer base: one method per kind of record, each doing nothing until a writer overrides it.

A dashboard that cannot show a kind of record simply does not override its method, and callers
hand every record to every writer without asking what the writer is.
"""

from __future__ import annotations

import errno
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from learnscope.records import (
    AutocorrelationSummary,
    EmbeddingSnapshot,
    Finding,
    Histogram,
    RenderedImage,
    RunEnd,
    RunStart,
)
from learnscope.storage import RunFolder


class Writer:
    """Base of every learnscope writer; each method does nothing unless overridden.

    Example:
        >>> class PrintingWriter(Writer):
        ...     def write_scalars(self, scalars, step):
        ...         print(step, dict(scalars))
        >>> PrintingWriter().write_scalars({"loss": 0.5}, step=3)
        3 {'loss': 0.5}
        >>> shows(PrintingWriter(), "write_embedding")
        False
    """

    on_training_thread = False
    """Whether this writer must be called on the training thread: it writes through an object
    the training loop also uses and that need not be thread-safe (a Lightning logger's
    ``log_metrics``). Other writers are called on learnscope's writer thread."""

    def write_embedding(self, snapshot: EmbeddingSnapshot) -> None:
        """Show one embedding snapshot."""

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Show scalar values at a trainer step."""

    def write_autocorrelation(self, summary: AutocorrelationSummary) -> None:
        """Show one autocorrelation analysis (charts over lag and over steps).

        A writer that cannot draw the charts gets the summary's scalars
        (:meth:`AutocorrelationSummary.to_scalars`) through :meth:`write_scalars`.
        """
        self.write_scalars(summary.to_scalars(), summary.step)

    def write_histogram(self, histogram: Histogram) -> None:
        """Show the distribution of some values at a step."""

    def write_image(self, image: RenderedImage) -> None:
        """Show a picture learnscope drew."""

    def write_findings(self, findings: Sequence[Finding], step: int) -> None:
        """Show every finding so far as a table (``findings`` is the full list, not new ones)."""

    def write_run_start(self, run: RunStart) -> None:
        """Note what is attached when a run starts, before any other record of it."""

    def write_run_end(self, end: RunEnd) -> None:
        """Note how the run ended (finished or interrupted), just before the writer is closed."""

    def flush(self) -> None:
        """Make everything written so far visible to the dashboard."""

    def close(self) -> None:
        """Flush and release what this writer opened itself."""
        self.flush()

    def describe(self) -> str:
        """A short human name for messages, such as ``TensorBoardWriter(runs/version_0)``."""
        return type(self).__name__

    def permanent_failure(self, error: Exception) -> str | None:
        """Why ``error`` will recur on every later record of this writer; ``None`` if it may not.

        Asked by the fan-out (:class:`~learnscope.plugins.pipeline.fanout.Writers`) when a
        record fails: an answer switches the whole writer off at once, with one message that
        gives it. The base knows a read-only file system; a writer that knows more (its run
        directory is gone, its run has finished) says so, and may ask the base.

        Example:
            >>> Writer().permanent_failure(OSError(errno.EROFS, "Read-only file system"))
            'the file system is read-only'
            >>> Writer().permanent_failure(OSError(errno.ENOSPC, "No space left")) is None
            True
        """
        return read_only(error)


class RecordSkipped(Exception):
    """A writer leaves this record unwritten on purpose, saying why (its message).

    Raised by a writer's ``write_...`` method instead of returning, so that the fan-out
    (:class:`~learnscope.plugins.pipeline.fanout.Writers`) counts the record as not written
    for that writer, with the reason, in the end-of-fit line: one way every record that does
    not reach a run directory is counted. Unlike a failure, it is not logged per record (the
    writer says once why it skips), never switches the writer off, and is not raised under
    ``LEARNSCOPE_STRICT=1``: it is what the writer was asked to do (keep the disk's reserve free).

    Example:
        >>> str(RecordSkipped("/runs has 3.0 MiB free, below the reserve of 64.0 MiB"))
        '/runs has 3.0 MiB free, below the reserve of 64.0 MiB'
    """


RECORD_KINDS = (
    "write_embedding",
    "write_scalars",
    "write_autocorrelation",
    "write_histogram",
    "write_image",
    "write_findings",
    "write_run_start",
    "write_run_end",
)
"""Every kind of record, by the :class:`Writer` method that shows it: the one table that the
fan-out (:class:`~learnscope.plugins.pipeline.fanout.Writers`) and the worker thread
(:class:`~learnscope.plugins.pipeline.background.BackgroundWriters`) forward, with
:func:`forwards_records`."""

_Class = TypeVar("_Class", bound=type)


def forwards_records(route: str) -> Callable[[_Class], _Class]:
    """Class decorator: each record method the class does not define calls ``self.<route>``.

    The method made for ``write_scalars`` calls ``self.<route>("write_scalars", scalars, step)``
    with its arguments by position (keywords are bound by :class:`Writer`'s signature), and has
    :class:`Writer`'s docstring and signature.

    Example:
        >>> @forwards_records("_send")
        ... class Logged(Writer):
        ...     def _send(self, method, *args):
        ...         print(method, args)
        >>> Logged().write_scalars({"a": 1.0}, step=2)
        write_scalars ({'a': 1.0}, 2)
    """

    def decorate(cls: _Class) -> _Class:
        for name in RECORD_KINDS:
            if name not in vars(cls):
                setattr(cls, name, _forwarding(name, route))
        return cls

    return decorate


def _forwarding(name: str, route: str) -> Callable[..., None]:
    shown = getattr(Writer, name)
    signature = inspect.signature(shown)

    @functools.wraps(shown)
    def forward(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs).args[1:] if kwargs else args
        getattr(self, route)(name, *bound)

    return forward


def shows(writer: Writer, method: str) -> bool:
    """Whether ``writer`` overrides ``method`` of :class:`Writer`, i.e. can show that record.

    Args:
        writer: Any writer.
        method: A method name of :class:`Writer`, such as ``"write_embedding"``.

    Returns:
        ``True`` when the writer's class implements the method itself.

    Example:
        >>> shows(Writer(), "write_scalars")
        False
    """
    return getattr(type(writer), method) is not getattr(Writer, method)


FINDING_COLUMNS = (
    "step",
    "severity",
    "code",
    "subject",
    "still holds",
    "seen",
    "message",
    "what to try",
)
"""The columns of a findings table in a dashboard (the TensorBoard Text tab, the W&B table)."""


def finding_table(findings: Sequence[Finding]) -> list[list[Any]]:
    """The rows of a findings table, one per :data:`FINDING_COLUMNS`: those still holding first.

    Each row says when the finding was seen and whether it still holds (``step`` is when it
    was last seen), and what to try.

    Example:
        >>> old = Finding("embedding-collapse", "encoder", "parallel", 0, resolved_step=50)
        >>> rows = finding_table([old, Finding("zero-gradient", "head", "zero", 100)])
        >>> [(row[2], row[4], row[5]) for row in rows]  # doctest: +NORMALIZE_WHITESPACE
        [('zero-gradient', True, 'found at step 100; still holds'),
         ('embedding-collapse', False, 'seen at step 0 only; healthy at every check since step 50')]
    """
    ordered = [f for f in findings if f.holds] + [f for f in findings if not f.holds]
    return [
        [f.step, f.severity, f.code, f.subject, f.holds, f.life, f.message, f.advice]
        for f in ordered
    ]


class LastTable:
    """The findings table a writer wrote last, so that the same one is not written again.

    Every callback hands the whole table at each check (see :class:`~.fanout.Writers`); a table
    equal to the last one written, at the same or an earlier step, says nothing new, while a
    later step's copy does (the table was still so). The one rule of every writer that keeps a
    findings table.

    Example:
        >>> last = LastTable()
        >>> last.is_new("| a |", 3)
        True
        >>> last.written("| a |", 3)
        >>> last.is_new("| a |", 3), last.is_new("| a |", 5), last.is_new("| b |", 3)
        (False, True, True)
    """

    def __init__(self) -> None:
        self._last: tuple[Any, int] | None = None

    def is_new(self, table: Any, step: int) -> bool:
        """Whether ``table`` at ``step`` says something the last one written did not."""
        last = self._last
        return last is None or last[0] != table or step > last[1]

    def written(self, table: Any, step: int) -> None:
        """``table`` was written at ``step``: it is the last one now."""
        self._last = (table, step)

    def forget(self) -> None:
        """A new run starts: its first table is written whatever it holds."""
        self._last = None


def folder_failure(folder: RunFolder, error: Exception) -> str | None:
    """Why ``error`` will recur on every later write into ``folder``; ``None`` if it may not.

    A local run directory that is gone, an object store that refuses the credentials, a
    read-only file system: what a writer into a :class:`~learnscope.storage.RunFolder` answers
    in :meth:`Writer.permanent_failure`.

    Example:
        >>> import tempfile
        >>> from learnscope.storage import open_run_folder
        >>> folder = open_run_folder(tempfile.mkdtemp() + "/removed")
        >>> folder_failure(folder, FileNotFoundError("x")).endswith("removed is gone")
        True
    """
    return folder.lasting_failure(error) or read_only(error)


def read_only(error: Exception) -> str | None:
    """``"the file system is read-only"`` for a read-only file system's error, else ``None``."""
    if isinstance(error, OSError) and error.errno == errno.EROFS:
        return "the file system is read-only"
    return None
